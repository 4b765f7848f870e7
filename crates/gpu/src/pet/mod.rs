//! PET acquisition chain: raw frames to singles, stable time sort, coincidence windows.
//!
//! Source: the small-animal PET seed (`shared/seeds/002`: `DataFrameV2`, `SinglesStruct`,
//! `CoinPetPara`, `convertUdpToSinglesKernel`, `parallelMergeSort`, `SelectKernel`), with the
//! window rule of issue 4 and GATE's multiple-coincidence policies (`reference/algorithms.md`
//! section 3). `docs/pet.md` lists every difference from the seed.
//!
//! # Data
//! - [`DataFrameV2`]: 16 packed bytes per raw frame (head/DU, BDM, 8 big-endian time bytes,
//!   x, y, 2 big-endian energy bytes, 2 temperature bytes).
//! - [`Single`]: `{u32 crystal, f32 energy, f64 time}`, 16 bytes, the seed's `SinglesStruct`.
//! - [`Coincidence`]: two singles, the earlier first.
//! - Position table: `u8` per `(bdm, du, x + y * position_size)`; energy-correction table:
//!   `f32` per `(bdm, du, local crystal, floor(raw energy / 10))`, 1000 per crystal.
//!
//! # Kernels
//! 1. [`KERNEL_CONVERT`]: one frame per item, [`convert_frame`] per item, then an
//!    order-preserving compaction of the accepted singles (warp ballots for the ranks inside a
//!    warp, the Foundation's `BlockScan` over warp totals, decoupled look-back across tiles),
//!    so the output keeps input order (the seed's `atomicAdd` of block offsets does not).
//! 2. [`KERNEL_SORT_BLOCK`] + [`KERNEL_SORT_PASS`]: stable merge sort by time. Tiles of
//!    [`SORT_TILE`] = 1024 singles are sorted in shared memory by rank merging (each element
//!    finds its rank in the partner run by binary search: lower bound from the left run, upper
//!    bound from the right run, which makes the sort stable), then merge passes double the run
//!    width. A pass splits the output into tiles of 1024 by merge-path search, so every block
//!    does the same work whatever the data. No padding: the last, partial tile and the last,
//!    short run are handled as they are. The same pass merges arbitrary presorted runs (for
//!    example per-BDM streams), given their boundaries.
//! 3. Coincidences: [`KERNEL_COINCIDE_TILES`], one pass over tiles of [`COINCIDE_TILE`]
//!    singles: sortedness check; window openers (a single more than `window` after its
//!    predecessor always opens a window, so the chain of windows restarts there; one thread
//!    walks each such segment, as the seed's `SelectKernel` walks left to the last gap,
//!    finding each window's end by a galloping search and counting its pairs,
//!    [`window_pairs`]; delayed windows: every single opens one); the counts scanned in single
//!    order (decoupled look-back across tiles); each opener writes its pairs at its offset
//!    (time order of the first single).
//!
//! # Worked example (coincidences, window 10, policy killAll)
//! singles (crystal, time): `(1, 0) (2, 4) (3, 20) (4, 25) (5, 26) (6, 40) (6, 45) (7, 60)`:
//! windows `{0, 4}` → pair (1, 2); `{20, 25, 26}` → multiple, none; `{40, 45}` → same crystal,
//! none; `{60}` → none. Output: one coincidence, crystals 1 and 2.

use crate::params::DevPtr;

use bytemuck::{Pod, Zeroable};

/// Kernel: raw frames to accepted singles, in input order.
pub const KERNEL_CONVERT: &str = "pet_convert_frames";
/// Kernel: stable sort of each 1024-single tile in shared memory.
pub const KERNEL_SORT_BLOCK: &str = "pet_merge_sort_block";
/// Kernel: one merge pass over pairs of sorted runs.
pub const KERNEL_SORT_PASS: &str = "pet_merge_sort_pass";
/// Kernel: the range of the singles' times (as keys and as integers).
pub const KERNEL_TIME_RANGE: &str = "pet_time_range";
/// Kernel: the sort keys of the singles' times (float bits, or integer offsets).
pub const KERNEL_TIME_KEYS: &str = "pet_time_keys";
/// Kernel: singles gathered through a permutation (`out[i] = in[index[i]]`).
pub const KERNEL_GATHER: &str = "pet_gather_singles";
/// Threads per block of [`KERNEL_TIME_KEYS`] and [`KERNEL_GATHER`].
pub const KEYS_THREADS: u32 = 256;

/// The radix-sort key of a time: a `u64` whose unsigned order is the order of the finite
/// `f64` times (sign bit flipped for positive numbers, every bit for negative ones), with
/// `-0.0` taken as `+0.0` (they compare equal, so they must get one key for the sort to stay
/// stable).
#[inline(always)]
pub fn time_key(t: f64) -> u64 {
    let b = if t == 0.0 { 0 } else { t.to_bits() };
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

/// Largest magnitude of a time sorted by its integer value (2^53: every integer up to it is
/// exact in `f64`).
pub const TIME_INT_LIMIT: f64 = 9_007_199_254_740_992.0;

/// The time as an integer, when it is one of magnitude at most [`TIME_INT_LIMIT`]
/// (`-0.0` gives 0, like `+0.0`). Times counted in ticks (every converted single) are.
#[inline(always)]
pub fn time_integer(t: f64) -> Option<i64> {
    if (-TIME_INT_LIMIT..=TIME_INT_LIMIT).contains(&t) {
        let v = t as i64;
        if v as f64 == t {
            return Some(v);
        }
    }
    None
}

/// An `i64` as a `u64` of the same order (sign bit flipped).
#[inline(always)]
pub fn int_key(v: i64) -> u64 {
    (v as u64) ^ 1 << 63
}

/// Words of [`KERNEL_TIME_RANGE`]'s output: smallest and largest [`time_key`], smallest and
/// largest [`int_key`] of the integral times, and 1 if any time is not integral.
pub const RANGE_WORDS: usize = 5;
/// The range words before the reduction.
pub const RANGE_INIT: [u64; RANGE_WORDS] = [u64::MAX, 0, u64::MAX, 0, 0];
/// [`KERNEL_TIME_KEYS`] mode: `u64` [`time_key`]s.
pub const KEYS_FLOAT: u32 = 0;
/// [`KERNEL_TIME_KEYS`] mode: `u64` integer offsets `time_integer(t) - base`.
pub const KEYS_INT64: u32 = 1;
/// [`KERNEL_TIME_KEYS`] mode: `u32` integer offsets `time_integer(t) - base`.
pub const KEYS_INT32: u32 = 2;

/// One raw frame of the acquisition electronics (the seed's `DataFrameV2`), 16 bytes, packed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct DataFrameV2 {
    /// Head nibble and DU index (low 4 bits).
    pub head_du: u8,
    /// BDM index.
    pub bdm: u8,
    /// Time counter, big-endian.
    pub time: [u8; 8],
    /// Position-map x.
    pub x: u8,
    /// Position-map y.
    pub y: u8,
    /// Raw energy, big-endian.
    pub energy: [u8; 2],
    /// Temperature, integer part.
    pub temperature_int: i8,
    /// Temperature fraction and tail.
    pub temperature_tail: u8,
}
const _: () = assert!(core::mem::size_of::<DataFrameV2>() == 16);
const _: () = assert!(core::mem::align_of::<DataFrameV2>() == 1);

/// One single (the seed's `SinglesStruct`): global crystal index, corrected energy, time in
/// the frame counter's unit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct Single {
    /// Global crystal index.
    pub crystal: u32,
    /// Corrected energy (raw energy times the correction factor).
    pub energy: f32,
    /// Time (the frame counter as `f64`).
    pub time: f64,
}
const _: () = assert!(core::mem::size_of::<Single>() == 16);
const _: () = assert!(core::mem::align_of::<Single>() == 8);

/// A coincidence: two singles, the earlier (in sorted order) first.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct Coincidence {
    /// The first single (window opener side).
    pub a: Single,
    /// The second single.
    pub b: Single,
}
const _: () = assert!(core::mem::size_of::<Coincidence>() == 32);

