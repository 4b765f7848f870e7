//! Device-wide LSD radix sort of `u32` and `u64` keys, with optional values: the single-pass
//! ("onesweep") structure of Adinets & Merrill (arXiv:2206.01784) and CUB's
//! `DeviceRadixSort` onesweep path.
//!
//! # What it sorts
//! Keys `u32` or `u64`, ordered by the bits `begin_bit..end_bit` only (bits outside the range
//! take no part in the order but are kept in the output), ascending or descending; stable
//! (keys equal in the range keep their input order, in both directions); optional values of
//! 4, 8, 12 or 16 bytes (1 to 4 `u32` words, any `Pod` payload of that size) that move with
//! their keys. Any length from 0 to 2^32 - 1.
//!
//! # Structure: 1 + `passes` launches, no host round trip
//! A pass sorts by one 8-bit digit (the last pass of a range that is not a multiple of 8 bits
//! long by fewer bits): `passes = ceil((end_bit - begin_bit) / 8)`, so a 48-bit timestamp costs
//! 6 passes, not 8.
//! 1. [`KERNEL_SORT_HISTOGRAM_U32`] / `_U64` (`histogram.rs`): ONE read of the keys counts the
//!    digits of **every** pass (`passes × 256` counters, shared-memory sub-histograms added to
//!    global counters); the last block to finish (a ticket counter) turns each pass's 256
//!    counts into their exclusive sum: the global start of each digit in that pass, `offsets`.
//!    The same block leaves the counters zeroed for the next call and zeroes the per-pass
//!    tile counters, so a call needs no memset.
//! 2. One onesweep kernel per pass (`onesweep.rs`, e.g. [`KERNEL_SORT_ONESWEEP_U32`]): each
//!    block takes the next tile of `onesweep_tile(..)` keys from an atomic tile counter (so a
//!    block only ever waits, in its look-back, on tiles that running blocks hold), loads its
//!    keys (warp-striped: each warp instruction reads 32 consecutive keys), counts the tile's
//!    digits in per-warp shared histograms and **publishes the counts at once** (decoupled
//!    look-back, flag "aggregate"; tile 0 publishes "inclusive prefix"), ranks its keys
//!    stably (per warp, `match.any` groups the lanes holding the same digit; the group's
//!    highest lane adds the group size to the warp's running digit counter and the old value
//!    is broadcast), writes the keys to shared memory in tile-sorted order, then looks back
//!    (one thread per digit, tile by tile, adding aggregates until it meets an inclusive
//!    prefix), publishes its own inclusive prefix, and scatters the keys from shared memory to
//!    `offsets[digit] + prefix[digit] + (rank - tile start of digit)`: consecutive threads
//!    write consecutive positions of one digit (coalesced). Values are loaded with the keys,
//!    stay in registers (the kernels with values are built for 80 registers, three blocks
//!    per multiprocessor), are written to a second shared array at their key's rank during
//!    the ranking and leave in the same scatter loop as the keys. (The `*_staged` kernels
//!    copy a full tile's 4-byte values into shared memory instead of registers, and the
//!    look-back can read 4 predecessors per step: [`SORT_ONESWEEP_VARIANTS`].)
//!
//! Buffers ping-pong between the caller's output and one temporary buffer, arranged so that
//! the last pass writes the caller's output and the input is never written.
//!
//! # Look-back status words (no memset between passes or calls)
//! One `u64` per (tile, digit): bits 0..32 the count, bit 32 set for an inclusive prefix
//! (clear: the tile's own aggregate), bits 33..64 the **epoch** of the pass ([`status_word`]).
//! The host gives every pass of every call a new epoch (1, 2, 3, ...), so a word left by an
//! earlier pass reads as "not yet published" without being cleared; the buffer is zeroed
//! once when allocated and again only when the 31-bit epoch wraps. Flag and value share one
//! 64-bit word written and read with single relaxed device-scope accesses (CUB does the same
//! with 32-bit words), so no fence is needed; 32-bit counts allow the full 2^32 - 1 length.
//!
//! # Barriers of a onesweep tile
//! (1) the tile id and the zeroed warp histograms are visible; (2) the warp histograms are
//! complete; (3, 4) inside the block scan of the 256 tile counts; (5) the per-warp digit
//! offsets are written before the warps rank; (6) the tile-sorted keys and the 256 scatter
//! bases (and with values the tile-sorted values) are in shared memory before any thread
//! reads them.
//!
//! # Worked example (16-bit keys in `u32`, two 8-bit passes)
//! Keys `[0x0102, 0x0201, 0x0101, 0x0202]` with values `[0, 1, 2, 3]`, `begin_bit = 0`,
//! `end_bit = 16` (2 passes). Pass 0 sorts by the low byte (stable):
//! `[0x0201, 0x0101, 0x0102, 0x0202]` / `[1, 2, 0, 3]`; pass 1 by the high byte:
//! `[0x0101, 0x0102, 0x0201, 0x0202]` / `[2, 0, 1, 3]`. The histogram kernel found, for
//! pass 0, digit 0x01 twice and 0x02 twice (offsets 0 and 2), and the same for pass 1.
//! With `begin_bit = 8, end_bit = 16` (one pass, low byte ignored) the result is
//! `[0x0102, 0x0101, 0x0201, 0x0202]` / `[0, 2, 1, 3]` (stable: 0x0102 came first);
//! descending over all 16 bits gives `[0x0202, 0x0201, 0x0102, 0x0101]` / `[3, 1, 0, 2]`.
//!
//! # Small inputs
//! For `n <= SINGLE_TILE` one block sorts everything in shared memory: one launch
//! ([`KERNEL_SORT_SINGLE_U32`], `single.rs`) instead of `1 + passes`.

