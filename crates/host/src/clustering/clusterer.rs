//! The [`Clusterer`]: the launch plan of the clustering chain for a geometry and a batch
//! capacity (grids, block sizes, shared memory, [`ClusterTuning`]), its device workspace and
//! outputs, and the launchers of every step.

use detkit_gpu::clustering::{self as k, NO_MODULE_START};
use detkit_gpu::histogram::decode_first_index;
use detkit_gpu::DevPtr;

use cudarc::driver::CudaEvent;

use std::sync::Arc;

use super::cuda::{ClusterStaging, DeviceDigis};
use super::dev_graph::Slot;
use super::{ChargeCut, Clusters, ClustersMut, Geometry};
use crate::cuda::{cfg, DeviceBuffer, GpuContext, MAX_GRID};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::phases::{self, Phase};
use crate::staging::par_copy;

/// Device workspace and outputs of the clustering chain for up to `max_digis` digis and
/// `max_events` events per launch. Steps can be launched one by one (for timing) or with
/// [`Clusterer::run`] (one memset, the two phases of `count_modules`, then the small-module
/// passes and the shared-memory kernel side by side on forked streams, joined before
/// anything after them) or [`Clusterer::run_graph`] (the same, replayed as one CUDA graph
/// whose branches are the forked streams); nothing synchronises until
/// [`Clusterer::results`]. One `Clusterer` keeps one batch in flight on its context's
/// stream (its own side streams are joined back into it); for several, give each its own
/// fork of the context ([`GpuContext::fork`]) or use [`super::ClusterQueue`].
///
/// It holds a shared handle to its context (an [`Arc`]), not a borrow, so that it can be
/// kept: a [`crate::Backend`] caches one per geometry and call shape in its workspace, and
/// a `Clusterer` can move to another thread with its context.
pub struct Clusterer {
    gpu: Arc<GpuContext>,
    geometry: Geometry,
    warp_capacity: u32,
    warp_grid: u32,
    small_capacity: u32,
    small_threads: u32,
    small_grid: u32,
    /// Optional middle block pass: capacity, threads, grid.
    mid: Option<(u32, u32, u32)>,
    capacity: u32,
    find_grid: u32,
    smem: usize,
    fallback_grid: u32,
    /// Dynamic shared memory of the fallback kernel (its status words when they fit).
    fallback_smem: usize,
    cut_grid: u32,
    /// Table scales of the middle and the last block pass ([`ClusterTuning::table_scale`]).
    table_scale: (u32, u32),
    /// Threads per block of the shared-memory kernel and of the fallback kernel.
    larger_threads: (u32, u32),
    /// Whether each persistent grid is cut to the most blocks that can find work in a batch
    /// of this workspace's capacity ([`ClusterTuning::tight_grids`]).
    tight_grids: bool,
    /// Threads per block of the seed's `findClus` baseline ([`ClusterTuning::seed_threads`]).
    seed_threads: u32,
    max_digis: usize,
    max_events: usize,
    /// Output: cluster index per digi.
    pub clus: DeviceBuffer<i32>,
    /// Output: clusters per event and module id.
    pub clus_in_module: DeviceBuffer<u32>,
    /// Output: first digi per event and module id.
    pub module_first: DeviceBuffer<u32>,
    /// `[bad, module count, module starts…]`: the two words `count_modules` counts into,
    /// next to each other so that one memset resets both.
    head: DeviceBuffer<u32>,
    slot_info: DeviceBuffer<u32>,
    slot_end: DeviceBuffer<u32>,
    /// Per event and module id: the module's end (count phase of `count_modules`).
    module_end: DeviceBuffer<u32>,
    /// The slot lists of the warp, middle and last small-module passes (sort phase).
    pass_lists: [DeviceBuffer<u32>; 3],
    larger: DeviceBuffer<u32>,
    fallback: DeviceBuffer<u32>,
    scratch: DeviceBuffer<u64>,
    status: Option<DeviceBuffer<u32>>,
    grid: DeviceBuffer<u32>,
    /// The fallback's status slabs (one per block) when they do not fit in shared memory.
    fallback_status: Option<DeviceBuffer<u32>>,
    graph: Option<(GraphKey, SendGraph)>,
    /// The device-view call's graph ([`super::dev_graph`]), captured on this plan.
    dev_graph: Option<Slot>,
    grid_limit: Option<u32>,
    /// Side streams (forks of `gpu`) of the concurrent passes, and the events that fork them
    /// from `gpu`'s stream and join them back.
    side: Vec<GpuContext>,
    fork_event: CudaEvent,
    join_events: Vec<CudaEvent>,
    /// Set while [`Clusterer::run_graph`] captures.
    capturing: bool,
}

/// Side streams of a `Clusterer`: the last and middle small-module passes, the
/// shared-memory kernel and the fallback, each with the charge cut of its modules (the warp
/// pass stays on the main stream).
const SIDE_STREAMS: usize = 4;

/// The module slots a charge-cut launch covers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum CutList {
    /// Every module slot.
    All,
    /// The shared-memory kernel's list (modules over the small-module capacity, up to the
    /// shared-memory capacity).
    Shared,
    /// The fallback's list (modules over the shared-memory capacity).
    Fallback,
}

/// A captured chain, movable to another thread with its `Clusterer`.
struct SendGraph(cudarc::driver::CudaGraph);

// SAFETY: a CUDA graph and its executable are driver handles of the process, valid on any
// thread once the context is current (cudarc binds it before launching); the wrapper is
// owned by one `Clusterer`, used through `&mut self` only, and never shared (not `Sync`).
unsafe impl Send for SendGraph {}

/// The small-module passes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pass {
    Warp,
    Mid,
    Last,
}

/// What a captured chain depends on: the digi buffers (addresses and capacities) and the cut.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct GraphKey {
    module: u64,
    capacity: (usize, usize),
    cut: Option<ChargeCut>,
}

/// The launch settings of a [`Clusterer`] (as CUB's tuning policies): `None` keeps the
/// default, chosen from the geometry and the batch capacity when the `Clusterer` is made.
/// Results never depend on them; `bench-clustering` sweeps them. Applied with
/// [`Clusterer::tune`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterTuning {
    /// Capacity of the warp pass (one warp per module, modules up to this many digis; 0: no
    /// warp pass), at most the small-module capacity.
    pub warp_capacity: Option<u32>,
    /// The middle block pass: `Some((capacity, threads))` (capacity below the small-module
    /// capacity, threads a multiple of 32 up to 1024), or `None` for no middle pass.
    pub mid_pass: Option<Option<(u32, u32)>>,
    /// Threads per block of the last block pass (a multiple of 32 up to 1024).
    pub small_threads: Option<u32>,
    /// Table scales of the middle and the last block pass (0 to
    /// [`detkit_gpu::clustering::MAX_TABLE_SCALE`]): each module's pixel table gets
    /// `2^scale` times the slots of [`detkit_gpu::clustering::small_table_size`].
    pub table_scale: Option<(u32, u32)>,
    /// Threads per block of the shared-memory kernel and of the fallback kernel.
    pub larger_threads: Option<(u32, u32)>,
    /// Whether each persistent grid is cut to the blocks that can find work in a batch of
    /// the capacity (default `true`; `false`: the resident grids).
    pub tight_grids: Option<bool>,
    /// A cap on the grid of every persistent kernel (at least one block; the sanitizer runs
    /// use it).
    pub grid_limit: Option<u32>,
    /// Threads per block of the seed's `findClus` baseline ([`Clusterer::find_clus_seed`]; a
    /// multiple of 32 up to 1024; default [`detkit_gpu::clustering::SEED_THREADS`], CMSSW's
    /// Phase-1 launch). A block size, so here and not in the [`Geometry`], which says what
    /// the detector is.
    pub seed_threads: Option<u32>,
}

impl crate::Backend {
    /// The backend with another clustering tuning, checked here ([`ClusterTuning::check`]; a
    /// typed error when out of range) and applied to every clusterer and batch queue its
    /// CUDA calls make from now on: the clustering workspaces it kept are dropped. A setting
    /// that the device or a call's capacities cannot take is that call's typed error.
    /// Results never depend on it; the CPU backend ignores it.
    pub fn with_cluster_tuning(mut self, tuning: &ClusterTuning) -> Result<Self> {
        tuning.check()?;
        self.cluster_tuning = *tuning;
        self.ws.clustering.clear();
        Ok(self)
    }

    /// The clustering tuning of this backend ([`crate::Backend::with_cluster_tuning`]).
    pub fn cluster_tuning(&self) -> &ClusterTuning {
        &self.cluster_tuning
    }
}

