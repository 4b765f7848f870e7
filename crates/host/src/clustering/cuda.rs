//! Clustering launchers on [`GpuContext`]: device-resident digis and the [`Clusterer`], which
//! keeps its buffers and launch geometry between batches of events.

use detkit_gpu::clustering::{self as k, NO_MODULE_START};
use detkit_gpu::histogram::decode_first_index;
use detkit_gpu::DevPtr;

use super::{ChargeCut, Clusters, Digis, Geometry};
use crate::cuda::{cfg, DeviceBuffer, GpuContext, MAX_GRID};
use crate::error::{invalid, DriverContext, Error, Result};

/// Device-resident digis of one or more events.
pub struct DeviceDigis {
    /// Module ids.
    pub module: DeviceBuffer<u16>,
    /// Rows.
    pub x: DeviceBuffer<u16>,
    /// Columns.
    pub y: DeviceBuffer<u16>,
    /// Charges.
    pub adc: DeviceBuffer<u16>,
    /// Event offsets (`nevents + 1`).
    pub event_offsets: DeviceBuffer<u32>,
    n: usize,
    nevents: usize,
}

impl DeviceDigis {
    /// Copies validated digis to the device.
    pub fn upload(gpu: &GpuContext, digis: &Digis, event_offsets: &[u32]) -> Result<Self> {
        let pad = |v: &[u16]| -> Result<DeviceBuffer<u16>> {
            if v.is_empty() {
                gpu.zeros(1)
            } else {
                gpu.upload(v)
            }
        };
        Ok(Self {
            module: pad(&digis.module)?,
            x: pad(&digis.x)?,
            y: pad(&digis.y)?,
            adc: pad(&digis.adc)?,
            event_offsets: gpu.upload(event_offsets)?,
            n: digis.len(),
            nevents: event_offsets.len() - 1,
        })
    }

    /// Number of digis.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether there is no digi.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Number of events.
    pub fn events(&self) -> usize {
        self.nevents
    }
}

/// Device workspace and outputs of the clustering chain for up to `max_digis` digis and
/// `max_events` events per launch. Steps can be launched one by one (for timing) or with
/// [`Clusterer::run`]; nothing synchronises until [`Clusterer::results`].
pub struct Clusterer<'g> {
    gpu: &'g GpuContext,
    geometry: Geometry,
    warp_capacity: u32,
    warp_grid: u32,
    small_capacity: u32,
    small_threads: u32,
    small_grid: u32,
    capacity: u32,
    find_grid: u32,
    smem: usize,
    fallback_grid: u32,
    max_digis: usize,
    max_events: usize,
    /// Output: cluster index per digi.
    pub clus: DeviceBuffer<i32>,
    /// Output: clusters per event and module id.
    pub clus_in_module: DeviceBuffer<u32>,
    /// Output: first digi per event and module id.
    pub module_first: DeviceBuffer<u32>,
    module_start: DeviceBuffer<u32>,
    slot_info: DeviceBuffer<u32>,
    slot_end: DeviceBuffer<u32>,
    larger_warp: DeviceBuffer<u32>,
    larger: DeviceBuffer<u32>,
    fallback: DeviceBuffer<u32>,
    scratch: DeviceBuffer<u64>,
    status: Option<DeviceBuffer<u32>>,
    grid: DeviceBuffer<u32>,
    bad: DeviceBuffer<u32>,
}

/// Most events in one launch (the slot records keep the event in 16 bits).
pub const MAX_EVENTS_PER_LAUNCH: usize = 1 << 16;

/// Default capacities: modules up to [`detkit_gpu::clustering::SMALL_CAPACITY`] digis take
/// the pairwise small-module kernel, up to [`DEFAULT_CAPACITY`] the shared-memory kernel with
/// status words and column buckets, larger ones the global-memory fallback.
pub const DEFAULT_CAPACITY: u32 = k::MEDIUM_CAPACITY;

