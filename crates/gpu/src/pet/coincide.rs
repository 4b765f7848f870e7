//! Coincidence windows in one pass: order check, openers, window ends, pair counts, their
//! scan across tiles (decoupled look-back) and the pairs.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::{tile_exclusive_prefix, tile_smem, TileStatus};

/// Time of single `k`.
///
/// # Safety
/// `k` inside the array.
#[inline(always)]
pub(crate) unsafe fn time_at(s: *const Single, k: u64) -> f64 {
    // SAFETY: caller contract.
    unsafe { (*s.add(k as usize)).time }
}

/// The window of opener `o` ending at `e` (delayed: members from `s`): its length and the
/// index of its first member after the opener. Prompt: singles `o .. e`; delayed: `o`,
/// then `s .. e`.
#[inline(always)]
fn window_shape(o: u64, e: u64, s: u64, delayed: bool) -> (u32, u64) {
    if delayed {
        let members = if e > s { e - s } else { 0 };
        (1 + members as u32, s)
    } else {
        ((e - o) as u32, o + 1)
    }
}

// ---------------------------------------------------------------------------------------
// Single pass: windows, pair counts, their scan (decoupled look-back) and the pairs, in one
// kernel over tiles of COINCIDE_TILE singles.
// ---------------------------------------------------------------------------------------

/// The window shape of opener `o` ending at `e` (delayed members from `s`), and whether the
/// policy may take it (a window over [`MAX_MULTIPLE`] is refused unless `KillAll`).
#[inline(always)]
fn window_allowed(len: u32, pol: Policy) -> bool {
    len <= MAX_MULTIPLE || pol == Policy::KillAll
}

/// Walks the complete windows that single `idx` (time `t`, predecessor's time `prev`)
/// opens, in order, calling `visit(o, e, s)` for each (opener, end, delayed start); prompt:
/// the chain of non-sliding windows of the segment `idx` starts (nothing if it does not
/// start one), delayed: its own window. Returns the first incomplete opener met (its
/// windows and every later one are left for a later watermark), or `u64::MAX`.
///
/// # Safety
/// `idx < n`, `singles` valid for `n` singles.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn walk_windows(
    p: &PetCoincideTilesParams,
    idx: u64,
    t: f64,
    prev: f64,
    time: impl Fn(u64) -> f64,
    mut visit: impl FnMut(u64, u64, u64),
) -> u64 {
    let (n, reach) = (p.n, p.reach);
    // The end of the window opened at `o` (time `to`): first j > o past the reach.
    let end = |o: u64, to: f64| {
        let rest = (n - o - 1) as u32;
        // SAFETY: o + 1 + q < n.
        o + 1 + gallop_rank(rest, reach, false, |q| time(o + 1 + q as u64) - to) as u64
    };
    if p.delayed != 0 {
        if !window_complete(t, p.watermark, reach) {
            return idx;
        }
        let rest = (n - idx - 1) as u32;
        // SAFETY: idx + 1 + q < n.
        let s = idx + 1 + gallop_rank(rest, p.delay, true, |q| time(idx + 1 + q as u64) - t) as u64;
        let e = end(idx, t);
        visit(idx, e, s.min(e));
        return u64::MAX;
    }
    if !(idx == 0 || t - prev > reach) {
        return u64::MAX;
    }
    let (mut o, mut to) = (idx, t);
    loop {
        if !window_complete(to, p.watermark, reach) {
            return o;
        }
        let e = end(o, to);
        visit(o, e, e);
        if e >= n {
            return u64::MAX;
        }
        let (te, tp) = (time(e), time(e - 1));
        if te - tp > reach {
            return u64::MAX; // a segment start: its own thread walks on
        }
        o = e;
        to = te;
    }
}

/// The time of the single before `idx` (`-inf` before the first).
///
/// # Safety
/// `idx - 1` inside the array when `idx > 0`.
#[inline(always)]
unsafe fn time_before(s: *const Single, idx: u64) -> f64 {
    if idx > 0 {
        // SAFETY: caller contract.
        unsafe { time_at(s, idx - 1) }
    } else {
        f64::NEG_INFINITY
    }
}

