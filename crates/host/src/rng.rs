//! Random numbers for every generator in detkit: one seeded PRNG, and the hash stream the
//! CUB baseline reproduces.
//!
//! - [`Rng`] is `rand_xoshiro`'s `Xoshiro256PlusPlus`, seeded by [`rng`]: a small, explicit
//!   algorithm whose output `rand_xoshiro` keeps stable across versions, so a generated event
//!   is the same for the same seed on every machine and release. Families draw from it with
//!   `rand`'s [`rand::Rng`] methods (`random_range`, `random::<f64>()`, …). (The generated data
//!   changed once, when the three hand-written SplitMix generators were replaced by it.)
//! - [`hash_stream`] is `splitmix64(stream << 32 | i)`: a counter-based hash, not a PRNG
//!   state, because `bench/cub_baseline.cu` recomputes it on the device so both sides of a
//!   benchmark time the same data without copying it.

use rand::SeedableRng;
use rand_distr::{Distribution, Poisson, StandardNormal};

/// The seeded generator of every detkit generator.
pub type Rng = rand_xoshiro::Xoshiro256PlusPlus;

/// A generator for `seed` (the same stream for the same seed, on every platform).
pub fn rng(seed: u64) -> Rng {
    Rng::seed_from_u64(seed)
}

impl Draw for Rng {}

/// The draws the detector generators make, on top of `rand`'s (`rand_distr` for the normal
/// and Poisson distributions).
pub trait Draw: rand::Rng + Sized {
    /// Uniform in `[0, 1)`.
    fn uniform(&mut self) -> f64 {
        self.random::<f64>()
    }
    /// Uniform in `[0, 1)` (the PET generator's name for it).
    fn unit(&mut self) -> f64 {
        self.uniform()
    }
    /// Uniform integer in `[0, n)`; `n > 0`.
    fn below(&mut self, n: u32) -> u32 {
        self.random_range(0..n.max(1))
    }
    /// Standard normal.
    fn normal(&mut self) -> f64 {
        self.sample(StandardNormal)
    }
    /// Poisson-distributed count of mean `mean` (0 for a mean <= 0).
    fn poisson(&mut self, mean: f64) -> u32 {
        match Poisson::new(mean) {
            Ok(p) => p.sample(self) as u32,
            Err(_) => 0,
        }
    }
}

/// SplitMix64 finaliser (Steele, Lea, Flood 2014).
pub const fn splitmix64(x: u64) -> u64 {
    let mut x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Element `i` of hash stream `s`: `splitmix64(s << 32 | i)` (what the CUB harness computes).
#[inline]
pub const fn hash(s: u64, i: u64) -> u64 {
    splitmix64((s << 32).wrapping_add(i))
}

/// `n` elements of hash stream `s`, `f` applied to each, computed in parallel (`rayon`) so
/// that benchmark inputs of 2^28 items take a fraction of a second.
pub fn hash_stream<T: Send>(s: u64, n: usize, f: impl Fn(u64) -> T + Sync + Send) -> Vec<T> {
    use rayon::prelude::*;
    (0..n as u64)
        .into_par_iter()
        .map(|i| f(hash(s, i)))
        .collect()
}

/// Uniform random `u32` below `bound` from hash stream `seed` (tests and the demo).
pub fn random_below(seed: u64, n: usize, bound: u32) -> Vec<u32> {
    hash_stream(seed, n, |r| (((r >> 32) * bound as u64) >> 32) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng as _;

    #[test]
    fn rng_is_reproducible_and_seed_dependent() {
        let a: Vec<u64> = (0..4)
            .map(|_| 0)
            .scan(rng(7), |r, _: u64| Some(r.random::<u64>()))
            .collect();
        let b: Vec<u64> = (0..4)
            .map(|_| 0)
            .scan(rng(7), |r, _: u64| Some(r.random::<u64>()))
            .collect();
        let c: Vec<u64> = (0..4)
            .map(|_| 0)
            .scan(rng(8), |r, _: u64| Some(r.random::<u64>()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn hash_stream_matches_the_formula() {
        let v = hash_stream(3, 5, |r| r);
        for (i, &x) in v.iter().enumerate() {
            assert_eq!(x, splitmix64((3u64 << 32) + i as u64));
        }
        // Reference value of SplitMix64 from seed 0 (first output of the published generator).
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn draws_have_their_distributions() {
        let mut r = rng(3);
        let n = 20_000;
        let u: Vec<f64> = (0..n).map(|_| r.uniform()).collect();
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = u.iter().sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        let z: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let m = z.iter().sum::<f64>() / n as f64;
        let v = z.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
        assert!(m.abs() < 0.03 && (v - 1.0).abs() < 0.05, "{m} {v}");
        let p: Vec<u32> = (0..n).map(|_| r.poisson(4.0)).collect();
        let pm = p.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        assert!((pm - 4.0).abs() < 0.1, "{pm}");
        assert_eq!(r.poisson(0.0), 0);
        assert!((0..1000).all(|_| r.below(7) < 7));
    }

    #[test]
    fn random_below_stays_below() {
        assert!(random_below(1, 1000, 17).iter().all(|&x| x < 17));
    }
}
