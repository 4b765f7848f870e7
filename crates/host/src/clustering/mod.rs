//! CMS pixel clustering: launchers, input validation, geometries and the [`Backend`] entry
//! point. The kernels and their rules are documented in `detkit_gpu::clustering`; the CPU
//! oracle is [`crate::cpu::clustering`]; the event generator is [`gen`].
//!
//! ```
//! use detkit::clustering::{Digis, Geometry};
//! use detkit::Backend;
//!
//! // Module 7: pixels (5,5) (9,9) (6,6) (5,5) (10,10) (2,2); the two (5,5) are duplicates.
//! let digis = Digis {
//!     module: vec![7; 6],
//!     x: vec![5, 9, 6, 5, 10, 2],
//!     y: vec![5, 9, 6, 5, 10, 2],
//!     adc: vec![3000; 6],
//! };
//! let c = Backend::auto().cluster(&digis, &Geometry::phase1(), None).unwrap();
//! assert_eq!(c.clus, [-1, 0, 1, -1, 0, 2]);
//! assert_eq!(c.clus_in_module[7], 3);
//! ```

pub mod gen;

use std::io::{Read, Write};

use detkit_gpu::clustering::{self as k, INVALID_MODULE, MAX_MODULE_SIDE, NO_MODULE_START};
use detkit_gpu::histogram::decode_first_index;
use detkit_gpu::DevPtr;

use crate::cuda::{cfg, DeviceBuffer, GpuContext, MAX_GRID};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::{cpu, Backend};

/// A pixel detector geometry: module count and size, launch size, charge-cut defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Name for messages (`phase1`, `phase2`, `custom`).
    pub name: String,
    /// Number of module ids (`0 .. modules`).
    pub modules: u32,
    /// Rows per module (`x` range).
    pub rows: u32,
    /// Columns per module (`y` range).
    pub cols: u32,
    /// Threads per block of `find_clus`.
    pub threads: u32,
    /// Modules of the first barrel layer (`layerStart[1]`), which have their own threshold.
    pub layer1_modules: u32,
    /// The CMS default charge cut of this geometry.
    pub default_cut: ChargeCut,
}

impl Geometry {
    /// CMS Phase-1: 1856 modules of 160 × 416 pixels, 256 threads; BPix layer 1 is modules
    /// 0..96; thresholds 2000 e⁻ (layer 1) and 4000 e⁻ (CMSSW
    /// `SiPixelClusterThresholds` Phase-1 defaults).
    pub fn phase1() -> Self {
        Self {
            name: "phase1".into(),
            modules: 1856,
            rows: 160,
            cols: 416,
            threads: 256,
            layer1_modules: 96,
            default_cut: ChargeCut {
                layer1: 2000,
                other: 4000,
            },
        }
    }

    /// CMS Phase-2 inner tracker: 3892 modules (CMSSW 13, geometry D88), 384 threads.
    /// Modules are taken as quad modules of 2 × 2 CROC chips of 336 rows × 432 columns:
    /// 672 × 864 pixels (CMSSW stores no Phase-2 module size; its 1000 column bins fit 864).
    /// Layer 1 is modules 0..108; both thresholds 4000 e⁻ (CMSSW Phase-2 defaults).
    pub fn phase2() -> Self {
        Self {
            name: "phase2".into(),
            modules: 3892,
            rows: 672,
            cols: 864,
            threads: 384,
            layer1_modules: 108,
            default_cut: ChargeCut {
                layer1: 4000,
                other: 4000,
            },
        }
    }

    /// A custom geometry (checked by [`Geometry::check`]).
    pub fn custom(
        modules: u32,
        rows: u32,
        cols: u32,
        threads: u32,
        cut: ChargeCut,
    ) -> Result<Self> {
        let g = Self {
            name: "custom".into(),
            modules,
            rows,
            cols,
            threads,
            layer1_modules: 0,
            default_cut: cut,
        };
        g.check()?;
        Ok(g)
    }

