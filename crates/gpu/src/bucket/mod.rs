//! Bucket container in the style of CMS `HistoContainer` / `OneToManyAssoc`.
//!
//! Items (element indices `i` with a key `keys[i] < nbins`) are grouped by key: the items of
//! bin `b` are `content[offsets[b]..offsets[b + 1]]` (`nbins + 1` offsets).
//!
//! Two scopes:
//! - **device-wide** (the seeding spacepoint grid): a **counting sort on the radix sort**
//!   (`crate::sort`): the keys are sorted by their low `bits = ceil(log2(nbins))` bits with
//!   their input indices as values (an argsort: the first pass makes the indices itself, no
//!   index array is read), one onesweep pass per 8 bits (one pass up to 256 bins, two up to
//!   65,536); the sorted indices are the content, and one pass over the sorted keys
//!   ([`KERNEL_BUCKET_OFFSETS_SORTED`]) writes the offsets and finds keys out of range. The
//!   radix sort is stable, so the items of a bin are in increasing index order, equal to the
//!   CPU oracle element for element. `Unordered` takes the same path (it only promises the
//!   set of items per bin, and the stable order is never slower here: issue 11).
//! - **block-level** (findClus, per module): one block per segment of consecutive items; counts,
//!   offsets and (up to `capacity` items) content live in shared memory. A segment larger than
//!   `capacity` falls back to building its content directly in global memory (the result is
//!   the same; the launcher reports how many segments took the fallback).
//!
//! # Worked example
//! keys `[2, 0, 2, 1, 0]`, `nbins = 3`: counts `[2, 1, 2]`, offsets `[0, 2, 3, 5]`;
//! stable content `[1, 4, 3, 0, 2]` (bin 0: items 1, 4; bin 1: item 3; bin 2: items 0, 2).

use crate::params::DevPtr;

/// Kernel: block-level container, one block per segment.
pub const KERNEL_BUCKET_BLOCK_FILL: &str = "bucket_block_fill";

/// Shared-memory words of the block-level container before the content area:
/// `offsets[nbins + 1]`, `cursor[nbins]`, block-scan storage (33 words), padded to 4 words.
pub const fn block_bucket_header_words(nbins: u32) -> u32 {
    (2 * nbins + 1 + 33).div_ceil(4) * 4
}

/// Shared-memory bytes of the block-level container with room for `capacity` items.
pub const fn block_bucket_smem_bytes(nbins: u32, capacity: u32) -> usize {
    (block_bucket_header_words(nbins) + capacity) as usize * 4
}

/// Kernel: device-wide offsets from the keys sorted by bin (the radix sort's output).
pub const KERNEL_BUCKET_OFFSETS_SORTED: &str = "bucket_offsets_sorted";
/// Threads per block of [`KERNEL_BUCKET_OFFSETS_SORTED`].
pub const BUCKET_OFFSETS_THREADS: u32 = 256;

/// Parameters of the `bucket_offsets_sorted` kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketOffsetsSortedParams {
    /// `n` keys, stably sorted by their bits `0..bits` (`mask = 2^bits - 1`).
    pub keys: DevPtr<u32>,
    /// The input index of each sorted key (the sort's values).
    pub index: DevPtr<u32>,
    /// `nbins + 1` offsets written: `offsets[b]` = the first position whose key is `>= b`.
    pub offsets: DevPtr<u32>,
    /// One word, `u32::MAX` on entry: lowered (atomic min) to the smallest input index of a
    /// key `>= nbins`.
    pub first_bad: DevPtr<u32>,
    /// Number of keys (`1 ..= 2^32 - 1`).
    pub n: u64,
    /// Number of bins.
    pub nbins: u32,
    /// `2^bits - 1`: the bits the keys were sorted by.
    pub mask: u32,
}
crate::kernel_params!(BucketOffsetsSortedParams, 48, ["bucket_offsets_sorted"]);

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
pub mod sorted;

/// Device code: every item of the stage files above, under one path.
#[cfg(target_arch = "nvptx64")]
pub mod device {
    pub use super::block::*;
    pub use super::sorted::*;
}
