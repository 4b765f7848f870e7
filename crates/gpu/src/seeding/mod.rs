//! traccc-style triplet track seeding: spacepoint grid, doublets, triplets, weights, seed
//! selection and track parameter estimation.
//!
//! Source: the traccc CUDA seeding description (`shared/seeds/003_*.txt`) and traccc's
//! helpers (`doublet_finding_helper.hpp`, `triplet_finding_helper.hpp`,
//! `seed_selecting_helper.hpp`, `update_triplet_weights.ipp`, `select_seeds.ipp`,
//! `track_params_estimation_helper.hpp`); exact semantics in `docs/seeding.md`.
//!
//! Every per-candidate decision is a pure function of this module ([`bin_of`],
//! [`doublet_compatible`], [`transform_coordinates`], [`triplet_compatible`],
//! [`updated_weight`], [`seed_weight`], [`single_seed_cut`], [`cut_per_middle_sp`],
//! [`seed_better`], [`estimate_params`]), shared by the kernels and the CPU oracle. The float
//! operations happen in the same order on both sides and the PTX holds no fused
//! multiply-add in them (the host test `seeding_ptx_has_no_fused_multiply_add` checks every
//! `seeding_*` entry of the committed PTX for `fma.` and `.approx`), so the GPU and the CPU
//! take bit-identical decisions.
//!
//! # Data layout (all buffers are `#[repr(C)]` arrays of the types below)
//! A call seeds a batch of `n_events` events (one or more): consecutive runs of one
//! spacepoint array, `ev_off[e]..ev_off[e + 1]`, each with its own range of grid keys.
//! 1. input `SpacePoint[n]` (x, y, z in mm, variances);
//! 2. [`KERNEL_BIN_COUNT`] writes each spacepoint's batch grid key (`e * nkeys + bin * n_r +
//!    radius slice`, or `n_events * nkeys` when invalid), counts the keys (global atomics;
//!    each spacepoint's slot in its key is the atomic's old value, in no set order) and, for
//!    one tile of keys, scans them into `grid_offsets[n_events * nkeys + 2]` in its last
//!    block; [`KERNEL_BIN_PLACE`] groups the spacepoint indices by key. (Fallback for a key of
//!    more than [`BIN_RANK_MAX`]: [`KERNEL_BIN`], the radix sort and the Foundation's
//!    `bucket_offsets_sorted`, stable.) A middle's bottom (top) candidates in one neighbour
//!    bin are one contiguous range of the binned records ([`slice_range`]);
//! 3. [`KERNEL_GATHER_SPACEPOINTS`] writes `BinnedSp[n_valid]` in key order, ascending input
//!    index inside a key (each spacepoint's rank among its key's, by counting; the "binned
//!    index" used below) and their `(r, z)`;
//! 4. [`KERNEL_FIND_DOUBLETS`]: per middle, one pass; space reserved per middle with a 64-bit
//!    atomic on [`SeedingTotals`]; `Doublet` and `LinCircle` arrays (bottoms and tops apart),
//!    each middle's contiguous and in neighbour-bin scan order;
//! 5. [`KERNEL_FIND_TRIPLETS`]: per middle–bottom doublet, one pass, space reserved per
//!    doublet; its `Triplet`s contiguous, in top order (each with its spacepoints' input
//!    indices and radii);
//! 6. weights: one `f32` per triplet; 7. seeds: per middle at most `max_seeds_per_spm` into
//!    fixed slots, counts scanned, gathered into `Seed[n_seeds]` with `BoundParams[n_seeds]`;
//!    8. per event [`EventCounts`].
//!
//! Capacities: the doublet and triplet arrays have a capacity each; a reservation that does
//! not fit is not written, later kernels do nothing when a total exceeds its capacity, and the
//! host, which reads the totals once at the end, repeats the chain with larger arrays.
//!
//! # Worked example (default configuration)
//! Three spacepoints of a straight track from the origin, (34, 0, 10), (70, 0, 20.588),
//! (116, 0, 34.118) mm: phi bin 39 of 78, z bin 0, radius slices 34, 70, 116. The middle (70, 0) has one compatible
//! bottom (dR = 36) and one top (dR = 46); the triplet has `A = B = 0`, curvature 0 and
//! impact 0, so it passes with weight 0 (`-impact`), no weight bonus, `rT < 150` gives +200:
//! one seed `(0, 1, 2, weight 200, z_vertex ≈ 0)` (see the host tests).
//!
//! No block barriers except in [`KERNEL_BIN_COUNT`] (the last block's ticket and scan, see
//! there): every kernel is one thread per item, except the doublet kernel and the
//! selection and gather (one warp per middle: warp-synchronous ballots, shuffles and, in the
//! doublet kernel, `bar.warp.sync` around the warp's own shared-memory stages). Atomics are
//! the 64-bit reservations and the per-event sums (order-independent); positions of doublets
//! and triplets depend on timing, the outputs do not (every read goes through a middle's or a
//! doublet's own range, seeds are gathered per middle in binned order).

use crate::params::DevPtr;

/// Kernel: grid key of every spacepoint of a batch (`n_events * nkeys` when it is not valid);
/// the radix-sort binning (the fallback when a grid key holds more than [`BIN_RANK_MAX`]).
pub const KERNEL_BIN: &str = "seeding_bin_spacepoints";

/// Kernel: grid key of every spacepoint of a batch, its count per key (a global atomic whose
/// old value is the spacepoint's slot in its key, in no particular order) and, when the
/// keys fit one tile of [`BIN_SCAN_TILE`], the grid offsets (the last block to finish scans
/// the counts).
pub const KERNEL_BIN_COUNT: &str = "seeding_bin_count";

/// Kernel: every spacepoint's index into its key's range of the content (grid offset +
/// slot), and the counts cleared for the next call.
pub const KERNEL_BIN_PLACE: &str = "seeding_bin_place";

/// Threads per block of [`KERNEL_BIN_COUNT`] (its last block scans up to [`BIN_SCAN_TILE`]
/// grid counts, [`BIN_SCAN_ITEMS`] per thread).
pub const BIN_COUNT_THREADS: u32 = 1024;

/// Grid counts per thread of the scan in [`KERNEL_BIN_COUNT`].
pub const BIN_SCAN_ITEMS: u32 = 16;

/// Most grid offsets (`n_events * nkeys + 2`) that [`KERNEL_BIN_COUNT`] scans itself; a
/// larger batch scans them with the Foundation's device scan (one more launch).
pub const BIN_SCAN_TILE: u64 = (BIN_COUNT_THREADS * BIN_SCAN_ITEMS) as u64;

/// Largest grid key (spacepoints) whose order [`KERNEL_GATHER_SPACEPOINTS`] restores by
/// counting (each spacepoint compares its index with every other of its key); a key with more
/// sets [`SeedingTotals::unranked`] and the host repeats the chain with the radix-sort binning.
pub const BIN_RANK_MAX: u32 = 512;

/// Dynamic shared memory of [`KERNEL_BIN_COUNT`]: the block scan's 33 words and the flag of
/// the last block.
pub const fn bin_count_smem_bytes() -> usize {
    34 * 4
}
/// Kernel: the five float columns of every event of a batch (caller device arrays, a table
/// of their addresses) interleaved into [`SpacePoint`] records, each checked
/// ([`spacepoint_ok`]); the smallest bad index recorded in a status word.
pub const KERNEL_INTERLEAVE_COLUMNS: &str = "seeding_interleave_columns";
/// Binned spacepoint records in grid order.
pub const KERNEL_GATHER_SPACEPOINTS: &str = "seeding_gather_spacepoints";
/// Kernel: per middle spacepoint, its middle–bottom and middle–top doublets in one pass.
pub const KERNEL_FIND_DOUBLETS: &str = "seeding_find_doublets";
/// Kernel: per middle–bottom doublet, its triplets in one pass (space reserved per doublet).
pub const KERNEL_FIND_TRIPLETS: &str = "seeding_find_triplets";
/// Kernel: per middle spacepoint, the compatible-seed weight update of its triplets, seed
/// filter and best-N selection into fixed slots.
pub const KERNEL_SELECT_SEEDS: &str = "seeding_select_seeds";
/// Kernel: the selected seeds from the slots to their scanned offsets, with their bound
/// track parameters, and per event of a batch its valid spacepoints and seeds.
pub const KERNEL_GATHER_SEEDS: &str = "seeding_gather_seeds";

/// Threads per block of every seeding kernel (one thread per item), except
/// [`KERNEL_SELECT_SEEDS`].
pub const SEEDING_THREADS: u32 = 128;

/// Threads per block of [`KERNEL_SELECT_SEEDS`] (one warp per middle); any multiple of 32.
/// Two warps per block (a block's slot is held until its slowest middle ends) measured the
/// same as four and as one (0.046–0.047 ms at ⟨μ⟩ = 200, achieved occupancy 38.4 → 38.6 %,
/// H200, issue 14 session 6): the occupancy is not lost to blocks waiting on one warp.
pub const SELECT_THREADS: u32 = 64;