    /// By name: `phase1` or `phase2`.
    pub fn by_name(name: &str) -> Result<Self> {
        match name {
            "phase1" => Ok(Self::phase1()),
            "phase2" => Ok(Self::phase2()),
            other => Err(invalid(
                "geometry",
                format!("unknown geometry `{other}` (phase1 or phase2)"),
            )),
        }
    }

    /// Checks the limits: 1 to 65534 modules, sides 1 to 32768, threads a multiple of 32 up
    /// to 1024.
    pub fn check(&self) -> Result<()> {
        if self.modules == 0 || self.modules > INVALID_MODULE as u32 {
            return Err(invalid(
                "geometry",
                format!("{} modules (1 to {INVALID_MODULE})", self.modules),
            ));
        }
        if !(1..=MAX_MODULE_SIDE).contains(&self.rows)
            || !(1..=MAX_MODULE_SIDE).contains(&self.cols)
        {
            return Err(invalid(
                "geometry",
                format!(
                    "module of {} × {} pixels (each side 1 to {MAX_MODULE_SIDE})",
                    self.rows, self.cols
                ),
            ));
        }
        crate::scan::check_block_size(self.threads)
    }
}

/// Charge thresholds (electrons, the unit of `adc`): clusters with `Σ adc < threshold` are
/// removed. A zero threshold keeps everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChargeCut {
    /// Threshold of the first barrel layer's modules.
    pub layer1: u32,
    /// Threshold of every other module.
    pub other: u32,
}

impl ChargeCut {
    /// The same threshold everywhere (`--charge-cut ADC`).
    pub fn uniform(threshold: u32) -> Self {
        Self {
            layer1: threshold,
            other: threshold,
        }
    }

    /// The threshold of module `m`.
    pub fn threshold(&self, geometry: &Geometry, m: u16) -> u32 {
        if (m as u32) < geometry.layer1_modules {
            self.layer1
        } else {
            self.other
        }
    }
}

/// Digis in structure-of-arrays form, in event order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Digis {
    /// Module id, or [`INVALID_MODULE`].
    pub module: Vec<u16>,
    /// Row.
    pub x: Vec<u16>,
    /// Column.
    pub y: Vec<u16>,
    /// Charge (electrons after calibration).
    pub adc: Vec<u16>,
}

impl Digis {
    /// Number of digis (of `module`; [`validate`] checks the other arrays agree).
    pub fn len(&self) -> usize {
        self.module.len()
    }

    /// Whether there is no digi.
    pub fn is_empty(&self) -> bool {
        self.module.is_empty()
    }

    /// Appends one digi.
    pub fn push(&mut self, module: u16, x: u16, y: u16, adc: u16) {
        self.module.push(module);
        self.x.push(x);
        self.y.push(y);
        self.adc.push(adc);
    }

    /// Appends all digis of `other`.
    pub fn extend(&mut self, other: &Digis) {
        self.module.extend_from_slice(&other.module);
        self.x.extend_from_slice(&other.x);
        self.y.extend_from_slice(&other.y);
        self.adc.extend_from_slice(&other.adc);
    }
}

/// Clustering results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clusters {
    /// Per digi: cluster index within its module, or -1.
    pub clus: Vec<i32>,
    /// Per event and module id (`e * modules + m`): number of clusters.
    pub clus_in_module: Vec<u32>,
    /// Per event and module id: first digi index, or `u32::MAX` for an absent module.
    pub module_first: Vec<u32>,
    /// Module ids per event (the geometry's).
    pub modules: usize,
    /// Modules over the small-module kernel's capacity (clustered by the shared-memory
    /// kernel or the fallback); 0 on the CPU.
    pub medium_modules: u32,
    /// Modules over the shared-memory kernel's capacity, clustered by the global-memory
    /// fallback; 0 on the CPU.
    pub fallback_modules: u32,
}

impl Clusters {
    /// Total number of clusters.
    pub fn total(&self) -> u64 {
        self.clus_in_module.iter().map(|&c| c as u64).sum()
    }

    /// Whether the results equal `other`'s, ignoring the fallback count.
    pub fn same_clusters(&self, other: &Clusters) -> bool {
        self.clus == other.clus
            && self.clus_in_module == other.clus_in_module
            && self.module_first == other.module_first
    }
}

