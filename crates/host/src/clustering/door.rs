//! The clustering workspace a [`crate::Backend`] keeps between calls: device digis, one
//! cached [`Clusterer`] per geometry and call shape, and pinned staging; the host-path call
//! that uses them.

use std::sync::Arc;

use detkit_gpu::clustering as k;

use super::cuda::{ClusterQueue, ClusterStaging, Clusterer, DeviceDigis, MAX_EVENTS_PER_LAUNCH};
use super::{
    validate_digis, validate_digis_at, validate_shape, ChargeCut, ClusterCounts, Clusters,
    ClustersMut, DigisRef, Geometry,
};
use crate::cuda::GpuContext;
use crate::error::Result;
use crate::phases::{self, Phase};
use crate::staging::{upload_into, HostCopies};

/// Most clusterers kept (geometries × call shapes); the oldest goes first.
const MAX_CLUSTERERS: usize = 4;

/// The clustering workspace of one stream.
pub(crate) struct ClusterWorkspace {
    gpu: Arc<GpuContext>,
    /// Clusterers with their device digis, most recently used last.
    clusterers: Vec<(Clusterer, DeviceDigis)>,
    stage: ClusterStaging,
    /// The queue of [`ClusterWorkspace::cluster_batches`]: its geometry, cut and capacity
    /// (digis, events per batch).
    queue: Option<BatchQueue>,
    /// The device-view calls' consecutive-digis check: `[bad, run counts…]`.
    check: Option<crate::cuda::DeviceBuffer<u32>>,
}

/// A batch queue with its geometry, cut and capacity (digis, events per batch).
type BatchQueue = (Geometry, Option<ChargeCut>, (usize, usize), ClusterQueue);