use crate::params::DevPtr;

/// Bits per digit.
pub const RADIX_BITS: u32 = 8;
/// Digits per pass (bins).
pub const RADIX: u32 = 1 << RADIX_BITS;
/// The most passes a key takes (`u64`, 8-bit digits).
pub const MAX_PASSES: u32 = 8;

/// Threads per block of the onesweep kernels: one thread per digit in the look-back.
pub const ONESWEEP_THREADS: u32 = 256;
/// Onesweep blocks per multiprocessor the keys-only kernels are built for (their launch
/// bounds, see `crate::LAUNCH_BOUNDS`): at most 64 registers per thread.
pub const ONESWEEP_MIN_BLOCKS: u32 = 4;
/// Onesweep blocks per multiprocessor the kernels with values are built for: at most 80
/// registers per thread, so that each thread keeps its values in registers from the load to
/// the ranking (768 threads per multiprocessor, as CUB's 2 blocks of 384).
pub const ONESWEEP_MIN_BLOCKS_PAIRS: u32 = 3;

/// Launch-bound blocks per multiprocessor of the onesweep kernel for `value_bytes`.
pub const fn onesweep_min_blocks(value_bytes: usize) -> u32 {
    if value_bytes == 0 {
        ONESWEEP_MIN_BLOCKS
    } else {
        ONESWEEP_MIN_BLOCKS_PAIRS
    }
}
/// Warps per onesweep block.
pub const ONESWEEP_WARPS: u32 = ONESWEEP_THREADS / 32;
/// Threads per block of the histogram kernels (one per digit in the final scan).
pub const HISTOGRAM_THREADS: u32 = 256;
/// Keys each histogram thread covers at least (grid sizing).
pub const HISTOGRAM_ITEMS: u32 = 16;
/// 16-byte vectors each histogram thread loads before counting them (loads in flight).
pub const HISTOGRAM_UNROLL: usize = 4;
/// Largest histogram grid, in blocks per multiprocessor.
pub const HISTOGRAM_BLOCKS_PER_SM: u32 = 4;

