//! The clustering workspace a [`crate::Backend`] keeps between calls: device digis, one
//! cached [`Clusterer`] per geometry and call shape, and pinned staging; the host-path call
//! that uses them.

use std::sync::Arc;

use detkit_gpu::clustering as k;

use detkit_gpu::histogram::decode_first_index;

use super::cuda::{
    ClusterQueue, ClusterStaging, ClusterTuning, Clusterer, DeviceDigis, MAX_EVENTS_PER_LAUNCH,
};
use super::{
    validate_digis, validate_digis_at, validate_shape, ChargeCut, ClusterCounts, Clusters,
    ClustersMut, DigisRef, Geometry, WaveSink,
};
use crate::cuda::GpuContext;
use crate::error::{DriverContext, Result};
use crate::phases::{self, Phase};
use crate::staging::{par_copy, stream_up_many, upload_into, HostCopies};

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
    /// An event behind the copies of the last [`ClusterWorkspace::enqueue_staged`]: its
    /// results are in the pinned stage once it has completed (later work queued on the
    /// stream meanwhile, the next sub-batch's, is not waited for).
    done: Option<cudarc::driver::CudaEvent>,
    /// Whether the last [`ClusterWorkspace::enqueue_staged`] sent the cluster indices
    /// straight to the caller's pinned memory (not into the stage).
    direct_out: bool,
    /// The backend's clustering tuning ([`crate::Backend::with_cluster_tuning`]), applied
    /// to every clusterer and queue this workspace makes.
    tuning: ClusterTuning,
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
    pub(crate) fn new(gpu: &GpuContext, tuning: &ClusterTuning) -> Result<Self> {
        Ok(Self {
            gpu: crate::workspace::fork(gpu)?,
            clusterers: Vec::new(),
            stage: ClusterStaging::default(),
            queue: None,
            check: None,
            done: None,
            direct_out: false,
            tuning: *tuning,
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
        if copies == HostCopies::Pinned {
            let direct_in = direct_digis(digis);
            let on_device = direct_in;
            let slots = ne * geometry.modules as usize;
            let mut out = out;
            if let Out::Clusters(o) = &mut out {
                o.clus.resize(n, 0);
                o.clus_in_module.resize(slots, 0);
                o.module_first.resize(slots, 0);
                o.modules = geometry.modules as usize;
            }
            let clus_to = match &mut out {
                Out::Slices(s) => direct_clus(s.clus),
                Out::Clusters(_) => None,
            };
            let r = (|| {
                self.launch_staged(
                    digis,
                    event_offsets,
                    geometry,
                    cut,
                    0,
                    on_device,
                    direct_in,
                    None,
                )?;
                phases::mark_gpu(Phase::Kernels, &self.gpu);
                self.enqueue_staged(on_device, clus_to)?;
                phases::mark(Phase::Stage);
                match out {
                    Out::Clusters(o) => {
                        let c =
                            self.finish_staged(digis, event_offsets, geometry, 0, o.as_mut())?;
                        o.medium_modules = c.medium_modules;
                        o.fallback_modules = c.fallback_modules;
                        Ok(c)
                    }
                    Out::Slices(s) => self.finish_staged(digis, event_offsets, geometry, 0, s),
                }
            })();
            if r.is_err() && (direct_in || clus_to.is_some()) {
                // DMAs from or to the caller's memory finish before its borrow ends.
                let _ = self.gpu.synchronize();
            }
            return r;
        }
        self.select_clusterer(n, ne, geometry)?;
        let g = &self.gpu;
        let (c, d) = self.clusterers.last_mut().expect("selected above");
        phases::mark(Phase::Prepare);
        validate_digis(digis, event_offsets, geometry, None)?;
        phases::mark(Phase::Validate);
        d.copy_in(g, digis, event_offsets, None, false)?;
        phases::mark_gpu(Phase::Upload, g);
        c.run_graph(d, cut)?;
        phases::mark_gpu(Phase::Kernels, g);
        let (medium_modules, fallback_modules) = match out {
            Out::Clusters(o) => {
                c.download_results(d, o, None)?;
                (o.medium_modules, o.fallback_modules)
            }
            Out::Slices(s) => c.download_results_to(d, s, None)?,
        };
        Ok(ClusterCounts {
            medium_modules,
            fallback_modules,
        })
    }

    /// Whether a batch of `n` digis and `ne` events fits the clusterer of this geometry and
    /// call shape and the device check's buffer as they are (selecting it allocates nothing).
    /// Only the clusterer last used counts: selecting another would reorder the list, and a
    /// part still running on this workspace is finished with the last one.
    fn fits(&self, n: usize, ne: usize, geometry: &Geometry) -> bool {
        let slots = ne * geometry.modules as usize;
        self.clusterers.last().is_some_and(|(c, _)| {
            let (cn, ce) = c.capacity();
            c.geometry() == geometry && few(ce) == few(ne) && n <= cn && ne <= ce
        }) && self.check.as_ref().map_or(0, |b| b.len()) > slots
    }

    /// Stages a batch (digis `base..` of the call) and launches its work on this workspace's
    /// stream, without waiting: the digis into the pinned stage and on to the device (as each
    /// piece is copied), the sizes and event offsets, then, with `on_device`, the device
    /// checks (`clustering_check_runs` and its gate; the kernels flag digis out of range),
    /// else the host's check fused with the copy ([`validate_digis_at`], each wave's DMA
    /// issued as it is checked); then the chain's graph. With `direct_in` (the digis lie in
    /// the caller's pinned memory, [`direct_digis`]; needs `on_device`) the four arrays are
    /// DMAed straight from it, with no stage. With `uploaded`, an event recorded
    /// behind the uploads (before the graph) goes there: once it has completed, the pinned
    /// digis may be written again.
    #[allow(clippy::too_many_arguments)]
    fn launch_staged(
        &mut self,
        digis: DigisRef<'_>,
        event_offsets: &[u32],
        geometry: &Geometry,
        cut: Option<ChargeCut>,
        base: usize,
        on_device: bool,
        direct_in: bool,
        uploaded: Option<&mut Option<cudarc::driver::CudaEvent>>,
    ) -> Result<()> {
        let (n, ne) = (digis.len(), event_offsets.len() - 1);
        self.select_clusterer(n, ne, geometry)?;
        phases::mark(Phase::Prepare);
        let g = &self.gpu;
        let (c, d) = self.clusterers.last_mut().expect("selected above");
        let st = &mut self.stage;
        if direct_in {
            let what = "copying digis to the device";
            g.context().bind_to_thread().ctx(what)?;
            let bases = d.arrays_mut().map(|b| g.ptr_mut(b).addr());
            let s = g.stream();
            for (src, to) in [digis.module, digis.x, digis.y, digis.adc]
                .into_iter()
                .zip(bases)
            {
                if src.is_empty() {
                    continue;
                }
                // SAFETY: the device buffer at `to` holds at least `n` digis (selected above);
                // `src` is the caller's pinned memory, borrowed for the whole call, which
                // waits for this copy before it returns (errors included).
                unsafe { cudarc::driver::result::memcpy_htod_async(to, src, s.cu_stream()) }
                    .ctx(what)?;
            }
            phases::mark(Phase::Stage);
            d.copy_in(g, digis, event_offsets, Some(&mut *st), true)?;
            device_check(g, d, &mut self.check, geometry)?;
        } else if on_device {
            let pin = st.digis_buffer(g, n)?;
            let bases = d.arrays_mut().map(|b| g.ptr_mut(b).addr());
            stream_up_many(g, &[digis.module, digis.x, digis.y, digis.adc], &bases, pin)?;
            phases::mark(Phase::Stage);
            d.copy_in(g, digis, event_offsets, Some(&mut *st), true)?;
            device_check(g, d, &mut self.check, geometry)?;
        } else {
            // The validation's threads fill the pinned buffer as they check, and each wave
            // goes to the device while the next is checked.
            let pin = st.digis_buffer(g, n)?;
            let mut dst = d.arrays_mut();
            let mut sink = |wave: [&[u16]; 4], r: std::ops::Range<usize>| -> Result<()> {
                for (src, dst) in wave.into_iter().zip(dst.iter_mut()) {
                    upload_into(g, src, &mut dst.slice_mut(r.clone()), None)?;
                }
                Ok(())
            };
            let staged = Some((pin, &mut sink as &mut WaveSink<'_>));
            if let Err(e) = validate_digis_at(digis, event_offsets, geometry, staged, base) {
                // The waves sent before the error finish before the stage is reused or
                // freed.
                let _ = g.synchronize();
                return Err(e);
            }
            phases::mark(Phase::Validate);
            d.copy_in(g, digis, event_offsets, Some(&mut *st), true)?;
        }
        if let Some(ev) = uploaded {
            let flags = cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
            *ev = Some(
                g.stream()
                    .record_event(Some(flags))
                    .ctx("recording an upload")?,
            );
        }
        phases::mark_gpu(Phase::Upload, g);
        c.run_graph(d, cut)
    }

    /// Queues the copies of the results of the last [`ClusterWorkspace::launch_staged`] into
    /// the pinned stage (with `on_device`, the device check's word after the three status
    /// words), without waiting; with `clus_to` (the caller's pinned memory for the batch's
    /// cluster indices, [`direct_clus`]) those go straight there.
    fn enqueue_staged(&mut self, on_device: bool, clus_to: Option<usize>) -> Result<()> {
        let g = &self.gpu;
        let (c, d) = self.clusterers.last_mut().expect("launched");
        let st = &mut self.stage;
        let slots = d.nevents * c.geometry().modules as usize;
        // Room for the check's word first: the results' copies below must not see their
        // buffer grown (and freed) after they are queued.
        st.slots.get(g, 2 * slots + 4)?;
        c.enqueue_results_to(d, st, clus_to)?;
        self.direct_out = clus_to.is_some();
        let w = st.slots.get(g, 2 * slots + 4)?;
        if on_device {
            let check = self.check.as_ref().expect("checked on the device");
            g.stream()
                .memcpy_dtoh(&check.slice(0..1), &mut w[2 * slots + 3..2 * slots + 4])
                .ctx("reading the digi check")?;
        } else {
            w[2 * slots + 3] = 0;
        }
        let flags = cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
        self.done = Some(
            g.stream()
                .record_event(Some(flags))
                .ctx("copying clusters from the device")?,
        );
        Ok(())
    }

    /// Waits for the copies of [`ClusterWorkspace::enqueue_staged`] and moves the results
    /// into `out` (of the batch's lengths; each module's first digi counted from the call's
    /// first digi, `base` added). When the device flagged a digi (out of range, or
    /// a module's digis not consecutive in an event), the host check of `digis` (digis
    /// `base..` of the call, `event_offsets` counted from the call's first digi, so the
    /// first is `base`) names it: the same error as a check before the upload.
    fn finish_staged(
        &mut self,
        digis: DigisRef<'_>,
        event_offsets: &[u32],
        geometry: &Geometry,
        base: usize,
        out: ClustersMut<'_>,
    ) -> Result<ClusterCounts> {
        let g = &self.gpu;
        let (c, _) = self.clusterers.last_mut().expect("launched");
        let st = &mut self.stage;
        // The device digis may hold a later batch already (sub-batches staged early): the
        // results' sizes are this batch's.
        let (n, ne) = (digis.len(), event_offsets.len() - 1);
        let done = self.done.take().expect("enqueued");
        let r = finish_results(c, st, &done, n, ne, base, self.direct_out, out);
        let slots = ne * c.geometry().modules as usize;
        let flagged = st.slots.get(g, 2 * slots + 4)?[2 * slots + 3];
        match r {
            Ok((medium_modules, fallback_modules)) if flagged == 0 => Ok(ClusterCounts {
                medium_modules,
                fallback_modules,
            }),
            Err(e) if !matches!(e, crate::Error::InvalidInput { .. }) => Err(e),
            r => {
                // A digi the device flagged: the host's check names it as a check before
                // the upload would have.
                let offsets: Vec<u32> = event_offsets.iter().map(|&o| o - base as u32).collect();
                validate_digis_at(digis, &offsets, geometry, None, base)?;
                Err(match (r, decode_first_index(flagged)) {
                    (Err(e), _) => e,
                    (Ok(_), bad) => crate::error::invalid(
                        "digis",
                        format!(
                            "digi {}: a module's digis not consecutive in its event",
                            base + bad.unwrap_or(0) as usize
                        ),
                    ),
                })
            }
        }
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
            let mut c = Clusterer::new(&self.gpu, geometry, digis, events)?;
            if self.tuning != ClusterTuning::default() {
                c.tune(&self.tuning)?;
            }
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
            let mut q =
                ClusterQueue::shared(&self.gpu, QUEUE_LANES, geometry, caps.0, caps.1, cut)?;
            if self.tuning != ClusterTuning::default() {
                q.tune(&self.tuning)?;
            }
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
/// part small, since its kernels and copy out are all that run after the host's checks:
/// 2 : 2 : 2 : 1 : 1, measured fastest of the splits tried (see docs/benchmarks.md, sections
/// "door" and "chost").
pub(crate) fn split_weights(n: usize, ne: usize, copies: HostCopies) -> &'static [usize] {
    if copies != HostCopies::Pinned || ne < SPLIT_MIN_EVENTS || n < SPLIT_MIN_DIGIS {
        return &[1];
    }
    &[2, 2, 2, 1, 1]
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

/// A batch clustered as sub-batches of whole events (`weights`: [`split_weights`]) on the
/// workspaces `ws` (two), taking turns: sub-batch k is
/// validated, staged and uploaded, its graph launched and its results' copy out queued, all
/// on its workspace's stream, while sub-batch k - 1's kernels run on another's; its results
/// are copied into `out` once sub-batch k + 1 is under way. Each
/// event is clustered on its own either way, so the results equal the one-batch call's
/// ([`ClusterWorkspace::cluster`]): the first digi of each module moved by the sub-batch's
/// first digi, the module counts summed; an error is the first bad digi's, named by its
/// index in the whole batch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cluster_split(
    ws: &mut [ClusterWorkspace],
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
    ws: &mut [ClusterWorkspace],
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
    cut: Option<ChargeCut>,
    weights: &[usize],
    out: ClustersMut<'_>,
) -> Result<ClusterCounts> {
    let ends = split_ends(event_offsets, weights);
    let m = geometry.modules as usize;
    let direct_in = direct_digis(digis);
    let on_device = direct_in;
    // With the device checks (the caller's pinned digis) part k is staged as soon as part
    // k - 2's upload has completed, before part k - 2 is finished; else part k - 2 is
    // finished first.
    let early = on_device;
    let ClustersMut {
        clus,
        clus_in_module,
        module_first,
    } = out;
    // The caller's pinned memory of the cluster indices: each part's go straight there.
    let clus_to = direct_clus(clus);
    // What is left of the outputs: the parts are finished in order, each taking the front.
    let mut rest = (clus, clus_in_module, module_first);
    let mut counts = ClusterCounts::default();
    // The parts each workspace has launched and not finished (at most two each).
    let nw = ws.len();
    let mut running: Vec<std::collections::VecDeque<Part>> =
        (0..nw).map(|_| Default::default()).collect();
    // Per workspace: an event behind its last part's upload (its pinned digis are free again
    // once it has completed).
    let mut uploaded: Vec<Option<cudarc::driver::CudaEvent>> = (0..nw).map(|_| None).collect();
    let mut rebased: Vec<u32> = Vec::new();
    let sub = |p: Part| -> DigisRef<'_> {
        let (lo, hi) = (event_offsets[p.e0] as usize, event_offsets[p.e1] as usize);
        DigisRef {
            module: &digis.module[lo..hi],
            x: &digis.x[lo..hi],
            y: &digis.y[lo..hi],
            adc: &digis.adc[lo..hi],
        }
    };
    let r = (|| -> Result<()> {
        let mut finish = |w: &mut ClusterWorkspace, p: Part| -> Result<()> {
            let lo = event_offsets[p.e0] as usize;
            let nd = event_offsets[p.e1] as usize - lo;
            let sl = (p.e1 - p.e0) * m;
            let (clus, r0) = std::mem::take(&mut rest.0).split_at_mut(nd);
            let (cim, r1) = std::mem::take(&mut rest.1).split_at_mut(sl);
            let (mf, r2) = std::mem::take(&mut rest.2).split_at_mut(sl);
            rest = (r0, r1, r2);
            // The first digi of each module comes back counted from the call's first digi.
            let c = w.finish_staged(
                sub(p),
                &event_offsets[p.e0..=p.e1],
                geometry,
                lo,
                ClustersMut {
                    clus,
                    clus_in_module: cim,
                    module_first: mf,
                },
            )?;
            counts.medium_modules += c.medium_modules;
            counts.fallback_modules += c.fallback_modules;
            phases::mark(Phase::Unpack);
            Ok(())
        };
        let mut e0 = 0;
        for (k, &e1) in ends.iter().enumerate() {
            let j = k % nw;
            let p = Part { e0, e1 };
            let (lo, hi) = (event_offsets[e0] as usize, event_offsets[e1] as usize);
            // Part k - 2's results leave this workspace's pinned buffers before part k's
            // are queued into them; part k's digis may be staged before that (as soon as
            // part k - 2's upload has completed) when nothing needs to grow meanwhile.
            let stage_first = early && ws[j].fits(hi - lo, e1 - e0, geometry);
            if !stage_first {
                if let Some(q) = running[j].pop_front() {
                    finish(&mut ws[j], q)?;
                }
            } else if let Some(ev) = uploaded[j].take() {
                ev.synchronize().ctx("waiting for an upload")?;
                phases::mark(Phase::Wait);
            }
            rebased.clear();
            rebased.extend(event_offsets[e0..=e1].iter().map(|&o| o - lo as u32));
            // Also with the caller's pinned digis (no digi stage to free): the sizes and event
            // offsets still go through the workspace's pinned words, which part k - 2's
            // upload must have read before part k writes them.
            let upl = early.then_some(&mut uploaded[j]);
            let sp = sub(p);
            ws[j].launch_staged(sp, &rebased, geometry, cut, lo, on_device, direct_in, upl)?;
            phases::mark(Phase::Kernels);
            if let Some(q) = running[j].pop_front() {
                finish(&mut ws[j], q)?;
            }
            let to = clus_to.map(|a| a + lo * std::mem::size_of::<i32>());
            ws[j].enqueue_staged(on_device, to)?;
            phases::mark(Phase::Stage);
            running[j].push_back(p);
            e0 = e1;
        }
        for k in ends.len()..ends.len() + nw {
            if let Some(q) = running[k % nw].pop_front() {
                finish(&mut ws[k % nw], q)?;
            }
        }
        Ok(())
    })();
    if let Err(e) = r {
        // Copies still in flight (out of pinned staging) finish before the stage is reused.
        for w in ws.iter() {
            let _ = w.gpu.synchronize();
        }
        return Err(e);
    }
    Ok(counts)
}

/// Waits for the results of a batch of `n` digis and `ne` events that
/// [`ClusterWorkspace::enqueue_staged`] queued into `st` (each piece of the cluster indices
/// by its own event, the rest by `done`, so that work queued after them is not waited for)
/// and moves them into `out` (of the batch's lengths); returns the medium and fallback
/// module counts, or the typed error of a digi the kernels flagged.
#[allow(clippy::too_many_arguments)]
fn finish_results(
    c: &Clusterer,
    st: &mut ClusterStaging,
    done: &cudarc::driver::CudaEvent,
    n: usize,
    ne: usize,
    base: usize,
    direct_out: bool,
    out: ClustersMut<'_>,
) -> Result<(u32, u32)> {
    let g = c.context();
    let slots = ne * c.geometry().modules as usize;
    let what = "waiting for the clusters";
    let landed = std::mem::take(&mut st.landed);
    if direct_out {
        // The cluster indices went straight into `out.clus`.
        done.synchronize().ctx(what)?;
        phases::mark(Phase::Wait);
    } else if landed.is_empty() {
        let clus = st.clus.get(g, n)?;
        done.synchronize().ctx(what)?;
        phases::mark(Phase::Wait);
        par_copy(&mut out.clus[..n], clus);
        phases::mark(Phase::CopyOut);
    } else {
        // Each piece is copied out as soon as it has landed.
        let clus = st.clus.get(g, n)?;
        let piece = crate::staging::PIPELINE_BYTES / 4;
        let pieces = out.clus[..n].chunks_mut(piece).zip(clus.chunks(piece));
        for ((dst, src), e) in pieces.zip(&landed) {
            e.synchronize().ctx(what)?;
            phases::mark(Phase::Wait);
            par_copy(dst, src);
            phases::mark(Phase::CopyOut);
        }
        done.synchronize().ctx(what)?;
        phases::mark(Phase::Wait);
    }
    st.landed = landed;
    let w = st.slots.get(g, 2 * slots + 4)?;
    out.clus_in_module[..slots].copy_from_slice(&w[..slots]);
    copy_rebased(
        &mut out.module_first[..slots],
        &w[slots..2 * slots],
        base as u32,
    );
    let r = c.decode_status(w[2 * slots], w[2 * slots + 1], w[2 * slots + 2]);
    phases::mark(Phase::Unpack);
    r
}

/// Copies a sub-batch's first digi per module (`src`, counted from the sub-batch's first
/// digi) into `dst` counted from the call's first digi (`base` added; `u32::MAX`, an
/// absent module, kept): one pass over the words.
fn copy_rebased(dst: &mut [u32], src: &[u32], base: u32) {
    if base == 0 {
        dst.copy_from_slice(src);
        return;
    }
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = if v == u32::MAX { v } else { v + base };
    }
}

/// Whether the four digi arrays lie in the caller's pinned memory ([`crate::HostBuf`]), so
/// that the door DMAs straight from them (the digis then checked on the device).
fn direct_digis(digis: DigisRef<'_>) -> bool {
    !digis.is_empty() && crate::hostbuf::digis_pinned(digis)
}

/// The address of `clus` when it lies in the caller's pinned memory ([`crate::HostBuf`]):
/// the cluster indices are then DMAed straight into it.
fn direct_clus(clus: &mut [i32]) -> Option<usize> {
    crate::hostbuf::is_pinned(clus).then_some(clus.as_mut_ptr() as usize)
}

/// Threads per block of the consecutive-digis check.
const CHECK_THREADS: u32 = 256;

/// Launches the device checks of the batch in `d` on `g`'s stream: `clustering_check_runs`
/// (a module's second run in an event flags its digi in `check[0]`, the smallest index)
/// into `check` (`[bad, run counts of every event and module…]`, grown when short, zeroed
/// here), then `clustering_gate_runs`, which makes a flagged batch empty for the chain after
/// it (whose kernels assume each module's digis consecutive). Digis out of range are
/// flagged by the chain's `count_modules`.
pub(super) fn device_check(
    g: &GpuContext,
    d: &mut DeviceDigis,
    check: &mut Option<crate::cuda::DeviceBuffer<u32>>,
    geometry: &Geometry,
) -> Result<()> {
    let (n, ne) = (d.n, d.nevents);
    let slots = ne * geometry.modules as usize;
    let have = check.as_ref().map_or(0, |b| b.len());
    if have < slots + 1 {
        *check = None;
        *check = Some(g.zeros::<u32>((slots + 1).max(have + have / 2))?);
    }
    let check = check.as_mut().expect("allocated above");
    g.fill_u32(check, slots + 1, 0)?;
    if n == 0 {
        return Ok(());
    }
    let params = k::ClusteringCheckRunsParams {
        module: g.ptr(&d.module),
        event_offsets: g.ptr(&d.event_offsets),
        dims: g.ptr(&d.dims),
        runs: g.ptr_mut(&mut check.slice_mut(1..slots + 1)),
        bad: g.ptr_mut(&mut check.slice_mut(0..1)),
        nmodules: geometry.modules,
        _pad0: 0,
    };
    let blocks = n
        .div_ceil(CHECK_THREADS as usize)
        .min(16 * g.sm_count() as usize);
    // SAFETY: `dims` holds `[n, ne]` of this batch and `module` `n` digis (queued before on
    // this stream); `event_offsets` `ne + 1` checked offsets from 0 to `n`; `runs` `ne *
    // modules` zeroed words and `bad` one zeroed word, distinct; grid-stride over the digis.
    unsafe {
        g.launch(
            k::KERNEL_CHECK_RUNS,
            crate::cuda::cfg(blocks.max(1) as u64, CHECK_THREADS, 0),
            &params,
        )?
    };
    let params = k::ClusteringGateRunsParams {
        bad: g.ptr(&check.slice(0..1)),
        dims: g.ptr_mut(&mut d.dims),
        event_offsets: g.ptr_mut(&mut d.event_offsets.slice_mut(0..ne + 1)),
    };
    // SAFETY: `dims` holds `[n, ne]` and `event_offsets` `ne + 1` words (queued before);
    // `bad` the check's word, final in stream order; the graph that reads `dims` and the
    // offsets runs after this launch on the same stream.
    unsafe {
        g.launch(
            k::KERNEL_GATE_RUNS,
            crate::cuda::cfg(1, CHECK_THREADS, 0),
            &params,
        )
    }
}

/// A clustering call on a backend's workspaces: as sub-batches on two of them
/// ([`cluster_split`]) when [`split_weights`] says so, else one batch on one.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cluster_call(
    pool: &crate::workspace::Pool<ClusterWorkspace>,
    gpu: &GpuContext,
    tuning: &ClusterTuning,
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
            || ClusterWorkspace::new(gpu, tuning),
            |w| w.cluster(digis, event_offsets, geometry, cut, copies, out),
        )
    } else {
        pool.run_n(
            gpu,
            2,
            || ClusterWorkspace::new(gpu, tuning),
            |ws| cluster_split(ws, digis, event_offsets, geometry, cut, weights, out),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_rebased, split_ends};

    /// Every word moved by the base, absent modules (`u32::MAX`) kept; base 0 a plain copy.
    #[test]
    fn module_first_is_rebased_in_the_copy() {
        let src = [0u32, 5, u32::MAX, 17, u32::MAX - 1000, u32::MAX];
        for base in [0u32, 1, 999] {
            let mut dst = [7u32; 6];
            copy_rebased(&mut dst, &src, base);
            let want: Vec<u32> = src
                .iter()
                .map(|&v| if v == u32::MAX { v } else { v + base })
                .collect();
            assert_eq!(dst.to_vec(), want, "base {base}");
        }
    }

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
