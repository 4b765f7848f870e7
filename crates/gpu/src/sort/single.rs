//! The single-tile sort: one block sorts up to `SINGLE_TILE` keys through every pass in
//! shared memory (one launch for small inputs, where `1 + passes` launches would cost more
//! than the work).
//!
//! Each pass ranks the keys as a onesweep tile does (per-warp digit counts, a block scan of
//! the counts, `match.any` ranking), writes keys and their original indices in sorted order
//! to shared memory and reloads them warp-striped for the next pass. At the end the keys are
//! written out and each value is gathered from its original index (values never move between
//! passes, only a 4-byte index does).

use super::onesweep::{block_sort_pass, BlockSortSmem, DigitFn, Key};
use super::*;
use crate::intrinsics as i;

/// Single-tile body.
///
/// # Safety
/// See [`sort_single_tile_u32`].
#[inline(always)]
pub unsafe fn single_tile<K: Key>(p: &SortSingleTileParams) {
    const ITEMS: usize = SINGLE_ITEMS as usize;
    let tid = i::thread_idx_x();
    let lane = i::lane_id();
    let warp = tid / 32;
    let n = p.n as u32;
    let sbase = i::shared_base();
    let hist = sbase + single_layout::WARP_HIST;
    let hist_w = hist + warp * RADIX * 4;
    let index_s = sbase + single_layout::INDEX;
    let keys_s = sbase + single_layout::KEYS;
    // SAFETY: the block-scan words of the layout.
    let scan = unsafe { i::dynamic_shared_ptr().add(single_layout::SCAN as usize) } as *mut u32;
    let local0 = warp * 32 * ITEMS as u32 + lane;
    // Warps whose positions all lie past `n` hold padding only: they zero their counters
    // (the block scan reads every warp's) and keep to the barriers, but neither count nor
    // rank, so a small input costs the warps it fills, not the whole tile. Real keys still
    // take positions 0..n: padding sorts last, and these warps come after every real key.
    let active = warp * 32 * (ITEMS as u32) < n;

    let keys_in = p.keys_in.ptr();
    let mut keys = [K::ZERO; ITEMS];
    let mut index = [0u32; ITEMS];
    let mut k = 0;
    while k < ITEMS {
        let l = local0 + 32 * k as u32;
        if l < n {
            // SAFETY: l < n.
            keys[k] = unsafe { K::ldg(keys_in, l) };
        }
        index[k] = l;
        k += 1;
    }
    let sm = BlockSortSmem {
        hist,
        hist_w,
        scan,
        warps: SINGLE_WARPS,
        keys: keys_s,
        values: index_s,
    };
    let passes = passes(p.begin_bit, p.end_bit);
    let mut pass = 0;
    while pass < passes {
        let (shift, bits) = pass_bits(p.begin_bit, p.end_bit, pass);
        // SAFETY: the layout's counters, scan words, keys and indices (SINGLE_TILE
        // positions); all threads call it with the same pass.
        unsafe {
            block_sort_pass(
                &mut keys,
                &mut index,
                DigitFn::new(shift, bits, p.descending != 0),
                &sm,
                local0,
                n,
                active,
            )
        };
        // Before the next pass overwrites the sorted keys.
        i::sync_threads();
        pass += 1;
    }
    // Out: keys from registers (warp-striped: each warp store covers consecutive positions),
    // values gathered from their original index.
    let keys_out = p.keys_out.ptr_mut();
    let (values_in, values_out) = (p.values_in.ptr(), p.values_out.ptr_mut());
    let words = p.value_words as usize;
    let mut k = 0;
    while k < ITEMS {
        let l = local0 + 32 * k as u32;
        if l < n {
            // SAFETY: l < n; index[k] < n.
            unsafe {
                K::stg(keys_out, l, keys[k]);
                let mut w = 0;
                while w < words {
                    // No input values: the value is the key's input index (argsort).
                    let v = if values_in.is_null() {
                        index[k]
                    } else {
                        values_in.add(index[k] as usize * words + w).read()
                    };
                    values_out.add(l as usize * words + w).write(v);
                    w += 1;
                }
            }
        }
        k += 1;
    }
}

/// Sorts `n <= SINGLE_TILE` `u32` keys (and values) in one block.
///
/// # Safety
/// Launch contract: one block of `SINGLE_THREADS` threads, `single_smem_bytes(4)` bytes of
/// dynamic shared memory; `1 <= n <= SINGLE_TILE`; `keys_in`, `keys_out` valid for `n` keys,
/// `values_in`, `values_out` for `n × value_words` words (`value_words <= 4`), inputs and
/// outputs not overlapping; `begin_bit < end_bit <= 32`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sort_single_tile_u32(p: SortSingleTileParams) {
    // SAFETY: forwarded launch contract.
    unsafe { single_tile::<u32>(&p) }
}

/// As [`sort_single_tile_u32`] for `u64` keys (`single_smem_bytes(8)`, `end_bit <= 64`).
///
/// # Safety
/// As [`sort_single_tile_u32`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sort_single_tile_u64(p: SortSingleTileParams) {
    // SAFETY: forwarded launch contract.
    unsafe { single_tile::<u64>(&p) }
}
