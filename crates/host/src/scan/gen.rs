//! Benchmark inputs of the scan (a hash stream the CUB harness reproduces).

use crate::rng::hash_stream;

/// Scan benchmark values: small numbers, `r & 0xff` of stream 1.
pub fn scan_values(n: usize) -> Vec<u32> {
    hash_stream(1, n, |r| (r & 0xff) as u32)
}
