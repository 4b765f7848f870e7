//! CMS pixel clustering: launchers, input validation, geometries and the [`Backend`] entry
//! point. The kernels and their rules are documented in `detkit_gpu::clustering`; the CPU
//! oracle (also the CPU backend) is [`cpu`]; the launchers and the device-resident
//! [`Clusterer`] are in [`cuda`]; file formats in [`io`]; the event generator is [`gen`].
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

pub mod cpu;
pub mod cuda;
pub mod gen;
pub mod io;
pub mod par;

pub use cuda::{ClusterQueue, Clusterer, DeviceDigis, DEFAULT_CAPACITY, MAX_EVENTS_PER_LAUNCH};
pub use io::{
    read_binary, read_csv, read_csv_with_lines, write_binary, write_binary_clusters, write_csv,
    BINARY_MAGIC,
};

use detkit_gpu::clustering::{INVALID_MODULE, MAX_MODULE_SIDE};

use crate::error::{invalid, Error, Result};
use crate::Backend;

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
                return Err(Error::InvalidItem {
                    what: "digi",
                    index: d,
                    column: "module",
                    detail: format!(
                        "module id {m} out of range ({} modules in {}; {INVALID_MODULE} marks an invalid digi)",
                        geometry.modules, geometry.name
                    ),
                });
            }
            let (x, y) = (digis.x[d] as u32, digis.y[d] as u32);
            if x >= geometry.rows || y >= geometry.cols {
                return Err(Error::InvalidItem {
                    what: "digi",
                    index: d,
                    column: if x >= geometry.rows { "x" } else { "y" },
                    detail: format!(
                        "pixel (x {x}, y {y}) outside the {} × {} module {m}",
                        geometry.rows, geometry.cols
                    ),
                });
            }
            match current {
                Some((cm, _)) if cm == m => {}
                _ => {
                    if seen[m as usize] == e as u32 + 1 {
                        return Err(Error::InvalidItem {
                            what: "digi",
                            index: d,
                            column: "module",
                            detail: format!(
                                "the digis of module {m} are not consecutive (an earlier run of module {m} ended before digi {})",
                                current.map_or(d, |(_, start)| start)
                            ),
                        });
                    }
                    seen[m as usize] = e as u32 + 1;
                    current = Some((m, d));
                }
            }
        }
    }
    Ok(())
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
            None => Ok(self.on_cpu(|| par::cluster(digis, event_offsets, geometry, cut))),
            Some(gpu) => {
                let d = DeviceDigis::upload(gpu, digis, event_offsets)?;
                let mut c = Clusterer::new(gpu, geometry, digis.len(), event_offsets.len() - 1)?;
                c.run(&d, cut)?;
                c.results(&d)
            }
        }
    }
}
