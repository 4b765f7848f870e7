//! Block-level scan (`BlockScan`): warp scans combined through shared memory.

#[allow(unused_imports)]
use super::device::*;
use crate::intrinsics as i;

/// Block-wide scan over one value per thread, for any `blockDim.x` that is a multiple of
/// 32 and at most 1024. `storage` points to [`block_scan_smem_bytes`] bytes of shared
/// memory. The caller puts a barrier between two uses of the same storage.
pub struct BlockScan<T: ScanValue> {
    storage: *mut T,
}

impl<T: ScanValue> BlockScan<T> {
    /// # Safety
    /// `storage` is a generic pointer to at least 33 `T` of this block's shared memory,
    /// aligned for `T`, used by nothing else during the scan.
    #[inline(always)]
    pub unsafe fn new(storage: *mut T) -> Self {
        Self { storage }
    }

    /// Exclusive sum across the block; returns `(exclusive prefix, block total)`.
    /// Every thread of the block must call it (two barriers inside).
    #[inline(always)]
    pub fn exclusive_sum(&self, x: T) -> (T, T) {
        let lane = i::lane_id();
        let warp = i::warp_id();
        let nwarps = i::warps_per_block();
        let incl = warp_inclusive_sum(x);
        if lane == 31 {
            // SAFETY: warp < 32, inside the 33-element storage.
            unsafe { self.storage.add(warp as usize).write(incl) };
        }
        i::sync_threads();
        if warp == 0 {
            let t = if lane < nwarps {
                // SAFETY: lane < nwarps <= 32.
                unsafe { self.storage.add(lane as usize).read() }
            } else {
                T::default()
            };
            let t_incl = warp_inclusive_sum(t);
            let t_excl = t_incl.shfl_up(1);
            let t_excl = if lane == 0 { T::default() } else { t_excl };
            if lane < nwarps {
                // SAFETY: as above.
                unsafe { self.storage.add(lane as usize).write(t_excl) };
            }
            if lane == 31 {
                // SAFETY: slot 32 holds the block total.
                unsafe { self.storage.add(32).write(t_incl) };
            }
        }
        i::sync_threads();
        // SAFETY: warp < 32 and slot 32 were written before the barrier.
        let (warp_prefix, total) = unsafe {
            (
                self.storage.add(warp as usize).read(),
                self.storage.add(32).read(),
            )
        };
        // incl - x + warp_prefix, without subtraction: exclusive = shfl_up(incl).
        let e = incl.shfl_up(1);
        let e = if lane == 0 { T::default() } else { e };
        (warp_prefix.wadd(e), total)
    }

    /// Inclusive sum across the block; returns `(inclusive prefix, block total)`.
    #[inline(always)]
    pub fn inclusive_sum(&self, x: T) -> (T, T) {
        let (e, t) = self.exclusive_sum(x);
        (e.wadd(x), t)
    }
}
