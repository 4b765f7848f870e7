//! Doublets: the middle-bottom and middle-top pairs of every middle, in one pass.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// The candidate ranges of one middle's radial window: per neighbour bin (scan order), the
/// contiguous run of binned spacepoints in the window's radius slices.
pub(crate) struct Segments {
    lo: [u32; 9],
    len: [u32; 9],
    total: u32,
}

/// The [`Segments`] of middle `m` (batch bin `m.bin`) for `window`.
///
/// # Safety
/// `grid` holds the batch's offsets (`n_events * nkeys + 2`), `m.bin` a batch bin.
#[inline(always)]
pub(crate) unsafe fn segments(
    c: &SeedingConfig,
    m: &BinnedSp,
    window: (f32, f32),
    grid: *const u32,
) -> Segments {
    let mut s = Segments {
        lo: [0; 9],
        len: [0; 9],
        total: 0,
    };
    let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
    let event_bin = m.bin / nbins * nbins;
    let nb = neighbour_bins(c, m.bin % nbins);
    let (s0, s1) = slice_range(c, window.0, window.1);
    if s0 >= s1 {
        return s;
    }
    let mut k = 0;
    while k < nb.len {
        let key = (event_bin + nb.bins[(k % 9) as usize]) as usize * c.n_r as usize;
        // SAFETY: key + s1 <= the event's last key + 1; grid holds every offset.
        let (lo, hi) = unsafe {
            (
                grid.add(key + s0 as usize).read(),
                grid.add(key + s1 as usize).read(),
            )
        };
        let len = hi.saturating_sub(lo);
        s.lo[(k % 9) as usize] = lo;
        s.len[(k % 9) as usize] = len;
        s.total += len;
        k += 1;
    }
    s
}

/// Warp-cooperative walk over the candidates of one middle `m` (the same for all 32
/// lanes): every spacepoint of the window's [`Segments`] in scan order (bins, then slices,
/// then index), the segments joined so that the 32 lanes always test 32 consecutive
/// candidates. For each candidate passing `pred`, `emit(rank, q, &sp)` runs on the lane
/// holding it, with `rank` its position among the passing candidates in scan order.
/// Returns the number that passed (the same on every lane).
///
/// # Safety
/// Called by all 32 lanes of a warp with the same `m` and `window`; `grid` holds the
/// batch's offsets into `sps`.
#[inline(always)]
pub(crate) unsafe fn warp_candidates(
    c: &SeedingConfig,
    m: &BinnedSp,
    window: (f32, f32),
    grid: *const u32,
    sps: *const BinnedSp,
    pred: impl Fn(&BinnedSp) -> bool,
    mut emit: impl FnMut(u32, u32, &BinnedSp),
) -> u32 {
    let lane = i::lane_id();
    let below = i::lanemask_lt();
    // SAFETY: caller's contract.
    let seg = unsafe { segments(c, m, window, grid) };
    let mut passed = 0u32;
    let mut base = 0u32;
    // This lane's cursor: segment k covers the joined positions [start, start + len[k]).
    let mut k = 0u32;
    let mut start = 0u32;
    // Warp-uniform loop: every lane reaches every ballot.
    while base < seg.total {
        let v = base + lane;
        let mut o = BinnedSp::default();
        let mut ok = false;
        let mut q = 0;
        if v < seg.total {
            // v < total: a segment holding v exists among the first nine.
            while k < 9 && v >= start + seg.len[(k % 9) as usize] {
                start += seg.len[(k % 9) as usize];
                k += 1;
            }
            q = seg.lo[(k % 9) as usize] + (v - start);
            // SAFETY: q < grid[nkeys of the batch] = number of binned records.
            o = unsafe { sps.add(q as usize).read() };
            ok = pred(&o);
        }
        let mask = i::ballot(ok);
        if ok {
            emit(passed + i::popc(mask & below), q, &o);
        }
        passed += i::popc(mask);
        base += 32;
    }
    passed
}

/// Writes the doublets of one side of middle `pm`: ranks below `DOUBLET_STAGE` from the
/// warp's shared-memory stage, the rest (when more passed) from a second walk.
///
/// # Safety
/// All 32 lanes; `stage` holds the first `min(count, DOUBLET_STAGE)` candidates of the
/// first walk (visible after `sync_warp`); `out`, `lc` valid for `at + count`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn write_side(
    c: &SeedingConfig,
    m: &BinnedSp,
    pm: u32,
    window: (f32, f32),
    bottom: bool,
    grid: *const u32,
    sps: *const BinnedSp,
    stage: u32,
    count: u32,
    at: usize,
    out: *mut Doublet,
    lc: *mut LinCircle,
) {
    let staged = if count < DOUBLET_STAGE {
        count
    } else {
        DOUBLET_STAGE
    };
    let mut r = i::lane_id();
    // SAFETY: caller's contract: r < staged entries of the stage; at + r < capacity.
    unsafe {
        while r < staged {
            let q = i::ld_shared_u32(stage + r * 4);
            let o = sps.add(q as usize).read();
            out.add(at + r as usize).write(Doublet {
                middle: pm,
                other: q,
            });
            lc.add(at + r as usize)
                .write(transform_coordinates(m, &o, bottom));
            r += 32;
        }
        if count > DOUBLET_STAGE {
            warp_candidates(
                c,
                m,
                window,
                grid,
                sps,
                |o| doublet_compatible(c, m, o, bottom),
                |rank, q, o| {
                    if rank >= DOUBLET_STAGE {
                        out.add(at + rank as usize).write(Doublet {
                            middle: pm,
                            other: q,
                        });
                        lc.add(at + rank as usize)
                            .write(transform_coordinates(m, o, bottom));
                    }
                },
            );
        }
    }
}

