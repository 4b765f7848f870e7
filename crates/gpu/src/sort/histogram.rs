//! The upfront histogram: the digit counts of every pass in one read of the keys, and their
//! exclusive sums (the digit starts of each pass) computed by the last block.

use super::onesweep::{DigitFn, Key};
use super::*;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;

/// Per-thread run-length counters of one pass's digits: a run of equal digits (keys whose
/// digit of this pass does not change, e.g. the top bytes of timestamps) costs one shared
/// atomic when it ends rather than one per key.
struct Runs<const P: usize> {
    cur: [u32; P],
    cnt: [u32; P],
}

impl<const P: usize> Runs<P> {
    /// Counts one key in every pass `< passes`.
    ///
    /// # Safety
    /// `hist` addresses `P × RADIX` shared words.
    #[inline(always)]
    unsafe fn add<K: Key>(&mut self, key: K, digits: &[DigitFn; P], passes: u32, hist: u32) {
        let mut p = 0;
        while p < P {
            if (p as u32) < passes {
                let d = digits[p].of_bfe(key);
                if d != self.cur[p] {
                    if self.cnt[p] != 0 {
                        // SAFETY: caller contract; cur < RADIX when cnt != 0.
                        unsafe {
                            i::red_shared_add_u32(
                                hist + (p as u32 * RADIX + self.cur[p]) * 4,
                                self.cnt[p],
                            )
                        };
                    }
                    self.cur[p] = d;
                    self.cnt[p] = 0;
                }
                self.cnt[p] += 1;
            }
            p += 1;
        }
    }

    /// Adds the open runs.
    ///
    /// # Safety
    /// As [`Runs::add`].
    #[inline(always)]
    unsafe fn flush(&self, hist: u32) {
        let mut p = 0;
        while p < P {
            if self.cnt[p] != 0 {
                // SAFETY: caller contract.
                unsafe {
                    i::red_shared_add_u32(hist + (p as u32 * RADIX + self.cur[p]) * 4, self.cnt[p])
                };
            }
            p += 1;
        }
    }
}