/// Keys per thread of a onesweep tile for `key_bytes` (4 or 8) and `value_bytes` (0, 4, 8,
/// 12 or 16). Keys only: as many as fit in 64 registers per thread (four 256-thread blocks
/// per multiprocessor), 24 for `u32` and 16 for `u64` keys. With values, every thread holds
/// its keys and values in registers until the ranking has placed both in shared memory (80
/// registers, three blocks per multiprocessor): about 48 registers of keys and values, and a
/// tile of `tile × (key + value bytes)` within 50 KiB of shared memory.
pub const fn onesweep_items(key_bytes: usize, value_bytes: usize) -> u32 {
    match (key_bytes, value_bytes) {
        (4, 0) => 24,
        (_, 0) => 16,
        (4, 4) => 20,
        (_, 4) | (4, 8) => 16,
        (_, 8) | (4, 12) => 12,
        (_, 12) | (4, 16) => 10,
        _ => 8,
    }
}

/// Keys per onesweep tile.
pub const fn onesweep_tile(key_bytes: usize, value_bytes: usize) -> u32 {
    ONESWEEP_THREADS * onesweep_items(key_bytes, value_bytes)
}

/// Number of onesweep tiles (blocks per pass) for `n` keys.
pub const fn onesweep_tiles(n: u64, key_bytes: usize, value_bytes: usize) -> u64 {
    n.div_ceil(onesweep_tile(key_bytes, value_bytes) as u64)
}

/// Shared-memory layout of a onesweep block (byte offsets).
pub mod layout {
    use super::*;
    /// `RADIX` scatter bases (u32).
    pub const BIN_BASE: u32 = 0;
    /// `ONESWEEP_WARPS × RADIX` warp digit counters (u32).
    pub const WARP_HIST: u32 = BIN_BASE + RADIX * 4;
    /// Block-scan storage (33 u32) and the tile id (1 u32), padded to 256 bytes.
    pub const SCAN: u32 = WARP_HIST + ONESWEEP_WARPS * RADIX * 4;
    /// The tile id slot.
    pub const TILE_SLOT: u32 = SCAN + 33 * 4;
    /// The exchange area: the tile's keys in tile-sorted order, then (with values) the
    /// tile's values in the same order.
    pub const EXCHANGE: u32 = SCAN + 256;
}

/// Byte offset of the tile-sorted values in a onesweep block (after the keys).
pub const fn onesweep_values_offset(key_bytes: usize, value_bytes: usize) -> u32 {
    layout::EXCHANGE + onesweep_tile(key_bytes, value_bytes) * key_bytes as u32
}

/// Dynamic shared-memory bytes of a onesweep block.
pub const fn onesweep_smem_bytes(key_bytes: usize, value_bytes: usize) -> usize {
    onesweep_values_offset(key_bytes, value_bytes) as usize
        + onesweep_tile(key_bytes, value_bytes) as usize * value_bytes
}

/// Byte offset of the staged values of a onesweep block of the `*_staged` kernels: a full
/// tile's values in input order, copied in asynchronously while the keys are counted, after
/// the tile-sorted values.
pub const fn onesweep_stage_offset(key_bytes: usize, value_bytes: usize) -> u32 {
    onesweep_smem_bytes(key_bytes, value_bytes) as u32
}

/// Dynamic shared-memory bytes of a onesweep block of the `*_staged` kernels: the plain
/// block's and the staged values.
pub const fn onesweep_staged_smem_bytes(key_bytes: usize, value_bytes: usize) -> usize {
    onesweep_smem_bytes(key_bytes, value_bytes)
        + onesweep_tile(key_bytes, value_bytes) as usize * value_bytes
}

/// Dynamic shared-memory bytes of a histogram block: `passes × RADIX` counters for the key's
/// most passes, plus the block-scan storage and the last-block flag.
pub const fn histogram_smem_bytes(key_bytes: usize) -> usize {
    (key_bytes * 8 / RADIX_BITS as usize) * RADIX as usize * 4 + 256
}

/// Threads of the single-tile kernel.
pub const SINGLE_THREADS: u32 = 512;
/// Keys per thread of the single-tile kernel.
pub const SINGLE_ITEMS: u32 = 8;
/// Largest `n` the single-tile kernel sorts (one block, all passes in shared memory).
pub const SINGLE_TILE: u32 = SINGLE_THREADS * SINGLE_ITEMS;
/// Warps of the single-tile kernel.
pub const SINGLE_WARPS: u32 = SINGLE_THREADS / 32;

