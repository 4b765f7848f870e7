//! traccc-style track seeding: configuration, validation and the backend-neutral API.
//! Kernels: `detkit_gpu::seeding`; launchers: [`cuda`]; oracle (also the CPU backend):
//! [`cpu`]; spacepoint CSV: [`io`]; event generator and physics figures: [`gen`]. The
//! semantics are in `docs/seeding.md`.
//!
//! ```
//! use detkit::seeding::{SeedingSettings, SpacePoint};
//! use detkit::Backend;
//!
//! let cfg = SeedingSettings::default().to_config()?;
//! let sp = |x: f32, z: f32| SpacePoint { x, y: 0.0, z, var_z: 0.0, var_r: 0.0 };
//! let event = [sp(34.0, 10.0), sp(70.0, 20.588), sp(116.0, 34.118)];
//! let out = Backend::cpu().seed(&event, &cfg)?;
//! assert_eq!((out.seeds[0].bottom, out.seeds[0].middle, out.seeds[0].top), (0, 1, 2));
//! # Ok::<(), detkit::Error>(())
//! ```

mod copies;
pub mod cpu;
mod crew;
pub mod cuda;
mod device_view;
pub(crate) mod door;
pub mod gen;
pub mod io;
pub mod par;
mod tuning;

pub use cpu::SeedingStats;
pub use cuda::{DeviceSeeds, SeedingWorkspace, StageTimes};
pub use detkit_gpu::seeding::{BoundParams, Seed, SeedingConfig, SpacePoint};
pub use device_view::{SeedsDev, SpacePointsDev};
pub use io::{read_csv, read_csv_with_lines};
pub use tuning::{SeedPlan, SeedTuning, DEFAULT_CAPACITY_FACTORS};

use detkit_gpu::seeding as k;

use crate::error::{invalid, Error, Result};
use crate::Backend;

/// Every buffer a seeding kernel fully writes is filled with this before the launch, so an
/// element left unwritten shows up as a mismatch against the oracle.
pub const POISON: u32 = 0xDEAD_BEEF;

/// Largest number of grid keys (bin × radius slice).
pub const MAX_GRID_KEYS: u32 = 1 << 22;

/// One tesla in detray/traccc units, GeV/(e·mm).
pub const TESLA: f64 = 0.000_299_792_458;

/// User-facing seeding configuration with traccc's defaults (`seedfinder_config`,
/// `seedfilter_config`, `spacepoint_grid_config`; mm, GeV, tesla). [`Self::to_config`]
/// validates it and computes the derived values and the grid axes (traccc's `setup()` and
/// `get_axes`) in double precision.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SeedingSettings {
    /// z range (mm).
    pub z_min: f64,
    /// z range (mm).
    pub z_max: f64,
    /// Largest radius (mm).
    pub r_max: f64,
    /// z0 window (mm).
    pub collision_region_min: f64,
    /// z0 window (mm).
    pub collision_region_max: f64,
    /// Phi range.
    pub phi_min: f64,
    /// Phi range.
    pub phi_max: f64,
    /// Smallest pT (GeV).
    pub min_pt: f64,
    /// Largest cot theta.
    pub cot_theta_max: f64,
    /// Doublet dR window (mm).
    pub delta_r_min: f64,
    /// Doublet dR window (mm).
    pub delta_r_max: f64,
    /// Largest doublet |dz| (mm).
    pub delta_z_max: f64,
    /// Largest impact parameter (mm).
    pub impact_max: f64,
    /// Sigmas of the scattering cut.
    pub sigma_scattering: f64,
    /// pT above which scattering is fixed (GeV).
    pub max_pt_scattering: f64,
    /// Solenoid field along z (T).
    pub b_field_in_z: f64,
    /// Beam position x (mm).
    pub beam_x: f64,
    /// Beam position y (mm).
    pub beam_y: f64,
    /// Radiation length per seed.
    pub rad_length_per_seed: f64,
    /// Phi bins per deflection.
    pub phi_bin_deflection_coverage: u32,
    /// Most seeds per middle spacepoint.
    pub max_seeds_per_spm: u32,
    /// Filter: curvature window (1/mm).
    pub delta_inv_helix_diameter: f64,
    /// Filter: impact weight factor.
    pub impact_weight_factor: f64,
    /// Filter: weight per compatible seed.
    pub compat_seed_weight: f64,
    /// Filter: top-radius separation (mm).
    pub filter_delta_r_min: f64,
    /// Filter: most compatible seeds.
    pub compat_seed_limit: u32,
    /// Filter: good-bottom radius (mm).
    pub good_spb_min_radius: f64,
    /// Filter: good-bottom weight.
    pub good_spb_weight_increase: f64,
    /// Filter: low-top radius (mm).
    pub good_spt_max_radius: f64,
    /// Filter: low-top weight.
    pub good_spt_weight_increase: f64,
    /// Filter: smallest weight with a good bottom.
    pub good_spb_min_weight: f64,
    /// Filter: weight of extra seeds per middle.
    pub seed_min_weight: f64,
    /// Filter: bottom radius of extra seeds per middle (mm).
    pub spb_min_radius: f64,
}