/// Scanner parameters used by the conversion (the seed's `CoinPetPara`).
///
/// BDMs: `channels * module_num_y` around the ring times `module_num_z` along the axis;
/// DUs per BDM: `block_num_y * block_num_z`; crystals per DU: `crystal_num_y * crystal_num_z`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct ScannerParams {
    /// `m_nChannelNum`.
    pub channels: u32,
    /// Modules around the ring per channel.
    pub module_num_y: u32,
    /// Modules along the axis.
    pub module_num_z: u32,
    /// Blocks (DUs) per module around the ring.
    pub block_num_y: u32,
    /// Blocks (DUs) per module along the axis.
    pub block_num_z: u32,
    /// Crystals per block around the ring.
    pub crystal_num_y: u32,
    /// Crystals per block along the axis.
    pub crystal_num_z: u32,
    /// Side of the position map (x and y below it).
    pub position_size: u32,
    /// Energy window, lower edge (inclusive), corrected energy.
    pub energy_lo: f32,
    /// Energy window, upper edge (inclusive).
    pub energy_hi: f32,
    /// Padding to 48 bytes.
    pub _pad: [u32; 2],
}
const _: () = assert!(core::mem::size_of::<ScannerParams>() == 48);

/// Energy-correction factors per crystal (indexed by `floor(raw energy / 10)`).
pub const ENERGY_BINS: u32 = 1000;

impl ScannerParams {
    /// Number of BDMs.
    pub const fn bdm_count(&self) -> u32 {
        self.channels * self.module_num_y * self.module_num_z
    }
    /// DUs per BDM.
    pub const fn du_count(&self) -> u32 {
        self.block_num_y * self.block_num_z
    }
    /// Crystals per DU.
    pub const fn crystals_per_du(&self) -> u32 {
        self.crystal_num_y * self.crystal_num_z
    }
    /// Crystals in one ring.
    pub const fn crystals_per_ring(&self) -> u32 {
        self.channels * self.module_num_y * self.block_num_y * self.crystal_num_y
    }
    /// Number of rings.
    pub const fn rings(&self) -> u32 {
        self.module_num_z * self.block_num_z * self.crystal_num_z
    }
    /// Entries of the position table.
    pub const fn position_entries(&self) -> u64 {
        self.bdm_count() as u64
            * self.du_count() as u64
            * self.position_size as u64
            * self.position_size as u64
    }
    /// Entries of the energy-correction table.
    pub const fn energy_entries(&self) -> u64 {
        self.bdm_count() as u64
            * self.du_count() as u64
            * self.crystals_per_du() as u64
            * ENERGY_BINS as u64
    }
}

/// Conversion outcome bits.
pub const CONVERT_ACCEPTED: u32 = 1;
/// The energy-table index was `>= 1000` and was clamped to 999.
pub const CONVERT_CLAMPED: u32 = 2;
/// BDM, DU, x or y outside the tables (or a table entry outside the DU): frame dropped.
pub const CONVERT_BAD_ADDRESS: u32 = 4;

/// The frame's time counter (big-endian `u64`).
#[inline(always)]
pub fn frame_time(f: &DataFrameV2) -> u64 {
    // Byte by byte (= `u64::from_be_bytes`): the field sits at byte 2 of the frame, and on the
    // GPU a whole-array read of it went through local memory.
    let b = &f.time;
    (b[0] as u64) << 56
        | (b[1] as u64) << 48
        | (b[2] as u64) << 40
        | (b[3] as u64) << 32
        | (b[4] as u64) << 24
        | (b[5] as u64) << 16
        | (b[6] as u64) << 8
        | b[7] as u64
}

/// The frame's raw energy (big-endian `u16`).
#[inline(always)]
pub fn frame_energy(f: &DataFrameV2) -> u32 {
    (f.energy[0] as u32) << 8 | f.energy[1] as u32
}

/// Converts one frame (the oracle's conversion); `position(i)` and `correction(i)` read the
/// tables (indices are always inside them: the function checks every address first).
/// Returns the single and the outcome bits.
///
/// Steps (seed `convertUdpToSinglesKernel`): time = counter as `f64`; origin crystal =
/// position table at `(bdm, du, x + y * size)`; local crystal = `ox + (cy - 1 - oy) * cz`
/// with `ox = origin % cz`, `oy = origin / cz`; crystal in ring and ring index; global index
/// `in_ring + ring * crystals_per_ring`; energy = raw * factor with factor index
/// `min(raw / 10, 999)`; accepted when `energy_lo <= energy <= energy_hi`. The kernel runs
/// the same steps on the frame's four words ([`ConvertConsts`], [`words_position`],
/// [`words_energy`], [`words_single`]), compared with this function by the host's tests.
#[inline(always)]
pub fn convert_frame(
    f: &DataFrameV2,
    p: &ScannerParams,
    position: impl Fn(u64) -> u8,
    correction: impl Fn(u64) -> f32,
) -> (Single, u32) {
    let bdm = f.bdm as u32;
    let du = (f.head_du & 0x0f) as u32;
    let (x, y) = (f.x as u32, f.y as u32);
    let ps = p.position_size;
    let (cy, cz, bz) = (p.crystal_num_y, p.crystal_num_z, p.block_num_z);
    let ring_modules = p.channels * p.module_num_y;
    // Zero divisors are rejected by the host's parameter check; testing them here as well
    // keeps this function free of division-by-zero paths.
    if cz == 0 || cy == 0 || bz == 0 || ring_modules == 0 {
        return (Single::default(), CONVERT_BAD_ADDRESS);
    }
    if bdm >= p.bdm_count() || du >= p.du_count() || x >= ps || y >= ps {
        return (Single::default(), CONVERT_BAD_ADDRESS);
    }
    let du_index = bdm as u64 * p.du_count() as u64 + du as u64;
    let origin = position(du_index * (ps as u64 * ps as u64) + (x + y * ps) as u64) as u32;
    if origin >= cy * cz {
        return (Single::default(), CONVERT_BAD_ADDRESS);
    }
    let (oy, ox) = (origin / cz, origin % cz);
    let local = ox + (cy - 1 - oy) * cz;
    let mut bin = frame_energy(f) / 10;
    let mut status = 0;
    if bin >= ENERGY_BINS {
        bin = ENERGY_BINS - 1;
        status |= CONVERT_CLAMPED;
    }
    let factor = correction(
        (du_index * p.crystals_per_du() as u64 + local as u64) * ENERGY_BINS as u64 + bin as u64,
    );
    let (bdm_ring, bdm_in_ring) = (bdm / ring_modules, bdm % ring_modules);
    let (du_y, du_z) = (du / bz, du % bz);
    let (local_y, local_z) = (local / cz, local % cz);
    let in_ring = bdm_in_ring * (p.block_num_y * cy) + du_y * cy + local_y;
    let ring = bdm_ring * (bz * cz) + du_z * cz + local_z;
    let crystal = in_ring + ring * p.crystals_per_ring();
    let energy = frame_energy(f) as f32 * factor;
    if p.energy_lo <= energy && energy <= p.energy_hi {
        status |= CONVERT_ACCEPTED;
    }
    let single = Single {
        crystal,
        energy,
        time: frame_time(f) as f64,
    };
    (single, status)
}

/// The conversion's constants for one launch, computed by the host from a scanner that passed
/// its parameter check (at most 256 BDMs, 16 DUs per BDM, 256 crystals per DU, position size
/// at most 256): then every table index fits `u32` (position table at most 2^28 entries,
/// energy table at most 2^30) and every division is of a byte by at most 256 ([`ByteDiv`]).
/// Passed by value in the kernel's parameters.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct ConvertConsts {
    /// BDMs.
    pub bdms: u32,
    /// DUs per BDM.
    pub dus: u32,
    /// Side of the position map.
    pub ps: u32,
    /// `ps * ps`.
    pub ps2: u32,
    /// Crystals per DU around the ring.
    pub cy: u32,
    /// Crystals per DU along the axis.
    pub cz: u32,
    /// Crystals per DU.
    pub cpd: u32,
    /// Crystals around the ring per module (`block_num_y * cy`).
    pub by_cy: u32,
    /// Rings per module (`block_num_z * cz`).
    pub bz_cz: u32,
    /// Crystals per ring.
    pub cpr: u32,
    /// Energy window.
    pub energy_lo: f32,
    /// Energy window.
    pub energy_hi: f32,
    /// Entries of the position table (saturated at `u32::MAX`): an index at or past it is
    /// a bad address (never, for a checked scanner; it keeps the reads in bounds whatever the
    /// parameters).
    pub position_entries: u32,
    /// Entries of the energy table (saturated at `u32::MAX`), as `position_entries`.
    pub energy_entries: u32,
    /// Division by `cz`.
    pub crystal_z: crate::fastdiv::ByteDiv,
    /// Division by `block_num_z`.
    pub block_z: crate::fastdiv::ByteDiv,
    /// Division by the modules per ring (`channels * module_num_y`).
    pub ring_modules: crate::fastdiv::ByteDiv,
}