/// Per middle `p < n_valid` (one warp each), in one pass: the compatible bottoms and tops
/// (both 0 when either is 0), their counts `n_bot[p]`, `n_top[p]`, space reserved with
/// one 64-bit atomic per side on `totals` (so each middle's doublets are contiguous, in
/// scan order; middles may come in any order), the starts `bot_start[p]`, `top_start[p]`,
/// and the doublets with their `LinCircle`s. Per-event counts go to `events`. When a
/// reservation does not fit the capacity nothing is written for that middle (the totals
/// then exceed the capacity and the host repeats the call with larger buffers).
///
/// # Safety
/// `grid` holds the batch's `n_events * nkeys + 2` offsets into `sps` (`n` records at most);
/// `n_bot`, `n_top`, `bot_start`, `top_start` valid for `n`; `bot`, `lc_bot` for `cap_mb`,
/// `top`, `lc_top` for `cap_mt`; `totals` one zeroed record, `events` `n_events` records.
/// `SEEDING_THREADS` threads per block, `ceil(32 n / SEEDING_THREADS)` blocks,
/// `doublet_smem_bytes()` of dynamic shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_find_doublets(p: SeedingFindDoubletsParams) {
    let (cfg, grid, sps, n, n_events) = (p.cfg.ptr(), p.grid.ptr(), p.sps.ptr(), p.n, p.n_events);
    let warp = index() / 32;
    if warp >= n {
        return; // warp-uniform
    }
    // SAFETY: launch contract; ranks stay below the reserved counts.
    unsafe {
        let c = &*cfg;
        if warp >= n_valid(c, grid, n_events) {
            return; // warp-uniform
        }
        let pm = warp as u32;
        let m = sps.add(pm as usize).read();
        let lane = i::lane_id();
        let stage_b = i::shared_base() + i::warp_id() * 2 * DOUBLET_STAGE * 4;
        let stage_t = stage_b + DOUBLET_STAGE * 4;
        let [wb, wt] = radial_windows(c, m.r);
        let stage = |at: u32| {
            move |rank: u32, q: u32, _: &BinnedSp| {
                if rank < DOUBLET_STAGE {
                    i::st_shared_u32(at + rank * 4, q);
                }
            }
        };
        let mut nb = warp_candidates(
            c,
            &m,
            wb,
            grid,
            sps,
            |o| doublet_compatible(c, &m, o, true),
            stage(stage_b),
        );
        let mut nt = 0;
        if nb != 0 {
            nt = warp_candidates(
                c,
                &m,
                wt,
                grid,
                sps,
                |o| doublet_compatible(c, &m, o, false),
                stage(stage_t),
            );
        }
        if nb == 0 || nt == 0 {
            nb = 0;
            nt = 0;
        }
        let (mut ob, mut ot) = (0u64, 0u64);
        if lane == 0 {
            p.n_bot.ptr_mut().add(pm as usize).write(nb);
            p.n_top.ptr_mut().add(pm as usize).write(nt);
            if nb != 0 {
                let t = p.totals.ptr_mut();
                ob = i::atomic_add_u64(core::ptr::addr_of_mut!((*t).mid_bot), nb as u64);
                ot = i::atomic_add_u64(core::ptr::addr_of_mut!((*t).mid_top), nt as u64);
                let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
                let ev = p.events.ptr_mut().add((m.bin / nbins) as usize);
                i::atomic_add_u32(core::ptr::addr_of_mut!((*ev).mid_bot), nb);
                i::atomic_add_u32(core::ptr::addr_of_mut!((*ev).mid_top), nt);
                p.bot_start.ptr_mut().add(pm as usize).write(ob as u32);
                p.top_start.ptr_mut().add(pm as usize).write(ot as u32);
            }
        }
        if nb == 0 {
            return; // warp-uniform
        }
        let ob = (i::shfl_idx(ob as u32, 0) as u64) | ((i::shfl_idx((ob >> 32) as u32, 0) as u64) << 32);
        let ot = (i::shfl_idx(ot as u32, 0) as u64) | ((i::shfl_idx((ot >> 32) as u32, 0) as u64) << 32);
        // The stage written by every lane above is read by others below.
        i::sync_warp();
        if ob + nb as u64 > p.cap_mb as u64 || ot + nt as u64 > p.cap_mt as u64 {
            return; // warp-uniform: overflow, the host repeats with larger buffers
        }
        write_side(
            c,
            &m,
            pm,
            wb,
            true,
            grid,
            sps,
            stage_b,
            nb,
            ob as usize,
            p.bot.ptr_mut(),
            p.lc_bot.ptr_mut(),
        );
        write_side(
            c,
            &m,
            pm,
            wt,
            false,
            grid,
            sps,
            stage_t,
            nt,
            ot as usize,
            p.top.ptr_mut(),
            p.lc_top.ptr_mut(),
        );
    }
}