/// Blocks per multiprocessor that `seeding_find_doublets` is compiled for (its launch bound,
/// `crate::LAUNCH_BOUNDS`): 8 blocks of `SEEDING_THREADS` leave it 64 registers (9 blocks,
/// 56 registers, were faster before its walk loaded the next step's `(r, z)` ahead, which
/// at 56 registers doubled its spills: 52 → 112 bytes of stores, ptxas sm_90).
pub const DOUBLETS_MIN_BLOCKS: u32 = 8;
/// Tops whose cot θ the triplet kernel's count walk loads at once (then tests in order).
/// 8: the stage 0.0937 → 0.0920 ms at ⟨μ⟩ = 200 and 18.26 → 15.99 ms per batch of 256 events
/// against 4 (H200, issue 14 session 8).
pub const TRIPLET_GROUP: u32 = 8;
/// Largest `max_seeds_per_spm` (size of the per-thread best-N array).
pub const MAX_SEEDS_PER_SPM_CAP: u32 = 16;
/// Largest `compat_seed_limit` (size of the per-thread compatible-radius array).
pub const COMPAT_SEED_LIMIT_CAP: u32 = 8;

/// Everything the cuts read: traccc's `seedfinder_config`, `seedfilter_config` and grid
/// axes, with the derived quantities of `seedfinder_config::setup()` already computed (the
/// host crate builds it from `detkit::seeding::SeedingSettings`). Units: mm, GeV, and the
/// field in GeV/(e·mm) (1 T = 0.000299792458).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingConfig {
    /// z range of valid spacepoints and of the z axis.
    pub z_min: f32,
    /// Upper end of the z range.
    pub z_max: f32,
    /// Radius limit of valid spacepoints.
    pub r_max: f32,
    /// Valid spacepoints have `trunc(r_beam) < r_limit` (traccc's `size_t` comparison).
    pub r_limit: u32,
    /// Beam position x (validity only).
    pub beam_x: f32,
    /// Beam position y (validity only).
    pub beam_y: f32,
    /// Phi range of the phi axis.
    pub phi_min: f32,
    /// Upper end of the phi range.
    pub phi_max: f32,
    /// Number of phi bins (circular axis).
    pub n_phi: u32,
    /// Number of z bins (regular axis).
    pub n_z: u32,
    /// z0 window of doublets.
    pub collision_min: f32,
    /// Upper end of the z0 window.
    pub collision_max: f32,
    /// Largest |cot theta| of a doublet.
    pub cot_theta_max: f32,
    /// Doublet radial distance lower bound (exclusive).
    pub delta_r_min: f32,
    /// Doublet radial distance upper bound (exclusive).
    pub delta_r_max: f32,
    /// Largest |dz| of a doublet.
    pub delta_z_max: f32,
    /// Largest transverse impact parameter.
    pub impact_max: f32,
    /// Number of sigmas of the scattering cut.
    pub sigma_scattering: f32,
    /// pT above which the scattering angle stays fixed.
    pub max_pt_scattering: f32,
    /// Derived: Highland scattering term.
    pub highland: f32,
    /// Derived: `(highland / minPt)^2`.
    pub max_scattering_angle2: f32,
    /// Derived: pT per helix radius (= field).
    pub pt_per_helix_radius: f32,
    /// Derived: `(2 minPt / field)^2`.
    pub min_helix_diameter2: f32,
    /// Derived: `minPt / field`.
    pub min_helix_radius: f32,
    /// Derived: `(highland / field)^2` (traccc's, dimensionally odd, value).
    pub pt2_per_radius: f32,
    /// Field along z, GeV/(e·mm), for parameter estimation.
    pub bfield: f32,
    /// Filter: curvature window of compatible seeds.
    pub delta_inv_helix_diameter: f32,
    /// Filter: weight per mm of impact parameter (negative contribution).
    pub impact_weight_factor: f32,
    /// Filter: weight added per compatible seed.
    pub compat_seed_weight: f32,
    /// Filter: smallest top-radius separation of compatible seeds.
    pub filter_delta_r_min: f32,
    /// Filter: most compatible seeds counted.
    pub compat_seed_limit: u32,
    /// Filter: bottom radius above which a seed is "good".
    pub good_spb_min_radius: f32,
    /// Filter: weight added for a good bottom.
    pub good_spb_weight_increase: f32,
    /// Filter: top radius below which the top weight applies.
    pub good_spt_max_radius: f32,
    /// Filter: weight set (overriding) for a low top.
    pub good_spt_weight_increase: f32,
    /// Filter: smallest weight of a seed with a good bottom.
    pub good_spb_min_weight: f32,
    /// Filter: weight above which a second seed per middle is kept.
    pub seed_min_weight: f32,
    /// Filter: bottom radius above which a second seed per middle is kept.
    pub spb_min_radius: f32,
    /// Most seeds per middle spacepoint (`<= MAX_SEEDS_PER_SPM_CAP`).
    pub max_seeds_per_spm: u32,
    /// Radius slices per grid bin (the search structure, not a cut): see [`r_slice`].
    pub n_r: u32,
    /// Width of a radius slice in whole mm.
    pub r_slice_width: u32,
}
const _: () = assert!(core::mem::size_of::<SeedingConfig>() == 41 * 4);

impl SeedingConfig {
    /// Number of grid bins `n_phi * n_z`.
    pub const fn nbins(&self) -> u32 {
        self.n_phi * self.n_z
    }
    /// Number of grid keys `nbins * n_r` (bin, radius slice); the key of an invalid
    /// spacepoint.
    pub const fn nkeys(&self) -> u32 {
        self.nbins() * self.n_r
    }
}

/// An input spacepoint (global frame, mm; variances in mm²).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SpacePoint {
    /// x
    pub x: f32,
    /// y
    pub y: f32,
    /// z
    pub z: f32,
    /// Variance of z.
    pub var_z: f32,
    /// Variance of r.
    pub var_r: f32,
}
const _: () = assert!(core::mem::size_of::<SpacePoint>() == 20);

/// A valid spacepoint in grid order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BinnedSp {
    /// x
    pub x: f32,
    /// y
    pub y: f32,
    /// z
    pub z: f32,
    /// `sqrt(x² + y²)`
    pub r: f32,
    /// Variance of z.
    pub var_z: f32,
    /// Variance of r.
    pub var_r: f32,
    /// Input index.
    pub index: u32,
    /// Grid bin.
    pub bin: u32,
}
const _: () = assert!(core::mem::size_of::<BinnedSp>() == 32);

/// A middle–bottom or middle–top doublet (binned indices).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Doublet {
    /// The middle spacepoint.
    pub middle: u32,
    /// The bottom or top spacepoint.
    pub other: u32,
}
const _: () = assert!(core::mem::size_of::<Doublet>() == 8);

/// traccc's `lin_circle`: a doublet in the middle spacepoint's conformal frame.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct LinCircle {
    /// cot theta, oriented bottom → top.
    pub cot_theta: f32,
    /// z at r = 0.
    pub zo: f32,
    /// Conformal u.
    pub u: f32,
    /// Conformal v.
    pub v: f32,
    /// Error term.
    pub er: f32,
    /// 1 / transverse distance.
    pub i_delta_r: f32,
}
const _: () = assert!(core::mem::size_of::<LinCircle>() == 24);

/// A triplet, before the weight update, with everything the seed selection reads: the
/// input indices of its spacepoints (the seed's key) and both radii, so that the selection
/// reads no spacepoint record behind the triplet's load. Two 16-byte halves; `curvature` and
/// `r_top` (what the weight update reads of the other triplets of a doublet) are one aligned
/// 8-byte word.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Triplet {
    /// Bottom spacepoint (input index).
    pub bottom: u32,
    /// Middle spacepoint (input index).
    pub middle: u32,
    /// Top spacepoint (input index).
    pub top: u32,
    /// Radius of the bottom spacepoint.
    pub r_bottom: f32,
    /// Signed curvature `B / sqrt(S2)`.
    pub curvature: f32,
    /// Radius of the top spacepoint.
    pub r_top: f32,
    /// `-impact * impact_weight_factor`.
    pub weight: f32,
    /// z at the beam line (`lb.zo`).
    pub z_vertex: f32,
}
const _: () = assert!(core::mem::size_of::<Triplet>() == 32);

/// A seed: input indices of its three spacepoints, weight and z vertex. The output format.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Seed {
    /// Bottom spacepoint (input index).
    pub bottom: u32,
    /// Middle spacepoint (input index).
    pub middle: u32,
    /// Top spacepoint (input index).
    pub top: u32,
    /// Final weight.
    pub weight: f32,
    /// z of the vertex.
    pub z_vertex: f32,
}
const _: () = assert!(core::mem::size_of::<Seed>() == 20);

/// Seeds compare equal when indices match and the floats have the same bits (or both NaN).
impl PartialEq for Seed {
    fn eq(&self, o: &Self) -> bool {
        self.bottom == o.bottom
            && self.middle == o.middle
            && self.top == o.top
            && same_f32(self.weight, o.weight)
            && same_f32(self.z_vertex, o.z_vertex)
    }
}

/// Bit equality of floats, with every NaN equal to every NaN (NaN payloads differ between
/// the GPU and the CPU).
pub fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Bound track parameters at the bottom spacepoint, on the cylinder through it
/// (`loc0 = r·phi_pos`, `loc1 = z`), as traccc's `seed_to_bound_param_vector` computes them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BoundParams {
    /// `rB * atan2(yB, xB)` (mm).
    pub loc0: f32,
    /// `zB` (mm).
    pub loc1: f32,
    /// Direction phi.
    pub phi: f32,
    /// Direction theta.
    pub theta: f32,
    /// Charge over momentum (1/GeV).
    pub qop: f32,
}
const _: () = assert!(core::mem::size_of::<BoundParams>() == 20);

impl PartialEq for BoundParams {
    fn eq(&self, o: &Self) -> bool {
        same_f32(self.loc0, o.loc0)
            && same_f32(self.loc1, o.loc1)
            && same_f32(self.phi, o.phi)
            && same_f32(self.theta, o.theta)
            && same_f32(self.qop, o.qop)
    }
}

