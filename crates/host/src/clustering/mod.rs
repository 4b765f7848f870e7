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

mod clusterer;
pub mod cpu;
pub mod cuda;
mod dev_graph;
mod device_view;
pub(crate) mod door;
pub mod gen;
pub mod io;
pub mod par;
mod queue;
mod validate;

pub use cuda::{
    ClusterQueue, ClusterTuning, Clusterer, DeviceDigis, DEFAULT_CAPACITY, MAX_EVENTS_PER_LAUNCH,
};
pub use device_view::{ClustersDev, DigisDev, OffsetsDev};
pub use io::{
    read_binary, read_csv, read_csv_with_lines, write_binary, write_binary_clusters, write_csv,
    BINARY_MAGIC,
};

use detkit_gpu::clustering::{INVALID_MODULE, MAX_MODULE_SIDE};

use crate::error::{invalid, Error, Result};
use crate::Backend;

/// A pixel detector geometry: module count and size, charge-cut defaults. What the detector
/// is, not how it is launched: block sizes are a [`ClusterTuning`].
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
    /// Modules of the first barrel layer (`layerStart[1]`), which have their own threshold.
    pub layer1_modules: u32,
    /// The CMS default charge cut of this geometry.
    pub default_cut: ChargeCut,
}

impl Geometry {
    /// CMS Phase-1: 1856 modules of 160 × 416 pixels; BPix layer 1 is modules
    /// 0..96; thresholds 2000 e⁻ (layer 1) and 4000 e⁻ (CMSSW
    /// `SiPixelClusterThresholds` Phase-1 defaults).
    pub fn phase1() -> Self {
        Self {
            name: "phase1".into(),
            modules: 1856,
            rows: 160,
            cols: 416,
            layer1_modules: 96,
            default_cut: ChargeCut {
                layer1: 2000,
                other: 4000,
            },
        }
    }

    /// CMS Phase-2 inner tracker: 3892 modules (CMSSW 13, geometry D88).
    /// Modules are taken as quad modules of 2 × 2 CROC chips of 336 rows × 432 columns:
    /// 672 × 864 pixels (CMSSW stores no Phase-2 module size; its 1000 column bins fit 864).
    /// Layer 1 is modules 0..108; both thresholds 4000 e⁻ (CMSSW Phase-2 defaults).
    pub fn phase2() -> Self {
        Self {
            name: "phase2".into(),
            modules: 3892,
            rows: 672,
            cols: 864,
            layer1_modules: 108,
            default_cut: ChargeCut {
                layer1: 4000,
                other: 4000,
            },
        }
    }

    /// A custom geometry (checked by [`Geometry::check`]).
    pub fn custom(modules: u32, rows: u32, cols: u32, cut: ChargeCut) -> Result<Self> {
        let g = Self {
            name: "custom".into(),
            modules,
            rows,
            cols,
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

    /// Checks the limits: 1 to 65534 modules, sides 1 to 32768.
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
        Ok(())
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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

/// Clustering results written into the caller's arrays (numpy arrays allocated once, a
/// memory map): `clus` of the digi count, `clus_in_module` and `module_first` of
/// `events × modules`, as in [`Clusters`]. What [`Backend::cluster_events_into_slices`] takes.
#[derive(Debug)]
pub struct ClustersMut<'a> {
    /// Per digi: cluster index within its module, or -1.
    pub clus: &'a mut [i32],
    /// Per event and module id: number of clusters.
    pub clus_in_module: &'a mut [u32],
    /// Per event and module id: first digi index, or `u32::MAX` for an absent module.
    pub module_first: &'a mut [u32],
}

/// What [`Backend::cluster_events_into_slices`] returns beside the arrays it filled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterCounts {
    /// As [`Clusters::medium_modules`].
    pub medium_modules: u32,
    /// As [`Clusters::fallback_modules`].
    pub fallback_modules: u32,
}

impl Clusters {
    /// The three arrays as a [`ClustersMut`].
    pub fn as_mut(&mut self) -> ClustersMut<'_> {
        ClustersMut {
            clus: &mut self.clus,
            clus_in_module: &mut self.clus_in_module,
            module_first: &mut self.module_first,
        }
    }

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

/// Digis as four borrowed arrays (the caller's memory: a [`Digis`], numpy arrays, a memory
/// map): what [`Backend::cluster`] and [`Backend::cluster_events`] take, so that no copy is
/// made on the way in. `&Digis` converts into it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DigisRef<'a> {
    /// Module id, or [`INVALID_MODULE`].
    pub module: &'a [u16],
    /// Row.
    pub x: &'a [u16],
    /// Column.
    pub y: &'a [u16],
    /// Charge (electrons after calibration).
    pub adc: &'a [u16],
}

impl<'a> From<&'a Digis> for DigisRef<'a> {
    fn from(d: &'a Digis) -> Self {
        Self {
            module: &d.module,
            x: &d.x,
            y: &d.y,
            adc: &d.adc,
        }
    }
}

impl<'a> From<&'a mut Digis> for DigisRef<'a> {
    fn from(d: &'a mut Digis) -> Self {
        DigisRef::from(&*d)
    }
}

