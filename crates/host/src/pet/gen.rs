//! Seeded generator of PET acquisitions: a small-animal scanner (parameters, position and
//! energy-correction tables), positron annihilations as two back-to-back 511 keV photons
//! (timing jitter, photopeak or Compton energies, each photon detected or not), randoms from
//! independent events overlapping in time, a few pile-up frames above the energy table's end,
//! raw frames written as per-BDM time-ordered streams (each time slice: BDM 0's frames, then
//! BDM 1's, ...), and the truth pairs.

use detkit_gpu::pet::{
    convert_frame, DataFrameV2, ScannerParams, CONVERT_BAD_ADDRESS, ENERGY_BINS,
};

use super::Scanner;

/// The generator: `crate::rng`'s seeded `Xoshiro256PlusPlus` with the draws of
/// [`Draw`] (one generator for every family).
pub use crate::rng::{Draw, Rng};

/// Scanner parameters with the generator's position-table convention.
pub fn params(
    channels: u32,
    module_num_z: u32,
    blocks: (u32, u32),
    crystals: (u32, u32),
    position_size: u32,
) -> ScannerParams {
    ScannerParams {
        channels,
        module_num_y: 1,
        module_num_z,
        block_num_y: blocks.0,
        block_num_z: blocks.1,
        crystal_num_y: crystals.0,
        crystal_num_z: crystals.1,
        position_size,
        energy_lo: 3500.0,
        energy_hi: 6500.0,
        _pad: [0; 2],
    }
}

/// Position-map origin crystal of pixel `(x, y)`: the map is cut into a `cz x cy` grid.
pub(crate) fn origin_of(p: &ScannerParams, x: u32, y: u32) -> u8 {
    let ps = p.position_size;
    ((y * p.crystal_num_y / ps) * p.crystal_num_z + x * p.crystal_num_z / ps) as u8
}

/// A scanner with generated tables: the position map cut into the crystal grid; correction
/// factors around 1 (±5% per crystal, a slight slope with energy). Energies are in units of
/// 0.1 keV, so the default energy window `[3500, 6500]` is 350–650 keV.
pub fn scanner(p: ScannerParams, time_window: f64, seed: u64) -> Scanner {
    let mut rng = crate::rng::rng(seed);
    let ps = p.position_size;
    let mut position = Vec::with_capacity(p.position_entries() as usize);
    for _ in 0..p.bdm_count() * p.du_count() {
        for y in 0..ps {
            for x in 0..ps {
                position.push(origin_of(&p, x, y));
            }
        }
    }
    let mut energy = Vec::with_capacity(p.energy_entries() as usize);
    for _ in 0..p.bdm_count() * p.du_count() * p.crystals_per_du() {
        let base = 0.95 + 0.1 * rng.unit() as f32;
        for bin in 0..ENERGY_BINS {
            energy.push(base * (1.0 + 2e-5 * bin as f32));
        }
    }
    Scanner::new(p, time_window, position, energy).expect("generated scanner is valid")
}

/// A tiny scanner for tests: 8 BDMs (4 channels, 2 axial modules), 2 DUs, 4 x 4 crystals.
pub fn tiny_scanner(seed: u64) -> Scanner {
    scanner(params(4, 2, (1, 2), (4, 4), 16), 5000.0, seed)
}

/// A small-animal scanner: 192 BDMs (48 channels, 4 axial modules), 4 DUs of 6 x 6 crystals,
/// position map 32 x 32 (27,648 crystals; 110 MB energy table).
pub fn small_animal_scanner(seed: u64) -> Scanner {
    scanner(params(48, 4, (2, 2), (6, 6), 32), 5000.0, seed)
}

/// A benchmark scanner: 256 BDMs (64 channels, 4 axial modules), 1 DU of 6 x 6 crystals
/// (37 MB energy table): a few hundred per-BDM streams.
pub fn bench_scanner(seed: u64) -> Scanner {
    scanner(params(64, 4, (1, 1), (6, 6), 32), 5000.0, seed)
}

/// Acquisition settings.
#[derive(Clone, Copy, Debug)]
pub struct AcquisitionConfig {
    /// Random seed.
    pub seed: u64,
    /// Singles rate, per second (1e6 to 5e7 typical).
    pub singles_rate: f64,
    /// Number of singles to generate (about).
    pub singles: usize,
    /// Seconds per counter tick (default 1 ps).
    pub tick: f64,
    /// Timing jitter (standard deviation, ticks).
    pub jitter: f64,
    /// Probability that a photon is detected.
    pub detect: f64,
    /// Probability that a detected photon scattered (Compton energy).
    pub compton: f64,
    /// Probability of a pile-up frame with a raw energy of 10,000 or more.
    pub pileup: f64,
    /// Length of a readout slice (ticks): frames are written slice by slice, each slice BDM
    /// by BDM.
    pub slice: u64,
}