// ---------------------------------------------------------------------------------------
// Float helpers, written with basic operations only so that host and device agree bit
// for bit (the device has no libm; `sqrt` is IEEE-exact on both).
// ---------------------------------------------------------------------------------------

/// IEEE square root (`sqrt.rn.f32` on the device, `sqrtss` on x86).
#[inline(always)]
pub fn sqrt(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return core::f32::math::sqrt(x);
    #[cfg(not(target_arch = "nvptx64"))]
    return std::primitive::f32::sqrt(x);
}

/// π as f32.
pub const PI: f32 = core::f32::consts::PI;

/// `atan(t)` for `t >= 0` (Cephes `atanf` reduction and polynomial, about 1e-7 relative).
#[inline(always)]
fn atan_pos(t: f32) -> f32 {
    let (base, x) = if t > 2.414_213_5 {
        (core::f32::consts::FRAC_PI_2, -1.0 / t)
    } else if t > 0.414_213_57 {
        (core::f32::consts::FRAC_PI_4, (t - 1.0) / (t + 1.0))
    } else {
        (0.0, t)
    };
    let z = x * x;
    let p =
        (((8.053_744_5e-2 * z - 1.387_768_5e-1) * z + 1.997_771_1e-1) * z - 3.333_295e-1) * z * x;
    base + (p + x)
}

/// `atan2(y, x)` in `[-π, π]`, same result on host and device (not libm's: within about
/// 2e-7 rad of it). `atan2(0, 0) = 0`.
#[inline(always)]
pub fn atan2(y: f32, x: f32) -> f32 {
    let ax = x.abs();
    let ay = y.abs();
    if ax == 0.0 && ay == 0.0 {
        return if x.is_sign_negative() {
            if y.is_sign_negative() {
                -PI
            } else {
                PI
            }
        } else {
            y
        };
    }
    let mut a = if ay > ax {
        core::f32::consts::FRAC_PI_2 - atan_pos(ax / ay)
    } else {
        atan_pos(ay / ax)
    };
    if x < 0.0 {
        a = PI - a;
    }
    if y.is_sign_negative() {
        -a
    } else {
        a
    }
}

/// `asin(x)` for `|x| <= 1` via [`atan2`].
#[inline(always)]
pub fn asin(x: f32) -> f32 {
    atan2(x, sqrt((1.0 - x) * (1.0 + x)))
}

// ---------------------------------------------------------------------------------------
// Grid
// ---------------------------------------------------------------------------------------

/// traccc's axis `bin(v) = int((v - min) / (max - min) * n)` (truncation toward zero).
#[inline(always)]
pub fn axis_raw_bin(v: f32, min: f32, max: f32, n: u32) -> i32 {
    ((v - min) / (max - min) * n as f32) as i32
}

/// Grid bin `phi_bin + n_phi * z_bin` of a spacepoint, or `cfg.nbins()` when it is not
/// valid (`is_valid_sp`: `z_min <= z <= z_max`, `phi_min <= phi <= phi_max`,
/// `trunc(r about the beam) < r_limit`). Phi wraps (circular axis), z clamps.
#[inline(always)]
pub fn bin_of(cfg: &SeedingConfig, x: f32, y: f32, z: f32) -> u32 {
    let phi = atan2(y, x);
    let bx = x - cfg.beam_x;
    let by = y - cfg.beam_y;
    let rb = sqrt(bx * bx + by * by);
    let valid = z >= cfg.z_min
        && z <= cfg.z_max
        && phi >= cfg.phi_min
        && phi <= cfg.phi_max
        && (rb as u32) < cfg.r_limit;
    if !valid {
        return cfg.nbins();
    }
    let n_phi = cfg.n_phi as i32;
    let mut pb = axis_raw_bin(phi, cfg.phi_min, cfg.phi_max, cfg.n_phi);
    if pb < 0 {
        pb += n_phi;
    } else if pb >= n_phi {
        pb -= n_phi;
    }
    // A value far outside would still be out after one wrap; clamp to stay in the grid.
    let pb = clamp_bin(pb, cfg.n_phi);
    let zb = clamp_bin(axis_raw_bin(z, cfg.z_min, cfg.z_max, cfg.n_z), cfg.n_z);
    pb + cfg.n_phi * zb
}

/// `v` clamped to `[0, n - 1]` (0 when `n == 0`; the host rejects such a grid).
#[inline(always)]
fn clamp_bin(v: i32, n: u32) -> u32 {
    if v <= 0 {
        0
    } else if v as u32 >= n {
        n.saturating_sub(1)
    } else {
        v as u32
    }
}

/// Radius slice of a radius: `min(trunc(r) / r_slice_width, n_r - 1)`. Inside a grid bin
/// spacepoints are ordered by slice, so the candidates of a radial window are one
/// contiguous range per bin.
#[inline(always)]
pub fn r_slice(cfg: &SeedingConfig, r: f32) -> u32 {
    // Width 1 mm (traccc's r_max 200 mm gives 1) without the integer division, which the
    // GPU computes in about twenty instructions (the doublet kernel needs four per middle).
    let s = if cfg.r_slice_width <= 1 {
        r as u32
    } else {
        (r as u32) / cfg.r_slice_width
    };
    if s >= cfg.n_r {
        cfg.n_r.saturating_sub(1)
    } else {
        s
    }
}

/// Grid key `bin * n_r + r_slice(r)` of a spacepoint, or `cfg.nkeys()` when it is not
/// valid (see [`bin_of`]). `r = sqrt(x² + y²)` as in [`binned`].
#[inline(always)]
pub fn grid_key(cfg: &SeedingConfig, x: f32, y: f32, z: f32) -> u32 {
    let b = bin_of(cfg, x, y, z);
    if b >= cfg.nbins() {
        return cfg.nkeys();
    }
    b * cfg.n_r + r_slice(cfg, sqrt(x * x + y * y))
}

/// The radius slices `[first, end)` that hold every spacepoint whose radius `r` can satisfy
/// `lo < r < hi` as the doublet cuts compute it (one slice of margin on each side, so f32
/// rounding of `rM ± dR` cannot lose a candidate; the cuts themselves are applied exactly to
/// every candidate of the range).
#[inline(always)]
pub fn slice_range(cfg: &SeedingConfig, lo: f32, hi: f32) -> (u32, u32) {
    if hi.is_nan() || hi < 0.0 || cfg.n_r == 0 {
        return (0, 0);
    }
    let first = r_slice(cfg, lo).saturating_sub(1);
    let last = r_slice(cfg, hi) + 2;
    (first, if last > cfg.n_r { cfg.n_r } else { last })
}

/// Radial windows `(lo, hi)` of bottoms and tops of a middle at radius `r`.
#[inline(always)]
pub fn radial_windows(cfg: &SeedingConfig, r: f32) -> [(f32, f32); 2] {
    [
        (r - cfg.delta_r_max, r - cfg.delta_r_min),
        (r + cfg.delta_r_min, r + cfg.delta_r_max),
    ]
}

/// The binned record of input spacepoint `index` in grid bin `bin`.
#[inline(always)]
pub fn binned(sp: &SpacePoint, index: u32, bin: u32) -> BinnedSp {
    BinnedSp {
        x: sp.x,
        y: sp.y,
        z: sp.z,
        r: sqrt(sp.x * sp.x + sp.y * sp.y),
        var_z: sp.var_z,
        var_r: sp.var_r,
        index,
        bin,
    }
}

/// Neighbour bins of a middle spacepoint's bin, in scan order: z bins `zb-1..=zb+1`
/// (clamped), and for each, phi bins `pb-1, pb, pb+1` (wrapped). When `n_phi < 3` each phi
/// bin is visited once (traccc would visit one twice). At most 9.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neighbours {
    /// The bins; the first `len` are valid.
    pub bins: [u32; 9],
    /// How many.
    pub len: u32,
}

/// See [`Neighbours`].
#[inline(always)]
pub fn neighbour_bins(cfg: &SeedingConfig, bin: u32) -> Neighbours {
    // An empty axis (rejected by the host) is treated as one bin, so no division by zero.
    let n_phi = if cfg.n_phi == 0 { 1 } else { cfg.n_phi };
    let n_z = if cfg.n_z == 0 { 1 } else { cfg.n_z };
    let pb = bin % n_phi;
    let zb = bin / n_phi;
    let z_lo = if zb == 0 { 0 } else { zb - 1 };
    let z_hi = if zb + 1 >= n_z { n_z - 1 } else { zb + 1 };
    let mut out = Neighbours {
        bins: [0; 9],
        len: 0,
    };
    let mut z = z_lo;
    while z <= z_hi {
        if n_phi < 3 {
            let mut p = 0;
            while p < n_phi {
                out.bins[(out.len % 9) as usize] = p + n_phi * z;
                out.len += 1;
                p += 1;
            }
        } else {
            let mut k = 0;
            while k < 3 {
                let p = (pb + n_phi - 1 + k) % n_phi;
                out.bins[(out.len % 9) as usize] = p + n_phi * z;
                out.len += 1;
                k += 1;
            }
        }
        z += 1;
    }
    out
}