impl ConvertConsts {
    /// The constants of a checked scanner's parameters (the host's `validate_params`; the
    /// kernel's safety contract requires it).
    pub const fn new(p: &ScannerParams) -> Self {
        use crate::fastdiv::ByteDiv;
        Self {
            bdms: p.bdm_count(),
            dus: p.du_count(),
            ps: p.position_size,
            ps2: p.position_size.wrapping_mul(p.position_size),
            cy: p.crystal_num_y,
            cz: p.crystal_num_z,
            cpd: p.crystals_per_du(),
            by_cy: p.block_num_y.wrapping_mul(p.crystal_num_y),
            bz_cz: p.block_num_z.wrapping_mul(p.crystal_num_z),
            cpr: p.crystals_per_ring(),
            energy_lo: p.energy_lo,
            energy_hi: p.energy_hi,
            position_entries: saturate_u32(p.position_entries()),
            energy_entries: saturate_u32(p.energy_entries()),
            crystal_z: ByteDiv::new(p.crystal_num_z),
            block_z: ByteDiv::new(p.block_num_z),
            ring_modules: ByteDiv::new(p.channels.wrapping_mul(p.module_num_y)),
        }
    }
}

const fn saturate_u32(v: u64) -> u32 {
    if v > u32::MAX as u64 {
        u32::MAX
    } else {
        v as u32
    }
}

/// The frame's time counter from its four little-endian words (bytes 2..10, big-endian):
/// two byte swaps of funnel-shifted words ([`frame_time`] byte by byte).
#[inline(always)]
pub fn words_time(w: &[u32; 4]) -> u64 {
    let hi = (w[0] >> 16 | w[1] << 16).swap_bytes();
    let lo = (w[1] >> 16 | w[2] << 16).swap_bytes();
    (hi as u64) << 32 | lo as u64
}

/// The raw energy from the frame's words (bytes 12, 13, big-endian).
#[inline(always)]
pub fn words_energy_raw(w: &[u32; 4]) -> u32 {
    (w[3] & 0xff) << 8 | (w[3] >> 8) & 0xff
}

/// First step of the kernel's conversion: `(position-table index, DU index, address ok)`.
/// Indices of a frame that is not ok are meaningless (wrapping arithmetic): the kernel reads
/// entry 0 instead.
#[inline(always)]
pub fn words_position(w: &[u32; 4], c: &ConvertConsts) -> (u32, u32, bool) {
    let bdm = w[0] >> 8 & 0xff;
    let du = w[0] & 0x0f;
    let (x, y) = (w[2] >> 16 & 0xff, w[2] >> 24);
    // `&`, not `&&`: four compares and no branch.
    let du_index = bdm.wrapping_mul(c.dus).wrapping_add(du);
    let at = du_index
        .wrapping_mul(c.ps2)
        .wrapping_add(x)
        .wrapping_add(y.wrapping_mul(c.ps));
    let ok = (bdm < c.bdms) & (du < c.dus) & (x < c.ps) & (y < c.ps) & (at < c.position_entries);
    (at, du_index, ok)
}

/// Second step: from the origin crystal of the position table, `(energy-table index, local
/// crystal, ok, clamped)`; ok is `ok_address` and the origin inside the DU.
#[inline(always)]
pub fn words_energy(
    w: &[u32; 4],
    c: &ConvertConsts,
    du_index: u32,
    origin: u32,
    ok_address: bool,
) -> (u32, u32, bool, bool) {
    let (oy, ox) = c.crystal_z.div_rem(origin & 0xff);
    let local = ox.wrapping_add(c.cy.wrapping_sub(1).wrapping_sub(oy).wrapping_mul(c.cz));
    let raw = words_energy_raw(w);
    let clamped = raw >= 10 * ENERGY_BINS;
    // raw < 2^16: `/ 10` is a multiply and a shift.
    let bin = (raw / 10).min(ENERGY_BINS - 1);
    let at = du_index
        .wrapping_mul(c.cpd)
        .wrapping_add(local)
        .wrapping_mul(ENERGY_BINS)
        .wrapping_add(bin);
    let ok = ok_address & (origin < c.cpd) & (at < c.energy_entries);
    (at, local, ok, clamped)
}

/// Last step: the single and the outcome bits of an ok frame, from its local crystal and
/// correction factor.
#[inline(always)]
pub fn words_single(
    w: &[u32; 4],
    c: &ConvertConsts,
    local: u32,
    factor: f32,
    clamped: bool,
) -> (Single, u32) {
    let bdm = w[0] >> 8 & 0xff;
    let du = w[0] & 0x0f;
    let (bdm_ring, bdm_in_ring) = c.ring_modules.div_rem(bdm);
    let (du_y, du_z) = c.block_z.div_rem(du);
    let (local_y, local_z) = c.crystal_z.div_rem(local & 0xff);
    let in_ring = bdm_in_ring
        .wrapping_mul(c.by_cy)
        .wrapping_add(du_y.wrapping_mul(c.cy))
        .wrapping_add(local_y);
    let ring = bdm_ring
        .wrapping_mul(c.bz_cz)
        .wrapping_add(du_z.wrapping_mul(c.cz))
        .wrapping_add(local_z);
    let crystal = in_ring.wrapping_add(ring.wrapping_mul(c.cpr));
    let energy = words_energy_raw(w) as f32 * factor;
    let accepted = (c.energy_lo <= energy) & (energy <= c.energy_hi);
    let status = (accepted as u32 * CONVERT_ACCEPTED) | (clamped as u32 * CONVERT_CLAMPED);
    let single = Single {
        crystal,
        energy,
        time: words_time(w) as f64,
    };
    (single, status)
}

/// The kernel's conversion of one frame (its words) composed on the host: what the host's
/// tests compare with [`convert_frame`].
pub fn convert_words(
    w: &[u32; 4],
    c: &ConvertConsts,
    position: impl Fn(u32) -> u8,
    correction: impl Fn(u32) -> f32,
) -> (Single, u32) {
    let (at, du_index, ok) = words_position(w, c);
    if !ok {
        return (Single::default(), CONVERT_BAD_ADDRESS);
    }
    let (at, local, ok, clamped) = words_energy(w, c, du_index, position(at) as u32, ok);
    if !ok {
        return (Single::default(), CONVERT_BAD_ADDRESS);
    }
    words_single(w, c, local, correction(at), clamped)
}

/// Conversion statistics words written by [`KERNEL_CONVERT`].
pub const STAT_ACCEPTED: usize = 0;
/// Frames outside the energy window.
pub const STAT_REJECTED_ENERGY: usize = 1;
/// Frames whose energy-table index was clamped.
pub const STAT_CLAMPED: usize = 2;
/// Frames with a bad address.
pub const STAT_BAD_ADDRESS: usize = 3;
/// Index of the first frame with a bad address (`u32::MAX` if none).
pub const STAT_FIRST_BAD: usize = 4;
/// Order-check flags ([`STAT_ORDER_DISORDER`], [`STAT_ORDER_MISSING`]), written by
/// [`KERNEL_ORDER_BLOCKS`] and [`KERNEL_ORDER_JOIN`] after the conversion (zero on entry).
pub const STAT_ORDER: usize = 5;
/// A BDM's time went down (in the chunk or against an earlier chunk).
pub const STAT_ORDER_DISORDER: u32 = 1;
/// A BDM of the scanner has no frame yet (the watermark is `-inf`).
pub const STAT_ORDER_MISSING: u32 = 2;
/// Words `STAT_MARK_LO` and `STAT_MARK_LO + 1`: the smallest latest time over the BDMs
/// (`u64`, little-endian words; `u64::MAX` on entry), written by [`KERNEL_ORDER_JOIN`].
pub const STAT_MARK_LO: usize = 6;
/// Words of the statistics array.
pub const STAT_WORDS: usize = 8;

