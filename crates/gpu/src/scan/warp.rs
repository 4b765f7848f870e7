//! Warp-level scans (shuffles) and the value types they support.

#[allow(unused_imports)]
use super::device::*;
use crate::intrinsics as i;

/// A value that can be summed and moved across lanes: `u32` and `u64`.
pub trait ScanValue: Copy + Default {
    /// Whether the look-back packs flag and value into one 64-bit status word.
    const PACKED: bool;
    /// The value's bits when it is packable (4 bytes).
    fn packable(self) -> Option<u32>;
    /// The value from packed bits.
    fn from_packed(bits: u32) -> Self;
    /// Wrapping addition.
    fn wadd(self, o: Self) -> Self;
    /// `__shfl_up_sync`.
    fn shfl_up(self, d: u32) -> Self;
    /// `__shfl_xor_sync`.
    fn shfl_xor(self, m: u32) -> Self;
    /// `__shfl_sync`.
    fn shfl_idx(self, l: u32) -> Self;
    /// The warp's sum (wrapping) in every lane.
    fn warp_sum(self) -> Self;
    /// Relaxed device-scope load.
    ///
    /// # Safety
    /// `p` valid and aligned, in global memory.
    unsafe fn load_relaxed(p: *const Self) -> Self;
    /// Relaxed device-scope store.
    ///
    /// # Safety
    /// `p` valid and aligned, in global memory.
    unsafe fn store_relaxed(p: *mut Self, v: Self);
}

impl ScanValue for u32 {
    const PACKED: bool = true;
    #[inline(always)]
    fn packable(self) -> Option<u32> {
        Some(self)
    }
    #[inline(always)]
    fn from_packed(bits: u32) -> Self {
        bits
    }
    #[inline(always)]
    fn wadd(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn shfl_up(self, d: u32) -> Self {
        i::shfl_up(self, d)
    }
    #[inline(always)]
    fn shfl_xor(self, m: u32) -> Self {
        i::shfl_xor(self, m)
    }
    #[inline(always)]
    fn shfl_idx(self, l: u32) -> Self {
        i::shfl_idx(self, l)
    }
    #[inline(always)]
    fn warp_sum(self) -> Self {
        i::warp_sum_u32(self)
    }
    #[inline(always)]
    unsafe fn load_relaxed(p: *const Self) -> Self {
        // SAFETY: forwarded contract.
        unsafe { i::load_relaxed_u32(p) }
    }
    #[inline(always)]
    unsafe fn store_relaxed(p: *mut Self, v: Self) {
        // SAFETY: forwarded contract.
        unsafe { i::store_relaxed_u32(p, v) }
    }
}

impl ScanValue for u64 {
    const PACKED: bool = false;
    #[inline(always)]
    fn packable(self) -> Option<u32> {
        None
    }
    #[inline(always)]
    fn from_packed(bits: u32) -> Self {
        bits as u64
    }
    #[inline(always)]
    fn wadd(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn shfl_up(self, d: u32) -> Self {
        let lo = i::shfl_up(self as u32, d);
        let hi = i::shfl_up((self >> 32) as u32, d);
        (hi as u64) << 32 | lo as u64
    }
    #[inline(always)]
    fn shfl_xor(self, m: u32) -> Self {
        let lo = i::shfl_xor(self as u32, m);
        let hi = i::shfl_xor((self >> 32) as u32, m);
        (hi as u64) << 32 | lo as u64
    }
    #[inline(always)]
    fn shfl_idx(self, l: u32) -> Self {
        let lo = i::shfl_idx(self as u32, l);
        let hi = i::shfl_idx((self >> 32) as u32, l);
        (hi as u64) << 32 | lo as u64
    }
    #[inline(always)]
    fn warp_sum(self) -> Self {
        let mut v = self;
        let mut m = 16;
        while m > 0 {
            v = v.wadd(v.shfl_xor(m));
            m >>= 1;
        }
        v
    }
    #[inline(always)]
    unsafe fn load_relaxed(p: *const Self) -> Self {
        // SAFETY: forwarded contract.
        unsafe { i::load_relaxed_u64(p) }
    }
    #[inline(always)]
    unsafe fn store_relaxed(p: *mut Self, v: Self) {
        // SAFETY: forwarded contract.
        unsafe { i::store_relaxed_u64(p, v) }
    }
}

/// Warp inclusive sum (all 32 lanes participate).
#[inline(always)]
pub fn warp_inclusive_sum<T: ScanValue>(x: T) -> T {
    let lane = i::lane_id();
    let mut v = x;
    let mut d = 1;
    while d < 32 {
        let y = v.shfl_up(d);
        if lane >= d {
            v = v.wadd(y);
        }
        d <<= 1;
    }
    v
}

/// Warp exclusive sum (all 32 lanes participate); lane 0 gets zero.
#[inline(always)]
pub fn warp_exclusive_sum<T: ScanValue>(x: T) -> T {
    let incl = warp_inclusive_sum(x);
    let e = incl.shfl_up(1);
    if i::lane_id() == 0 {
        T::default()
    } else {
        e
    }
}

/// Warp sum, broadcast to all 32 lanes (`u32`: [`i::warp_sum_u32`], one `redux.sync` on
/// sm_80; `u64`: a shuffle butterfly).
#[inline(always)]
pub fn warp_reduce_sum<T: ScanValue>(x: T) -> T {
    x.warp_sum()
}