/// `(neighbour_bins(cfg, bin).len, neighbour_bins(cfg, bin).bins[j])` for `j <
/// len`, computed without the array (the doublet kernel's lanes each need one bin; indexing
/// the array by lane put it in local memory). For `j >= len` the bin is meaningless.
#[inline(always)]
pub fn neighbour_bin(cfg: &SeedingConfig, bin: u32, j: u32) -> (u32, u32) {
    let n_phi = if cfg.n_phi == 0 { 1 } else { cfg.n_phi };
    let n_z = if cfg.n_z == 0 { 1 } else { cfg.n_z };
    let pb = bin % n_phi;
    let zb = bin / n_phi;
    let z_lo = if zb == 0 { 0 } else { zb - 1 };
    let z_hi = if zb + 1 >= n_z { n_z - 1 } else { zb + 1 };
    // Three phi bins per z bin (a division by the constant 3, a multiplication on the GPU),
    // or every phi bin once when there are fewer than three.
    let (len, z, p) = if n_phi < 3 {
        ((z_hi - z_lo + 1) * n_phi, z_lo + j / n_phi, j % n_phi)
    } else {
        let k = j % 3;
        let p = pb + k;
        // (pb + n_phi - 1 + k) % n_phi with pb < n_phi, k < 3: one conditional subtraction
        // or addition.
        let p = if p == 0 {
            n_phi - 1
        } else if p > n_phi {
            p - 1 - n_phi
        } else {
            p - 1
        };
        ((z_hi - z_lo + 1) * 3, z_lo + j / 3, p)
    };
    (len, p + n_phi * z)
}

// ---------------------------------------------------------------------------------------
// Doublets
// ---------------------------------------------------------------------------------------

/// traccc's `doublet_finding_helper::isCompatible`: may `o` be the bottom (`bottom = true`)
/// or the top of middle `m`? Radial distance in the open interval `(delta_r_min,
/// delta_r_max)`, `|dz| < cot_theta_max·dR`, z0 in the open collision region,
/// `|dz| < delta_z_max` ([`doublet_rz_compatible`], from the radii and z only), and the
/// helix-circle cut ([`doublet_helix_compatible`]; NaN from `dx = 0` or `dy = 0` passes it).
#[inline(always)]
pub fn doublet_compatible(cfg: &SeedingConfig, m: &BinnedSp, o: &BinnedSp, bottom: bool) -> bool {
    doublet_rz_compatible(cfg, m, o.r, o.z, bottom) && doublet_helix_compatible(cfg, m, o)
}

/// The cuts of [`doublet_compatible`] that read only the radius `o_r` and `o_z` of the
/// other spacepoint (the kernels test them first, from a compact `(r, z)` array).
#[inline(always)]
pub fn doublet_rz_compatible(
    cfg: &SeedingConfig,
    m: &BinnedSp,
    o_r: f32,
    o_z: f32,
    bottom: bool,
) -> bool {
    let (delta_r, cot_theta) = if bottom {
        (m.r - o_r, m.z - o_z)
    } else {
        (o_r - m.r, o_z - m.z)
    };
    let z_origin = m.z * delta_r - m.r * cot_theta;
    // `|`, not `||`: the same value (no operand has an effect), evaluated without a branch
    // per cut, so the doublet kernel's candidate loop runs straight through.
    !((delta_r >= cfg.delta_r_max)
        | (delta_r <= cfg.delta_r_min)
        | (cot_theta.abs() >= cfg.cot_theta_max * delta_r)
        | (z_origin <= cfg.collision_min * delta_r)
        | (z_origin >= cfg.collision_max * delta_r)
        | (cot_theta.abs() >= cfg.delta_z_max))
}

/// The helix-circle cut of [`doublet_compatible`] (reads x and y).
#[inline(always)]
pub fn doublet_helix_compatible(cfg: &SeedingConfig, m: &BinnedSp, o: &BinnedSp) -> bool {
    let mid_x = 0.5 * (m.x + o.x);
    let mid_y = 0.5 * (m.y + o.y);
    let slope = (o.y - m.y) / (o.x - m.x);
    let dx = o.x - m.x;
    let dy = o.y - m.y;
    let dxy2 = dx * dx + dy * dy;
    let sagitta = sqrt(cfg.min_helix_radius * cfg.min_helix_radius - dxy2 / 4.0);
    let denom = sqrt((slope * slope + 1.0) / (slope * slope));
    let cos_a = 1.0 / denom;
    let sin_a = -1.0 / (slope * denom);
    let mdx = sagitta * cos_a;
    let mdy = sagitta * sin_a;
    let mp1x = mid_x + mdx;
    let mp2x = mid_x - mdx;
    let mp1y = mid_y + mdy;
    let mp2y = mid_y - mdy;
    let r1 = mp1x * mp1x + mp1y * mp1y;
    let r2 = mp2x * mp2x + mp2y * mp2y;
    let lim = (cfg.min_helix_radius - cfg.impact_max) * (cfg.min_helix_radius - cfg.impact_max);
    // std::min(a, b) = (b < a) ? b : a
    let min = if r2 < r1 { r2 } else { r1 };
    // NaN (dx = 0 or dy = 0) compares false: the pair is not rejected, as in traccc.
    let rejected = min <= lim;
    !rejected
}

/// traccc's `transform_coordinates`: the doublet `(m, o)` in `m`'s conformal frame.
#[inline(always)]
pub fn transform_coordinates(m: &BinnedSp, o: &BinnedSp, bottom: bool) -> LinCircle {
    let cos_phi = m.x / m.r;
    let sin_phi = m.y / m.r;
    let dx = o.x - m.x;
    let dy = o.y - m.y;
    let dz = o.z - m.z;
    let x = dx * cos_phi + dy * sin_phi;
    let y = dy * cos_phi - dx * sin_phi;
    let i_delta_r2 = 1.0 / (dx * dx + dy * dy);
    let i_delta_r = sqrt(i_delta_r2);
    let mut cot_theta = dz * i_delta_r;
    if bottom {
        cot_theta = -cot_theta;
    }
    LinCircle {
        cot_theta,
        zo: m.z - m.r * cot_theta,
        u: x * i_delta_r2,
        v: y * i_delta_r2,
        er: ((m.var_z + o.var_z) + (cot_theta * cot_theta) * (m.var_r + o.var_r)) * i_delta_r2,
        i_delta_r,
    }
}

// ---------------------------------------------------------------------------------------
// Triplets
// ---------------------------------------------------------------------------------------

/// Per middle–bottom doublet: `(iSinTheta2, scatteringInRegion2)`.
#[inline(always)]
pub fn bottom_scattering(cfg: &SeedingConfig, lb: &LinCircle) -> (f32, f32) {
    let i_sin_theta2 = 1.0 + lb.cot_theta * lb.cot_theta;
    let scat =
        cfg.max_scattering_angle2 * i_sin_theta2 * cfg.sigma_scattering * cfg.sigma_scattering;
    (i_sin_theta2, scat)
}

/// The threshold [`triplet_surely_rejected`] compares with, from a doublet's
/// `scatteringInRegion2` `s`: `s` itself when `s >= 1e-30`, `1e-30` below (so that the
/// values compared stay normal floats), `+inf` for NaN (no pair is then surely rejected: the
/// exact cut rejects nothing, `NaN > x` being false).
#[inline(always)]
pub fn triplet_reject_threshold(s: f32) -> f32 {
    if s >= 1e-30 {
        s
    } else if s.is_nan() {
        f32::INFINITY
    } else {
        1e-30
    }
}

/// A sufficient condition, without a square root, for [`triplet_compatible`]'s first cut
/// (`d = Δcot² + error² - 2 |Δcot| sqrt(error²) > scatteringInRegion2`) to reject the pair:
/// `0 <= error² <= Δcot² / 4`, `Δcot²` finite and `0.2499 Δcot² > threshold`
/// ([`triplet_reject_threshold`]). Proof (u = 2⁻²⁴, every operation rounded to nearest):
/// with `e2 = error²`, `D = fl(Δcot²)` and `s = sqrt(e2) <= sqrt(D) / 2`, the first cut's
/// `A = fl(D + e2) >= (D + e2)(1 - u)` and `P = fl(2 |Δcot| fl(sqrt(e2))) <= 2 sqrt(D) s (1 +
/// 2.6 u)`, so `A - P >= (sqrt(D) - s)² - u (D + s² + 5.2 sqrt(D) s) >= D (1/4 - 3.85 u)`
/// and `d = fl(A - P) >= D (1/4 - 4.2 u) > 0.2499 D (1 + u) >= fl(0.2499 D) > threshold >=
/// scatteringInRegion2` (all values normal: `D > 4e-30`, `s = 0` or `s >= 2^-74.5`). The
/// cut's precondition `fl(D - e2) > 0` holds since `D - e2 >= 3 D / 4 > 0`. At ⟨μ⟩ = 200 it
/// holds for 97.3 % of the 22.6 million pairs (all lanes of 54 % of the triplet kernel's warp
/// steps; counted on the CPU); the first cut rejects 98.6 %.
#[inline(always)]
pub fn triplet_surely_rejected(
    m: &BinnedSp,
    lb: &LinCircle,
    lt: &LinCircle,
    threshold: f32,
) -> bool {
    // The same expressions as `triplet_compatible` (bit-identical values).
    let error2 = lt.er
        + lb.er
        + 2.0 * (lb.cot_theta * lt.cot_theta * m.var_r + m.var_z) * lb.i_delta_r * lt.i_delta_r;
    let delta_cot = lb.cot_theta - lt.cot_theta;
    let delta_cot2 = delta_cot * delta_cot;
    error2 >= 0.0
        && 4.0 * error2 <= delta_cot2
        && delta_cot2 <= f32::MAX
        && delta_cot2 * 0.2499 > threshold
}

