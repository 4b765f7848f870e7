//! The [`ClusterQueue`]: several batches in flight, one lane (stream, digis, clusterer,
//! pinned staging) each.

use std::sync::Arc;

use super::clusterer::Clusterer;
use super::cuda::{ClusterStaging, DeviceDigis};
use super::{validate_digis, ChargeCut, ClusterTuning, Clusters, DigisRef, Geometry};
use crate::cuda::GpuContext;
use crate::error::{invalid, Result};
use crate::staging::upload_into;

/// Several batches in flight on one device: `lanes` lanes, each a fork of the context (its
/// own stream, the shared module) with its own [`DeviceDigis`] and [`Clusterer`].
/// [`ClusterQueue::submit`] copies a batch into the next lane and launches its chain (a
/// graph replay) without waiting for anything; when that lane still holds an earlier batch,
/// its results are downloaded first and returned, so results come back in submission order
/// with at most `lanes` batches in flight. [`ClusterQueue::finish`] drains the rest.
/// While lane `k` copies or runs, the other lanes' chains run on the GPU.
pub struct ClusterQueue {
    lanes: Vec<Lane>,
    cut: Option<ChargeCut>,
    next: usize,
    submitted: u64,
}

/// One lane of a [`ClusterQueue`]: its digis, clusterer, pinned staging (digis in, results
/// out) and the submission number of the batch in flight.
struct Lane {
    digis: DeviceDigis,
    clusterer: Clusterer,
    stage: ClusterStaging,
    pending: Option<u64>,
}