impl ClusterTuning {
    /// Checks what needs no device: every block size a multiple of 32 up to 1024, the table
    /// scales up to [`detkit_gpu::clustering::MAX_TABLE_SCALE`], a middle pass's capacity at
    /// least 1. [`Clusterer::tune`] checks this first (so a tuning out of these ranges
    /// changes nothing), then what depends on the device and the capacities.
    pub fn check(&self) -> Result<()> {
        let block = crate::cuda::check_block_size;
        if let Some(Some((cap, threads))) = self.mid_pass {
            block(threads)?;
            if cap == 0 {
                return Err(invalid("middle pass capacity", "0 (at least 1)"));
            }
        }
        for t in [self.small_threads, self.seed_threads]
            .into_iter()
            .flatten()
        {
            block(t)?;
        }
        if let Some((shared, fallback)) = self.larger_threads {
            block(shared)?;
            block(fallback)?;
        }
        if let Some((mid, last)) = self.table_scale {
            if mid > k::MAX_TABLE_SCALE || last > k::MAX_TABLE_SCALE {
                return Err(invalid(
                    "table scale",
                    format!("{mid}, {last} (0 to {})", k::MAX_TABLE_SCALE),
                ));
            }
        }
        Ok(())
    }
}

/// Most events in one launch (the slot records keep the event in 16 bits).
pub const MAX_EVENTS_PER_LAUNCH: usize = 1 << 16;

/// Default capacities: modules up to [`detkit_gpu::clustering::SMALL_CAPACITY`] digis take
/// the pairwise small-module kernel, up to [`DEFAULT_CAPACITY`] the shared-memory kernel with
/// status words and column buckets, larger ones the global-memory fallback.
pub const DEFAULT_CAPACITY: u32 = k::MEDIUM_CAPACITY;

impl Clusterer {
    /// Allocates everything for `geometry` with the default capacities.
    pub fn new(
        gpu: &Arc<GpuContext>,
        geometry: &Geometry,
        max_digis: usize,
        max_events: usize,
    ) -> Result<Self> {
        Self::with_capacity(
            gpu,
            geometry,
            max_digis,
            max_events,
            k::SMALL_CAPACITY,
            DEFAULT_CAPACITY,
        )
    }

    /// As [`Clusterer::new`] with chosen capacities: modules of up to `small_capacity` digis
    /// take the small-module kernel, up to `capacity` the shared-memory kernel, larger ones
    /// the fallback kernel (tests use tiny capacities to force each path).
    pub fn with_capacity(
        gpu: &Arc<GpuContext>,
        geometry: &Geometry,
        max_digis: usize,
        max_events: usize,
        small_capacity: u32,
        capacity: u32,
    ) -> Result<Self> {
        Self::build(
            gpu.clone(),
            geometry,
            max_digis,
            max_events,
            small_capacity,
            capacity,
        )
    }

