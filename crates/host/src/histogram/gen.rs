//! Benchmark inputs of the histogram (hash streams the CUB harness reproduces).

use crate::rng::hash_stream;

/// Histogram keys, uniform over 256 bins (stream 2).
pub fn uniform_keys(n: usize) -> Vec<u32> {
    hash_stream(2, n, |r| (r & 0xff) as u32)
}

/// Histogram keys, skewed: 80% in the 8 hot bins 0..8, the rest uniform over 256 (stream 2).
pub fn skewed_keys(n: usize) -> Vec<u32> {
    hash_stream(2, n, |r| {
        if (r >> 32) % 5 != 0 {
            (r & 7) as u32
        } else {
            (r & 0xff) as u32
        }
    })
}
