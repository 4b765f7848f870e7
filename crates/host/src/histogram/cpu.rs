//! Oracle: histogram of keys, one bin per key value below `nbins`.

use super::Histogram;

/// Counts `keys[i]` in bin `keys[i]` when it is `< nbins`; counts the others as out of range.
pub fn histogram(keys: &[u32], nbins: u32) -> Histogram {
    let mut h = Histogram {
        counts: vec![0; nbins as usize],
        out_of_range: 0,
        first_out_of_range: None,
    };
    for (i, &k) in keys.iter().enumerate() {
        if k < nbins {
            h.counts[k as usize] += 1;
        } else {
            h.out_of_range += 1;
            h.first_out_of_range.get_or_insert(i);
        }
    }
    h
}
