//! The histogram fill kernels (shared and global strategy) and their key loop.

use super::*;
use crate::intrinsics as i;

/// Visits every key once, warp-uniformly: every lane of every warp calls `f(key, valid,
/// index)` the same number of times (invalid lanes with `valid = false`), so `f` may use
/// warp collectives. Keys are read 4 at a time with 16-byte loads.
///
/// # Safety
/// `keys` valid for `n` elements and 16-byte aligned; all lanes of the warp call this.
#[inline(always)]
pub unsafe fn for_each_key_warp_uniform<F: FnMut(u32, bool, u64)>(keys: *const u32, n: u64, f: F) {
    // SAFETY: forwarded contract.
    unsafe { for_each_key_warp_uniform_x::<1, F>(keys, n, f) }
}

/// [`for_each_key_warp_uniform`] with `U` 16-byte loads of each lane in flight before the
/// first key of them is counted (grid-stride rounds of `U` vectors).
///
/// # Safety
/// As [`for_each_key_warp_uniform`].
#[inline(always)]
pub unsafe fn for_each_key_warp_uniform_x<const U: usize, F: FnMut(u32, bool, u64)>(
    keys: *const u32,
    n: u64,
    mut f: F,
) {
    let lane = i::lane_id() as u64;
    let warp = i::global_thread_idx() / 32;
    let nwarps = i::grid_threads() / 32;
    let n4 = n / 4;
    let stride = nwarps * 32;
    let mut v = warp * 32;
    while v < n4 {
        let mut k = [[0u32; 4]; U];
        let mut u = 0;
        while u < U {
            let idx = v + u as u64 * stride + lane;
            if idx < n4 {
                // SAFETY: idx < n / 4 → elements 4 idx .. 4 idx + 3 are in bounds, aligned.
                k[u] = unsafe { i::ldg_v4_u32(keys.add(idx as usize * 4)) };
            }
            u += 1;
        }
        let mut u = 0;
        while u < U {
            let idx = v + u as u64 * stride + lane;
            let valid = idx < n4;
            f(k[u][0], valid, idx * 4);
            f(k[u][1], valid, idx * 4 + 1);
            f(k[u][2], valid, idx * 4 + 2);
            f(k[u][3], valid, idx * 4 + 3);
            u += 1;
        }
        v += U as u64 * stride;
    }
    // The last n % 4 keys: the first warp of the grid.
    if warp == 0 {
        let idx = n4 * 4 + lane;
        let valid = idx < n;
        // SAFETY: idx < n.
        let k = if valid {
            unsafe { keys.add(idx as usize).read() }
        } else {
            0
        };
        f(k, valid, idx);
    }
}

/// Per-thread tally of out-of-range keys, reduced per warp at the end.
pub struct OutOfRange {
    count: u32,
    first: u32,
}

impl OutOfRange {
    fn flush(&self, count_out: *mut u32, first_out: *mut u32) {
        let c = crate::scan::device::warp_reduce_sum(self.count);
        let f = i::warp_max_u32(self.first);
        if i::lane_id() == 0 && c > 0 {
            // SAFETY: launch contract: both are valid global u32.
            unsafe {
                i::atomic_add_u32(count_out, c);
                i::atomic_max_u32(first_out, f);
            }
        }
    }
}

/// Counts one key with warp aggregation; returns whether it was out of range.
/// `add(bin, count)` is called by one lane per distinct in-range key of the warp.
#[inline(always)]
fn count_key<A: Fn(u32, u32)>(key: u32, valid: bool, nbins: u32, aggregate: bool, add: &A) -> bool {
    let in_range = valid && key < nbins;
    if aggregate {
        let m = i::match_any(if in_range { key } else { u32::MAX });
        if in_range && i::lanemask_lt() & m == 0 {
            add(key, i::popc(m));
        }
    } else if in_range {
        add(key, 1);
    }
    valid && !in_range
}

