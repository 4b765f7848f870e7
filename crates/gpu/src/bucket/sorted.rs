//! The offsets of the sort-based device-wide container: one pass over the keys after the
//! radix sort has grouped them by bin.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// Writes `offsets[0 ..= nbins]` from keys sorted by bin, and records the smallest input
/// index of a key `>= nbins`. Position `j` (one thread each, grid-stride, `j` in `0 ..= n`)
/// writes `offsets[b] = j` for the bins `b` in `(bin(j - 1), bin(j)]` (`bin(-1) = -1`,
/// `bin(n) = nbins`), with `bin(j) = min(keys[j] & mask, nbins)`: the bins are non-decreasing
/// in sorted order, so every offset is written exactly once, and never past `nbins` even with
/// keys out of range (whose offsets are then meaningless: the host reports the error).
///
/// # Safety
/// `keys` and `index` valid for `n` words (`1 <= n < 2^32`), sorted by `key & mask` as
/// described; `offsets` valid for `nbins + 1` words, `first_bad` for one word.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn bucket_offsets_sorted(p: BucketOffsetsSortedParams) {
    let (keys, index, offsets, first_bad) = (
        p.keys.ptr(),
        p.index.ptr(),
        p.offsets.ptr_mut(),
        p.first_bad.ptr_mut(),
    );
    let (n, nbins, mask) = (p.n, p.nbins, p.mask);
    // Bins as u64, so that `bin + 1` cannot wrap.
    let bin = |x: u32| {
        let b = x & mask;
        if b < nbins {
            b as u64
        } else {
            nbins as u64
        }
    };
    let stride = i::grid_dim_x() as u64 * BUCKET_OFFSETS_THREADS as u64;
    let mut j = i::block_idx_x() as u64 * BUCKET_OFFSETS_THREADS as u64 + i::thread_idx_x() as u64;
    while j <= n {
        let (lo, hi) = if j == n {
            // SAFETY: n >= 1: keys[n - 1] is valid.
            (
                bin(unsafe { i::ldg_u32(keys.add(n as usize - 1)) }) + 1,
                nbins as u64,
            )
        } else {
            // SAFETY: j < n.
            let key = unsafe { i::ldg_u32(keys.add(j as usize)) };
            if key >= nbins {
                // SAFETY: j < n; one word.
                unsafe {
                    i::atomic_min_u32(first_bad, i::ldg_u32(index.add(j as usize)));
                }
            }
            let lo = if j == 0 {
                0
            } else {
                // SAFETY: j - 1 < n.
                bin(unsafe { i::ldg_u32(keys.add(j as usize - 1)) }) + 1
            };
            (lo, bin(key))
        };
        let mut b = lo;
        while b <= hi {
            // SAFETY: b <= hi <= nbins: inside offsets.
            unsafe { offsets.add(b as usize).write(j as u32) };
            b += 1;
        }
        j += stride;
    }
}
