//! Seed selection per middle spacepoint and the gather of the seeds.

#[allow(unused_imports)]
use super::device::*;
use super::*;

/// Per middle `p < n`: seed filter and best-N into `slots[p * cap ..]`, count into
/// `counts[p]` (`cap = max_seeds_per_spm`).
///
/// # Safety
/// `sps` valid for `n`; `off_bot` holds `n + 1` offsets into `off_tri`, which holds
/// `n_mb + 1` offsets into `tri` and `weights`; `slots` for `n * cap`; `counts` for `n`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_select_seeds(p: SeedingSelectSeedsParams) {
    let (cfg, sps, n, off_bot, off_tri, tri, weights, slots, counts) = (
        p.cfg.ptr(),
        p.sps.ptr(),
        p.n,
        p.off_bot.ptr(),
        p.off_tri.ptr(),
        p.tri.ptr(),
        p.weights.ptr(),
        p.slots.ptr_mut(),
        p.counts.ptr_mut(),
    );
    let p = index();
    if p >= n {
        return;
    }
    // SAFETY: launch contract.
    unsafe {
        let c = &*cfg;
        let lo = off_tri.add(off_bot.add(p as usize).read() as usize).read();
        let hi = off_tri
            .add(off_bot.add(p as usize + 1).read() as usize)
            .read();
        let mut best = BestN::new(c.max_seeds_per_spm);
        let mut k = lo;
        while k < hi {
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
        let cap = c.max_seeds_per_spm as usize;
        let mut out = 0usize;
        let mut j = 0u32;
        while j < best.len {
            let s = best.items[(j % MAX_SEEDS_PER_SPM_CAP) as usize];
            if j == 0 || cut_per_middle_sp(c, s.weight, s.r_bottom) {
                slots.add(p as usize * cap + out).write(Seed {
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
        counts.add(p as usize).write(out as u32);
    }
}

/// Per middle `p < n`: copies its `counts[p]` seeds from the slots to `out[off[p]..]`.
///
/// # Safety
/// `slots` for `n * cap`; `counts`, `off` for `n`; `out` for the seed total.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_gather_seeds(p: SeedingGatherSeedsParams) {
    let (slots, counts, off, n, cap, out) = (
        p.slots.ptr(),
        p.counts.ptr(),
        p.off.ptr(),
        p.n,
        p.cap,
        p.out.ptr_mut(),
    );
    let p = index();
    if p >= n {
        return;
    }
    // SAFETY: launch contract.
    unsafe {
        let cnt = counts.add(p as usize).read() as usize;
        let o = off.add(p as usize).read() as usize;
        let mut j = 0;
        while j < cnt {
            out.add(o + j)
                .write(slots.add(p as usize * cap as usize + j).read());
            j += 1;
        }
    }
}
