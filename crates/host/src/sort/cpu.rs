//! Oracle: a stable sort by the key's bits `begin_bit..end_bit` (complemented within the
//! range when descending), the plainest code: `sort_by_key` of the indices on that number.

use rayon::prelude::*;

use super::{SortKey, SortOptions};

/// The number the order compares: bits `begin_bit..end_bit` of `key` (the range clamped to
/// the key's bits), complemented within the range when descending.
pub fn order_key<K: SortKey>(key: K, opts: &SortOptions) -> u64 {
    let end = opts.end_bit.unwrap_or(K::BITS).min(K::BITS);
    let begin = opts.begin_bit.min(end);
    let width = end - begin;
    if width == 0 {
        return 0;
    }
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let v = (key.to_u64() >> begin) & mask;
    if opts.descending {
        !v & mask
    } else {
        v
    }
}

/// The stable sorting permutation: `perm[i]` is the input index of output `i`.
pub fn sort_permutation<K: SortKey>(keys: &[K], opts: &SortOptions) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..keys.len()).collect();
    // `sort_by_key` and rayon's `par_sort_by_cached_key` are stable: equal keys keep index
    // order, so the result does not depend on the thread count. (The cached form computes each
    // order key once instead of reading `keys[i]` at every comparison.)
    if keys.len() >= 1 << 16 {
        perm.par_sort_by_cached_key(|&i| order_key(keys[i], opts));
    } else {
        perm.sort_by_key(|&i| order_key(keys[i], opts));
    }
    perm
}

/// Stable sort of `keys` by the bits `opts` names.
pub fn sort_keys<K: SortKey>(keys: &[K], opts: &SortOptions) -> Vec<K> {
    sort_permutation(keys, opts)
        .into_iter()
        .map(|i| keys[i])
        .collect()
}

/// Stable sort of `keys` and `values` (as many) by the bits `opts` names.
pub fn sort_pairs<K: SortKey, V: Copy>(
    keys: &[K],
    values: &[V],
    opts: &SortOptions,
) -> (Vec<K>, Vec<V>) {
    assert_eq!(keys.len(), values.len(), "as many values as keys");
    let perm = sort_permutation(keys, opts);
    (
        perm.iter().map(|&i| keys[i]).collect(),
        perm.iter().map(|&i| values[i]).collect(),
    )
}