/// Bounds over the middle–top doublets of one middle, for [`triplet_reject_bound`]: the
/// largest `er`, `i_delta_r` and `|cot_theta|`, and the smallest `er` or `i_delta_r`. Written by the
/// doublet kernel with the tops ([`TopBounds::with_top`], NaN-sticky: one NaN field of one top
/// makes the bound NaN, and the doublets of that middle then take the exact test).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TopBounds {
    /// Largest `er` of the middle's tops.
    pub max_er: f32,
    /// Largest `i_delta_r`.
    pub max_i_delta_r: f32,
    /// Largest `|cot_theta|`.
    pub max_abs_cot: f32,
    /// Smallest `er` or `i_delta_r` (both bounds need them non-negative).
    pub min_er_idr: f32,
}
const _: () = assert!(core::mem::size_of::<TopBounds>() == 16);

/// `x` when it is larger than `m` or NaN, else `m` (a NaN, once in, stays).
#[inline(always)]
pub fn max_nan(m: f32, x: f32) -> f32 {
    if x > m || x.is_nan() {
        x
    } else {
        m
    }
}

/// `x` when it is smaller than `m` or NaN, else `m` (a NaN, once in, stays).
#[inline(always)]
pub fn min_nan(m: f32, x: f32) -> f32 {
    if x < m || x.is_nan() {
        x
    } else {
        m
    }
}

impl TopBounds {
    /// The bounds of no top (the identity of [`TopBounds::join`]).
    pub const EMPTY: Self = Self {
        max_er: 0.0,
        max_i_delta_r: 0.0,
        max_abs_cot: 0.0,
        min_er_idr: f32::INFINITY,
    };

    /// The bounds with one more top.
    #[inline(always)]
    pub fn with_top(self, lt: &LinCircle) -> Self {
        Self {
            max_er: max_nan(self.max_er, lt.er),
            max_i_delta_r: max_nan(self.max_i_delta_r, lt.i_delta_r),
            max_abs_cot: max_nan(self.max_abs_cot, lt.cot_theta.abs()),
            min_er_idr: min_nan(min_nan(self.min_er_idr, lt.er), lt.i_delta_r),
        }
    }

    /// The bounds of two sets of tops.
    #[inline(always)]
    pub fn join(self, o: &Self) -> Self {
        Self {
            max_er: max_nan(self.max_er, o.max_er),
            max_i_delta_r: max_nan(self.max_i_delta_r, o.max_i_delta_r),
            max_abs_cot: max_nan(self.max_abs_cot, o.max_abs_cot),
            min_er_idr: min_nan(self.min_er_idr, o.min_er_idr),
        }
    }
}

/// Per middle–bottom doublet `lb` of middle `m`, from the bounds `tb` of the middle's tops:
/// `c1 = 4 e_hi`, where `e_hi` bounds from above the `error2` that [`triplet_compatible`]
/// computes for every top of the middle, or `+inf` when the bounds do not prove both
/// `0 <= error2 <= e_hi` (a NaN or an infinity anywhere, a negative variance). Then
/// [`triplet_bound_rejects`] decides most pairs from `lt.cot_theta` alone.
///
/// Proof. Rounding to nearest is monotone (`x <= y` implies `fl(x) <= fl(y)`), and the
/// kernels compute every operation separately (no `fma`). `error2 = fl(A + B)` with
/// `A = fl(lt.er + lb.er)`, `B = fl(v lt.i_delta_r)`, `v = fl(fl(2 X) lb.i_delta_r)`,
/// `X = fl(fl(q m.var_r) + m.var_z)`, `q = fl(lb.cot lt.cot)`. With `p = fl(|lb.cot|
/// max|cot|)`: `-p <= q <= p` (rounding is symmetric), so with `var_r >= 0` and
/// `lb.i_delta_r >= 0` (both checked below through `v_hi >= 0` and the finite values)
/// `v_lo <= v <= v_hi`, where `v_lo`, `v_hi` are `v` computed from `-p` and `p`. Every
/// top has `0 <= min_er_idr <= lt.er <= max_er` and `0 <= min_er_idr <= lt.i_delta_r <=
/// max_i_delta_r` (none NaN: the bounds are NaN-sticky). With `v_hi >= 0`: `B <= fl(v_hi max_i_delta_r)`,
/// so `error2 <= e_hi = fl(fl(max_er + lb.er) + fl(v_hi max_i_delta_r))`. From below,
/// `B >= fl(v_lo max_i_delta_r)` when `v_lo < 0`, else `B >= 0`, and `A >= fl(min_er_idr +
/// lb.er)`, so `error2 >= e_lo >= 0` when the computed `e_lo >= 0`. `c1 = fl(4 e_hi) = 4 e_hi`
/// when finite (a power of two), so `4 error2 <= c1` exactly. A host test checks the bound on
/// random middles and the edge cases.
#[inline(always)]
pub fn triplet_reject_bound(m: &BinnedSp, lb: &LinCircle, tb: &TopBounds) -> f32 {
    let p = lb.cot_theta.abs() * tb.max_abs_cot;
    let x_hi = p * m.var_r + m.var_z;
    let x_lo = -p * m.var_r + m.var_z;
    let v_hi = 2.0 * x_hi * lb.i_delta_r;
    let v_lo = 2.0 * x_lo * lb.i_delta_r;
    let e_hi = (tb.max_er + lb.er) + v_hi * tb.max_i_delta_r;
    let b_lo = if v_lo < 0.0 {
        v_lo * tb.max_i_delta_r
    } else {
        0.0
    };
    let e_lo = (tb.min_er_idr + lb.er) + b_lo;
    let c1 = 4.0 * e_hi;
    // Every comparison is false for NaN; `c1 <= f32::MAX` also excludes an infinite e_hi.
    let ok = c1 <= f32::MAX
        && e_lo >= 0.0
        && v_hi >= 0.0
        && v_lo <= v_hi
        && m.var_r >= 0.0
        && tb.min_er_idr >= 0.0
        && lb.i_delta_r >= 0.0
        && tb.max_i_delta_r <= f32::MAX
        && tb.max_abs_cot <= f32::MAX;
    if ok {
        c1
    } else {
        f32::INFINITY
    }
}

/// The pair `(lb, lt)` is rejected by [`triplet_compatible`]'s first cut, decided from
/// `lt.cot_theta` and the doublet's `c1` ([`triplet_reject_bound`]) and `threshold`
/// ([`triplet_reject_threshold`]): `c1 <= Δcot²` gives `0 <= error2 <= Δcot²/4`, so the
/// conditions of [`triplet_surely_rejected`] hold (the same `Δcot²`, the same last two
/// tests).
#[inline(always)]
pub fn triplet_bound_rejects(c1: f32, lb_cot: f32, lt_cot: f32, threshold: f32) -> bool {
    let delta_cot = lb_cot - lt_cot;
    let delta_cot2 = delta_cot * delta_cot;
    c1 <= delta_cot2 && delta_cot2 <= f32::MAX && delta_cot2 * 0.2499 > threshold
}

/// traccc's `triplet_finding_helper::isCompatible`: `Some((curvature, impact))` when the
/// middle–bottom doublet `lb` and middle–top doublet `lt` of middle `m` form a triplet.
#[inline(always)]
pub fn triplet_compatible(
    cfg: &SeedingConfig,
    m: &BinnedSp,
    lb: &LinCircle,
    lt: &LinCircle,
    i_sin_theta2: f32,
    scattering_in_region2: f32,
) -> Option<(f32, f32)> {
    let error2 = lt.er
        + lb.er
        + 2.0 * (lb.cot_theta * lt.cot_theta * m.var_r + m.var_z) * lb.i_delta_r * lt.i_delta_r;
    let mut delta_cot = lb.cot_theta - lt.cot_theta;
    let delta_cot2 = delta_cot * delta_cot;
    let mut d_cot_minus_err2 = 0.0;
    if delta_cot2 - error2 > 0.0 {
        delta_cot = delta_cot.abs();
        let error = sqrt(error2);
        d_cot_minus_err2 = delta_cot2 + error2 - 2.0 * delta_cot * error;
        if d_cot_minus_err2 > scattering_in_region2 {
            return None;
        }
    }
    let du = lt.u - lb.u;
    if du == 0.0 {
        return None;
    }
    let a = (lt.v - lb.v) / du;
    let s2 = 1.0 + a * a;
    let b = lb.v - a * lb.u;
    let b2 = b * b;
    if s2 < b2 * cfg.min_helix_diameter2 {
        return None;
    }
    let i_helix_diameter2 = b2 / s2;
    let mut pt2scatter = 4.0 * i_helix_diameter2 * cfg.pt2_per_radius;
    let pt = cfg.pt_per_helix_radius * sqrt(s2 / b2) / 2.0;
    if pt > cfg.max_pt_scattering {
        let pt_scatter = cfg.highland / cfg.max_pt_scattering;
        pt2scatter = pt_scatter * pt_scatter;
    }
    let p2scatter = pt2scatter * i_sin_theta2;
    if delta_cot2 - error2 > 0.0
        && d_cot_minus_err2 > p2scatter * cfg.sigma_scattering * cfg.sigma_scattering
    {
        return None;
    }
    let curvature = b / sqrt(s2);
    let impact = ((a - b * m.r) * m.r).abs();
    if impact > cfg.impact_max {
        return None;
    }
    Some((curvature, impact))
}

