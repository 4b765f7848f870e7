//! Seeded event generator for seeding: an ODD-like pixel detector in a 2 T solenoid,
//! pile-up vertices, charged helices with truth, smeared hits and noise; and the physics
//! checks (efficiency, fake and duplicate rates, parameter residuals).
//!
//! Detector (approximately the Open Data Detector's pixel system; our own numbers, not read
//! from the ODD geometry files): barrel layers at r = 34, 70, 116, 172 mm, |z| < 560 mm;
//! seven endcap disks per side at |z| = 620, 720, 840, 980, 1120, 1320, 1520 mm covering
//! 34 mm < r < 175 mm. Field 2 T along +z (uniform). Hits: the first crossing of each
//! layer by the helix (no material, no multiple scattering, no energy loss), smeared by
//! 15 µm (50 µm pixels / √12) in r·φ and in z (barrel) or r (disks).
//!
//! Physics: each pile-up interaction gives 36 charged particles on average (chosen so that
//! ⟨μ⟩ = 200 matches the spacepoint count below; TrackML's ⟨μ⟩ = 200 events hold about 10,000
//! particles), η uniform in [-4, 4], φ uniform, pT ~ Γ(2, 0.25 GeV) (mean 0.5 GeV) with a 5%
//! tail ∝ pT^-4 above 1 GeV; a ttbar-like hard scatter adds 150 particles with
//! pT ~ 1 + Exp(mean 4 GeV). Vertices: z ~ N(0, 50 mm). Noise: 1% extra hits, uniform on the
//! layers. At ⟨μ⟩ = 200 this gives about 38,000 spacepoints on average (34,000–43,000 for
//! most seeds); the TrackML pixel detector's ⟨μ⟩ = 200 ttbar events average 38,055 pixel
//! spacepoints (380,554 in 10 events, traccc wiki "sequential example chain").

use crate::seeding::{BoundParams, Seed, SpacePoint, TESLA};

/// Barrel layer radii (mm).
pub const BARREL_R: [f32; 4] = [34.0, 70.0, 116.0, 172.0];
/// Barrel half length (mm).
pub const BARREL_HALF_Z: f32 = 560.0;
/// Disk positions |z| (mm).
pub const DISK_Z: [f32; 7] = [620.0, 720.0, 840.0, 980.0, 1120.0, 1320.0, 1520.0];
/// Disk radial coverage (mm).
pub const DISK_R: (f32, f32) = (34.0, 175.0);
/// Field (T).
pub const FIELD_T: f64 = 2.0;
/// Hit resolution (mm).
pub const SIGMA: f64 = 0.015;
/// Truth id of noise hits.
pub const NOISE: u32 = u32::MAX;

/// A generated charged particle.
#[derive(Clone, Copy, Debug)]
pub struct Particle {
    /// Charge ±1.
    pub q: f32,
    /// Transverse momentum (GeV).
    pub pt: f32,
    /// Pseudorapidity.
    pub eta: f32,
    /// Initial direction phi.
    pub phi: f32,
    /// Vertex z (mm).
    pub vz: f32,
    /// Number of hits it left.
    pub hits: u32,
}

/// An event with truth.
#[derive(Clone, Debug, Default)]
pub struct Event {
    /// Spacepoints (shuffled).
    pub spacepoints: Vec<SpacePoint>,
    /// For each spacepoint, the particle that made it ([`NOISE`] for noise).
    pub truth: Vec<u32>,
    /// For each spacepoint, the true momentum direction phi there.
    pub truth_phi: Vec<f32>,
    /// Particles.
    pub particles: Vec<Particle>,
}

/// The generator: `crate::rng`'s seeded `Xoshiro256PlusPlus` with the draws of
/// [`Draw`] (one generator for every family).
pub use crate::rng::{Draw, Rng};
use rand::RngCore as _;

fn wrap(phi: f64) -> f64 {
    let two_pi = 2.0 * std::f64::consts::PI;
    let mut p = phi % two_pi;
    if p > std::f64::consts::PI {
        p -= two_pi;
    } else if p < -std::f64::consts::PI {
        p += two_pi;
    }
    p
}

/// Hit resolutions of the generator (mm, one Gaussian sigma) and whether the spacepoints
/// carry the matching variances.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Resolution {
    /// Along r·φ (the pixel's short side).
    pub rphi: f64,
    /// Along z on barrel layers and along r on disks (the long side).
    pub long: f64,
    /// Set `var_z` (barrel) / `var_r` (disks) to `long²`; `false`: variances 0 (what a CSV
    /// without `var_r`/`var_z` columns gives).
    pub variances: bool,
}

