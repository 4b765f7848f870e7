//! The clustering workspace a [`crate::Backend`] keeps between calls: device digis, one
//! cached [`Clusterer`] per geometry and call shape, and pinned staging; the host-path call
//! that uses them.

use std::sync::Arc;

use detkit_gpu::clustering as k;

use super::cuda::{ClusterQueue, ClusterStaging, Clusterer, DeviceDigis, MAX_EVENTS_PER_LAUNCH};
use super::{
    validate_digis, validate_shape, ChargeCut, ClusterCounts, Clusters, ClustersMut, DigisRef,
    Geometry,
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
    clusterers: Vec<(Clusterer<'static>, DeviceDigis)>,
    stage: ClusterStaging,
    /// The queue of [`ClusterWorkspace::cluster_batches`]: its geometry, cut and capacity
    /// (digis, events per batch).
    queue: Option<BatchQueue>,
    /// The device-view calls' consecutive-digis check: `[bad, run counts…]`.
    check: Option<crate::cuda::DeviceBuffer<u32>>,
}

/// A batch queue with its geometry, cut and capacity (digis, events per batch).
type BatchQueue = (
    Geometry,
    Option<ChargeCut>,
    (usize, usize),
    ClusterQueue<'static>,
);

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
        validate_shape(digis, event_offsets, geometry)?;
        let (n, ne) = (digis.len(), event_offsets.len() - 1);
        if ne > MAX_EVENTS_PER_LAUNCH {
            return Err(crate::Error::CapacityExceeded {
                what: "events per launch",
                needed: ne as u64,
                capacity: MAX_EVENTS_PER_LAUNCH as u64,
            });
        }
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
            let c = Clusterer::shared(self.gpu.clone(), geometry, digis, events)?;
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
        &mut Clusterer<'static>,
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