/// Checks the preconditions of clustering, naming the first offending digi:
/// equal array lengths; fewer than 2^31 digis; event offsets from 0 to `n`, non-decreasing;
/// module ids below the geometry's count (or [`INVALID_MODULE`]); coordinates inside the
/// module; the digis of one module consecutive within an event.
pub fn validate(digis: &Digis, event_offsets: &[u32], geometry: &Geometry) -> Result<()> {
    geometry.check()?;
    let n = digis.len();
    if digis.x.len() != n || digis.y.len() != n || digis.adc.len() != n {
        return Err(invalid(
            "digis",
            format!(
                "arrays of different lengths: module {}, x {}, y {}, adc {}",
                n,
                digis.x.len(),
                digis.y.len(),
                digis.adc.len()
            ),
        ));
    }
    if n >= 1 << 31 {
        return Err(Error::CapacityExceeded {
            what: "digis per launch",
            needed: n as u64,
            capacity: (1 << 31) - 1,
        });
    }
    if event_offsets.len() < 2
        || event_offsets[0] != 0
        || *event_offsets.last().unwrap_or(&0) as usize != n
    {
        return Err(invalid(
            "event_offsets",
            format!("must start at 0 and end at the digi count {n}, with at least one event"),
        ));
    }
    if let Some(e) = event_offsets.windows(2).position(|w| w[0] > w[1]) {
        return Err(invalid(
            "event_offsets",
            format!(
                "decreasing at event {e}: {} > {}",
                event_offsets[e],
                event_offsets[e + 1]
            ),
        ));
    }
    // seen[m] = 1 + last event in which module m's run ended (0 = never).
    let mut seen = vec![0u32; geometry.modules as usize];
    for e in 0..event_offsets.len() - 1 {
        let mut current: Option<(u16, usize)> = None;
        for d in event_offsets[e] as usize..event_offsets[e + 1] as usize {
            let m = digis.module[d];
            if m == INVALID_MODULE {
                continue;
            }
            if m as u32 >= geometry.modules {
                return Err(invalid(
                    "digis",
                    format!(
                        "digi {d}: module id {m} out of range ({} modules in {}; {INVALID_MODULE} marks an invalid digi)",
                        geometry.modules, geometry.name
                    ),
                ));
            }
            let (x, y) = (digis.x[d] as u32, digis.y[d] as u32);
            if x >= geometry.rows || y >= geometry.cols {
                return Err(invalid(
                    "digis",
                    format!(
                        "digi {d}: pixel (x {x}, y {y}) outside the {} × {} module {m}",
                        geometry.rows, geometry.cols
                    ),
                ));
            }
            match current {
                Some((cm, _)) if cm == m => {}
                _ => {
                    if seen[m as usize] == e as u32 + 1 {
                        return Err(invalid(
                            "digis",
                            format!(
                                "digi {d}: the digis of module {m} are not consecutive (an earlier run of module {m} ended before digi {})",
                                current.map_or(d, |(_, start)| start)
                            ),
                        ));
                    }
                    seen[m as usize] = e as u32 + 1;
                    current = Some((m, d));
                }
            }
        }
    }
    Ok(())
}

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
    /// that skipped [`validate`]).
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