    fn build(
        handle: Arc<GpuContext>,
        geometry: &Geometry,
        max_digis: usize,
        max_events: usize,
        small_capacity: u32,
        capacity: u32,
    ) -> Result<Self> {
        let gpu: &GpuContext = &handle;
        geometry.check()?;
        if max_digis >= 1 << 31 {
            return Err(Error::CapacityExceeded {
                what: "digis per launch",
                needed: max_digis as u64,
                capacity: (1 << 31) - 1,
            });
        }
        if max_events > MAX_EVENTS_PER_LAUNCH {
            return Err(Error::CapacityExceeded {
                what: "events per launch",
                needed: max_events as u64,
                capacity: MAX_EVENTS_PER_LAUNCH as u64,
            });
        }
        if small_capacity == 0 || small_capacity > k::MAX_SMALL_CAPACITY || capacity == 0 {
            return Err(invalid(
                "capacity",
                format!(
                    "small-module capacity {small_capacity} (1 to {}) and shared-memory capacity {capacity} (at least 1)",
                    k::MAX_SMALL_CAPACITY
                ),
            ));
        }
        let (rows, cols) = (geometry.rows, geometry.cols);
        let words = k::status_words(rows, cols);
        let status_in_smem = words <= k::STATUS_SMEM_MAX_WORDS;
        let smem = k::find_clus_smem_bytes(rows, cols, capacity, status_in_smem);
        // Table scales: larger tables where the shared memory keeps the residency (a scale
        // whose table does not fit a block falls back to 0).
        let few = max_events <= k::FEW_EVENTS_PER_LAUNCH as usize;
        let fits = |cap: u32, scale: u32| {
            k::find_clus_small_smem_bytes_slots(cap, 1, k::small_table_slots(cap, scale))
                <= crate::cuda::MAX_BLOCK_SMEM
        };
        let last_scale = if few {
            k::LATENCY_LAST_TABLE_SCALE
        } else {
            k::LAST_TABLE_SCALE
        };
        let table_scale = (
            if fits(k::MID_CAPACITY, k::MID_TABLE_SCALE) {
                k::MID_TABLE_SCALE
            } else {
                0
            },
            if fits(small_capacity, last_scale) {
                last_scale
            } else {
                0
            },
        );
        let small_smem = k::find_clus_small_smem_bytes_slots(
            small_capacity,
            1,
            k::small_table_slots(small_capacity, table_scale.1),
        );
        // The passes by module size (warp pass up to 32 digis, middle pass up to 128, last
        // pass), side by side; the last pass's blocks are larger for one or two events per
        // launch. Chosen from the pass sweep of bench-clustering (docs/benchmarks.md).
        let warp_capacity = small_capacity.min(k::WARP_CAPACITY);
        let small_threads = if max_events <= k::FEW_EVENTS_PER_LAUNCH as usize {
            k::LATENCY_SMALL_THREADS
        } else {
            k::SMALL_THREADS
        };
        let mid_pass =
            (small_capacity > k::MID_CAPACITY).then_some((k::MID_CAPACITY, k::MID_THREADS));
        let warp_smem = k::find_clus_small_smem_bytes(warp_capacity, k::WARP_PASS_THREADS / 32);
        for (what, bytes) in [
            ("find_clus shared memory (bytes)", smem),
            (
                "find_clus_small shared memory (bytes)",
                small_smem.max(warp_smem),
            ),
        ] {
            if bytes > crate::cuda::MAX_BLOCK_SMEM {
                return Err(Error::CapacityExceeded {
                    what,
                    needed: bytes as u64,
                    capacity: crate::cuda::MAX_BLOCK_SMEM as u64,
                });
            }
        }
        gpu.allow_smem(k::KERNEL_FIND_CLUS, smem)?;
        gpu.allow_smem(k::KERNEL_FIND_CLUS_SMALL, small_smem)?;
        gpu.allow_smem(k::KERNEL_FIND_CLUS_SMALL_WARP, warp_smem)?;
        let larger_threads = (k::SHARED_THREADS, k::FALLBACK_THREADS);
        let find_grid = resident_grid(gpu, k::KERNEL_FIND_CLUS, larger_threads.0, smem)?;
        let small_grid = resident_grid(gpu, k::KERNEL_FIND_CLUS_SMALL, small_threads, small_smem)?;
        let mid = match mid_pass {
            None => None,
            Some((cap, threads)) => Some((
                cap,
                threads,
                resident_grid(
                    gpu,
                    k::KERNEL_FIND_CLUS_SMALL,
                    threads,
                    k::find_clus_small_smem_bytes_slots(
                        cap,
                        1,
                        k::small_table_slots(cap, table_scale.0),
                    ),
                )?,
            )),
        };
        let warp_grid = resident_grid(
            gpu,
            k::KERNEL_FIND_CLUS_SMALL_WARP,
            k::WARP_PASS_THREADS,
            warp_smem,
        )?;
        let cells = (rows * cols) as usize;
        let fallback_smem = k::fallback_smem_bytes(rows, cols, status_in_smem);
        let fallback_grid = fallback_grid(gpu, cells, larger_threads.1, fallback_smem)?;
        let n = max_digis.max(1);
        let slots = max_events.max(1) * geometry.modules as usize;
        // One entry per module start: at most one per digi (also for unvalidated input,
        // whose modules may repeat within an event).
        let list = n + 1;
        let status = if status_in_smem {
            None
        } else {
            Some(gpu.zeros::<u32>(find_grid as usize * words as usize)?)
        };
        let side = (0..SIDE_STREAMS)
            .map(|_| gpu.fork())
            .collect::<Result<Vec<_>>>()?;
        let event = || {
            gpu.context()
                .new_event(None)
                .ctx("creating a clustering event")
        };
        let fork_event = event()?;
        let join_events = (0..SIDE_STREAMS)
            .map(|_| event())
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            gpu: handle.clone(),
            geometry: geometry.clone(),
            warp_capacity,
            warp_grid,
            small_capacity,
            small_threads,
            small_grid,
            mid,
            capacity,
            find_grid,
            smem,
            fallback_grid,
            fallback_smem,
            cut_grid: gpu.sm_count() * 8,
            table_scale,
            larger_threads,
            tight_grids: true,
            seed_threads: k::SEED_THREADS,
            max_digis,
            max_events: max_events.max(1),
            clus: gpu.zeros(n)?,
            clus_in_module: gpu.zeros(slots)?,
            module_first: gpu.filled_u32(slots, NO_MODULE_START)?,
            head: gpu.zeros(list + 1)?,
            slot_info: gpu.zeros(list)?,
            slot_end: gpu.zeros(list)?,
            module_end: gpu.zeros(slots)?,
            pass_lists: [gpu.zeros(list)?, gpu.zeros(list)?, gpu.zeros(list)?],
            larger: gpu.zeros(list)?,
            fallback: gpu.zeros(list)?,
            scratch: gpu.zeros(n)?,
            status,
            grid: gpu.filled_u32(fallback_grid as usize * cells, k::GRID_EMPTY)?,
            fallback_status: if status_in_smem {
                None
            } else {
                Some(gpu.zeros::<u32>(fallback_grid as usize * words as usize)?)
            },
            graph: None,
            dev_graph: None,
            grid_limit: None,
            side,
            fork_event,
            join_events,
            capturing: false,
        })
    }

    /// Sets the block size of the small-module kernel's block pass (a multiple of 32 up to
    /// 1024).
    fn set_small_threads(&mut self, threads: u32) -> Result<()> {
        crate::cuda::check_block_size(threads)?;
        let smem = self.block_pass_smem(self.small_capacity, self.table_scale.1);
        self.small_grid = resident_grid(&self.gpu, k::KERNEL_FIND_CLUS_SMALL, threads, smem)?
            .min(self.grid_limit.unwrap_or(u32::MAX));
        self.small_threads = threads;
        self.drop_graphs();
        Ok(())
    }

    /// Sets the capacity of the warp pass (one warp per module; modules up to this many
    /// digis): 0 turns the warp pass off, so that the block pass takes every module (its
    /// block of threads shares the work of one module: shorter per-module latency when
    /// there are too few modules to fill the GPU with warps). At most the small-module
    /// capacity.
    fn set_warp_capacity(&mut self, capacity: u32) -> Result<()> {
        if capacity > self.small_capacity {
            return Err(invalid(
                "warp capacity",
                format!(
                    "{capacity} over the small-module capacity {}",
                    self.small_capacity
                ),
            ));
        }
        if capacity > 0 {
            let smem = k::find_clus_small_smem_bytes(capacity, k::WARP_PASS_THREADS / 32);
            self.gpu.allow_smem(k::KERNEL_FIND_CLUS_SMALL_WARP, smem)?;
            self.warp_grid = resident_grid(
                &self.gpu,
                k::KERNEL_FIND_CLUS_SMALL_WARP,
                k::WARP_PASS_THREADS,
                smem,
            )?
            .min(self.grid_limit.unwrap_or(u32::MAX));
        }
        self.warp_capacity = capacity;
        self.drop_graphs();
        Ok(())
    }

    /// Sets the middle block pass between the warp pass and the last block pass: `Some((capacity,
    /// threads))` takes the modules up to `capacity` digis (below the small-module capacity)
    /// with blocks of `threads` (a multiple of 32 up to 1024); `None` removes it.
    fn set_mid_pass(&mut self, pass: Option<(u32, u32)>) -> Result<()> {
        self.mid = match pass {
            None => None,
            Some((cap, threads)) => {
                crate::cuda::check_block_size(threads)?;
                if cap == 0 || cap >= self.small_capacity {
                    return Err(invalid(
                        "middle pass capacity",
                        format!("{cap} (1 to {})", self.small_capacity - 1),
                    ));
                }
                let smem = self.block_pass_smem(cap, self.table_scale.0);
                if smem > crate::cuda::MAX_BLOCK_SMEM {
                    return Err(Error::CapacityExceeded {
                        what: "find_clus_small shared memory (bytes)",
                        needed: smem as u64,
                        capacity: crate::cuda::MAX_BLOCK_SMEM as u64,
                    });
                }
                let last = self.block_pass_smem(self.small_capacity, self.table_scale.1);
                self.gpu
                    .allow_smem(k::KERNEL_FIND_CLUS_SMALL, smem.max(last))?;
                let grid = resident_grid(&self.gpu, k::KERNEL_FIND_CLUS_SMALL, threads, smem)?
                    .min(self.grid_limit.unwrap_or(u32::MAX));
                Some((cap, threads, grid))
            }
        };
        self.drop_graphs();
        Ok(())
    }

    /// Shared-memory bytes of a block pass of capacity `cap` with table scale `scale`.
    fn block_pass_smem(&self, cap: u32, scale: u32) -> usize {
        k::find_clus_small_smem_bytes_slots(cap, 1, k::small_table_slots(cap, scale))
    }

    /// Sets the table scales of the middle and the last block pass (0 to
    /// [`detkit_gpu::clustering::MAX_TABLE_SCALE`]; defaults
    /// [`detkit_gpu::clustering::MID_TABLE_SCALE`] and, for the last pass,
    /// [`detkit_gpu::clustering::LATENCY_LAST_TABLE_SCALE`] up to
    /// [`detkit_gpu::clustering::FEW_EVENTS_PER_LAUNCH`] events per launch and
    /// [`detkit_gpu::clustering::LAST_TABLE_SCALE`] beyond): each module's pixel table gets
    /// `2^scale` times the slots of the capacity's [`detkit_gpu::clustering::small_table_size`]
    /// (fewer probes, more shared memory and more slots to clear). Results do not change.
    fn set_table_scale(&mut self, mid: u32, last: u32) -> Result<()> {
        if mid > k::MAX_TABLE_SCALE || last > k::MAX_TABLE_SCALE {
            return Err(invalid(
                "table scale",
                format!("{mid}, {last} (0 to {})", k::MAX_TABLE_SCALE),
            ));
        }
        let mid_cap = self.mid.map_or(0, |(c, _, _)| c);
        let bytes = self
            .block_pass_smem(self.small_capacity, last)
            .max(self.block_pass_smem(mid_cap.max(1), mid));
        if bytes > crate::cuda::MAX_BLOCK_SMEM {
            return Err(Error::CapacityExceeded {
                what: "find_clus_small shared memory (bytes)",
                needed: bytes as u64,
                capacity: crate::cuda::MAX_BLOCK_SMEM as u64,
            });
        }
        self.gpu.allow_smem(k::KERNEL_FIND_CLUS_SMALL, bytes)?;
        self.table_scale = (mid, last);
        // The grids for the new shared memory.
        self.set_small_threads(self.small_threads)?;
        self.set_mid_pass(self.mid.map(|(c, t, _)| (c, t)))
    }

    /// Sets the threads per block of the shared-memory kernel (modules over the small-module
    /// capacity; default [`detkit_gpu::clustering::SHARED_THREADS`]) and of the fallback
    /// kernel (modules over the shared-memory capacity; default
    /// [`detkit_gpu::clustering::FALLBACK_THREADS`]):
    /// multiples of 32 up to 1024 that the device can run (one block per multiprocessor at
    /// least). Results do not change.
    fn set_larger_threads(&mut self, shared: u32, fallback: u32) -> Result<()> {
        crate::cuda::check_block_size(shared)?;
        crate::cuda::check_block_size(fallback)?;
        for (kernel, threads, smem) in [
            (k::KERNEL_FIND_CLUS, shared, self.smem),
            (k::KERNEL_FIND_CLUS_FALLBACK, fallback, self.fallback_smem),
        ] {
            // The driver's occupancy query (unlike cudarc's own calls) needs the context
            // current on this thread, which may not be the one that made it.
            self.gpu
                .context()
                .bind_to_thread()
                .ctx("binding the context")?;
            let per_sm = self
                .gpu
                .kernel(kernel)?
                .occupancy_max_active_blocks_per_multiprocessor(threads, smem, None)
                .ctx(format!("querying the occupancy of {kernel}"))?;
            if per_sm == 0 {
                return Err(invalid(
                    "threads per block",
                    format!("{kernel} cannot run blocks of {threads} threads on this device"),
                ));
            }
        }
        let limit = self.grid_limit.unwrap_or(u32::MAX);
        self.find_grid =
            resident_grid(&self.gpu, k::KERNEL_FIND_CLUS, shared, self.smem)?.min(limit);
        let cells = (self.geometry.rows * self.geometry.cols) as usize;
        // At most the blocks whose pixel grids the buffer holds.
        self.fallback_grid = fallback_grid(&self.gpu, cells, fallback, self.fallback_smem)?
            .min(limit)
            .min((self.grid.len() / cells.max(1)) as u32)
            .max(1);
        if let Some(st) = &self.fallback_status {
            // At most the blocks whose status slabs the buffer holds.
            let words = k::status_words(self.geometry.rows, self.geometry.cols) as usize;
            self.fallback_grid = self
                .fallback_grid
                .min((st.len() / words.max(1)) as u32)
                .max(1);
        }
        if let Some(st) = &self.status {
            // The status slabs: one per block of the shared-memory kernel.
            let words = k::status_words(self.geometry.rows, self.geometry.cols) as usize;
            if st.len() < self.find_grid as usize * words {
                self.status = Some(self.gpu.zeros::<u32>(self.find_grid as usize * words)?);
            }
        }
        self.larger_threads = (shared, fallback);
        self.drop_graphs();
        Ok(())
    }

    /// Whether each persistent grid is cut to the most blocks that can find work in a batch
    /// of this workspace's capacity (default `true`): a pass over modules of more than `s`
    /// digis gets at most `max_digis / (s + 1)` module slots, and no list holds more than
    /// `max_events × modules`, so the blocks beyond that would only be dispatched and leave
    /// (thousands per event with one event per launch). `false` launches the resident grids
    /// (the measurement's baseline). Results do not change.
    fn set_tight_grids(&mut self, tight: bool) {
        self.tight_grids = tight;
        self.drop_graphs();
    }

    /// Caps the grid of every persistent (grid-stride) kernel at `blocks` blocks (at least
    /// one). Results do not change; the sanitizer runs use it, since racecheck keeps shadow
    /// state for the shared memory of every resident block.
    fn limit_grids(&mut self, blocks: u32) {
        let b = blocks.max(1);
        for g in [
            &mut self.warp_grid,
            &mut self.small_grid,
            &mut self.find_grid,
            &mut self.fallback_grid,
            &mut self.cut_grid,
        ] {
            *g = (*g).min(b);
        }
        if let Some((_, _, g)) = &mut self.mid {
            *g = (*g).min(b);
        }
        self.grid_limit = Some(b);
        self.drop_graphs();
    }

    /// Applies a tuning: every field that is `Some` replaces the current setting (the
    /// others stay), in the order warp pass, middle pass, block-pass threads, table scales,
    /// larger-module threads, tight grids, grid limit, seed threads. Results never change. A
    /// tuning out of [`ClusterTuning::check`]'s ranges is a typed error that changes
    /// nothing; a setting the device or the capacities cannot take is a typed error (the
    /// settings before it in that order are applied). The captured graph is dropped
    /// (recaptured on the next [`Clusterer::run_graph`]).
    pub fn tune(&mut self, t: &ClusterTuning) -> Result<()> {
        t.check()?;
        if let Some(w) = t.warp_capacity {
            self.set_warp_capacity(w)?;
        }
        if let Some(m) = t.mid_pass {
            self.set_mid_pass(m)?;
        }
        if let Some(th) = t.small_threads {
            self.set_small_threads(th)?;
        }
        if let Some((m, l)) = t.table_scale {
            self.set_table_scale(m, l)?;
        }
        if let Some((sh, fb)) = t.larger_threads {
            self.set_larger_threads(sh, fb)?;
        }
        if let Some(tight) = t.tight_grids {
            self.set_tight_grids(tight);
        }
        if let Some(b) = t.grid_limit {
            self.limit_grids(b);
        }
        if let Some(th) = t.seed_threads {
            self.seed_threads = th;
        }
        Ok(())
    }

    /// The pass configuration: warp-pass capacity (0: no warp pass), the middle block pass
    /// (capacity, threads) if any, and the last block pass's threads.
    pub fn passes(&self) -> (u32, Option<(u32, u32)>, u32) {
        (
            self.warp_capacity,
            self.mid.map(|(c, t, _)| (c, t)),
            self.small_threads,
        )
    }

    /// The context the chain launches on.
    pub(crate) fn context(&self) -> &GpuContext {
        &self.gpu
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Checks that `d`'s buffers fit this workspace: their capacities, not only the current
    /// batch, since a captured graph serves every batch copied into them later.
    fn check_fits(&self, d: &DeviceDigis) -> Result<()> {
        for (what, needed, capacity) in [
            ("clusterer workspace: digis", d.max_digis, self.max_digis),
            ("clusterer workspace: events", d.max_events, self.max_events),
        ] {
            if needed > capacity {
                return Err(Error::CapacityExceeded {
                    what,
                    needed: needed as u64,
                    capacity: capacity as u64,
                });
            }
        }
        Ok(())
    }

    fn module_start_ptr(&self) -> DevPtr<u32> {
        self.gpu.ptr(&self.head.slice(1..))
    }

    /// Resets the two counting words (one memset) and launches `count_modules` (count
    /// phase), which resets every other counter and output itself and records every
    /// module's end.
    pub fn count_modules(&mut self, d: &DeviceDigis) -> Result<()> {
        self.check_fits(d)?;
        self.gpu
            .stream()
            .memset_zeros(&mut self.head.slice_mut(0..2))
            .ctx("resetting clustering counters")?;
        self.launch_count(d, k::COUNT_PHASE_COUNT)
    }

    /// The size limits of the sort phase's three pass lists: the warp pass (0: none), the
    /// middle pass (the warp pass's when there is none) and the last pass.
    fn pass_caps(&self) -> [u32; 3] {
        let warp = self.warp_capacity;
        let mid = self.mid.map_or(warp, |(c, _, _)| c.max(warp));
        [warp, mid, self.small_capacity.max(mid)]
    }

    /// The most module slots a list of modules of over `above` digis can hold in a batch of
    /// this workspace's capacity (for validated input; the grids sized by it stride over
    /// any longer list, so unvalidated input is still clustered in full).
    fn list_bound(&self, above: u32) -> u64 {
        let digis = self.max_digis.max(1) as u64;
        let slots = digis.min(self.max_events as u64 * self.geometry.modules as u64);
        slots.min(digis / (above as u64 + 1)).max(1)
    }

    /// `grid` cut to the blocks that can find work in a list of modules of over `above`
    /// digis, `per_block` modules per block at a time.
    fn grid_for(&self, grid: u32, above: u32, per_block: u32) -> u32 {
        work_grid(grid, self.tight_grids, self.list_bound(above), per_block)
    }

    /// `count_modules` in `phase`: the count (one thread per digi and per event × module)
    /// or the sort of the module slots into the pass lists (one thread per slot).
    fn launch_count(&mut self, d: &DeviceDigis, phase: u32) -> Result<()> {
        let g = self.gpu.clone();
        let (nm, rows, cols) = (
            self.geometry.modules,
            self.geometry.rows,
            self.geometry.cols,
        );
        // Grid-stride over the digis and the module slots of the buffers' capacity (the
        // sizes of the batch are read on the device).
        let work = d.max_digis.max(d.max_events * nm as usize).max(1) as u64;
        let mut blocks = work
            .div_ceil(k::COUNT_MODULES_THREADS as u64)
            .min(g.sm_count() as u64 * 8);
        if phase == k::COUNT_PHASE_SORT {
            // One thread per module slot.
            blocks = self.grid_for(blocks as u32, 0, k::COUNT_MODULES_THREADS) as u64;
        }
        let params = k::ClusteringCountModulesParams {
            module: g.ptr(&d.module),
            x: g.ptr(&d.x),
            y: g.ptr(&d.y),
            event_offsets: g.ptr(&d.event_offsets),
            dims: g.ptr(&d.dims),
            clus: g.ptr_mut(&mut self.clus),
            module_start: self.module_start_ptr(),
            slot_info: g.ptr_mut(&mut self.slot_info),
            bad: g.ptr(&self.head.slice(0..1)),
            clus_in_module: g.ptr_mut(&mut self.clus_in_module),
            module_first: g.ptr_mut(&mut self.module_first),
            module_end: g.ptr_mut(&mut self.module_end),
            slot_end: g.ptr_mut(&mut self.slot_end),
            counters: [
                g.ptr(&self.pass_lists[0].slice(0..1)),
                g.ptr(&self.pass_lists[1].slice(0..1)),
                g.ptr(&self.pass_lists[2].slice(0..1)),
                g.ptr(&self.larger.slice(0..1)),
                g.ptr(&self.fallback.slice(0..1)),
            ],
            lists: [
                g.ptr(&self.pass_lists[0]),
                g.ptr(&self.pass_lists[1]),
                g.ptr(&self.pass_lists[2]),
                g.ptr(&self.larger),
                g.ptr(&self.fallback),
            ],
            nmodules: nm,
            rows,
            cols,
            phase,
            caps: {
                let [w, m, l] = self.pass_caps();
                [w, m, l, self.capacity.max(l)]
            },
        };
        // SAFETY: the buffers of `d` hold its capacities, which fit this workspace (checked
        // by the callers): `dims`, the digi arrays and the event offsets as the kernel reads
        // them; the slot arrays and lists hold one entry per module start (n + 1 words);
        // `module_end` one word per event and module; the count phase runs after the memset
        // of its counting words, the sort phase after the count phase, whose list counters
        // it zeroed; 256 threads (a multiple of 32).
        unsafe {
            g.launch(
                k::KERNEL_COUNT_MODULES,
                cfg(blocks, k::COUNT_MODULES_THREADS, 0),
                &params,
            )
        }
    }

    /// Whether the passes go to the side streams: always, except while a debug build
    /// captures a graph (a debug build synchronises after every launch on a side stream,
    /// which a capture forbids; there the passes run one after another on the main stream).
    fn concurrent(&self) -> bool {
        !(cfg!(debug_assertions) && self.capturing)
    }

    /// Launches the clustering kernels: the sort of the module slots by size (second phase
    /// of `count_modules`), then side by side the small-module passes (warp, middle, last;
    /// each applying `cut` to its modules) and the shared-memory kernel with the fallback
    /// after it, joined back into the main stream. The cut of the larger modules is
    /// [`Clusterer::charge_cut_larger`].
    pub fn find_clus(&mut self, d: &DeviceDigis, cut: Option<ChargeCut>) -> Result<()> {
        self.check_fits(d)?;
        self.passes_concurrently(d, cut, Some(None))
    }

    /// Step 1 of [`Clusterer::find_clus`]: the sort of the module slots and the
    /// small-module passes (side by side, joined).
    pub fn find_clus_small(&mut self, d: &DeviceDigis, cut: Option<ChargeCut>) -> Result<()> {
        self.check_fits(d)?;
        self.passes_concurrently(d, cut, None)
    }

    /// The sort phase, then the small-module passes and (when `larger` is `Some`) the
    /// shared-memory kernel, the fallback and the given cut of the larger modules on the
    /// side streams; every side stream used is joined back into the main stream.
    fn passes_concurrently(
        &mut self,
        d: &DeviceDigis,
        cut: Option<ChargeCut>,
        larger: Option<Option<ChargeCut>>,
    ) -> Result<()> {
        self.launch_count(d, k::COUNT_PHASE_SORT)?;
        let cut = cut.unwrap_or(ChargeCut::uniform(0));
        let conc = self.concurrent();
        let used = [true, self.mid.is_some(), larger.is_some(), larger.is_some()];
        let lane = |i: usize| conc.then_some(i);
        let what = "forking the clustering passes";
        if conc {
            self.fork_event.record(self.gpu.stream()).ctx(what)?;
            for (i, g) in self.side.iter().enumerate() {
                if used[i] {
                    g.stream().wait(&self.fork_event).ctx(what)?;
                }
            }
        }
        // The largest blocks first, so that they find room before the small ones fill the
        // multiprocessors.
        self.launch_small(d, cut, Pass::Last, lane(0))?;
        if used[1] {
            self.launch_small(d, cut, Pass::Mid, lane(1))?;
        }
        if let Some(cut_larger) = larger {
            // The fallback's modules were listed by the sort: it runs beside the
            // shared-memory kernel (before issue 13's session 5 it ran after it, which
            // listed them), each followed by the cut of its own modules.
            self.launch_fallback(d, lane(3), self.capacity)?;
            if let Some(c) = cut_larger {
                self.launch_charge_cut(d, c, CutList::Fallback, lane(3))?;
            }
            self.launch_shared(d, lane(2))?;
            if let Some(c) = cut_larger {
                self.launch_charge_cut(d, c, CutList::Shared, lane(2))?;
            }
        }
        if self.warp_capacity > 0 {
            self.launch_small(d, cut, Pass::Warp, None)?;
        }
        if conc {
            let what = "joining the clustering passes";
            for (i, g) in self.side.iter().enumerate() {
                if used[i] {
                    self.join_events[i].record(g.stream()).ctx(what)?;
                    self.gpu.stream().wait(&self.join_events[i]).ctx(what)?;
                }
            }
        }
        Ok(())
    }

    /// The context to launch on: side stream `lane`, or the main one.
    fn on(&self, lane: Option<usize>) -> &GpuContext {
        lane.map_or(&*self.gpu, |i| &self.side[i])
    }

    fn launch_small(
        &mut self,
        d: &DeviceDigis,
        cut: ChargeCut,
        pass: Pass,
        lane: Option<usize>,
    ) -> Result<()> {
        let g = self.gpu.clone();
        let geo = &self.geometry;
        let (nm, rows, cols, l1) = (geo.modules, geo.rows, geo.cols, geo.layer1_modules);
        let caps = self.pass_caps();
        let (cap, threads, grid, groups, list) = match (pass, self.mid) {
            (Pass::Warp, _) => (
                caps[0],
                k::WARP_PASS_THREADS,
                self.warp_grid,
                k::WARP_PASS_THREADS / 32,
                0,
            ),
            (Pass::Mid, Some((_, t, g))) => (caps[1], t, g, 1, 1),
            _ => (caps[2], self.small_threads, self.small_grid, 1, 2),
        };
        // The list holds modules over the previous pass's capacity.
        let above = if list == 0 { 0 } else { caps[list - 1] };
        let grid = self.grid_for(grid, above, groups);
        let kernel = if pass == Pass::Warp {
            k::KERNEL_FIND_CLUS_SMALL_WARP
        } else {
            k::KERNEL_FIND_CLUS_SMALL
        };
        let scale = match pass {
            Pass::Warp => 0,
            Pass::Mid => self.table_scale.0,
            Pass::Last => self.table_scale.1,
        };
        let slots = k::small_table_slots(cap.max(1), scale);
        if slots > k::MAX_TABLE_SLOTS {
            // Unreachable through the shared-memory checks (2^15 slots are 256 KiB); the
            // kernel keeps a digi's slot in 15 bits.
            return Err(Error::CapacityExceeded {
                what: "find_clus_small table slots",
                needed: slots as u64,
                capacity: k::MAX_TABLE_SLOTS as u64,
            });
        }
        let params = k::ClusteringFindClusSmallParams {
            module: g.ptr(&d.module),
            x: g.ptr(&d.x),
            y: g.ptr(&d.y),
            adc: g.ptr(&d.adc),
            nmodules: nm,
            rows,
            cols,
            module_start: self.module_start_ptr(),
            slot_info: g.ptr(&self.slot_info),
            slot_end: g.ptr(&self.slot_end),
            clus: g.ptr_mut(&mut self.clus),
            clus_in_module: g.ptr_mut(&mut self.clus_in_module),
            module_first: g.ptr_mut(&mut self.module_first),
            capacity: cap,
            table_slots: slots,
            layer1_modules: l1,
            threshold_layer1: cut.layer1,
            threshold_other: cut.other,
            slots: g.ptr(&self.pass_lists[list]),
            // The list was sorted with this capacity: no module over it.
            larger: DevPtr::NULL,
        };
        let smem = k::find_clus_small_smem_bytes_slots(cap.max(1), groups, slots);
        // SAFETY: launched after both phases of count_modules (in stream order, or on a side
        // stream forked after them), whose sort wrote this pass's list and the slot ends;
        // the passes running side by side cluster disjoint lists; shared memory for this
        // capacity, group count and table (`slots`, a power of two of at least
        // `small_table_size(cap)`; limit raised at construction, or by the setters);
        // threads checked.
        unsafe {
            self.on(lane)
                .launch(kernel, cfg(grid as u64, threads, smem), &params)
        }
    }

    /// Step 2 of [`Clusterer::find_clus`]: the shared-memory kernel over the modules that
    /// `find_clus_small` passed on (its blocks exit at once when there are none).
    pub fn find_clus_shared(&mut self, d: &DeviceDigis) -> Result<()> {
        self.check_fits(d)?;
        self.launch_shared(d, None)
    }

    fn launch_shared(&mut self, d: &DeviceDigis, lane: Option<usize>) -> Result<()> {
        let g = self.gpu.clone();
        let geo = &self.geometry;
        let (nm, rows, cols, cap) = (geo.modules, geo.rows, geo.cols, self.capacity);
        let status_ptr = self.status.as_ref();
        let grid = self.grid_for(self.find_grid, self.pass_caps()[2], 1);
        let params = k::ClusteringFindClusParams {
            module: g.ptr(&d.module),
            x: g.ptr(&d.x),
            y: g.ptr(&d.y),
            nmodules: nm,
            rows,
            cols,
            module_start: self.module_start_ptr(),
            slot_info: g.ptr(&self.slot_info),
            slot_end: g.ptr_mut(&mut self.slot_end),
            clus: g.ptr_mut(&mut self.clus),
            clus_in_module: g.ptr_mut(&mut self.clus_in_module),
            module_first: g.ptr_mut(&mut self.module_first),
            capacity: cap,
            // The kernel's status slab (its block-wide counters), or none.
            status_global: status_ptr.map_or(DevPtr::NULL, |st| g.ptr(st)),
            slots: g.ptr(&self.larger),
            fallback: g.ptr_mut(&mut self.fallback),
        };
        // SAFETY: launched after both phases of count_modules (the sort wrote its list and
        // the slot ends); shared memory `find_clus_smem_bytes` for this geometry and
        // capacity (limit raised at construction); the status slab has `find_grid` (at least
        // `grid`) zeroed slabs (kernels leave them zeroed; one user at a time: this lane);
        // threads checked (geometry or `set_larger_threads`).
        unsafe {
            self.on(lane).launch(
                k::KERNEL_FIND_CLUS,
                cfg(grid as u64, self.larger_threads.0, self.smem),
                &params,
            )
        }
    }

    /// Step 3 of [`Clusterer::find_clus`]: the global-memory fallback over the modules that
    /// `find_clus_shared` passed on (exits at once when there are none).
    pub fn find_clus_fallback(&mut self, d: &DeviceDigis) -> Result<()> {
        self.check_fits(d)?;
        self.launch_fallback(d, None, self.capacity)
    }

    /// The fallback over its list, whose modules have over `above` digis.
    fn launch_fallback(&mut self, d: &DeviceDigis, lane: Option<usize>, above: u32) -> Result<()> {
        let g = self.gpu.clone();
        let blocks = self.grid_for(self.fallback_grid, above, 1);
        let geo = &self.geometry;
        let (nm, rows, cols) = (geo.modules, geo.rows, geo.cols);
        let params = k::ClusteringFindClusFallbackParams {
            module: g.ptr(&d.module),
            x: g.ptr(&d.x),
            y: g.ptr(&d.y),
            nmodules: nm,
            rows,
            cols,
            module_start: self.module_start_ptr(),
            slot_info: g.ptr(&self.slot_info),
            slot_end: g.ptr(&self.slot_end),
            clus: g.ptr_mut(&mut self.clus),
            clus_in_module: g.ptr_mut(&mut self.clus_in_module),
            module_first: g.ptr_mut(&mut self.module_first),
            fallback: g.ptr(&self.fallback),
            grid: g.ptr_mut(&mut self.grid),
            status_global: self
                .fallback_status
                .as_mut()
                .map_or(DevPtr::NULL, |st| g.ptr_mut(st)),
            _pad0: 0,
        };
        // SAFETY: launched after find_clus (in stream order on the same lane);
        // `blocks` (at most the buffers') grids of rows*cols cells and, without status
        // words in shared memory, zeroed status slabs (the kernel leaves them zeroed);
        // shared memory for the block scan and the status words; threads checked (a
        // multiple of 32 up to 1024).
        unsafe {
            self.on(lane).launch(
                k::KERNEL_FIND_CLUS_FALLBACK,
                cfg(blocks as u64, self.larger_threads.1, self.fallback_smem),
                &params,
            )
        }
    }

    /// The benchmark's baseline in place of [`Clusterer::find_clus`]: the seed's `findClus`
    /// (see `detkit_gpu::clustering::clustering_find_clus_seed`), one block per module slot
    /// as the seed launches it, then the same fallback kernel for the modules it cannot hold.
    /// Cluster numbers within a module follow `atomicInc` order (not deterministic); the
    /// partition into clusters is the oracle's. Phase-1-sized geometries only (its status
    /// words live in shared memory, as in CMSSW).
    pub fn find_clus_seed(&mut self, d: &DeviceDigis) -> Result<()> {
        self.check_fits(d)?;
        if d.n == 0 {
            return Ok(());
        }
        let g = self.gpu.clone();
        let geo = &self.geometry;
        let smem = k::find_clus_seed_smem_bytes(geo.rows, geo.cols);
        if k::status_words(geo.rows, geo.cols) > k::STATUS_SMEM_MAX_WORDS
            || smem > crate::cuda::MAX_BLOCK_SMEM
        {
            return Err(Error::CapacityExceeded {
                what: "seed find_clus shared memory (bytes)",
                needed: smem as u64,
                capacity: (k::STATUS_SMEM_MAX_WORDS * 4) as u64,
            });
        }
        g.allow_smem(k::KERNEL_FIND_CLUS_SEED, smem)?;
        let (nm, rows, cols) = (geo.modules, geo.rows, geo.cols);
        let blocks = (d.nevents as u64 * nm as u64).min(d.n as u64).min(MAX_GRID);
        {
            let params = k::ClusteringFindClusSeedParams {
                module: g.ptr(&d.module),
                x: g.ptr(&d.x),
                y: g.ptr(&d.y),
                event_offsets: g.ptr(&d.event_offsets),
                nmodules: nm,
                rows,
                cols,
                module_start: self.module_start_ptr(),
                slot_info: g.ptr(&self.slot_info),
                slot_end: g.ptr_mut(&mut self.slot_end),
                clus: g.ptr_mut(&mut self.clus),
                clus_in_module: g.ptr_mut(&mut self.clus_in_module),
                module_first: g.ptr_mut(&mut self.module_first),
                fallback: g.ptr_mut(&mut self.fallback),
                _pad0: 0,
            };
            // SAFETY: launched after count_modules; shared memory `find_clus_seed_smem_bytes`
            // (limit raised above); threads checked with the tuning (a multiple of 32 up to
            // 1024).
            let r = unsafe {
                g.launch(
                    k::KERNEL_FIND_CLUS_SEED,
                    cfg(blocks, self.seed_threads, smem),
                    &params,
                )
            };
            r?;
        }
        // The seed lists modules of any size it cannot hold.
        self.launch_fallback(d, None, 0)
    }

    /// Launches the charge cut over every module (`cut` thresholds; zero keeps everything).
    /// Applying a cut twice changes nothing, so this is also correct after a
    /// [`Clusterer::find_clus`] that applied it to the small modules.
    pub fn charge_cut(&mut self, d: &DeviceDigis, cut: ChargeCut) -> Result<()> {
        self.check_fits(d)?;
        self.launch_charge_cut(d, cut, CutList::All, None)
    }

    /// Launches the charge cut over the modules that [`Clusterer::find_clus`] did not cut
    /// itself (those over the small-module capacity: the shared-memory kernel's list, then
    /// the fallback's).
    pub fn charge_cut_larger(&mut self, d: &DeviceDigis, cut: ChargeCut) -> Result<()> {
        self.check_fits(d)?;
        self.launch_charge_cut(d, cut, CutList::Shared, None)?;
        self.launch_charge_cut(d, cut, CutList::Fallback, None)
    }

    fn launch_charge_cut(
        &mut self,
        d: &DeviceDigis,
        cut: ChargeCut,
        list: CutList,
        lane: Option<usize>,
    ) -> Result<()> {
        let g = self.gpu.clone();
        let geo = &self.geometry;
        let (nm, l1) = (geo.modules, geo.layer1_modules);
        let above = match list {
            CutList::All => 0,
            CutList::Shared => self.pass_caps()[2],
            CutList::Fallback => self.capacity.max(self.pass_caps()[2]),
        };
        let grid = self.grid_for(self.cut_grid, above, 1);
        let params = k::ClusteringClusterChargeCutParams {
            adc: g.ptr(&d.adc),
            nmodules: nm,
            layer1_modules: l1,
            threshold_layer1: cut.layer1,
            threshold_other: cut.other,
            module_start: self.module_start_ptr(),
            slot_info: g.ptr(&self.slot_info),
            slot_end: g.ptr(&self.slot_end),
            clus: g.ptr_mut(&mut self.clus),
            clus_in_module: g.ptr_mut(&mut self.clus_in_module),
            scratch: g.ptr_mut(&mut self.scratch),
            // The list of larger modules, or none (every module).
            slots: match list {
                CutList::All => DevPtr::NULL,
                CutList::Shared => g.ptr(&self.larger),
                CutList::Fallback => g.ptr(&self.fallback),
            },
        };
        // SAFETY: launched after find_clus (for a list of larger modules: after the kernel
        // that clusters that list, in stream order on the same lane; two cuts may run at
        // once, over disjoint lists, and a module's scratch words are
        // `scratch[first..first + size]`, disjoint between modules); scratch holds
        // max_digis u64; the slot list is null or written by the sort phase; shared memory
        // for the scan.
        unsafe {
            self.on(lane).launch(
                k::KERNEL_CHARGE_CUT,
                cfg(grid as u64, k::CUT_THREADS, k::scan_only_smem_bytes()),
                &params,
            )
        }
    }

    /// The whole chain: count_modules (both phases), then side by side the small-module
    /// passes (cut inline) and the shared-memory kernel, the fallback and the charge cut of
    /// the larger modules (unless `cut` is `None`), joined. One memset and up to eight
    /// kernels on up to four streams, none of them synchronising with the host.
    pub fn run(&mut self, d: &DeviceDigis, cut: Option<ChargeCut>) -> Result<()> {
        self.count_modules(d)?;
        self.passes_concurrently(d, cut, Some(cut))
    }

    /// [`Clusterer::run`] as one CUDA graph launch: the chain is captured on the first call
    /// for these digi buffers and this cut (and again after they change), then replayed.
    /// The captured kernels read the batch's sizes on the device, so every batch copied
    /// into `d` with [`DeviceDigis::copy_from`] is served by the same graph.
    pub fn run_graph(&mut self, d: &DeviceDigis, cut: Option<ChargeCut>) -> Result<()> {
        self.check_fits(d)?;
        let key = self.graph_key(d, cut);
        if self.graph.as_ref().map(|(k, _)| *k) != Some(key) {
            self.graph = None;
            let gpu = self.gpu.clone();
            self.capturing = true;
            let graph = gpu.capture(|| self.run(d, cut));
            self.capturing = false;
            self.graph = Some((key, SendGraph(graph?)));
        }
        let (_, graph) = self.graph.as_ref().expect("captured above");
        graph.0.launch().ctx("launching the clustering graph")
    }

    /// What a graph of the chain on `d`'s buffers with `cut` depends on.
    pub(crate) fn graph_key(&self, d: &DeviceDigis, cut: Option<ChargeCut>) -> GraphKey {
        GraphKey {
            module: self.gpu.ptr(&d.module).addr(),
            capacity: (d.max_digis, d.max_events),
            cut,
        }
    }

    /// Drops the captured graphs (a setting changed): recaptured on their next use.
    fn drop_graphs(&mut self) {
        self.graph = None;
        self.dev_graph = None;
    }

    /// The device-view call's graph, when one is kept.
    pub(crate) fn dev_graph_mut(&mut self) -> &mut Option<Slot> {
        &mut self.dev_graph
    }

    /// Captures `before` (given the context and `d`), the chain ([`Clusterer::run`] on `d`
    /// with `cut`) and `after` on this clusterer's stream as one CUDA graph (not launched).
    pub(crate) fn capture_chain(
        &mut self,
        d: &mut DeviceDigis,
        cut: Option<ChargeCut>,
        before: impl FnOnce(&GpuContext, &mut DeviceDigis) -> Result<()>,
        after: impl FnOnce(&Self) -> Result<()>,
    ) -> Result<cudarc::driver::CudaGraph> {
        self.check_fits(d)?;
        let gpu = self.gpu.clone();
        self.capturing = true;
        let r = gpu.capture(|| {
            before(&gpu, d)?;
            self.run(d, cut)?;
            after(self)
        });
        self.capturing = false;
        r
    }

    /// The device addresses of the three outputs (`clus`, `clus_in_module`,
    /// `module_first`).
    pub(crate) fn output_addrs(&self) -> [u64; 3] {
        [
            self.gpu.ptr(&self.clus).addr(),
            self.gpu.ptr(&self.clus_in_module).addr(),
            self.gpu.ptr(&self.module_first).addr(),
        ]
    }

    /// The device addresses of the chain's three status words (bad digi, medium and
    /// fallback module counts), as [`Clusterer::enqueue_status`] copies them.
    pub(crate) fn status_addrs(&self) -> [u64; 3] {
        [
            self.gpu.ptr(&self.head).addr(),
            self.gpu.ptr(&self.larger).addr(),
            self.gpu.ptr(&self.fallback).addr(),
        ]
    }

    /// The shared handle of the context the chain launches on.
    pub(crate) fn context_shared(&self) -> &Arc<GpuContext> {
        &self.gpu
    }

    /// Synchronises and returns how many modules took the shared-memory kernel and the
    /// fallback kernel, or the typed error of a digi the kernels found out of range (callers
    /// that skipped [`super::validate`]).
    pub fn status(&self) -> Result<(u32, u32)> {
        let s = self.gpu.stream();
        let what = "reading the module counts";
        let mut bad = [0u32; 1];
        let (mut medium, mut fallback) = ([0u32; 1], [0u32; 1]);
        s.memcpy_dtoh(&self.head.slice(0..1), &mut bad[..])
            .ctx(what)?;
        s.memcpy_dtoh(&self.larger.slice(0..1), &mut medium[..])
            .ctx(what)?;
        s.memcpy_dtoh(&self.fallback.slice(0..1), &mut fallback[..])
            .ctx(what)?;
        s.synchronize().ctx(what)?;
        self.decode_status(bad[0], medium[0], fallback[0])
    }

    /// Issues the copies of the three status words (bad digi, medium and fallback module
    /// counts) into `dst` (pinned, three words), without waiting;
    /// [`Clusterer::decode_status`] reads them once the stream has finished.
    pub(crate) fn enqueue_status(&self, dst: &mut [u32]) -> Result<()> {
        let s = self.gpu.stream();
        let what = "reading the module counts";
        s.memcpy_dtoh(&self.head.slice(0..1), &mut dst[0..1])
            .ctx(what)?;
        s.memcpy_dtoh(&self.larger.slice(0..1), &mut dst[1..2])
            .ctx(what)?;
        s.memcpy_dtoh(&self.fallback.slice(0..1), &mut dst[2..3])
            .ctx(what)
    }

    pub(crate) fn decode_status(&self, bad: u32, medium: u32, fallback: u32) -> Result<(u32, u32)> {
        if let Some(first) = decode_first_index(bad) {
            return Err(invalid(
                "digis",
                format!(
                    "digi {first}: module id or pixel out of range for {}",
                    self.geometry.name
                ),
            ));
        }
        // The sort lists the modules over the shared-memory capacity for the fallback
        // directly (the shared-memory kernel's list holds the others).
        Ok((medium + fallback, fallback))
    }

    /// Fills the per-digi outputs with a poison value (tests: an element the kernels fail to
    /// write shows up).
    pub fn poison_outputs(&mut self) -> Result<()> {
        let n = self.clus.len();
        let g = self.gpu.clone();
        let s = g.stream();
        s.memcpy_htod(&vec![0x5a5a_5a5a_i32; n], &mut self.clus)
            .ctx("poisoning outputs")?;
        let ns = self.slot_end.len();
        g.fill_u32(&mut self.slot_end, ns, 0xdead_beef)?;
        let nm = self.module_first.len();
        g.fill_u32(&mut self.module_first, nm, 0xdead_beef)?;
        let nc = self.clus_in_module.len();
        g.fill_u32(&mut self.clus_in_module, nc, 0xdead_beef)
    }

    /// Downloads the results of the last [`Clusterer::run`] on `d`.
    pub fn results(&self, d: &DeviceDigis) -> Result<Clusters> {
        let mut c = Clusters {
            clus: Vec::new(),
            clus_in_module: Vec::new(),
            module_first: Vec::new(),
            modules: self.geometry.modules as usize,
            medium_modules: 0,
            fallback_modules: 0,
        };
        self.results_into(d, &mut c)?;
        Ok(c)
    }

    /// As [`Clusterer::results`] into `out`, reusing its vectors (no allocation once they
    /// have grown to the batch's size).
    pub fn results_into(&self, d: &DeviceDigis, out: &mut Clusters) -> Result<()> {
        self.download_results(d, out, None)
    }

    /// The largest batch this workspace takes: digis and events.
    pub fn capacity(&self) -> (usize, usize) {
        (self.max_digis, self.max_events)
    }

    /// Issues the copies of the last run's results into `stage`'s pinned buffers, without
    /// waiting ([`Clusterer::finish_results`] waits and reads them).
    pub(crate) fn enqueue_results(
        &self,
        d: &DeviceDigis,
        stage: &mut ClusterStaging,
    ) -> Result<()> {
        self.enqueue_results_to(d, stage, None)
    }

    /// [`Clusterer::enqueue_results`], the cluster indices DMAed straight to host address
    /// `clus_to` when given (the caller's pinned memory, `d.n` elements, neither read nor
    /// written by the host until the stream has finished this copy) rather than into the
    /// stage.
    pub(crate) fn enqueue_results_to(
        &self,
        d: &DeviceDigis,
        stage: &mut ClusterStaging,
        clus_to: Option<usize>,
    ) -> Result<()> {
        let slots = d.nevents * self.geometry.modules as usize;
        let g = &*self.gpu;
        let s = g.stream();
        let what = "copying clusters from the device";
        stage.landed.clear();
        if let Some(to) = clus_to {
            if d.n > 0 {
                g.context().bind_to_thread().ctx(what)?;
                let src = g.ptr(&self.clus).addr();
                // SAFETY: the device buffer holds at least `d.n` cluster indices (the batch's
                // digis); `to` addresses `d.n` writable `i32`s of pinned host memory that
                // nobody touches until the stream has finished this copy (the caller's
                // contract above).
                unsafe {
                    cudarc::driver::sys::cuMemcpyDtoHAsync_v2(
                        to as *mut std::ffi::c_void,
                        src,
                        d.n * std::mem::size_of::<i32>(),
                        s.cu_stream(),
                    )
                }
                .result()
                .ctx(what)?;
            }
        }
        let clus = if clus_to.is_some() {
            &mut [][..]
        } else {
            stage.clus.get(g, d.n)?
        };
        // In pieces, an event behind each, so that the host copies a piece out while the
        // next one moves (one piece for an event or a few).
        let piece = crate::staging::PIPELINE_BYTES / 4;
        for (i, h) in clus.chunks_mut(piece).enumerate() {
            let lo = i * piece;
            s.memcpy_dtoh(&self.clus.slice(lo..lo + h.len()), h)
                .ctx(what)?;
            if d.n > piece {
                stage.landed.push(
                    s.record_event(Some(
                        cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
                    ))
                    .ctx(what)?,
                );
            }
        }
        let w = stage.slots.get(g, 2 * slots + 3)?;
        let (cim, rest) = w.split_at_mut(slots);
        let (mf, status) = rest.split_at_mut(slots);
        s.memcpy_dtoh(&self.clus_in_module.slice(0..slots), cim)
            .ctx(what)?;
        s.memcpy_dtoh(&self.module_first.slice(0..slots), mf)
            .ctx(what)?;
        s.memcpy_dtoh(&self.head.slice(0..1), &mut status[0..1])
            .ctx(what)?;
        s.memcpy_dtoh(&self.larger.slice(0..1), &mut status[1..2])
            .ctx(what)?;
        s.memcpy_dtoh(&self.fallback.slice(0..1), &mut status[2..3])
            .ctx(what)
    }

    /// Waits for the copies of [`Clusterer::enqueue_results`] and moves the results into
    /// `out` (its vectors reused).
    pub(crate) fn finish_results(
        &self,
        d: &DeviceDigis,
        stage: &mut ClusterStaging,
        out: &mut Clusters,
    ) -> Result<()> {
        let slots = d.nevents * self.geometry.modules as usize;
        out.clus.resize(d.n, 0);
        out.clus_in_module.resize(slots, 0);
        out.module_first.resize(slots, 0);
        let (medium, fallback) = self.finish_results_to(d, stage, out.as_mut())?;
        out.modules = self.geometry.modules as usize;
        out.medium_modules = medium;
        out.fallback_modules = fallback;
        Ok(())
    }

    /// [`Clusterer::finish_results`] into the caller's slices (of the batch's lengths,
    /// checked by the caller); returns the medium and fallback module counts.
    pub(crate) fn finish_results_to(
        &self,
        d: &DeviceDigis,
        stage: &mut ClusterStaging,
        out: ClustersMut<'_>,
    ) -> Result<(u32, u32)> {
        let slots = d.nevents * self.geometry.modules as usize;
        let g = &*self.gpu;
        let piece = crate::staging::PIPELINE_BYTES / 4;
        let landed = std::mem::take(&mut stage.landed);
        if landed.is_empty() {
            g.synchronize()?;
            phases::mark(Phase::Wait);
            par_copy(&mut out.clus[..d.n], stage.clus.get(g, d.n)?);
            phases::mark(Phase::CopyOut);
        } else {
            // Each piece is copied out as soon as it has landed.
            let clus = stage.clus.get(g, d.n)?;
            let pieces = out.clus[..d.n].chunks_mut(piece).zip(clus.chunks(piece));
            for ((dst, src), e) in pieces.zip(&landed) {
                e.synchronize().ctx("waiting for the clusters")?;
                phases::mark(Phase::Wait);
                par_copy(dst, src);
                phases::mark(Phase::CopyOut);
            }
            g.synchronize()?;
            phases::mark(Phase::Wait);
        }
        stage.landed = landed;
        let w = stage.slots.get(g, 2 * slots + 3)?;
        out.clus_in_module[..slots].copy_from_slice(&w[..slots]);
        out.module_first[..slots].copy_from_slice(&w[slots..2 * slots]);
        let r = self.decode_status(w[2 * slots], w[2 * slots + 1], w[2 * slots + 2]);
        phases::mark(Phase::Unpack);
        r
    }

    /// The results of the last run on `d` into `out`: through `stage` (asynchronous copies
    /// into pinned memory, one wait, host copies) or, without one, straight into `out`.
    pub(crate) fn download_results(
        &self,
        d: &DeviceDigis,
        out: &mut Clusters,
        stage: Option<&mut ClusterStaging>,
    ) -> Result<()> {
        let slots = d.nevents * self.geometry.modules as usize;
        out.clus.resize(d.n, 0);
        out.clus_in_module.resize(slots, 0);
        out.module_first.resize(slots, 0);
        let (medium, fallback) = self.download_results_to(d, out.as_mut(), stage)?;
        out.modules = self.geometry.modules as usize;
        out.medium_modules = medium;
        out.fallback_modules = fallback;
        Ok(())
    }

    /// [`Clusterer::download_results`] into the caller's slices (of the batch's lengths,
    /// checked by the caller); returns the medium and fallback module counts.
    pub(crate) fn download_results_to(
        &self,
        d: &DeviceDigis,
        out: ClustersMut<'_>,
        stage: Option<&mut ClusterStaging>,
    ) -> Result<(u32, u32)> {
        if let Some(st) = stage {
            self.enqueue_results(d, st)?;
            phases::mark(Phase::Stage);
            return self.finish_results_to(d, st, out);
        }
        let slots = d.nevents * self.geometry.modules as usize;
        let s = self.gpu.stream();
        let what = "copying clusters from the device";
        if d.n > 0 {
            s.memcpy_dtoh(&self.clus.slice(0..d.n), &mut out.clus[..d.n])
                .ctx(what)?;
        }
        s.memcpy_dtoh(
            &self.clus_in_module.slice(0..slots),
            &mut out.clus_in_module[..slots],
        )
        .ctx(what)?;
        s.memcpy_dtoh(
            &self.module_first.slice(0..slots),
            &mut out.module_first[..slots],
        )
        .ctx(what)?;
        phases::mark(Phase::Stage);
        let r = self.status();
        phases::mark(Phase::Wait);
        r
    }
}