impl<'g> Clusterer<'g> {
    /// Allocates everything for `geometry` with the default capacities.
    pub fn new(
        gpu: &'g GpuContext,
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
        gpu: &'g GpuContext,
        geometry: &Geometry,
        max_digis: usize,
        max_events: usize,
        small_capacity: u32,
        capacity: u32,
    ) -> Result<Self> {
        geometry.check()?;
        if max_digis >= 1 << 31 {
            return Err(Error::CapacityExceeded {
                what: "digis per launch",
                needed: max_digis as u64,
                capacity: (1 << 31) - 1,
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
        let small_smem = k::find_clus_small_smem_bytes(small_capacity, 1);
        let warp_capacity = small_capacity.min(k::WARP_CAPACITY);
        let warp_smem = k::find_clus_small_smem_bytes(warp_capacity, k::WARP_PASS_THREADS / 32);
        for (what, bytes) in [
            ("find_clus shared memory (bytes)", smem),
            (
                "find_clus_small shared memory (bytes)",
                small_smem.max(warp_smem),
            ),
        ] {
            if bytes > crate::bucket::MAX_BLOCK_SMEM {
                return Err(Error::CapacityExceeded {
                    what,
                    needed: bytes as u64,
                    capacity: crate::bucket::MAX_BLOCK_SMEM as u64,
                });
            }
        }
        gpu.allow_smem(k::KERNEL_FIND_CLUS, smem)?;
        gpu.allow_smem(k::KERNEL_FIND_CLUS_SMALL, small_smem.max(warp_smem))?;
        let find_grid = resident_grid(gpu, k::KERNEL_FIND_CLUS, geometry.threads, smem)?;
        let small_grid =
            resident_grid(gpu, k::KERNEL_FIND_CLUS_SMALL, k::SMALL_THREADS, small_smem)?;
        let warp_grid = resident_grid(
            gpu,
            k::KERNEL_FIND_CLUS_SMALL,
            k::WARP_PASS_THREADS,
            warp_smem,
        )?;
        let cells = (rows * cols) as usize;
        let fallback_grid = (k::FALLBACK_BLOCKS_PER_SM * gpu.sm_count())
            .min((k::FALLBACK_GRID_BYTES / (4 * cells)).max(1) as u32);
        let n = max_digis.max(1);
        let slots = max_events.max(1) * geometry.modules as usize;
        let status = if status_in_smem {
            None
        } else {
            Some(gpu.zeros::<u32>(find_grid as usize * words as usize)?)
        };
        Ok(Self {
            gpu,
            geometry: geometry.clone(),
            warp_capacity,
            warp_grid,
            small_capacity,
            small_threads: k::SMALL_THREADS,
            small_grid,
            capacity,
            find_grid,
            smem,
            fallback_grid,
            max_digis,
            max_events,
            clus: gpu.zeros(n)?,
            clus_in_module: gpu.zeros(slots)?,
            module_first: gpu.filled_u32(slots, NO_MODULE_START)?,
            module_start: gpu.zeros(n + 1)?,
            slot_info: gpu.zeros(n)?,
            slot_end: gpu.zeros(n)?,
            larger_warp: gpu.zeros(n + 1)?,
            larger: gpu.zeros(n + 1)?,
            fallback: gpu.zeros(n + 1)?,
            scratch: gpu.zeros(n)?,
            status,
            grid: gpu.filled_u32(fallback_grid as usize * cells, k::GRID_EMPTY)?,
            bad: gpu.zeros(1)?,
        })
    }

    /// Sets the block size of the small-module kernel (a multiple of 32 up to 1024).
    pub fn set_small_threads(&mut self, threads: u32) -> Result<()> {
        crate::scan::check_block_size(threads)?;
        let smem = k::find_clus_small_smem_bytes(self.small_capacity, 1);
        self.small_grid = resident_grid(self.gpu, k::KERNEL_FIND_CLUS_SMALL, threads, smem)?;
        self.small_threads = threads;
        Ok(())
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn check_fits(&self, d: &DeviceDigis) -> Result<()> {
        if d.nevents > MAX_EVENTS_PER_LAUNCH {
            return Err(Error::CapacityExceeded {
                what: "events per launch",
                needed: d.nevents as u64,
                capacity: MAX_EVENTS_PER_LAUNCH as u64,
            });
        }
        for (what, needed, capacity) in [
            ("clusterer workspace: digis", d.n, self.max_digis),
            ("clusterer workspace: events", d.nevents, self.max_events),
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

    /// Resets the counters and outputs and launches `count_modules`.
    pub fn count_modules(&mut self, d: &DeviceDigis) -> Result<()> {
        self.check_fits(d)?;
        let g = self.gpu;
        let s = g.stream();
        let what = "resetting clustering counters";
        s.memset_zeros(&mut self.module_start.slice_mut(0..1))
            .ctx(what)?;
        s.memset_zeros(&mut self.larger_warp.slice_mut(0..1))
            .ctx(what)?;
        s.memset_zeros(&mut self.larger.slice_mut(0..1)).ctx(what)?;
        s.memset_zeros(&mut self.fallback.slice_mut(0..1))
            .ctx(what)?;
        s.memset_zeros(&mut self.bad).ctx(what)?;
        let slots = d.nevents * self.geometry.modules as usize;
        s.memset_zeros(&mut self.clus_in_module.slice_mut(0..slots))
            .ctx(what)?;
        g.fill_u32(&mut self.module_first, slots, NO_MODULE_START)?;
        if d.n == 0 {
            return Ok(());
        }
        let (n32, ne, nm, rows, cols) = (
            d.n as u32,
            d.nevents as u32,
            self.geometry.modules,
            self.geometry.rows,
            self.geometry.cols,
        );
        let blocks = (d.n as u64)
            .div_ceil(k::COUNT_MODULES_THREADS as u64)
            .min(MAX_GRID);
        let params = k::ClusteringCountModulesParams {
            module: g.ptr(&d.module),
            x: g.ptr(&d.x),
            y: g.ptr(&d.y),
            n: n32,
            event_offsets: g.ptr(&d.event_offsets),
            nevents: ne,
            nmodules: nm,
            rows,
            cols,
            clus: g.ptr_mut(&mut self.clus),
            module_start: g.ptr_mut(&mut self.module_start),
            slot_info: g.ptr_mut(&mut self.slot_info),
            bad: g.ptr_mut(&mut self.bad),
            ..bytemuck::Zeroable::zeroed()
        };
        // SAFETY: arrays sized for max_digis >= n (checked); module_start zeroed above;
        // event offsets validated by the caller (uploaded by DeviceDigis::upload).
        unsafe {
            g.launch(
                k::KERNEL_COUNT_MODULES,
                cfg(blocks, k::COUNT_MODULES_THREADS, 0),
                &params,
            )
        }
    }

    /// Launches the clustering kernels: `find_clus_small` over every module (applying `cut`
    /// to the modules it clusters), `find_clus` over the larger ones, and the fallback over
    /// the largest (each exits at once when its list is empty). The cut of the larger modules
    /// is [`Clusterer::charge_cut_larger`].
    pub fn find_clus(&mut self, d: &DeviceDigis, cut: Option<ChargeCut>) -> Result<()> {
        self.find_clus_small(d, cut)?;
        self.find_clus_shared(d)?;
        self.find_clus_fallback(d)
    }

    /// Step 1 of [`Clusterer::find_clus`]: the small-module kernel over every module.
    pub fn find_clus_small(&mut self, d: &DeviceDigis, cut: Option<ChargeCut>) -> Result<()> {
        if d.n == 0 {
            return Ok(());
        }
        let cut = cut.unwrap_or(ChargeCut::uniform(0));
        // Pass 1: one warp per module, every module slot; larger ones to `larger_warp`.
        self.launch_small(d, cut, true)?;
        // Pass 2: one block per module, the modules pass 1 listed; larger ones to `larger`.
        self.launch_small(d, cut, false)
    }

    fn launch_small(&mut self, d: &DeviceDigis, cut: ChargeCut, warp: bool) -> Result<()> {
        let g = self.gpu;
        let geo = &self.geometry;
        let (nm, rows, cols, l1) = (geo.modules, geo.rows, geo.cols, geo.layer1_modules);
        let (cap, threads, grid, groups) = if warp {
            (
                self.warp_capacity,
                k::WARP_PASS_THREADS,
                self.warp_grid,
                k::WARP_PASS_THREADS / 32,
            )
        } else {
            (self.small_capacity, self.small_threads, self.small_grid, 1)
        };
        let warp_groups = warp as u32;
        // Pass 1 (warp groups) reads no list and writes the larger modules' list; pass 2
        // reads that list and writes the list for the shared-memory kernel.
        let (slots, larger) = if warp {
            (DevPtr::NULL, g.ptr_mut(&mut self.larger_warp))
        } else {
            (g.ptr(&self.larger_warp), g.ptr_mut(&mut self.larger))
        };
        let params = k::ClusteringFindClusSmallParams {
            module: g.ptr(&d.module),
            x: g.ptr(&d.x),
            y: g.ptr(&d.y),
            adc: g.ptr(&d.adc),
            event_offsets: g.ptr(&d.event_offsets),
            nmodules: nm,
            rows,
            cols,
            module_start: g.ptr(&self.module_start),
            slot_info: g.ptr(&self.slot_info),
            slot_end: g.ptr_mut(&mut self.slot_end),
            clus: g.ptr_mut(&mut self.clus),
            clus_in_module: g.ptr_mut(&mut self.clus_in_module),
            module_first: g.ptr_mut(&mut self.module_first),
            capacity: cap,
            warp_groups,
            layer1_modules: l1,
            threshold_layer1: cut.layer1,
            threshold_other: cut.other,
            slots,
            larger,
        };
        let smem = k::find_clus_small_smem_bytes(cap, groups);
        // SAFETY: launched after count_modules (pass 2 after pass 1, whose list and slot
        // ends it reads); shared memory for this capacity and group count (limit raised at
        // construction); the output lists zeroed by count_modules; threads checked.
        unsafe {
            g.launch(
                k::KERNEL_FIND_CLUS_SMALL,
                cfg(grid as u64, threads, smem),
                &params,
            )
        }
    }

    /// Step 2 of [`Clusterer::find_clus`]: the shared-memory kernel over the modules that
    /// `find_clus_small` passed on (exits at once when there are none).
    pub fn find_clus_shared(&mut self, d: &DeviceDigis) -> Result<()> {
        if d.n == 0 {
            return Ok(());
        }
        let g = self.gpu;
        let geo = &self.geometry;
        let (ne, nm, rows, cols, cap) = (
            d.nevents as u32,
            geo.modules,
            geo.rows,
            geo.cols,
            self.capacity,
        );
        let status_ptr = self.status.as_ref();
        {
            let params = k::ClusteringFindClusParams {
                module: g.ptr(&d.module),
                x: g.ptr(&d.x),
                y: g.ptr(&d.y),
                event_offsets: g.ptr(&d.event_offsets),
                nevents: ne,
                nmodules: nm,
                rows,
                cols,
                module_start: g.ptr(&self.module_start),
                slot_end: g.ptr_mut(&mut self.slot_end),
                clus: g.ptr_mut(&mut self.clus),
                clus_in_module: g.ptr_mut(&mut self.clus_in_module),
                module_first: g.ptr_mut(&mut self.module_first),
                capacity: cap,
                // The kernel's status slab (its block-wide counters), or none.
                status_global: status_ptr.map_or(DevPtr::NULL, |st| g.ptr(st)),
                slots: g.ptr(&self.larger),
                fallback: g.ptr_mut(&mut self.fallback),
                _pad0: 0,
            };
            // SAFETY: launched after count_modules; shared memory `find_clus_smem_bytes` for
            // this geometry and capacity (limit raised at construction); the status slab has
            // `find_grid` zeroed slabs (kernels leave them zeroed); threads checked.
            unsafe {
                g.launch(
                    k::KERNEL_FIND_CLUS,
                    cfg(self.find_grid as u64, geo.threads, self.smem),
                    &params,
                )
            }?;
        }
        Ok(())
    }

    /// Step 3 of [`Clusterer::find_clus`]: the global-memory fallback over the modules that
    /// `find_clus_shared` passed on (exits at once when there are none).
    pub fn find_clus_fallback(&mut self, d: &DeviceDigis) -> Result<()> {
        if d.n == 0 {
            return Ok(());
        }
        self.launch_fallback(d)
    }

    fn launch_fallback(&mut self, d: &DeviceDigis) -> Result<()> {
        let g = self.gpu;
        let geo = &self.geometry;
        let (ne, nm, rows, cols) = (d.nevents as u32, geo.modules, geo.rows, geo.cols);
        let params = k::ClusteringFindClusFallbackParams {
            module: g.ptr(&d.module),
            x: g.ptr(&d.x),
            y: g.ptr(&d.y),
            event_offsets: g.ptr(&d.event_offsets),
            nevents: ne,
            nmodules: nm,
            rows,
            cols,
            module_start: g.ptr(&self.module_start),
            slot_end: g.ptr(&self.slot_end),
            clus: g.ptr_mut(&mut self.clus),
            clus_in_module: g.ptr_mut(&mut self.clus_in_module),
            module_first: g.ptr_mut(&mut self.module_first),
            fallback: g.ptr(&self.fallback),
            grid: g.ptr_mut(&mut self.grid),
        };
        // SAFETY: launched after find_clus; fallback_grid grids of rows*cols cells, all
        // GRID_EMPTY (the kernel cleans up); shared memory for the block scan.
        unsafe {
            g.launch(
                k::KERNEL_FIND_CLUS_FALLBACK,
                cfg(
                    self.fallback_grid as u64,
                    k::FALLBACK_THREADS,
                    k::scan_only_smem_bytes(),
                ),
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
        if d.n == 0 {
            return Ok(());
        }
        let g = self.gpu;
        let geo = &self.geometry;
        let smem = k::find_clus_seed_smem_bytes(geo.rows, geo.cols);
        if k::status_words(geo.rows, geo.cols) > k::STATUS_SMEM_MAX_WORDS
            || smem > crate::bucket::MAX_BLOCK_SMEM
        {
            return Err(Error::CapacityExceeded {
                what: "seed find_clus shared memory (bytes)",
                needed: smem as u64,
                capacity: (k::STATUS_SMEM_MAX_WORDS * 4) as u64,
            });
        }
        g.allow_smem(k::KERNEL_FIND_CLUS_SEED, smem)?;
        let (ne, nm, rows, cols) = (d.nevents as u32, geo.modules, geo.rows, geo.cols);
        let blocks = (d.nevents as u64 * nm as u64).min(d.n as u64).min(MAX_GRID);
        {
            let params = k::ClusteringFindClusSeedParams {
                module: g.ptr(&d.module),
                x: g.ptr(&d.x),
                y: g.ptr(&d.y),
                event_offsets: g.ptr(&d.event_offsets),
                nevents: ne,
                nmodules: nm,
                rows,
                cols,
                module_start: g.ptr(&self.module_start),
                slot_end: g.ptr_mut(&mut self.slot_end),
                clus: g.ptr_mut(&mut self.clus),
                clus_in_module: g.ptr_mut(&mut self.clus_in_module),
                module_first: g.ptr_mut(&mut self.module_first),
                fallback: g.ptr_mut(&mut self.fallback),
            };
            // SAFETY: launched after count_modules; shared memory `find_clus_seed_smem_bytes`
            // (limit raised above); threads checked with the geometry.
            let r = unsafe {
                g.launch(
                    k::KERNEL_FIND_CLUS_SEED,
                    cfg(blocks, geo.threads, smem),
                    &params,
                )
            };
            r?;
        }
        self.launch_fallback(d)
    }

    /// Launches the charge cut over every module (`cut` thresholds; zero keeps everything).
    /// Applying a cut twice changes nothing, so this is also correct after a
    /// [`Clusterer::find_clus`] that applied it to the small modules.
    pub fn charge_cut(&mut self, d: &DeviceDigis, cut: ChargeCut) -> Result<()> {
        self.launch_charge_cut(d, cut, false)
    }

    /// Launches the charge cut over the modules that [`Clusterer::find_clus`] did not cut
    /// itself (those over the small-module capacity).
    pub fn charge_cut_larger(&mut self, d: &DeviceDigis, cut: ChargeCut) -> Result<()> {
        self.launch_charge_cut(d, cut, true)
    }

    fn launch_charge_cut(&mut self, d: &DeviceDigis, cut: ChargeCut, larger: bool) -> Result<()> {
        if d.n == 0 {
            return Ok(());
        }
        let g = self.gpu;
        let geo = &self.geometry;
        let (ne, nm, l1) = (d.nevents as u32, geo.modules, geo.layer1_modules);
        let grid = (d.n as u64).min(g.sm_count() as u64 * 8);
        let params = k::ClusteringClusterChargeCutParams {
            module: g.ptr(&d.module),
            adc: g.ptr(&d.adc),
            event_offsets: g.ptr(&d.event_offsets),
            nevents: ne,
            nmodules: nm,
            layer1_modules: l1,
            threshold_layer1: cut.layer1,
            threshold_other: cut.other,
            module_start: g.ptr(&self.module_start),
            slot_end: g.ptr(&self.slot_end),
            clus: g.ptr_mut(&mut self.clus),
            clus_in_module: g.ptr_mut(&mut self.clus_in_module),
            scratch: g.ptr_mut(&mut self.scratch),
            // The list of larger modules, or none (every module).
            slots: if larger {
                g.ptr(&self.larger)
            } else {
                DevPtr::NULL
            },
            _pad0: 0,
        };
        // SAFETY: launched after find_clus; scratch holds n u64; the slot list is null or
        // written by find_clus_small; shared memory for the scan.
        unsafe {
            g.launch(
                k::KERNEL_CHARGE_CUT,
                cfg(grid, k::FALLBACK_THREADS, k::scan_only_smem_bytes()),
                &params,
            )
        }
    }

    /// The whole chain: count_modules, find_clus (small modules cut inline), the charge cut of
    /// the larger modules unless `cut` is `None`.
    pub fn run(&mut self, d: &DeviceDigis, cut: Option<ChargeCut>) -> Result<()> {
        self.count_modules(d)?;
        self.find_clus(d, cut)?;
        if let Some(cut) = cut {
            self.charge_cut_larger(d, cut)?;
        }
        Ok(())
    }

    /// Synchronises and returns how many modules took the shared-memory kernel and the
    /// fallback kernel, or the typed error of a digi the kernels found out of range (callers
    /// that skipped [`super::validate`]).
    pub fn status(&self) -> Result<(u32, u32)> {
        let bad = self.gpu.download(&self.bad)?[0];
        if let Some(first) = decode_first_index(bad) {
            return Err(invalid(
                "digis",
                format!(
                    "digi {first}: module id or pixel out of range for {}",
                    self.geometry.name
                ),
            ));
        }
        let read = |b: &DeviceBuffer<u32>| -> Result<u32> {
            let v: Vec<u32> = self
                .gpu
                .stream()
                .clone_dtoh(&b.slice(0..1))
                .ctx("reading the module counts")?;
            Ok(v[0])
        };
        Ok((read(&self.larger)?, read(&self.fallback)?))
    }

    /// Fills the per-digi outputs with a poison value (tests: an element the kernels fail to
    /// write shows up).
    pub fn poison_outputs(&mut self) -> Result<()> {
        let n = self.clus.len();
        let g = self.gpu;
        let s = g.stream();
        s.memcpy_htod(&vec![0x5a5a_5a5a_i32; n], &mut self.clus)
            .ctx("poisoning outputs")?;
        g.fill_u32(&mut self.slot_end, n, 0xdead_beef)
    }

    /// Downloads the results of the last [`Clusterer::run`] on `d`.
    pub fn results(&self, d: &DeviceDigis) -> Result<Clusters> {
        let (medium_modules, fallback_modules) = self.status()?;
        let slots = d.nevents * self.geometry.modules as usize;
        let s = self.gpu.stream();
        let what = "copying clusters from the device";
        Ok(Clusters {
            clus: s.clone_dtoh(&self.clus.slice(0..d.n)).ctx(what)?,
            clus_in_module: s
                .clone_dtoh(&self.clus_in_module.slice(0..slots))
                .ctx(what)?,
            module_first: s.clone_dtoh(&self.module_first.slice(0..slots)).ctx(what)?,
            modules: self.geometry.modules as usize,
            medium_modules,
            fallback_modules,
        })
    }
}

/// Blocks of `kernel` that fit on the device at once (occupancy × SMs): the grid of a
/// persistent, grid-stride launch.
fn resident_grid(gpu: &GpuContext, kernel: &'static str, threads: u32, smem: usize) -> Result<u32> {
    let per_sm = gpu
        .kernel(kernel)?
        .occupancy_max_active_blocks_per_multiprocessor(threads, smem, None)
        .ctx(format!("querying the occupancy of {kernel}"))?
        .max(1);
    Ok(per_sm * gpu.sm_count())
}