impl Default for Resolution {
    /// 15 µm both ways (50 µm pixels / √12), variances given: [`SIGMA`].
    fn default() -> Self {
        Self {
            rphi: SIGMA,
            long: SIGMA,
            variances: true,
        }
    }
}

impl Resolution {
    /// Long pixels as issue 14 describes them (and as ATLAS/CMS barrel pixels are):
    /// 10 µm in r·φ, 50 µm along the long side.
    pub fn long_pixels(variances: bool) -> Self {
        Self {
            rphi: 0.010,
            long: 0.050,
            variances,
        }
    }
}

/// Generates an event with `mu` pile-up interactions (and a ttbar-like hard scatter when
/// `hard_scatter`), deterministically from `seed`, at the default [`Resolution`].
pub fn generate(seed: u64, mu: f64, hard_scatter: bool) -> Event {
    generate_with(seed, mu, hard_scatter, Resolution::default())
}

/// [`generate`] with chosen hit resolutions (the same particles and hits for a seed; only
/// the smearing and the variances differ).
pub fn generate_with(seed: u64, mu: f64, hard_scatter: bool, res: Resolution) -> Event {
    let mut rng = crate::rng::rng(seed);
    let mut particles = Vec::new();
    let n_vertices = rng.poisson(mu);
    let mut vertices: Vec<(f64, u32, bool)> = (0..n_vertices)
        .map(|_| (50.0 * rng.normal(), rng.poisson(36.0), false))
        .collect();
    if hard_scatter {
        vertices.push((50.0 * rng.normal(), 150, true));
    }
    for (vz, n, hard) in vertices {
        for _ in 0..n {
            let pt = if hard {
                1.0 - 4.0 * rng.uniform().ln()
            } else if rng.uniform() < 0.05 {
                rng.uniform().powf(-1.0 / 3.0)
            } else {
                -0.25 * (rng.uniform().ln() + rng.uniform().ln())
            };
            particles.push(Particle {
                q: if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 },
                pt: pt as f32,
                eta: (8.0 * rng.uniform() - 4.0) as f32,
                phi: wrap(2.0 * std::f64::consts::PI * rng.uniform()) as f32,
                vz: vz as f32,
                hits: 0,
            });
        }
    }
    let mut hits: Vec<(SpacePoint, u32, f32)> = Vec::new();
    let var = if res.variances {
        (res.long * res.long) as f32
    } else {
        0.0
    };
    for (pi, p) in particles.iter_mut().enumerate() {
        let rho = p.pt as f64 / (FIELD_T * TESLA); // helix radius, mm
        let cot = (p.eta as f64).sinh();
        let (q, phi0, vz) = (p.q as f64, p.phi as f64, p.vz as f64);
        let add = |hits: &mut Vec<(SpacePoint, u32, f32)>,
                   r: f64,
                   alpha: f64,
                   z: f64,
                   barrel: bool,
                   rng: &mut Rng| {
            // position angle phi0 - q·alpha (positive charges turn clockwise in +z field),
            // direction phi0 - 2q·alpha.
            let (r, z) = if barrel {
                (r, z + res.long * rng.normal())
            } else {
                (r + res.long * rng.normal(), z)
            };
            let phi = phi0 - q * alpha + res.rphi * rng.normal() / r;
            hits.push((
                SpacePoint {
                    x: (r * phi.cos()) as f32,
                    y: (r * phi.sin()) as f32,
                    z: z as f32,
                    var_z: if barrel { var } else { 0.0 },
                    var_r: if barrel { 0.0 } else { var },
                },
                pi as u32,
                wrap(phi0 - 2.0 * q * alpha) as f32,
            ));
        };
        let mut count = 0;
        for &rl in &BARREL_R {
            let rl = rl as f64;
            if rl > 2.0 * rho {
                break;
            }
            let alpha = (rl / (2.0 * rho)).asin();
            let z = vz + 2.0 * rho * alpha * cot;
            if z.abs() <= BARREL_HALF_Z as f64 {
                add(&mut hits, rl, alpha, z, true, &mut rng);
                count += 1;
            }
        }
        if cot != 0.0 {
            for &zd in &DISK_Z {
                let zd = (zd as f64).copysign(cot);
                let s = (zd - vz) / cot;
                if s <= 0.0 {
                    continue;
                }
                let alpha = s / (2.0 * rho);
                if alpha > std::f64::consts::FRAC_PI_2 {
                    break;
                }
                let r = 2.0 * rho * alpha.sin();
                if r >= DISK_R.0 as f64 && r <= DISK_R.1 as f64 {
                    add(&mut hits, r, alpha, zd, false, &mut rng);
                    count += 1;
                }
            }
        }
        p.hits = count;
    }
    // Noise: 1% extra hits on random layers.
    let n_noise = hits.len() / 100;
    for _ in 0..n_noise {
        let layer = (rng.next_u64() % 18) as usize;
        let phi = wrap(2.0 * std::f64::consts::PI * rng.uniform());
        let (r, z) = if layer < 4 {
            (
                BARREL_R[layer] as f64,
                (2.0 * rng.uniform() - 1.0) * BARREL_HALF_Z as f64,
            )
        } else {
            let d = (layer - 4) % 7;
            let sign = if layer >= 11 { -1.0 } else { 1.0 };
            (
                DISK_R.0 as f64 + (DISK_R.1 - DISK_R.0) as f64 * rng.uniform(),
                sign * DISK_Z[d] as f64,
            )
        };
        hits.push((
            SpacePoint {
                x: (r * phi.cos()) as f32,
                y: (r * phi.sin()) as f32,
                z: z as f32,
                var_z: var,
                var_r: var,
            },
            NOISE,
            0.0,
        ));
    }
    // Shuffle (Fisher–Yates) so that input order carries no truth.
    for i in (1..hits.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        hits.swap(i, j);
    }
    Event {
        spacepoints: hits.iter().map(|h| h.0).collect(),
        truth: hits.iter().map(|h| h.1).collect(),
        truth_phi: hits.iter().map(|h| h.2).collect(),
        particles,
    }
}

