//! Benchmark inputs of the radix sort: hash streams that `bench/cub_baseline.cu` recomputes
//! (`sort_key_u32`, `sort_key_u64` there), so both sides sort the same keys.

use crate::rng::hash_stream;

/// Hash stream of the `u32` sort keys.
pub const STREAM_U32: u64 = 5;
/// Hash stream of the `u64` sort keys.
pub const STREAM_U64: u64 = 6;

/// `u32` keys, uniform: the high word of stream 5.
pub fn keys_u32(n: usize) -> Vec<u32> {
    hash_stream(STREAM_U32, n, |r| (r >> 32) as u32)
}

/// `u64` keys, uniform over all 64 bits: stream 6.
pub fn keys_u64(n: usize) -> Vec<u64> {
    hash_stream(STREAM_U64, n, |r| r)
}

/// `u64` keys of 48 bits (a timestamp's range): stream 6 with the top 16 bits cleared.
pub fn keys_u48(n: usize) -> Vec<u64> {
    hash_stream(STREAM_U64, n, |r| r & ((1 << 48) - 1))
}

/// The values of the pair benchmarks: each key's input index.
pub fn index_values(n: usize) -> Vec<u32> {
    (0..n as u32).collect()
}
