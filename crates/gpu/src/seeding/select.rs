//! Seed selection per middle spacepoint, and the gather of the seeds with their bound track
//! parameters.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// Per middle `p <= n` (one warp each): the compatible-seed weight update of each triplet
/// (over the triplets of its middle–bottom doublet), seed filter and best-N into
/// `slots[p * cap ..]`,
/// count into `counts[p]` (`cap = max_seeds_per_spm`; 0 for `p` past the valid middles, so
/// that the `n + 1` counts can be scanned, and for every middle when a total overflowed).
/// The middle's triplets are visited in the oracle's order (bottoms in scan order, each
/// bottom's triplets in top order): the lanes read 32 bottoms' triplet counts at once, and
/// the triplets of those 32 bottoms, flattened into one list by a warp scan of the counts
/// ([`flat_owner`] finds each position's bottom), 32 at once (weight updates and cuts in
/// parallel); lane 0 offers them to its best-N keeper one by one, in order.
///
/// # Safety
/// `grid` the batch's offsets; `n_bot`, `bot_start` give each valid
/// middle's doublets; `tri_cnt`, `tri_start` each doublet's triplets in `tri` and
/// (`cap_tri`); `slots` for `n * cap`; `counts` for `n + 1`.
/// `32 (n + 1)` threads or more, in blocks of a multiple of 32 (`SELECT_THREADS`).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_select_seeds(p: SeedingSelectSeedsParams) {
    let (n, tri_cnt, tri_start, tri, slots, counts) = (
        p.n,
        p.tri_cnt.ptr(),
        p.tri_start.ptr(),
        p.tri.ptr(),
        p.slots.ptr_mut(),
        p.counts.ptr_mut(),
    );
    let g = index() / 32;
    if g > n {
        return; // warp-uniform
    }
    let lane = i::lane_id();
    // SAFETY: launch contract.
    unsafe {
        let c = &p.cfg;
        let fits = triplets_fit(p.totals.ptr(), p.cap_mb, p.cap_mt, p.cap_tri) != 0;
        // The middle's count and start are loaded together (the start is written only for
        // a middle with doublets, and used only then): one memory latency instead of two
        // in a row, in a kernel that mostly waits on them (Nsight Compute: no eligible
        // warp 61 % of the cycles).
        let (mut nb, mut bs) = (0, 0);
        if g < n {
            nb = p.n_bot.ptr().add(g as usize).read();
            bs = p.bot_start.ptr().add(g as usize).read();
        }
        if !(g < n_valid(c, p.grid.ptr(), p.n_events) && fits) {
            nb = 0;
        }
        if nb == 0 {
            if lane == 0 {
                counts.add(g as usize).write(0);
            }
            return; // warp-uniform
        }
        let mut best = SeedKeeper::new(c.max_seeds_per_spm);
        // The triplet count and start of bottom `j` of the middle (both at once; the start
        // is meaningful only when the count is not 0), (0, 0) past the last.
        let counts_of = |j: u32| {
            if j < nb {
                (
                    tri_cnt.add((bs + j) as usize).read(),
                    tri_start.add((bs + j) as usize).read(),
                )
            } else {
                (0, 0)
            }
        };
        let mut base = 0u32;
        let (mut cnt, mut start) = counts_of(lane);
        // Warp-uniform loops: every lane reaches every ballot and shuffle.
        while base < nb {
            // The next 32 bottoms' counts are loaded before this round's triplets are read,
            // so a middle with more than 32 bottoms waits on one round of loads fewer.
            let (next_cnt, next_start) = counts_of(base + 32 + lane);
            // The round's triplets as one flat list (bottoms in lane order, each bottom's
            // triplets in order: the oracle's order), taken 32 at a time whatever bottom
            // they belong to; a bottom with triplets has 1.1 on average at ⟨μ⟩ = 200, so
            // one bottom at a time left most lanes idle and cost a round of loads each.
            let incl = crate::scan::device::warp_inclusive_sum(cnt);
            let total = i::shfl_idx(incl, 31);
            let mut c0 = 0u32;
            while c0 < total {
                let pos = c0 + lane;
                // The lane holding this position's bottom, its triplet count and start,
                // and the position's rank among that bottom's triplets.
                let b = flat_owner(pos, |j| i::shfl_idx(incl, j));
                let n_t = i::shfl_idx(cnt, b);
                let lo = i::shfl_idx(start, b);
                let this = pos.wrapping_sub(i::shfl_idx(incl, b).wrapping_sub(n_t));
                let mut cand = Candidate::default();
                let mut pass = false;
                if pos < total {
                    let k = (lo + this) as usize;
                    // The triplet as two 16-byte read-only loads: it carries the seed's
                    // input indices and both radii (no spacepoint record read).
                    let w = tri.add(k) as *const u32;
                    let (a, b) = (i::ldg_v4_u32(w), i::ldg_v4_u32(w.add(4)));
                    let r_bottom = f32::from_bits(a[3]);
                    let f = |x: u32| f32::from_bits(x);
                    // The compatible-seed update over the doublet's triplets [lo, lo + n_t)
                    // (traccc's update_triplet_weights), then the seed weight; each other
                    // triplet's (curvature, r_top) is one 8-byte load.
                    let group = tri.add(lo as usize) as *const u64;
                    let updated = updated_weight(c, this, n_t, f(b[2]), |q| {
                        let cr = i::ldg_u64(group.add(4 * q as usize + 2));
                        (f32::from_bits(cr as u32), f32::from_bits((cr >> 32) as u32))
                    });
                    let wt = seed_weight(c, updated, r_bottom, f(b[1]));
                    if single_seed_cut(c, wt, r_bottom) {
                        pass = true;
                        cand = Candidate {
                            weight: wt,
                            key: [a[0], a[1], a[2]],
                            r_bottom,
                            z_vertex: f(b[3]),
                        };
                    }
                }
                // Only the lanes whose candidate passed, in lane (= list) order.
                let mut passing = i::ballot(pass);
                while passing != 0 {
                    let q = i::lowest_bit(passing);
                    passing &= passing - 1;
                    let got = Candidate {
                        weight: f32::from_bits(i::shfl_idx(cand.weight.to_bits(), q)),
                        key: [
                            i::shfl_idx(cand.key[0], q),
                            i::shfl_idx(cand.key[1], q),
                            i::shfl_idx(cand.key[2], q),
                        ],
                        r_bottom: f32::from_bits(i::shfl_idx(cand.r_bottom.to_bits(), q)),
                        z_vertex: f32::from_bits(i::shfl_idx(cand.z_vertex.to_bits(), q)),
                    };
                    if lane == 0 {
                        best.offer(got);
                    }
                }
                c0 += 32;
            }
            (cnt, start) = (next_cnt, next_start);
            base += 32;
        }
        if lane == 0 {
            let cap = c.max_seeds_per_spm as usize;
            let mut out = 0usize;
            let mut j = 0u32;
            while let Some(s) = best.get(j) {
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
}

/// Per seed slot `j` of valid middle `p` (one thread each, thread `p * cap + j`, `cap =
/// max_seeds_per_spm`): when `j < counts[p]`, copies the seed from its slot to
/// `out[off[p] + j]` and writes its bound parameters (from the input spacepoints of the
/// middle's event) to `params[off[p] + j]`. Thread `e < n_events` also writes event `e`'s
/// valid spacepoints and seed range to `events[e]`. (One thread per middle, walking its
/// seeds, left most of the GPU idle: 7.7 % achieved occupancy, Nsight Compute.)
///
/// # Safety
/// `grid`, `binned` the batch's; `sps` the input (`ev_off` its event offsets); `slots` for
/// `n * cap`; `counts`, `off` for `n + 1` (`off` their exclusive scan); `out`, `params` for the
/// seed total; `events` for `n_events`. `SEEDING_THREADS` threads per block,
/// `ceil(max(n * cap, n_events) / SEEDING_THREADS)` blocks.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_gather_seeds(p: SeedingGatherSeedsParams) {
    let g = index();
    // SAFETY: launch contract.
    unsafe {
        let c = &p.cfg;
        if g < p.n_events as u64 {
            event_stats(c, p.grid.ptr(), p.off.ptr(), p.events.ptr_mut(), g as usize);
        }
        let cap = c.max_seeds_per_spm as u64;
        if cap == 0 {
            return; // rejected by the host; no division by zero
        }
        let (mid, j) = (g / cap, g % cap);
        if mid >= p.n {
            return;
        }
        // Everything that depends only on the slot is loaded at once (one memory round
        // trip instead of four in a row); the slot is read even when it holds no seed
        // (inside the slots buffer, the value then unused).
        let nv = n_valid(c, p.grid.ptr(), p.n_events);
        let cnt = p.counts.ptr().add(mid as usize).read() as u64;
        let at = p.off.ptr().add(mid as usize).read() as usize + j as usize;
        let bin = (*p.binned.ptr().add(mid as usize)).bin;
        let s = p.slots.ptr().add((mid * cap + j) as usize).read();
        if mid >= nv || j >= cnt {
            return;
        }
        let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
        let base = p.ev_off.ptr().add((bin / nbins) as usize).read() as usize;
        let sps = p.sps.ptr();
        let pos = |k: u32| {
            let s = &*sps.add(base + k as usize);
            [s.x, s.y, s.z]
        };
        p.out.ptr_mut().add(at).write(s);
        p.params.ptr_mut().add(at).write(estimate_params(
            c.bfield,
            pos(s.bottom),
            pos(s.middle),
            pos(s.top),
        ));
    }
}
