//! Oracle: bucket container, stable (a counting sort of indices by key).

use crate::bucket::{BlockBuckets, Buckets};

/// Items `0..keys.len()` grouped by key, increasing index inside each bin.
/// Keys must be `< nbins` (checked by the caller).
pub fn bucket(keys: &[u32], nbins: u32) -> Buckets {
    let mut offsets = vec![0u32; nbins as usize + 1];
    for &k in keys {
        offsets[k as usize + 1] += 1;
    }
    for b in 0..nbins as usize {
        offsets[b + 1] += offsets[b];
    }
    let mut cursor = offsets.clone();
    let mut content = vec![0u32; keys.len()];
    for (i, &k) in keys.iter().enumerate() {
        content[cursor[k as usize] as usize] = i as u32;
        cursor[k as usize] += 1;
    }
    Buckets { offsets, content }
}

/// One container per segment `segments[s]..segments[s + 1]`; offsets relative to the
/// segment start, content holds global indices, stable.
pub fn block_bucket(keys: &[u32], segments: &[u32], nbins: u32) -> BlockBuckets {
    let nsegs = segments.len().saturating_sub(1);
    let mut offsets = Vec::with_capacity(nsegs * (nbins as usize + 1));
    let mut content = vec![0u32; keys.len()];
    for s in 0..nsegs {
        let (a, b) = (segments[s] as usize, segments[s + 1] as usize);
        let local = bucket(&keys[a..b], nbins);
        offsets.extend_from_slice(&local.offsets);
        for (j, &c) in local.content.iter().enumerate() {
            content[a + j] = c + a as u32;
        }
    }
    BlockBuckets {
        nbins,
        offsets,
        content,
        fallbacks: 0,
    }
}
