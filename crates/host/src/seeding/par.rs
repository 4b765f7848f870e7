//! The CPU backend's seeding: the oracle's result ([`super::cpu::seeds`], bit for bit, in
//! the same order) on every core, with the GPU kernels' shortcuts.
//!
//! - **Grid as one array.** Spacepoints are counted into their grid keys (bin × radius
//!   slice) and placed stably, so the binned records are in the oracle's middle order (key,
//!   then input index), and a middle's bottom (top) candidates in one neighbour bin are one
//!   contiguous range of them ([`k::slice_range`]), with their `r` and `z` in compact arrays
//!   for the first cuts ([`k::doublet_rz_compatible`], 16 candidates at a time).
//! - **Middles in parallel.** Chunks of middles run on the rayon pool of the calling
//!   [`crate::Backend`]; each chunk's seeds are joined in middle order.
//! - **Tops sorted by cot θ.** The oracle tries every (bottom, top) pair of a middle, which
//!   makes an event's cost grow with Σ bottoms × tops, about μ³ (see `docs/seeding.md`, "CPU
//!   backend"); the first cut of [`k::triplet_compatible`] rejects about 98 % of them from
//!   `Δcot θ` alone. With the middle's [`TopBounds`] the GPU decides most pairs from the top's
//!   cot θ ([`k::triplet_bound_rejects`]); that test is monotone in `|fl(lb.cot - lt.cot)|`,
//!   so here the tops are sorted by cot θ once per middle and each bottom binary-searches the
//!   one contiguous range of tops it does not reject: the other tops are never touched.
//!   The tops of the range are then tested exactly, in the oracle's top order (the weight
//!   update depends on it). Tops with a cot θ beyond ±1e18 (or NaN), bottoms whose bound is
//!   not proven (`c1 = ∞`: a NaN, a negative variance) and middles with few tops take the
//!   oracle's walk over every top.

use detkit_gpu::seeding::{self as k, BinnedSp, Candidate, LinCircle, SeedingConfig, TopBounds};
use rayon::prelude::*;

use super::cpu::SeedingStats;
use super::{BoundParams, Seed, SpacePoint};

/// Middles per parallel task.
const MIDDLES_PER_TASK: usize = 32;

/// Below this many tops a middle walks them all (sorting would cost more than it saves).
const SORT_TOPS_MIN: usize = 16;

/// Largest |cot θ| the sorted search handles: `(a - b)²` of two such values is finite, so the
/// rejection test is monotone over the sorted tops.
const COT_LIMIT: f32 = 1e18;

/// The binned event: records in grid order, their `(r, z)`, and the grid offsets.
struct Grid {
    recs: Vec<BinnedSp>,
    /// Radii and z of `recs` (the doublet cuts' first test, in lanes).
    r: Vec<f32>,
    z: Vec<f32>,
    /// `nkeys + 1` offsets into `recs`.
    off: Vec<u32>,
}

fn grid(cfg: &SeedingConfig, sps: &[SpacePoint]) -> Grid {
    let nkeys = cfg.nkeys() as usize;
    let keys: Vec<u32> = sps
        .par_iter()
        .with_min_len(4096)
        .map(|sp| k::grid_key(cfg, sp.x, sp.y, sp.z))
        .collect();
    let mut off = vec![0u32; nkeys + 2];
    for &key in &keys {
        off[key as usize + 1] += 1;
    }
    for i in 0..=nkeys {
        off[i + 1] += off[i];
    }
    // Stable placement: ascending input index inside a key (the oracle's member order).
    let n_valid = off[nkeys] as usize;
    let mut recs = vec![BinnedSp::default(); n_valid];
    let mut next = off.clone();
    let n_r = cfg.n_r.max(1);
    for (i, &key) in keys.iter().enumerate() {
        if (key as usize) < nkeys {
            let slot = &mut next[key as usize];
            recs[*slot as usize] = k::binned(&sps[i], i as u32, key / n_r);
            *slot += 1;
        }
    }
    off.truncate(nkeys + 1);
    let r = recs.iter().map(|r| r.r).collect();
    let z = recs.iter().map(|r| r.z).collect();
    Grid { recs, r, z, off }
}

/// Per-thread scratch of one middle.
#[derive(Default)]
struct Scratch {
    bottoms: Vec<u32>,
    tops: Vec<u32>,
    lb: Vec<LinCircle>,
    lt: Vec<LinCircle>,
    /// Positions (into `tops`) of the tops with a finite |cot θ| <= `COT_LIMIT`, by cot θ.
    sorted: Vec<u32>,
    sorted_cot: Vec<f32>,
    /// Positions of the other tops (always tried).
    special: Vec<u32>,
    /// Positions of the tops to try for one bottom, in top order.
    pick: Vec<u32>,
    group: Vec<(f32, f32, f32, u32)>,
    candidates: Vec<Candidate>,
}

