//! Frames to singles: table lookups, energy window, order-preserving compaction.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::{tile_exclusive_prefix, tile_smem, BlockScan, TileStatus};

/// Shared-state-space address of staged single `slot` (after the scan storage).
#[inline(always)]
fn staged_single(slot: u32) -> u32 {
    i::shared_base() + crate::scan::device_scan_smem_bytes(4) as u32 + 16 * slot
}

/// Raw frames to accepted singles, in input order, plus statistics.
///
/// # Safety
/// `blockDim.x == CONVERT_THREADS`, `gridDim.x == ceil(n / CONVERT_TILE) >= 1`,
/// `convert_smem_bytes()` of shared memory; `n < 2^32`; `frames` valid for `n` frames,
/// 16-byte aligned; `consts` those of a scanner that passed the host's parameter check,
/// whose `position` and `correction` tables hold `position_entries` / `energy_entries`
/// entries (at least one each); `out` valid for `n` singles; `stats` `STAT_WORDS` words,
/// zero except `STAT_FIRST_BAD = u32::MAX`; look-back arrays as in
/// `compact_select_range_u32`.
#[allow(unused_assignments)] // see `base` below
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_convert_frames(p: PetConvertFramesParams) {
    let c = p.consts;
    let (frames, n, position, correction, out, stats, flags, aggregates, inclusive) = (
        p.frames.ptr(),
        p.n,
        p.position.ptr(),
        p.correction.ptr(),
        p.out.ptr_mut(),
        p.stats.ptr_mut(),
        p.flags.ptr_mut(),
        p.aggregates.ptr_mut(),
        p.inclusive.ptr_mut(),
    );
    const N: usize = CONVERT_ITEMS as usize;
    const _: () = assert!(N == 8, "unroll8! covers 8 items");
    let status = TileStatus {
        flags,
        aggregates,
        inclusive,
        sleep_ns: crate::scan::LOOKBACK_SLEEP_NS,
    };
    let (scan_storage, prefix_slot) = tile_smem::<u32>();
    let tile = i::block_idx_x();
    let lane = i::lane_id();
    let warp_start = tile as u64 * CONVERT_TILE + i::warp_id() as u64 * 32 * N as u64;
    let warp_local = i::warp_id() * 32 * N as u32;
    let mut masks = [0u32; N];
    let mut warp_total = 0u32;
    let (mut rejected, mut clamped, mut bad) = (0u32, 0u32, 0u32);
    // Each frame's reads depend on each other (frame, position table, correction table).
    // Phase 1 issues all eight frame loads of the thread at once (streaming, so that the
    // frames do not push the energy table out of L2) and parks the frames in shared memory,
    // so that a whole tile is in flight (`stage_streaming_v4_u32`: through 32 registers on
    // sm_70, by `cp.async` without them on sm_80); then
    // eight position reads at once, then eight correction reads, each step re-reading the
    // frame's words from shared memory (the 32-bit, branch-free `words_*` functions: a frame
    // that is not ok reads entry 0 of a table instead of branching around the read). Each
    // accepted single overwrites its own frame's slot and waits there for its offset.
    let slot = |j: usize| staged_single(warp_local + j as u32 * 32 + lane);
    let mut live = 0u32;
    {
        let mut src = [core::ptr::null::<u32>(); N];
        let mut dst = [0u32; N];
        unroll8!(j, {
            let idx = warp_start + (j as u64) * 32 + lane as u64;
            dst[j] = slot(j);
            if idx < n {
                // In bounds: idx < n.
                src[j] = frames.wrapping_add(idx as usize * 4);
                live |= 1 << j;
            }
        });
        // SAFETY: each non-null source is a whole frame (idx < n, 16-byte aligned, read-only
        // during the kernel); the slots lie inside `convert_smem_bytes()` and only this
        // thread uses them.
        unsafe { i::stage_streaming_v4_u32(dst, src) };
    }
    let mut origin = [0u32; N];
    let mut ok = 0u32;
    unroll8!(j, {
        // SAFETY: this thread's slot, written in phase 1.
        let w = unsafe { i::ld_shared_v4_u32(slot(j)) };
        let (at, _, good) = words_position(&w, &c);
        let good = good & (live & 1 << j != 0);
        ok |= (good as u32) << j;
        let at = if good { at } else { 0 };
        // SAFETY: at < position_entries (checked in `words_position`) or 0; the table is
        // read-only during the kernel.
        origin[j] = unsafe { i::ldg_u8(position.add(at as usize)) };
    });
    // The local crystal (< 256) and the clamp bit, packed where the origin was.
    let mut factor = [0f32; N];
    unroll8!(j, {
        // SAFETY: this thread's slot, written in phase 1.
        let w = unsafe { i::ld_shared_v4_u32(slot(j)) };
        // The DU index again (a few integer operations) rather than eight more registers
        // held across the position reads.
        let (_, du_index, _) = words_position(&w, &c);
        let (at, local, good, cl) = words_energy(&w, &c, du_index, origin[j], ok & 1 << j != 0);
        origin[j] = local & 0xff | (cl as u32) << 8;
        if !good {
            ok &= !(1 << j);
        }
        let at = if good { at } else { 0 };
        // SAFETY: at < energy_entries (checked in `words_energy`) or 0; the table is
        // read-only during the kernel.
        factor[j] = unsafe { i::ldg_f32(correction.add(at as usize)) };
    });
    unroll8!(j, {
        // SAFETY: this thread's slot, written in phase 1.
        let w = unsafe { i::ld_shared_v4_u32(slot(j)) };
        let good = ok & 1 << j != 0;
        let (s, st) = words_single(&w, &c, origin[j] & 0xff, factor[j], origin[j] & 0x100 != 0);
        let keep = good & (st & CONVERT_ACCEPTED != 0);
        if keep {
            // SAFETY: this thread's slot (its frame is no longer needed).
            unsafe { i::st_shared_v4_u32(slot(j), bytemuck::cast(s)) };
        }
        rejected += (good & !keep) as u32;
        clamped += (good & (st & CONVERT_CLAMPED != 0)) as u32;
        if live & !ok & 1 << j != 0 {
            bad += 1;
            let idx = warp_start + (j as u64) * 32 + lane as u64;
            // SAFETY: stats holds STAT_WORDS words.
            unsafe { i::atomic_min_u32(stats.add(STAT_FIRST_BAD), idx as u32) };
        }
        let m = i::ballot(keep);
        masks[j] = m;
        warp_total += i::popc(m);
    });
    // Statistics: one atomic per warp and counter.
    let r = crate::scan::device::warp_reduce_sum(rejected);
    let c = crate::scan::device::warp_reduce_sum(clamped);
    let b = crate::scan::device::warp_reduce_sum(bad);
    if lane == 0 {
        // SAFETY: stats holds STAT_WORDS words.
        unsafe {
            if r != 0 {
                i::atomic_add_u32(stats.add(STAT_REJECTED_ENERGY), r);
            }
            if c != 0 {
                i::atomic_add_u32(stats.add(STAT_CLAMPED), c);
            }
            if b != 0 {
                i::atomic_add_u32(stats.add(STAT_BAD_ADDRESS), b);
            }
        }
    }
    // SAFETY: the storage is ours.
    let bs = unsafe { BlockScan::new(scan_storage) };
    let (warp_prefix, tile_total) = bs.exclusive_sum_warps(warp_total);
    // SAFETY: one look-back entry per tile.
    let tile_prefix = unsafe { tile_exclusive_prefix(&status, tile, tile_total, prefix_slot) };
    // The unrolled loop below advances `base` after each of the 8 masks; the advance after
    // the last one is never read (hence `unused_assignments` allowed on this kernel), which
    // keeps the 8 copies alike.
    let mut base = tile_prefix.wrapping_add(warp_prefix);
    let below = i::lanemask_lt();
    unroll8!(j, {
        let m = masks[j];
        if m & (1 << lane) != 0 {
            let pos = base + i::popc(m & below);
            // SAFETY: this thread staged the slot (the scan's barriers lie between).
            let s = unsafe { i::ld_shared_v4_u32(slot(j)) };
            // SAFETY: pos < number accepted <= n.
            unsafe { i::st_cs_v4_u32(out.add(pos as usize) as *mut u32, s) };
        }
        base += i::popc(m);
    });
    if tile == i::grid_dim_x() - 1 && i::thread_idx_x() == 0 {
        // SAFETY: stats holds STAT_WORDS words.
        unsafe {
            stats
                .add(STAT_ACCEPTED)
                .write(tile_prefix.wrapping_add(tile_total))
        };
    }
}
