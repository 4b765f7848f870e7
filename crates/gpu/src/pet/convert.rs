//! Frames to singles: table lookups, energy window, order-preserving compaction.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::{tile_exclusive_prefix, tile_smem, BlockScan, TileStatus};

/// Reads frame `idx` with one 16-byte load.
///
/// # Safety
/// `frames` valid for `idx + 1` frames, 16-byte aligned, read-only during the kernel.
#[inline(always)]
pub(crate) unsafe fn load_frame(frames: *const u32, idx: u64) -> DataFrameV2 {
    // SAFETY: caller contract.
    let w = unsafe { i::ldg_v4_u32(frames.add(idx as usize * 4)) };
    bytemuck::cast(w)
}

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
/// 16-byte aligned; `params` one `ScannerParams`; `position` and `correction` hold
/// `params.position_entries()` / `energy_entries()` entries; `divs` those of `params`; `out` valid for `n` singles;
/// `stats` `STAT_WORDS` words, zero except `STAT_FIRST_BAD = u32::MAX`; look-back arrays as
/// in `compact_select_range_u32`.
#[allow(unused_assignments)] // see `base` below
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_convert_frames(p: PetConvertFramesParams) {
    let divs = p.divs;
    let (frames, n, params, position, correction, out, stats, flags, aggregates, inclusive) = (
        p.frames.ptr(),
        p.n,
        p.params.ptr(),
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
    };
    // SAFETY: one ScannerParams.
    let p = unsafe { params.read() };
    let (scan_storage, prefix_slot) = tile_smem::<u32>();
    let tile = i::block_idx_x();
    let lane = i::lane_id();
    let warp_start = tile as u64 * CONVERT_TILE + i::warp_id() as u64 * 32 * N as u64;
    let warp_local = i::warp_id() * 32 * N as u32;
    let mut masks = [0u32; N];
    let mut warp_total = 0u32;
    let (mut rejected, mut clamped, mut bad) = (0u32, 0u32, 0u32);
    // Each frame's reads depend on each other (frame, position table, correction table):
    // four frames at a time issue their four frame loads, then their four position reads,
    // then their four correction reads, so that four of each are in flight per thread. The
    // singles wait in shared memory (not registers) until their offsets are known.
    // (Written as a macro over the literal first item, 0 and 4: every array index a
    // constant, so that nothing goes to local memory.)
    macro_rules! four_frames {
        ($first:literal) => {{
            let first: u32 = $first;
            let mut f = [[0u32; 4]; 4];
            let mut live = 0u32;
            unroll4!(q, {
                let idx = warp_start + ((first + q as u32) as u64) * 32 + lane as u64;
                if idx < n {
                    // SAFETY: idx < n.
                    f[q] = unsafe { i::ldg_v4_u32(frames.add(idx as usize * 4)) };
                    live |= 1 << q;
                }
            });
            let mut du_index = [0u64; 4];
            let mut origin = [0u8; 4];
            let mut addressed = 0u32;
            unroll4!(q, {
                if live & 1 << q != 0 {
                    let fr: DataFrameV2 = bytemuck::cast(f[q]);
                    if let Some((du, at)) = frame_position_index(&fr, &p) {
                        du_index[q] = du;
                        // SAFETY: frame_position_index gives indices inside the table.
                        origin[q] = unsafe { position.add(at as usize).read() };
                        addressed |= 1 << q;
                    }
                }
            });
            let mut local = [0u32; 4];
            let mut factor = [0f32; 4];
            let mut clamp = 0u32;
            unroll4!(q, {
                if addressed & 1 << q != 0 {
                    let fr: DataFrameV2 = bytemuck::cast(f[q]);
                    match frame_energy_index(&fr, &p, &divs, du_index[q], origin[q]) {
                        Some((l, at, c)) => {
                            local[q] = l;
                            clamp |= (c as u32) << q;
                            // SAFETY: frame_energy_index gives indices inside the table.
                            factor[q] = unsafe { correction.add(at as usize).read() };
                        }
                        None => addressed &= !(1 << q),
                    }
                }
            });
            unroll4!(q, {
                let j = first + q as u32;
                let mut keep = false;
                if addressed & 1 << q != 0 {
                    let fr: DataFrameV2 = bytemuck::cast(f[q]);
                    let (s, st) =
                        frame_single(&fr, &p, &divs, local[q], factor[q], clamp & 1 << q != 0);
                    keep = st & CONVERT_ACCEPTED != 0;
                    if keep {
                        // SAFETY: the slot lies inside `convert_smem_bytes()`; only this thread
                        // uses it.
                        unsafe {
                            i::st_shared_v4_u32(
                                staged_single(warp_local + j * 32 + lane),
                                bytemuck::cast(s),
                            )
                        };
                    } else {
                        rejected += 1;
                    }
                    if st & CONVERT_CLAMPED != 0 {
                        clamped += 1;
                    }
                } else if live & 1 << q != 0 {
                    bad += 1;
                    let idx = warp_start + (j as u64) * 32 + lane as u64;
                    // SAFETY: stats holds STAT_WORDS words.
                    unsafe { i::atomic_min_u32(stats.add(STAT_FIRST_BAD), idx as u32) };
                }
                let m = i::ballot(keep);
                masks[j as usize] = m;
                warp_total += i::popc(m);
            });
        }};
    }
    four_frames!(0);
    four_frames!(4);
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
            let s =
                unsafe { i::ld_shared_v4_u32(staged_single(warp_local + j as u32 * 32 + lane)) };
            // SAFETY: pos < number accepted <= n.
            unsafe { (out.add(pos as usize) as *mut [u32; 4]).write(s) };
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