/// Walks the windows that single `idx` opens ([`walk_windows`]) and passes each pair's two
/// members (single indices, in the oracle's order) to `emit`. Returns `(pairs, first
/// incomplete opener or u64::MAX, largest refused window or 0)`. The tile kernel calls it
/// to count (an `emit` that does nothing) and again to write, for the few singles whose
/// window is not decided from the neighbours' times alone.
///
/// # Safety
/// `idx < n`, `singles` valid for `n` singles.
#[inline(always)]
unsafe fn opener_pairs(
    p: &PetCoincideTilesParams,
    idx: u64,
    time: impl Fn(u64) -> f64 + Copy,
    mut emit: impl FnMut(u64, u64),
) -> (u32, u64, u32) {
    let (singles, pol, delayed) = (p.singles.ptr(), Policy::from_u32(p.policy), p.delayed != 0);
    let (t, prev) = (
        time(idx),
        if idx > 0 {
            time(idx - 1)
        } else {
            f64::NEG_INFINITY
        },
    );
    let (mut count, mut oversize) = (0u32, 0u32);
    let visit = |o: u64, e: u64, s: u64| {
        let (len, base) = window_shape(o, e, s, delayed);
        if !window_allowed(len, pol) {
            oversize = oversize.max(len);
            return;
        }
        let member = |k: u32| if k == 0 { o } else { base + k as u64 - 1 };
        count += window_pairs(
            len,
            delayed,
            pol,
            // SAFETY: members are o or base + k - 1 < e <= n.
            |k| unsafe { singles.add(member(k) as usize).read() },
            |a, b| emit(member(a), member(b)),
        );
    };
    // SAFETY: caller contract.
    let resume = unsafe { walk_windows(p, idx, t, prev, time, visit) };
    (count, resume, oversize)
}

/// Shared-state-space address of a walking item's slot (`slot` = its index in the tile):
/// its pair count, then its first pair's offset. After the tile-scan storage.
#[inline(always)]
fn walk_slot(slot: u32) -> u32 {
    i::shared_base() + crate::scan::device_scan_smem_bytes(4) as u32 + 4 * slot
}

/// Single `k` as four words (one 16-byte load).
///
/// # Safety
/// `k` inside the array (16-byte aligned), read-only during the kernel.
#[inline(always)]
unsafe fn load_single(s: *const Single, k: u64) -> [u32; 4] {
    // SAFETY: caller contract.
    unsafe { i::ldg_v4_u32((s as *const u32).add(4 * k as usize)) }
}

/// Writes pair `at` from its two singles' words (two 16-byte stores; no `Coincidence` built
/// in local memory).
///
/// # Safety
/// `at < p.capacity`.
#[inline(always)]
unsafe fn store_pair(p: &PetCoincideTilesParams, at: u64, a: [u32; 4], b: [u32; 4]) {
    let d = p.pairs.ptr_mut() as *mut u32;
    // SAFETY: pair `at` lies inside the buffer (32 bytes, 16-byte aligned).
    unsafe {
        i::st_v4_u32(d.add(8 * at as usize), a);
        i::st_v4_u32(d.add(8 * at as usize + 4), b);
    }
}

/// Time of single `k` through the read-only data path.
///
/// # Safety
/// `k` inside the array, read-only during the kernel.
#[inline(always)]
unsafe fn time_ldg(s: *const Single, k: u64) -> f64 {
    // SAFETY: caller contract; the time is the single's second 8-byte word (after the
    // crystal and the energy), 8-byte aligned.
    f64::from_bits(unsafe { i::ldg_u64((s.add(k as usize) as *const u64).add(1)) })
}

/// Shared-state-space address of time slot `slot` of the tile (see `coincide_tiles`).
#[inline(always)]
fn time_slot(slot: u32) -> u32 {
    i::shared_base() + coincide_times_offset() as u32 + 8 * slot
}

