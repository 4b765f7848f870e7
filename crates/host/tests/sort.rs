//! Property tests of the radix-sort oracle against independent facts: `slice::sort_by_key`
//! on an order key built bit by bit, a byte-wise LSD counting sort (the GPU's algorithm,
//! on the CPU), stability and permutation checks; and the `Backend` API's validation.
//! (The GPU kernels are tested against this oracle by the `gpu` test of `detkit-tests`.)

use detkit::sort::{cpu, SortKey, SortOptions};
use detkit::{Backend, Error};
use proptest::prelude::*;

/// The order key, built bit by bit from the top of the range (independent of the oracle's
/// shift-and-mask): bit `b` of the key, complemented when descending.
fn order_bits<K: SortKey>(key: K, begin: u32, end: u32, descending: bool) -> u128 {
    (begin..end).rev().fold(0u128, |acc, b| {
        let bit = (key.to_u64() >> b) & 1;
        acc << 1 | (bit ^ descending as u64) as u128
    })
}

/// Stable LSD radix sort with 8-bit digits on the CPU (what the GPU kernels do, pass by
/// pass): returns the permutation.
fn lsd_permutation<K: SortKey>(keys: &[K], begin: u32, end: u32, descending: bool) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..keys.len()).collect();
    let mut shift = begin;
    while shift < end {
        let bits = (end - shift).min(8);
        let mask = (1u64 << bits) - 1;
        let digit = |i: usize| {
            let d = (keys[i].to_u64() >> shift) & mask;
            (if descending { mask - d } else { d }) as usize
        };
        let mut count = [0usize; 257];
        for &i in &perm {
            count[digit(i) + 1] += 1;
        }
        for d in 0..256 {
            count[d + 1] += count[d];
        }
        let mut next = vec![0; perm.len()];
        for &i in &perm {
            let d = digit(i);
            next[count[d]] = i;
            count[d] += 1;
        }
        perm = next;
        shift += bits;
    }
    perm
}

fn range<K: SortKey>(bits: (u32, u32)) -> (u32, u32) {
    let (a, b) = (bits.0 % (K::BITS + 1), bits.1 % (K::BITS + 1));
    (a.min(b), a.max(b))
}

fn check_oracle<K: SortKey>(keys: &[K], begin: u32, end: u32, descending: bool) {
    let opts = SortOptions {
        begin_bit: begin,
        end_bit: Some(end),
        descending,
    };
    let idx: Vec<u32> = (0..keys.len() as u32).collect();
    let (k, v) = cpu::sort_pairs(keys, &idx, &opts);
    // 1. `slice::sort_by_key` (stable) on the bit-by-bit order key.
    let mut want: Vec<(K, u32)> = keys.iter().copied().zip(0..).collect();
    want.sort_by_key(|&(key, _)| order_bits(key, begin, end, descending));
    let want_k: Vec<K> = want.iter().map(|p| p.0).collect();
    let want_v: Vec<u32> = want.iter().map(|p| p.1).collect();
    assert_eq!(k, want_k, "keys, bits {begin}..{end} desc {descending}");
    assert_eq!(v, want_v, "values, bits {begin}..{end} desc {descending}");
    // 2. The byte-wise LSD counting sort.
    let lsd: Vec<u32> = lsd_permutation(keys, begin, end, descending)
        .into_iter()
        .map(|i| i as u32)
        .collect();
    assert_eq!(
        v, lsd,
        "LSD permutation, bits {begin}..{end} desc {descending}"
    );
    // 3. Stability and order, checked directly: order keys non-decreasing, equal order keys
    //    in increasing input index; a permutation; every key kept whole (bits outside too).
    let mut seen = vec![false; keys.len()];
    for i in 0..k.len() {
        assert_eq!(k[i], keys[v[i] as usize], "key moved without its value");
        assert!(
            !std::mem::replace(&mut seen[v[i] as usize], true),
            "duplicate"
        );
        if i > 0 {
            let (a, b) = (
                order_bits(k[i - 1], begin, end, descending),
                order_bits(k[i], begin, end, descending),
            );
            assert!(
                a < b || (a == b && v[i - 1] < v[i]),
                "unstable or unsorted at {i}"
            );
        }
    }
    // 4. Keys only = the keys of the pairs.
    assert_eq!(cpu::sort_keys(keys, &opts), k);
}

