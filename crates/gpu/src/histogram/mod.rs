//! Device histogram of `u32` keys into `nbins` bins: key `k < nbins` counts in bin `k`.
//!
//! Keys `>= nbins` are not counted in any bin; they are counted in `out_of_range`, and the
//! index of the first one is reported (CUB drops them silently; a detector id out of range
//! is a user error we want to name).
//!
//! # Two strategies
//! - **Shared** (small `nbins`): each block keeps `copies` sub-histograms in shared memory,
//!   one per group of warps (warp `w` uses copy `w % copies`), so warps rarely collide on the
//!   same counter; keys are read with 16-byte loads, four of each lane in flight (the grid at
//!   most 4 blocks per SM); within a warp, lanes holding the same key are merged with
//!   `match.any` (when asked) and only the lowest lane adds their count (skewed data, where
//!   most keys are equal, then costs one atomic per warp instead of 32). At the end each block
//!   adds its sums to the global histogram, one atomic per non-empty bin.
//! - **Global** (large `nbins`): the same loop, adding directly to global memory.
//!
//! # Worked example
//! keys `[0, 3, 3, 7, 1]`, `nbins = 4`: histogram `[1, 1, 0, 2]`, `out_of_range = 1`
//! (the key 7), first out-of-range index 3.

use crate::params::DevPtr;

/// Kernel: shared-memory privatised histogram.
pub const KERNEL_HISTOGRAM_SHARED: &str = "histogram_fill_shared";
/// Kernel: global-atomic histogram.
pub const KERNEL_HISTOGRAM_GLOBAL: &str = "histogram_fill_global";

/// 16-byte loads of each lane in flight in the shared kernel (4 keys each).
pub const HISTOGRAM_LOADS_IN_FLIGHT: usize = 4;
/// Blocks per multiprocessor at most of the shared kernel (one wave of 512-thread blocks at
/// 16 KiB of sub-histograms each; the grid walks the keys grid-stride).
pub const HISTOGRAM_SHARED_BLOCKS_PER_SM: u32 = 4;

/// Shapes of the shared strategy `(kernel, 16-byte loads of each lane in flight, blocks per
/// multiprocessor at most)` that `detkit-bench --variants` times (`detkit::tuning`); entry 0
/// is the default. Issue 28 measured on an H100: 1, 2 or 4 loads in flight at 8 or 4 blocks
/// per SM; 4 at 4 was fastest from 2^22 to 2^28 (`docs/benchmarks.md`, branch `cubgap`).
pub const HISTOGRAM_SHARED_VARIANTS: &[(&str, u32, u32)] = &[(
    KERNEL_HISTOGRAM_SHARED,
    HISTOGRAM_LOADS_IN_FLIGHT as u32,
    HISTOGRAM_SHARED_BLOCKS_PER_SM,
)];

/// Threads per block of the histogram kernels.
pub const HISTOGRAM_THREADS: u32 = 512;
/// Shared memory a histogram block may use (the default per-block limit).
pub const HISTOGRAM_SMEM_LIMIT: usize = 48 * 1024;
/// Largest `nbins` for the shared strategy (one copy fills the limit).
pub const HISTOGRAM_SHARED_MAX_BINS: u32 = (HISTOGRAM_SMEM_LIMIT / 4) as u32;

/// Number of per-block sub-histograms for `nbins` bins: one per warp when they fit.
pub const fn histogram_copies(nbins: u32) -> u32 {
    let warps = HISTOGRAM_THREADS / 32;
    let fit = (HISTOGRAM_SMEM_LIMIT / (nbins as usize * 4)) as u32;
    if fit < warps {
        if fit == 0 {
            1
        } else {
            fit
        }
    } else {
        warps
    }
}

/// Shared-memory bytes of the shared strategy.
pub const fn histogram_smem_bytes(nbins: u32) -> usize {
    histogram_copies(nbins) as usize * nbins as usize * 4
}

/// Encodes the first out-of-range index for an `atomicMax` on a zeroed word
/// (`u32::MAX - index`: the smallest index gives the largest code).
#[inline(always)]
pub const fn encode_first_index(idx: u32) -> u32 {
    u32::MAX - idx
}

/// Decodes [`encode_first_index`]: `None` when no index was recorded.
#[inline(always)]
pub const fn decode_first_index(code: u32) -> Option<u32> {
    if code == 0 {
        None
    } else {
        Some(u32::MAX - code)
    }
}

/// Parameters of [`KERNEL_HISTOGRAM_SHARED`] and [`KERNEL_HISTOGRAM_GLOBAL`].
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct HistogramFillParams {
    /// `n` keys, 16-byte aligned.
    pub keys: DevPtr<u32>,
    /// Number of keys (`< 2^32`).
    pub n: u64,
    /// `nbins` counters (added to).
    pub hist: DevPtr<u32>,
    /// One counter of keys `>= nbins` (added to).
    pub out_of_range: DevPtr<u32>,
    /// One word: [`encode_first_index`] of the first key `>= nbins` (atomic max; zero = none).
    pub first_out_of_range: DevPtr<u32>,
    /// Number of bins.
    pub nbins: u32,
    /// Sub-histograms per block ([`histogram_copies`]; the shared kernel only).
    pub copies: u32,
    /// Non-zero: merge equal keys of a warp (`match.any`) before the atomic.
    pub aggregate: u32,
    /// Padding (zero).
    pub _pad: u32,
}
crate::kernel_params!(
    HistogramFillParams,
    56,
    [KERNEL_HISTOGRAM_SHARED, KERNEL_HISTOGRAM_GLOBAL]
);

/// Device code: the fill kernels and the key loop the bucket container shares.
#[cfg(target_arch = "nvptx64")]
pub mod fill;
