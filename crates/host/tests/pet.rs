//! PET chain: oracles against independent facts, the kernels' pure functions against the
//! oracles (a CPU emulation of each kernel's algorithm), formats, and input validation.

use detkit::pet::cpu::{self as oracle, CoincideConfig};
use detkit::pet::{self, gen, Scanner, StreamConfig};
use detkit::{Backend, Error};
use detkit_gpu::pet::{
    convert_frame, gallop_rank, merge_path, rank_in, run_bound, run_count, window_complete,
    window_pairs, Coincidence, DataFrameV2, Policy, Single, CONVERT_ACCEPTED, CONVERT_BAD_ADDRESS,
    CONVERT_CLAMPED, MAX_MULTIPLE,
};
use proptest::prelude::*;

fn single(crystal: u32, energy: f32, time: f64) -> Single {
    Single {
        crystal,
        energy,
        time,
    }
}

fn tiny() -> Scanner {
    gen::tiny_scanner(7)
}

fn raw_frame(bdm: u8, du: u8, x: u8, y: u8, time: u64, raw: u16) -> DataFrameV2 {
    DataFrameV2 {
        head_du: 0xA0 | du,
        bdm,
        time: time.to_be_bytes(),
        x,
        y,
        energy: raw.to_be_bytes(),
        temperature_int: 0,
        temperature_tail: 0,
    }
}

// ---------------------------------------------------------------------------------------
// Conversion
// ---------------------------------------------------------------------------------------

#[test]
fn convert_hand_worked() {
    // Tiny scanner: 4 channels, 2 axial modules (8 BDMs), DUs 1 x 2, crystals 4 x 4,
    // position map 16 x 16 cut into the 4 x 4 grid.
    let s = tiny();
    let p = s.params;
    // BDM 5 = ring position 1, axial module 1; DU 1 = block y 0, block z 1; pixel (9, 2):
    // origin = (2 * 4 / 16) * 4 + 9 * 4 / 16 = 0 * 4 + 2 = 2 → ox = 2, oy = 0,
    // local = 2 + (4 - 1 - 0) * 4 = 14.
    let f = raw_frame(5, 1, 9, 2, 0x0102, 5110);
    let (sgl, st) = convert_frame(&f, &p, |k| s.position[k as usize], |k| s.energy[k as usize]);
    // in ring = 1 * (1 * 4) + 1 / 2 * 4 + 14 / 4 = 4 + 0 + 3 = 7
    // ring = 5 / 4 * (2 * 4) + 1 % 2 * 4 + 14 % 4 = 8 + 4 + 2 = 14; per ring 4 * 1 * 1 * 4 = 16
    assert_eq!(sgl.crystal, 7 + 14 * 16);
    assert_eq!(sgl.time, 258.0);
    // factor index: ((5 * 2 + 1) * 16 + 14) * 1000 + 511
    let factor = s.energy[((5 * 2 + 1) * 16 + 14) * 1000 + 511];
    assert_eq!(sgl.energy, 5110.0 * factor);
    assert_eq!(st & CONVERT_CLAMPED, 0);
    assert_eq!(
        st & CONVERT_ACCEPTED != 0,
        (3500.0..=6500.0).contains(&sgl.energy)
    );
}

#[test]
fn convert_energy_table_end_is_clamped_and_counted() {
    let s = tiny();
    let p = s.params;
    let get = |f: &DataFrameV2| {
        convert_frame(f, &p, |k| s.position[k as usize], |k| s.energy[k as usize])
    };
    let base = 12 * 1000; // BDM 0, DU 0 (table offset 0), pixel (0, 0): origin 0, local 12
    let (a, st) = get(&raw_frame(0, 0, 0, 0, 1, 9999));
    assert_eq!(st & CONVERT_CLAMPED, 0);
    assert_eq!(a.energy, 9999.0 * s.energy[base + 999]);
    for raw in [10_000u16, 10_009, 65_535] {
        let (b, st) = get(&raw_frame(0, 0, 0, 0, 1, raw));
        assert_ne!(st & CONVERT_CLAMPED, 0, "raw {raw}");
        assert_eq!(b.energy, raw as f32 * s.energy[base + 999]);
    }
    let frames = [
        raw_frame(0, 0, 0, 0, 1, 10_000),
        raw_frame(0, 0, 0, 0, 2, 5000),
    ];
    let (_, st) = oracle::convert(&frames, &p, &s.position, &s.energy);
    assert_eq!(st.clamped, 1);
}

#[test]
fn convert_bad_addresses_are_counted_not_read() {
    let s = tiny();
    let frames = [
        raw_frame(0, 0, 0, 0, 1, 5000),
        raw_frame(8, 0, 0, 0, 2, 5000),  // BDM 8 of 8
        raw_frame(0, 2, 0, 0, 3, 5000),  // DU 2 of 2
        raw_frame(0, 0, 16, 0, 4, 5000), // x = position size
        raw_frame(0, 0, 0, 16, 5, 5000), // y
    ];
    let (out, st) = oracle::convert(&frames, &s.params, &s.position, &s.energy);
    assert_eq!(st.bad_address, 4);
    assert_eq!(st.first_bad_address, Some(1));
    assert_eq!(st.accepted + st.rejected_energy + st.bad_address, 5);
    assert!(out.len() <= 1);
    for f in &frames[1..] {
        let (_, st) = convert_frame(f, &s.params, |_| panic!("table read"), |_| panic!("read"));
        assert_eq!(st, CONVERT_BAD_ADDRESS);
    }
}