/// The coincidences of `n` sorted singles in one pass. Each tile of [`COINCIDE_TILE`]
/// singles (8 per thread, warp-striped): every single that opens windows (prompt: a segment
/// start, which walks its segment's chain; delayed: every single) counts their pairs; the
/// counts are scanned in single order (warp scans, block scan, decoupled look-back across
/// tiles) and each opener writes its pairs at its offset, so the pairs come out in time
/// order as the oracle emits them. Records in `status`: the first index out of order
/// (`CO_FIRST_UNSORTED`, atomic min), the first incomplete opener (`CO_RESUME`, atomic
/// min), the largest refused window (`CO_OVERSIZE`), the total at `CO_TOTAL_LO` (the last
/// tile) and, for `TakeAllGoods`, the 64-bit sum of the counts at `CO_SUM64_LO` (atomics:
/// an offset past `u32` shows there). A pair at or past `capacity` is not written.
///
/// # Safety
/// `blockDim.x == COINCIDE_THREADS`, `gridDim.x == ceil(n / COINCIDE_TILE) >= 1`,
/// `coincide_smem_bytes()` of shared memory; `n < 2^32`; `singles` valid for `n`; `pairs`
/// for `capacity`; `status` `CO_WORDS` words initialised as the host does; look-back
/// arrays for `gridDim.x` tiles, flags zeroed.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_coincide_tiles(p: PetCoincideTilesParams) {
    // SAFETY: caller contract.
    unsafe { coincide_tiles(p) }
}

/// [`pet_coincide_tiles`] for prompt windows under `KillAll` (the seed's rule), whatever
/// `p.policy` and `p.delayed` say: the policy code of the other rules compiled out, so that
/// the kernel needs fewer registers.
///
/// # Safety
/// As [`pet_coincide_tiles`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_coincide_tiles_killall(p: PetCoincideTilesParams) {
    let mut q = p;
    q.policy = Policy::KillAll as u32;
    q.delayed = 0;
    // SAFETY: caller contract.
    unsafe { coincide_tiles(q) }
}