/// Shared-memory layout of the single-tile block (byte offsets).
pub mod single_layout {
    use super::*;
    /// `SINGLE_WARPS × RADIX` warp digit counters (u32).
    pub const WARP_HIST: u32 = 0;
    /// Block-scan storage (33 u32), padded to 256 bytes.
    pub const SCAN: u32 = WARP_HIST + SINGLE_WARPS * RADIX * 4;
    /// The original index of each tile-sorted position (u32).
    pub const INDEX: u32 = SCAN + 256;
    /// Tile-sorted keys (`SINGLE_TILE × key bytes`).
    pub const KEYS: u32 = INDEX + SINGLE_TILE * 4;
}

/// Dynamic shared-memory bytes of the single-tile kernel for `key_bytes`-byte keys.
pub const fn single_smem_bytes(key_bytes: usize) -> usize {
    single_layout::KEYS as usize + SINGLE_TILE as usize * key_bytes
}

/// Number of digit passes for the bit range `begin_bit..end_bit` (0 when empty).
pub const fn passes(begin_bit: u32, end_bit: u32) -> u32 {
    if end_bit <= begin_bit {
        0
    } else {
        (end_bit - begin_bit).div_ceil(RADIX_BITS)
    }
}

/// `(shift, bits)` of digit pass `pass` of the range `begin_bit..end_bit`.
pub const fn pass_bits(begin_bit: u32, end_bit: u32, pass: u32) -> (u32, u32) {
    let shift = begin_bit + pass * RADIX_BITS;
    let left = end_bit - shift;
    (shift, if left < RADIX_BITS { left } else { RADIX_BITS })
}

/// The digit of `key` (its bits `shift..shift + bits`), flipped (`mask - digit`) when
/// descending, so that an ascending sort of the flipped digits is a descending sort.
#[inline(always)]
pub const fn digit(key: u64, shift: u32, bits: u32, descending: bool) -> u32 {
    let mask = (1u32 << bits) - 1;
    let d = (key >> shift) as u32 & mask;
    if descending {
        d ^ mask
    } else {
        d
    }
}

/// Look-back status word: bit 32 of an inclusive prefix.
pub const STATUS_PREFIX_BIT: u64 = 1 << 32;
/// Look-back status words carry the epoch above this bit.
pub const STATUS_EPOCH_SHIFT: u32 = 33;
/// Largest epoch (31 bits); the host zeroes the status buffer and starts again at 1 after it.
pub const MAX_EPOCH: u32 = (1 << 31) - 1;

/// The look-back status word of one (tile, digit): `value` (a count), whether it is the
/// inclusive prefix, and the pass's epoch (see the module docs).
#[inline(always)]
pub const fn status_word(epoch: u32, prefix: bool, value: u32) -> u64 {
    (epoch as u64) << STATUS_EPOCH_SHIFT | if prefix { STATUS_PREFIX_BIT } else { 0 } | value as u64
}

/// Words of the `counters` buffer: the histogram's ticket (word 0) and one tile counter per
/// pass (words `1..=MAX_PASSES`).
pub const COUNTER_WORDS: usize = 1 + MAX_PASSES as usize;