impl DigisRef<'_> {
    /// Number of digis (of `module`; [`validate`] checks the other arrays agree).
    pub fn len(&self) -> usize {
        self.module.len()
    }

    /// Whether there is no digi.
    pub fn is_empty(&self) -> bool {
        self.module.is_empty()
    }

    /// An owned copy.
    pub fn to_digis(&self) -> Digis {
        Digis {
            module: self.module.to_vec(),
            x: self.x.to_vec(),
            y: self.y.to_vec(),
            adc: self.adc.to_vec(),
        }
    }

    /// The digis `range` (all four arrays sliced alike).
    pub fn slice(&self, range: std::ops::Range<usize>) -> Self {
        Self {
            module: &self.module[range.clone()],
            x: &self.x[range.clone()],
            y: &self.y[range.clone()],
            adc: &self.adc[range],
        }
    }
}

/// Digis per piece of the parallel validation: large enough that a piece's work (a few µs)
/// outweighs handing it to a thread.
const VALIDATE_PIECE: usize = 1 << 14;

/// Digis per piece of a validation of at most [`STREAM_WAVE`] digis.
const SMALL_PIECE: usize = 1 << 12;

/// Digis per wave of the streamed staged validation (a multiple of [`VALIDATE_PIECE`]; 4 MiB
/// of the four arrays): the pool's threads check and copy later pieces while a wave's DMA
/// is issued and runs.
const STREAM_WAVE: usize = 1 << 19;

/// What a staged validation calls after each wave: the wave's stretches of the four staged
/// arrays (module, x, y, adc) and its digi range.
pub(crate) type WaveSink<'a> = dyn FnMut([&[u16]; 4], std::ops::Range<usize>) -> Result<()> + 'a;

/// Checks the preconditions of clustering, naming the first offending digi:
/// equal array lengths; fewer than 2^31 digis; event offsets from 0 to `n`, non-decreasing;
/// module ids below the geometry's count (or [`INVALID_MODULE`]); coordinates inside the
/// module; the digis of one module consecutive within an event.
///
/// The digis are checked in pieces on several threads (rayon); the error is the one a
/// sequential pass over the digis in order meets first (the same message and index).
pub fn validate<'a>(
    digis: impl Into<DigisRef<'a>>,
    event_offsets: &[u32],
    geometry: &Geometry,
) -> Result<()> {
    let digis = digis.into();
    validate_shape(digis, event_offsets, geometry)?;
    validate_digis(digis, event_offsets, geometry, None)
}

/// [`validate`] without the per-digi checks (array lengths, digi count, event offsets): the
/// checks that come before [`validate_digis`].
pub(crate) fn validate_shape(
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
) -> Result<()> {
    let lens = [
        digis.module.len(),
        digis.x.len(),
        digis.y.len(),
        digis.adc.len(),
    ];
    validate_lengths(lens, event_offsets, geometry)
}