proptest! {
    #[test]
    fn u32_oracle_matches_independent_sorts(
        keys in prop::collection::vec(any::<u32>(), 0..300),
        small in any::<bool>(),
        bits in (0u32..64, 0u32..64),
        descending in any::<bool>(),
    ) {
        // Duplicates matter for stability: often squeeze the keys into a few values.
        let keys: Vec<u32> = if small { keys.iter().map(|k| k & 0x0303_0303).collect() } else { keys };
        let (b, e) = range::<u32>(bits);
        check_oracle(&keys, b, e, descending);
        check_oracle(&keys, 0, 32, descending);
    }

    #[test]
    fn u64_oracle_matches_independent_sorts(
        keys in prop::collection::vec(any::<u64>(), 0..300),
        small in any::<bool>(),
        bits in (0u32..130, 0u32..130),
        descending in any::<bool>(),
    ) {
        let keys: Vec<u64> = if small { keys.iter().map(|k| k & 0x0101_0000_0303_0003).collect() } else { keys };
        let (b, e) = range::<u64>(bits);
        check_oracle(&keys, b, e, descending);
        check_oracle(&keys, 0, 48, descending);
        check_oracle(&keys, 0, 64, descending);
    }

    #[test]
    fn backend_cpu_pairs_of_every_value_size(
        keys in prop::collection::vec(0u32..16, 0..200),
        descending in any::<bool>(),
    ) {
        let opts = SortOptions { descending, ..SortOptions::default() };
        let b = Backend::cpu();
        let idx: Vec<u32> = (0..keys.len() as u32).collect();
        let (k, v) = b.sort_pairs_u32(&keys, &idx, opts).unwrap();
        prop_assert_eq!(&k, &cpu::sort_keys(&keys, &opts));
        let v8: Vec<u64> = idx.iter().map(|&i| (i as u64) << 32 | 7).collect();
        let v12: Vec<[f32; 3]> = idx.iter().map(|&i| [i as f32, 0.5, -1.0]).collect();
        let v16: Vec<[u32; 4]> = idx.iter().map(|&i| [i, !i, 3, 4]).collect();
        let (_, w8) = b.sort_pairs_u32(&keys, &v8, opts).unwrap();
        let (_, w12) = b.sort_pairs_u32(&keys, &v12, opts).unwrap();
        let (_, w16) = b.sort_pairs_u32(&keys, &v16, opts).unwrap();
        for i in 0..keys.len() {
            prop_assert_eq!(w8[i] >> 32, v[i] as u64);
            prop_assert_eq!(w12[i][0], v[i] as f32);
            prop_assert_eq!(w16[i][0], v[i]);
        }
    }
}

#[test]
fn worked_example() {
    let b = Backend::cpu();
    let keys = [0x0102u32, 0x0201, 0x0101, 0x0202];
    let vals = [0u32, 1, 2, 3];
    let (k, v) = b
        .sort_pairs_u32(&keys, &vals, SortOptions::default())
        .unwrap();
    assert_eq!(k, [0x0101, 0x0102, 0x0201, 0x0202]);
    assert_eq!(v, [2, 0, 1, 3]);
    let (k, v) = b
        .sort_pairs_u32(&keys, &vals, SortOptions::bits(8, 16))
        .unwrap();
    assert_eq!(k, [0x0102, 0x0101, 0x0201, 0x0202]);
    assert_eq!(v, [0, 2, 1, 3]);
    let (k, v) = b
        .sort_pairs_u32(&keys, &vals, SortOptions::default().descending())
        .unwrap();
    assert_eq!(k, [0x0202, 0x0201, 0x0102, 0x0101]);
    assert_eq!(v, [3, 1, 0, 2]);
}

#[test]
fn empty_range_is_the_identity_and_bad_ranges_are_errors() {
    let b = Backend::cpu();
    let keys = [5u32, 1, 4, 1];
    assert_eq!(
        b.sort_keys_u32(&keys, SortOptions::bits(7, 7)).unwrap(),
        keys
    );
    assert_eq!(b.sort_keys_u32(&[], SortOptions::default()).unwrap(), []);
    assert_eq!(b.sort_keys_u32(&[9], SortOptions::default()).unwrap(), [9]);
    for bad in [SortOptions::bits(0, 33), SortOptions::bits(9, 8)] {
        assert!(
            matches!(b.sort_keys_u32(&keys, bad), Err(Error::InvalidInput { .. })),
            "{bad:?} accepted"
        );
    }
    assert!(b.sort_keys_u64(&[1, 2], SortOptions::bits(0, 64)).is_ok());
    assert!(matches!(
        b.sort_keys_u64(&[1, 2], SortOptions::bits(0, 65)),
        Err(Error::InvalidInput { .. })
    ));
    assert_eq!(SortOptions::bits(0, 48).passes::<u64>().unwrap(), 6);
    assert_eq!(SortOptions::default().passes::<u32>().unwrap(), 4);
    assert_eq!(SortOptions::bits(3, 3).passes::<u32>().unwrap(), 0);
}

#[test]
fn value_errors() {
    let b = Backend::cpu();
    let keys = [3u32, 1, 2];
    assert!(matches!(
        b.sort_pairs_u32(&keys, &[1u16, 2, 3], SortOptions::default()),
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        b.sort_pairs_u32(&keys, &[1u32, 2], SortOptions::default()),
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        b.sort_pairs_u32(&keys, &[[0u8; 20]; 3], SortOptions::default()),
        Err(Error::InvalidInput { .. })
    ));
}

#[test]
fn launch_counts() {
    use detkit::sort::launches_for;
    let tile = detkit_gpu::sort::SINGLE_TILE as usize;
    let all = SortOptions::default();
    assert_eq!(launches_for::<u32>(0, &all).unwrap(), 0);
    assert_eq!(launches_for::<u32>(1, &all).unwrap(), 1);
    assert_eq!(launches_for::<u32>(tile, &all).unwrap(), 1);
    assert_eq!(launches_for::<u32>(tile + 1, &all).unwrap(), 5);
    assert_eq!(
        launches_for::<u64>(1 << 20, &SortOptions::bits(0, 48)).unwrap(),
        7
    );
    assert_eq!(
        launches_for::<u64>(1 << 20, &SortOptions::bits(5, 5)).unwrap(),
        0
    );
}
