//! Seeded generator of pixel events and adversarial modules.
//!
//! # The Run-3-like event
//! About **18,000 clusters per event**: the Run-3 figure at pileup 50 quoted in
//! `shared/reference/perf-anchors.md` (CMS Patatrack). Clusters are spread over the Phase-1
//! modules with a density per module ∝ 1/r² (BPix layer radii 2.9, 6.8, 10.9, 16.0 cm; FPix
//! disks taken at 10 cm), so a layer-1 module gets ~70 clusters and an outer one a few.
//! Barrel clusters are elongated along the column (z) direction by `1.9 |sinh η|` pixels
//! (285 µm silicon, 150 µm pitch) and one or two rows wide (Lorentz drift); FPix clusters
//! are 1–3 pixels each way. The cluster charge (~21,000 e⁻ per 285 µm, times the path length,
//! with a Landau-like tail) is shared among its pixels, each at least 1,000 e⁻. On top:
//! single-pixel noise (~7% of the digis, 1,000–2,500 e⁻, mostly removed by the charge cut),
//! 0.5% duplicated digis (same pixel read twice) and 0.5% invalid digis interleaved.
//! The result is about 113,000 digis per event (110,621 to 114,681 over seeds 1000 to 1015,
//! the benchmark's events), ~18,000 clusters after the CMS charge cut (17,814 to 18,282) and
//! ~26,000 without it. Digis of a module are shuffled (raw-data order is not geometric
//! order); modules come in increasing id order.
//!
//! # The dense (heavy-ion-like) event
//! Ten times the clusters, wider: about 1.66 M digis and 156,000 clusters after the cut
//! (seeds 2000 to 2003). The 320 modules of layers 1 and 2 carry over 1024 digis and leave
//! the small-module kernel for the shared-memory one; the 96 of layer 1, over 6000 digis
//! (the largest 8,153 to 8,614), go on to the fallback.

use std::collections::HashSet;

use detkit_gpu::clustering::INVALID_MODULE;

use super::{Digis, Geometry};

/// Phase-1 `layerStart`.
pub const PHASE1_LAYER_START: [u32; 11] =
    [0, 96, 320, 672, 1184, 1296, 1408, 1520, 1632, 1744, 1856];

/// The generator: `crate::rng`'s seeded `Xoshiro256PlusPlus` with the draws of
/// [`Draw`] (one generator for every family).
pub use crate::rng::{Draw, Rng};

/// Event settings.
#[derive(Clone, Copy, Debug)]
pub struct EventConfig {
    /// Mean clusters per event.
    pub clusters: f64,
    /// Extra width of clusters in rows (0 for pp, 1–2 for the dense mode).
    pub extra_width: u32,
    /// Noise digis per module (mean).
    pub noise_per_module: f64,
    /// Fraction of digis read twice.
    pub duplicate_fraction: f64,
    /// Fraction of invalid digis inserted.
    pub invalid_fraction: f64,
}

impl EventConfig {
    /// The Run-3-like event (see the module docs).
    pub fn run3() -> Self {
        Self {
            clusters: 18_000.0,
            extra_width: 0,
            noise_per_module: 4.5,
            duplicate_fraction: 0.005,
            invalid_fraction: 0.005,
        }
    }
    /// The dense, heavy-ion-like event.
    pub fn dense() -> Self {
        Self {
            clusters: 180_000.0,
            extra_width: 1,
            noise_per_module: 20.0,
            duplicate_fraction: 0.005,
            invalid_fraction: 0.005,
        }
    }
}

/// Relative cluster density of module `m` (∝ 1/r² by Phase-1 layer; uniform otherwise).
fn density(geometry: &Geometry, m: u32) -> f64 {
    if geometry.modules != 1856 {
        return 1.0;
    }
    let layer = PHASE1_LAYER_START
        .iter()
        .rposition(|&s| s <= m)
        .unwrap_or(0);
    let r: f64 = match layer {
        0 => 2.9,
        1 => 6.8,
        2 => 10.9,
        3 => 16.0,
        _ => 10.0,
    };
    1.0 / (r * r)
}

