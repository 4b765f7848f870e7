//! Prefix sums: warp scan, block scan, and the single-pass device-wide scan.
//!
//! Arithmetic is modular (wrapping), as in CUB: a sum that overflows `u32` wraps.
//!
//! # Layers (CUB's `WarpScan` → `BlockScan` → `DeviceScan`)
//! - [`device::warp_inclusive_sum`], [`device::warp_exclusive_sum`], [`device::warp_reduce_sum`]:
//!   five shuffle steps (Hillis–Steele in registers), no shared memory, no barrier.
//! - [`device::BlockScan`]: any block size that is a multiple of 32 up to 1024. Each warp
//!   scans in registers; lane 31 of each warp writes its warp total to shared memory
//!   (`nwarps` words, no tile of `2 * blockDim` as the seed's `intraBlockScan` uses, and no
//!   bank conflicts: one word per warp); warp 0 scans the warp totals; every thread adds its
//!   warp's prefix. Two barriers.
//! - Device scan, single pass with decoupled look-back (Merrill & Garland 2016): block `b`
//!   scans tile `b` (blocks start in index order, as CUB relies on), loads `ITEMS` values per
//!   thread with coalesced 16-byte loads, scans the tile, publishes its aggregate (flag `A`), looks back over the
//!   predecessors' published values with one warp, 32 at a time, until it meets an inclusive
//!   prefix (flag `P`), publishes its own inclusive prefix and writes its output. Input is read
//!   once and output written once: `2n` words of traffic, the copy's.
//!
//! # Worked example
//! input `[3, 1, 4, 1, 5]`: exclusive sum `[0, 3, 4, 8, 9]`, inclusive sum `[3, 4, 8, 9, 14]`.
//!
//! # Tile status protocol
//! For 4-byte values (CUB's choice) flag and value share one 64-bit word per tile, written and
//! read with single 64-bit relaxed device-scope accesses: no fence on the critical path.
//! For 8-byte values:
//! per tile `t`: `flags[t]` (0 = not ready, 1 = aggregate, 2 = inclusive prefix),
//! `aggregates[t]`, `inclusive[t]`. A value is written (relaxed, device scope) before its flag
//! is released (`st.release.gpu`); a reader acquires the flag (`ld.acquire.gpu`) before it
//! reads the value (relaxed, device scope), so it sees the value that the flag announces.
//! Aggregate and inclusive values have separate slots, so a reader that saw flag 1 never reads
//! an inclusive value by mistake. The host zeroes `flags` (2 words per tile) before a launch.

use crate::params::DevPtr;

/// Kernel: block-wide scan of each block's `blockDim` elements (test and building block).
pub const KERNEL_BLOCK_SCAN_U32: &str = "scan_block_u32";
/// Kernel: device-wide inclusive/exclusive sum of `u32`.
pub const KERNEL_DEVICE_SCAN_U32: &str = "scan_device_u32";
/// Kernel: device-wide inclusive/exclusive sum of `u64`.
pub const KERNEL_DEVICE_SCAN_U64: &str = "scan_device_u64";

/// Threads per block of the device scan.
pub const DEVICE_SCAN_THREADS: u32 = 256;
/// Items per thread of the device scan, `u32` (96 bytes per thread; 24 measured 0.91x CUB at
/// 2^28 on an H100 against 0.84x with 16 and 0.81x with 32, `docs/benchmarks.md`).
pub const DEVICE_SCAN_ITEMS_U32: u32 = 24;
/// Items per thread of the device scan, `u64` (64 bytes per thread).
pub const DEVICE_SCAN_ITEMS_U64: u32 = 8;

/// Tile shapes of the `u32` device scan `(kernel, threads per block, items per thread)`
/// that `detkit-bench --variants` times (`detkit::tuning`); entry 0 is the default. Issue 28
/// measured four more on an H100 (a lean 256 × 24 at 5 blocks per SM, 128 × 24 at 10, 128 ×
/// 16, 192 × 24): none faster beyond noise (`docs/benchmarks.md`, branch `cubgap`), removed.
pub const SCAN_U32_VARIANTS: &[(&str, u32, u32)] = &[(
    KERNEL_DEVICE_SCAN_U32,
    DEVICE_SCAN_THREADS,
    DEVICE_SCAN_ITEMS_U32,
)];

/// Nanoseconds a look-back warp sleeps before it polls a window of unpublished predecessors
/// again (`nanosleep`); the device scans take theirs from their parameters.
pub const LOOKBACK_SLEEP_NS: u32 = 32;