/// The triplet's initial weight `-impact * impact_weight_factor`.
#[inline(always)]
pub fn impact_weight(cfg: &SeedingConfig, impact: f32) -> f32 {
    -impact * cfg.impact_weight_factor
}

/// The owner of position `pos` of a flattened list of 32 runs (the selection's triplets of
/// 32 bottoms, each bottom's triplets one run): the first lane `j` with `incl(j) > pos`, where
/// `incl(j)` is the inclusive sum of the run lengths of lanes `0..=j` (non-decreasing). Five
/// steps of a binary search, each one `incl` (a warp shuffle in the kernel, so every lane
/// takes all five steps); 31 when `pos >= incl(31)`.
#[inline(always)]
pub fn flat_owner(pos: u32, incl: impl Fn(u32) -> u32) -> u32 {
    let mut b = 0u32;
    let mut step = 16u32;
    while step > 0 {
        if incl(b + step - 1) <= pos {
            b += step;
        }
        step /= 2;
    }
    b
}

/// traccc's `update_triplet_weights` for triplet `this` of a group of `len` triplets that
/// share its middle–bottom doublet; `get(k)` returns `(curvature, r_top)` of the group's
/// `k`-th triplet. Walks the others in group order; returns the updated weight.
#[inline(always)]
pub fn updated_weight(
    cfg: &SeedingConfig,
    this: u32,
    len: u32,
    weight: f32,
    get: impl Fn(u32) -> (f32, f32),
) -> f32 {
    let (curv, r_top) = get(this);
    let lower = curv - cfg.delta_inv_helix_diameter;
    let upper = curv + cfg.delta_inv_helix_diameter;
    let mut radii = [0.0f32; COMPAT_SEED_LIMIT_CAP as usize];
    let mut num = 0u32;
    let mut w = weight;
    if cfg.compat_seed_limit == 0 {
        return w;
    }
    let mut k = 0;
    while k < len {
        if k != this {
            let (oc, or) = get(k);
            let keep = (r_top - or).abs() >= cfg.filter_delta_r_min && oc >= lower && oc <= upper;
            if keep {
                let mut new = true;
                let mut s = 0;
                while s < num {
                    if (radii[(s % COMPAT_SEED_LIMIT_CAP) as usize] - or).abs()
                        < cfg.filter_delta_r_min
                    {
                        new = false;
                        break;
                    }
                    s += 1;
                }
                if new {
                    radii[(num % COMPAT_SEED_LIMIT_CAP) as usize] = or;
                    w += cfg.compat_seed_weight;
                    num += 1;
                }
                if num >= cfg.compat_seed_limit {
                    break;
                }
            }
        }
        k += 1;
    }
    w
}

// ---------------------------------------------------------------------------------------
// Seed selection
// ---------------------------------------------------------------------------------------

/// traccc's `seed_weight`: `+good_spb_weight_increase` when `rB > good_spb_min_radius`,
/// overridden by `+good_spt_weight_increase` when `rT < good_spt_max_radius`.
#[inline(always)]
pub fn seed_weight(cfg: &SeedingConfig, weight: f32, r_bottom: f32, r_top: f32) -> f32 {
    let mut add = 0.0;
    if r_bottom > cfg.good_spb_min_radius {
        add = cfg.good_spb_weight_increase;
    }
    if r_top < cfg.good_spt_max_radius {
        add = cfg.good_spt_weight_increase;
    }
    weight + add
}

/// traccc's `single_seed_cut`: keep unless `rB > good_spb_min_radius` and
/// `weight < good_spb_min_weight`.
#[inline(always)]
pub fn single_seed_cut(cfg: &SeedingConfig, weight: f32, r_bottom: f32) -> bool {
    !(r_bottom > cfg.good_spb_min_radius && weight < cfg.good_spb_min_weight)
}

/// traccc's `cut_per_middle_sp` (seeds after the best of a middle spacepoint).
#[inline(always)]
pub fn cut_per_middle_sp(cfg: &SeedingConfig, weight: f32, r_bottom: f32) -> bool {
    weight > cfg.seed_min_weight || r_bottom > cfg.spb_min_radius
}

/// A seed candidate of one middle spacepoint during selection.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Candidate {
    /// Weight after [`seed_weight`].
    pub weight: f32,
    /// Input indices (bottom, middle, top).
    pub key: [u32; 3],
    /// Bottom radius.
    pub r_bottom: f32,
    /// z vertex.
    pub z_vertex: f32,
}

/// The order of seeds of one middle spacepoint (traccc's device comparator): higher weight
/// first; equal weights by the larger `(bottom, middle, top)` input-index tuple.
#[inline(always)]
pub fn seed_better(a: &Candidate, b: &Candidate) -> bool {
    if a.weight != b.weight {
        return a.weight > b.weight;
    }
    let (x, y) = (a.key, b.key);
    if x[0] != y[0] {
        return x[0] > y[0];
    }
    if x[1] != y[1] {
        return x[1] > y[1];
    }
    x[2] > y[2]
}

/// Best-N keeper of one middle spacepoint (fixed array, capacity `MAX_SEEDS_PER_SPM_CAP`).
pub struct BestN {
    /// Candidates, sorted best first; the first `len` are valid.
    pub items: [Candidate; MAX_SEEDS_PER_SPM_CAP as usize],
    /// How many.
    pub len: u32,
    /// Capacity in use (`<= MAX_SEEDS_PER_SPM_CAP`).
    pub cap: u32,
}

impl BestN {
    /// An empty keeper of `cap` candidates (clamped to the array).
    #[inline(always)]
    pub fn new(cap: u32) -> Self {
        Self {
            items: [Candidate::default(); MAX_SEEDS_PER_SPM_CAP as usize],
            len: 0,
            cap: if cap > MAX_SEEDS_PER_SPM_CAP {
                MAX_SEEDS_PER_SPM_CAP
            } else {
                cap
            },
        }
    }

    /// Offers a candidate; kept sorted (insertion), the worst dropped when full.
    #[inline(always)]
    pub fn offer(&mut self, c: Candidate) {
        const CAP: usize = MAX_SEEDS_PER_SPM_CAP as usize;
        if self.cap == 0 {
            return;
        }
        let mut pos = self.len;
        if self.len == self.cap {
            // len >= 1 here; `% CAP` keeps every index provably in bounds (no panic path).
            if !seed_better(&c, &self.items[(self.len as usize - 1) % CAP]) {
                return;
            }
            pos = self.len - 1;
        } else {
            self.len += 1;
        }
        while pos > 0 && seed_better(&c, &self.items[(pos as usize - 1) % CAP]) {
            self.items[pos as usize % CAP] = self.items[(pos as usize - 1) % CAP];
            pos -= 1;
        }
        self.items[pos as usize % CAP] = c;
    }
}

/// The best-N keeper of the kernels: the same candidates and order as [`BestN`], but the
/// unused slots are never written. Every lane of a selecting warp holds one (only lane 0
/// offers), so zeroing sixteen candidates would cost each lane 384 bytes of local-memory
/// stores per middle; here `new` writes nothing but the two counters.
pub struct SeedKeeper {
    items: [core::mem::MaybeUninit<Candidate>; MAX_SEEDS_PER_SPM_CAP as usize],
    len: u32,
    cap: u32,
}

impl SeedKeeper {
    /// An empty keeper of `cap` candidates (clamped to the array).
    #[inline(always)]
    pub fn new(cap: u32) -> Self {
        Self {
            items: [const { core::mem::MaybeUninit::uninit() }; MAX_SEEDS_PER_SPM_CAP as usize],
            len: 0,
            cap: if cap > MAX_SEEDS_PER_SPM_CAP {
                MAX_SEEDS_PER_SPM_CAP
            } else {
                cap
            },
        }
    }

    /// How many candidates are kept.
    #[inline(always)]
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether none is kept.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `j`-th best kept candidate (`None` for `j >= len`).
    #[inline(always)]
    pub fn get(&self, j: u32) -> Option<Candidate> {
        if j < self.len {
            // SAFETY: slots below `len` were written by `offer` (it writes `pos <= len - 1`
            // after raising `len`, and moves only written slots).
            Some(unsafe { self.items[(j % MAX_SEEDS_PER_SPM_CAP) as usize].assume_init() })
        } else {
            None
        }
    }

    /// Offers a candidate; kept sorted (insertion), the worst dropped when full
    /// ([`BestN::offer`]'s steps).
    #[inline(always)]
    pub fn offer(&mut self, c: Candidate) {
        const CAP: usize = MAX_SEEDS_PER_SPM_CAP as usize;
        if self.cap == 0 {
            return;
        }
        let at = |k: &Self, i: usize| {
            // SAFETY: only called for i < len (written slots), see below.
            unsafe { k.items[i % CAP].assume_init() }
        };
        let mut pos = self.len;
        if self.len == self.cap {
            // len >= 1 here.
            if !seed_better(&c, &at(self, self.len as usize - 1)) {
                return;
            }
            pos = self.len - 1;
        } else {
            self.len += 1;
        }
        // pos - 1 < old len: a written slot.
        while pos > 0 && seed_better(&c, &at(self, pos as usize - 1)) {
            self.items[pos as usize % CAP] =
                core::mem::MaybeUninit::new(at(self, pos as usize - 1));
            pos -= 1;
        }
        self.items[pos as usize % CAP] = core::mem::MaybeUninit::new(c);
    }
}

// ---------------------------------------------------------------------------------------
// Track parameters
// ---------------------------------------------------------------------------------------

