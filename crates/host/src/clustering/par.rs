//! The CPU backend's clustering: the oracle's result ([`super::cpu::cluster`], the same
//! cluster numbers, counts and module starts) on every core.
//!
//! The modules of every event of the batch (maximal runs of valid digis of one module id)
//! are independent: they are found per event in parallel, then clustered in parallel, each
//! writing only its own range of `clus`. Inside a module, instead of the oracle's hash maps
//! and breadth-first search: the module's pixels are sorted by `(x, y)` (duplicates are then
//! neighbours in that order and are dropped, every copy, as in the oracle); each pixel is
//! joined (union-find) with its already-seen 8-neighbours — the one before it in its row
//! and the three of the previous row, found with a pointer that only moves forward; the
//! clusters are then numbered in the order of their smallest digi index by one pass in digi
//! order, which is the oracle's numbering. The charge cut is applied in the same task.

use detkit_gpu::clustering::{INVALID_MODULE, NOT_CLUSTERED, NO_MODULE_START};
use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::par_timing::{busy, Busy, Timer};

use super::{ChargeCut, Clusters, ClustersMut, DigisRef, Geometry};

/// A module of an event: digis `start..end` (the first and one past the last of the run;
/// invalid digis inside are skipped), at `slot = e * modules + m`.
#[derive(Clone, Copy)]
struct Run {
    slot: usize,
    module: u16,
    start: usize,
    end: usize,
}

/// The runs of one event, in digi order.
fn runs(digis: DigisRef<'_>, s: usize, t: usize, e: usize, nm: usize, out: &mut Vec<Run>) {
    let mut cur: Option<Run> = None;
    for (i, &m) in digis.module[s..t].iter().enumerate() {
        let d = s + i;
        if m == INVALID_MODULE {
            continue;
        }
        match &mut cur {
            Some(r) if r.module == m => r.end = d + 1,
            _ => {
                if let Some(r) = cur.take() {
                    out.push(r);
                }
                cur = Some(Run {
                    slot: e * nm + m as usize,
                    module: m,
                    start: d,
                    end: d + 1,
                });
            }
        }
    }
    out.extend(cur);
}

/// Per-thread scratch of one module.
#[derive(Default)]
struct Scratch {
    /// `(x << 16 | y) << 32 | local index`, sorted.
    sorted: Vec<u64>,
    /// Local index of each digi of the run (`u32::MAX`: invalid digi or removed duplicate).
    parent: Vec<u32>,
    label: Vec<i32>,
    charge: Vec<u64>,
    /// The module's cluster numbers, written out at the end.
    ids: Vec<i32>,
}

fn find(parent: &mut [u32], mut i: u32) -> u32 {
    while parent[i as usize] != i {
        let p = parent[parent[i as usize] as usize];
        parent[i as usize] = p;
        i = p;
    }
    i
}

fn union(parent: &mut [u32], a: u32, b: u32) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        // The smaller root wins (any rule gives the same components).
        let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
        parent[hi as usize] = lo;
    }
}

/// Clusters one module (`clus` is its range `r.start..r.end`, every element written);
/// returns its number of clusters (after the cut, when given).
fn module(
    digis: DigisRef<'_>,
    r: &Run,
    clus: &mut [MaybeUninit<i32>],
    threshold: Option<u64>,
    s: &mut Scratch,
) -> u32 {
    const NONE: u32 = u32::MAX;
    let n = r.end - r.start;
    s.sorted.clear();
    s.parent.clear();
    s.parent.resize(n, NONE);
    for j in 0..n {
        let d = r.start + j;
        if digis.module[d] == r.module {
            let key = (digis.x[d] as u64) << 16 | digis.y[d] as u64;
            s.sorted.push(key << 32 | j as u64);
        }
    }
    s.sorted.sort_unstable();
    let key = |v: u64| (v >> 32) as u32;
    let local = |v: u64| v as u32;
    // Duplicates: every copy of a pixel that occurs twice or more is dropped.
    let m = s.sorted.len();
    let mut w = 0;
    let mut i = 0;
    while i < m {
        let mut j = i + 1;
        while j < m && key(s.sorted[j]) == key(s.sorted[i]) {
            j += 1;
        }
        if j == i + 1 {
            s.sorted[w] = s.sorted[i];
            s.parent[local(s.sorted[i]) as usize] = local(s.sorted[i]);
            w += 1;
        }
        i = j;
    }
    s.sorted.truncate(w);
    // Union with the neighbours already seen: (x, y - 1) and (x - 1, y - 1 ..= y + 1).
    let mut p = 0;
    for i in 0..s.sorted.len() {
        let k = key(s.sorted[i]);
        let (x, y) = (k >> 16, k & 0xffff);
        let li = local(s.sorted[i]);
        if i > 0 && y > 0 && key(s.sorted[i - 1]) == k - 1 {
            union(&mut s.parent, li, local(s.sorted[i - 1]));
        }
        if x > 0 {
            let lo = (x - 1) << 16 | y.saturating_sub(1);
            let hi = (x - 1) << 16 | (y + 1);
            while p < i && key(s.sorted[p]) < lo {
                p += 1;
            }
            let mut q = p;
            while q < i && key(s.sorted[q]) <= hi {
                union(&mut s.parent, li, local(s.sorted[q]));
                q += 1;
            }
        }
    }
    // Numbers in the order of each cluster's smallest digi index.
    s.label.clear();
    s.label.resize(n, NOT_CLUSTERED);
    s.ids.clear();
    s.ids.resize(n, NOT_CLUSTERED);
    let mut next = 0i32;
    for j in 0..n {
        if s.parent[j] == NONE {
            continue;
        }
        let root = find(&mut s.parent, j as u32) as usize;
        if s.label[root] == NOT_CLUSTERED {
            s.label[root] = next;
            next += 1;
        }
        s.ids[j] = s.label[root];
    }
    let Some(threshold) = threshold else {
        write_out(clus, &s.ids);
        return next as u32;
    };
    s.charge.clear();
    s.charge.resize(next as usize, 0);
    for (j, &c) in s.ids.iter().enumerate() {
        if c >= 0 {
            s.charge[c as usize] += digis.adc[r.start + j] as u64;
        }
    }
    // Renumber the kept clusters in order (reusing `label` as the map).
    let mut kept = 0;
    s.label.clear();
    for &q in &s.charge {
        if q >= threshold {
            s.label.push(kept);
            kept += 1;
        } else {
            s.label.push(NOT_CLUSTERED);
        }
    }
    for c in s.ids.iter_mut() {
        if *c >= 0 {
            *c = s.label[*c as usize];
        }
    }
    write_out(clus, &s.ids);
    kept as u32
}