impl Default for SeedingSettings {
    fn default() -> Self {
        Self {
            z_min: -2000.0,
            z_max: 2000.0,
            r_max: 200.0,
            collision_region_min: -250.0,
            collision_region_max: 250.0,
            phi_min: -std::f64::consts::PI,
            phi_max: std::f64::consts::PI,
            min_pt: 0.5,
            cot_theta_max: 27.2845,
            delta_r_min: 20.0,
            delta_r_max: 80.0,
            delta_z_max: 450.0,
            impact_max: 10.0,
            sigma_scattering: 3.0,
            max_pt_scattering: 10.0,
            b_field_in_z: 1.99724,
            beam_x: 0.0,
            beam_y: 0.0,
            rad_length_per_seed: 0.05,
            phi_bin_deflection_coverage: 1,
            max_seeds_per_spm: 5,
            delta_inv_helix_diameter: 0.00003,
            impact_weight_factor: 1.0,
            compat_seed_weight: 200.0,
            filter_delta_r_min: 5.0,
            compat_seed_limit: 2,
            good_spb_min_radius: 150.0,
            good_spb_weight_increase: 400.0,
            good_spt_max_radius: 150.0,
            good_spt_weight_increase: 200.0,
            good_spb_min_weight: 380.0,
            seed_min_weight: 200.0,
            spb_min_radius: 43.0,
        }
    }
}

macro_rules! settings_keys {
    ($m:ident) => {
        $m!(
            z_min, z_max, r_max, collision_region_min, collision_region_max, phi_min, phi_max,
            min_pt, cot_theta_max, delta_r_min, delta_r_max, delta_z_max, impact_max,
            sigma_scattering, max_pt_scattering, b_field_in_z, beam_x, beam_y,
            rad_length_per_seed, delta_inv_helix_diameter, impact_weight_factor,
            compat_seed_weight, filter_delta_r_min, good_spb_min_radius,
            good_spb_weight_increase, good_spt_max_radius, good_spt_weight_increase,
            good_spb_min_weight, seed_min_weight, spb_min_radius;
            phi_bin_deflection_coverage, max_seeds_per_spm, compat_seed_limit
        )
    };
}

