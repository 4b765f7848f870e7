//! CPU oracle of CMS pixel clustering: plain 8-connected component labelling per module by
//! breadth-first search over a map of the module's pixels, independent of the GPU's
//! bucket/union-find structure, then the numbering rule and the charge cut.
//!
//! Rules (the same as the GPU's, see `detkit_gpu::clustering`):
//! - a module is a maximal run of valid digis of one module id within an event (invalid
//!   digis inside the run are skipped);
//! - every copy of a pixel `(x, y)` that occurs two or more times in the module is removed
//!   (CMSSW's duplicate removal, without its `msize − 1` quirk);
//! - clusters are numbered in increasing order of their smallest digi index;
//! - the charge cut keeps clusters with `Σ adc >= threshold` and renumbers them in order.
//!
//! The input must have passed [`super::validate`].

use std::collections::{HashMap, VecDeque};

use detkit_gpu::clustering::{INVALID_MODULE, NOT_CLUSTERED, NO_MODULE_START};

use super::{ChargeCut, Clusters, DigisRef, Geometry};

/// Clusters every event (`event_offsets[e] .. event_offsets[e + 1]`), without charge cut.
pub fn find_clusters<'a>(
    digis: impl Into<DigisRef<'a>>,
    event_offsets: &[u32],
    geometry: &Geometry,
) -> Clusters {
    let digis = digis.into();
    let n = digis.len();
    let nevents = event_offsets.len().saturating_sub(1);
    let nm = geometry.modules as usize;
    let mut out = Clusters {
        clus: vec![NOT_CLUSTERED; n],
        clus_in_module: vec![0; nevents * nm],
        module_first: vec![NO_MODULE_START; nevents * nm],
        modules: nm,
        medium_modules: 0,
        fallback_modules: 0,
    };
    for e in 0..nevents {
        let (s, t) = (event_offsets[e] as usize, event_offsets[e + 1] as usize);
        // Runs of valid digis of one module id.
        let mut runs: Vec<(u16, Vec<usize>)> = Vec::new();
        for (d, &m) in digis.module.iter().enumerate().take(t).skip(s) {
            if m == INVALID_MODULE {
                continue;
            }
            match runs.last_mut() {
                Some((rm, members)) if *rm == m => members.push(d),
                _ => runs.push((m, vec![d])),
            }
        }
        for (m, members) in runs {
            let slot = e * nm + m as usize;
            out.module_first[slot] = members[0] as u32;
            let pixel = |d: usize| (digis.x[d], digis.y[d]);
            let mut copies: HashMap<(u16, u16), u32> = HashMap::new();
            for &d in &members {
                *copies.entry(pixel(d)).or_default() += 1;
            }
            let kept: Vec<usize> = members
                .iter()
                .copied()
                .filter(|&d| copies[&pixel(d)] == 1)
                .collect();
            let at: HashMap<(u16, u16), usize> = kept.iter().map(|&d| (pixel(d), d)).collect();
            let mut next = 0i32;
            // `kept` is in increasing digi order: each search starts at its cluster's
            // smallest digi, so numbers follow the smallest digi index.
            for &start in &kept {
                if out.clus[start] != NOT_CLUSTERED {
                    continue;
                }
                out.clus[start] = next;
                let mut queue = VecDeque::from([start]);
                while let Some(d) = queue.pop_front() {
                    let (x, y) = (digis.x[d] as i32, digis.y[d] as i32);
                    for dy in -1..=1 {
                        for dx in -1..=1 {
                            let (nx, ny) = (x + dx, y + dy);
                            if nx < 0 || ny < 0 {
                                continue;
                            }
                            if let Some(&o) = at.get(&(nx as u16, ny as u16)) {
                                if out.clus[o] == NOT_CLUSTERED {
                                    out.clus[o] = next;
                                    queue.push_back(o);
                                }
                            }
                        }
                    }
                }
                next += 1;
            }
            out.clus_in_module[slot] = next as u32;
        }
    }
    out
}

/// Removes clusters whose summed `adc` is below the module's threshold and renumbers the
/// others consecutively in their previous order.
pub fn charge_cut<'a>(
    digis: impl Into<DigisRef<'a>>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: ChargeCut,
    clusters: &mut Clusters,
) {
    let digis = digis.into();
    let nm = geometry.modules as usize;
    for e in 0..event_offsets.len().saturating_sub(1) {
        let (s, t) = (event_offsets[e] as usize, event_offsets[e + 1] as usize);
        let mut charge: HashMap<u16, Vec<u64>> = HashMap::new();
        for d in s..t {
            let c = clusters.clus[d];
            if c >= 0 {
                let m = digis.module[d];
                let n = clusters.clus_in_module[e * nm + m as usize] as usize;
                charge.entry(m).or_insert_with(|| vec![0; n])[c as usize] += digis.adc[d] as u64;
            }
        }
        let mut renumber: HashMap<u16, Vec<i32>> = HashMap::new();
        for (m, sums) in charge {
            let threshold = cut.threshold(geometry, m) as u64;
            let mut next = 0;
            let map: Vec<i32> = sums
                .iter()
                .map(|&q| {
                    if q >= threshold {
                        next += 1;
                        next - 1
                    } else {
                        NOT_CLUSTERED
                    }
                })
                .collect();
            clusters.clus_in_module[e * nm + m as usize] = next as u32;
            renumber.insert(m, map);
        }
        for d in s..t {
            let c = clusters.clus[d];
            if c >= 0 {
                clusters.clus[d] = renumber[&digis.module[d]][c as usize];
            }
        }
    }
}

/// [`find_clusters`] then, unless `cut` is `None`, [`charge_cut`].
pub fn cluster<'a>(
    digis: impl Into<DigisRef<'a>>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: Option<ChargeCut>,
) -> Clusters {
    let digis = digis.into();
    let mut c = find_clusters(digis, event_offsets, geometry);
    if let Some(cut) = cut {
        charge_cut(digis, event_offsets, geometry, cut, &mut c);
    }
    c
}