/// Kernel: the digit histograms of every pass of `u32` keys, and their exclusive sums.
pub const KERNEL_SORT_HISTOGRAM_U32: &str = "sort_histogram_u32";
/// Kernel: the digit histograms of every pass of `u64` keys, and their exclusive sums.
pub const KERNEL_SORT_HISTOGRAM_U64: &str = "sort_histogram_u64";
/// Kernel: one onesweep pass over `u32` keys, no values.
pub const KERNEL_SORT_ONESWEEP_U32: &str = "sort_onesweep_u32";
/// Kernel: one onesweep pass over `u32` keys with 4-byte values.
pub const KERNEL_SORT_ONESWEEP_U32_V4: &str = "sort_onesweep_u32_v4";
/// Kernel: one onesweep pass over `u32` keys with 8-byte values.
pub const KERNEL_SORT_ONESWEEP_U32_V8: &str = "sort_onesweep_u32_v8";
/// Kernel: one onesweep pass over `u32` keys with 12-byte values.
pub const KERNEL_SORT_ONESWEEP_U32_V12: &str = "sort_onesweep_u32_v12";
/// Kernel: one onesweep pass over `u32` keys with 16-byte values.
pub const KERNEL_SORT_ONESWEEP_U32_V16: &str = "sort_onesweep_u32_v16";
/// Kernel: one onesweep pass over `u64` keys, no values.
pub const KERNEL_SORT_ONESWEEP_U64: &str = "sort_onesweep_u64";
/// Kernel: one onesweep pass over `u64` keys with 4-byte values.
pub const KERNEL_SORT_ONESWEEP_U64_V4: &str = "sort_onesweep_u64_v4";
/// Kernel: one onesweep pass over `u64` keys with 8-byte values.
pub const KERNEL_SORT_ONESWEEP_U64_V8: &str = "sort_onesweep_u64_v8";
/// Kernel: one onesweep pass over `u64` keys with 12-byte values.
pub const KERNEL_SORT_ONESWEEP_U64_V12: &str = "sort_onesweep_u64_v12";
/// Kernel: one onesweep pass over `u64` keys with 16-byte values.
pub const KERNEL_SORT_ONESWEEP_U64_V16: &str = "sort_onesweep_u64_v16";
/// Kernel: one onesweep pass over `u32` keys with 4-byte values whose full tiles take a body
/// without bounds tests with their values staged in shared memory (by `cp.async` on sm_80+)
/// instead of held in registers; the partial last tile takes the plain body
/// ([`onesweep_staged_smem_bytes`] of shared memory; otherwise as
/// [`KERNEL_SORT_ONESWEEP_U32_V4`]).
pub const KERNEL_SORT_ONESWEEP_U32_V4_STAGED: &str = "sort_onesweep_u32_v4_staged";
/// Kernel: as [`KERNEL_SORT_ONESWEEP_U32_V4_STAGED`] for `u64` keys with 4-byte values.
pub const KERNEL_SORT_ONESWEEP_U64_V4_STAGED: &str = "sort_onesweep_u64_v4_staged";
/// Kernel: the whole sort of at most [`SINGLE_TILE`] `u32` keys in one block.
pub const KERNEL_SORT_SINGLE_U32: &str = "sort_single_tile_u32";
/// Kernel: the whole sort of at most [`SINGLE_TILE`] `u64` keys in one block.
pub const KERNEL_SORT_SINGLE_U64: &str = "sort_single_tile_u64";

/// Every onesweep kernel, by key bytes (4, 8) then value bytes (0, 4, 8, 12, 16).
pub const ONESWEEP_KERNELS: [[&str; 5]; 2] = [
    [
        KERNEL_SORT_ONESWEEP_U32,
        KERNEL_SORT_ONESWEEP_U32_V4,
        KERNEL_SORT_ONESWEEP_U32_V8,
        KERNEL_SORT_ONESWEEP_U32_V12,
        KERNEL_SORT_ONESWEEP_U32_V16,
    ],
    [
        KERNEL_SORT_ONESWEEP_U64,
        KERNEL_SORT_ONESWEEP_U64_V4,
        KERNEL_SORT_ONESWEEP_U64_V8,
        KERNEL_SORT_ONESWEEP_U64_V12,
        KERNEL_SORT_ONESWEEP_U64_V16,
    ],
];

/// The onesweep kernel for `key_bytes` (4 or 8) and `value_bytes` (0, 4, 8, 12 or 16);
/// `None` for any other combination.
pub const fn onesweep_kernel(key_bytes: usize, value_bytes: usize) -> Option<&'static str> {
    let k = match key_bytes {
        4 => 0,
        8 => 1,
        _ => return None,
    };
    if !value_bytes.is_multiple_of(4) || value_bytes > 16 {
        return None;
    }
    Some(ONESWEEP_KERNELS[k][value_bytes / 4])
}