/// Shared strategy (see module docs).
///
/// # Safety
/// `blockDim.x == HISTOGRAM_THREADS`; `histogram_smem_bytes(nbins)` bytes of shared
/// memory and `copies == histogram_copies(nbins)`; `keys` valid for `n` (`n < 2^32`),
/// 16-byte aligned; `hist` valid for `nbins` zeroed words; `out_of_range` and
/// `first_out_of_range` zeroed words.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn histogram_fill_shared(p: HistogramFillParams) {
    // SAFETY: forwarded launch contract. Four 16-byte loads of each lane in flight (issue
    // 28, H100: 1.40x -> 1.63x CUB at 2^24 with at most 4 blocks per SM).
    unsafe { fill_shared::<{ HISTOGRAM_LOADS_IN_FLIGHT }>(p) }
}

/// The shared strategy's body with `U` loads of each lane in flight.
///
/// # Safety
/// As [`histogram_fill_shared`].
#[inline(always)]
unsafe fn fill_shared<const U: usize>(p: HistogramFillParams) {
    let (keys, n, nbins, copies, aggregate) = (p.keys.ptr(), p.n, p.nbins, p.copies, p.aggregate);
    let (hist, out_of_range, first_out_of_range) = (
        p.hist.ptr_mut(),
        p.out_of_range.ptr_mut(),
        p.first_out_of_range.ptr_mut(),
    );
    let tid = i::thread_idx_x();
    let bd = i::block_dim_x();
    let smem = i::dynamic_shared_ptr() as *mut u32;
    let total = copies * nbins;
    let mut j = tid;
    while j < total {
        // SAFETY: j < copies * nbins words of shared memory.
        unsafe { smem.add(j as usize).write(0) };
        j += bd;
    }
    i::sync_threads();
    let sub = i::shared_base() + i::warp_id().checked_rem(copies).unwrap_or(0) * nbins * 4;
    let mut oor = OutOfRange { count: 0, first: 0 };
    let add = |bin: u32, c: u32| {
        // SAFETY: bin < nbins inside this warp's sub-histogram.
        unsafe { i::red_shared_add_u32(sub + bin * 4, c) }
    };
    // SAFETY: launch contract.
    unsafe {
        for_each_key_warp_uniform_x::<U, _>(keys, n, |key, valid, idx| {
            if count_key(key, valid, nbins, aggregate != 0, &add) {
                oor.count += 1;
                oor.first = oor.first.max(encode_first_index(idx as u32));
            }
        })
    };
    oor.flush(out_of_range, first_out_of_range);
    i::sync_threads();
    let mut b = tid;
    while b < nbins {
        let mut s = 0u32;
        for c in 0..copies {
            // SAFETY: inside the shared sub-histograms.
            s = s.wrapping_add(unsafe { smem.add((c * nbins + b) as usize).read() });
        }
        if s != 0 {
            // SAFETY: b < nbins.
            unsafe { i::red_global_add_u32(hist.add(b as usize), s) };
        }
        b += bd;
    }
}

/// Global strategy (see module docs).
///
/// # Safety
/// As [`histogram_fill_shared`], without the shared-memory requirement.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn histogram_fill_global(p: HistogramFillParams) {
    let (keys, n, nbins, aggregate) = (p.keys.ptr(), p.n, p.nbins, p.aggregate);
    let (hist, out_of_range, first_out_of_range) = (
        p.hist.ptr_mut(),
        p.out_of_range.ptr_mut(),
        p.first_out_of_range.ptr_mut(),
    );
    let mut oor = OutOfRange { count: 0, first: 0 };
    let add = |bin: u32, c: u32| {
        // SAFETY: bin < nbins.
        unsafe { i::red_global_add_u32(hist.add(bin as usize), c) }
    };
    // SAFETY: launch contract.
    unsafe {
        for_each_key_warp_uniform(keys, n, |key, valid, idx| {
            if count_key(key, valid, nbins, aggregate != 0, &add) {
                oor.count += 1;
                oor.first = oor.first.max(encode_first_index(idx as u32));
            }
        })
    };
    oor.flush(out_of_range, first_out_of_range);
}
