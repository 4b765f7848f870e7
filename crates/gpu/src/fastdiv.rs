//! Division of a byte by a divisor fixed for a whole launch, as one multiply and one shift:
//! a GPU's `div.u32` expands to about 15 instructions, this to 2 (3 with the remainder). The
//! PET conversion divides bytes (BDM, DU, crystal numbers) by the scanner's sizes, which its
//! parameter check keeps at most 256; the host computes the multiplier ([`ByteDiv::new`])
//! and passes it in the kernel's parameters.

/// A divisor `1 <= d <= 256` and `m = ceil(2^16 / d)`: for every `x < 256`,
/// `x / d == (x * m) >> 16`. (With `m d = 2^16 + e`, `0 <= e < d`:
/// `x m / 2^16 = x / d + x e / (d 2^16)`, and `x e < 2^16` keeps the excess below `1 / d`,
/// less than the distance from `x / d` to the next integer.)
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ByteDiv {
    /// The divisor.
    pub d: u32,
    /// `ceil(2^16 / d)`.
    pub m: u32,
}

impl ByteDiv {
    /// The multiplier of `d`; `d = 0` is taken as 1 (callers reject zero divisors before
    /// any division). Exact only for `d <= 256` (callers check their divisors).
    pub const fn new(d: u32) -> Self {
        let d = if d == 0 { 1 } else { d };
        let m = 65536u64.div_ceil(d as u64);
        Self { d, m: m as u32 }
    }

    /// `(x / d, x % d)` for `x < 256`.
    #[inline(always)]
    pub fn div_rem(&self, x: u32) -> (u32, u32) {
        let q = x.wrapping_mul(self.m) >> 16;
        (q, x.wrapping_sub(q.wrapping_mul(self.d)))
    }
}

#[cfg(test)]
mod tests {
    use super::ByteDiv;

    #[test]
    fn every_byte_by_every_divisor() {
        for d in 1..=256u32 {
            let f = ByteDiv::new(d);
            for x in 0..256u32 {
                assert_eq!(f.div_rem(x), (x / d, x % d), "x = {x}, d = {d}");
            }
        }
        assert_eq!(ByteDiv::new(0), ByteDiv::new(1));
    }

    #[test]
    fn inexact_past_its_range() {
        // The bound is tight enough to matter: a larger divisor or dividend can be wrong,
        // which is why the callers keep to bytes.
        let f = ByteDiv::new(255);
        assert!((0..65536u32).any(|x| f.div_rem(x).0 != x / 255));
    }
}