/// Histogram body for key type `K` with `P = K::MAX_PASSES`.
///
/// # Safety
/// See [`sort_histogram_u32`].
#[inline(always)]
pub unsafe fn histogram<K: Key, const P: usize>(p: &SortHistogramParams) {
    let tid = i::thread_idx_x();
    let n = p.n as u32;
    let passes = passes(p.begin_bit, p.end_bit);
    let sbase = i::shared_base();
    let hist = sbase;
    let scan_off = P as u32 * RADIX * 4;
    let flag = sbase + scan_off + 33 * 4;
    let total = passes * RADIX;
    let mut j = tid;
    while j < total {
        // SAFETY: j < passes × RADIX <= P × RADIX shared words.
        unsafe { i::st_shared_u32(hist + j * 4, 0) };
        j += HISTOGRAM_THREADS;
    }
    i::sync_threads();

    let mut digits = [DigitFn::new(0, 1, false); P];
    let mut q = 0;
    while q < P {
        if (q as u32) < passes {
            let (shift, bits) = pass_bits(p.begin_bit, p.end_bit, q as u32);
            digits[q] = DigitFn::new(shift, bits, p.descending != 0);
        }
        q += 1;
    }
    let mut runs = Runs::<P> {
        cur: [u32::MAX; P],
        cnt: [0; P],
    };
    // Whole 16-byte vectors, grid-stride, HISTOGRAM_UNROLL vectors per thread and round all
    // loaded before any is counted (several loads in flight per thread); the threads of a
    // block take consecutive vectors, so each warp load covers 512 contiguous bytes.
    let keys = p.keys.ptr();
    let nvec = n / K::VEC;
    let stride = i::grid_dim_x() * HISTOGRAM_THREADS;
    let mut v = i::block_idx_x() * HISTOGRAM_THREADS + tid;
    while v < nvec {
        let mut x = [[K::ZERO; 4]; HISTOGRAM_UNROLL];
        let mut u = 0;
        while u < HISTOGRAM_UNROLL {
            let vu = v.wrapping_add(u as u32 * stride);
            if vu < nvec && vu >= v {
                // SAFETY: vu < n / VEC: the vector is inside the keys, 16-byte aligned.
                x[u] = unsafe { K::ldg_vec(keys, vu) };
            }
            u += 1;
        }
        let mut u = 0;
        while u < HISTOGRAM_UNROLL {
            let vu = v.wrapping_add(u as u32 * stride);
            if vu < nvec && vu >= v {
                let mut e = 0;
                while e < K::VEC as usize {
                    // SAFETY: hist holds P × RADIX words.
                    unsafe { runs.add(x[u][e], &digits, passes, hist) };
                    e += 1;
                }
            }
            u += 1;
        }
        match v.checked_add(HISTOGRAM_UNROLL as u32 * stride) {
            Some(next) => v = next,
            None => break,
        }
    }
    // The last n % VEC keys: block 0.
    let tail = nvec * K::VEC + tid;
    if i::block_idx_x() == 0 && tail < n {
        // SAFETY: tail < n.
        let key = unsafe { K::ldg(keys, tail) };
        // SAFETY: as above.
        unsafe { runs.add(key, &digits, passes, hist) };
    }
    // SAFETY: as above.
    unsafe { runs.flush(hist) };
    i::sync_threads();

    // Add the block's counts to the global counters.
    let bins = p.bins.ptr_mut();
    let mut j = tid;
    while j < total {
        // SAFETY: j < passes × RADIX (shared and global).
        unsafe {
            let c = i::ld_shared_u32(hist + j * 4);
            if c != 0 {
                i::red_global_add_u32(bins.add(j as usize), c);
            }
        }
        j += HISTOGRAM_THREADS;
    }
    // The last block to finish (ticket) scans the totals: CUDA's threadFenceReduction.
    i::threadfence();
    i::sync_threads();
    let counters = p.counters.ptr_mut();
    if tid == 0 {
        // SAFETY: counters[0] is the ticket.
        let ticket = unsafe { i::atomic_add_u32(counters, 1) };
        // SAFETY: the flag word after the scan storage.
        unsafe { i::st_shared_u32(flag, (ticket == i::grid_dim_x() - 1) as u32) };
    }
    i::sync_threads();
    // SAFETY: written before the barrier.
    if unsafe { i::ld_shared_u32(flag) } == 0 {
        return;
    }
    i::threadfence();
    // SAFETY: the scan storage after the counters (33 words).
    let scan = unsafe { i::dynamic_shared_ptr().add(scan_off as usize) } as *mut u32;
    // SAFETY: as above; every thread of the block takes part.
    let bs = unsafe { BlockScan::<u32>::new(scan) };
    let offsets = p.offsets.ptr_mut();
    let mut pass = 0;
    while pass < passes {
        let a = (pass * RADIX + tid) as usize;
        // SAFETY: tid < RADIX (HISTOGRAM_THREADS == RADIX); a < passes × RADIX.
        let c = unsafe { i::load_relaxed_u32(bins.add(a)) };
        let (start, _) = bs.exclusive_sum(c);
        // SAFETY: as above.
        unsafe {
            offsets.add(a).write(start);
            i::store_relaxed_u32(bins.add(a), 0);
        }
        // The scan storage is reused by the next pass.
        i::sync_threads();
        pass += 1;
    }
    if tid < COUNTER_WORDS as u32 {
        // SAFETY: COUNTER_WORDS words; the ticket and the tile counters start the next use
        // at zero.
        unsafe { i::store_relaxed_u32(counters.add(tid as usize), 0) };
    }
}

/// The digit histograms of every pass of `n` `u32` keys, and their exclusive sums.
///
/// # Safety
/// Launch contract: `blockDim.x == HISTOGRAM_THREADS`, `histogram_smem_bytes(4)` bytes of
/// dynamic shared memory, any `gridDim.x >= 1`; `1 <= n < 2^32`; `keys` valid for `n` keys,
/// 16-byte aligned; `begin_bit < end_bit <= 32`; `bins` `MAX_PASSES × RADIX` zeroed words,
/// `offsets` `passes × RADIX` words, `counters` `COUNTER_WORDS` words with word 0 zero.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sort_histogram_u32(p: SortHistogramParams) {
    // SAFETY: forwarded launch contract.
    unsafe { histogram::<u32, 4>(&p) }
}

/// As [`sort_histogram_u32`] for `u64` keys (`end_bit <= 64`, `histogram_smem_bytes(8)`).
///
/// # Safety
/// As [`sort_histogram_u32`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sort_histogram_u64(p: SortHistogramParams) {
    // SAFETY: forwarded launch contract.
    unsafe { histogram::<u64, 8>(&p) }
}