/// traccc's `seed_to_bound_param_vector` with the field along +z (`bfield > 0`, GeV/(e·mm)),
/// from the bottom, middle and top positions. The surface is the cylinder through the bottom
/// spacepoint: `loc0 = rB·atan2(yB, xB)`, `loc1 = zB`.
#[inline(always)]
pub fn estimate_params(bfield: f32, b: [f32; 3], m: [f32; 3], t: [f32; 3]) -> BoundParams {
    // Frame: origin at the bottom, z along the field, x along the transverse bottom→middle.
    let rel = [m[0] - b[0], m[1] - b[1]];
    let n = sqrt(rel[0] * rel[0] + rel[1] * rel[1]);
    // new y = normalize(z × rel) = (-rel.y, rel.x) / n; new x = new y × z = (rel.x, rel.y) / n
    let yx = -rel[1] / n;
    let yy = rel[0] / n;
    let xx = yy;
    let xy = -yx;
    let local = |p: [f32; 3]| {
        let d = [p[0] - b[0], p[1] - b[1], p[2] - b[2]];
        [d[0] * xx + d[1] * xy, d[0] * yx + d[1] * yy, d[2]]
    };
    let l1 = local(m);
    let l2 = local(t);
    let uv = |l: [f32; 3]| {
        let den = l[0] * l[0] + l[1] * l[1];
        (l[0] / den, l[1] / den)
    };
    let (u1, v1) = uv(l1);
    let (u2, v2) = uv(l2);
    let a = (v2 - v1) / (u2 - u1);
    let bb = v2 - a * u2;
    let s = sqrt(1.0 + a * a);
    let radius = -s / (2.0 * bb);
    let perp2 = sqrt(l2[0] * l2[0] + l2[1] * l2[1]);
    // For exactly collinear points (B = 0, R infinite) traccc's formula gives 0·∞ = NaN;
    // its limit, the straight line, is used instead (a deliberate difference).
    let inv_tan_theta = if bb == 0.0 {
        l2[2] / perp2
    } else {
        l2[2] / (2.0 * radius * asin(perp2 / (2.0 * radius)))
    };
    // transDirection = (1, A, s·invTanTheta), normalised, rotated back to the global frame.
    let tz = s * inv_tan_theta;
    let norm = sqrt(1.0 + a * a + tz * tz);
    let (dx, dy, dz) = (1.0 / norm, a / norm, tz / norm);
    let gx = dx * xx + dy * yx;
    let gy = dx * xy + dy * yy;
    let gz = dz;
    let phi = atan2(gy, gx);
    let theta = atan2(sqrt(gx * gx + gy * gy), gz);
    let q_over_pt = 1.0 / (radius * bfield);
    let qop = q_over_pt / sqrt(1.0 + inv_tan_theta * inv_tan_theta);
    let rb = sqrt(b[0] * b[0] + b[1] * b[1]);
    BoundParams {
        loc0: rb * atan2(b[1], b[0]),
        loc1: b[2],
        phi,
        theta,
        qop,
    }
}

/// Totals of one chained call (all events of a batch), accumulated by the kernels with
/// 64-bit atomics and read by the host once, at the end: the capacities of the doublet and
/// triplet buffers are checked against them (a total above its capacity means the call
/// must be repeated with larger buffers; nothing past a capacity is ever written).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingTotals {
    /// Middle–bottom doublets needed.
    pub mid_bot: u64,
    /// Middle–top doublets needed.
    pub mid_top: u64,
    /// Triplets needed (0 when the doublets did not fit).
    pub triplets: u64,
    /// Non-zero when a grid key held more than [`BIN_RANK_MAX`] spacepoints: the gather did
    /// not restore the order inside that key, and the host repeats the chain with the
    /// radix-sort binning.
    pub unranked: u64,
}
const _: () = assert!(core::mem::size_of::<SeedingTotals>() == 32);

/// Per-event counts of a batch (read by the host with [`SeedingTotals`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct EventCounts {
    /// Valid (binned) spacepoints.
    pub valid: u32,
    /// Middle–bottom doublets.
    pub mid_bot: u32,
    /// Middle–top doublets.
    pub mid_top: u32,
    /// Triplets.
    pub triplets: u32,
    /// Seeds.
    pub seeds: u32,
    /// Position of the event's first seed in the batch's seed array.
    pub seed_start: u32,
    /// Reserved (0).
    pub reserved: [u32; 2],
}
const _: () = assert!(core::mem::size_of::<EventCounts>() == 32);

/// Candidates one warp of [`KERNEL_FIND_DOUBLETS`] keeps in shared memory per side (bottoms,
/// tops) during its single pass; a middle with more is finished by a second pass that writes
/// the rest directly (same result).
pub const DOUBLET_STAGE: u32 = 128;

/// Entries of the ring in which a warp of [`KERNEL_FIND_DOUBLETS`] queues the candidates that
/// passed the `(r, z)` cuts for the helix-circle cut (32 at a time).
pub const DOUBLET_QUEUE: u32 = 64;

/// Shared-memory words of one warp of [`KERNEL_FIND_DOUBLETS`]: two stages of
/// `DOUBLET_STAGE` (bottoms, tops) and the ring.
pub const DOUBLET_WARP_WORDS: u32 = 2 * DOUBLET_STAGE + DOUBLET_QUEUE;

/// Dynamic shared memory of [`KERNEL_FIND_DOUBLETS`] (`DOUBLET_WARP_WORDS` per warp of a
/// `SEEDING_THREADS` block).
pub const fn doublet_smem_bytes() -> usize {
    (SEEDING_THREADS / 32 * DOUBLET_WARP_WORDS * 4) as usize
}

/// Parameters of the `seeding_bin_spacepoints` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingBinSpacepointsParams {
    pub cfg: DevPtr<SeedingConfig>,
    pub sps: DevPtr<SpacePoint>,
    /// `n_events + 1` offsets of the events in `sps` (non-decreasing, last = n).
    pub ev_off: DevPtr<u32>,
    pub n: u64,
    pub keys: DevPtr<u32>,
    pub n_events: u32,
    pub _pad0: u32,
}
crate::kernel_params!(SeedingBinSpacepointsParams, 48, ["seeding_bin_spacepoints"]);

/// Parameters of the `seeding_bin_count` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingBinCountParams {
    pub sps: DevPtr<SpacePoint>,
    /// `n_events + 1` offsets of the events in `sps` (non-decreasing, last = n).
    pub ev_off: DevPtr<u32>,
    pub n: u64,
    pub keys: DevPtr<u32>,
    /// Each spacepoint's slot in its key (order of the atomics).
    pub slot: DevPtr<u32>,
    /// `n_events * nkeys + 2` counts, zero on entry.
    pub counts: DevPtr<u32>,
    /// `n_events * nkeys + 2` grid offsets, written when `scan_keys != 0`.
    pub grid: DevPtr<u32>,
    /// Finished blocks (zero on entry, left zero).
    pub ticket: DevPtr<u32>,
    /// The chain's [`SeedingTotals`] and [`EventCounts`], zeroed here (`summary_words`).
    pub summary: DevPtr<u32>,
    pub n_events: u32,
    /// `n_events * nkeys + 2` when the last block scans the counts (at most
    /// [`BIN_SCAN_TILE`]), else 0.
    pub scan_keys: u32,
    pub summary_words: u32,
    /// The configuration by value (see [`SeedingFindDoubletsParams::cfg`]).
    pub cfg: SeedingConfig,
}
crate::kernel_params!(SeedingBinCountParams, 248, ["seeding_bin_count"]);

/// Parameters of the `seeding_bin_place` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingBinPlaceParams {
    pub keys: DevPtr<u32>,
    pub slot: DevPtr<u32>,
    pub grid: DevPtr<u32>,
    /// `n` spacepoint indices, grouped by key (any order inside a key).
    pub content: DevPtr<u32>,
    /// Counts to clear.
    pub counts: DevPtr<u32>,
    pub n: u64,
    /// Counts to clear: `n_events * nkeys + 1`.
    pub n_counts: u64,
}
crate::kernel_params!(SeedingBinPlaceParams, 56, ["seeding_bin_place"]);

/// Parameters of the `seeding_gather_spacepoints` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingGatherSpacepointsParams {
    pub sps: DevPtr<SpacePoint>,
    pub ev_off: DevPtr<u32>,
    pub keys: DevPtr<u32>,
    pub content: DevPtr<u32>,
    /// `n_events * nkeys + 2` offsets; `grid[n_events * nkeys]` = number of valid.
    pub grid: DevPtr<u32>,
    pub n: u64,
    pub out: DevPtr<BinnedSp>,
    /// `(r, z)` of every binned record (the doublet cuts' first test).
    pub rz: DevPtr<[f32; 2]>,
    /// [`SeedingTotals::unranked`] is set here.
    pub totals: DevPtr<SeedingTotals>,
    pub n_events: u32,
    /// Non-zero: `content` is grouped by key in any order inside a key and the gather puts
    /// each key's spacepoints in input order (by counting); zero: `content` is already stable.
    pub rank: u32,
    pub _pad0: u32,
    /// The configuration by value (see [`SeedingFindDoubletsParams::cfg`]): read through a
    /// pointer it was one more memory round trip before every thread's first load.
    pub cfg: SeedingConfig,
}
crate::kernel_params!(
    SeedingGatherSpacepointsParams,
    248,
    ["seeding_gather_spacepoints"]
);