/// Writes `v` to `out` (as long).
fn write_out(out: &mut [MaybeUninit<i32>], v: &[i32]) {
    for (o, &x) in out.iter_mut().zip(v) {
        o.write(x);
    }
}

/// Writes `x` to every element of `out`.
fn fill(out: &mut [MaybeUninit<i32>], x: i32) {
    for o in out {
        o.write(x);
    }
}

/// Digis per task of the run pass.
const RUN_PIECE: usize = 1 << 14;

/// Module groups per thread (see [`cluster_into_slices`]): enough for the work stealing to
/// even out the groups' costs.
const GROUPS_PER_THREAD: usize = 32;

/// The smallest group, in digis (a Run-3 module holds about 60: a group of small modules
/// is still worth a task).
const MIN_GROUP_DIGIS: usize = 2048;

/// The runs of every event, in digi order: found in pieces of [`RUN_PIECE`] digis in
/// parallel (not event by event: a batch of a few large events would leave cores idle), a
/// run cut by a piece boundary joined again (consecutive runs of one slot are one run).
fn all_runs(digis: DigisRef<'_>, event_offsets: &[u32], nm: usize) -> Vec<Run> {
    let n = digis.len();
    let per_piece: Vec<Vec<Run>> = (0..n.div_ceil(RUN_PIECE))
        .into_par_iter()
        .map(|p| {
            busy(Busy::ClusterRuns, || {
                let (lo, hi) = (p * RUN_PIECE, ((p + 1) * RUN_PIECE).min(n));
                // The event of digi `lo` (`event_offsets` ends at `n > lo`).
                let mut e = event_offsets.partition_point(|&o| o as usize <= lo) - 1;
                let mut v = Vec::new();
                let mut d = lo;
                while d < hi {
                    while event_offsets[e + 1] as usize <= d {
                        e += 1;
                    }
                    let end = (event_offsets[e + 1] as usize).min(hi);
                    runs(digis, d, end, e, nm, &mut v);
                    d = end;
                }
                v
            })
        })
        .collect();
    let mut all: Vec<Run> = Vec::with_capacity(per_piece.iter().map(Vec::len).sum());
    for r in per_piece.into_iter().flatten() {
        match all.last_mut() {
            Some(last) if last.slot == r.slot => last.end = r.end,
            _ => all.push(r),
        }
    }
    all
}

/// Clusters every event (`event_offsets[e] .. event_offsets[e + 1]`) and applies `cut`,
/// equal to [`super::cpu::cluster`]. Runs on the current rayon pool. The input must have
/// passed [`super::validate`].
pub fn cluster<'a>(
    digis: impl Into<DigisRef<'a>>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: Option<ChargeCut>,
) -> Clusters {
    let mut out = Clusters::default();
    cluster_into(digis, event_offsets, geometry, cut, &mut out);
    out
}