/// Mean and RMS.
#[derive(Clone, Copy, Debug, Default)]
pub struct Residual {
    /// Mean of estimated − true.
    pub mean: f64,
    /// RMS of estimated − true.
    pub rms: f64,
    /// Number of entries.
    pub n: usize,
}

fn residual(v: &[f64]) -> Residual {
    if v.is_empty() {
        return Residual::default();
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let rms = (v.iter().map(|x| x * x).sum::<f64>() / n).sqrt();
    Residual {
        mean,
        rms,
        n: v.len(),
    }
}

/// Truth-based physics figures of a seeding result.
#[derive(Clone, Copy, Debug, Default)]
pub struct Physics {
    /// Particles with pT > 1 GeV, |η| < 1 and at least 3 hits.
    pub selected: usize,
    /// Of those, how many have at least one seed whose three spacepoints are all theirs.
    pub found: usize,
    /// Seeds.
    pub seeds: usize,
    /// Seeds whose spacepoints do not all come from one particle.
    pub fakes: usize,
    /// True seeds beyond the first of their particle.
    pub duplicates: usize,
    /// q/p residual (1/GeV) of true seeds.
    pub qop: Residual,
    /// Direction phi residual (rad) at the bottom spacepoint.
    pub phi: Residual,
    /// Theta residual (rad).
    pub theta: Residual,
    /// q/p residual relative to the true q/p, of true seeds with pT > 1 GeV.
    pub qop_rel_pt1: Residual,
}

impl Physics {
    /// Efficiency (found / selected).
    pub fn efficiency(&self) -> f64 {
        self.found as f64 / self.selected.max(1) as f64
    }
    /// Fake rate (fakes / seeds).
    pub fn fake_rate(&self) -> f64 {
        self.fakes as f64 / self.seeds.max(1) as f64
    }
    /// Duplicate rate (duplicates / true seeds).
    pub fn duplicate_rate(&self) -> f64 {
        self.duplicates as f64 / (self.seeds - self.fakes).max(1) as f64
    }
}

impl std::fmt::Display for Physics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "efficiency (pT > 1 GeV, |eta| < 1) {:.2}% ({}/{}), fake rate {:.2}%, duplicate rate {:.2}%, \
             residuals (mean/rms): q/p {:.2e}/{:.2e} 1/GeV, phi {:.2e}/{:.2e} rad, theta {:.2e}/{:.2e} rad, \
             rel. q/p (pT > 1) {:.3}/{:.3}",
            100.0 * self.efficiency(),
            self.found,
            self.selected,
            100.0 * self.fake_rate(),
            100.0 * self.duplicate_rate(),
            self.qop.mean,
            self.qop.rms,
            self.phi.mean,
            self.phi.rms,
            self.theta.mean,
            self.theta.rms,
            self.qop_rel_pt1.mean,
            self.qop_rel_pt1.rms
        )
    }
}

