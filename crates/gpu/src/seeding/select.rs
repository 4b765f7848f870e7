//! Seed selection per middle spacepoint, and the gather of the seeds with their bound track
//! parameters.

#[allow(unused_imports)]
use super::device::*;
use super::*;

/// Per middle `p <= n`: seed filter and best-N into `slots[p * cap ..]`, count into
/// `counts[p]` (`cap = max_seeds_per_spm`; 0 for `p` past the valid middles, so that the
/// `n + 1` counts can be scanned, and for every middle when a total overflowed).
///
/// # Safety
/// `grid` the batch's offsets; `sps` valid for `n`; `n_bot`, `bot_start` give each valid
/// middle's doublets; `tri_cnt`, `tri_start` each doublet's triplets in `tri` and
/// `weights` (`cap_tri`); `slots` for `n * cap`; `counts` for `n + 1`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_select_seeds(p: SeedingSelectSeedsParams) {
    let (cfg, sps, n, tri_cnt, tri_start, tri, weights, slots, counts) = (
        p.cfg.ptr(),
        p.sps.ptr(),
        p.n,
        p.tri_cnt.ptr(),
        p.tri_start.ptr(),
        p.tri.ptr(),
        p.weights.ptr(),
        p.slots.ptr_mut(),
        p.counts.ptr_mut(),
    );
    let g = index();
    if g > n {
        return;
    }
    // SAFETY: launch contract.
    unsafe {
        let c = &*cfg;
        let fits = triplets_fit(p.totals.ptr(), p.cap_mb, p.cap_mt, p.cap_tri) != 0;
        let nb = if g < n_valid(c, p.grid.ptr(), p.n_events) && fits {
            p.n_bot.ptr().add(g as usize).read()
        } else {
            0
        };
        if nb == 0 {
            counts.add(g as usize).write(0);
            return;
        }
        // The middle's triplets in the oracle's order: its bottoms in scan order, each
        // bottom's triplets in top order.
        let bs = p.bot_start.ptr().add(g as usize).read() as usize;
        let mut best = BestN::new(c.max_seeds_per_spm);
        let mut d = bs;
        while d < bs + nb as usize {
            let cnt = tri_cnt.add(d).read();
            if cnt != 0 {
                let lo = tri_start.add(d).read();
                let mut k = lo;
                while k < lo + cnt {
                    let t = tri.add(k as usize).read();
                    let sb = &*sps.add(t.bottom as usize);
                    let w = seed_weight(c, weights.add(k as usize).read(), sb.r, t.r_top);
                    if single_seed_cut(c, w, sb.r) {
                        best.offer(Candidate {
                            weight: w,
                            key: [
                                sb.index,
                                (*sps.add(t.middle as usize)).index,
                                (*sps.add(t.top as usize)).index,
                            ],
                            r_bottom: sb.r,
                            z_vertex: t.z_vertex,
                        });
                    }
                    k += 1;
                }
            }
            d += 1;
        }
        let cap = c.max_seeds_per_spm as usize;
        let mut out = 0usize;
        let mut j = 0u32;
        while j < best.len {
            let s = best.items[(j % MAX_SEEDS_PER_SPM_CAP) as usize];
            if j == 0 || cut_per_middle_sp(c, s.weight, s.r_bottom) {
                slots.add(g as usize * cap + out).write(Seed {
                    bottom: s.key[0],
                    middle: s.key[1],
                    top: s.key[2],
                    weight: s.weight,
                    z_vertex: s.z_vertex,
                });
                out += 1;
            }
            j += 1;
        }
        counts.add(g as usize).write(out as u32);
    }
}

/// Per valid middle `p`: copies its `counts[p]` seeds from the slots to `out[off[p]..]` and
/// writes their bound parameters (from the input spacepoints of the middle's event) to
/// `params[off[p]..]`.
///
/// # Safety
/// `grid`, `binned` the batch's; `sps` the input (`ev_off` its event offsets); `slots` for
/// `n * cap`; `counts`, `off` for `n + 1`; `out`, `params` for the seed total.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_gather_seeds(p: SeedingGatherSeedsParams) {
    let g = index();
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
        if cnt == 0 {
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
        let slots = p.slots.ptr().add(g as usize * cap);
        let mut j = 0;
        while j < cnt {
            let s = slots.add(j).read();
            p.out.ptr_mut().add(o + j).write(s);
            p.params.ptr_mut().add(o + j).write(estimate_params(
                c.bfield,
                pos(s.bottom),
                pos(s.middle),
                pos(s.top),
            ));
            j += 1;
        }
    }
}