impl SeedingSettings {
    /// The names `from_toml` accepts (the field names).
    pub fn keys() -> Vec<&'static str> {
        macro_rules! names {
            ($($f:ident),*; $($u:ident),*) => { vec![$(stringify!($f),)* $(stringify!($u),)*] };
        }
        settings_keys!(names)
    }

    /// Reads a TOML file of `key = number` lines over the defaults (missing keys keep
    /// traccc's). An unknown key, a `[section]` or a malformed line is an error naming it,
    /// with its line and column.
    pub fn from_toml(text: &str) -> Result<Self> {
        // `toml` + serde: every key must be a field (unknown keys and `[sections]` are errors
        // naming the key, with the line and column); missing keys keep traccc's defaults.
        toml::from_str(text)
            .map_err(|e| invalid("seeding config", crate::csvio::toml_message(&e, text)))
    }

    /// Validates the settings and computes the device configuration.
    pub fn to_config(&self) -> Result<SeedingConfig> {
        macro_rules! finite {
            ($($f:ident),*; $($u:ident),*) => {
                $(if !self.$f.is_finite() {
                    return Err(invalid("seeding config", format!("`{}` is not finite: {}", stringify!($f), self.$f)));
                })*
            };
        }
        settings_keys!(finite);
        let bad = |d: String| Err(invalid("seeding config", d));
        if self.z_min >= self.z_max {
            return bad(format!("z_min {} >= z_max {}", self.z_min, self.z_max));
        }
        if self.phi_min >= self.phi_max {
            return bad(format!(
                "phi_min {} >= phi_max {}",
                self.phi_min, self.phi_max
            ));
        }
        if self.r_max <= 0.0 || self.min_pt <= 0.0 || self.b_field_in_z < 0.0 {
            return bad("r_max and min_pt must be > 0, b_field_in_z >= 0".into());
        }
        if self.delta_r_min < 0.0 || self.delta_r_max <= self.delta_r_min {
            return bad(format!(
                "need 0 <= delta_r_min < delta_r_max, got {} and {}",
                self.delta_r_min, self.delta_r_max
            ));
        }
        if self.cot_theta_max <= 0.0 || self.rad_length_per_seed <= 0.0 {
            return bad("cot_theta_max and rad_length_per_seed must be > 0".into());
        }
        if self.max_seeds_per_spm == 0 || self.max_seeds_per_spm > k::MAX_SEEDS_PER_SPM_CAP {
            return bad(format!(
                "max_seeds_per_spm {} not in 1..={}",
                self.max_seeds_per_spm,
                k::MAX_SEEDS_PER_SPM_CAP
            ));
        }
        if self.compat_seed_limit > k::COMPAT_SEED_LIMIT_CAP {
            return bad(format!(
                "compat_seed_limit {} above {}",
                self.compat_seed_limit,
                k::COMPAT_SEED_LIMIT_CAP
            ));
        }
        if self.phi_bin_deflection_coverage == 0 {
            return bad("phi_bin_deflection_coverage must be >= 1".into());
        }
        let bfield = self.b_field_in_z * TESLA;
        // seedfinder_config::setup()
        let highland = 13.6e-3
            * self.rad_length_per_seed.sqrt()
            * (1.0 + 0.038 * self.rad_length_per_seed.ln());
        let max_scattering_angle2 = (highland / self.min_pt).powi(2);
        let min_helix_diameter2 = if bfield > 0.0 {
            (2.0 * self.min_pt / bfield).powi(2)
        } else {
            f64::INFINITY
        };
        let pt2_per_radius = if bfield > 0.0 {
            (highland / bfield).powi(2)
        } else {
            f64::INFINITY
        };
        // get_axes
        let n_phi = if bfield == 0.0 {
            100
        } else {
            let r = self.min_pt / bfield;
            if r < self.r_max / 2.0 {
                return bad(format!(
                    "min_pt {} GeV in {} T gives a helix radius {r:.1} mm below r_max / 2",
                    self.min_pt, self.b_field_in_z
                ));
            }
            let angle = |rr: f64| {
                let x = rr * rr / (2.0 * r);
                let y = (rr * rr - x * x).sqrt();
                (x / y).atan()
            };
            let outer = angle(self.r_max);
            let (inner, r_in) = if self.r_max > self.delta_r_max {
                let r_in = self.r_max - self.delta_r_max;
                (angle(r_in), r_in)
            } else {
                (0.0, self.r_max)
            };
            let d_d0 =
                ((self.impact_max / r_in).asin() - (self.impact_max / self.r_max).asin()).abs();
            let delta_phi = (outer - inner + d_d0) / self.phi_bin_deflection_coverage as f64;
            let n = (2.0 * std::f64::consts::PI / delta_phi + 0.5).round();
            if n.is_nan() {
                return bad(format!(
                    "the phi axis bin count is not a number: impact_max {} mm must be at most \
                     the inner radius r_max - delta_r_max = {r_in} mm (and min_pt, b_field_in_z, \
                     phi_bin_deflection_coverage give the bin width)",
                    self.impact_max
                ));
            }
            if !(1.0..=4096.0).contains(&n) {
                return bad(format!(
                    "the phi axis would have {n} bins (1..=4096 supported)"
                ));
            }
            n as u32
        };
        let z_bin_size = self.cot_theta_max * self.delta_r_max;
        let n_z = ((self.z_max - self.z_min) / z_bin_size).floor().max(1.0);
        if n_z > 4096.0 {
            return bad(format!("the z axis would have {n_z} bins (at most 4096)"));
        }
        let r_limit = (self.r_max + self.beam_x.hypot(self.beam_y)).min(u32::MAX as f64) as u32;
        // Radius slices of whole millimetres, at most 256 per bin (search structure only).
        let r_slice_width = r_limit.div_ceil(256).max(1);
        let n_r = r_limit.div_ceil(r_slice_width).max(1);
        if n_phi as u64 * n_z as u64 * n_r as u64 > MAX_GRID_KEYS as u64 {
            return bad(format!(
                "grid of {n_phi} x {n_z} bins x {n_r} radius slices exceeds {MAX_GRID_KEYS} keys"
            ));
        }
        Ok(SeedingConfig {
            z_min: self.z_min as f32,
            z_max: self.z_max as f32,
            r_max: self.r_max as f32,
            r_limit,
            beam_x: self.beam_x as f32,
            beam_y: self.beam_y as f32,
            phi_min: self.phi_min as f32,
            phi_max: self.phi_max as f32,
            n_phi,
            n_z: n_z as u32,
            collision_min: self.collision_region_min as f32,
            collision_max: self.collision_region_max as f32,
            cot_theta_max: self.cot_theta_max as f32,
            delta_r_min: self.delta_r_min as f32,
            delta_r_max: self.delta_r_max as f32,
            delta_z_max: self.delta_z_max as f32,
            impact_max: self.impact_max as f32,
            sigma_scattering: self.sigma_scattering as f32,
            max_pt_scattering: self.max_pt_scattering as f32,
            highland: highland as f32,
            max_scattering_angle2: max_scattering_angle2 as f32,
            pt_per_helix_radius: bfield as f32,
            min_helix_diameter2: min_helix_diameter2 as f32,
            min_helix_radius: (min_helix_diameter2.sqrt() / 2.0) as f32,
            pt2_per_radius: pt2_per_radius as f32,
            bfield: bfield as f32,
            delta_inv_helix_diameter: self.delta_inv_helix_diameter as f32,
            impact_weight_factor: self.impact_weight_factor as f32,
            compat_seed_weight: self.compat_seed_weight as f32,
            filter_delta_r_min: self.filter_delta_r_min as f32,
            compat_seed_limit: self.compat_seed_limit,
            good_spb_min_radius: self.good_spb_min_radius as f32,
            good_spb_weight_increase: self.good_spb_weight_increase as f32,
            good_spt_max_radius: self.good_spt_max_radius as f32,
            good_spt_weight_increase: self.good_spt_weight_increase as f32,
            good_spb_min_weight: self.good_spb_min_weight as f32,
            seed_min_weight: self.seed_min_weight as f32,
            spb_min_radius: self.spb_min_radius as f32,
            max_seeds_per_spm: self.max_seeds_per_spm,
            n_r,
            r_slice_width,
        })
    }
}