/// [`validate_shape`] by the four arrays' lengths (module, x, y, adc): what can be checked
/// of digis on the device without reading them.
pub(crate) fn validate_lengths(
    lens: [usize; 4],
    event_offsets: &[u32],
    geometry: &Geometry,
) -> Result<()> {
    geometry.check()?;
    let n = lens[0];
    if lens[1] != n || lens[2] != n || lens[3] != n {
        return Err(invalid(
            "digis",
            format!(
                "arrays of different lengths: module {}, x {}, y {}, adc {}",
                n, lens[1], lens[2], lens[3]
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
    Ok(())
}

/// A run of digis of one module within one event, as a piece of the validation saw it
/// (invalid digis inside it skipped): the module, its event, its first digi.
#[derive(Clone, Copy)]
struct Run {
    module: u16,
    event: u32,
    start: u32,
}

/// What a piece of the validation found: its first range error (digi index and error) and
/// its module runs up to there.
type PieceResult = (Option<(usize, Error)>, Vec<Run>);

/// The per-digi checks of [`validate`]: ranges in parallel pieces, each piece listing its
/// module runs; then one pass over the runs (a few per module and event) for the rule that a
/// module's digis are consecutive within an event.
///
/// With a stage (`4 n` elements: room for the four arrays one after the other), each piece
/// also copies its digis there while they are in cache (the pinned staging of an upload
/// filled by the validation's threads), in waves of [`STREAM_WAVE`] digis: after each
/// wave the callback gets the wave's four stretches of the stage and its digi range (to
/// launch their copy to the device while the next wave is checked). A wave with a range
/// error is the last.
pub(crate) fn validate_digis(
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
    stage: Option<(&mut [u16], &mut WaveSink<'_>)>,
) -> Result<()> {
    validate_digis_at(digis, event_offsets, geometry, stage, 0)
}

/// [`validate_digis`] of the digis `base..base + digis.len()` of a larger batch (a whole
/// number of its events, `event_offsets` counted from `base`): the errors name digis by
/// their index in that batch.
pub(crate) fn validate_digis_at(
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
    stage: Option<(&mut [u16], &mut WaveSink<'_>)>,
    base: usize,
) -> Result<()> {
    use rayon::prelude::*;
    let n = digis.len();
    // A call of one wave or less (an event or a few) in smaller pieces, so that the threads
    // as they wake find work left (the calling thread starts at once).
    let piece = if n <= STREAM_WAVE {
        SMALL_PIECE
    } else {
        VALIDATE_PIECE
    };
    let pieces = n.div_ceil(piece);
    // The digi-by-digi pass: the first range error of a piece, and its runs up to it.
    let check_piece_slow = |p: usize| -> PieceResult {
        let (lo, hi) = (p * piece, ((p + 1) * piece).min(n));
        // The event of digi `lo`: the last event starting at or before it (empty events
        // skipped).
        let mut e = event_offsets.partition_point(|&o| o as usize <= lo) - 1;
        let mut runs = Vec::new();
        let mut current: Option<u16> = None;
        for d in lo..hi {
            while event_offsets[e + 1] as usize <= d {
                e += 1;
                current = None;
            }
            let m = digis.module[d];
            if m == INVALID_MODULE {
                continue;
            }
            if m as u32 >= geometry.modules {
                return (Some((d, module_out_of_range(base + d, m, geometry))), runs);
            }
            let (x, y) = (digis.x[d] as u32, digis.y[d] as u32);
            if x >= geometry.rows || y >= geometry.cols {
                let err = Error::InvalidItem {
                    what: "digi",
                    index: base + d,
                    column: if x >= geometry.rows { "x" } else { "y" },
                    detail: format!(
                        "pixel (x {x}, y {y}) outside the {} × {} module {m}",
                        geometry.rows, geometry.cols
                    ),
                };
                return (Some((d, err)), runs);
            }
            if current != Some(m) {
                runs.push(Run {
                    module: m,
                    event: e as u32,
                    start: d as u32,
                });
                current = Some(m);
            }
        }
        (None, runs)
    };
    // Each piece: its first range error (digi index and error) and its runs. First a
    // branch-free (vectorised) range check of the whole piece (`validate.rs`, on u16 lanes
    // with AVX2 where the CPU has it) and a tight pass for its runs from a mask of module
    // changes; only a piece with an error takes the digi-by-digi pass that finds the first
    // one.
    let block = FUSED_BLOCK;
    // With `copy`: each block of the piece is copied (into the stage) right before its check,
    // so that the check reads it from L1.
    let check_piece_new = |p: usize, copy: Option<&dyn Fn(usize, usize)>| -> PieceResult {
        let (lo, hi) = (p * piece, ((p + 1) * piece).min(n));
        let mut bad = false;
        for s in (lo..hi).step_by(block) {
            let t = (s + block).min(hi);
            if let Some(copy) = copy {
                copy(s, t);
            }
            let (ms, xs, ys) = (&digis.module[s..t], &digis.x[s..t], &digis.y[s..t]);
            bad |= validate::range_bad(ms, xs, ys, geometry);
        }
        if bad {
            return check_piece_slow(p);
        }
        let mut runs = Vec::new();
        let mut e = event_offsets.partition_point(|&o| o as usize <= lo) - 1;
        let mut d = lo;
        while d < hi {
            while event_offsets[e + 1] as usize <= d {
                e += 1;
            }
            let end = (event_offsets[e + 1] as usize).min(hi);
            validate::push_runs(&digis.module[d..end], d, e as u32, &mut runs);
            d = end;
        }
        (None, runs)
    };
    let check_piece = |p: usize| -> PieceResult { check_piece_new(p, None) };
    let mut results: Vec<PieceResult> = match stage {
        None if pieces <= 1 => (0..pieces).map(check_piece).collect(),
        None => (0..pieces).into_par_iter().map(check_piece).collect(),
        Some((pin, on_wave)) => {
            // Streamed: the pool's threads take pieces in order, each copying its digis
            // into the stage and checking them; this thread sends each wave of
            // STREAM_WAVE digis to the device as soon as its pieces are done.
            let pin = &mut pin[..4 * n];
            let base = pin.as_mut_ptr() as usize;
            let srcs = [digis.module, digis.x, digis.y, digis.adc];
            let slots: Vec<std::sync::Mutex<Option<PieceResult>>> =
                (0..pieces).map(|_| Default::default()).collect();
            // Digis `lo..hi` of the four arrays into the stage.
            let copy = |lo: usize, hi: usize| {
                for (a, src) in srcs.iter().enumerate() {
                    // SAFETY: array `a` of the stage is `base + a n .. base + (a + 1) n`
                    // (`pin` holds `4 n`); `lo..hi` lies in one piece, whose stretch of it
                    // is written by its thread only, and read (its wave's DMA) after the
                    // piece is counted done.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src[lo..hi].as_ptr(),
                            (base as *mut u16).add(a * n + lo),
                            hi - lo,
                        )
                    };
                }
            };
            let work = |p: usize| -> bool {
                let r = check_piece_new(p, Some(&copy));
                let ok = r.0.is_none();
                *slots[p].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                ok
            };
            let wave = STREAM_WAVE;
            let per = wave / piece;
            let mut ready = |w: usize| -> Result<()> {
                let lo = w * wave;
                let hi = (lo + wave).min(n);
                crate::phases::mark(crate::phases::Phase::Validate);
                // SAFETY: every piece of this wave has been written (their counts were
                // acquired before this call) and no thread writes them again during the
                // call; the four stretches lie inside `pin` (`4 n` elements).
                let wave = [0, 1, 2, 3].map(|a| unsafe {
                    std::slice::from_raw_parts((base as *const u16).add(a * n + lo), hi - lo)
                });
                let r = on_wave(wave, lo..hi);
                crate::phases::mark(crate::phases::Phase::Stage);
                r
            };
            crate::staging::parts_then_groups(pieces, per, &work, &mut ready)?;
            // Every piece up to the first with a range error has its result (pieces are
            // handed out in order and finished); later ones may be missing.
            slots
                .into_iter()
                .map_while(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()))
                .collect()
        }
    };
    // The first range error in digi order (the pieces are in order, so the first piece with
    // one); the runs after it do not matter (a sequential pass stops there).
    let range_error = results.iter_mut().find_map(|(err, _)| err.take());
    let limit = range_error.as_ref().map_or(usize::MAX, |(d, _)| *d);
    // The consecutive-digis rule, event by event: in parallel over groups of whole events
    // for a large call, each group from its first run; the first group with an error has
    // the first error in digi order.
    let total: usize = results.iter().map(|(_, r)| r.len()).sum();
    let ne = event_offsets.len() - 1;
    let groups = if total < PAR_RUNS || ne < 2 {
        1
    } else {
        ne.min(4 * rayon::current_num_threads())
    };
    let run_error = if groups <= 1 {
        first_run_error(
            results.iter().flat_map(|(_, runs)| runs.iter()),
            limit,
            geometry.modules,
            base,
        )
    } else {
        use rayon::prelude::*;
        let done = results.len();
        (0..groups)
            .into_par_iter()
            .map(|g| {
                let (e0, e1) = (g * ne / groups, (g + 1) * ne / groups);
                let (lo, hi) = (event_offsets[e0] as usize, event_offsets[e1] as usize);
                let (p0, p1) = ((lo / piece).min(done), hi.div_ceil(piece).min(done));
                let runs = results[p0..p1]
                    .iter()
                    .flat_map(|(_, runs)| runs.iter())
                    .filter(|r| (e0..e1).contains(&(r.event as usize)));
                first_run_error(runs, limit, geometry.modules, base)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .flatten()
            .next()
    };
    if let Some(e) = run_error {
        return Err(e);
    }
    match range_error {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// [`validate`] fused with a copy of the four arrays into `stage` (`4 n` elements: module,
/// x, y, adc one after the other), as the pinned-staging calls do it, into any buffer: for
/// measuring the validation's throughput on the CPU alone (`bench-validate`).
#[doc(hidden)]
pub fn validate_staged(
    digis: DigisRef<'_>,
    event_offsets: &[u32],
    geometry: &Geometry,
    stage: &mut [u16],
) -> Result<()> {
    validate_shape(digis, event_offsets, geometry)?;
    if stage.len() < 4 * digis.len() {
        return Err(invalid(
            "stage",
            format!("{} elements for {} digis", stage.len(), digis.len()),
        ));
    }
    let mut sink = |_: [&[u16]; 4], _: std::ops::Range<usize>| -> Result<()> { Ok(()) };
    validate_digis(digis, event_offsets, geometry, Some((stage, &mut sink)))
}

/// Digis per block of the fused copy and range check (16 KiB of the four arrays: the check
/// reads what was just copied from L1).
const FUSED_BLOCK: usize = 2048;

/// Runs from which [`validate_digis_at`] checks the consecutive-digis rule in parallel.
const PAR_RUNS: usize = 1 << 14;

/// The first break of the consecutive-digis rule among `runs` (in digi order, starting at an
/// event's first run, pieces' runs continued across their boundary) before digi `limit`.
fn first_run_error<'r>(
    runs: impl Iterator<Item = &'r Run>,
    limit: usize,
    modules: u32,
    base: usize,
) -> Option<Error> {
    // seen[m] = 1 + last event in which module m's run ended (0 = never).
    let mut seen = vec![0u32; modules as usize];
    let mut current: Option<(u16, u32, u32)> = None; // module, event, start
    for run in runs {
        if run.start as usize >= limit {
            break;
        }
        let (m, e) = (run.module, run.event);
        match current {
            // The same run continued across a piece boundary.
            Some((cm, ce, _)) if cm == m && ce == e => continue,
            _ => {}
        }
        if seen[m as usize] == e + 1 {
            let before = base
                + match current {
                    Some((_, ce, start)) if ce == e => start as usize,
                    _ => run.start as usize,
                };
            return Some(Error::InvalidItem {
                what: "digi",
                index: base + run.start as usize,
                column: "module",
                detail: format!(
                    "the digis of module {m} are not consecutive (an earlier run of module {m} ended before digi {before})"
                ),
            });
        }
        seen[m as usize] = e + 1;
        current = Some((m, e, run.start));
    }
    None
}

fn module_out_of_range(d: usize, m: u16, geometry: &Geometry) -> Error {
    Error::InvalidItem {
        what: "digi",
        index: d,
        column: "module",
        detail: format!(
            "module id {m} out of range ({} modules in {}; {INVALID_MODULE} marks an invalid digi)",
            geometry.modules, geometry.name
        ),
    }
}

impl Backend {
    /// Clusters many batches (each its digis and event offsets, as for
    /// [`Backend::cluster_events`]) with copies overlapped with work: on CUDA each batch goes
    /// to one of three lanes (streams) with pinned buffers, so one batch uploads while another
    /// runs and a third comes back, and the host validates the next batch meanwhile. `sink`
    /// gets `(batch index, results)` in batch order. The array lengths and event offsets of
    /// every batch are checked before anything runs; a bad digi stops the run at its batch
    /// (later batches are not clustered), with the error [`Backend::cluster_events`] gives
    /// for that batch alone (digi indices within the batch).
    pub fn cluster_batches(
        &self,
        batches: &[(DigisRef<'_>, &[u32])],
        geometry: &Geometry,
        cut: Option<ChargeCut>,
        mut sink: impl FnMut(usize, &Clusters) -> Result<()>,
    ) -> Result<()> {
        match self.gpu() {
            None => {
                let mut out = Clusters::default();
                for (i, (d, o)) in batches.iter().enumerate() {
                    self.on_cpu(|| {
                        validate(*d, o, geometry)?;
                        par::cluster_into(*d, o, geometry, cut, &mut out);
                        Ok::<_, Error>(())
                    })?;
                    sink(i, &out)?;
                }
                Ok(())
            }
            Some(gpu) => self.ws.clustering.run(
                gpu,
                || door::ClusterWorkspace::new(gpu, &self.cluster_tuning),
                |w| w.cluster_batches(batches, geometry, cut, &mut sink),
            ),
        }
    }

    /// [`Backend::cluster_events_into`] into the caller's arrays: `out.clus` of exactly the
    /// digi count, `out.clus_in_module` and `out.module_first` of exactly
    /// `events × geometry.modules` (a typed error otherwise). No vector is allocated on the
    /// way out: the results go from the pinned staging straight into the arrays.
    pub fn cluster_events_into_slices<'a>(
        &self,
        digis: impl Into<DigisRef<'a>>,
        event_offsets: &[u32],
        geometry: &Geometry,
        cut: Option<ChargeCut>,
        out: ClustersMut<'_>,
    ) -> Result<ClusterCounts> {
        let digis = digis.into();
        validate_shape(digis, event_offsets, geometry)?;
        let slots = (event_offsets.len() - 1) * geometry.modules as usize;
        let lens = [
            out.clus.len(),
            out.clus_in_module.len(),
            out.module_first.len(),
        ];
        if lens != [digis.len(), slots, slots] {
            return Err(invalid(
                "output arrays",
                format!(
                    "clus {}, clus_in_module {}, module_first {}: expected {} (digis), {slots} and {slots} (events × modules)",
                    lens[0],
                    lens[1],
                    lens[2],
                    digis.len()
                ),
            ));
        }
        match self.gpu() {
            None => {
                // Validation and clustering on the backend's pool (its thread count), the
                // results written straight into the caller's arrays.
                self.on_cpu(|| {
                    validate(digis, event_offsets, geometry)?;
                    par::cluster_into_slices(digis, event_offsets, geometry, cut, out);
                    Ok::<_, Error>(())
                })?;
                Ok(ClusterCounts::default())
            }
            Some(gpu) => door::cluster_call(
                &self.ws.clustering,
                gpu,
                &self.cluster_tuning,
                digis,
                event_offsets,
                geometry,
                cut,
                self.host_copies(),
                door::Out::Slices(out),
            ),
        }
    }

    /// Clusters one event's digis (`None`: no charge cut; `Some(geometry.default_cut)`:
    /// the CMS defaults). Input is validated first. `digis` is a `&Digis` or a [`DigisRef`]
    /// over the caller's arrays.
    pub fn cluster<'a>(
        &self,
        digis: impl Into<DigisRef<'a>>,
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Result<Clusters> {
        let digis = digis.into();
        self.cluster_events(digis, &[0, digis.len() as u32], geometry, cut)
    }

    /// Clusters several events at once (`event_offsets[e] .. event_offsets[e + 1]`).
    pub fn cluster_events<'a>(
        &self,
        digis: impl Into<DigisRef<'a>>,
        event_offsets: &[u32],
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Result<Clusters> {
        let mut out = Clusters::default();
        self.cluster_events_into(digis, event_offsets, geometry, cut, &mut out)?;
        Ok(out)
    }

    /// [`Backend::cluster_events`] into `out`, whose vectors are reused (resized to the
    /// batch; no allocation once they have grown to it). On CUDA the call runs in the
    /// backend's clustering workspace (device digis, a cached [`Clusterer`] replayed as a
    /// CUDA graph, pinned staging), so a batch that fits an earlier one allocates nothing.
    /// On an error `out` holds no meaningful result.
    pub fn cluster_events_into<'a>(
        &self,
        digis: impl Into<DigisRef<'a>>,
        event_offsets: &[u32],
        geometry: &Geometry,
        cut: Option<ChargeCut>,
        out: &mut Clusters,
    ) -> Result<()> {
        let digis = digis.into();
        match self.gpu() {
            None => self.on_cpu(|| {
                let mut timer = crate::par_timing::Timer::start();
                validate(digis, event_offsets, geometry)?;
                timer.mark("clustering: validate");
                par::cluster_into(digis, event_offsets, geometry, cut, out);
                Ok(())
            }),
            Some(gpu) => door::cluster_call(
                &self.ws.clustering,
                gpu,
                &self.cluster_tuning,
                digis,
                event_offsets,
                geometry,
                cut,
                self.host_copies(),
                door::Out::Clusters(out),
            )
            .map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng as _;

    /// The plain sequential validation (one pass over the digis in order): the reference the
    /// parallel [`validate`] must agree with, error for error.
    fn validate_sequential(
        digis: &Digis,
        event_offsets: &[u32],
        geometry: &Geometry,
    ) -> Result<()> {
        let mut seen = vec![0u32; geometry.modules as usize];
        for e in 0..event_offsets.len() - 1 {
            let mut current: Option<(u16, usize)> = None;
            for d in event_offsets[e] as usize..event_offsets[e + 1] as usize {
                let m = digis.module[d];
                if m == INVALID_MODULE {
                    continue;
                }
                if m as u32 >= geometry.modules {
                    return Err(module_out_of_range(d, m, geometry));
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

    /// Events of a few modules with long runs (runs cross the validation's pieces), invalid
    /// digis inside runs, empty events; then one fault of each kind at random places.
    #[test]
    fn parallel_validation_reports_what_a_sequential_pass_reports() {
        let g = Geometry::custom(40, 64, 64, ChargeCut::uniform(0)).unwrap();
        let mut r = crate::rng::rng(7);
        let mut errors = 0;
        for case in 0..60 {
            let mut d = Digis::default();
            let mut offsets = vec![0u32];
            let events = 1 + case % 5;
            for _ in 0..events {
                if r.random_range(0..6) == 0 {
                    offsets.push(d.len() as u32); // an empty event
                    continue;
                }
                let mut modules: Vec<u16> = (0..40).collect();
                for i in (1..modules.len()).rev() {
                    modules.swap(i, r.random_range(0..=i));
                }
                for &m in &modules[..r.random_range(1..12)] {
                    let len = r.random_range(1..(3 * VALIDATE_PIECE / 2));
                    for _ in 0..len {
                        let inv = r.random_range(0..50) == 0;
                        d.push(
                            if inv { INVALID_MODULE } else { m },
                            r.random_range(0..64),
                            r.random_range(0..64),
                            100,
                        );
                    }
                }
                offsets.push(d.len() as u32);
            }
            let n = d.len();
            assert_eq!(
                validate(&d, &offsets, &g).map_err(|e| e.to_string()),
                Ok(()),
                "case {case}"
            );
            // The staged variant copies the four arrays, one after the other.
            let mut stage = vec![0u16; 4 * n];
            let mut waves = Vec::new();
            let mut sink = |w: [&[u16]; 4], r: std::ops::Range<usize>| {
                assert!(w.iter().all(|s| s.len() == r.len()));
                waves.push(r);
                Ok(())
            };
            validate_digis((&d).into(), &offsets, &g, Some((&mut stage, &mut sink))).unwrap();
            let want: Vec<u16> = [&d.module[..], &d.x[..], &d.y[..], &d.adc[..]].concat();
            assert!(stage == want, "case {case}: staged copy differs");
            // The waves cover every digi, in order.
            assert_eq!(waves.first().map_or(0, |r| r.start), 0);
            assert_eq!(waves.last().map_or(0, |r| r.end), n);
            assert!(waves.windows(2).all(|w| w[0].end == w[1].start));
            // Up to three faults of random kinds at random digis.
            for _ in 0..r.random_range(1..4) {
                if n == 0 {
                    break;
                }
                let at = r.random_range(0..n);
                match r.random_range(0..4) {
                    0 => d.module[at] = 40 + r.random_range(0..10),
                    1 => d.x[at] = 64 + r.random_range(0..10),
                    2 => d.y[at] = 64,
                    // Another module's id: non-consecutive unless it lands next to its run.
                    _ => d.module[at] = r.random_range(0..40),
                }
            }
            let want = validate_sequential(&d, &offsets, &g).map_err(|e| e.to_string());
            let got = validate(&d, &offsets, &g).map_err(|e| e.to_string());
            let mut sink = |_: [&[u16]; 4], _: std::ops::Range<usize>| Ok(());
            let staged = validate_digis((&d).into(), &offsets, &g, Some((&mut stage, &mut sink)))
                .map_err(|e| e.to_string());
            assert_eq!(staged, got, "case {case}: staged validation differs");
            errors += got.is_err() as u32;
            assert_eq!(got, want, "case {case}: {n} digis, offsets {offsets:?}");
        }
        assert!(
            errors >= 40,
            "only {errors} of 60 cases had a fault that validation found"
        );
    }

    #[test]
    fn cpu_batches_equal_single_calls_and_stop_at_a_bad_batch() {
        let b = Backend::cpu();
        let g = Geometry::phase1();
        let evs: Vec<Digis> = (0..4).map(|i| gen::run3_event(40 + i)).collect();
        let offs: Vec<Vec<u32>> = evs.iter().map(|d| vec![0, d.len() as u32]).collect();
        let mut batches: Vec<(DigisRef, &[u32])> = evs
            .iter()
            .zip(&offs)
            .map(|(d, o)| (DigisRef::from(d), o.as_slice()))
            .collect();
        let mut got = Vec::new();
        b.cluster_batches(&batches, &g, Some(g.default_cut), |i, c| {
            got.push((i, c.clone()));
            Ok(())
        })
        .unwrap();
        assert_eq!(got.len(), 4);
        for (i, c) in &got {
            let want = b
                .cluster_events(&evs[*i], &offs[*i], &g, Some(g.default_cut))
                .unwrap();
            assert!(c.same_clusters(&want), "batch {i}");
        }
        let mut bad = evs[2].clone();
        bad.y[7] = 5000;
        batches[2].0 = DigisRef::from(&bad);
        let mut seen = Vec::new();
        let err = b
            .cluster_batches(&batches, &g, None, |i, _| {
                seen.push(i);
                Ok(())
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            b.cluster(&bad, &g, None).unwrap_err().to_string()
        );
        assert_eq!(seen, [0, 1]);
    }

    #[test]
    fn slices_door_equals_vectors_and_checks_lengths() {
        let b = Backend::cpu();
        let g = Geometry::phase1();
        let d = gen::run3_event(3);
        let o = [0, d.len() as u32];
        let want = b.cluster_events(&d, &o, &g, Some(g.default_cut)).unwrap();
        let mut c = Clusters {
            clus: vec![7; d.len()],
            clus_in_module: vec![7; g.modules as usize],
            module_first: vec![7; g.modules as usize],
            ..Default::default()
        };
        b.cluster_events_into_slices(&d, &o, &g, Some(g.default_cut), c.as_mut())
            .unwrap();
        assert!(c.same_clusters(&want));
        c.clus.pop();
        let err = b
            .cluster_events_into_slices(&d, &o, &g, None, c.as_mut())
            .unwrap_err();
        assert!(err.to_string().contains("output arrays"), "{err}");
    }

    /// A staged validation of several waves: the waves cover the digis in order and the
    /// stage holds the four arrays, a range error stops before its wave, and the errors
    /// equal the unstaged ones.
    /// Many short runs in several events (the consecutive-digis rule then checked in
    /// parallel over groups of events): each kind of fault in the first digi, an event's
    /// first and last digi, a lane's last digi and the last digi gives the sequential
    /// pass's error, staged or not; a clean batch passes.
    #[test]
    fn many_runs_report_what_a_sequential_pass_reports() {
        let g = Geometry::custom(1856, 64, 64, ChargeCut::uniform(0)).unwrap();
        let mut d = Digis::default();
        let mut offsets = vec![0u32];
        for e in 0..12usize {
            for m in 0..1856u16 {
                for i in 0..(1 + (m as usize + e) % 4) {
                    let inv = (m as usize * 7 + i) % 41 == 40;
                    d.push(if inv { INVALID_MODULE } else { m }, 1, 2, 3);
                }
            }
            offsets.push(d.len() as u32);
        }
        let n = d.len();
        const { assert!(12 * 1856 > PAR_RUNS + 4096) };
        let mut stage = vec![0u16; 4 * n];
        let check = |d: &Digis, stage: &mut Vec<u16>, what: &str| {
            let want = validate_sequential(d, &offsets, &g).map_err(|e| e.to_string());
            let got = validate(d, &offsets, &g).map_err(|e| e.to_string());
            assert_eq!(got, want, "{what}");
            let staged = validate_staged(d.into(), &offsets, &g, stage).map_err(|e| e.to_string());
            assert_eq!(staged, want, "{what}: staged");
            want.is_err()
        };
        assert!(!check(&d, &mut stage, "clean"));
        let e1 = offsets[1] as usize;
        let e5 = offsets[5] as usize;
        let spots = [0, 31, 32, e1 - 1, e1, e5 + 63, e5 + 64, n / 2, n - 2, n - 1];
        for &at in &spots {
            for kind in 0..4 {
                let mut bad = d.clone();
                match kind {
                    0 => bad.module[at] = 1856,
                    1 => bad.x[at] = 64,
                    2 => bad.y[at] = 64,
                    // A module seen earlier in most events.
                    _ => bad.module[at] = 3,
                }
                let what = format!("fault {kind} at digi {at}");
                let found = check(&bad, &mut stage, &what);
                assert!(
                    found || kind == 3 || d.module[at] == INVALID_MODULE,
                    "{what}: not found"
                );
            }
        }
    }

    #[test]
    fn staged_validation_in_waves() {
        let g = Geometry::phase1();
        // 2.5 × 2^20 digis: several streamed waves, two events.
        const BIG: usize = 1 << 20;
        let n = 2 * BIG + BIG / 2 + 5;
        let mut d = Digis::default();
        for i in 0..n {
            // Runs of 1000 digis per module, modules in order, wrapping in one event would
            // repeat a module: one event per 1,856,000 digis.
            d.push(
                ((i / 1000) % 1856) as u16,
                (i % 160) as u16,
                (i % 416) as u16,
                10,
            );
        }
        let offsets = [0, 1_856_000, n as u32];
        let mut stage = vec![0u16; 4 * n];
        for fault in [None, Some(BIG + 17), Some(2 * BIG + 3)] {
            let mut bad = d.clone();
            if let Some(f) = fault {
                bad.x[f] = 200;
            }
            let mut waves = Vec::new();
            let mut sink = |_: [&[u16]; 4], r: std::ops::Range<usize>| {
                waves.push(r);
                Ok(())
            };
            let got = validate_digis((&bad).into(), &offsets, &g, Some((&mut stage, &mut sink)))
                .map_err(|e| e.to_string());
            let want = validate(&bad, &offsets, &g).map_err(|e| e.to_string());
            assert_eq!(got, want, "fault {fault:?}");
            assert_eq!(want.is_err(), fault.is_some());
            // Waves in order from digi 0, each whole; none at or after a faulty wave.
            let mut end = 0;
            for r in &waves {
                assert_eq!(r.start, end, "fault {fault:?}: {waves:?}");
                assert!(r.len() == STREAM_WAVE || r.end == n, "{waves:?}");
                end = r.end;
            }
            match fault {
                None => {
                    assert_eq!(end, n);
                    let arrays = [&d.module, &d.x, &d.y, &d.adc];
                    for (a, v) in arrays.iter().enumerate() {
                        assert!(stage[a * n..(a + 1) * n] == v[..], "array {a} staged");
                    }
                }
                Some(f) => assert!(end <= f / STREAM_WAVE * STREAM_WAVE, "{waves:?}"),
            }
        }
    }

    /// A sub-batch of whole events validated on its own ([`validate_digis_at`], as the
    /// split clustering call does): the same error as the whole batch's, digis named by
    /// their index in the whole batch, for each kind of fault, in the sub-batch's first,
    /// middle and last event; no error for a clean sub-batch.
    #[test]
    fn sub_batch_errors_name_the_whole_batch() {
        let g = Geometry::phase1();
        // Five events of 3000 digis: runs of 50 digis per module, modules in order.
        let mut d = Digis::default();
        for e in 0..5usize {
            for i in 0..3000usize {
                d.push(
                    ((i / 50 + e) % 1856) as u16,
                    (i % 160) as u16,
                    (i % 416) as u16,
                    10,
                );
            }
        }
        let offsets: Vec<u32> = (0..=5).map(|e| e * 3000).collect();
        type Fault = fn(&mut Digis, usize);
        let faults: [Fault; 4] = [
            |d, i| d.module[i] = 5000,
            |d, i| d.x[i] = 160,
            |d, i| d.y[i] = 416,
            |d, i| d.module[i] = d.module[i - 500],
        ];
        // Sub-batch: events 1..4 (digis 3000..12000).
        let (e0, e1) = (1usize, 4usize);
        let (lo, hi) = (offsets[e0] as usize, offsets[e1] as usize);
        let rebased: Vec<u32> = offsets[e0..=e1].iter().map(|&o| o - lo as u32).collect();
        let sub = |b: &Digis| -> Result<()> {
            let r = DigisRef::from(b).slice(lo..hi);
            validate_digis_at(r, &rebased, &g, None, lo)
        };
        assert!(sub(&d).is_ok());
        // Staged (small pieces, the calling thread working too): the same verdicts, and the
        // stage holds the sub-batch's four arrays.
        let staged = |b: &Digis, stage: &mut Vec<u16>| -> Result<()> {
            let r = DigisRef::from(b).slice(lo..hi);
            let mut sink = |_: [&[u16]; 4], _: std::ops::Range<usize>| Ok(());
            validate_digis_at(r, &rebased, &g, Some((stage, &mut sink)), lo)
        };
        let mut stage = vec![0u16; 4 * (hi - lo)];
        assert!(staged(&d, &mut stage).is_ok());
        let m = hi - lo;
        for (a, v) in [&d.module, &d.x, &d.y, &d.adc].iter().enumerate() {
            assert!(stage[a * m..(a + 1) * m] == v[lo..hi], "array {a} staged");
        }
        for (k, f) in faults.iter().enumerate() {
            for at in [lo + 700, lo + 4500, hi - 1] {
                let mut bad = d.clone();
                f(&mut bad, at);
                let want = validate(&bad, &offsets, &g).map_err(|e| e.to_string());
                let got = sub(&bad).map_err(|e| e.to_string());
                assert!(want.is_err(), "fault {k} at {at}");
                assert_eq!(got, want, "fault {k} at {at}");
                let got = staged(&bad, &mut stage).map_err(|e| e.to_string());
                assert_eq!(got, want, "staged: fault {k} at {at}");
            }
        }
    }
}