#[test]
fn scanner_validation_errors() {
    let s = tiny();
    let mut p = s.params;
    p.crystal_num_z = 0;
    assert!(matches!(
        pet::validate_params(&p),
        Err(Error::InvalidInput { .. })
    ));
    let mut pos = s.position.to_vec();
    pos[77] = 16;
    match Scanner::new(s.params, 10.0, pos, s.energy.clone()) {
        Err(Error::InvalidInput { detail, .. }) => assert!(detail.contains("entry 77"), "{detail}"),
        other => panic!("{other:?}"),
    }
    let mut en = s.energy.to_vec();
    en[5] = f32::NAN;
    assert!(Scanner::new(s.params, 10.0, s.position.clone(), en).is_err());
    assert!(Scanner::new(s.params, 10.0, s.position[1..].to_vec(), s.energy.clone()).is_err());
}

#[test]
fn scanner_toml_round_trip() {
    let dir = std::env::temp_dir().join(format!("detkit-pet-toml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let s = tiny();
    let path = s.write_files(&dir, "tiny").unwrap();
    let back = Scanner::from_toml_file(&path).unwrap();
    assert_eq!(back, s);
    std::fs::write(dir.join("bad.toml"), "channels = 4\n").unwrap();
    assert!(matches!(
        Scanner::from_toml_file(&dir.join("bad.toml")),
        Err(Error::InvalidInput { .. })
    ));
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------------
// Sort
// ---------------------------------------------------------------------------------------

/// CPU emulation of the GPU sort: tiles of `tile` sorted by rank merging, then merge passes
/// split by `merge_path` into output pieces of `tile`, each merged by `rank_in`.
fn emulate_sort(v: &[Single], tile: usize) -> Vec<Single> {
    let n = v.len();
    let mut a = v.to_vec();
    for base in (0..n).step_by(tile) {
        let m = (n - base).min(tile);
        let mut src = a[base..base + m].to_vec();
        let mut width = 1;
        while width < m {
            let mut dst = src.clone();
            for k in 0..m {
                let x = src[k];
                let run = k / width;
                let start = run * width;
                let partner = start ^ width;
                let pair_start = (run & !1) * width;
                let (plen, left) = if run % 2 == 0 {
                    (
                        if partner >= m {
                            0
                        } else {
                            (m - partner).min(width)
                        },
                        true,
                    )
                } else {
                    (width, false)
                };
                let r = rank_in(plen as u32, x.time, left, |q| {
                    src[partner + q as usize].time
                });
                dst[pair_start + (k - start) + r as usize] = x;
            }
            src = dst;
            width *= 2;
        }
        a[base..base + m].copy_from_slice(&src);
    }
    let mut width = tile as u64;
    while width < n as u64 {
        a = emulate_pass(&a, tile, width, &[]);
        width *= 2;
    }
    a
}

fn emulate_pass(a: &[Single], tile: usize, width: u64, runs: &[u64]) -> Vec<Single> {
    let n = a.len() as u64;
    let nruns = if width > 0 { 0 } else { runs.len() as u64 - 1 };
    let bound = |k: u64| run_bound(k, width, nruns, n, |q| runs[q as usize]);
    let npairs = run_count(width, nruns, n).div_ceil(2);
    let mut out = vec![single(u32::MAX, 0.0, -1.0); a.len()];
    for p0 in (0..n).step_by(tile) {
        let p1 = (p0 + tile as u64).min(n);
        for pair in 0..npairs {
            let (a0, b0, b1) = (bound(2 * pair), bound(2 * pair + 1), bound(2 * pair + 2));
            if b1 <= p0 || a0 >= p1 {
                continue;
            }
            let (la, lb) = (b0 - a0, b1 - b0);
            let (s0, s1) = (p0.max(a0), p1.min(b1));
            let split = |d| {
                merge_path(
                    d,
                    la,
                    lb,
                    |q| a[(a0 + q) as usize].time,
                    |q| a[(b0 + q) as usize].time,
                )
            };
            let (i0, i1) = (split(s0 - a0), split(s1 - a0));
            let (j0, j1) = (s0 - a0 - i0, s1 - a0 - i1);
            let pa = &a[(a0 + i0) as usize..(a0 + i1) as usize];
            let pb = &a[(b0 + j0) as usize..(b0 + j1) as usize];
            for (k, x) in pa.iter().enumerate() {
                let r = rank_in(pb.len() as u32, x.time, true, |q| pb[q as usize].time);
                out[s0 as usize + k + r as usize] = *x;
            }
            for (k, x) in pb.iter().enumerate() {
                let r = rank_in(pa.len() as u32, x.time, false, |q| pa[q as usize].time);
                out[s0 as usize + k + r as usize] = *x;
            }
        }
    }
    out
}

fn arb_singles(max: usize, tmax: u32) -> impl Strategy<Value = Vec<Single>> {
    prop::collection::vec((0u32..12, 0u32..7000, 0..tmax), 0..max).prop_map(|v| {
        v.into_iter()
            .map(|(c, e, t)| single(c, e as f32, t as f64))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn oracle_sort_is_a_stable_sorted_permutation(v in arb_singles(300, 50)) {
        let s = oracle::sort(&v).unwrap();
        // Brute force: element i goes after every element with a smaller time and after the
        // equal-time elements before it.
        let mut want = Vec::new();
        let mut times: Vec<f64> = v.iter().map(|x| x.time).collect();
        times.sort_by(f64::total_cmp);
        times.dedup();
        for t in times {
            want.extend(v.iter().filter(|x| x.time == t).copied());
        }
        prop_assert_eq!(s, want);
    }

    #[test]
    fn emulated_gpu_sort_equals_oracle(v in arb_singles(600, 40), tile in prop::sample::select(vec![1usize, 2, 4, 8, 32])) {
        prop_assert_eq!(emulate_sort(&v, tile), oracle::sort(&v).unwrap());
    }

    #[test]
    fn emulated_run_merge_equals_oracle(v in arb_singles(500, 60), cuts in prop::collection::vec(0usize..500, 0..12), tile in prop::sample::select(vec![1usize, 4, 16])) {
        let n = v.len();
        let mut starts: Vec<usize> = cuts.into_iter().filter(|&c| c <= n).collect();
        starts.push(0);
        starts.push(n);
        starts.sort_unstable();
        // Make every run sorted, then merge the runs pairwise until one is left.
        let mut a = v.clone();
        for w in starts.windows(2) {
            a[w[0]..w[1]].sort_by(|x, y| x.time.total_cmp(&y.time));
        }
        let want = oracle::sort(&a).unwrap();
        let mut bounds: Vec<u64> = starts.iter().map(|&x| x as u64).collect();
        while bounds.len() > 2 {
            a = emulate_pass(&a, tile, 0, &bounds);
            let mut next: Vec<u64> = bounds.iter().step_by(2).copied().collect();
            if *next.last().unwrap() != n as u64 {
                next.push(n as u64);
            }
            bounds = next;
        }
        prop_assert_eq!(a, want.clone());
        let starts32: Vec<u32> = starts.iter().map(|&x| x as u32).collect();
        let mut sorted_runs = v.clone();
        for w in starts.windows(2) {
            sorted_runs[w[0]..w[1]].sort_by(|x, y| x.time.total_cmp(&y.time));
        }
        prop_assert_eq!(Backend::cpu().pet_sort_runs(&sorted_runs, &starts32).unwrap(), want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn gallop_rank_equals_rank_in(mut v in prop::collection::vec(0u32..40, 0..300), key in 0u32..45, strict: bool) {
        v.sort_unstable();
        let len = v.len() as u32;
        prop_assert_eq!(
            gallop_rank(len, key, strict, |q| v[q as usize]),
            rank_in(len, key, strict, |q| v[q as usize])
        );
        // rank_in against a plain count.
        let count = v.iter().filter(|&&x| if strict { x < key } else { x <= key }).count() as u32;
        prop_assert_eq!(rank_in(len, key, strict, |q| v[q as usize]), count);
    }
}

#[test]
fn sort_rejects_non_finite_times() {
    let v = [
        single(1, 1.0, 3.0),
        single(2, 1.0, f64::NAN),
        single(3, 1.0, 1.0),
    ];
    match Backend::cpu().pet_sort(&v) {
        Err(Error::InvalidInput { detail, .. }) => assert!(detail.contains("single 1"), "{detail}"),
        other => panic!("{other:?}"),
    }
    let runs = [single(1, 1.0, 3.0), single(2, 1.0, 2.0)];
    assert!(Backend::cpu().pet_sort_runs(&runs, &[0, 2]).is_err());
    assert!(Backend::cpu().pet_sort_runs(&runs, &[0, 1]).is_err());
}

// ---------------------------------------------------------------------------------------
// Coincidences
// ---------------------------------------------------------------------------------------

#[test]
fn coincide_worked_example() {
    let s: Vec<Single> = [
        (1, 0.0),
        (2, 4.0),
        (3, 20.0),
        (4, 25.0),
        (5, 26.0),
        (6, 40.0),
        (6, 45.0),
        (7, 60.0),
    ]
    .iter()
    .map(|&(c, t)| single(c, 5000.0, t))
    .collect();
    let got = oracle::coincide(&s, &CoincideConfig::prompt(10.0)).unwrap();
    assert_eq!(got, vec![Coincidence { a: s[0], b: s[1] }]);
}

#[test]
fn coincide_window_is_closed_and_chains() {
    // Exactly W apart: same window (closed). 0, 10 → pair; 20 opens the next window.
    let s = vec![
        single(1, 1.0, 0.0),
        single(2, 1.0, 10.0),
        single(3, 1.0, 20.0),
        single(4, 1.0, 30.0),
    ];
    let got = oracle::coincide(&s, &CoincideConfig::prompt(10.0)).unwrap();
    assert_eq!(
        got,
        vec![
            Coincidence { a: s[0], b: s[1] },
            Coincidence { a: s[2], b: s[3] }
        ]
    );
    // Three in a window (same crystal counted): multiple, none.
    let s = vec![
        single(1, 1.0, 0.0),
        single(1, 1.0, 1.0),
        single(2, 1.0, 2.0),
    ];
    assert!(oracle::coincide(&s, &CoincideConfig::prompt(10.0))
        .unwrap()
        .is_empty());
}

#[test]
fn coincide_policies_hand_worked() {
    // One window of three: crystals 1, 1, 2; energies 100, 300, 200.
    let s = vec![
        single(1, 100.0, 0.0),
        single(1, 300.0, 1.0),
        single(2, 200.0, 2.0),
    ];
    let run = |p| {
        oracle::coincide(
            &s,
            &CoincideConfig {
                window: 5.0,
                delay: None,
                policy: p,
            },
        )
        .unwrap()
    };
    let pair = |i: usize, j: usize| Coincidence { a: s[i], b: s[j] };
    assert_eq!(run(Policy::KillAll), vec![]);
    assert_eq!(run(Policy::TakeAllGoods), vec![pair(0, 2), pair(1, 2)]);
    assert_eq!(run(Policy::TakeWinnerOfGoods), vec![pair(1, 2)]);
    // Winner over all pairs: (1, 2) sum 500 > (0, 1) 400: good → kept.
    assert_eq!(run(Policy::TakeWinnerIfIsGood), vec![pair(1, 2)]);
    // (0, 1) is not good → not all good.
    assert_eq!(run(Policy::TakeWinnerIfAllAreGoods), vec![]);
    // Two goods → killed.
    assert_eq!(run(Policy::KillAllIfMultipleGoods), vec![]);
    // Delayed: opener 0 at t=0, window [10, 15]: singles at 10 and 12 (crystals 3, 1).
    let d = vec![
        single(1, 100.0, 0.0),
        single(3, 100.0, 10.0),
        single(1, 200.0, 12.0),
    ];
    let got = oracle::coincide(
        &d,
        &CoincideConfig {
            window: 5.0,
            delay: Some(10.0),
            policy: Policy::KillAllIfMultipleGoods,
        },
    )
    .unwrap();
    assert_eq!(got, vec![Coincidence { a: d[0], b: d[1] }]);
}

#[test]
fn coincide_input_errors() {
    let s = vec![single(1, 1.0, 5.0), single(2, 1.0, 3.0)];
    match Backend::cpu().pet_coincide(&s, &CoincideConfig::prompt(10.0)) {
        Err(Error::InvalidInput { detail, .. }) => assert!(detail.contains("single 1"), "{detail}"),
        other => panic!("{other:?}"),
    }
    let ok = vec![single(1, 1.0, 1.0)];
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        assert!(Backend::cpu()
            .pet_coincide(&ok, &CoincideConfig::prompt(bad))
            .is_err());
    }
    let c = CoincideConfig {
        window: 1.0,
        delay: Some(0.0),
        policy: Policy::KillAll,
    };
    assert!(Backend::cpu().pet_coincide(&ok, &c).is_err());
    assert!(pet::policy_from_name("takeallgoods").is_ok());
    assert!(matches!(
        pet::policy_from_name("nope"),
        Err(Error::InvalidInput { .. })
    ));
    // A window over MAX_MULTIPLE with an enumerating policy: typed error.
    let big: Vec<Single> = (0..MAX_MULTIPLE + 1).map(|i| single(i, 1.0, 0.0)).collect();
    let c = CoincideConfig {
        window: 1.0,
        delay: None,
        policy: Policy::TakeAllGoods,
    };
    assert!(matches!(
        oracle::coincide(&big, &c),
        Err(Error::CapacityExceeded { .. })
    ));
    assert!(oracle::coincide(&big, &CoincideConfig::prompt(1.0))
        .unwrap()
        .is_empty());
}

/// CPU emulation of the GPU coincidence kernel `pet_coincide_tiles` (window ends by the
/// galloping search; prompt openers by the walk of each segment from its start, stopping at
/// the first incomplete window; delayed: every single), pairs by `window_pairs` in opener
/// order (written at the scanned offsets).
fn emulate_coincide(s: &[Single], c: &CoincideConfig, watermark: f64) -> (Vec<Coincidence>, usize) {
    let n = s.len();
    let reach = c.reach();
    let delayed = c.delay.is_some();
    let end = |o: usize| {
        o + 1
            + gallop_rank((n - o - 1) as u32, reach, false, |q| {
                s[o + 1 + q as usize].time - s[o].time
            }) as usize
    };
    let start = |o: usize| {
        o + 1
            + gallop_rank((n - o - 1) as u32, c.delay.unwrap_or(0.0), true, |q| {
                s[o + 1 + q as usize].time - s[o].time
            }) as usize
    };
    // (opener, end, first member) of every complete window, in opener order.
    let mut windows = Vec::new();
    let mut resume = n;
    for i in 0..n {
        if delayed {
            if window_complete(s[i].time, watermark, reach) {
                windows.push((i, end(i), start(i).min(end(i))));
            } else {
                resume = resume.min(i);
            }
        } else if i == 0 || s[i].time - s[i - 1].time > reach {
            let mut o = i;
            loop {
                if !window_complete(s[o].time, watermark, reach) {
                    resume = resume.min(o);
                    break;
                }
                let e = end(o);
                windows.push((o, e, o + 1));
                if e >= n || s[e].time - s[e - 1].time > reach {
                    break;
                }
                o = e;
            }
        }
    }
    let mut out = Vec::new();
    for (o, e, base) in windows {
        let len = if delayed {
            1 + e.saturating_sub(base)
        } else {
            e - o
        };
        let member = |k: u32| if k == 0 { o } else { base + k as usize - 1 };
        window_pairs(
            len as u32,
            delayed,
            c.policy,
            |k| s[member(k)],
            |a, b| {
                out.push(Coincidence {
                    a: s[member(a)],
                    b: s[member(b)],
                })
            },
        );
    }
    (out, resume)
}

fn arb_sorted(max: usize, step: u32) -> impl Strategy<Value = Vec<Single>> {
    prop::collection::vec((0u32..6, 0u32..7000, 0..step), 0..max).prop_map(|v| {
        let mut t = 0.0;
        v.into_iter()
            .map(|(c, e, dt)| {
                t += dt as f64;
                single(c, e as f32, t)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn emulated_gpu_coincide_equals_oracle(
        s in arb_sorted(200, 12),
        window in 0u32..15,
        delay in prop::option::of(1u32..20),
        policy in prop::sample::select(Policy::ALL.to_vec()),
    ) {
        let c = CoincideConfig { window: window as f64, delay: delay.map(f64::from), policy };
        let want = oracle::coincide(&s, &c).unwrap();
        prop_assert_eq!(emulate_coincide(&s, &c, f64::INFINITY).0, want);
    }

    #[test]
    fn oracle_killall_equals_brute_force(s in arb_sorted(150, 8), window in 0u32..10) {
        // Independent statement: singles i < j are a pair iff they form a whole window:
        // i is the first single after the previous window, j - i = 1, different crystals.
        let w = window as f64;
        let mut want = Vec::new();
        let mut start = 0;
        while start < s.len() {
            let members: Vec<usize> = (start..s.len()).take_while(|&k| s[k].time - s[start].time <= w).collect();
            if members.len() == 2 && s[members[0]].crystal != s[members[1]].crystal {
                want.push(Coincidence { a: s[members[0]], b: s[members[1]] });
            }
            start += members.len();
        }
        prop_assert_eq!(oracle::coincide(&s, &CoincideConfig::prompt(w)).unwrap(), want);
    }

    #[test]
    fn watermarked_prefixes_equal_whole(
        s in arb_sorted(200, 10),
        window in 0u32..12,
        delay in prop::option::of(1u32..20),
        policy in prop::sample::select(Policy::ALL.to_vec()),
        cuts in prop::collection::vec(0usize..200, 1..5),
    ) {
        // Feed the stream in pieces; after each piece the watermark is the next piece's first
        // time. Committed pairs must equal the whole stream's, and the emulated kernels must
        // agree with the oracle on every piece (resume included).
        let c = CoincideConfig { window: window as f64, delay: delay.map(f64::from), policy };
        let want = oracle::coincide(&s, &c).unwrap();
        let mut cuts: Vec<usize> = cuts.into_iter().filter(|&x| x < s.len()).collect();
        cuts.push(s.len());
        cuts.sort_unstable();
        cuts.dedup();
        let mut pending: Vec<Single> = Vec::new();
        let mut got = Vec::new();
        let mut prev = 0;
        for &cut in &cuts {
            let mut merged = pending.clone();
            merged.extend_from_slice(&s[prev..cut]);
            let wm = if cut == s.len() { f64::INFINITY } else { s[cut].time };
            let (pairs, resume) = oracle::coincide_until(&merged, &c, wm).unwrap();
            let (epairs, eresume) = emulate_coincide(&merged, &c, wm);
            prop_assert_eq!(&epairs, &pairs);
            prop_assert_eq!(eresume, resume);
            got.extend(pairs);
            pending = merged[resume..].to_vec();
            prev = cut;
        }
        prop_assert_eq!(got, want);
    }
}

// ---------------------------------------------------------------------------------------
// Generator, formats, streamed chain (CPU backend)
// ---------------------------------------------------------------------------------------

fn whole_chain(s: &Scanner, frames: &[DataFrameV2], c: &CoincideConfig) -> Vec<Coincidence> {
    let (singles, _) = oracle::convert(frames, &s.params, &s.position, &s.energy);
    let sorted = oracle::sort(&singles).unwrap();
    oracle::coincide(&sorted, c).unwrap()
}

#[test]
fn generator_streams_are_per_bdm_time_ordered() {
    let s = tiny();
    type Generator = fn(&Scanner, &gen::AcquisitionConfig) -> gen::Acquisition;
    let generators: [(&str, Generator, usize); 3] = [
        ("sequential", gen::acquisition, 5000),
        ("parallel, one segment", gen::acquisition_par, 5000),
        (
            "parallel, two segments",
            gen::acquisition_par,
            (1 << 20) + 5000,
        ),
    ];
    for (name, generate, singles) in generators {
        for slice in [200_000, u64::MAX] {
            let cfg = gen::AcquisitionConfig {
                singles,
                slice,
                ..Default::default()
            };
            let acq = generate(&s, &cfg);
            assert!(acq.frames.len() >= singles, "{name}");
            assert!(acq.frames.iter().all(|f| gen::frame_ok(&s, f)), "{name}");
            let mut last = vec![0u64; s.params.bdm_count() as usize];
            for f in &acq.frames {
                let t = detkit_gpu::pet::frame_time(f);
                assert!(t >= last[f.bdm as usize], "{name}");
                last[f.bdm as usize] = t;
            }
            // One slice: the frames are BDM by BDM, the runs say where each BDM starts.
            if slice == u64::MAX {
                let runs = &acq.bdm_runs;
                assert_eq!(runs.len(), s.params.bdm_count() as usize + 1, "{name}");
                assert_eq!(*runs.last().unwrap() as usize, acq.frames.len(), "{name}");
                for b in 0..runs.len() - 1 {
                    let run = &acq.frames[runs[b] as usize..runs[b + 1] as usize];
                    assert!(run.iter().all(|f| f.bdm as usize == b), "{name}: run {b}");
                }
            } else {
                assert!(acq.bdm_runs.is_empty(), "{name}");
            }
            // Truth pairs: both frames of an annihilation, within a few jitters of each other;
            // both photons are detected with probability `detect`^2, so the frames in truth
            // pairs are about `detect` of all.
            let share = 2.0 * acq.truth.len() as f64 / acq.frames.len() as f64;
            assert!((share - cfg.detect).abs() < 0.05, "{name}: share {share}");
            for &(i, j) in &acq.truth {
                assert!(i < j, "{name}");
                let (ti, tj) = (
                    detkit_gpu::pet::frame_time(&acq.frames[i]),
                    detkit_gpu::pet::frame_time(&acq.frames[j]),
                );
                assert!(
                    ti.abs_diff(tj) < 3000,
                    "{name}: truth pair {i},{j}: {ti} {tj}"
                );
            }
            // The same configuration draws the same acquisition.
            let again = generate(&s, &cfg);
            assert!(
                again.frames == acq.frames && again.truth == acq.truth,
                "{name}"
            );
            if singles < 10_000 {
                // Most isolated truth pairs inside the energy window are found by the chain.
                let pairs = whole_chain(&s, &acq.frames, &CoincideConfig::prompt(5000.0));
                assert!(!pairs.is_empty(), "{name}");
            }
        }
    }
}

#[test]
fn streamed_cpu_chain_equals_whole() {
    let s = tiny();
    let acq = gen::acquisition(
        &s,
        &gen::AcquisitionConfig {
            singles: 20_000,
            slice: 300_000,
            singles_rate: 4e7,
            ..Default::default()
        },
    );
    let bytes = gen::frame_bytes(&acq.frames);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("frames.bin");
    std::fs::write(&file, bytes).unwrap();
    // A file cut inside a frame is an error naming it.
    let cut = dir.path().join("cut.bin");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).unwrap();
    match Backend::cpu().pet_run_file(
        &cut,
        &s,
        &CoincideConfig::prompt(10.0),
        &StreamConfig::default(),
        |_| Ok(()),
        |_| {},
    ) {
        Err(Error::InvalidInput { detail, .. }) => assert!(detail.contains("cut.bin"), "{detail}"),
        other => panic!("{other:?}"),
    }
    for policy in [Policy::KillAll, Policy::TakeAllGoods] {
        for delay in [None, Some(20_000.0)] {
            let c = CoincideConfig {
                window: 5000.0,
                delay,
                policy,
            };
            let want = whole_chain(&s, &acq.frames, &c);
            for chunk in [1usize, 7, 1000, 4096, 1 << 20] {
                let sc = StreamConfig {
                    chunk_frames: chunk,
                    pending_capacity: 1 << 16,
                };
                // The same frames from a reader, from memory (chunks copied by several
                // threads) and from a file (read by several threads).
                type Run<'r> = Box<
                    dyn Fn(&mut dyn FnMut(&[Coincidence]) -> detkit::Result<()>) -> pet::StreamStats
                        + 'r,
                >;
                let runs: [(&str, Run); 3] = [
                    (
                        "reader",
                        Box::new(|sink| {
                            Backend::cpu()
                                .pet_run_stream(&mut &bytes[..], &s, &c, &sc, sink, |_| {})
                                .unwrap()
                        }),
                    ),
                    (
                        "memory",
                        Box::new(|sink| {
                            Backend::cpu()
                                .pet_run_frames(bytes, &s, &c, &sc, sink, |_| {})
                                .unwrap()
                        }),
                    ),
                    (
                        "file",
                        Box::new(|sink| {
                            Backend::cpu()
                                .pet_run_file(&file, &s, &c, &sc, sink, |_| {})
                                .unwrap()
                        }),
                    ),
                ];
                let mut first = None;
                for (from, run) in runs {
                    let mut got = Vec::new();
                    let st = run(&mut |p| {
                        got.extend_from_slice(p);
                        Ok(())
                    });
                    assert_eq!(got, want, "{from}, chunk {chunk} {c:?}");
                    assert_eq!(st.pairs as usize, want.len(), "{from}");
                    assert_eq!(st.convert.frames as usize, acq.frames.len(), "{from}");
                    // Every source gives the reader's statistics.
                    assert_eq!(*first.get_or_insert(st), st, "{from}, chunk {chunk}");
                }
            }
        }
    }
}

#[test]
fn streamed_chain_rejects_time_going_back_in_a_bdm() {
    let s = tiny();
    let frames = [
        raw_frame(0, 0, 0, 0, 100, 5000),
        raw_frame(1, 0, 0, 0, 50, 5000),
        raw_frame(0, 0, 0, 0, 99, 5000),
    ];
    let r = Backend::cpu().pet_run_stream(
        &mut gen::frame_bytes(&frames),
        &s,
        &CoincideConfig::prompt(10.0),
        &StreamConfig::default(),
        |_| Ok(()),
        |_| {},
    );
    match r {
        Err(Error::InvalidInput { detail, .. }) => {
            assert!(detail.contains("frame 2 of BDM 0"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
}

/// Chunks large enough to be checked in parallel pieces name the same first frame out of
/// order as a frame-by-frame reading: inside a piece, at a piece's first frame of a BDM, and
/// across chunks; a frame stream cut inside a frame is an error from memory too.
#[test]
fn streamed_chain_names_the_first_disorder_in_large_chunks() {
    let s = tiny();
    let n = 200_000usize;
    let ordered: Vec<DataFrameV2> = (0..n)
        .map(|i| raw_frame((i % 2) as u8, 0, 0, 0, 1000 + i as u64, 5000))
        .collect();
    // (frame made earlier, expected frame named): later pieces also hold disorders, the
    // first one must be named.
    for bad in [5usize, 40_000, (1 << 15) + 1, (1 << 15) * 3, 150_001, n - 1] {
        let mut f = ordered.clone();
        f[bad] = raw_frame((bad % 2) as u8, 0, 0, 0, 3, 5000);
        if bad + 10 < n {
            f[bad + 9] = raw_frame(((bad + 9) % 2) as u8, 0, 0, 0, 2, 5000);
        }
        for chunk in [1usize << 16, 1 << 20] {
            let sc = StreamConfig {
                chunk_frames: chunk,
                pending_capacity: 1 << 20,
            };
            let r = Backend::cpu().pet_run_frames(
                gen::frame_bytes(&f),
                &s,
                &CoincideConfig::prompt(10.0),
                &sc,
                |_| Ok(()),
                |_| {},
            );
            match r {
                Err(Error::InvalidInput { detail, .. }) => assert!(
                    detail.contains(&format!("frame {bad} of BDM {}", bad % 2)),
                    "bad {bad} chunk {chunk}: {detail}"
                ),
                other => panic!("bad {bad} chunk {chunk}: {other:?}"),
            }
        }
    }
    let bytes = gen::frame_bytes(&ordered[..10]);
    assert!(matches!(
        Backend::cpu().pet_run_frames(
            &bytes[..bytes.len() - 3],
            &s,
            &CoincideConfig::prompt(10.0),
            &StreamConfig::default(),
            |_| Ok(()),
            |_| {},
        ),
        Err(Error::InvalidInput { .. })
    ));
}

#[test]
fn csv_round_trip_is_exact() {
    let v = vec![
        single(3, 511.123_46, 1e15 + 3.0),
        single(0, 0.1, 0.0),
        single(u32::MAX, 6499.99, 123456789.0),
    ];
    let mut buf = Vec::new();
    pet::write_singles_csv(&mut buf, &v).unwrap();
    assert!(buf.starts_with(b"crystal,energy,time\n"));
    let back = pet::read_singles_csv(&buf[..], "s.csv").unwrap();
    assert_eq!(back, v);
    assert!(pet::read_singles_csv(&b"crystal,energy,time\n1,2\n"[..], "s.csv").is_err());
    assert!(pet::read_singles_csv(&b"a,b,c\n"[..], "s.csv").is_err());
    let mut pairs = Vec::new();
    pet::write_pairs_csv(&mut pairs, &[Coincidence { a: v[0], b: v[1] }]).unwrap();
    assert_eq!(
        std::str::from_utf8(&pairs).unwrap(),
        "3,511.12347,1000000000000003,0,0.1,0\n"
    );
}

#[test]
fn parallel_conversion_equals_the_sequential_oracle() {
    let s = tiny();
    let mut acq = gen::acquisition(
        &s,
        &gen::AcquisitionConfig {
            seed: 11,
            singles: 3 * oracle::CONVERT_PIECE + 123,
            ..Default::default()
        },
    );
    let n = acq.frames.len();
    assert!(n > 2 * oracle::CONVERT_PIECE);
    // Bad addresses only in later pieces: the first one's index must carry its piece's offset.
    for i in [
        oracle::CONVERT_PIECE + 5,
        2 * oracle::CONVERT_PIECE + 9,
        n - 1,
    ] {
        acq.frames[i].bdm = 250;
    }
    let seq = oracle::convert(&acq.frames, &s.params, &s.position, &s.energy);
    let par = oracle::convert_par(&acq.frames, &s.params, &s.position, &s.energy);
    assert_eq!(
        seq.1.first_bad_address,
        Some(oracle::CONVERT_PIECE as u64 + 5)
    );
    assert_eq!(par.1, seq.1);
    assert_eq!(par.0, seq.0);
    // Fewer frames than a piece, and none.
    let few = &acq.frames[..1000];
    assert_eq!(
        oracle::convert_par(few, &s.params, &s.position, &s.energy),
        oracle::convert(few, &s.params, &s.position, &s.energy)
    );
    assert_eq!(
        oracle::convert_par(&[], &s.params, &s.position, &s.energy),
        oracle::convert(&[], &s.params, &s.position, &s.energy)
    );
}

// The kernel's conversion (32-bit, branch-free steps on the frame's four words, divisions by
// multiplier) against the oracle's `convert_frame`, frame by frame: random scanner shapes
// inside the parameter check's limits (divisors 1 to 256, the largest position and DU
// fields), random tables (position entries past the DU's crystals included: bad addresses),
// random frames with the address fields mostly in range, energies past the table's end.
fn arb_params() -> impl Strategy<Value = detkit_gpu::pet::ScannerParams> {
    // (channels, module_num_y, module_num_z, block_num_y, block_num_z, crystal_num_y,
    // crystal_num_z, position_size)
    (
        prop_oneof![Just(1u32), 1u32..=16, Just(16u32)],
        prop_oneof![Just(1u32), 1u32..=4, Just(16u32)],
        1u32..=2,
        prop_oneof![Just(1u32), 1u32..=4],
        prop_oneof![Just(1u32), 1u32..=4, Just(16u32)],
        prop_oneof![Just(1u32), 1u32..=16],
        prop_oneof![Just(1u32), 1u32..=16, Just(256u32)],
        prop_oneof![Just(1u32), 1u32..=8, Just(256u32)],
    )
        .prop_map(|(ch, my, mz, by, bz, cy, cz, ps)| {
            // Keep to the parameter check's limits (BDMs, DUs, crystals per DU).
            let my = if ch * my * mz > 256 { 1 } else { my };
            let by = if by * bz > 16 { 1 } else { by };
            let cy = if cy * cz > 256 { 1 } else { cy };
            detkit_gpu::pet::ScannerParams {
                channels: ch,
                module_num_y: my,
                module_num_z: mz,
                block_num_y: by,
                block_num_z: bz,
                crystal_num_y: cy,
                crystal_num_z: cz,
                position_size: ps,
                energy_lo: 300.0,
                energy_hi: 700.0,
                _pad: [0; 2],
            }
        })
        .prop_filter("tables small enough for a test", |p| {
            p.position_entries() <= 1 << 22 && p.energy_entries() <= 1 << 24
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn kernel_conversion_steps_equal_the_oracle(
        p in arb_params(),
        seed: u64,
        words in prop::collection::vec(any::<[u32; 4]>(), 1..200),
    ) {
        prop_assert!(pet::validate_params(&p).is_ok());
        let cpd = p.crystals_per_du();
        // Mostly valid origins, some past the DU (bad addresses).
        let position: Vec<u8> =
            detkit::rng::random_below(seed, p.position_entries() as usize, cpd + cpd / 8 + 1)
                .into_iter()
                .map(|o| o.min(255) as u8)
                .collect();
        let energy: Vec<f32> =
            detkit::rng::random_below(seed ^ 1, p.energy_entries() as usize, 1000)
                .into_iter()
                .map(|e| 0.5 + e as f32 / 1000.0)
                .collect();
        let c = detkit_gpu::pet::ConvertConsts::new(&p);
        for mut w in words {
            // Address fields mostly in range: BDM byte, DU nibble, x, y; raw energy as drawn.
            let pick = |v: u32, range: u32| if v & 0x100 != 0 { v & 0xff } else { (v & 0xff) % range };
            let bdm = pick(w[0] >> 8 & 0x1ff, p.bdm_count());
            let du = pick(w[0] & 0x1ff, p.du_count()) & 0xf;
            let x = pick(w[2] >> 16 & 0x1ff, p.position_size);
            let y = pick(w[2] >> 7 & 0x1ff, p.position_size);
            w[0] = (w[0] & 0xffff_0000) | bdm << 8 | (w[0] & 0xf0) | du;
            w[2] = (w[2] & 0x0000_ffff) | x << 16 | y << 24;
            let f: DataFrameV2 = bytemuck::cast(w);
            let want = convert_frame(&f, &p, |i| position[i as usize], |i| energy[i as usize]);
            let got = detkit_gpu::pet::convert_words(
                &w,
                &c,
                |i| position[i as usize],
                |i| energy[i as usize],
            );
            prop_assert_eq!(got.1, want.1, "status of {:?}", f);
            prop_assert_eq!(got.0, want.0, "single of {:?}", f);
            prop_assert_eq!(detkit_gpu::pet::words_time(&w), detkit_gpu::pet::frame_time(&f));
        }
    }
}