/// Seeds, their parameters and the stage counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeedingOutput {
    /// Seeds in output order (middles by grid bin then input index, best first).
    pub seeds: Vec<Seed>,
    /// Bound parameters, one per seed.
    pub params: Vec<BoundParams>,
    /// Stage counts.
    pub stats: SeedingStats,
}

/// Checks the event: finite coordinates and variances, fewer than 2^31 spacepoints.
pub fn check_spacepoints(sps: &[SpacePoint]) -> Result<()> {
    check_len(sps)?;
    use rayon::prelude::*;
    // Below 8 pieces one thread is quicker than waking the pool (the pass is vectorised).
    if sps.len() < 8 * CHECK_PIECE {
        return check_piece(sps, 0);
    }
    sps.par_chunks(CHECK_PIECE)
        .enumerate()
        .map(|(p, c)| check_piece(c, p * CHECK_PIECE))
        .find_first(|r| r.is_err())
        .unwrap_or(Ok(()))
}

/// At most 2^31 - 1 spacepoints per event.
fn check_len(sps: &[SpacePoint]) -> Result<()> {
    if sps.len() as u64 >= 1 << 31 {
        return Err(invalid(
            "spacepoints",
            format!("{} spacepoints; at most 2^31 - 1 are supported", sps.len()),
        ));
    }
    Ok(())
}