impl ClusterQueue {
    /// One lane per context of `forks` (typically [`GpuContext::fork`]s of one context), each
    /// sized for batches of up to `max_digis` digis and `max_events` events. Each lane keeps
    /// a shared handle of its context.
    pub fn new(
        forks: &[Arc<GpuContext>],
        geometry: &Geometry,
        max_digis: usize,
        max_events: usize,
        cut: Option<ChargeCut>,
    ) -> Result<Self> {
        let lanes = forks
            .iter()
            .map(|g| {
                Ok((
                    DeviceDigis::with_capacity(g, max_digis, max_events)?,
                    Clusterer::new(g, geometry, max_digis, max_events)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Self::from_lanes(lanes, cut)
    }

    fn from_lanes(lanes: Vec<(DeviceDigis, Clusterer)>, cut: Option<ChargeCut>) -> Result<Self> {
        if lanes.is_empty() {
            return Err(invalid(
                "cluster queue",
                "no lane (give at least one context)",
            ));
        }
        Ok(Self {
            lanes: lanes
                .into_iter()
                .map(|(digis, clusterer)| Lane {
                    digis,
                    clusterer,
                    stage: ClusterStaging::default(),
                    pending: None,
                })
                .collect(),
            cut,
            next: 0,
            submitted: 0,
        })
    }

    /// [`Clusterer::tune`] on every lane.
    pub fn tune(&mut self, t: &ClusterTuning) -> Result<()> {
        for l in &mut self.lanes {
            l.clusterer.tune(t)?;
        }
        Ok(())
    }

    /// Number of lanes (batches that can be in flight).
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Submits a batch (validated digis and event offsets, in host memory). Returns the
    /// results of the batch that was submitted `lanes` submissions earlier, with its
    /// submission number (0-based), if there was one.
    ///
    /// The lane's stream gets the whole round trip without a wait: the digis are copied into
    /// the lane's pinned buffers and sent by DMA, the chain is replayed, and the results are
    /// copied back into pinned buffers; the host waits for a lane only when it comes round
    /// again. So while batch `k` runs, batch `k + 1` uploads on the next lane and batch
    /// `k − 1`'s results come back on the previous one.
    pub fn submit<'a>(
        &mut self,
        digis: impl Into<DigisRef<'a>>,
        event_offsets: &[u32],
    ) -> Result<Option<(u64, Clusters)>> {
        let k = self.next;
        self.next = (k + 1) % self.lanes.len();
        let done = self.collect(k)?;
        let cut = self.cut;
        let l = &mut self.lanes[k];
        l.digis.copy_in(
            l.clusterer.context(),
            digis.into(),
            event_offsets,
            Some(&mut l.stage),
            false,
        )?;
        l.clusterer.run_graph(&l.digis, cut)?;
        l.clusterer.enqueue_results(&l.digis, &mut l.stage)?;
        l.pending = Some(self.submitted);
        self.submitted += 1;
        Ok(done)
    }

    /// [`ClusterQueue::submit`] of a batch not yet validated: the lane's pinned buffer is
    /// filled by the validation's threads as they check (the digis are read once), each wave
    /// going to the device while the next is checked, as [`crate::Backend::cluster_events`]
    /// does. On an error nothing of the batch is left in flight.
    pub(crate) fn submit_validated(
        &mut self,
        digis: DigisRef<'_>,
        event_offsets: &[u32],
        geometry: &Geometry,
    ) -> Result<Option<(u64, Clusters)>> {
        let k = self.next;
        let done = self.collect(k)?;
        let cut = self.cut;
        let l = &mut self.lanes[k];
        let g = l.clusterer.context();
        let n = digis.len();
        let pin = l.stage.digis_buffer(g, n)?;
        let mut dst = l.digis.arrays_mut();
        let mut sink = |wave: [&[u16]; 4], r: std::ops::Range<usize>| -> Result<()> {
            for (src, dst) in wave.into_iter().zip(dst.iter_mut()) {
                upload_into(g, src, &mut dst.slice_mut(r.clone()), None)?;
            }
            Ok(())
        };
        if let Err(e) = validate_digis(digis, event_offsets, geometry, Some((pin, &mut sink))) {
            // The waves sent before the error finish before the stage is reused.
            let _ = g.synchronize();
            return Err(e);
        }
        l.digis
            .copy_in(g, digis, event_offsets, Some(&mut l.stage), true)?;
        l.clusterer.run_graph(&l.digis, cut)?;
        l.clusterer.enqueue_results(&l.digis, &mut l.stage)?;
        l.pending = Some(self.submitted);
        self.submitted += 1;
        self.next = (k + 1) % self.lanes.len();
        Ok(done)
    }

    fn collect(&mut self, k: usize) -> Result<Option<(u64, Clusters)>> {
        let l = &mut self.lanes[k];
        match l.pending.take() {
            None => Ok(None),
            Some(id) => {
                let mut out = Clusters::default();
                l.clusterer
                    .finish_results(&l.digis, &mut l.stage, &mut out)?;
                Ok(Some((id, out)))
            }
        }
    }

    /// Numbers the next submission 0 again (after [`ClusterQueue::finish`]).
    pub fn restart(&mut self) {
        self.next = 0;
        self.submitted = 0;
    }

    /// Waits for every batch still in flight and returns their results in submission order.
    pub fn finish(&mut self) -> Result<Vec<(u64, Clusters)>> {
        let mut out = Vec::new();
        for j in 0..self.lanes.len() {
            let k = (self.next + j) % self.lanes.len();
            if let Some(r) = self.collect(k)? {
                out.push(r);
            }
        }
        Ok(out)
    }
}

impl ClusterQueue {
    /// A queue of `lanes` lanes, each on a new fork of `gpu` (its own stream), which the
    /// queue owns (through its lanes' shared handles).
    pub fn shared(
        gpu: &GpuContext,
        lanes: usize,
        geometry: &Geometry,
        max_digis: usize,
        max_events: usize,
        cut: Option<ChargeCut>,
    ) -> Result<Self> {
        let lanes = (0..lanes)
            .map(|_| {
                let f = Arc::new(gpu.fork()?);
                Ok((
                    DeviceDigis::with_capacity(&f, max_digis, max_events)?,
                    Clusterer::new(&f, geometry, max_digis, max_events)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Self::from_lanes(lanes, cut)
    }
}
