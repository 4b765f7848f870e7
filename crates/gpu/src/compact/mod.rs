//! Order-preserving stream compaction (CUB's `DeviceSelect`).
//!
//! The selected items appear in the output in input order, so the result is the same on
//! every run. (The PET seed's energy filter appends each block's survivors with an
//! `atomicAdd` on a global counter: block order, and so output order, changes from run to
//! run.) It is a single pass with the same decoupled look-back as the device scan: each
//! block counts its selected items, scans the counts across the block, learns the number
//! selected by all earlier tiles by look-back, and writes its survivors at their final
//! positions. The last tile writes the total.
//!
//! # Worked example
//! input `[5, 2, 8, 1, 9]`, select `3 <= x < 9`: output `[5, 8]`, `num_selected = 2`.

use crate::params::DevPtr;

/// Kernel: keep `x` with `lo <= x < hi`.
pub const KERNEL_SELECT_RANGE_U32: &str = "compact_select_range_u32";
/// Kernel: keep `x[i]` where `flags[i] != 0`.
pub const KERNEL_SELECT_FLAGGED_U32: &str = "compact_select_flagged_u32";

/// Threads per block of the compaction kernels.
pub const SELECT_THREADS: u32 = 256;
/// Items per thread of the compaction kernels (24 measured 0.77x CUB at 2^28 on an H100, 16
/// 0.71x, `docs/benchmarks.md`).
pub const SELECT_ITEMS: u32 = 24;
/// Items per tile (block).
pub const SELECT_TILE: u64 = (SELECT_THREADS * SELECT_ITEMS) as u64;

/// Byte offset of the staging area (the tile's selected items, compacted, before they are
/// written out) in the compaction kernels' shared memory: after the device scan's layout.
pub const SELECT_STAGE_OFFSET: usize = crate::scan::device_scan_smem_bytes(4);

/// Shared-memory bytes of the compaction kernels: the device scan's layout (`u32` counts),
/// then [`SELECT_TILE`] words of staging.
pub const fn select_smem_bytes() -> usize {
    select_smem_bytes_for(SELECT_TILE)
}

/// Shared-memory bytes of a compaction kernel whose tiles hold `tile` items.
pub const fn select_smem_bytes_for(tile: u64) -> usize {
    SELECT_STAGE_OFFSET + tile as usize * 4
}

/// Tile shapes of the range select `(kernel, threads per block, items per thread)` that
/// `detkit-bench --variants` times (`detkit::tuning`); entry 0 is the default. Issue 28
/// measured four on an H100 and kept the lean 256 × 24 at 4 blocks per SM (0.84x CUB at
/// 2^28 against 0.78x); 128 × 24 (8 blocks), 128 × 16 (10) and 192 × 24 (5) were slower
/// (`docs/benchmarks.md`, branch `cubgap`), removed.
pub const SELECT_RANGE_VARIANTS: &[(&str, u32, u32)] =
    &[(KERNEL_SELECT_RANGE_U32, SELECT_THREADS, SELECT_ITEMS)];

/// Number of tiles (blocks) for `n` items.
pub const fn select_tiles(n: u64) -> u64 {
    n.div_ceil(SELECT_TILE)
}

/// The range predicate of [`KERNEL_SELECT_RANGE_U32`], shared with the CPU oracle.
#[inline(always)]
pub fn in_range(x: u32, lo: u32, hi: u32) -> bool {
    lo <= x && x < hi
}

/// Device code.
/// Parameters of the `compact_select_range_u32` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CompactSelectRangeU32Params {
    pub input: DevPtr<u32>,
    pub n: u64,
    pub output: DevPtr<u32>,
    pub num_selected: DevPtr<u32>,
    pub flags: DevPtr<u32>,
    pub aggregates: DevPtr<u32>,
    pub inclusive: DevPtr<u32>,
    pub lo: u32,
    pub hi: u32,
}
crate::kernel_params!(
    CompactSelectRangeU32Params,
    64,
    ["compact_select_range_u32"]
);

/// Parameters of the `compact_select_flagged_u32` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CompactSelectFlaggedU32Params {
    pub input: DevPtr<u32>,
    pub selection: DevPtr<u8>,
    pub n: u64,
    pub output: DevPtr<u32>,
    pub num_selected: DevPtr<u32>,
    pub flags: DevPtr<u32>,
    pub aggregates: DevPtr<u32>,
    pub inclusive: DevPtr<u32>,
}
crate::kernel_params!(
    CompactSelectFlaggedU32Params,
    64,
    ["compact_select_flagged_u32"]
);

#[cfg(target_arch = "nvptx64")]
pub mod select;

/// Device code: every item of the stage files above, under one path.
#[cfg(target_arch = "nvptx64")]
pub mod device {
    pub use super::select::*;
}