/// The checks of [`check_spacepoints`] on `sps`, the spacepoints from index `base` on.
fn check_piece(sps: &[SpacePoint], base: usize) -> Result<()> {
    // A branch-free (vectorised) pass first; the first bad spacepoint is looked for only
    // when there is one.
    let bad = sps.iter().fold(false, |b, s| {
        b | !(s.x.is_finite()
            & s.y.is_finite()
            & s.z.is_finite()
            & s.var_r.is_finite()
            & s.var_z.is_finite()
            & (s.var_r >= 0.0)
            & (s.var_z >= 0.0))
    });
    if !bad {
        return Ok(());
    }
    for (i, s) in sps.iter().enumerate() {
        check_one(base + i, s)?;
    }
    Ok(())
}

/// The checks of [`check_spacepoints`] on spacepoint `i`.
pub(crate) fn check_one(i: usize, s: &SpacePoint) -> Result<()> {
    let fields = [
        ("x", s.x, false),
        ("y", s.y, false),
        ("z", s.z, false),
        ("var_r", s.var_r, true),
        ("var_z", s.var_z, true),
    ];
    for (column, v, variance) in fields {
        if !v.is_finite() || (variance && v < 0.0) {
            return Err(Error::InvalidItem {
                what: "spacepoint",
                index: i,
                column,
                detail: if variance {
                    format!("{v} is not a variance (finite, >= 0)")
                } else {
                    format!("{v} is not a finite coordinate")
                },
            });
        }
    }
    Ok(())
}

/// Checks a device configuration built by hand (`SeedingSettings::to_config` output passes).
pub fn check_config(cfg: &SeedingConfig) -> Result<()> {
    if cfg.n_phi == 0
        || cfg.n_z == 0
        || cfg.n_r == 0
        || cfg.r_slice_width == 0
        || cfg.n_phi as u64 * cfg.n_z as u64 * cfg.n_r as u64 > MAX_GRID_KEYS as u64
    {
        return Err(invalid(
            "seeding config",
            format!(
                "grid of {} x {} bins x {} radius slices of {} mm (each >= 1, at most {MAX_GRID_KEYS} keys)",
                cfg.n_phi, cfg.n_z, cfg.n_r, cfg.r_slice_width
            ),
        ));
    }
    if cfg.max_seeds_per_spm == 0 || cfg.max_seeds_per_spm > k::MAX_SEEDS_PER_SPM_CAP {
        return Err(invalid(
            "seeding config",
            format!("max_seeds_per_spm {} not in 1..=16", cfg.max_seeds_per_spm),
        ));
    }
    if cfg.compat_seed_limit > k::COMPAT_SEED_LIMIT_CAP {
        return Err(invalid(
            "seeding config",
            format!("compat_seed_limit {} above 8", cfg.compat_seed_limit),
        ));
    }
    if cfg.delta_r_min.is_nan() || cfg.delta_r_min < 0.0 {
        return Err(invalid(
            "seeding config",
            format!("delta_r_min {} must be >= 0", cfg.delta_r_min),
        ));
    }
    Ok(())
}