/// Where a call's results go.
pub(crate) enum Out<'a> {
    /// Vectors, resized.
    Clusters(&'a mut Clusters),
    /// The caller's arrays (lengths checked).
    Slices(ClustersMut<'a>),
}

/// Lanes of the batch queue: one batch uploading, one running, one coming back.
const QUEUE_LANES: usize = 3;

/// Whether a batch of `events` events takes the latency settings (a `Clusterer` sized for
/// at most [`k::FEW_EVENTS_PER_LAUNCH`] events chooses them).
fn few(events: usize) -> bool {
    events <= k::FEW_EVENTS_PER_LAUNCH as usize
}

/// A capacity grown to hold `need`: at least half again the old one, so that slowly growing
/// batches reallocate rarely.
fn grown(need: usize, old: usize) -> usize {
    need.max(old + old / 2)
}

impl ClusterWorkspace {
    pub(crate) fn new(gpu: &GpuContext) -> Result<Self> {
        Ok(Self {
            gpu: crate::workspace::fork(gpu)?,
            clusterers: Vec::new(),
            stage: ClusterStaging::default(),
            queue: None,
            check: None,
        })
    }

    /// Validates and clusters a batch into `out`. Allocates only when the batch is larger than
    /// any before it (or a new geometry or call shape comes).
    pub(crate) fn cluster(
        &mut self,
        digis: DigisRef<'_>,
        event_offsets: &[u32],
        geometry: &Geometry,
        cut: Option<ChargeCut>,
        copies: HostCopies,
        out: Out<'_>,
    ) -> Result<ClusterCounts> {
        phases::begin();
        let (n, ne) = check_batch(digis, event_offsets, geometry)?;
        self.select_clusterer(n, ne, geometry)?;
        let g = &self.gpu;
        let (c, d) = self.clusterers.last_mut().expect("selected above");
        phases::mark(Phase::Prepare);
        let stage = match copies {
            HostCopies::Pinned => Some(&mut self.stage),
            HostCopies::Pageable => None,
        };
        let staged = match stage {
            Some(st) => {
                // The validation's threads fill the pinned buffer as they check, and each
                // wave goes to the device while the next is checked.
                let pin = st.digis_buffer(g, n)?;
                let mut dst = d.arrays_mut();
                let mut sink = |wave: [&[u16]; 4], r: std::ops::Range<usize>| -> Result<()> {
                    for (src, dst) in wave.into_iter().zip(dst.iter_mut()) {
                        upload_into(g, src, &mut dst.slice_mut(r.clone()), None)?;
                    }
                    Ok(())
                };
                if let Err(e) =
                    validate_digis(digis, event_offsets, geometry, Some((pin, &mut sink)))
                {
                    // The waves sent before the error finish before the stage is reused or
                    // freed.
                    let _ = g.synchronize();
                    return Err(e);
                }
                phases::mark(Phase::Validate);
                d.copy_in(g, digis, event_offsets, Some(&mut *st), true)?;
                phases::mark_gpu(Phase::Upload, g);
                Some(st)
            }
            None => {
                validate_digis(digis, event_offsets, geometry, None)?;
                phases::mark(Phase::Validate);
                d.copy_in(g, digis, event_offsets, None, false)?;
                phases::mark_gpu(Phase::Upload, g);
                None
            }
        };
        c.run_graph(d, cut)?;
        phases::mark_gpu(Phase::Kernels, g);
        let (medium_modules, fallback_modules) = match out {
            Out::Clusters(o) => {
                c.download_results(d, o, staged)?;
                (o.medium_modules, o.fallback_modules)
            }
            Out::Slices(s) => c.download_results_to(d, s, staged)?,
        };
        Ok(ClusterCounts {
            medium_modules,
            fallback_modules,
        })
    }

    /// Puts the clusterer of this geometry and call shape (`ne` events) with its device
    /// digis last in the list, made or grown to hold `n` digis and `ne` events.
    pub(crate) fn select_clusterer(
        &mut self,
        n: usize,
        ne: usize,
        geometry: &Geometry,
    ) -> Result<()> {
        // The clusterer of this geometry and call shape with its device digis (of the same
        // capacity: a clusterer's captured graph serves any batch up to the digis'
        // capacity), grown when the batch is larger.
        let shape = few(ne);
        let found = self
            .clusterers
            .iter()
            .position(|(c, _)| c.geometry() == geometry && few(c.capacity().1) == shape);
        // The capacity of a new clusterer, when none of this shape fits.
        let make = match found {
            Some(i) => {
                let (cn, ce) = self.clusterers[i].0.capacity();
                let entry = self.clusterers.remove(i);
                if n <= cn && ne <= ce {
                    self.clusterers.push(entry);
                    None
                } else {
                    Some((grown(n, cn), grown(ne, ce)))
                }
            }
            None => {
                if self.clusterers.len() >= MAX_CLUSTERERS {
                    self.clusterers.remove(0);
                }
                Some((n, ne))
            }
        };
        if let Some((digis, events)) = make {
            let events = if shape {
                k::FEW_EVENTS_PER_LAUNCH as usize
            } else {
                events.min(MAX_EVENTS_PER_LAUNCH)
            };
            let c = Clusterer::new(&self.gpu, geometry, digis, events)?;
            let d = DeviceDigis::with_capacity(&self.gpu, digis, events)?;
            self.clusterers.push((c, d));
        }
        Ok(())
    }

    /// The clusterer and device digis of the last [`ClusterWorkspace::select_clusterer`],
    /// the workspace's context, its pinned staging and the device-view check's buffer.
    #[allow(clippy::type_complexity)]
    pub(crate) fn selected(
        &mut self,
    ) -> (
        &mut Clusterer,
        &mut DeviceDigis,
        &GpuContext,
        &mut ClusterStaging,
        &mut Option<crate::cuda::DeviceBuffer<u32>>,
    ) {
        let (c, d) = self.clusterers.last_mut().expect("select_clusterer first");
        (c, d, &self.gpu, &mut self.stage, &mut self.check)
    }

    /// Validates and clusters many batches through the queue's lanes (each batch's upload,
    /// chain and download on its lane's stream, the host validating the next batch
    /// meanwhile); `sink` gets every batch's results in order.
    pub(crate) fn cluster_batches(
        &mut self,
        batches: &[(DigisRef<'_>, &[u32])],
        geometry: &Geometry,
        cut: Option<ChargeCut>,
        sink: &mut dyn FnMut(usize, &Clusters) -> Result<()>,
    ) -> Result<()> {
        for (d, o) in batches {
            validate_shape(*d, o, geometry)?;
        }
        if batches.is_empty() {
            return Ok(());
        }
        let need = batches.iter().fold((0, 0), |(n, e), (d, o)| {
            (n.max(d.len()), e.max(o.len() - 1))
        });
        if need.1 > MAX_EVENTS_PER_LAUNCH {
            return Err(crate::Error::CapacityExceeded {
                what: "events per launch",
                needed: need.1 as u64,
                capacity: MAX_EVENTS_PER_LAUNCH as u64,
            });
        }
        let fits =
            |q: &BatchQueue| q.0 == *geometry && q.1 == cut && need.0 <= q.2 .0 && need.1 <= q.2 .1;
        if !self.queue.as_ref().is_some_and(fits) {
            let old = self.queue.as_ref().map_or((0, 0), |q| q.2);
            self.queue = None;
            let caps = (
                grown(need.0, old.0),
                grown(need.1, old.1).min(MAX_EVENTS_PER_LAUNCH),
            );
            let q = ClusterQueue::shared(&self.gpu, QUEUE_LANES, geometry, caps.0, caps.1, cut)?;
            self.queue = Some((geometry.clone(), cut, caps, q));
        }
        let q = &mut self.queue.as_mut().expect("made above").3;
        // The sink gets indices into this call's `batches`: number the submissions from 0.
        q.restart();
        let r = (|| {
            for (d, o) in batches {
                if let Some((id, c)) = q.submit_validated(*d, o, geometry)? {
                    sink(id as usize, &c)?;
                }
            }
            for (id, c) in q.finish()? {
                sink(id as usize, &c)?;
            }
            Ok(())
        })();
        if r.is_err() {
            // Batches still in flight are waited for and dropped; the queue starts again.
            let _ = q.finish();
            q.restart();
        }
        r
    }
}

/// Events and digis from which a pinned-staging call runs as sub-batches on two workspaces
/// ([`cluster_split`]); smaller calls are one batch.
const SPLIT_MIN_EVENTS: usize = 8;
const SPLIT_MIN_DIGIS: usize = 1 << 20;

/// The sub-batches [`cluster_split`] makes of a call of `n` digis in `ne` events, as weights
/// of its digis (one weight: the call is one batch, [`ClusterWorkspace::cluster`]): the last
/// part small, since its kernels and copy out are all that run after the host's checks. By
/// the measuring variant (see docs/benchmarks.md, section "door"): 1 and 10 one batch (the
/// earlier paths), 11 two equal parts, 12 eight, 13 six, 15 four; otherwise 2 : 2 : 2 : 1 : 1.
pub(crate) fn split_weights(n: usize, ne: usize, copies: HostCopies) -> &'static [usize] {
    if copies != HostCopies::Pinned || ne < SPLIT_MIN_EVENTS || n < SPLIT_MIN_DIGIS {
        return &[1];
    }
    match phases::variant() {
        1 | 10 => &[1],
        11 => &[1, 1],
        12 => &[1; 8],
        13 => &[1; 6],
        15 => &[1; 4],
        _ => &[2, 2, 2, 1, 1],
    }
}

/// Ends (event indices, increasing, the last `ne`) of sub-batches whose digi counts follow
/// `weights` as closely as whole events allow, each of at least one event (at most `ne`
/// parts: weights past the event count are dropped).
fn split_ends(event_offsets: &[u32], weights: &[usize]) -> Vec<usize> {
    let ne = event_offsets.len() - 1;
    let parts = weights.len().min(ne).max(1);
    let weights = &weights[..parts];
    let wsum: u64 = weights.iter().map(|&w| w as u64).sum::<u64>().max(1);
    let n = event_offsets[ne] as u64;
    let mut ends = Vec::with_capacity(parts);
    let (mut prev, mut wacc) = (0usize, 0u64);
    for (k, &w) in weights.iter().enumerate().take(parts - 1) {
        wacc += w as u64;
        let target = (n * wacc / wsum) as u32;
        let e = event_offsets
            .partition_point(|&o| o < target)
            .clamp(prev + 1, ne - (parts - 1 - k));
        ends.push(e);
        prev = e;
    }
    ends.push(ne);
    ends
}

/// A batch clustered as sub-batches of whole events (`weights`: [`split_weights`]) on two workspaces, taking
/// turns: sub-batch k is validated, staged and uploaded, its graph launched and its results'
/// copy out queued, all on its workspace's stream, while sub-batch k - 1's kernels run on
/// the other's; its results are copied into `out` once sub-batch k + 1 is under way. Each
/// event is clustered on its own either way, so the results equal the one-batch call's
/// ([`ClusterWorkspace::cluster`]): the first digi of each module moved by the sub-batch's
/// first digi, the module counts summed; an error is the first bad digi's, named by its
/// index in the whole batch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cluster_split(
    ws: [&mut ClusterWorkspace; 2],
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: Option<ChargeCut>,
    weights: &[usize],
    out: Out<'_>,
) -> Result<ClusterCounts> {
    phases::begin();
    let (n, ne) = check_batch(digis, event_offsets, geometry)?;
    let slots = ne * geometry.modules as usize;
    match out {
        Out::Clusters(o) => {
            o.clus.resize(n, 0);
            o.clus_in_module.resize(slots, 0);
            o.module_first.resize(slots, 0);
            o.modules = geometry.modules as usize;
            let c = split_into(ws, digis, event_offsets, geometry, cut, weights, o.as_mut())?;
            o.medium_modules = c.medium_modules;
            o.fallback_modules = c.fallback_modules;
            Ok(c)
        }
        Out::Slices(s) => split_into(ws, digis, event_offsets, geometry, cut, weights, s),
    }
}

/// The checks every door call makes before any work: the arrays' shape and event offsets,
/// and the events-per-launch capacity. Returns `(digis, events)`.
fn check_batch(
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
) -> Result<(usize, usize)> {
    validate_shape(digis, event_offsets, geometry)?;
    let (n, ne) = (digis.len(), event_offsets.len() - 1);
    if ne > MAX_EVENTS_PER_LAUNCH {
        return Err(crate::Error::CapacityExceeded {
            what: "events per launch",
            needed: ne as u64,
            capacity: MAX_EVENTS_PER_LAUNCH as u64,
        });
    }
    Ok((n, ne))
}

/// The sub-batch of events `e0..e1` that a workspace is running.
#[derive(Clone, Copy)]
struct Part {
    e0: usize,
    e1: usize,
}

fn split_into(
    ws: [&mut ClusterWorkspace; 2],
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: Option<ChargeCut>,
    weights: &[usize],
    out: ClustersMut<'_>,
) -> Result<ClusterCounts> {
    let ends = split_ends(event_offsets, weights);
    let m = geometry.modules as usize;
    let ClustersMut {
        clus,
        clus_in_module,
        module_first,
    } = out;
    // What is left of the outputs: the parts are finished in order, each taking the front.
    let mut rest = (clus, clus_in_module, module_first);
    let mut counts = ClusterCounts::default();
    let mut running: [Option<Part>; 2] = [None, None];
    let mut rebased: Vec<u32> = Vec::new();
    let [w0, w1] = ws;
    let mut ws = [w0, w1];
    let r = (|| -> Result<()> {
        let mut finish = |w: &mut ClusterWorkspace, p: Part| -> Result<()> {
            let lo = event_offsets[p.e0] as usize;
            let nd = event_offsets[p.e1] as usize - lo;
            let sl = (p.e1 - p.e0) * m;
            let (clus, r0) = std::mem::take(&mut rest.0).split_at_mut(nd);
            let (cim, r1) = std::mem::take(&mut rest.1).split_at_mut(sl);
            let (mf, r2) = std::mem::take(&mut rest.2).split_at_mut(sl);
            rest = (r0, r1, r2);
            let (c, d) = w.clusterers.last_mut().expect("started");
            let (medium, fallback) = c.finish_results_to(
                d,
                &mut w.stage,
                ClustersMut {
                    clus,
                    clus_in_module: cim,
                    module_first: &mut *mf,
                },
            )?;
            if lo > 0 {
                let lo = lo as u32;
                for v in mf.iter_mut().filter(|v| **v != u32::MAX) {
                    *v += lo;
                }
            }
            counts.medium_modules += medium;
            counts.fallback_modules += fallback;
            Ok(())
        };
        let mut e0 = 0;
        for (k, &e1) in ends.iter().enumerate() {
            let w = &mut *ws[k % 2];
            if let Some(p) = running[k % 2].take() {
                finish(w, p)?;
            }
            let (lo, hi) = (event_offsets[e0] as usize, event_offsets[e1] as usize);
            let sub = DigisRef {
                module: &digis.module[lo..hi],
                x: &digis.x[lo..hi],
                y: &digis.y[lo..hi],
                adc: &digis.adc[lo..hi],
            };
            rebased.clear();
            rebased.extend(event_offsets[e0..=e1].iter().map(|&o| o - lo as u32));
            start_part(w, sub, &rebased, geometry, cut, lo)?;
            running[k % 2] = Some(Part { e0, e1 });
            e0 = e1;
        }
        for k in ends.len()..ends.len() + 2 {
            if let Some(p) = running[k % 2].take() {
                finish(&mut *ws[k % 2], p)?;
            }
        }
        Ok(())
    })();
    if let Err(e) = r {
        // Copies still in flight (out of pinned staging) finish before the stage is reused.
        for w in ws {
            let _ = w.gpu.synchronize();
        }
        return Err(e);
    }
    Ok(counts)
}

/// Validates the sub-batch `digis` (digis `base..` of the call) into `w`'s pinned stage,
/// each wave sent to the device as it is checked, then launches its graph and queues its
/// results' copy out, without waiting.
fn start_part(
    w: &mut ClusterWorkspace,
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: Option<ChargeCut>,
    base: usize,
) -> Result<()> {
    let (n, ne) = (digis.len(), event_offsets.len() - 1);
    w.select_clusterer(n, ne, geometry)?;
    let g = &w.gpu;
    let (c, d) = w.clusterers.last_mut().expect("selected above");
    let st = &mut w.stage;
    let pin = st.digis_buffer(g, n)?;
    let mut dst = d.arrays_mut();
    let mut sink = |wave: [&[u16]; 4], r: std::ops::Range<usize>| -> Result<()> {
        for (src, dst) in wave.into_iter().zip(dst.iter_mut()) {
            upload_into(g, src, &mut dst.slice_mut(r.clone()), None)?;
        }
        Ok(())
    };
    validate_digis_at(digis, event_offsets, geometry, Some((pin, &mut sink)), base)?;
    phases::mark(Phase::Validate);
    d.copy_in(g, digis, event_offsets, Some(&mut *st), true)?;
    phases::mark(Phase::Upload);
    c.run_graph(d, cut)?;
    c.enqueue_results(d, st)?;
    phases::mark(Phase::Kernels);
    Ok(())
}

/// A clustering call on a backend's workspaces: as sub-batches on two of them
/// ([`cluster_split`]) when [`split_weights`] says so, else one batch on one.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cluster_call(
    pool: &crate::workspace::Pool<ClusterWorkspace>,
    gpu: &GpuContext,
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: Option<ChargeCut>,
    copies: HostCopies,
    out: Out<'_>,
) -> Result<ClusterCounts> {
    let ne = event_offsets.len().saturating_sub(1);
    let weights = split_weights(digis.len(), ne, copies);
    if weights.len() <= 1 {
        pool.run(
            gpu,
            || ClusterWorkspace::new(gpu),
            |w| w.cluster(digis, event_offsets, geometry, cut, copies, out),
        )
    } else {
        pool.run_two(
            gpu,
            || ClusterWorkspace::new(gpu),
            |a, b| cluster_split([a, b], digis, event_offsets, geometry, cut, weights, out),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::split_ends;

    /// Parts of whole events, each of at least one event, increasing, the last ending at the
    /// event count; about equal digi counts when the events allow it.
    #[test]
    fn split_ends_cover_every_event() {
        let cases: Vec<Vec<u32>> = vec![
            (0..=8).map(|e| e * 100).collect(),
            (0..=64).map(|e| e * 1000).collect(),
            // One huge event first, empty events, one at the end.
            vec![
                0, 10_000, 10_000, 10_000, 10_001, 10_002, 10_003, 10_004, 20_000,
            ],
            vec![0, 0, 0, 0, 0, 0, 0, 0, 5],
        ];
        for offsets in &cases {
            let ne = offsets.len() - 1;
            for weights in [
                &[1usize][..],
                &[1, 1],
                &[1; 4],
                &[2, 2, 2, 1, 1],
                &[1; 8],
                &[1; 12],
            ] {
                let parts = weights.len().min(ne);
                let ends = split_ends(offsets, weights);
                assert_eq!(ends.len(), parts, "{offsets:?} {weights:?}");
                assert_eq!(*ends.last().unwrap(), ne);
                let mut prev = 0;
                for &e in &ends {
                    assert!(e > prev, "{offsets:?} {weights:?}: {ends:?}");
                    prev = e;
                }
            }
        }
        // 64 equal events: 4 equal parts of 16; 2 : 2 : 2 : 1 : 1 of 16, 16, 16, 8, 8.
        assert_eq!(split_ends(&cases[1], &[1; 4]), vec![16, 32, 48, 64]);
        assert_eq!(
            split_ends(&cases[1], &[2, 2, 2, 1, 1]),
            vec![16, 32, 48, 56, 64]
        );
    }
}