/// Threads per block of the conversion (512 rather than 256: half the tiles and look-backs
/// at the same occupancy, `docs/benchmarks.md`, PET session 8).
pub const CONVERT_THREADS: u32 = 512;
/// Frames per thread of the conversion.
pub const CONVERT_ITEMS: u32 = 8; // `unroll8!` in the kernel matches
/// Frames per tile (block).
pub const CONVERT_TILE: u64 = (CONVERT_THREADS * CONVERT_ITEMS) as u64;

/// Shared-memory bytes of the conversion: the Foundation's tile-scan layout (`u32`), then the
/// tile's singles (16 bytes each) waiting for their offsets.
pub const fn convert_smem_bytes() -> usize {
    crate::scan::device_scan_smem_bytes(4) + 16 * CONVERT_TILE as usize
}

// ---------------------------------------------------------------------------------------
// Sort
// ---------------------------------------------------------------------------------------

/// Threads per block of the sort kernels.
pub const SORT_THREADS: u32 = 256;
/// Elements per tile of the sort kernels (the seed's 1024-element local sort).
pub const SORT_TILE: u32 = 1024;
/// Shared-memory bytes of the sort kernels: two tiles of singles plus 16 bytes of split
/// indices.
pub const fn sort_smem_bytes() -> usize {
    2 * SORT_TILE as usize * 16 + 32
}

/// Something a stable merge sort orders by a key.
pub trait SortKey: Copy {
    /// The key type (compared with `<` and `<=`; never NaN).
    type Key: Copy + PartialOrd;
    /// The key.
    fn key(&self) -> Self::Key;
}

impl SortKey for Single {
    type Key = f64;
    #[inline(always)]
    fn key(&self) -> f64 {
        self.time
    }
}

