//! Bucket container in the style of CMS `HistoContainer` / `OneToManyAssoc`.
//!
//! Items (element indices `i` with a key `keys[i] < nbins`) are grouped by key:
//! 1. **count** the items per bin,
//! 2. **finalize**: exclusive scan of the counts gives `offsets` (`nbins + 1` entries),
//! 3. **fill**: each item is written to `content[offsets[key] ..offsets[key + 1]]`.
//!
//! Afterwards the items of bin `b` are `content[offsets[b]..offsets[b + 1]]`.
//!
//! **Order inside a bin.** The plain fill takes positions with an `atomicAdd` on a per-bin
//! cursor (as CMS does), so the order of items inside a bin depends on thread timing and is
//! *not* deterministic; only the set of items per bin is. The **stable** variants put the
//! items of each bin in increasing index order, identical on every run and equal to the CPU
//! oracle element for element, at some extra cost.
//!
//! Two scopes:
//! - **device-wide** (the seeding spacepoint grid): count with the histogram kernel, finalize
//!   with the device scan, fill with [`KERNEL_BUCKET_FILL`]. The stable device-wide variant
//!   splits the input into `tiles` contiguous tiles, one warp each; it counts per (bin, tile)
//!   into a bin-major matrix, scans the whole matrix (which yields, for each bin and tile, the
//!   position of the tile's first item of that bin), and fills each tile in order, ranking
//!   equal keys inside a warp with `match.any`. The matrix holds `nbins * tiles` words.
//! - **block-level** (findClus, per module): one block per segment of consecutive items; counts,
//!   offsets and (up to `capacity` items) content live in shared memory. A segment larger than
//!   `capacity` falls back to building its content directly in global memory (the result is
//!   the same; the launcher reports how many segments took the fallback).
//!
//! # Worked example
//! keys `[2, 0, 2, 1, 0]`, `nbins = 3`: counts `[2, 1, 2]`, offsets `[0, 2, 3, 5]`;
//! stable content `[1, 4, 3, 0, 2]` (bin 0: items 1, 4; bin 1: item 3; bin 2: items 0, 2).

use crate::params::DevPtr;

/// Kernel: device-wide fill (non-deterministic order inside a bin).
pub const KERNEL_BUCKET_FILL: &str = "bucket_fill";
/// Kernel: device-wide stable count into the (bin, tile) matrix.
pub const KERNEL_BUCKET_COUNT_STABLE: &str = "bucket_count_stable";
/// Kernel: per-bin offsets from the scanned (bin, tile) matrix.
pub const KERNEL_BUCKET_STABLE_OFFSETS: &str = "bucket_stable_offsets";
/// Kernel: device-wide stable fill.
pub const KERNEL_BUCKET_FILL_STABLE: &str = "bucket_fill_stable";
/// Kernel: block-level container, one block per segment.
pub const KERNEL_BUCKET_BLOCK_FILL: &str = "bucket_block_fill";

/// Threads per block of the device-wide bucket kernels.
pub const BUCKET_THREADS: u32 = 256;
/// Largest (bin, tile) matrix of the stable device-wide variant, in words (64 MiB).
pub const BUCKET_STABLE_MATRIX_MAX: u64 = 1 << 24;

/// Tiling of the stable device-wide variant: `(tiles, items_per_tile)`. Aims at 256 items
/// per warp-tile, fewer tiles when the matrix would exceed [`BUCKET_STABLE_MATRIX_MAX`].
/// `items_per_tile` is a multiple of 32 and `tiles * items_per_tile >= n`.
pub const fn bucket_stable_tiling(n: u64, nbins: u32) -> (u32, u32) {
    let want = n.div_ceil(256);
    let cap = BUCKET_STABLE_MATRIX_MAX / if nbins == 0 { 1 } else { nbins as u64 };
    let mut tiles = if want < cap { want } else { cap };
    if tiles == 0 {
        tiles = 1;
    }
    let per = n.div_ceil(tiles).div_ceil(32) * 32;
    let per = if per == 0 { 32 } else { per };
    let t = n.div_ceil(per);
    (if t == 0 { 1 } else { t as u32 }, per as u32)
}

/// Shared-memory words of the block-level container before the content area:
/// `offsets[nbins + 1]`, `cursor[nbins]`, block-scan storage (33 words), padded to 4 words.
pub const fn block_bucket_header_words(nbins: u32) -> u32 {
    (2 * nbins + 1 + 33).div_ceil(4) * 4
}

/// Shared-memory bytes of the block-level container with room for `capacity` items.
pub const fn block_bucket_smem_bytes(nbins: u32, capacity: u32) -> usize {
    (block_bucket_header_words(nbins) + capacity) as usize * 4
}

/// Device code.
/// Parameters of the `bucket_fill` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketFillParams {
    pub keys: DevPtr<u32>,
    pub n: u64,
    pub cursor: DevPtr<u32>,
    pub content: DevPtr<u32>,
    pub nbins: u32,
    pub _pad0: u32,
}
crate::kernel_params!(BucketFillParams, 40, ["bucket_fill"]);

/// Parameters of the `bucket_count_stable` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketCountStableParams {
    pub keys: DevPtr<u32>,
    pub n: u64,
    pub matrix: DevPtr<u32>,
    pub out_of_range: DevPtr<u32>,
    pub first_out_of_range: DevPtr<u32>,
    pub nbins: u32,
    pub tiles: u32,
    pub per: u32,
    pub _pad0: u32,
}
crate::kernel_params!(BucketCountStableParams, 56, ["bucket_count_stable"]);

/// Parameters of the `bucket_stable_offsets` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketStableOffsetsParams {
    pub scanned: DevPtr<u32>,
    pub offsets: DevPtr<u32>,
    pub tiles: u32,
    pub nbins: u32,
    pub total: u32,
    pub _pad0: u32,
}
crate::kernel_params!(BucketStableOffsetsParams, 32, ["bucket_stable_offsets"]);

/// Parameters of the `bucket_fill_stable` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketFillStableParams {
    pub keys: DevPtr<u32>,
    pub n: u64,
    pub matrix: DevPtr<u32>,
    pub content: DevPtr<u32>,
    pub nbins: u32,
    pub tiles: u32,
    pub per: u32,
    pub _pad0: u32,
}
crate::kernel_params!(BucketFillStableParams, 48, ["bucket_fill_stable"]);

/// Parameters of the `bucket_block_fill` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketBlockFillParams {
    pub keys: DevPtr<u32>,
    pub seg_offsets: DevPtr<u32>,
    pub out_offsets: DevPtr<u32>,
    pub out_content: DevPtr<u32>,
    pub fallbacks: DevPtr<u32>,
    pub first_out_of_range: DevPtr<u32>,
    pub nsegs: u32,
    pub nbins: u32,
    pub capacity: u32,
    pub stable: u32,
}
crate::kernel_params!(BucketBlockFillParams, 64, ["bucket_block_fill"]);

#[cfg(target_arch = "nvptx64")]
pub mod block;
#[cfg(target_arch = "nvptx64")]
pub mod fill;
#[cfg(target_arch = "nvptx64")]
pub mod stable;

/// Device code: every item of the stage files above, under one path.
#[cfg(target_arch = "nvptx64")]
pub mod device {
    pub use super::block::*;
    pub use super::fill::*;
    pub use super::stable::*;
}