/// The staged onesweep kernel for `key_bytes` and `value_bytes`, where one is built
/// (4-byte values; keys only need none: their kernels already split full tiles inside).
pub const fn onesweep_staged_kernel(key_bytes: usize, value_bytes: usize) -> Option<&'static str> {
    match (key_bytes, value_bytes) {
        (4, 4) => Some(KERNEL_SORT_ONESWEEP_U32_V4_STAGED),
        (8, 4) => Some(KERNEL_SORT_ONESWEEP_U64_V4_STAGED),
        _ => None,
    }
}

/// Status words a batched look-back step loads together (`lookback_batch > 1`).
pub const LOOKBACK_BATCH: u32 = 4;

/// A shape's `staged` or `lookback_batch` entry: chosen per sort by [`onesweep_shape`].
pub const SHAPE_AUTO: u32 = u32::MAX;

/// Onesweep shapes of the sort that `detkit-bench --variants` times (`detkit::tuning`):
/// `(name, staged, lookback_batch)`. `staged` 1 launches the staged kernel
/// ([`onesweep_staged_kernel`]) where one exists, 0 the plain one; `lookback_batch` as in
/// [`SortOnesweepParams`]; [`SHAPE_AUTO`] in either lets [`onesweep_shape`] choose. Entry 0
/// is the default (issue 28, session 12, H100 call P1: docs/benchmarks.md, `pairs`).
pub const SORT_ONESWEEP_VARIANTS: &[(&str, u32, u32)] = &[
    ("onesweep", SHAPE_AUTO, SHAPE_AUTO),
    ("onesweep-lb1", 0, 1),
    ("onesweep-lb4", 0, LOOKBACK_BATCH),
    ("onesweep-staged", 1, 1),
    ("onesweep-staged-lb4", 1, LOOKBACK_BATCH),
];

/// The onesweep launch of one sort under shape `(staged, lookback_batch)`: whether it takes
/// the staged kernel and the look-back batch it passes. [`SHAPE_AUTO`] chooses what call P1
/// measured faster: the staged kernel for `u32` keys with 4-byte values (+2-4 % at 2^20,
/// 2^24 and 2^26; within ±2 % for `u64` keys, which keep the plain kernel); the batched
/// look-back for keys only (+4-10 % at 2^20-2^24, equal at 2^26) and for sorts with values
/// whose pass fits one wave of blocks, `tiles <= resident` (+9-10 % at 2^20; with more
/// tiles it measured 1-4 % slower).
pub const fn onesweep_shape(
    key_bytes: usize,
    value_bytes: usize,
    tiles: u64,
    resident: u64,
    staged: u32,
    lookback_batch: u32,
) -> (bool, u32) {
    let has_staged = onesweep_staged_kernel(key_bytes, value_bytes).is_some();
    let staged = match staged {
        SHAPE_AUTO => has_staged && key_bytes == 4,
        s => has_staged && s != 0,
    };
    let batch = match lookback_batch {
        SHAPE_AUTO => {
            if value_bytes == 0 || tiles <= resident {
                LOOKBACK_BATCH
            } else {
                1
            }
        }
        b => b,
    };
    (staged, batch)
}

/// Parameters of [`KERNEL_SORT_HISTOGRAM_U32`] and [`KERNEL_SORT_HISTOGRAM_U64`].
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SortHistogramParams {
    /// `n` keys (`u64` keys as pairs of words), 16-byte aligned.
    pub keys: DevPtr<u32>,
    /// `MAX_PASSES × RADIX` counters: zero on entry, left zero on exit.
    pub bins: DevPtr<u32>,
    /// `passes × RADIX` outputs: the exclusive sum of each pass's digit counts.
    pub offsets: DevPtr<u32>,
    /// [`COUNTER_WORDS`] words: the block ticket (zero on entry, left zero) and the per-pass
    /// tile counters (zeroed by the last block).
    pub counters: DevPtr<u32>,
    /// Number of keys (`1 ..= 2^32 - 1`).
    pub n: u64,
    /// First bit of the range.
    pub begin_bit: u32,
    /// One past the last bit of the range (`begin_bit < end_bit <= key bits`).
    pub end_bit: u32,
    /// Non-zero: descending (digits flipped).
    pub descending: u32,
    /// Padding (zero).
    pub _pad: u32,
}
crate::kernel_params!(
    SortHistogramParams,
    56,
    [KERNEL_SORT_HISTOGRAM_U32, KERNEL_SORT_HISTOGRAM_U64]
);