/// Number of elements `x` of the sorted range `0..len` (read by `get`) with `x < key`
/// (`strict`) or `x <= key` (not `strict`).
#[inline(always)]
pub fn rank_in<K: Copy + PartialOrd>(
    len: u32,
    key: K,
    strict: bool,
    get: impl Fn(u32) -> K,
) -> u32 {
    let (mut lo, mut hi) = (0u32, len);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let k = get(mid);
        let before = if strict { k < key } else { k <= key };
        if before {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// [`rank_in`] found by galloping from the front (probes 0, 1, 3, 7, ... then a binary
/// search in the last gap): `O(log answer)` reads, all near the start, instead of
/// `O(log len)` reads spread over the whole range. Same result as `rank_in`.
#[inline(always)]
pub fn gallop_rank<K: Copy + PartialOrd>(
    len: u32,
    key: K,
    strict: bool,
    get: impl Fn(u32) -> K,
) -> u32 {
    let before = |k: K| if strict { k < key } else { k <= key };
    let mut lo = 0u32;
    let mut step = 1u64;
    let hi;
    loop {
        let probe = lo as u64 + step - 1;
        if probe >= len as u64 {
            hi = len;
            break;
        }
        if before(get(probe as u32)) {
            lo = probe as u32 + 1;
            step *= 2;
        } else {
            hi = probe as u32;
            break;
        }
    }
    lo + rank_in(hi - lo, key, strict, |q| get(lo + q))
}

/// Merge-path split: how many of the first `d` elements of the stable merge of `a`
/// (length `la`) and `b` (length `lb`) come from `a` (elements of `a` first on ties).
#[inline(always)]
pub fn merge_path<K: Copy + PartialOrd>(
    d: u64,
    la: u64,
    lb: u64,
    a: impl Fn(u64) -> K,
    b: impl Fn(u64) -> K,
) -> u64 {
    let mut lo = d.saturating_sub(lb);
    let mut hi = if d < la { d } else { la };
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if a(mid) <= b(d - 1 - mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Boundary `k` of the runs of a merge pass: `min(k * width, n)` when `width > 0`, else
/// `runs(k)` clamped to `n` (explicit boundaries, `k <= nruns`); `k > nruns` gives `n`.
#[inline(always)]
pub fn run_bound(k: u64, width: u64, nruns: u64, n: u64, runs: impl Fn(u64) -> u64) -> u64 {
    if width > 0 {
        let b = k.saturating_mul(width);
        if b < n {
            b
        } else {
            n
        }
    } else if k <= nruns {
        let b = runs(k);
        if b < n {
            b
        } else {
            n
        }
    } else {
        n
    }
}

/// Number of runs of a pass: `ceil(n / width)` or `nruns`.
#[inline(always)]
pub fn run_count(width: u64, nruns: u64, n: u64) -> u64 {
    if width > 0 {
        n.div_ceil(width)
    } else {
        nruns
    }
}

// ---------------------------------------------------------------------------------------
// Coincidences
// ---------------------------------------------------------------------------------------

/// Multiple-coincidence policy: what a window with more than two singles yields. A window of
/// exactly two singles yields their pair when it is good (different crystals), whatever the
/// policy, as in GATE 9; a window of one yields nothing.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Nothing (the seed's rule; GATE `killAll`).
    KillAll = 0,
    /// Every good pair (GATE `takeAllGoods`).
    TakeAllGoods = 1,
    /// The good pair with the largest energy sum (GATE `takeWinnerOfGoods`).
    TakeWinnerOfGoods = 2,
    /// The pair with the largest energy sum, if it is good (GATE `takeWinnerIfIsGood`).
    TakeWinnerIfIsGood = 3,
    /// The winner, if every pair is good (GATE `takeWinnerIfAllAreGoods`).
    TakeWinnerIfAllAreGoods = 4,
    /// The good pair, if there is exactly one (GATE `killAllIfMultipleGoods`).
    KillAllIfMultipleGoods = 5,
}

impl Policy {
    /// All policies.
    pub const ALL: [Policy; 6] = [
        Policy::KillAll,
        Policy::TakeAllGoods,
        Policy::TakeWinnerOfGoods,
        Policy::TakeWinnerIfIsGood,
        Policy::TakeWinnerIfAllAreGoods,
        Policy::KillAllIfMultipleGoods,
    ];
    /// The GATE name.
    pub const fn name(self) -> &'static str {
        match self {
            Policy::KillAll => "killAll",
            Policy::TakeAllGoods => "takeAllGoods",
            Policy::TakeWinnerOfGoods => "takeWinnerOfGoods",
            Policy::TakeWinnerIfIsGood => "takeWinnerIfIsGood",
            Policy::TakeWinnerIfAllAreGoods => "takeWinnerIfAllAreGoods",
            Policy::KillAllIfMultipleGoods => "killAllIfMultipleGoods",
        }
    }
    /// From the kernel argument (unknown values read as `KillAll`; the host validates).
    #[inline(always)]
    pub const fn from_u32(v: u32) -> Policy {
        match v {
            1 => Policy::TakeAllGoods,
            2 => Policy::TakeWinnerOfGoods,
            3 => Policy::TakeWinnerIfIsGood,
            4 => Policy::TakeWinnerIfAllAreGoods,
            5 => Policy::KillAllIfMultipleGoods,
            _ => Policy::KillAll,
        }
    }
}

/// Largest window (singles, opener included) that a policy other than `KillAll` enumerates;
/// a larger window is a typed error (`CapacityExceeded`), never a silent drop.
pub const MAX_MULTIPLE: u32 = 256;

/// Whether a pair is good: different crystals (the seed's rule).
#[inline(always)]
pub fn good_pair(a: &Single, b: &Single) -> bool {
    a.crystal != b.crystal
}

/// The pairs a window yields, in order, passed to `emit(i, j)` (window-local indices,
/// `i < j`); returns their number. The window holds `len` singles read by `get(k)`.
/// Candidate pairs: every `i < j` (prompt window), or `(0, j)` (delayed window: pairs only
/// with the opener, as GATE 9). Energy sums are `a.energy + b.energy` in `f32`; the winner
/// is the first pair with the strictly largest sum. A caller must not pass
/// `len > MAX_MULTIPLE` with a policy other than `KillAll` (it is checked before).
#[inline(always)]
pub fn window_pairs(
    len: u32,
    delayed: bool,
    policy: Policy,
    get: impl Fn(u32) -> Single,
    mut emit: impl FnMut(u32, u32),
) -> u32 {
    if len < 2 {
        return 0;
    }
    if len == 2 {
        let (a, b) = (get(0), get(1));
        if good_pair(&a, &b) {
            emit(0, 1);
            return 1;
        }
        return 0;
    }
    if let Policy::KillAll = policy {
        return 0;
    }
    // Pass 1: number of candidates and goods, the best good and the best overall.
    let mut candidates = 0u32;
    let mut goods = 0u32;
    let (mut best_good, mut best_good_sum) = ((0u32, 0u32), f32::NEG_INFINITY);
    let (mut best, mut best_sum) = ((0u32, 0u32), f32::NEG_INFINITY);
    let mut have_best = false;
    let mut have_good = false;
    let mut first_good = (0u32, 0u32);
    let last_i = if delayed { 1 } else { len - 1 };
    let mut i = 0;
    while i < last_i {
        let a = get(i);
        let mut j = i + 1;
        while j < len {
            let b = get(j);
            let sum = a.energy + b.energy;
            candidates += 1;
            if !have_best || sum > best_sum {
                best = (i, j);
                best_sum = sum;
                have_best = true;
            }
            if good_pair(&a, &b) {
                if goods == 0 {
                    first_good = (i, j);
                }
                goods += 1;
                if !have_good || sum > best_good_sum {
                    best_good = (i, j);
                    best_good_sum = sum;
                    have_good = true;
                }
            }
            j += 1;
        }
        i += 1;
    }
    if goods == 0 {
        return 0;
    }
    match policy {
        Policy::KillAll => 0,
        Policy::TakeAllGoods => {
            let mut i = 0;
            while i < last_i {
                let a = get(i);
                let mut j = i + 1;
                while j < len {
                    if good_pair(&a, &get(j)) {
                        emit(i, j);
                    }
                    j += 1;
                }
                i += 1;
            }
            goods
        }
        Policy::TakeWinnerOfGoods => {
            emit(best_good.0, best_good.1);
            1
        }
        Policy::TakeWinnerIfIsGood => {
            if good_pair(&get(best.0), &get(best.1)) {
                emit(best.0, best.1);
                1
            } else {
                0
            }
        }
        Policy::TakeWinnerIfAllAreGoods => {
            if goods == candidates {
                emit(best.0, best.1);
                1
            } else {
                0
            }
        }
        Policy::KillAllIfMultipleGoods => {
            if goods == 1 {
                emit(first_good.0, first_good.1);
                1
            } else {
                0
            }
        }
    }
}

/// Whether a window opened at time `t_open` is complete once every future single is known to
/// come at or after `watermark`: `watermark - t_open > reach` (`reach` = window, or delay +
/// window). `watermark = +inf` completes every window (the end of the stream).
#[inline(always)]
pub fn window_complete(t_open: f64, watermark: f64, reach: f64) -> bool {
    watermark - t_open > reach
}

/// Coincidence status words: first unsorted or NaN index (`u32::MAX` if none).
pub const CO_FIRST_UNSORTED: usize = 0;
/// Index of the first incomplete window opener (`u32::MAX` if all complete).
pub const CO_RESUME: usize = 1;
/// Largest window over [`MAX_MULTIPLE`] met (0 if none).
pub const CO_OVERSIZE: usize = 2;
/// Low and high words of the total pair count (64-bit, to detect overflow of `u32`).
pub const CO_TOTAL_LO: usize = 4;
/// Low word of the 64-bit sum of the pair counts (`TakeAllGoods` only; atomics), beside
/// the scan's `u32` total at [`CO_TOTAL_LO`]: a larger sum means the offsets wrapped.
pub const CO_SUM64_LO: usize = 6;
/// Words of the coincidence status array (the total is the `u64` at words 4..6).
pub const CO_WORDS: usize = 8;
/// Kernel: the single-pass coincidences (windows, counts, look-back scan, pairs).
pub const KERNEL_COINCIDE_TILES: &str = "pet_coincide_tiles";
/// Kernel: [`KERNEL_COINCIDE_TILES`] for prompt windows under `KillAll` only.
pub const KERNEL_COINCIDE_KILLALL: &str = "pet_coincide_tiles_killall";
/// Singles per thread of [`KERNEL_COINCIDE_TILES`] (`unroll8!`).
pub const COINCIDE_ITEMS: u32 = 8;
/// Singles per tile of [`KERNEL_COINCIDE_TILES`].
pub const COINCIDE_TILE: u64 = (COINCIDE_THREADS * COINCIDE_ITEMS) as u64;
/// Shared memory of [`KERNEL_COINCIDE_TILES`]: the tile-scan layout (`u32`), then one `u32`
/// per single of the tile (the walking openers' counts, then their offsets), then the
/// tile's times (`f64`) with the single before the tile and the two after it.
pub const fn coincide_smem_bytes() -> usize {
    coincide_times_offset() + 8 * (COINCIDE_TILE as usize + 3)
}

/// Byte offset of the times in the shared memory of [`KERNEL_COINCIDE_TILES`].
pub const fn coincide_times_offset() -> usize {
    crate::scan::device_scan_smem_bytes(4) + 4 * COINCIDE_TILE as usize
}

/// Threads per block of the coincidence kernels.
pub const COINCIDE_THREADS: u32 = 256;

/// Runs `$body` with `$q` = 0, 1, 2, 3 as literal constants.
#[cfg(target_arch = "nvptx64")]
macro_rules! unroll4 {
    ($q:ident, $body:block) => {{
        let $q: usize = 0;
        $body
    }
    {
        let $q: usize = 1;
        $body
    }
    {
        let $q: usize = 2;
        $body
    }
    {
        let $q: usize = 3;
        $body
    }};
}

/// Runs `$body` with `$j` = 0, 1, ..., 7 as constants (two [`unroll4!`]s; a loop LLVM would
/// not unroll keeps its arrays in local memory).
#[cfg(target_arch = "nvptx64")]
macro_rules! unroll8 {
    ($j:ident, $body:block) => {{
        unroll4!(q, {
            let $j: usize = q;
            $body
        });
        unroll4!(q, {
            let $j: usize = q + 4;
            $body
        });
    }};
}

/// Device code.
/// Parameters of the `pet_convert_frames` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetConvertFramesParams {
    pub frames: DevPtr<u32>,
    pub n: u64,
    pub position: DevPtr<u8>,
    pub correction: DevPtr<f32>,
    pub out: DevPtr<Single>,
    pub stats: DevPtr<u32>,
    pub flags: DevPtr<u32>,
    pub aggregates: DevPtr<u32>,
    pub inclusive: DevPtr<u32>,
    /// The scanner's constants ([`ConvertConsts::new`] of its checked parameters).
    pub consts: ConvertConsts,
}
crate::kernel_params!(PetConvertFramesParams, 152, ["pet_convert_frames"]);

/// Parameters of the `pet_merge_sort_block` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetMergeSortBlockParams {
    pub input: DevPtr<Single>,
    pub output: DevPtr<Single>,
    pub n: u64,
}
crate::kernel_params!(PetMergeSortBlockParams, 24, ["pet_merge_sort_block"]);

/// Parameters of the `pet_time_range` kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetTimeRangeParams {
    /// `n` singles read.
    pub singles: DevPtr<Single>,
    /// [`RANGE_WORDS`] words, [`RANGE_INIT`] on entry.
    pub range: DevPtr<u64>,
    /// Number of singles.
    pub n: u64,
}
crate::kernel_params!(PetTimeRangeParams, 24, ["pet_time_range"]);

/// Parameters of the `pet_time_keys` kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetTimeKeysParams {
    /// `n` singles read.
    pub singles: DevPtr<Single>,
    /// `n` keys written (`u64`, or `u32` in mode [`KEYS_INT32`]).
    pub keys: DevPtr<u64>,
    /// Number of singles.
    pub n: u64,
    /// Subtracted from the integer times (an `i64` as bits) in the integer modes.
    pub base: u64,
    /// [`KEYS_FLOAT`], [`KEYS_INT64`] or [`KEYS_INT32`].
    pub mode: u32,
    /// Padding.
    pub _pad: u32,
}
crate::kernel_params!(PetTimeKeysParams, 40, ["pet_time_keys"]);

