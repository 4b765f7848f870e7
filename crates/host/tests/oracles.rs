//! Property tests of the CPU oracles against independent facts: brute force, invariants.
//! (The GPU kernels are tested against these oracles by the `gpu` test of `detkit-tests`.)

use detkit::ScanKind;
use detkit_gpu::histogram as kh;
use proptest::prelude::*;

proptest! {
    #[test]
    fn scan_matches_brute_force(v in prop::collection::vec(any::<u32>(), 0..300)) {
        let ex = detkit::scan::cpu::scan(&v, ScanKind::Exclusive);
        let inc = detkit::scan::cpu::scan(&v, ScanKind::Inclusive);
        for i in 0..v.len() {
            let brute = v[..i].iter().fold(0u32, |a, &b| a.wrapping_add(b));
            prop_assert_eq!(ex[i], brute);
            prop_assert_eq!(inc[i], brute.wrapping_add(v[i]));
        }
    }

    #[test]
    fn scan_u64_matches_brute_force(v in prop::collection::vec(any::<u64>(), 0..200)) {
        let ex = detkit::scan::cpu::scan(&v, ScanKind::Exclusive);
        for i in 0..v.len() {
            prop_assert_eq!(ex[i], v[..i].iter().fold(0u64, |a, &b| a.wrapping_add(b)));
        }
    }

    #[test]
    fn block_scan_is_scan_per_block(v in prop::collection::vec(0u32..1000, 0..500), block in 1usize..70) {
        let (out, totals) = detkit::scan::cpu::block_scan(&v, block, ScanKind::Exclusive);
        prop_assert_eq!(totals.len(), v.len().div_ceil(block));
        for (b, chunk) in v.chunks(block).enumerate() {
            let mut acc = 0u32;
            for (j, &x) in chunk.iter().enumerate() {
                prop_assert_eq!(out[b * block + j], acc);
                acc += x;
            }
            prop_assert_eq!(totals[b], acc);
        }
    }

    #[test]
    fn select_keeps_order_and_exactly_the_matches(v in prop::collection::vec(any::<u32>(), 0..400), lo in any::<u32>(), width in any::<u32>()) {
        let hi = lo.saturating_add(width);
        let out = detkit::compact::cpu::select(&v, |_, x| detkit_gpu::compact::in_range(x, lo, hi));
        prop_assert_eq!(out.len(), v.iter().filter(|&&x| lo <= x && x < hi).count());
        // `out` is a subsequence of `v`: walk both.
        let mut it = v.iter();
        for x in &out {
            prop_assert!(lo <= *x && *x < hi);
            prop_assert!(it.any(|y| y == x));
        }
    }

    #[test]
    fn histogram_counts_every_key_once(keys in prop::collection::vec(0u32..80, 0..500), nbins in 1u32..70) {
        let h = detkit::histogram::cpu::histogram(&keys, nbins);
        prop_assert_eq!(h.counts.iter().map(|&c| c as usize).sum::<usize>() + h.out_of_range as usize, keys.len());
        for b in 0..nbins {
            prop_assert_eq!(h.counts[b as usize] as usize, keys.iter().filter(|&&k| k == b).count());
        }
        prop_assert_eq!(h.first_out_of_range, keys.iter().position(|&k| k >= nbins));
    }

    #[test]
    fn bucket_groups_stably(keys in prop::collection::vec(0u32..50, 0..500)) {
        let nbins = 50;
        let b = detkit::bucket::cpu::bucket(&keys, nbins);
        prop_assert_eq!(b.offsets[0], 0);
        prop_assert_eq!(b.offsets[nbins as usize] as usize, keys.len());
        let mut seen = vec![false; keys.len()];
        for bin in 0..nbins as usize {
            let items = b.bin(bin);
            prop_assert!(items.windows(2).all(|w| w[0] < w[1]), "not increasing");
            for &i in items {
                prop_assert_eq!(keys[i as usize] as usize, bin);
                prop_assert!(!seen[i as usize]);
                seen[i as usize] = true;
            }
        }
        prop_assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn block_bucket_is_bucket_per_segment(keys in prop::collection::vec(0u32..9, 0..300), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8)) {
        let mut segments: Vec<u32> = cuts.iter().map(|c| c.index(keys.len() + 1) as u32).collect();
        segments.push(0);
        segments.push(keys.len() as u32);
        segments.sort_unstable();
        let r = detkit::bucket::cpu::block_bucket(&keys, &segments, 9);
        for s in 0..segments.len() - 1 {
            let (a, z) = (segments[s] as usize, segments[s + 1] as usize);
            let local = detkit::bucket::cpu::bucket(&keys[a..z], 9);
            for b in 0..9 {
                let want: Vec<u32> = local.bin(b).iter().map(|&i| i + a as u32).collect();
                prop_assert_eq!(r.bin(&segments, s, b), &want[..]);
            }
        }
    }

    #[test]
    fn first_index_code_round_trips(i in 0u32..u32::MAX) {
        prop_assert_eq!(kh::decode_first_index(kh::encode_first_index(i)), Some(i));
        // The smallest index wins an atomicMax of codes.
        prop_assert!(kh::encode_first_index(i) > kh::encode_first_index(i.saturating_add(1)) || i == u32::MAX - 1);
    }
}

#[test]
fn histogram_copies_fit_shared_memory() {
    for nbins in [1, 7, 256, 1000, 3000, kh::HISTOGRAM_SHARED_MAX_BINS] {
        assert!(
            kh::histogram_smem_bytes(nbins) <= kh::HISTOGRAM_SMEM_LIMIT,
            "{nbins}"
        );
        assert!(kh::histogram_copies(nbins) >= 1);
    }
}

#[test]
fn worked_examples_of_the_module_docs() {
    assert_eq!(
        detkit::scan::cpu::scan(&[3u32, 1, 4, 1, 5], ScanKind::Exclusive),
        [0, 3, 4, 8, 9]
    );
    assert_eq!(
        detkit::scan::cpu::scan(&[3u32, 1, 4, 1, 5], ScanKind::Inclusive),
        [3, 4, 8, 9, 14]
    );
    let b = detkit::bucket::cpu::bucket(&[2, 0, 2, 1, 0], 3);
    assert_eq!(b.offsets, [0, 2, 3, 5]);
    assert_eq!(b.content, [1, 4, 3, 0, 2]);
    let h = detkit::histogram::cpu::histogram(&[0, 3, 3, 7, 1], 4);
    assert_eq!(
        (h.counts, h.out_of_range, h.first_out_of_range),
        (vec![1, 1, 0, 2], 1, Some(3))
    );
}

#[test]
fn cpu_backend_rejects_bad_input_with_typed_errors() {
    let cpu = detkit::Backend::cpu();
    assert!(
        matches!(cpu.bucket(&[0, 5, 1], 3, detkit::BucketOrder::Stable), Err(detkit::Error::InvalidInput { detail, .. }) if detail.contains("index 1"))
    );
    assert!(matches!(
        cpu.block_bucket(&[0, 1], &[0, 1], 3, detkit::BucketOrder::Stable, None),
        Err(detkit::Error::InvalidInput { .. })
    ));
    assert!(matches!(
        cpu.histogram(&[0], 0),
        Err(detkit::Error::InvalidInput { .. })
    ));
    assert!(matches!(
        cpu.select_flagged_u32(&[1, 2], &[1]),
        Err(detkit::Error::InvalidInput { .. })
    ));
    assert!(matches!(
        cpu.block_scan_u32(&[1], 33, ScanKind::Exclusive),
        Err(detkit::Error::InvalidInput { .. })
    ));
}
