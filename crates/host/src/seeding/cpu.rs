//! CPU reference of the seeding family: a plain sequential brute force.
//!
//! Spacepoints go into a `Vec` per grid key (bin × 1 mm radius slice, ascending input
//! index). For every middle spacepoint (keys in ascending order, then ascending index), every
//! spacepoint of the neighbour bins in the radius slices around `rM - dR` (bottoms) and
//! `rM + dR` (tops) is tried with the doublet cuts; for every compatible bottom, every
//! compatible top is tried as a triplet. The triplets of one middle–bottom pair get the
//! compatible-seed weight update, the triplets of one middle go through the seed filter and
//! are sorted best first (weight, then the larger input-index tuple), and the first
//! `max_seeds_per_spm` pass the final per-middle cut. It shares only the per-candidate
//! predicates of `detkit_gpu::seeding` with the kernels, not their count/fill structure.

use detkit_gpu::seeding::{self as k, BinnedSp, BoundParams, Candidate, SeedingConfig, SpacePoint};

pub use detkit_gpu::seeding::Seed;

/// Counts of the intermediate stages (equal on both backends).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeedingStats {
    /// Input spacepoints.
    pub spacepoints: u64,
    /// Spacepoints that passed `is_valid_sp` and were binned.
    pub valid: u64,
    /// Spacepoints dropped as invalid.
    pub invalid: u64,
    /// Middle–bottom doublets (of middles with at least one bottom and one top).
    pub mid_bot: u64,
    /// Middle–top doublets (same middles).
    pub mid_top: u64,
    /// Triplets.
    pub triplets: u64,
    /// Seeds.
    pub seeds: u64,
}

/// The grid: for each key (bin × radius slice), the input indices of its spacepoints in
/// ascending order.
pub fn grid(cfg: &SeedingConfig, sps: &[SpacePoint]) -> Vec<Vec<u32>> {
    let mut keys = vec![Vec::new(); cfg.nkeys() as usize];
    for (i, sp) in sps.iter().enumerate() {
        let key = k::grid_key(cfg, sp.x, sp.y, sp.z);
        if key < cfg.nkeys() {
            keys[key as usize].push(i as u32);
        }
    }
    keys
}

/// Seeds of an event, in output order (middle spacepoints by grid bin, then by input
/// index; each middle's seeds best first), and the stage counts.
pub fn seeds(cfg: &SeedingConfig, sps: &[SpacePoint]) -> (Vec<Seed>, SeedingStats) {
    let keys = grid(cfg, sps);
    let valid: u64 = keys.iter().map(|b| b.len() as u64).sum();
    let mut st = SeedingStats {
        spacepoints: sps.len() as u64,
        valid,
        invalid: sps.len() as u64 - valid,
        ..Default::default()
    };
    let rec = |i: u32, bin: u32| k::binned(&sps[i as usize], i, bin);
    let mut out = Vec::new();
    let n_r = cfg.n_r as usize;
    for (key, members) in keys.iter().enumerate() {
        let bin = (key / n_r) as u32;
        for &mi in members {
            let m = rec(mi, bin);
            let nb = k::neighbour_bins(cfg, bin);
            // Every spacepoint of the neighbour bins in the radius slices of a window.
            let candidates = |(lo, hi): (f32, f32), bottom: bool| -> Vec<BinnedSp> {
                let (s0, s1) = k::slice_range(cfg, lo, hi);
                let mut v = Vec::new();
                for &ob in &nb.bins[..nb.len as usize] {
                    for slice in s0..s1 {
                        for &oi in &keys[ob as usize * n_r + slice as usize] {
                            let o = rec(oi, ob);
                            if k::doublet_compatible(cfg, &m, &o, bottom) {
                                v.push(o);
                            }
                        }
                    }
                }
                v
            };
            let [wb, wt] = k::radial_windows(cfg, m.r);
            let bottoms = candidates(wb, true);
            let tops = candidates(wt, false);
            if bottoms.is_empty() || tops.is_empty() {
                continue;
            }
            st.mid_bot += bottoms.len() as u64;
            st.mid_top += tops.len() as u64;
            let mut candidates: Vec<Candidate> = Vec::new();
            for b in &bottoms {
                let lb = k::transform_coordinates(&m, b, true);
                let (isin, scat) = k::bottom_scattering(cfg, &lb);
                // (curvature, r_top, weight, top) of this middle–bottom pair's triplets
                let mut group: Vec<(f32, f32, f32, &BinnedSp)> = Vec::new();
                for t in &tops {
                    let lt = k::transform_coordinates(&m, t, false);
                    if let Some((curv, impact)) =
                        k::triplet_compatible(cfg, &m, &lb, &lt, isin, scat)
                    {
                        group.push((curv, t.r, k::impact_weight(cfg, impact), t));
                    }
                }
                st.triplets += group.len() as u64;
                for (j, g) in group.iter().enumerate() {
                    let w = k::updated_weight(cfg, j as u32, group.len() as u32, g.2, |x| {
                        (group[x as usize].0, group[x as usize].1)
                    });
                    let w = k::seed_weight(cfg, w, b.r, g.1);
                    if k::single_seed_cut(cfg, w, b.r) {
                        candidates.push(Candidate {
                            weight: w,
                            key: [b.index, m.index, g.3.index],
                            r_bottom: b.r,
                            z_vertex: lb.zo,
                        });
                    }
                }
            }
            candidates.sort_by(|a, b| {
                if k::seed_better(a, b) {
                    std::cmp::Ordering::Less
                } else if k::seed_better(b, a) {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            });
            let keep = (cfg.max_seeds_per_spm as usize).min(k::MAX_SEEDS_PER_SPM_CAP as usize);
            for (j, c) in candidates.iter().take(keep).enumerate() {
                if j == 0 || k::cut_per_middle_sp(cfg, c.weight, c.r_bottom) {
                    out.push(Seed {
                        bottom: c.key[0],
                        middle: c.key[1],
                        top: c.key[2],
                        weight: c.weight,
                        z_vertex: c.z_vertex,
                    });
                }
            }
        }
    }
    st.seeds = out.len() as u64;
    (out, st)
}

/// Bound parameters of every seed.
pub fn params(cfg: &SeedingConfig, sps: &[SpacePoint], seeds: &[Seed]) -> Vec<BoundParams> {
    let pos = |i: u32| {
        let p = &sps[i as usize];
        [p.x, p.y, p.z]
    };
    seeds
        .iter()
        .map(|s| k::estimate_params(cfg.bfield, pos(s.bottom), pos(s.middle), pos(s.top)))
        .collect()
}