/// Parameters of the `pet_gather_singles` kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetGatherSinglesParams {
    /// `n` singles read.
    pub input: DevPtr<Single>,
    /// `n` indices into `input` (a permutation).
    pub index: DevPtr<u32>,
    /// `n` singles written: `output[i] = input[index[i]]`.
    pub output: DevPtr<Single>,
    /// Number of singles.
    pub n: u64,
}
crate::kernel_params!(PetGatherSinglesParams, 32, ["pet_gather_singles"]);

/// Parameters of the `pet_merge_sort_pass` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetMergeSortPassParams {
    pub input: DevPtr<Single>,
    pub output: DevPtr<Single>,
    pub n: u64,
    pub width: u64,
    pub runs: DevPtr<u32>,
    pub nruns: u64,
}
crate::kernel_params!(PetMergeSortPassParams, 48, ["pet_merge_sort_pass"]);

/// Parameters of the `pet_coincide_tiles` kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetCoincideTilesParams {
    /// `n` singles, sorted by time.
    pub singles: DevPtr<Single>,
    pub n: u64,
    /// Window reach: `window` (prompt) or `delay + window` (delayed).
    pub reach: f64,
    /// Delayed windows start `delay` after their opener.
    pub delay: f64,
    /// Windows that end at or after it (`t_open + reach >= watermark`) are left for later.
    pub watermark: f64,
    /// The pairs, in time order.
    pub pairs: DevPtr<Coincidence>,
    /// Pairs `pairs` holds.
    pub capacity: u64,
    /// [`CO_WORDS`] status words.
    pub status: DevPtr<u32>,
    /// Look-back flags (zeroed), aggregates and inclusive prefixes, one per tile.
    pub flags: DevPtr<u32>,
    pub aggregates: DevPtr<u32>,
    pub inclusive: DevPtr<u32>,
    pub delayed: u32,
    pub policy: u32,
}
crate::kernel_params!(
    PetCoincideTilesParams,
    96,
    ["pet_coincide_tiles", "pet_coincide_tiles_killall"]
);

/// Whether a policy yields at most one pair per window, so that a prompt chain yields at most
/// `n / 2` pairs and a delayed one at most `n` (the pairs buffer is sized from that bound, and
/// the total read once at the end); `TakeAllGoods` yields up to every good pair of a window.
#[inline(always)]
pub fn policy_bounded(policy: Policy) -> bool {
    !matches!(policy, Policy::TakeAllGoods)
}

#[cfg(target_arch = "nvptx64")]
pub mod coincide;
#[cfg(target_arch = "nvptx64")]
pub mod convert;
#[cfg(target_arch = "nvptx64")]
pub mod order;
#[cfg(target_arch = "nvptx64")]
pub mod sort;

/// Device code: every item of the stage files above, under one path.
#[cfg(target_arch = "nvptx64")]
pub mod device {
    pub use super::coincide::*;
    pub use super::convert::*;
    pub use super::order::*;
    pub use super::sort::*;
}

// ---------------------------------------------------------------------------------------
// Order check of the streamed chain's frames (kernels in `order.rs`)
// ---------------------------------------------------------------------------------------

/// Kernel: per block of frames, each BDM's first and last time and a disorder flag.
pub const KERNEL_ORDER_BLOCKS: &str = "pet_order_blocks";
/// Kernel: joins the block summaries (and the chunks before): disorder, latest times,
/// watermark.
pub const KERNEL_ORDER_JOIN: &str = "pet_order_join";
/// BDMs a frame's byte addresses.
pub const ORDER_BDMS: usize = 256;
/// Words of the per-BDM state carried between chunks: the latest times (`ORDER_BDMS`
/// `u64`s), then the seen bits (`ORDER_BDMS / 32` `u32`s in `ORDER_BDMS / 64` `u64`s).
pub const ORDER_STATE_WORDS: usize = ORDER_BDMS + ORDER_BDMS / 64;
/// `u32` words of seen bits per block summary.
pub const ORDER_SEEN_WORDS: usize = ORDER_BDMS / 32;
/// Threads per block of [`KERNEL_ORDER_BLOCKS`] (one per BDM in its join).
pub const ORDER_THREADS: u32 = 256;
/// Frames per lane loaded before any is compared.
pub const ORDER_BATCH: u32 = 4;
/// Frames per warp of [`KERNEL_ORDER_BLOCKS`].
pub const ORDER_WARP_FRAMES: u64 = 1024;
/// Frames per block of [`KERNEL_ORDER_BLOCKS`].
pub const ORDER_BLOCK_FRAMES: u64 = ORDER_WARP_FRAMES * (ORDER_THREADS / 32) as u64;
/// Shared bytes of one warp's table: first and last times (`u64`), seen bytes.
pub const ORDER_WARP_TABLE_BYTES: u32 = 17 * ORDER_BDMS as u32;
/// Dynamic shared memory of [`KERNEL_ORDER_BLOCKS`].
pub const fn order_smem_bytes() -> usize {
    (ORDER_WARP_TABLE_BYTES * (ORDER_THREADS / 32)) as usize
}
/// Threads of the one block of [`KERNEL_ORDER_JOIN`] (a multiple of `ORDER_BDMS`).
pub const ORDER_JOIN_THREADS: u32 = 1024;
/// Dynamic shared memory of [`KERNEL_ORDER_JOIN`].
pub const fn order_join_smem_bytes() -> usize {
    20 * ORDER_JOIN_THREADS as usize
}

/// Parameters of the `pet_order_blocks` kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetOrderBlocksParams {
    /// `n` frames (16-byte aligned).
    pub frames: DevPtr<u32>,
    /// Number of frames.
    pub n: u64,
    /// First time of each BDM per block (`ORDER_BDMS` per block).
    pub first: DevPtr<u64>,
    /// Last time of each BDM per block.
    pub last: DevPtr<u64>,
    /// Seen bits per block (`ORDER_SEEN_WORDS` per block).
    pub seen: DevPtr<u32>,
    /// Statistics words (`STAT_WORDS`).
    pub stats: DevPtr<u32>,
    /// The scanner's BDMs (frames with a BDM byte at or above it are skipped).
    pub bdms: u32,
    /// Padding.
    pub _pad: u32,
}
crate::kernel_params!(PetOrderBlocksParams, 56, ["pet_order_blocks"]);

/// Parameters of the `pet_order_join` kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetOrderJoinParams {
    /// Block summaries, as [`PetOrderBlocksParams`].
    pub first: DevPtr<u64>,
    /// As [`PetOrderBlocksParams::last`].
    pub last: DevPtr<u64>,
    /// As [`PetOrderBlocksParams::seen`].
    pub seen: DevPtr<u32>,
    /// State before the chunk (`ORDER_STATE_WORDS`).
    pub state_in: DevPtr<u64>,
    /// State after the chunk (`ORDER_STATE_WORDS`).
    pub state_out: DevPtr<u64>,
    /// Statistics words (`STAT_WORDS`).
    pub stats: DevPtr<u32>,
    /// Number of block summaries.
    pub blocks: u32,
    /// The scanner's BDMs.
    pub bdms: u32,
}
crate::kernel_params!(PetOrderJoinParams, 56, ["pet_order_join"]);

// ---------------------------------------------------------------------------------------
// Multiway merge of presorted runs (issue 12; kernels in `multiway.rs`)
// ---------------------------------------------------------------------------------------

/// Kernel: every `step`-th single of every run, as sample records.
pub const KERNEL_MW_SAMPLE: &str = "pet_multiway_sample";
/// Kernel: the split of every run at every splitter (one block per splitter).
pub const KERNEL_MW_SPLIT: &str = "pet_multiway_split";
/// Kernel: merge of one segment per block, [`MW_THREADS`] threads, tile [`MW_TILE`].
pub const KERNEL_MW_MERGE: &str = "pet_multiway_merge";
/// Kernel: as [`KERNEL_MW_MERGE`] with [`MW_WIDE_THREADS`] threads, tile [`MW_WIDE_TILE`].
pub const KERNEL_MW_MERGE_WIDE: &str = "pet_multiway_merge_wide";
/// Kernel: positions where the time goes down (`!(t[i] >= t[i - 1])`): natural run starts.
pub const KERNEL_DETECT_RUNS: &str = "pet_detect_runs";