/// Spacepoints as the `u32` words the device buffers hold.
pub fn as_words(sps: &[SpacePoint]) -> &[u32] {
    bytemuck::cast_slice(sps)
}

impl Backend {
    /// Seeds of one event (input indices, output order documented in `docs/seeding.md`),
    /// their bound parameters and the stage counts; identical on both backends.
    pub fn seed(&self, sps: &[SpacePoint], cfg: &SeedingConfig) -> Result<SeedingOutput> {
        let mut out = SeedingOutput::default();
        self.seed_into(sps, cfg, &mut out)?;
        Ok(out)
    }

    /// [`Backend::seed`] into `out`, whose vectors are reused (no allocation once they have
    /// grown to the event's seeds).
    pub fn seed_into(
        &self,
        sps: &[SpacePoint],
        cfg: &SeedingConfig,
        out: &mut SeedingOutput,
    ) -> Result<()> {
        let mut v = vec![std::mem::take(out)];
        let r = self.seed_events_into(&[sps], cfg, &mut v);
        if let Some(o) = v.pop() {
            *out = o;
        }
        r
    }

    /// Seeds of many events (each as [`Backend::seed`] gives it, in the same order). On the
    /// GPU the events are processed in flight: whole batches per chain of launches (no host
    /// synchronisation per event), in a workspace reused from call to call.
    pub fn seed_events(
        &self,
        events: &[&[SpacePoint]],
        cfg: &SeedingConfig,
    ) -> Result<Vec<SeedingOutput>> {
        let mut out = Vec::new();
        self.seed_events_into(events, cfg, &mut out)?;
        Ok(out)
    }

    /// [`Backend::seed_events`] into `out` (one output per event: resized to the event
    /// count, the vectors of the outputs already there reused). On CUDA the call runs in the
    /// backend's seeding workspace (device buffers and pinned staging, kept between calls).
    pub fn seed_events_into(
        &self,
        events: &[&[SpacePoint]],
        cfg: &SeedingConfig,
        out: &mut Vec<SeedingOutput>,
    ) -> Result<()> {
        crate::phases::begin();
        check_config(cfg)?;
        // With pinned staging on the GPU one event's spacepoints are checked as they are
        // copied into the upload buffer (`copies::upload_events`: read once, the same error). Many
        // events are checked first, all at once on every core, then copied: one event's
        // pieces are too few to keep the cores busy (see docs/benchmarks.md, "Front door,
        // session 9").
        // A pipelined call checks each part's events as it copies them (in part order, so
        // the error is still the first event's).
        let fused = self.gpu().is_some()
            && self.host_copies() == crate::HostCopies::Pinned
            && (events.len() == 1 || self.pipelines(cuda::Events::Rows(events, false)));
        if !fused {
            check_events(events)?;
        }
        crate::phases::mark(crate::phases::Phase::Validate);
        match self.gpu() {
            None => {
                *out = self.on_cpu(|| par::seed_events(cfg, events));
                Ok(())
            }
            Some(gpu) => {
                if events.is_empty() {
                    out.clear();
                    return Ok(());
                }
                self.seed_on_gpu(
                    gpu,
                    cuda::Events::Rows(events, !fused),
                    cfg,
                    self.host_copies(),
                    out,
                )
            }
        }
    }
}

impl Backend {
    /// Whether a pinned-staging call of `events` on CUDA runs as a pipeline of parts
    /// ([`door::seed_pipelined`]): two events or more, of at least
    /// [`SeedTuning::pipeline_spacepoints`] spacepoints.
    fn pipelines(&self, events: cuda::Events<'_>) -> bool {
        self.gpu().is_some()
            && events.count() >= 2
            && (0..events.count()).map(|e| events.len(e)).sum::<usize>()
                >= self.seed_plan.t.pipeline_spacepoints
    }