impl Default for AcquisitionConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            singles_rate: 1e7,
            singles: 100_000,
            tick: 1e-12,
            jitter: 200.0,
            detect: 0.6,
            compton: 0.3,
            pileup: 0.005,
            slice: 1_000_000_000,
        }
    }
}

/// A generated acquisition.
#[derive(Clone, Debug, Default)]
pub struct Acquisition {
    /// Raw frames, per-BDM time-ordered streams, slice by slice.
    pub frames: Vec<DataFrameV2>,
    /// Truth: for each annihilation with both photons detected, the two frame indices.
    pub truth: Vec<(usize, usize)>,
    /// With `slice = u64::MAX` (one readout slice): the run boundaries of the per-BDM
    /// streams, `bdm_count + 1` frame indices from 0 to the frame count (BDM `b`'s frames are
    /// `bdm_runs[b]..bdm_runs[b + 1]`); empty otherwise.
    pub bdm_runs: Vec<u32>,
}

pub(crate) fn frame(
    p: &ScannerParams,
    rng: &mut Rng,
    bdm: u32,
    time: u64,
    raw: u32,
) -> DataFrameV2 {
    let du = rng.below(p.du_count());
    let (cy, cz, ps) = (p.crystal_num_y, p.crystal_num_z, p.position_size);
    let (oy, ox) = (rng.below(cy), rng.below(cz));
    let xr = (ox * ps).div_ceil(cz)..((ox + 1) * ps).div_ceil(cz);
    let yr = (oy * ps).div_ceil(cy)..((oy + 1) * ps).div_ceil(cy);
    let x = xr.start + rng.below(xr.end - xr.start);
    let y = yr.start + rng.below(yr.end - yr.start);
    DataFrameV2 {
        head_du: 0xA0 | du as u8,
        bdm: bdm as u8,
        time: time.to_be_bytes(),
        x: x as u8,
        y: y as u8,
        energy: (raw.min(65535) as u16).to_be_bytes(),
        temperature_int: 30,
        temperature_tail: 0x55,
    }
}

/// A raw energy: pile-up above the energy table's end, Compton or photopeak.
fn raw_energy(c: &AcquisitionConfig, rng: &mut Rng) -> u32 {
    if rng.unit() < c.pileup {
        return 10_000 + rng.below(55_000);
    }
    let kev = if rng.unit() < c.compton {
        50.0 + 290.0 * rng.unit()
    } else {
        511.0 + 511.0 * 0.12 / 2.355 * rng.normal()
    };
    (kev * 10.0).round().max(0.0) as u32
}

/// The next annihilation after time `t` (advanced): two photons towards opposite BDMs, each
/// detected or not; `hit(time, bdm, raw energy)` for each detected one.
fn annihilation(
    p: &ScannerParams,
    c: &AcquisitionConfig,
    rng: &mut Rng,
    t: &mut f64,
    mut hit: impl FnMut(&mut Rng, u64, u32, u32),
) {
    let ring = p.channels * p.module_num_y;
    let events_per_tick = c.singles_rate / (2.0 * c.detect) * c.tick;
    *t += -(1.0 - rng.unit()).ln() / events_per_tick;
    let b1 = rng.below(p.bdm_count());
    let (pos, ax) = (b1 % ring, b1 / ring);
    let ax2 = (ax + rng.below(3) + p.module_num_z - 1) % p.module_num_z;
    let b2 = (pos + ring / 2) % ring + ax2 * ring;
    for b in [b1, b2] {
        if rng.unit() < c.detect {
            let tt = (*t + c.jitter * rng.normal()).max(0.0) as u64;
            let e = raw_energy(c, rng);
            hit(rng, tt, b, e);
        }
    }
}

