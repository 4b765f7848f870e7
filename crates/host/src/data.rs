//! Benchmark inputs shared by the demo, the tests and the benchmarks (hash streams that the
//! CUB baseline harness, `bench/cub_baseline.cu`, reproduces on the device).

use crate::rng::hash_stream;
pub use crate::rng::{random_below, splitmix64};

/// Scan benchmark values: small numbers, `r & 0xff` of stream 1.
pub fn scan_values(n: usize) -> Vec<u32> {
    hash_stream(1, n, |r| (r & 0xff) as u32)
}

/// Selection values, uniform `u32` (stream 3); `x < 2^31` keeps about half.
pub fn select_values(n: usize) -> Vec<u32> {
    hash_stream(3, n, |r| (r >> 32) as u32)
}