impl Backend {
    /// Clusters one event's digis (`None`: no charge cut; `Some(geometry.default_cut)`:
    /// the CMS defaults). Input is validated first.
    pub fn cluster(
        &self,
        digis: &Digis,
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Result<Clusters> {
        self.cluster_events(digis, &[0, digis.len() as u32], geometry, cut)
    }

    /// Clusters several events at once (`event_offsets[e] .. event_offsets[e + 1]`).
    pub fn cluster_events(
        &self,
        digis: &Digis,
        event_offsets: &[u32],
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Result<Clusters> {
        validate(digis, event_offsets, geometry)?;
        match self.gpu() {
            None => Ok(cpu::clustering::cluster(
                digis,
                event_offsets,
                geometry,
                cut,
            )),
            Some(gpu) => {
                let d = DeviceDigis::upload(gpu, digis, event_offsets)?;
                let mut c = Clusterer::new(gpu, geometry, digis.len(), event_offsets.len() - 1)?;
                c.run(&d, cut)?;
                c.results(&d)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------

/// Magic of the binary digi format.
pub const BINARY_MAGIC: &[u8; 8] = b"DKDIGI01";

/// Reads digis from CSV with header `module,x,y,adc` (one digi a row).
pub fn read_csv(mut r: impl Read) -> Result<Digis> {
    let mut text = String::new();
    r.read_to_string(&mut text)
        .map_err(|e| invalid("input", format!("reading: {e}")))?;
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("").trim();
    if header.replace(' ', "") != "module,x,y,adc" {
        return Err(invalid(
            "input",
            format!("CSV header must be `module,x,y,adc`, found `{header}`"),
        ));
    }
    let mut d = Digis::default();
    for (row, line) in lines.enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let parse = |k: usize, name: &str| -> Result<u16> {
            f.get(k)
                .ok_or_else(|| invalid("input", format!("data row {row}: missing `{name}`")))?
                .parse::<u16>()
                .map_err(|e| invalid("input", format!("data row {row}: `{name}`: {e}")))
        };
        if f.len() != 4 {
            return Err(invalid(
                "input",
                format!("data row {row}: {} fields, expected 4", f.len()),
            ));
        }
        d.push(
            parse(0, "module")?,
            parse(1, "x")?,
            parse(2, "y")?,
            parse(3, "adc")?,
        );
    }
    Ok(d)
}

/// Writes digis and their cluster indices as CSV with header `module,x,y,adc,cluster`.
pub fn write_csv(mut w: impl Write, digis: &Digis, clus: &[i32]) -> std::io::Result<()> {
    let mut out = String::with_capacity(digis.len() * 24 + 32);
    out.push_str("module,x,y,adc,cluster\n");
    for i in 0..digis.len() {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "{},{},{},{},{}",
            digis.module[i], digis.x[i], digis.y[i], digis.adc[i], clus[i]
        );
    }
    w.write_all(out.as_bytes())
}

/// Reads the binary format: magic `DKDIGI01`, `u32` little-endian digi count `n`, then the
/// arrays `module`, `x`, `y`, `adc`, each `n` little-endian `u16`.
pub fn read_binary(mut r: impl Read) -> Result<Digis> {
    let io = |e: std::io::Error| invalid("input", format!("reading binary digis: {e}"));
    let mut head = [0u8; 12];
    r.read_exact(&mut head).map_err(io)?;
    if &head[..8] != BINARY_MAGIC {
        return Err(invalid(
            "input",
            "not a detkit binary digi file (magic DKDIGI01)",
        ));
    }
    let n = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
    let mut arr = || -> Result<Vec<u16>> {
        let mut b = vec![0u8; 2 * n];
        r.read_exact(&mut b).map_err(io)?;
        Ok(b.as_chunks::<2>()
            .0
            .iter()
            .map(|c| u16::from_le_bytes(*c))
            .collect())
    };
    Ok(Digis {
        module: arr()?,
        x: arr()?,
        y: arr()?,
        adc: arr()?,
    })
}

/// Writes [`read_binary`]'s format.
pub fn write_binary(mut w: impl Write, digis: &Digis) -> std::io::Result<()> {
    w.write_all(BINARY_MAGIC)?;
    w.write_all(&(digis.len() as u32).to_le_bytes())?;
    for a in [&digis.module, &digis.x, &digis.y, &digis.adc] {
        let bytes: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.write_all(&bytes)?;
    }
    Ok(())
}

/// Binary cluster output: magic `DKCLUS01`, `u32` count, then `n` little-endian `i32`.
pub fn write_binary_clusters(mut w: impl Write, clus: &[i32]) -> std::io::Result<()> {
    w.write_all(b"DKCLUS01")?;
    w.write_all(&(clus.len() as u32).to_le_bytes())?;
    let bytes: Vec<u8> = clus.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.write_all(&bytes)
}
