//! Seed selection of the spilled middles, and the gather of the seeds with their bound track
//! parameters.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// Per spilled middle (one warp each, grid-stride over the `totals.spilled` entries of
/// `spill`): [`select_middle`] over its triplets `tri[tri_start[g] .. + tri_cnt[g]]` with the
/// weights of [`seeding_update_weights`], into `slots[g * cap ..]` and `counts[g]` (0 when a
/// total overflowed: the host repeats the call).
///
/// # Safety
/// `spill`, `tri_cnt`, `tri_start` as written by [`seeding_find_triplets`]; `tri` and
/// `weights` valid for `cap_tri`; `slots` for `n * cap`; `counts` for `n + 1`.
/// `SEEDING_THREADS` threads per block (whole warps).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_select_seeds(p: SeedingSelectSeedsParams) {
    let lane = i::lane_id();
    // SAFETY: launch contract.
    unsafe {
        let c = &*p.cfg.ptr();
        let n_spilled = (*p.totals.ptr()).spilled;
        let fits = triplets_fit(p.totals.ptr(), p.cap_mb, p.cap_mt, p.cap_tri) != 0;
        let mut w = index() / 32;
        while w < n_spilled {
            let g = p.spill.ptr().add(w as usize).read() as usize;
            let count = p.counts.ptr_mut().add(g);
            if fits {
                let lo = p.tri_start.ptr().add(g).read() as usize;
                let cnt = p.tri_cnt.ptr().add(g).read();
                let weights = p.weights.ptr().add(lo);
                select_middle(
                    c,
                    p.sps.ptr(),
                    p.tri.ptr().add(lo),
                    cnt,
                    |k| weights.add(k as usize).read(),
                    p.slots.ptr_mut().add(g * c.max_seeds_per_spm as usize),
                    count,
                );
            } else if lane == 0 {
                count.write(0);
            }
            w += stride() / 32; // warp-uniform
        }
    }
}

/// Per valid middle `p` (one warp each, lane `j` its seed `j`): copies its `counts[p]` seeds
/// from the slots to `out[off[p]..]` and writes their bound parameters (from the input
/// spacepoints of the middle's event) to `params[off[p]..]`.
///
/// # Safety
/// `grid`, `binned` the batch's; `sps` the input (`ev_off` its event offsets); `slots` for
/// `n * cap`; `counts`, `off` for `n + 1`; `out`, `params` for the seed total.
/// `SEEDING_THREADS` threads per block, `ceil(32 n / SEEDING_THREADS)` blocks.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_gather_seeds(p: SeedingGatherSeedsParams) {
    let g = index() / 32;
    let j = i::lane_id() as usize;
    if g >= p.n {
        return;
    }
    // SAFETY: launch contract.
    unsafe {
        let c = &*p.cfg.ptr();
        if g >= n_valid(c, p.grid.ptr(), p.n_events) {
            return;
        }
        let cnt = p.counts.ptr().add(g as usize).read() as usize;
        if j >= cnt {
            return;
        }
        let o = p.off.ptr().add(g as usize).read() as usize;
        let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
        let e = (*p.binned.ptr().add(g as usize)).bin / nbins;
        let base = p.ev_off.ptr().add(e as usize).read() as usize;
        let sps = p.sps.ptr();
        let pos = |k: u32| {
            let s = &*sps.add(base + k as usize);
            [s.x, s.y, s.z]
        };
        let cap = c.max_seeds_per_spm as usize;
        let s = p.slots.ptr().add(g as usize * cap + j).read();
        p.out.ptr_mut().add(o + j).write(s);
        p.params.ptr_mut().add(o + j).write(estimate_params(
            c.bfield,
            pos(s.bottom),
            pos(s.middle),
            pos(s.top),
        ));
    }
}
