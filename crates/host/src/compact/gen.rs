//! Benchmark inputs of the compaction (a hash stream the CUB harness reproduces).

use crate::rng::hash_stream;

/// Selection values, uniform `u32` (stream 3); `x < 2^31` keeps about half.
pub fn select_values(n: usize) -> Vec<u32> {
    hash_stream(3, n, |r| (r >> 32) as u32)
}