/// The body of [`pet_coincide_tiles`].
///
/// # Safety
/// As [`pet_coincide_tiles`].
#[inline(always)]
unsafe fn coincide_tiles(p: PetCoincideTilesParams) {
    const N: usize = COINCIDE_ITEMS as usize;
    const _: () = assert!(N == 8, "unroll8! covers 8 items");
    let (singles, n, status) = (p.singles.ptr(), p.n, p.status.ptr_mut());
    let pol = Policy::from_u32(p.policy);
    let lb = TileStatus {
        flags: p.flags.ptr_mut(),
        aggregates: p.aggregates.ptr_mut(),
        inclusive: p.inclusive.ptr_mut(),
        sleep_ns: crate::scan::LOOKBACK_SLEEP_NS,
    };
    let (scan_storage, prefix_slot) = tile_smem::<u32>();
    let tile = i::block_idx_x();
    let lane = i::lane_id();
    let tile_start = tile as u64 * COINCIDE_TILE;
    let warp_start = tile_start + i::warp_id() as u64 * 32 * N as u64;
    let warp_local = (warp_start - tile_start) as u32;
    // The tile's times into shared memory (8 loads in flight per thread; past the end +inf,
    // so that the last single has no neighbour within reach): slot q + 1 holds the tile's
    // single q, slot 0 the single before the tile (-inf before single 0), slots TILE + 1 and
    // TILE + 2 the two after it. Every single's neighbours are then read from there.
    unroll8!(j, {
        let q = warp_local + j as u32 * 32 + lane;
        let idx = tile_start + q as u64;
        let t = if idx < n {
            // SAFETY: idx < n; read-only during the kernel.
            unsafe { time_ldg(singles, idx) }
        } else {
            f64::INFINITY
        };
        // SAFETY: slot q + 1 < TILE + 3 lies inside `coincide_smem_bytes()`.
        unsafe { i::st_shared_u64(time_slot(q + 1), t.to_bits()) };
    });
    let tid = i::thread_idx_x();
    if tid < 3 {
        let (slot, t) = if tid == 0 {
            // SAFETY: tile_start - 1 < n when tile_start > 0.
            (0, unsafe { time_before(singles, tile_start) })
        } else {
            let k = tile_start + COINCIDE_TILE + tid as u64 - 1;
            // SAFETY: k < n.
            let t = if k < n {
                unsafe { time_ldg(singles, k) }
            } else {
                f64::INFINITY
            };
            (COINCIDE_TILE as u32 + tid, t)
        };
        // SAFETY: slot < TILE + 3.
        unsafe { i::st_shared_u64(time_slot(slot), t.to_bits()) };
    }
    i::sync_threads();
    // The time in slot `s`.
    let slot_time = |s: u32| {
        // SAFETY: every slot below TILE + 3 was written before the barrier.
        f64::from_bits(unsafe { i::ld_shared_u64(time_slot(s)) })
    };
    // The time of any single `k < n` for the walks: from shared memory inside the tile and
    // its three neighbour slots, else from global memory.
    let time = |k: u64| {
        let s = k.wrapping_sub(tile_start).wrapping_add(1);
        if s < COINCIDE_TILE + 3 {
            slot_time(s as u32)
        } else {
            // SAFETY: the walks read only singles below n.
            unsafe { time_at(singles, k) }
        }
    };
    let (reach, watermark, delayed) = (p.reach, p.watermark, p.delayed != 0);
    let mut counts = [0u32; N];
    let (mut unsorted, mut resume, mut oversize) = (u64::MAX, u64::MAX, 0u32);
    let mut sum64 = 0u64;
    // Items whose opener window has members beside the opener (bit j).
    let mut walk = 0u32;
    // Prompt openers whose window is exactly the opener and the next single, after which the
    // segment ends (bit j): the usual true coincidence, paired without a walk.
    let mut two = 0u32;
    unroll8!(j, {
        let q = warp_local + j as u32 * 32 + lane;
        let idx = tile_start + q as u64;
        if idx < n {
            let (prev, t, next) = (slot_time(q), slot_time(q + 1), slot_time(q + 2));
            if (t.is_nan() || !(t >= prev)) && unsorted == u64::MAX {
                unsorted = idx;
            }
            if delayed || idx == 0 || t - prev > reach {
                if next - t > reach {
                    // A window of the opener alone: no pair; the prompt chain ends (the
                    // next single starts a segment).
                    if !window_complete(t, watermark, reach) {
                        resume = resume.min(idx);
                    }
                } else {
                    let next2 = slot_time(q + 3);
                    if !delayed && next2 - t > reach && next2 - next > reach {
                        // Window {idx, idx + 1}; single idx + 2 starts a new segment.
                        if window_complete(t, watermark, reach) {
                            two |= 1 << j;
                        } else {
                            resume = resume.min(idx);
                        }
                    } else {
                        walk |= 1 << j;
                    }
                }
            }
        }
    });
    // Two-single windows: a pair when the crystals differ (every policy); the crystals of all
    // items loaded before any is compared.
    let mut crystals = [(0u32, 0u32); N];
    unroll8!(j, {
        if two & 1 << j != 0 {
            let idx = warp_start + (j as u64) * 32 + lane as u64;
            // SAFETY: idx + 1 < n (the window holds it).
            crystals[j] = unsafe {
                (
                    (*singles.add(idx as usize)).crystal,
                    (*singles.add(idx as usize + 1)).crystal,
                )
            };
        }
    });
    unroll8!(j, {
        if two & 1 << j != 0 && crystals[j].0 != crystals[j].1 {
            counts[j] = 1;
            sum64 += 1;
        }
    });
    // The openers of other windows with members walk them (times from the tile's shared
    // memory, global memory past it).
    // One rolled loop over the marked items (one copy of the walk in the code, and lanes
    // walking different items walk together); each count goes to the item's slot in shared
    // memory.
    let mut w = walk;
    while w != 0 {
        let j = i::lowest_bit(w);
        w &= w - 1;
        let idx = warp_start + (j as u64) * 32 + lane as u64;
        // SAFETY: idx < n (only such items are marked).
        let (c, r, o) = unsafe { opener_pairs(&p, idx, time, |_, _| {}) };
        // SAFETY: the slot lies inside `coincide_smem_bytes()`; only this thread uses it.
        unsafe { i::st_shared_u32(walk_slot(warp_local + j * 32 + lane), c) };
        sum64 += c as u64;
        resume = resume.min(r);
        oversize = oversize.max(o);
    }
    unroll8!(j, {
        if walk & 1 << j != 0 {
            // SAFETY: written by this thread above.
            counts[j] = unsafe { i::ld_shared_u32(walk_slot(warp_local + j as u32 * 32 + lane)) };
        }
    });
    // SAFETY: status holds CO_WORDS words (atomics only where something was found).
    unsafe {
        if unsorted != u64::MAX {
            i::atomic_min_u32(status.add(CO_FIRST_UNSORTED), unsorted as u32);
        }
        if resume != u64::MAX {
            i::atomic_min_u32(status.add(CO_RESUME), resume as u32);
        }
        if oversize != 0 {
            i::atomic_max_u32(status.add(CO_OVERSIZE), oversize);
        }
    }
    if !policy_bounded(pol) {
        let s = crate::scan::device::warp_reduce_sum(sum64);
        if lane == 0 && s != 0 {
            // SAFETY: the u64 at CO_SUM64_LO is 8-byte aligned (word 6).
            unsafe { i::atomic_add_u64(status.add(CO_SUM64_LO) as *mut u64, s) };
        }
    }
    // Offsets in single order: item j of lane l is single warp_start + 32 j + l.
    let mut offs = [0u32; N];
    let mut warp_total = 0u32;
    unroll8!(j, {
        let incl = crate::scan::device::warp_inclusive_sum(counts[j]);
        offs[j] = warp_total.wrapping_add(incl.wrapping_sub(counts[j]));
        warp_total = warp_total.wrapping_add(i::shfl_idx(incl, 31));
    });
    // SAFETY: the storage is ours.
    let bs = unsafe { crate::scan::device::BlockScan::new(scan_storage) };
    let (warp_prefix, tile_total) = bs.exclusive_sum_warps(warp_total);
    // SAFETY: one look-back entry per tile.
    let tile_prefix = unsafe { tile_exclusive_prefix(&lb, tile, tile_total, prefix_slot) };
    let base = tile_prefix.wrapping_add(warp_prefix);
    // The walking items' first pair offsets into their slots, for the rolled loop below.
    let mut writers = 0u32;
    unroll8!(j, {
        if walk & 1 << j != 0 && counts[j] != 0 {
            writers |= 1 << j;
            // SAFETY: this thread's slot.
            unsafe {
                i::st_shared_u32(
                    walk_slot(warp_local + j as u32 * 32 + lane),
                    base.wrapping_add(offs[j]),
                )
            };
        }
    });
    // The two-single windows' pairs, four items at a time: their eight 16-byte loads in
    // flight together, then the stores. (A macro over the literal first item: constant
    // array indices.)
    macro_rules! write_twos {
        ($first:literal) => {{
            let mut v = [[0u32; 4]; 8];
            unroll4!(q, {
                let j = $first + q;
                if two & 1 << j != 0 && counts[j] != 0 {
                    let idx = warp_start + (j as u64) * 32 + lane as u64;
                    // SAFETY: idx + 1 < n (the window holds it).
                    unsafe {
                        v[2 * q] = load_single(singles, idx);
                        v[2 * q + 1] = load_single(singles, idx + 1);
                    }
                }
            });
            unroll4!(q, {
                let j = $first + q;
                if two & 1 << j != 0 && counts[j] != 0 {
                    let at = base.wrapping_add(offs[j]) as u64;
                    if at < p.capacity {
                        // SAFETY: `at` below the capacity.
                        unsafe { store_pair(&p, at, v[2 * q], v[2 * q + 1]) };
                    }
                }
            });
        }};
    }
    write_twos!(0);
    write_twos!(4);
    let mut w = writers;
    while w != 0 {
        let j = i::lowest_bit(w);
        w &= w - 1;
        let idx = warp_start + (j as u64) * 32 + lane as u64;
        // SAFETY: this thread's slot, written above.
        let mut at = unsafe { i::ld_shared_u32(walk_slot(warp_local + j * 32 + lane)) } as u64;
        let write = |a: u64, b: u64| {
            if at < p.capacity {
                // SAFETY: members < n; `at` below the capacity.
                unsafe { store_pair(&p, at, load_single(singles, a), load_single(singles, b)) };
            }
            at += 1;
        };
        // SAFETY: idx < n (a count was made).
        unsafe { opener_pairs(&p, idx, time, write) };
    }
    if tile == i::grid_dim_x() - 1 && i::thread_idx_x() == 0 {
        // SAFETY: the u64 at CO_TOTAL_LO is 8-byte aligned (word 4).
        unsafe {
            (status.add(CO_TOTAL_LO) as *mut u64).write(tile_prefix.wrapping_add(tile_total) as u64)
        };
    }
}