/// The boundaries of the per-BDM runs of hits sorted by BDM (one readout slice).
fn bdm_runs_of(
    p: &ScannerParams,
    c: &AcquisitionConfig,
    bdm: impl Fn(usize) -> u32,
    n: usize,
) -> Vec<u32> {
    let mut runs = Vec::new();
    if c.slice == u64::MAX {
        runs.push(0);
        for b in 0..p.bdm_count() {
            let (mut lo, mut hi) = (0, n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if bdm(mid) <= b {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            runs.push(lo as u32);
        }
    }
    runs
}

/// About how many bytes [`acquisition`] holds at its peak for `singles` singles (the hits,
/// their sort's scratch, the frames, the event map and the truth pairs: 80 bytes a single),
/// for a memory check before generating ([`crate::mem::check_estimate`]).
pub fn acquisition_bytes(singles: usize) -> u64 {
    (singles as u64).saturating_add(2).saturating_mul(80)
}

/// Generates an acquisition on `scanner`'s geometry.
pub fn acquisition(scanner: &Scanner, c: &AcquisitionConfig) -> Acquisition {
    let p = &scanner.params;
    let mut rng = crate::rng::rng(c.seed);
    let mut t = 1000.0 + rng.unit() * 1000.0;
    // (time, bdm, raw energy, event id)
    let mut hits: Vec<(u64, u32, u32, usize)> = Vec::with_capacity(c.singles + 2);
    let mut event = 0usize;
    while hits.len() < c.singles {
        annihilation(p, c, &mut rng, &mut t, |_, tt, b, e| {
            hits.push((tt, b, e, event))
        });
        event += 1;
    }
    hits.sort_by_key(|h| h.0);
    // Slice by slice, BDM by BDM (stable: time order inside each BDM).
    hits.sort_by_key(|h| (h.0 / c.slice.max(1), h.1));
    let mut frames = Vec::with_capacity(hits.len());
    let mut first_of_event: std::collections::HashMap<usize, usize> = Default::default();
    let mut truth = Vec::new();
    for (i, &(tt, b, e, ev)) in hits.iter().enumerate() {
        frames.push(frame(p, &mut rng, b, tt, e));
        if let Some(j) = first_of_event.insert(ev, i) {
            truth.push((j.min(i), j.max(i)));
        }
    }
    truth.sort_unstable();
    let bdm_runs = bdm_runs_of(p, c, |i| hits[i].1, hits.len());
    Acquisition {
        frames,
        truth,
        bdm_runs,
    }
}

/// Singles per segment of [`acquisition_par`].
const SEGMENT: usize = 1 << 20;

/// An acquisition of the same kind as [`acquisition`] generated in parallel (`rayon`), for
/// benchmark sizes up to 2^28 singles: the time axis is cut into segments of 2^20 singles,
/// each drawn by its own generator (seeded from `c.seed` and the segment's index), then
/// sorted as a whole. The result depends on the configuration only, not on the number of
/// threads; it is not the same draw as [`acquisition`] with the same seed.
pub fn acquisition_par(scanner: &Scanner, c: &AcquisitionConfig) -> Acquisition {
    use rayon::prelude::*;
    let p = &scanner.params;
    let segments = c.singles.div_ceil(SEGMENT).max(1);
    // Ticks that one segment's singles span on average.
    let span = SEGMENT as f64 / (c.singles_rate * c.tick);
    struct Hit {
        time: u64,
        bdm: u32,
        event: u64,
        frame: DataFrameV2,
    }
    let mut hits: Vec<Hit> = (0..segments)
        .into_par_iter()
        .flat_map_iter(|k| {
            let want = SEGMENT.min(c.singles - (k * SEGMENT).min(c.singles)).max(1);
            let mut rng = crate::rng::rng(crate::rng::hash(c.seed, k as u64));
            let mut t = 1000.0 + span * k as f64 + rng.unit() * 1000.0;
            let mut v: Vec<Hit> = Vec::with_capacity(want + 2);
            let mut event = (k as u64) << 32;
            while v.len() < want {
                annihilation(p, c, &mut rng, &mut t, |rng, tt, b, e| {
                    let frame = frame(p, rng, b, tt, e);
                    v.push(Hit {
                        time: tt,
                        bdm: b,
                        event,
                        frame,
                    })
                });
                event += 1;
            }
            v
        })
        .collect();
    // Slice by slice, BDM by BDM, time order inside each BDM (stable: generation order for
    // equal times).
    let slice = c.slice.max(1);
    hits.par_sort_by_key(|h| (h.time / slice, h.bdm, h.time));
    let frames: Vec<DataFrameV2> = hits.par_iter().map(|h| h.frame).collect();
    // Truth: the two frames of each event with both photons detected.
    let mut by_event: Vec<(u64, usize)> = hits
        .par_iter()
        .enumerate()
        .map(|(i, h)| (h.event, i))
        .collect();
    by_event.par_sort_unstable();
    let mut truth: Vec<(usize, usize)> = by_event
        .par_windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .map(|w| (w[0].1.min(w[1].1), w[0].1.max(w[1].1)))
        .collect();
    truth.par_sort_unstable();
    let bdm_runs = bdm_runs_of(p, c, |i| hits[i].bdm, hits.len());
    Acquisition {
        frames,
        truth,
        bdm_runs,
    }
}

/// Whether a frame converts without a bad address (generator self-check).
pub fn frame_ok(scanner: &Scanner, f: &DataFrameV2) -> bool {
    let (_, st) = convert_frame(
        f,
        &scanner.params,
        |k| scanner.position[k as usize],
        |k| scanner.energy[k as usize],
    );
    st & CONVERT_BAD_ADDRESS == 0
}

/// The bytes of frames (16 each), as written to a frame file.
pub fn frame_bytes(frames: &[DataFrameV2]) -> &[u8] {
    bytemuck::cast_slice(frames)
}