/// Parameters of the `seeding_find_doublets` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingFindDoubletsParams {
    pub grid: DevPtr<u32>,
    pub sps: DevPtr<BinnedSp>,
    pub rz: DevPtr<[f32; 2]>,
    /// Launch size (middles); the valid ones are `p < grid[n_events * nkeys]`.
    pub n: u64,
    pub n_bot: DevPtr<u32>,
    pub n_top: DevPtr<u32>,
    pub bot_start: DevPtr<u32>,
    pub top_start: DevPtr<u32>,
    /// Per middle with doublets: the [`TopBounds`] of its tops.
    pub top_bounds: DevPtr<TopBounds>,
    pub bot: DevPtr<Doublet>,
    pub lc_bot: DevPtr<LinCircle>,
    pub top: DevPtr<Doublet>,
    pub lc_top: DevPtr<LinCircle>,
    pub totals: DevPtr<SeedingTotals>,
    pub events: DevPtr<EventCounts>,
    pub n_events: u32,
    pub cap_mb: u32,
    pub cap_mt: u32,
    /// The configuration by value: the kernel reads its fields from the parameter space
    /// (constant-bank operands), with no register held and no load repeated after the
    /// warp votes and shuffles of the candidate loops (`asm!` that may touch memory).
    pub cfg: SeedingConfig,
}
crate::kernel_params!(SeedingFindDoubletsParams, 296, ["seeding_find_doublets"]);

/// Parameters of the `seeding_find_triplets` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingTripletsParams {
    pub sps: DevPtr<BinnedSp>,
    pub bot: DevPtr<Doublet>,
    pub lc_bot: DevPtr<LinCircle>,
    pub n_top: DevPtr<u32>,
    pub top_start: DevPtr<u32>,
    /// Per middle with doublets: the [`TopBounds`] of its tops.
    pub top_bounds: DevPtr<TopBounds>,
    pub top: DevPtr<Doublet>,
    pub lc_top: DevPtr<LinCircle>,
    /// Per middle–bottom doublet: its number of triplets (`cap_mb`).
    pub tri_cnt: DevPtr<u32>,
    /// Per middle–bottom doublet with triplets: the position of its first (`cap_mb`).
    pub tri_start: DevPtr<u32>,
    /// The triplets (`cap_tri`).
    pub out: DevPtr<Triplet>,
    pub totals: DevPtr<SeedingTotals>,
    pub events: DevPtr<EventCounts>,
    pub cap_mb: u32,
    pub cap_mt: u32,
    pub cap_tri: u32,
    /// The configuration by value (see [`SeedingFindDoubletsParams::cfg`]).
    pub cfg: SeedingConfig,
}
crate::kernel_params!(SeedingTripletsParams, 280, ["seeding_find_triplets"]);

/// Parameters of the `seeding_select_seeds` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingSelectSeedsParams {
    pub grid: DevPtr<u32>,
    /// Launch size: `n + 1` counts are written (0 past the valid middles).
    pub n: u64,
    pub n_bot: DevPtr<u32>,
    pub bot_start: DevPtr<u32>,
    pub tri_cnt: DevPtr<u32>,
    pub tri_start: DevPtr<u32>,
    pub tri: DevPtr<Triplet>,
    pub slots: DevPtr<Seed>,
    pub counts: DevPtr<u32>,
    pub totals: DevPtr<SeedingTotals>,
    pub n_events: u32,
    pub cap_mb: u32,
    pub cap_mt: u32,
    pub cap_tri: u32,
    /// The configuration by value (see [`SeedingFindDoubletsParams::cfg`]).
    pub cfg: SeedingConfig,
    pub _pad0: u32,
}
crate::kernel_params!(SeedingSelectSeedsParams, 264, ["seeding_select_seeds"]);

/// Parameters of the `seeding_gather_seeds` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingGatherSeedsParams {
    pub grid: DevPtr<u32>,
    pub binned: DevPtr<BinnedSp>,
    pub sps: DevPtr<SpacePoint>,
    pub ev_off: DevPtr<u32>,
    pub slots: DevPtr<Seed>,
    pub counts: DevPtr<u32>,
    pub off: DevPtr<u32>,
    pub n: u64,
    pub out: DevPtr<Seed>,
    pub params: DevPtr<BoundParams>,
    /// Per event: valid spacepoints and its seed range are written here.
    pub events: DevPtr<EventCounts>,
    pub n_events: u32,
    /// The configuration by value (see [`SeedingFindDoubletsParams::cfg`]): read through a
    /// pointer it was one more memory round trip before every thread's first load.
    pub cfg: SeedingConfig,
}
crate::kernel_params!(SeedingGatherSeedsParams, 256, ["seeding_gather_seeds"]);

/// Parameters of the `seeding_interleave_columns` kernel (one `#[repr(C)]` struct, see
/// `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SeedingInterleaveColumnsParams {
    /// `5 * n_events` device addresses of `f32` columns: per event x, y, z, var_r, var_z,
    /// each valid for the event's spacepoint count.
    pub columns: DevPtr<u64>,
    /// `n_events + 1` offsets of the events in `sps` (non-decreasing, last = n).
    pub ev_off: DevPtr<u32>,
    /// Spacepoints of the batch.
    pub n: u64,
    /// `n` records out.
    pub sps: DevPtr<SpacePoint>,
    /// The smallest bad spacepoint index ([`crate::histogram::encode_first_index`]; zero on
    /// entry = none).
    pub bad: DevPtr<u32>,
    pub n_events: u32,
    pub _pad0: u32,
}
crate::kernel_params!(
    SeedingInterleaveColumnsParams,
    48,
    ["seeding_interleave_columns"]
);

/// Whether a spacepoint is one the seeding takes: finite coordinates, finite non-negative
/// variances (the checks of the host's `check_spacepoints`, in one predicate: the device
/// flags a bad spacepoint with it, the host names the fault).
#[inline(always)]
pub fn spacepoint_ok(sp: &SpacePoint) -> bool {
    sp.x.is_finite()
        && sp.y.is_finite()
        && sp.z.is_finite()
        && sp.var_r.is_finite()
        && sp.var_r >= 0.0
        && sp.var_z.is_finite()
        && sp.var_z >= 0.0
}

/// The event of item `g` of a batch: the last `e < n_events` with `ev_off[e] <= g`
/// (empty events, equal offsets, are skipped). Binary search over `n_events + 1` offsets.
///
/// # Safety
/// `ev_off` valid for `n_events + 1` non-decreasing words, `n_events >= 1`.
#[inline(always)]
pub unsafe fn event_of(ev_off: *const u32, n_events: u32, g: u32) -> u32 {
    let (mut lo, mut hi) = (0u32, n_events);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        // SAFETY: mid < n_events.
        if unsafe { ev_off.add(mid as usize).read() } <= g {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

// Device code, one file per stage: thin entry points, one thread per item, except the
// doublet kernels (one warp per middle spacepoint: the lanes test 32 consecutive candidates
// at once and keep their scan order with a ballot and a prefix popcount).
#[cfg(target_arch = "nvptx64")]
pub mod binning;
#[cfg(target_arch = "nvptx64")]
pub mod doublets;
#[cfg(target_arch = "nvptx64")]
pub mod select;
#[cfg(target_arch = "nvptx64")]
pub mod triplets;

/// Device code: every item of the stage files above, under one path.
#[cfg(target_arch = "nvptx64")]
pub mod device {
    pub use super::binning::*;
    pub use super::doublets::*;
    pub use super::select::*;
    pub use super::triplets::*;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`flat_owner`] equals a linear search for the first lane whose inclusive sum exceeds
    /// the position, for every position of random run lengths (many zeros, long runs, all
    /// zero but one lane, all 32 lanes non-empty).
    #[test]
    fn flat_owner_equals_linear_search() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..3000u32 {
            let mut len = [0u32; 32];
            for (j, l) in len.iter_mut().enumerate() {
                *l = match round % 4 {
                    0 => (next() % 3) as u32 * (next() % 2) as u32,
                    1 => (next() % 40) as u32,
                    2 => (j as u32 == round % 32) as u32 * (1 + (next() % 70) as u32),
                    _ => 1 + (next() % 2) as u32,
                };
            }
            let mut incl = [0u32; 32];
            let mut s = 0;
            for j in 0..32 {
                s += len[j];
                incl[j] = s;
            }
            for pos in 0..s + 2 {
                let want = (0..32u32).find(|&j| incl[j as usize] > pos).unwrap_or(31);
                assert_eq!(
                    flat_owner(pos, |j| incl[j as usize]),
                    want,
                    "round {round}, pos {pos}, lengths {len:?}"
                );
            }
        }
    }

    /// The kernels' keeper equals [`BestN`] on random streams of candidates (duplicate
    /// weights, every capacity).
    #[test]
    fn seed_keeper_equals_best_n() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2000u32 {
            let cap = round % (MAX_SEEDS_PER_SPM_CAP + 2);
            let mut a = BestN::new(cap);
            let mut b = SeedKeeper::new(cap);
            let n = next() % 40;
            for i in 0..n {
                let c = Candidate {
                    weight: (next() % 6) as f32 * 100.0,
                    key: [(next() % 4) as u32, round, i as u32],
                    r_bottom: (next() % 200) as f32,
                    z_vertex: i as f32,
                };
                a.offer(c);
                b.offer(c);
            }
            assert_eq!(a.len, b.len());
            assert_eq!(b.is_empty(), a.len == 0);
            for j in 0..a.len {
                assert_eq!(
                    Some(a.items[j as usize]),
                    b.get(j),
                    "round {round}, slot {j}"
                );
            }
            assert_eq!(b.get(a.len), None);
        }
    }
}
