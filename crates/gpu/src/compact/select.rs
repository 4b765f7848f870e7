//! Order-preserving selection: the tile routine and the two select kernels.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::{
    current_tile, striped_index, tile_exclusive_prefix, tile_smem, warp_striped_exclusive,
    BlockScan, StripedTile, TileStatus,
};
use crate::scan::LOOKBACK_SLEEP_NS;

/// Selects the items of one tile for which `pred(index, value)` holds and writes them at
/// their final, order-preserving positions. Called by every thread of the block. With
/// `LEAN` the predicate is evaluated again when staging instead of keeping its `N` results
/// in registers through the block scan (for cheap predicates).
///
/// # Safety
/// Launch contract of [`compact_select_range_u32`].
#[inline(always)]
pub unsafe fn select_tile<
    const N: usize,
    const THREADS: u32,
    const LEAN: bool,
    F: Fn(u64, u32) -> bool,
>(
    input: *const u32,
    n: u64,
    output: *mut u32,
    num_selected: *mut u32,
    status: TileStatus<u32>,
    pred: F,
) {
    let (scan_storage, prefix_slot) = tile_smem::<u32>();
    let tile = current_tile();
    let warp_start =
        tile as u64 * (THREADS as u64 * N as u64) + i::warp_id() as u64 * 32 * N as u64;
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
    // Stage the selected items, compacted in tile order, in shared memory (before the
    // look-back, whose barrier orders these writes before the reads below): scattered
    // 4-byte global stores would leave partly written sectors; staged, every warp writes
    // runs of consecutive words.
    let stage = i::shared_base() + SELECT_STAGE_OFFSET as u32;
    let mut k = 0;
    while k < N {
        let kept = if LEAN {
            let idx = striped_index(warp_start, 4, k);
            idx < n && pred(idx, items[k])
        } else {
            keep[k] != 0
        };
        if kept {
            // SAFETY: warp_prefix + pos[k] < tile_total <= THREADS * N: inside the staging
            // area (`select_smem_bytes_for(THREADS * N)`).
            unsafe { i::st_shared_u32(stage + (warp_prefix + pos[k]) * 4, items[k]) };
        }
        k += 1;
    }
    // SAFETY: status holds one entry per tile.
    let tile_prefix = unsafe { tile_exclusive_prefix(&status, tile, tile_total, prefix_slot) };
    let out = i::opaque_u32(tile_prefix) as usize;
    let mut j = i::thread_idx_x();
    while j < tile_total {
        // SAFETY: j < tile_total (staged above, before the barrier); out + j is below the
        // number selected <= n, and output is valid for n.
        unsafe {
            output
                .add(out + j as usize)
                .write(i::ld_shared_u32(stage + j * 4))
        };
        j += THREADS;
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
        sleep_ns: LOOKBACK_SLEEP_NS,
    };
    // SAFETY: forwarded launch contract. Lean: the range test is two comparisons, cheaper
    // than 24 registers through the block scan (64 registers, 4 blocks per multiprocessor
    // with its launch bound; issue 28, H100: 0.78x -> 0.84x CUB at 2^28).
    unsafe {
        select_tile::<{ SELECT_ITEMS as usize }, SELECT_THREADS, true, _>(
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
        sleep_ns: LOOKBACK_SLEEP_NS,
    };
    // SAFETY: forwarded launch contract; the predicate reads selection[idx] with idx < n.
    unsafe {
        select_tile::<{ SELECT_ITEMS as usize }, SELECT_THREADS, false, _>(
            input,
            n,
            output,
            num_selected,
            status,
            |idx, _| selection.add(idx as usize).read() != 0,
        )
    }
}