/// [`cluster`] into `out`, whose vectors are reused: a batch no larger than the last one
/// allocates nothing and touches no fresh page. `clus` is written once, by the workers (no
/// thread fills it first; fresh memory is first touched, and zeroed by the kernel, by the
/// workers, in 2 MiB pages where the kernel allows).
pub fn cluster_into<'a>(
    digis: impl Into<DigisRef<'a>>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: Option<ChargeCut>,
    out: &mut Clusters,
) {
    let digis = digis.into();
    let n = digis.len();
    let slots = event_offsets.len().saturating_sub(1) * geometry.modules as usize;
    let mut timer = Timer::start();
    out.clus.clear();
    if out.clus.capacity() < n {
        out.clus = Vec::with_capacity(n);
        crate::mem::huge_pages(&mut out.clus);
    }
    out.clus_in_module.resize(slots, 0);
    out.module_first.resize(slots, 0);
    out.modules = geometry.modules as usize;
    out.medium_modules = 0;
    out.fallback_modules = 0;
    timer.mark("clustering: alloc");
    cluster_core(
        digis,
        event_offsets,
        geometry,
        cut,
        &mut out.clus.spare_capacity_mut()[..n],
        &mut out.clus_in_module,
        &mut out.module_first,
    );
    // SAFETY: `cluster_core` wrote every one of the first `n` elements (see there).
    unsafe { out.clus.set_len(n) };
}

/// [`cluster`] into the caller's arrays (of the digi count, and `events × modules` twice):
/// every element is written. The lengths must be right (the backend checks them).
pub fn cluster_into_slices(
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: Option<ChargeCut>,
    out: ClustersMut<'_>,
) {
    let clus: *mut [i32] = out.clus;
    // SAFETY: `MaybeUninit<i32>` has the layout of `i32`, and the slice stays initialised:
    // `cluster_core` only writes initialised values into it (it never de-initialises).
    let clus = unsafe { &mut *(clus as *mut [MaybeUninit<i32>]) };
    cluster_core(
        digis,
        event_offsets,
        geometry,
        cut,
        clus,
        out.clus_in_module,
        out.module_first,
    );
}

/// The clustering into `clus` (one per digi; every element is written) and the per-slot
/// arrays (`events × modules`; every element written).
fn cluster_core(
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: Option<ChargeCut>,
    clus: &mut [MaybeUninit<i32>],
    clus_in_module: &mut [u32],
    module_first: &mut [u32],
) {
    let n = digis.len();
    let nm = geometry.modules as usize;
    assert_eq!(clus.len(), n, "clus: one per digi");
    let mut timer = Timer::start();
    let all = all_runs(digis, event_offsets, nm);
    timer.mark("clustering: runs");
    // Each run's own range of `clus`, with the digis before it that no run holds (invalid
    // digis, between runs), which its task marks unclustered: every digi is written once,
    // by the task that reads its neighbours, and no thread fills the array first.
    //
    // The tasks are groups of consecutive modules of about equal digi counts (a module's
    // cost grows with its digis, and the inner layers' modules of a dense event hold tens
    // of times more than the outer ones: groups of a fixed number of modules leave workers
    // idle behind the inner layers' groups).
    type Part<'r, 'c> = (&'r Run, usize, &'c mut [MaybeUninit<i32>], u32);
    let mut parts: Vec<Part<'_, '_>> = Vec::with_capacity(all.len());
    let mut rest: &mut [MaybeUninit<i32>] = clus;
    let mut at = 0;
    for r in &all {
        let (mine, tail) = rest.split_at_mut(r.end - at);
        parts.push((r, r.start - at, mine, 0));
        rest = tail;
        at = r.end;
    }
    // After the last run: invalid digis only.
    fill(rest, NOT_CLUSTERED);
    let target = (n / (rayon::current_num_threads() * GROUPS_PER_THREAD)).max(MIN_GROUP_DIGIS);
    let mut groups: Vec<&mut [Part<'_, '_>]> = Vec::new();
    let mut rest: &mut [Part<'_, '_>] = &mut parts;
    while !rest.is_empty() {
        let mut k = 0;
        let mut digis_in = 0;
        while k < rest.len() && (k == 0 || digis_in < target) {
            digis_in += rest[k].2.len();
            k += 1;
        }
        let (g, tail) = rest.split_at_mut(k);
        groups.push(g);
        rest = tail;
    }
    groups
        .into_par_iter()
        .for_each_init(Scratch::default, |s, g| {
            busy(Busy::ClusterModules, || {
                for (r, gap, c, count) in g.iter_mut() {
                    let (before, c) = c.split_at_mut(*gap);
                    fill(before, NOT_CLUSTERED);
                    let threshold = cut.map(|cut| cut.threshold(geometry, r.module) as u64);
                    *count = module(digis, r, c, threshold, s);
                }
            })
        });
    timer.mark("clustering: modules");
    clus_in_module.fill(0);
    module_first.fill(NO_MODULE_START);
    for &(r, _, _, c) in &parts {
        clus_in_module[r.slot] = c;
        module_first[r.slot] = r.start as u32;
    }
    timer.mark("clustering: tail");
}