/// Look-back sleeps `("nanosleep", ns, 0)` of the device scans that `detkit-bench
/// --variants` times (`detkit::tuning`); entry 0 is the default.
pub const LOOKBACK_NS_VARIANTS: &[(&str, u32, u32)] = &[
    ("nanosleep", LOOKBACK_SLEEP_NS, 0),
    ("nanosleep", 0, 0),
    ("nanosleep", 200, 0),
    ("nanosleep", 1000, 0),
];

/// Tile status flag: not yet published.
pub const STATUS_INVALID: u32 = 0;
/// Tile status flag: the tile's own aggregate is published.
pub const STATUS_AGGREGATE: u32 = 1;
/// Tile status flag: the inclusive prefix up to and including the tile is published.
pub const STATUS_PREFIX: u32 = 2;

/// Largest block size of [`device::BlockScan`].
pub const MAX_BLOCK_THREADS: u32 = 1024;

/// Shared-memory bytes of a [`device::BlockScan`] over values of `value_bytes` bytes:
/// 32 warp prefixes plus the block total.
pub const fn block_scan_smem_bytes(value_bytes: usize) -> usize {
    33 * value_bytes
}

/// Shared-memory bytes of the device scan kernel over values of `value_bytes` bytes.
/// Block-scan storage and the tile's exclusive prefix, padded to 16 bytes.
pub const fn device_scan_smem_bytes(value_bytes: usize) -> usize {
    let b = block_scan_smem_bytes(value_bytes) + value_bytes;
    b.div_ceil(16) * 16
}

/// Elements per tile of the device scan for a value type of `value_bytes` bytes.
pub const fn device_scan_tile(value_bytes: usize) -> u64 {
    let items = if value_bytes == 8 {
        DEVICE_SCAN_ITEMS_U64
    } else {
        DEVICE_SCAN_ITEMS_U32
    };
    (DEVICE_SCAN_THREADS * items) as u64
}

/// Number of tiles (blocks) the device scan launches for `n` elements.
pub const fn device_scan_tiles(n: u64, value_bytes: usize) -> u64 {
    n.div_ceil(device_scan_tile(value_bytes))
}

/// Scan direction flag passed to the device scan kernels.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanKind {
    /// `out[i] = in[0] + ... + in[i-1]`, `out[0] = 0`.
    Exclusive = 0,
    /// `out[i] = in[0] + ... + in[i]`.
    Inclusive = 1,
}

/// Device code: warp and block collectives and the device scan kernels.
/// Parameters of the `scan_device_u32` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ScanDeviceU32Params {
    pub input: DevPtr<u32>,
    pub output: DevPtr<u32>,
    pub n: u64,
    pub flags: DevPtr<u32>,
    pub aggregates: DevPtr<u32>,
    pub inclusive: DevPtr<u32>,
    pub kind: u32,
    /// Nanoseconds a waiting look-back sleeps between polls ([`LOOKBACK_SLEEP_NS`]).
    pub lookback_ns: u32,
}
crate::kernel_params!(ScanDeviceU32Params, 56, ["scan_device_u32"]);

/// Parameters of the `scan_device_u64` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ScanDeviceU64Params {
    pub input: DevPtr<u64>,
    pub output: DevPtr<u64>,
    pub n: u64,
    pub flags: DevPtr<u32>,
    pub aggregates: DevPtr<u64>,
    pub inclusive: DevPtr<u64>,
    pub kind: u32,
    /// As in [`ScanDeviceU32Params`].
    pub lookback_ns: u32,
}
crate::kernel_params!(ScanDeviceU64Params, 56, ["scan_device_u64"]);

/// Parameters of the `scan_block_u32` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ScanBlockU32Params {
    pub input: DevPtr<u32>,
    pub output: DevPtr<u32>,
    pub totals: DevPtr<u32>,
    pub n: u64,
    pub kind: u32,
    pub _pad0: u32,
}
crate::kernel_params!(ScanBlockU32Params, 40, ["scan_block_u32"]);

#[cfg(target_arch = "nvptx64")]
pub mod block;
#[cfg(target_arch = "nvptx64")]
pub mod lookback;
#[cfg(target_arch = "nvptx64")]
pub mod single_pass;
#[cfg(target_arch = "nvptx64")]
pub mod warp;

/// Device code: every item of the stage files above, under one path.
#[cfg(target_arch = "nvptx64")]
pub mod device {
    pub use super::block::*;
    pub use super::lookback::*;
    pub use super::single_pass::*;
    pub use super::warp::*;
}
