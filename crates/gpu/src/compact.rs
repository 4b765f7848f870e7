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
/// Items per thread of the compaction kernels.
pub const SELECT_ITEMS: u32 = 16;
/// Items per tile (block).
pub const SELECT_TILE: u64 = (SELECT_THREADS * SELECT_ITEMS) as u64;

/// Shared-memory bytes of the compaction kernels (the device scan's layout, `u32` counts).
pub const fn select_smem_bytes() -> usize {
    crate::scan::device_scan_smem_bytes(4)
}

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
pub mod device {
    use super::*;
    use crate::intrinsics as i;
    use crate::scan::device::{
        current_tile, striped_index, tile_exclusive_prefix, tile_smem, warp_striped_exclusive,
        BlockScan, StripedTile, TileStatus,
    };

    /// Selects the items of one tile for which `pred(index, value)` holds and writes them at
    /// their final, order-preserving positions. Called by every thread of the block.
    ///
    /// # Safety
    /// Launch contract of [`compact_select_range_u32`].
    #[inline(always)]
    pub unsafe fn select_tile<const N: usize, F: Fn(u64, u32) -> bool>(
        input: *const u32,
        n: u64,
        output: *mut u32,
        num_selected: *mut u32,
        status: TileStatus<u32>,
        pred: F,
    ) {
        let (scan_storage, prefix_slot) = tile_smem::<u32>();
        let tile = current_tile();
        let warp_start = tile as u64 * SELECT_TILE + i::warp_id() as u64 * 32 * N as u64;
        let mut items = [0u32; N];
        // SAFETY: launch contract.
        unsafe { u32::load_striped(input, warp_start, n, &mut items) };
        let mut keep = [0u32; N];
        let mut k = 0;
        while k < N {
            let idx = striped_index(warp_start, 4, k);
            keep[k] = (idx < n && pred(idx, items[k])) as u32;
            k += 1;
        }
        // Positions among the warp's selected items, then among the tile's.
        let mut pos = keep;
        let warp_total = warp_striped_exclusive(&mut pos);
        // SAFETY: storage is ours.
        let bs = unsafe { BlockScan::new(scan_storage) };
        let (warp_prefix, tile_total) = bs.exclusive_sum_warps(warp_total);
        // SAFETY: status holds one entry per tile.
        let tile_prefix = unsafe { tile_exclusive_prefix(&status, tile, tile_total, prefix_slot) };
        let base = tile_prefix.wrapping_add(warp_prefix);
        let mut k = 0;
        while k < N {
            if keep[k] != 0 {
                // SAFETY: the position is below the number selected <= n; output valid for n.
                unsafe { output.add((base + pos[k]) as usize).write(items[k]) };
            }
            k += 1;
        }
        if tile == i::grid_dim_x() - 1 && i::thread_idx_x() == 0 {
            // SAFETY: one u32.
            unsafe { num_selected.write(tile_prefix.wrapping_add(tile_total)) };
        }
    }

    /// Keeps `input[i]` with `lo <= input[i] < hi`, in input order.
    ///
    /// # Safety
    /// `blockDim.x == SELECT_THREADS`, `gridDim.x == select_tiles(n) >= 1`,
    /// `select_smem_bytes()` bytes of shared memory; `n < 2^32`; `input` valid for `n`,
    /// 16-byte aligned; `output` valid for `n`, not overlapping `input`; `flags` valid for
    /// `2 * gridDim.x` zeroed words, `aggregates`, `inclusive` for `gridDim.x`;
    /// `num_selected` one `u32`.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn compact_select_range_u32(p: CompactSelectRangeU32Params) {
        let (input, n, lo, hi, output, num_selected, flags, aggregates, inclusive) = (
            p.input.ptr(),
            p.n,
            p.lo,
            p.hi,
            p.output.ptr_mut(),
            p.num_selected.ptr_mut(),
            p.flags.ptr_mut(),
            p.aggregates.ptr_mut(),
            p.inclusive.ptr_mut(),
        );
        let status = TileStatus {
            flags,
            aggregates,
            inclusive,
        };
        // SAFETY: forwarded launch contract.
        unsafe {
            select_tile::<{ SELECT_ITEMS as usize }, _>(
                input,
                n,
                output,
                num_selected,
                status,
                |_, x| in_range(x, lo, hi),
            )
        }
    }

    /// Keeps `input[i]` where `selection[i] != 0`, in input order.
    ///
    /// # Safety
    /// As [`compact_select_range_u32`], and `selection` valid for `n` bytes.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn compact_select_flagged_u32(p: CompactSelectFlaggedU32Params) {
        let (input, selection, n, output, num_selected, flags, aggregates, inclusive) = (
            p.input.ptr(),
            p.selection.ptr(),
            p.n,
            p.output.ptr_mut(),
            p.num_selected.ptr_mut(),
            p.flags.ptr_mut(),
            p.aggregates.ptr_mut(),
            p.inclusive.ptr_mut(),
        );
        let status = TileStatus {
            flags,
            aggregates,
            inclusive,
        };
        // SAFETY: forwarded launch contract; the predicate reads selection[idx] with idx < n.
        unsafe {
            select_tile::<{ SELECT_ITEMS as usize }, _>(
                input,
                n,
                output,
                num_selected,
                status,
                |idx, _| selection.add(idx as usize).read() != 0,
            )
        }
    }
}