/// Seeds of an event and the stage counts, equal to [`super::cpu::seeds`] (bit for bit, same
/// order) on any number of threads. Runs on the current rayon pool.
pub fn seeds(cfg: &SeedingConfig, sps: &[SpacePoint]) -> (Vec<Seed>, SeedingStats) {
    let g = grid(cfg, sps);
    let n = g.recs.len();
    let parts: Vec<(Vec<Seed>, SeedingStats)> = (0..n.div_ceil(MIDDLES_PER_TASK))
        .into_par_iter()
        .map_init(Scratch::default, |s, task| {
            let mut out = Vec::new();
            let mut st = SeedingStats::default();
            let end = ((task + 1) * MIDDLES_PER_TASK).min(n);
            for p in task * MIDDLES_PER_TASK..end {
                middle(cfg, &g, p, s, &mut out, &mut st);
            }
            (out, st)
        })
        .collect();
    let mut st = SeedingStats {
        spacepoints: sps.len() as u64,
        valid: n as u64,
        invalid: (sps.len() - n) as u64,
        ..Default::default()
    };
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.0.len()).sum());
    for (seeds, s) in parts {
        out.extend_from_slice(&seeds);
        st.mid_bot += s.mid_bot;
        st.mid_top += s.mid_top;
        st.triplets += s.triplets;
    }
    st.seeds = out.len() as u64;
    (out, st)
}

/// Bound parameters of every seed ([`super::cpu::params`], in parallel).
pub fn params(cfg: &SeedingConfig, sps: &[SpacePoint], seeds: &[Seed]) -> Vec<BoundParams> {
    let pos = |i: u32| {
        let p = &sps[i as usize];
        [p.x, p.y, p.z]
    };
    seeds
        .par_iter()
        .with_min_len(1024)
        .map(|s| k::estimate_params(cfg.bfield, pos(s.bottom), pos(s.middle), pos(s.top)))
        .collect()
}

/// The doublet candidates of middle `m` in the oracle's order: neighbour bins in scan
/// order, then radius slices, then input index (one contiguous range of records per bin).
fn doublets(cfg: &SeedingConfig, g: &Grid, m: &BinnedSp, bottom: bool, out: &mut Vec<u32>) {
    if bottom {
        doublets_side::<true>(cfg, g, m, out)
    } else {
        doublets_side::<false>(cfg, g, m, out)
    }
}

/// Candidates tested at once by the `(r, z)` cuts (a mask, then the helix cut per set bit).
const LANES: usize = 16;

fn doublets_side<const BOTTOM: bool>(
    cfg: &SeedingConfig,
    g: &Grid,
    m: &BinnedSp,
    out: &mut Vec<u32>,
) {
    out.clear();
    let [wb, wt] = k::radial_windows(cfg, m.r);
    let (lo_r, hi_r) = if BOTTOM { wb } else { wt };
    let (s0, s1) = k::slice_range(cfg, lo_r, hi_r);
    if s0 >= s1 {
        return;
    }
    let nb = k::neighbour_bins(cfg, m.bin);
    let n_r = cfg.n_r as usize;
    let take = |at: usize, out: &mut Vec<u32>| {
        if k::doublet_helix_compatible(cfg, m, &g.recs[at]) {
            out.push(at as u32);
        }
    };
    for &ob in &nb.bins[..nb.len as usize] {
        let lo = g.off[ob as usize * n_r + s0 as usize] as usize;
        let hi = g.off[ob as usize * n_r + s1 as usize] as usize;
        let (r, z) = (&g.r[lo..hi], &g.z[lo..hi]);
        let full = r.len() / LANES * LANES;
        for base in (0..full).step_by(LANES) {
            let (rc, zc) = (&r[base..base + LANES], &z[base..base + LANES]);
            let mut mask = 0u32;
            for j in 0..LANES {
                mask |= (k::doublet_rz_compatible(cfg, m, rc[j], zc[j], BOTTOM) as u32) << j;
            }
            while mask != 0 {
                let j = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                take(lo + base + j, out);
            }
        }
        for j in full..r.len() {
            if k::doublet_rz_compatible(cfg, m, r[j], z[j], BOTTOM) {
                take(lo + j, out);
            }
        }
    }
}