/// One generated event.
pub fn event(geometry: &Geometry, config: &EventConfig, seed: u64) -> Digis {
    let mut rng = crate::rng::rng(seed);
    let total: f64 = (0..geometry.modules).map(|m| density(geometry, m)).sum();
    let barrel_end = if geometry.modules == 1856 {
        1184
    } else {
        geometry.modules
    };
    let mut out = Digis::default();
    for m in 0..geometry.modules {
        let mean = config.clusters * density(geometry, m) / total;
        let nclus = rng.poisson(mean);
        let nnoise = rng.poisson(config.noise_per_module);
        if nclus == 0 && nnoise == 0 {
            continue;
        }
        let mut used: HashSet<(u16, u16)> = HashSet::new();
        let mut module = Digis::default();
        let mut put = |x: i64, y: i64, adc: u32, module: &mut Digis| {
            if x < 0 || y < 0 || x >= geometry.rows as i64 || y >= geometry.cols as i64 {
                return;
            }
            if used.insert((x as u16, y as u16)) {
                module.push(m as u16, x as u16, y as u16, adc.clamp(1000, 65535) as u16);
            }
        };
        for _ in 0..nclus {
            let x0 = rng.below(geometry.rows) as i64;
            let y0 = rng.below(geometry.cols) as i64;
            let eta = rng.uniform() * 5.0 - 2.5;
            let (len, width, path) = if m < barrel_end {
                let len = (1.9 * eta.sinh().abs()).round().clamp(1.0, 16.0) as i64;
                (len, 1 + (rng.uniform() < 0.6) as i64, eta.cosh().min(6.0))
            } else {
                (1 + rng.below(3) as i64, 1 + rng.below(3) as i64, 1.3)
            };
            let width = width + config.extra_width as i64;
            let slope = rng.uniform() * 0.6 - 0.3;
            let landau = 0.8 + 0.4 * rng.uniform() - 0.3 * rng.uniform().max(1e-9).ln();
            let charge = 21_000.0 * path * landau;
            let npix = (len * width) as f64;
            for t in 0..len {
                let x = x0 + (t as f64 * slope).round() as i64;
                for w in 0..width {
                    let share = charge / npix * (0.7 + 0.6 * rng.uniform());
                    put(x + w, y0 + t, share as u32, &mut module);
                }
            }
        }
        for _ in 0..nnoise {
            let (x, y) = (rng.below(geometry.rows), rng.below(geometry.cols));
            let adc = 1000 + rng.below(1500);
            put(x as i64, y as i64, adc, &mut module);
        }
        // Shuffle (Fisher-Yates), then duplicates and invalid digis.
        let len = module.len();
        for i in (1..len).rev() {
            let j = rng.below(i as u32 + 1) as usize;
            for a in [
                &mut module.module,
                &mut module.x,
                &mut module.y,
                &mut module.adc,
            ] {
                a.swap(i, j);
            }
        }
        for i in 0..len {
            if rng.uniform() < config.invalid_fraction {
                let (x, y) = (rng.below(geometry.rows), rng.below(geometry.cols));
                out.push(
                    INVALID_MODULE,
                    x as u16,
                    y as u16,
                    1000 + rng.below(5000) as u16,
                );
            }
            out.push(module.module[i], module.x[i], module.y[i], module.adc[i]);
            if rng.uniform() < config.duplicate_fraction {
                let adc = 1000 + rng.below(20_000) as u16;
                out.push(module.module[i], module.x[i], module.y[i], adc);
            }
        }
    }
    out
}

/// The Run-3-like Phase-1 event.
pub fn run3_event(seed: u64) -> Digis {
    event(&Geometry::phase1(), &EventConfig::run3(), seed)
}

/// The dense Phase-1 event.
pub fn dense_event(seed: u64) -> Digis {
    event(&Geometry::phase1(), &EventConfig::dense(), seed)
}

/// Adversarial single-module inputs for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adversarial {
    /// One digi.
    One,
    /// Every pixel of the module: one cluster.
    Full,
    /// Pixels with even `x` and even `y`: no two touch, every pixel its own cluster.
    Lattice,
    /// Pixels with `x + y` even: every pair touches diagonally, one cluster.
    Checkerboard,
    /// Every other column full, joined at alternate ends by one pixel: one long snake,
    /// digis numbered from its far end (worst case for label propagation).
    Snake,
    /// A small snake in `cols` columns, within the fast path's capacity.
    SmallSnake(u32),
    /// Every digi twice: nothing survives.
    AllDuplicated,
    /// Every pixel of the module, each twice, plus one more copy of pixel 0 (three).
    FullDuplicated,
}

/// Digis of module `m` for an adversarial case, in a shuffled order unless the case fixes it.
pub fn adversarial(kind: Adversarial, geometry: &Geometry, m: u16, seed: u64) -> Digis {
    let (rows, cols) = (geometry.rows as u16, geometry.cols as u16);
    let mut rng = crate::rng::rng(seed);
    let mut d = Digis::default();
    let mut pixels: Vec<(u16, u16)> = Vec::new();
    let snake = |ncols: u16, out: &mut Vec<(u16, u16)>| {
        for y in 0..ncols {
            if y % 2 == 0 {
                let down = (y / 2) % 2 == 0;
                for t in 0..rows {
                    out.push((if down { t } else { rows - 1 - t }, y));
                }
            } else {
                out.push((if (y / 2) % 2 == 0 { rows - 1 } else { 0 }, y));
            }
        }
        out.reverse();
    };
    let mut shuffle = true;
    match kind {
        Adversarial::One => {
            pixels.push((rng.below(rows as u32) as u16, rng.below(cols as u32) as u16))
        }
        Adversarial::Full | Adversarial::FullDuplicated => {
            for y in 0..cols {
                for x in 0..rows {
                    pixels.push((x, y));
                }
            }
        }
        Adversarial::Lattice => {
            for y in (0..cols).step_by(2) {
                for x in (0..rows).step_by(2) {
                    pixels.push((x, y));
                }
            }
        }
        Adversarial::Checkerboard => {
            for y in 0..cols {
                for x in 0..rows {
                    if (x + y) % 2 == 0 {
                        pixels.push((x, y));
                    }
                }
            }
        }
        Adversarial::Snake => {
            snake(cols, &mut pixels);
            shuffle = false;
        }
        Adversarial::SmallSnake(n) => {
            snake((n as u16).min(cols), &mut pixels);
            shuffle = false;
        }
        Adversarial::AllDuplicated => {
            for _ in 0..200 {
                let p = (rng.below(rows as u32) as u16, rng.below(cols as u32) as u16);
                pixels.push(p);
                pixels.push(p);
            }
        }
    }
    if kind == Adversarial::FullDuplicated {
        let copy = pixels.clone();
        pixels.extend(copy);
        pixels.push((0, 0));
    }
    if shuffle {
        for i in (1..pixels.len()).rev() {
            let j = rng.below(i as u32 + 1) as usize;
            pixels.swap(i, j);
        }
    }
    for (x, y) in pixels {
        d.push(m, x, y, 1000 + rng.below(9000) as u16);
    }
    d
}
