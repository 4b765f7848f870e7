//! Division by a divisor fixed for a whole launch, as a multiply-high, an add and a shift
//! (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994,
//! round-up method with N = 32): a GPU's `div.u32` expands to about 15 instructions, this to
//! about 4. The host computes the multiplier once ([`FastDiv::new`]) and passes it in a
//! kernel's parameters.

/// A divisor `d >= 1` with its multiplier `m` and shift `s`: for every `x: u32`,
/// `x / d == (((x * m) >> 32) + x) >> s` (the sum in 64 bits).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct FastDiv {
    /// The divisor.
    pub d: u32,
    /// `floor(2^32 (2^s - d) / d) + 1` (below 2^32 because `2^(s-1) < d <= 2^s`).
    pub m: u32,
    /// `ceil(log2 d)`.
    pub s: u32,
    /// Padding to 16 bytes.
    pub _pad: u32,
}

impl FastDiv {
    /// The multiplier and shift of `d`; `d = 0` is taken as 1 (callers reject zero divisors
    /// before any division, as the plain code's `max(1)` does).
    pub const fn new(d: u32) -> Self {
        let d = if d == 0 { 1 } else { d };
        let s = 32 - (d - 1).leading_zeros();
        let m = ((((1u64 << s) - d as u64) << 32) / d as u64 + 1) as u32;
        Self { d, m, s, _pad: 0 }
    }

    /// `x / d`.
    #[inline(always)]
    pub fn div(&self, x: u32) -> u32 {
        let hi = (x as u64 * self.m as u64) >> 32;
        ((hi + x as u64) >> self.s) as u32
    }

    /// `(x / d, x % d)`.
    #[inline(always)]
    pub fn div_rem(&self, x: u32) -> (u32, u32) {
        let q = self.div(x);
        (q, x - q * self.d)
    }
}

#[cfg(test)]
mod tests {
    use super::FastDiv;

    fn check(d: u32, x: u32) {
        let f = FastDiv::new(d);
        assert_eq!(f.div_rem(x), (x / d, x % d), "x = {x}, d = {d}");
    }

    #[test]
    fn edges() {
        let xs = [
            0,
            1,
            2,
            3,
            7,
            8,
            255,
            256,
            65535,
            65536,
            u32::MAX / 2,
            u32::MAX - 1,
            u32::MAX,
        ];
        for d in (1..=1024).chain([
            1 << 16,
            (1 << 16) + 1,
            (1 << 31) - 1,
            1 << 31,
            (1 << 31) + 1,
            u32::MAX - 1,
            u32::MAX,
        ]) {
            for &x in &xs {
                check(d, x);
                check(d, x.saturating_sub(d % 7));
            }
            // Around every multiple of small divisors' quotients: q d - 1, q d, q d + 1.
            for q in [1u64, 2, 3, 1000, 65_537] {
                let base = q * d as u64;
                for x in [base.saturating_sub(1), base, base + 1] {
                    if x <= u32::MAX as u64 {
                        check(d, x as u32);
                    }
                }
            }
        }
        assert_eq!(FastDiv::new(0), FastDiv::new(1));
    }

    #[test]
    fn every_x_for_some_divisors() {
        // All 2^32 values for a few divisors would take too long in CI; every value below
        // 2^20 and a stride through the rest.
        for d in [3, 5, 6, 7, 10, 12, 13, 24, 100, 641, 1000, 6700417] {
            for x in 0..1u32 << 20 {
                check(d, x);
            }
            let mut x = 1u64 << 20;
            while x <= u32::MAX as u64 {
                check(d, x as u32);
                x += 4093;
            }
        }
    }
}
