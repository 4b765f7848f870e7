//! Deterministic input generators shared by the demo, the tests and the benchmarks.
//!
//! The benchmark inputs use one formula, `splitmix64(stream << 32 | i)`, that the CUB
//! baseline harness (`bench/cub_baseline.cu`) reproduces bit for bit on the device, so both
//! sides time the same data.

/// SplitMix64 finaliser (Steele, Lea, Flood 2014).
pub const fn splitmix64(x: u64) -> u64 {
    let mut x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn stream(s: u64, n: usize) -> impl Iterator<Item = u64> {
    (0..n as u64).map(move |i| splitmix64((s << 32).wrapping_add(i)))
}

/// Scan benchmark values: small numbers, `r & 0xff` of stream 1.
pub fn scan_values(n: usize) -> Vec<u32> {
    stream(1, n).map(|r| (r & 0xff) as u32).collect()
}

/// Histogram keys, uniform over 256 bins (stream 2).
pub fn uniform_keys(n: usize) -> Vec<u32> {
    stream(2, n).map(|r| (r & 0xff) as u32).collect()
}

/// Histogram keys, skewed: 80% in the 8 hot bins 0..8, the rest uniform over 256 (stream 2).
pub fn skewed_keys(n: usize) -> Vec<u32> {
    stream(2, n)
        .map(|r| {
            if (r >> 32) % 5 != 0 {
                (r & 7) as u32
            } else {
                (r & 0xff) as u32
            }
        })
        .collect()
}

/// Selection values, uniform `u32` (stream 3); `x < 2^31` keeps about half.
pub fn select_values(n: usize) -> Vec<u32> {
    stream(3, n).map(|r| (r >> 32) as u32).collect()
}

/// Uniform random `u32` below `bound` from a seed (tests and the demo).
pub fn random_below(seed: u64, n: usize, bound: u32) -> Vec<u32> {
    stream(seed, n)
        .map(|r| (((r >> 32) * bound as u64) >> 32) as u32)
        .collect()
}
