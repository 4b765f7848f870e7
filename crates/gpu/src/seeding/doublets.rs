//! Doublets: count and find middle-bottom and middle-top pairs.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// Warp-cooperative walk over the candidates of one middle `m` (the same for all 32
/// lanes): every spacepoint of the neighbour bins whose radius slice is in
/// `slice_range(window)`, in scan order (bins, then slices, then index), 32 at a time.
/// For each candidate passing `pred`, `emit(rank, q, &sp)` runs on the lane holding it,
/// with `rank` its position among the passing candidates in scan order. Returns the
/// number that passed (the same on every lane).
///
/// # Safety
/// Called by all 32 lanes of a warp with the same `m` and `window`; `grid` holds
/// `nkeys + 1` offsets into `sps`.
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
    let nb = neighbour_bins(c, m.bin);
    let (s0, s1) = slice_range(c, window.0, window.1);
    let mut total = 0u32;
    if s0 >= s1 {
        return 0;
    }
    let mut k = 0;
    while k < nb.len {
        let key = nb.bins[(k % 9) as usize] as usize * c.n_r as usize;
        // SAFETY: key + s1 <= nkeys; grid holds nkeys + 1 offsets, each <= len(sps).
        let (lo, hi) = unsafe {
            (
                grid.add(key + s0 as usize).read(),
                grid.add(key + s1 as usize).read(),
            )
        };
        let mut base = lo;
        // Warp-uniform loop: every lane reaches every ballot.
        while base < hi {
            let q = base + lane;
            let mut o = BinnedSp::default();
            let mut ok = false;
            if q < hi {
                // SAFETY: q < grid[nkeys] = len(sps).
                o = unsafe { sps.add(q as usize).read() };
                ok = pred(&o);
            }
            let mask = i::ballot(ok);
            if ok {
                emit(total + i::popc(mask & below), q, &o);
            }
            total += i::popc(mask);
            base += 32;
        }
        k += 1;
    }
    total
}

/// Per middle `p < n` (one warp each): compatible bottoms and tops (both set to 0 when
/// either is 0), and their sums into `totals[0..2]` (u64).
///
/// # Safety
/// `grid` holds `nkeys + 1` offsets with `grid[nkeys] = n`; `sps` valid for `n`;
/// `n_bot`, `n_top` for `n`; `totals` two zeroed u64. `SEEDING_THREADS` threads per
/// block, `ceil(32 n / SEEDING_THREADS)` blocks.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_count_doublets(p: SeedingCountDoubletsParams) {
    let (cfg, grid, sps, n, n_bot, n_top, totals) = (
        p.cfg.ptr(),
        p.grid.ptr(),
        p.sps.ptr(),
        p.n,
        p.n_bot.ptr_mut(),
        p.n_top.ptr_mut(),
        p.totals.ptr_mut(),
    );
    let p = index() / 32;
    if p >= n {
        return; // warp-uniform
    }
    // SAFETY: launch contract.
    unsafe {
        let c = &*cfg;
        let m = sps.add(p as usize).read();
        let [wb, wt] = radial_windows(c, m.r);
        let mut nb = warp_candidates(
            c,
            &m,
            wb,
            grid,
            sps,
            |o| doublet_compatible(c, &m, o, true),
            |_, _, _| {},
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
                |_, _, _| {},
            );
        }
        if nb == 0 || nt == 0 {
            nb = 0;
            nt = 0;
        }
        if i::lane_id() == 0 {
            n_bot.add(p as usize).write(nb);
            n_top.add(p as usize).write(nt);
            if nb != 0 {
                i::atomic_add_u64(totals, nb as u64);
                i::atomic_add_u64(totals.add(1), nt as u64);
            }
        }
    }
}

/// Per middle `p < n` (one warp each): writes its doublets at `off_bot[p]..` and
/// `off_top[p]..`, in scan order.
///
/// # Safety
/// As [`seeding_count_doublets`]; `off_*` are the exclusive scans of its counts;
/// `bot`, `lc_bot` hold the bottom total, `top`, `lc_top` the top total.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_find_doublets(p: SeedingFindDoubletsParams) {
    let (cfg, grid, sps, n, n_bot, off_bot, off_top, bot, lc_bot, top, lc_top) = (
        p.cfg.ptr(),
        p.grid.ptr(),
        p.sps.ptr(),
        p.n,
        p.n_bot.ptr(),
        p.off_bot.ptr(),
        p.off_top.ptr(),
        p.bot.ptr_mut(),
        p.lc_bot.ptr_mut(),
        p.top.ptr_mut(),
        p.lc_top.ptr_mut(),
    );
    let p = index() / 32;
    if p >= n {
        return; // warp-uniform
    }
    // SAFETY: launch contract; the fill visits exactly the candidates counted, so
    // ranks stay below the counts.
    unsafe {
        if n_bot.add(p as usize).read() == 0 {
            return; // warp-uniform
        }
        let c = &*cfg;
        let m = sps.add(p as usize).read();
        let ib = off_bot.add(p as usize).read() as usize;
        let it = off_top.add(p as usize).read() as usize;
        let pm = p as u32;
        let [wb, wt] = radial_windows(c, m.r);
        warp_candidates(
            c,
            &m,
            wb,
            grid,
            sps,
            |o| doublet_compatible(c, &m, o, true),
            |rank, q, o| {
                let at = ib + rank as usize;
                bot.add(at).write(Doublet {
                    middle: pm,
                    other: q,
                });
                lc_bot.add(at).write(transform_coordinates(&m, o, true));
            },
        );
        warp_candidates(
            c,
            &m,
            wt,
            grid,
            sps,
            |o| doublet_compatible(c, &m, o, false),
            |rank, q, o| {
                let at = it + rank as usize;
                top.add(at).write(Doublet {
                    middle: pm,
                    other: q,
                });
                lc_top.add(at).write(transform_coordinates(&m, o, false));
            },
        );
    }
}