    /// Validated events through the seeding workspaces: one, or for a large call (above
    /// [`SeedTuning::split_spacepoints`]) two halves side by side, each on a workspace of
    /// its own: one half's host copies overlap the other's chain.
    fn seed_on_gpu(
        &self,
        gpu: &crate::GpuContext,
        events: cuda::Events<'_>,
        cfg: &SeedingConfig,
        copies: crate::HostCopies,
        out: &mut Vec<SeedingOutput>,
    ) -> Result<()> {
        let run = |ev: cuda::Events<'_>, out: &mut Vec<SeedingOutput>| {
            self.ws.seeding.run(
                gpu,
                || door::SeedWorkspace::new(gpu, &self.seed_plan),
                |w| w.seed_events(ev, cfg, copies, out),
            )
        };
        if copies == crate::HostCopies::Pinned && self.pipelines(events) {
            return door::seed_pipelined(self, gpu, events, cfg, out);
        }
        let total: usize = (0..events.count()).map(|e| events.len(e)).sum();
        if events.count() < 2 || total < self.seed_plan.t.split_spacepoints {
            return run(events, out);
        }
        // Split where the first half holds about half the spacepoints.
        let mut acc = 0;
        let mid = (0..events.count())
            .position(|e| {
                acc += events.len(e);
                2 * acc >= total
            })
            .map_or(1, |e| e + 1)
            .clamp(1, events.count() - 1);
        let (a, b) = events.split_at(mid);
        out.truncate(events.count());
        let mut tail = if out.len() > mid {
            out.split_off(mid)
        } else {
            Vec::new()
        };
        let (ra, rb) = std::thread::scope(|s| {
            let h = s.spawn(|| run(b, &mut tail));
            let ra = run(a, out);
            let rb = h
                .join()
                .unwrap_or_else(|_| Err(invalid("seeding", "a seeding thread panicked")));
            (ra, rb)
        });
        ra?;
        rb?;
        out.append(&mut tail);
        Ok(())
    }
}

/// One event's spacepoints as five borrowed columns (numpy arrays, a columnar file): what
/// [`Backend::seed_columns_into`] takes. With pinned staging, the columns are interleaved
/// straight into the pinned upload buffer (and checked on the way): no intermediate copy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpacePointsRef<'a> {
    /// x (mm).
    pub x: &'a [f32],
    /// y (mm).
    pub y: &'a [f32],
    /// z (mm).
    pub z: &'a [f32],
    /// Variance of r (mm²).
    pub var_r: &'a [f32],
    /// Variance of z (mm²).
    pub var_z: &'a [f32],
}

impl SpacePointsRef<'_> {
    /// Number of spacepoints (of `x`; [`SpacePointsRef::check_lengths`] checks the others).
    pub fn len(&self) -> usize {
        self.x.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }

    /// A typed error unless the five columns have the same length.
    pub fn check_lengths(&self) -> Result<()> {
        let n = self.len();
        let lens = [
            self.y.len(),
            self.z.len(),
            self.var_r.len(),
            self.var_z.len(),
        ];
        if lens.iter().any(|&l| l != n) {
            return Err(invalid(
                "spacepoints",
                format!(
                    "columns of different lengths: x {n}, y {}, z {}, var_r {}, var_z {}",
                    lens[0], lens[1], lens[2], lens[3]
                ),
            ));
        }
        Ok(())
    }

    /// The spacepoints as rows.
    pub fn to_vec(&self) -> Vec<SpacePoint> {
        let mut v = vec![SpacePoint::default(); self.len()];
        self.gather(&mut v, 0);
        v
    }

    fn gather(&self, dst: &mut [SpacePoint], base: usize) {
        for (i, d) in dst.iter_mut().enumerate() {
            let k = base + i;
            *d = SpacePoint {
                x: self.x[k],
                y: self.y[k],
                z: self.z[k],
                var_z: self.var_z[k],
                var_r: self.var_r[k],
            };
        }
    }
}