/// Most runs the multiway merge takes (more: the radix sort).
pub const MW_MAX_RUNS: u32 = 256;
/// Outputs per thread of a merge round (odd: the threads' 8-byte keys at stride
/// `8 * MW_VT` bytes fall in distinct bank pairs of a half-warp).
pub const MW_VT: u32 = 9;
/// Threads per block of [`KERNEL_MW_MERGE`] (two blocks per multiprocessor).
pub const MW_THREADS: u32 = 512;
/// Largest segment of [`KERNEL_MW_MERGE`].
pub const MW_TILE: u32 = MW_THREADS * MW_VT;
/// Threads per block of [`KERNEL_MW_MERGE_WIDE`] (one block per multiprocessor).
pub const MW_WIDE_THREADS: u32 = 1024;
/// Largest segment of [`KERNEL_MW_MERGE_WIDE`].
pub const MW_WIDE_TILE: u32 = MW_WIDE_THREADS * MW_VT;
/// Threads per block of [`KERNEL_MW_SPLIT`] (one per run).
pub const MW_SPLIT_THREADS: u32 = MW_MAX_RUNS;
/// Threads per block of [`KERNEL_MW_SAMPLE`] and [`KERNEL_DETECT_RUNS`].
pub const MW_SAMPLE_THREADS: u32 = 256;

/// Shared-memory bytes of a merge kernel of tile `tile`: two key arrays (`u64`), two local
/// index arrays (`u16`), slice starts, slice bases, two group-boundary arrays, 16 words,
/// and the key-range reduction (four `u64` per warp, 32 warps).
pub const fn mw_smem_bytes(tile: u32) -> usize {
    let t = tile as usize;
    let r = MW_MAX_RUNS as usize + 1;
    2 * 8 * t + 2 * 2 * t + 4 * 4 * r + 4 * 16 + 8 * 4 * 32
}

/// Default largest key span (in bits, after the common low bits are dropped) that a merge
/// block sorts by radix rather than by merge rounds ([`mw_radix_plan`]); the host passes
/// the limit per launch ([`PetMwMergeParams::radix_bits`]; 0: merge rounds only).
pub const MW_RADIX_BITS: u32 = 64;

/// Byte offsets, inside a merge block's second key array (`8 * tile` bytes, unused by the
/// radix path), of the radix path's warp digit counters (`RADIX` words per warp), its
/// block-scan words (33, padded to 256 bytes) and the global index of every local index
/// (`u32`, `tile` of them): `(counters, scan, global indices, end)`.
pub const fn mw_radix_layout(threads: u32, tile: u32) -> (u32, u32, u32, u32) {
    let hist = 0;
    let scan = hist + threads / 32 * crate::sort::RADIX * 4;
    let global = scan + 256;
    (hist, scan, global, global + 4 * tile)
}
const _: () = assert!(mw_radix_layout(MW_THREADS, MW_TILE).3 <= 8 * MW_TILE);
const _: () = assert!(mw_radix_layout(MW_WIDE_THREADS, MW_WIDE_TILE).3 <= 8 * MW_WIDE_TILE);

/// Bits of a local index in a bucket path's packed key (every tile below `2^14`).
pub const MW_BUCKET_IDX_BITS: u32 = 14;
/// Default largest bucket the bucket path ranks by counting ([`mw_bucket_plan`]); a
/// segment with a larger bucket goes the radix way. The host passes the bound per launch
/// ([`PetMwMergeParams::bucket_max`]; 0: no bucket path).
pub const MW_BUCKET_MAX: u32 = 64;

/// Bucket bits of a merge block of `threads` threads: its bucket path has `8 * threads`
/// buckets (`2^12` narrow, `2^13` wide), one counter each in the radix path's digit
/// counters (`threads / 32 * RADIX` words); each thread scans 8 of them.
pub const fn mw_bucket_bits(threads: u32) -> u32 {
    (8 * threads).trailing_zeros()
}
const _: () = assert!(MW_WIDE_TILE <= 1 << MW_BUCKET_IDX_BITS && MW_TILE <= MW_WIDE_TILE);
const _: () = assert!(1 << mw_bucket_bits(MW_THREADS) == 8 * MW_THREADS);
const _: () = assert!(1 << mw_bucket_bits(MW_WIDE_THREADS) == 8 * MW_WIDE_THREADS);
// The counters fit the radix path's digit counters.
const _: () = assert!(4 * 8 * MW_THREADS <= mw_radix_layout(MW_THREADS, MW_TILE).1);
const _: () = assert!(4 * 8 * MW_WIDE_THREADS <= mw_radix_layout(MW_WIDE_THREADS, MW_WIDE_TILE).1);

/// Whether a merge block that sorts by radix ([`mw_radix_plan`] gave `Some((shift, bits))`)
/// takes the bucket path instead, and with which `s2`: `Some(s2)` when `bucket_max > 0` and
/// a key and a local index fit a `u64` (`bits <= 64 - MW_BUCKET_IDX_BITS = 50`), with `s2
/// = bits - bucket_bits` (0 when `bits` is smaller; `bucket_bits` = [`mw_bucket_bits`]).
/// The block then puts each key `x = (key - min) >> shift` in bucket `x >> s2` (one
/// counting pass, buckets in key order) and ranks it inside its bucket by counting the
/// bucket's smaller slot words `x << MW_BUCKET_IDX_BITS | q` ([`mw_bucket_item`]); the
/// low 32 bits of them suffice when `s2 + MW_BUCKET_IDX_BITS <= 32` (spans up to 30 bits
/// narrow, 31 wide). A bucket larger than `bucket_max` sends the segment back to the radix
/// passes (the ranking costs the bucket's size per key).
#[inline(always)]
pub fn mw_bucket_plan(bits: u32, bucket_max: u32, bucket_bits: u32) -> Option<u32> {
    if bucket_max == 0 || bits > 64 - MW_BUCKET_IDX_BITS {
        None
    } else {
        Some(bits.saturating_sub(bucket_bits))
    }
}

/// Bucket and slot word of the bucket path ([`mw_bucket_plan`]) for the key `x` (`x <
/// 2^(s2 + bucket_bits)`, `x < 2^50`) at local index `q` (`q < 2^MW_BUCKET_IDX_BITS`, the
/// segment's run order): `(x >> s2, x << MW_BUCKET_IDX_BITS | q)`. The slot words are
/// distinct and in the order (key, run, position), so a key's sorted position is its
/// bucket's start plus the number of smaller slot words in the bucket; inside a bucket they
/// agree above bit `s2 + MW_BUCKET_IDX_BITS`.
#[inline(always)]
pub fn mw_bucket_item(x: u64, s2: u32, q: u32) -> (u32, u64) {
    ((x >> s2) as u32, (x << MW_BUCKET_IDX_BITS) | q as u64)
}

/// How a merge block orders its segment, from the smallest and largest [`time_key`] of the
/// segment and the AND and OR of all its keys: `Some((shift, bits))` when it sorts by radix
/// the keys `(key - min) >> shift` over their low `bits` bits, `None` for the merge rounds.
///
/// Every key of the segment agrees with the others below bit `shift` (the lowest bit where
/// AND and OR differ), so `key - min` has `shift` zero low bits and `(key - min) >> shift`
/// is in the order of the keys, below `2^bits` (`bits` = the bit length of
/// `(max - min) >> shift`). Integral times of one binade, for example, share their low
/// mantissa bits. A stable LSD sort of the segment loaded in run order then gives the order
/// (time, run, position), as the merge does. Radix when `bits <= limit` and its
/// `ceil(bits / 8)` passes are no more than the merge's `ceil(log2 runs)` rounds (each pass
/// costs less than a round; two runs merge in one round). All keys equal (or none):
/// `Some((0, 0))`, no pass at all. `limit == 0`: always the merge rounds.
#[inline(always)]
pub fn mw_radix_plan(
    min: u64,
    max: u64,
    and: u64,
    or: u64,
    runs: u32,
    limit: u32,
) -> Option<(u32, u32)> {
    let diff = and ^ or;
    if limit == 0 {
        return None;
    }
    if max <= min || diff == 0 {
        return Some((0, 0));
    }
    let shift = diff.trailing_zeros();
    let bits = 64 - ((max - min) >> shift).leading_zeros();
    let rounds = if runs > 1 {
        32 - (runs - 1).leading_zeros()
    } else {
        0
    };
    if bits <= limit && bits.div_ceil(crate::sort::RADIX_BITS) <= rounds {
        Some((shift, bits))
    } else {
        None
    }
}