/// Blocks of the fallback kernel of `threads` threads: [`k::FALLBACK_BLOCKS_PER_SM`] per
/// multiprocessor, at most the resident ones, and at most [`k::FALLBACK_GRID_BYTES`] of pixel
/// grids (`cells` words each).
fn fallback_grid(gpu: &GpuContext, cells: usize, threads: u32, smem: usize) -> Result<u32> {
    let resident = resident_grid(gpu, k::KERNEL_FIND_CLUS_FALLBACK, threads, smem)?;
    Ok((k::FALLBACK_BLOCKS_PER_SM * gpu.sm_count())
        .min(resident)
        .min((k::FALLBACK_GRID_BYTES / (4 * cells)).max(1) as u32))
}

/// At most the blocks of a persistent grid that can find work: `items` work items (module
/// slots) at `per_block` per block, at least one block; `grid` when not `tight`.
fn work_grid(grid: u32, tight: bool, items: u64, per_block: u32) -> u32 {
    if tight {
        grid.min(items.div_ceil(per_block as u64).clamp(1, u32::MAX as u64) as u32)
    } else {
        grid
    }
}

/// Blocks of `kernel` that fit on the device at once (occupancy × SMs): the grid of a
/// persistent, grid-stride launch.
fn resident_grid(gpu: &GpuContext, kernel: &'static str, threads: u32, smem: usize) -> Result<u32> {
    // The occupancy query needs the context current on this thread (see above).
    gpu.context().bind_to_thread().ctx("binding the context")?;
    let per_sm = gpu
        .kernel(kernel)?
        .occupancy_max_active_blocks_per_multiprocessor(threads, smem, None)
        .ctx(format!("querying the occupancy of {kernel}"))?
        .max(1);
    Ok(per_sm * gpu.sm_count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_keeps_a_checked_cluster_tuning() {
        let t = ClusterTuning {
            small_threads: Some(64),
            grid_limit: Some(8),
            ..Default::default()
        };
        let b = crate::Backend::cpu().with_cluster_tuning(&t).unwrap();
        assert_eq!(b.cluster_tuning(), &t);
        assert_eq!(
            crate::Backend::cpu().cluster_tuning(),
            &ClusterTuning::default()
        );
        let bad = ClusterTuning {
            small_threads: Some(100),
            ..Default::default()
        };
        assert!(crate::Backend::cpu().with_cluster_tuning(&bad).is_err());
    }

    #[test]
    fn tuning_checks_block_sizes_and_scales_without_a_device() {
        assert!(ClusterTuning::default().check().is_ok());
        // The seed baseline's default is what `Geometry::phase1().threads` was.
        assert_eq!(k::SEED_THREADS, 256);
        let ok = ClusterTuning {
            mid_pass: Some(Some((8, 64))),
            small_threads: Some(1024),
            table_scale: Some((k::MAX_TABLE_SCALE, 0)),
            larger_threads: Some((32, 1024)),
            seed_threads: Some(384),
            ..Default::default()
        };
        assert!(ok.check().is_ok());
        let bad = [
            ClusterTuning {
                seed_threads: Some(0),
                ..Default::default()
            },
            ClusterTuning {
                seed_threads: Some(1056),
                ..Default::default()
            },
            ClusterTuning {
                small_threads: Some(100),
                ..Default::default()
            },
            ClusterTuning {
                mid_pass: Some(Some((8, 48))),
                ..Default::default()
            },
            ClusterTuning {
                mid_pass: Some(Some((0, 64))),
                ..Default::default()
            },
            ClusterTuning {
                larger_threads: Some((256, 2048)),
                ..Default::default()
            },
            ClusterTuning {
                table_scale: Some((0, k::MAX_TABLE_SCALE + 1)),
                ..Default::default()
            },
        ];
        for t in bad {
            assert!(
                matches!(t.check(), Err(Error::InvalidInput { .. })),
                "{t:?} accepted"
            );
        }
    }
}