impl Backend {
    /// [`Backend::seed_events_into`] with every event as five columns ([`SpacePointsRef`]):
    /// on CUDA with pinned staging the columns are interleaved straight into the upload
    /// buffer; otherwise they are converted to rows first. Results and errors are those of
    /// [`Backend::seed_events_into`] on the same spacepoints.
    pub fn seed_columns_into(
        &self,
        events: &[SpacePointsRef<'_>],
        cfg: &SeedingConfig,
        out: &mut Vec<SeedingOutput>,
    ) -> Result<()> {
        crate::phases::begin();
        check_config(cfg)?;
        match self.gpu() {
            Some(gpu) if self.host_copies() == crate::HostCopies::Pinned => {
                for e in events {
                    e.check_lengths()?;
                }
                if events.is_empty() {
                    out.clear();
                    return Ok(());
                }
                self.seed_on_gpu(
                    gpu,
                    cuda::Events::Columns(events),
                    cfg,
                    crate::HostCopies::Pinned,
                    out,
                )
            }
            _ => {
                for e in events {
                    e.check_lengths()?;
                }
                let rows: Vec<Vec<SpacePoint>> = events.iter().map(|e| e.to_vec()).collect();
                let refs: Vec<&[SpacePoint]> = rows.iter().map(|v| v.as_slice()).collect();
                self.seed_events_into(&refs, cfg, out)
            }
        }
    }
}

/// [`check_spacepoints`] of every event, on several threads when there are many
/// spacepoints; the error is the one of the first bad event (as a loop in order gives).
fn check_events(events: &[&[SpacePoint]]) -> Result<()> {
    use rayon::prelude::*;
    let total: usize = events.iter().map(|e| e.len()).sum();
    if total < CHECK_PIECE {
        return events.iter().try_for_each(|e| check_spacepoints(e));
    }
    // Pieces of events of about CHECK_PIECE spacepoints; a large event is one piece, checked
    // by check_spacepoints's own pieces.
    events
        .par_iter()
        .with_min_len((CHECK_PIECE * events.len() / total).max(1))
        .map(|e| check_spacepoints(e))
        .find_first(|r| r.is_err())
        .unwrap_or(Ok(()))
}

/// Spacepoints per piece of the parallel checks.
const CHECK_PIECE: usize = 1 << 13;

#[cfg(test)]
mod door_tests {
    use super::*;

    /// Columns gathered and checked give the rows and the errors of `check_spacepoints`.
    #[test]
    fn gathered_columns_check_as_rows_do() {
        let n = 5 * CHECK_PIECE + 17;
        let rows: Vec<SpacePoint> = (0..n)
            .map(|i| SpacePoint {
                x: i as f32,
                y: -(i as f32),
                z: 0.5 * i as f32,
                var_z: 0.01,
                var_r: 0.02,
            })
            .collect();
        for bad in [
            None,
            Some((3, 0)),
            Some((CHECK_PIECE + 1, 3)),
            Some((n - 1, 4)),
            Some((2 * CHECK_PIECE, 2)),
        ] {
            let mut r = rows.clone();
            if let Some((i, col)) = bad {
                match col {
                    0 => r[i].x = f32::NAN,
                    2 => r[i].z = f32::INFINITY,
                    3 => r[i].var_r = -1.0,
                    _ => r[i].var_z = f32::NAN,
                }
                // A later fault too: the first one is reported.
                r[n - 2].y = f32::NAN;
            }
            let cols: [Vec<f32>; 5] = [
                r.iter().map(|s| s.x).collect(),
                r.iter().map(|s| s.y).collect(),
                r.iter().map(|s| s.z).collect(),
                r.iter().map(|s| s.var_r).collect(),
                r.iter().map(|s| s.var_z).collect(),
            ];
            let c = SpacePointsRef {
                x: &cols[0],
                y: &cols[1],
                z: &cols[2],
                var_r: &cols[3],
                var_z: &cols[4],
            };
            let want = check_spacepoints(&r).map_err(|e| e.to_string());
            assert_eq!(want.is_err(), bad.is_some(), "fault {bad:?} not seen");
            if bad.is_none() {
                assert!(c.to_vec() == r);
            }
        }
        let short = SpacePointsRef {
            x: &[1.0, 2.0],
            y: &[1.0],
            ..Default::default()
        };
        assert!(short.check_lengths().is_err());
    }
}