/// Physics figures of `seeds` (with `params`) on `event`.
pub fn physics(event: &Event, seeds: &[Seed], params: &[BoundParams]) -> Physics {
    let mut seeded = vec![0u32; event.particles.len()];
    let mut ph = Physics {
        seeds: seeds.len(),
        ..Default::default()
    };
    let (mut dq, mut dphi, mut dth, mut rel) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (s, p) in seeds.iter().zip(params) {
        let t = [
            event.truth[s.bottom as usize],
            event.truth[s.middle as usize],
            event.truth[s.top as usize],
        ];
        if t[0] == NOISE || t[0] != t[1] || t[0] != t[2] {
            ph.fakes += 1;
            continue;
        }
        let part = &event.particles[t[0] as usize];
        seeded[t[0] as usize] += 1;
        if seeded[t[0] as usize] > 1 {
            ph.duplicates += 1;
        }
        let theta = 2.0 * (-(part.eta as f64)).exp().atan();
        let qop = part.q as f64 / (part.pt as f64 * (part.eta as f64).cosh());
        dq.push(p.qop as f64 - qop);
        if part.pt > 1.0 {
            rel.push((p.qop as f64 - qop) / qop);
        }
        dphi.push(wrap(
            p.phi as f64 - event.truth_phi[s.bottom as usize] as f64,
        ));
        dth.push(p.theta as f64 - theta);
    }
    for (i, p) in event.particles.iter().enumerate() {
        if p.pt > 1.0 && p.eta.abs() < 1.0 && p.hits >= 3 {
            ph.selected += 1;
            if seeded[i] > 0 {
                ph.found += 1;
            }
        }
    }
    ph.qop = residual(&dq);
    ph.phi = residual(&dphi);
    ph.theta = residual(&dth);
    ph.qop_rel_pt1 = residual(&rel);
    ph
}

/// Found / selected particles of one bin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BinCount {
    /// Particles in the bin with at least 3 hits.
    pub selected: usize,
    /// Of those, with at least one seed whose three spacepoints are all theirs.
    pub found: usize,
}

impl BinCount {
    /// found / selected (1 when empty).
    pub fn efficiency(&self) -> f64 {
        if self.selected == 0 {
            1.0
        } else {
            self.found as f64 / self.selected as f64
        }
    }
    /// Adds another count.
    pub fn add(&mut self, o: BinCount) {
        self.selected += o.selected;
        self.found += o.found;
    }
}

/// Efficiency counts in bins: `[lo, hi)` of `value(particle)`, for the particles that pass
/// `select` and have at least 3 hits.
pub fn efficiency_bins(
    event: &Event,
    seeds: &[Seed],
    edges: &[(f64, f64)],
    value: impl Fn(&Particle) -> f64,
    select: impl Fn(&Particle) -> bool,
) -> Vec<BinCount> {
    let mut seeded = vec![false; event.particles.len()];
    for s in seeds {
        let t = [
            event.truth[s.bottom as usize],
            event.truth[s.middle as usize],
            event.truth[s.top as usize],
        ];
        if t[0] != NOISE && t[0] == t[1] && t[0] == t[2] {
            seeded[t[0] as usize] = true;
        }
    }
    let mut out = vec![BinCount::default(); edges.len()];
    for (i, p) in event.particles.iter().enumerate() {
        if p.hits < 3 || !select(p) {
            continue;
        }
        let v = value(p);
        if let Some(b) = edges.iter().position(|&(lo, hi)| v >= lo && v < hi) {
            out[b].selected += 1;
            out[b].found += seeded[i] as usize;
        }
    }
    out
}

/// A fan: one middle at (70, 0, 0) mm with `k` bottoms at r = 40 mm and `k` tops at r = 120
/// mm, bottom `j` and top `j` on one straight line through the middle (cot θ spread over
/// [-0.5, 0.5], phi within ±0.0025 rad); every spacepoint gets `var_z` and `var_r`
/// (mm²). Only the middle has both bottoms and tops, so the event has exactly `k`
/// middle–bottom and `k` middle–top doublets: for tests of the triplet kernel's lanes at
/// chosen sizes (a partial warp, 31, 32, 33, many). With a large variance every
/// bottom–top pair passes the first (cot θ) triplet cut, so every lane of the triplet kernel
/// runs the whole test at every step.
pub fn fan(k: usize, var: f32) -> Vec<SpacePoint> {
    let mut out = vec![SpacePoint {
        x: 70.0,
        y: 0.0,
        z: 0.0,
        var_z: var,
        var_r: var,
    }];
    let at = |r: f32, phi: f32, z: f32| SpacePoint {
        x: r * phi.cos(),
        y: r * phi.sin(),
        z,
        var_z: var,
        var_r: var,
    };
    for j in 0..k {
        let f = if k > 1 {
            j as f32 / (k - 1) as f32
        } else {
            0.5
        };
        let cot = f - 0.5;
        let phi = 0.005 * (f - 0.5);
        out.push(at(40.0, phi, -30.0 * cot));
        out.push(at(120.0, -phi, 50.0 * cot));
    }
    out
}