/// The seeds of middle `p` (binned index), appended to `out` in the oracle's order.
fn middle(
    cfg: &SeedingConfig,
    g: &Grid,
    p: usize,
    s: &mut Scratch,
    out: &mut Vec<Seed>,
    st: &mut SeedingStats,
) {
    let m = &g.recs[p];
    doublets(cfg, g, m, true, &mut s.bottoms);
    if s.bottoms.is_empty() {
        return;
    }
    doublets(cfg, g, m, false, &mut s.tops);
    if s.tops.is_empty() {
        return;
    }
    st.mid_bot += s.bottoms.len() as u64;
    st.mid_top += s.tops.len() as u64;
    s.lb.clear();
    s.lb.extend(
        s.bottoms
            .iter()
            .map(|&b| k::transform_coordinates(m, &g.recs[b as usize], true)),
    );
    s.lt.clear();
    s.lt.extend(
        s.tops
            .iter()
            .map(|&t| k::transform_coordinates(m, &g.recs[t as usize], false)),
    );
    let tb = s.lt.iter().fold(TopBounds::EMPTY, |b, lt| b.with_top(lt));
    let n_top = s.tops.len();
    let sorted = n_top >= SORT_TOPS_MIN;
    if sorted {
        s.sorted.clear();
        s.special.clear();
        for (j, lt) in s.lt.iter().enumerate() {
            if lt.cot_theta.abs() <= COT_LIMIT {
                s.sorted.push(j as u32);
            } else {
                s.special.push(j as u32);
            }
        }
        let lt = &s.lt;
        s.sorted.sort_unstable_by(|&a, &b| {
            lt[a as usize]
                .cot_theta
                .total_cmp(&lt[b as usize].cot_theta)
        });
        s.sorted_cot.clear();
        s.sorted_cot
            .extend(s.sorted.iter().map(|&j| lt[j as usize].cot_theta));
    }
    s.candidates.clear();
    for (bi, lb) in s.lb.iter().enumerate() {
        let b = &g.recs[s.bottoms[bi] as usize];
        let (isin, scat) = k::bottom_scattering(cfg, lb);
        let threshold = k::triplet_reject_threshold(scat);
        let c1 = k::triplet_reject_bound(m, lb, &tb);
        s.pick.clear();
        if sorted && c1 < f32::INFINITY && lb.cot_theta.abs() <= COT_LIMIT {
            // `rejects(cot)` is false on one contiguous range of the sorted tops around
            // `lb.cot_theta` (monotone in |fl(lb.cot - cot)|, finite here).
            let rejects = |cot: f32| k::triplet_bound_rejects(c1, lb.cot_theta, cot, threshold);
            let cots = &s.sorted_cot;
            let mid = cots.partition_point(|&c| c < lb.cot_theta);
            let lo = cots[..mid].partition_point(|&c| rejects(c));
            let hi = mid + cots[mid..].partition_point(|&c| !rejects(c));
            s.pick.extend_from_slice(&s.sorted[lo..hi]);
            s.pick.extend_from_slice(&s.special);
            s.pick.sort_unstable();
        } else {
            s.pick.extend(0..n_top as u32);
        }
        s.group.clear();
        for &j in &s.pick {
            let lt = &s.lt[j as usize];
            if k::triplet_bound_rejects(c1, lb.cot_theta, lt.cot_theta, threshold)
                || k::triplet_surely_rejected(m, lb, lt, threshold)
            {
                continue;
            }
            if let Some((curv, impact)) = k::triplet_compatible(cfg, m, lb, lt, isin, scat) {
                let t = s.tops[j as usize];
                s.group
                    .push((curv, g.recs[t as usize].r, k::impact_weight(cfg, impact), t));
            }
        }
        st.triplets += s.group.len() as u64;
        let group = &s.group;
        for (j, gr) in group.iter().enumerate() {
            let w = k::updated_weight(cfg, j as u32, group.len() as u32, gr.2, |x| {
                (group[x as usize].0, group[x as usize].1)
            });
            let w = k::seed_weight(cfg, w, b.r, gr.1);
            if k::single_seed_cut(cfg, w, b.r) {
                s.candidates.push(Candidate {
                    weight: w,
                    key: [b.index, m.index, g.recs[gr.3 as usize].index],
                    r_bottom: b.r,
                    z_vertex: lb.zo,
                });
            }
        }
    }
    // The oracle's sort (same comparator, same input order: the same result, ties and NaN
    // weights included).
    s.candidates.sort_by(|a, b| {
        if k::seed_better(a, b) {
            std::cmp::Ordering::Less
        } else if k::seed_better(b, a) {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    });
    let keep = (cfg.max_seeds_per_spm as usize).min(k::MAX_SEEDS_PER_SPM_CAP as usize);
    for (j, c) in s.candidates.iter().take(keep).enumerate() {
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

/// Seeds, parameters and counts of one event (the CPU arm of [`crate::Backend::seed`]).
pub fn seed_event(cfg: &SeedingConfig, sps: &[SpacePoint]) -> super::SeedingOutput {
    let (seeds, stats) = seeds(cfg, sps);
    let params = params(cfg, sps, &seeds);
    super::SeedingOutput {
        seeds,
        params,
        stats,
    }
}

/// [`seed_event`] of every event, the events in parallel (and the middles of each).
pub fn seed_events(cfg: &SeedingConfig, events: &[&[SpacePoint]]) -> Vec<super::SeedingOutput> {
    events.par_iter().map(|sps| seed_event(cfg, sps)).collect()
}
