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

/// The seeded generator of every detkit generator.
pub type Rng = rand_xoshiro::Xoshiro256PlusPlus;

/// A generator for `seed` (the same stream for the same seed, on every platform).
pub fn rng(seed: u64) -> Rng {
    Rng::seed_from_u64(seed)
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
    fn random_below_stays_below() {
        assert!(random_below(1, 1000, 17).iter().all(|&x| x < 17));
    }
}