/// Sampling of one merge level: every `step`-th single of each run is a sample, and every
/// `every`-th sorted sample (from index `every`) a splitter. A segment (from one splitter to
/// the next) then holds at most `every * step + runs * (step - 1)` singles: `every` samples,
/// at most `step` singles per sample of its run, plus at most `step - 1` singles of each run
/// before the run's first sample in the segment. Chosen so that this bound is `<= tile`:
/// `step = max(1, tile / (div runs))`, `every = (tile - runs (step - 1)) / step >= 1`;
/// segments hold `every * step` singles on average, about `1 - 1/div` of the tile (the
/// host uses `div = 3` on the first level, 2 on the levels of samples).
/// `runs` in `1..=tile / 2`, `div >= 2`.
#[inline(always)]
pub const fn mw_sampling(runs: u32, tile: u32, div: u32) -> (u32, u32) {
    let step = if tile / (div * runs) > 1 {
        tile / (div * runs)
    } else {
        1
    };
    let every = (tile - runs * (step - 1)) / step;
    (step, every)
}

/// The split of run `run` (its singles read by `get`, `len` of them, sorted by time) at a
/// splitter: the sample at position `pos` of run `splitter_run` with key `key`
/// ([`time_key`]). The number of the run's singles before the splitter in the total order
/// (time, run, position), which is the stable sort's order: runs before the splitter's
/// count their times `<= key`, runs after it their times `< key`, its own run `pos`.
#[inline(always)]
pub fn mw_split(
    run: u32,
    len: u32,
    splitter_run: u32,
    pos: u32,
    key: u64,
    get: impl Fn(u32) -> f64,
) -> u32 {
    if run == splitter_run {
        return if pos < len { pos } else { len };
    }
    rank_in(len, key, run > splitter_run, |q| time_key(get(q)))
}

/// [`mw_split`] found through the run's samples: element `j * step` of the run is its
/// sample `j` (`sample(j)`, `ceil(len / step)` of them, in a compact array), so the
/// number `c` of samples before the splitter tells that the split `x` lies in
/// `((c - 1) step, c step]`, and a search of those `step` elements (`get`) finds it: as many
/// probes as one search of the run, but most of them in the samples (1/`step` of the
/// bytes, mostly in L2) rather than spread over the run. Same result as `mw_split`
/// (`step >= 1`; 0 counts as 1).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn mw_split_sampled(
    run: u32,
    len: u32,
    splitter_run: u32,
    pos: u32,
    key: u64,
    step: u32,
    sample: impl Fn(u32) -> f64,
    get: impl Fn(u32) -> f64,
) -> u32 {
    if run == splitter_run {
        return if pos < len { pos } else { len };
    }
    let strict = run > splitter_run;
    // (A step of 0 counts as 1.)
    let step = if step > 1 { step } else { 1 };
    let c = rank_in(len.div_ceil(step), key, strict, |j| time_key(sample(j)));
    if c == 0 {
        return 0;
    }
    let lo = (c - 1) * step + 1;
    let hi = if c * step < len { c * step } else { len };
    lo + rank_in(hi - lo, key, strict, |q| time_key(get(lo + q)))
}

/// Parameters of the `pet_multiway_sample` kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetMwSampleParams {
    /// The level's singles (runs back to back).
    pub input: DevPtr<Single>,
    /// `nsamples` records written: sample `j` of run `r` is
    /// `{crystal: r, energy: f32::from_bits(j * step), time}` of single `j * step` of run `r`.
    pub samples: DevPtr<Single>,
    /// `nruns + 1` run starts in `input`.
    pub starts: DevPtr<u32>,
    /// `nruns + 1` sample starts: `sstarts[r + 1] - sstarts[r] = ceil(len_r / step)`.
    pub sstarts: DevPtr<u32>,
    /// Number of samples.
    pub nsamples: u64,
    /// Number of runs (`1..=MW_MAX_RUNS`).
    pub nruns: u32,
    /// Sampling step.
    pub step: u32,
}
crate::kernel_params!(PetMwSampleParams, 48, ["pet_multiway_sample"]);

/// Parameters of the `pet_multiway_split` kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetMwSplitParams {
    /// The level's singles.
    pub input: DevPtr<Single>,
    /// `nruns + 1` run starts in `input`.
    pub starts: DevPtr<u32>,
    /// The sorted samples (records of [`PetMwSampleParams::samples`]); splitter `k` in
    /// `1..=nsplit` is sample `k * every`.
    pub sorted: DevPtr<Single>,
    /// `(nsplit + 2) * nruns` words written: row `k` holds every run's split at splitter `k`
    /// (row 0: zeros, row `nsplit + 1`: the run lengths).
    pub rows: DevPtr<u32>,
    /// The level's samples in run order (the records written by `pet_multiway_sample`,
    /// before their sort): run `r`'s are `sstarts[r]..sstarts[r + 1]`, `ceil(len_r / step)`
    /// of them ([`mw_split_sampled`]).
    pub samples: DevPtr<Single>,
    /// `nruns + 1` sample starts.
    pub sstarts: DevPtr<u32>,
    /// Number of runs (`1..=MW_MAX_RUNS`).
    pub nruns: u32,
    /// Samples per segment.
    pub every: u32,
    /// Number of splitters.
    pub nsplit: u32,
    /// The level's sampling step (`>= 1`).
    pub step: u32,
}
crate::kernel_params!(PetMwSplitParams, 64, ["pet_multiway_split"]);

/// Parameters of the `pet_multiway_merge` and `pet_multiway_merge_wide` kernels.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetMwMergeParams {
    /// The level's singles.
    pub input: DevPtr<Single>,
    /// The merged singles (block `k` writes segment `k` at the sum of row `k`).
    pub output: DevPtr<Single>,
    /// `nruns + 1` run starts in `input`.
    pub starts: DevPtr<u32>,
    /// The split rows of [`PetMwSplitParams::rows`] (`gridDim.x + 1` rows).
    pub rows: DevPtr<u32>,
    /// Three words: the first set to 1 by a block whose segment is larger than the tile or
    /// whose rows decrease (input not sorted within its runs; that block writes nothing),
    /// the second counts the segments sorted by radix ([`mw_radix_plan`]: the radix passes
    /// or the bucket path), the third those of them that took the bucket path
    /// ([`mw_bucket_plan`], no bucket over `bucket_max`).
    pub status: DevPtr<u32>,
    /// Number of runs (`1..=MW_MAX_RUNS`).
    pub nruns: u32,
    /// Largest key span sorted by radix ([`mw_radix_plan`]'s `limit`; 0: merge rounds only).
    pub radix_bits: u32,
    /// Largest bucket of the bucket path ([`mw_bucket_plan`]; 0: radix passes only).
    pub bucket_max: u32,
    /// Padding (zero).
    pub pad: u32,
}
crate::kernel_params!(
    PetMwMergeParams,
    56,
    ["pet_multiway_merge", "pet_multiway_merge_wide"]
);

/// Parameters of the `pet_detect_runs` kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PetDetectRunsParams {
    /// `n` singles.
    pub singles: DevPtr<Single>,
    /// `1 + cap` words: word 0 counts the descents (atomically; zero on entry), the next
    /// `cap` hold the first `cap` found, in no particular order.
    pub out: DevPtr<u32>,
    /// Number of singles.
    pub n: u64,
    /// Positions kept.
    pub cap: u32,
    /// Padding.
    pub _pad: u32,
}
crate::kernel_params!(PetDetectRunsParams, 32, ["pet_detect_runs"]);

#[cfg(target_arch = "nvptx64")]
pub mod multiway;