/// Parameters of the onesweep kernels (one digit pass).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SortOnesweepParams {
    /// `n` keys read (`u64` keys as pairs of words).
    pub keys_in: DevPtr<u32>,
    /// `n` keys written, in this pass's order.
    pub keys_out: DevPtr<u32>,
    /// `n` values read (`value_bytes / 4` words each; null without values, or null with
    /// 4-byte values: then each key's value is its input index, an argsort's first pass).
    pub values_in: DevPtr<u32>,
    /// `n` values written (null without values).
    pub values_out: DevPtr<u32>,
    /// This pass's `RADIX` digit starts (from the histogram kernel).
    pub offsets: DevPtr<u32>,
    /// `tiles × RADIX` look-back status words ([`status_word`]).
    pub status: DevPtr<u64>,
    /// This pass's tile counter (zero on entry).
    pub tile_counter: DevPtr<u32>,
    /// Number of keys (`1 ..= 2^32 - 1`).
    pub n: u64,
    /// First bit of this pass's digit.
    pub shift: u32,
    /// Bits of this pass's digit (1..=8).
    pub bits: u32,
    /// Non-zero: descending (digits flipped).
    pub descending: u32,
    /// This pass's epoch (`1 ..= MAX_EPOCH`, new for every pass).
    pub epoch: u32,
    /// Look-back predecessors read per step: 0 or 1 one at a time (each read waits for the
    /// last), otherwise [`LOOKBACK_BATCH`] status words loaded together
    /// ([`SORT_ONESWEEP_VARIANTS`]).
    pub lookback_batch: u32,
    /// Padding (zero).
    pub _pad: u32,
}
crate::kernel_params!(
    SortOnesweepParams,
    88,
    [
        KERNEL_SORT_ONESWEEP_U32,
        KERNEL_SORT_ONESWEEP_U32_V4,
        KERNEL_SORT_ONESWEEP_U32_V8,
        KERNEL_SORT_ONESWEEP_U32_V12,
        KERNEL_SORT_ONESWEEP_U32_V16,
        KERNEL_SORT_ONESWEEP_U64,
        KERNEL_SORT_ONESWEEP_U64_V4,
        KERNEL_SORT_ONESWEEP_U64_V8,
        KERNEL_SORT_ONESWEEP_U64_V12,
        KERNEL_SORT_ONESWEEP_U64_V16,
        KERNEL_SORT_ONESWEEP_U32_V4_STAGED,
        KERNEL_SORT_ONESWEEP_U64_V4_STAGED,
    ]
);

/// Parameters of [`KERNEL_SORT_SINGLE_U32`] and [`KERNEL_SORT_SINGLE_U64`].
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SortSingleTileParams {
    /// `n` keys read.
    pub keys_in: DevPtr<u32>,
    /// `n` keys written, sorted.
    pub keys_out: DevPtr<u32>,
    /// `n` values read (`value_words` words each; null when `value_words == 0`, or null with
    /// `value_words == 1`: then each key's value is its input index, an argsort).
    pub values_in: DevPtr<u32>,
    /// `n` values written (null when `value_words == 0`).
    pub values_out: DevPtr<u32>,
    /// Number of keys (`1 ..= SINGLE_TILE`).
    pub n: u64,
    /// First bit of the range.
    pub begin_bit: u32,
    /// One past the last bit of the range (`begin_bit < end_bit <= key bits`).
    pub end_bit: u32,
    /// Non-zero: descending (digits flipped).
    pub descending: u32,
    /// Words per value (0 ..= 4).
    pub value_words: u32,
}
crate::kernel_params!(
    SortSingleTileParams,
    56,
    [KERNEL_SORT_SINGLE_U32, KERNEL_SORT_SINGLE_U64]
);

/// Device code: the upfront histogram kernels.
#[cfg(target_arch = "nvptx64")]
pub mod histogram;
/// Device code: the onesweep pass kernels, key and value access, block ranking.
#[cfg(target_arch = "nvptx64")]
pub mod onesweep;
/// Device code: the single-tile kernels.
#[cfg(target_arch = "nvptx64")]
pub mod single;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_and_shared_memory_fit() {
        for kb in [4usize, 8] {
            for vb in [0usize, 4, 8, 12, 16] {
                let items = onesweep_items(kb, vb);
                assert!((8..=24).contains(&items), "{kb} {vb}: {items}");
                let smem = onesweep_smem_bytes(kb, vb);
                assert!(smem <= 60 * 1024, "{kb} {vb}: {smem}");
                // The launch bounds' blocks fit one multiprocessor's 228 KiB (1 KiB each
                // reserved).
                let blocks = onesweep_min_blocks(vb) as usize;
                assert!(blocks * (smem + 1024) <= 228 * 1024, "{kb} {vb}: {smem}");
                assert_eq!(onesweep_values_offset(kb, vb) % 16, 0);
                assert!(onesweep_kernel(kb, vb).is_some());
                if onesweep_staged_kernel(kb, vb).is_some() {
                    let full = onesweep_staged_smem_bytes(kb, vb);
                    assert!(blocks * (full + 1024) <= 228 * 1024, "{kb} {vb}: {full}");
                    assert_eq!(onesweep_stage_offset(kb, vb) % 16, 0);
                }
            }
        }
        assert_eq!(onesweep_tile(4, 0), 6144);
        assert_eq!(onesweep_tile(8, 4), 4096);
        const { assert!(single_smem_bytes(8) <= 227 * 1024) };
        const { assert!(layout::EXCHANGE.is_multiple_of(16)) };
        const { assert!(layout::TILE_SLOT < layout::EXCHANGE) };
        assert_eq!(onesweep_kernel(4, 6), None);
        assert_eq!(
            onesweep_staged_kernel(8, 4),
            Some(KERNEL_SORT_ONESWEEP_U64_V4_STAGED)
        );
        assert_eq!(onesweep_staged_kernel(4, 8), None);
        // The default shape: staged for u32 pairs only, batched look-back for keys only or
        // one wave.
        let (a, b) = (SHAPE_AUTO, SHAPE_AUTO);
        assert_eq!(onesweep_shape(4, 4, 1000, 396, a, b), (true, 1));
        assert_eq!(onesweep_shape(8, 4, 1000, 396, a, b), (false, 1));
        assert_eq!(
            onesweep_shape(8, 4, 396, 396, a, b),
            (false, LOOKBACK_BATCH)
        );
        assert_eq!(
            onesweep_shape(4, 0, 10_000, 528, a, b),
            (false, LOOKBACK_BATCH)
        );
        assert_eq!(onesweep_shape(4, 8, 10, 396, a, b), (false, LOOKBACK_BATCH));
        assert_eq!(onesweep_shape(8, 4, 10, 396, 1, 1), (true, 1));
        assert_eq!(onesweep_shape(4, 0, 10, 528, 1, 1), (false, 1));
        assert_eq!(onesweep_kernel(2, 0), None);
    }

    #[test]
    fn passes_and_digits() {
        assert_eq!(passes(0, 32), 4);
        assert_eq!(passes(0, 48), 6);
        assert_eq!(passes(3, 20), 3);
        assert_eq!(passes(5, 5), 0);
        assert_eq!(pass_bits(3, 20, 2), (19, 1));
        assert_eq!(digit(0xABCD, 4, 8, false), 0xBC);
        assert_eq!(digit(0xABCD, 4, 8, true), 0xFF - 0xBC);
        assert_eq!(digit(u64::MAX, 63, 1, false), 1);
        assert_eq!(status_word(3, true, 7) >> STATUS_EPOCH_SHIFT, 3);
        assert_eq!(status_word(MAX_EPOCH, false, u32::MAX) as u32, u32::MAX);
    }
}
