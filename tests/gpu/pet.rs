//! GPU tests of the pet family against its CPU oracle: conversion, sort, merge of presorted
//! runs, coincidences (every policy, delayed window, adversarial windows), the streamed chain.

use detkit::pet::cpu::{self as oracle, CoincideConfig};
use detkit::pet::{gen, MergeTile, PetLauncher, PetTuning, Scanner, StreamConfig};
use detkit::{Error, Record};
use detkit_gpu::pet::{self as kp, Coincidence, DataFrameV2, Policy, Single};
use detkit_tests::{ensure, exact};

use crate::{e, Ctx, Test, R};

/// The pet tests, run by `main` after the Foundation tests.
pub(crate) const TESTS: &[Test] = &[
    ("pet_convert", test_convert),
    ("pet_sort", test_sort),
    ("pet_sort_runs", test_sort_runs),
    ("pet_coincide", test_coincide),
    ("pet_coincide_adversarial", test_coincide_adversarial),
    ("pet_coincide_enqueue", test_coincide_enqueue),
    ("pet_stream", test_stream),
    ("pet_order_check", test_order_check),
    ("pet_merge_multiway", test_merge_multiway),
    ("pet_merge_radix", test_merge_radix),
    ("pet_merge_bucket", test_merge_bucket),
    ("pet_sort_auto", test_sort_auto),
];

/// A single no kernel writes: every word 0xDEAD_BEEF.
const POISON: Single = Single {
    crystal: 0xDEAD_BEEF,
    energy: f32::from_bits(0xDEAD_BEEF),
    time: f64::from_bits(0xDEAD_BEEF_DEAD_BEEF),
};

/// Whether `s` is the poison, bit for bit.
fn poison(s: &Single) -> bool {
    bytemuck::bytes_of(s) == bytemuck::bytes_of(&POISON)
}

/// The sizes of a PET kernel with tiles of `tile`: 2^20 + 7 becomes 40 tiles + 3 in the
/// sanitizer mode, 2^24 is left out under `--quick`.
fn sizes(c: &Ctx, tile: usize) -> Vec<usize> {
    let quick = c.quick;
    let mut v = vec![
        0,
        1,
        31,
        32,
        33,
        255,
        256,
        257,
        tile - 1,
        tile,
        tile + 1,
        3 * tile + 5,
        c.big((1 << 20) + 7, 40 * tile + 3),
    ];
    if !quick {
        v.push(1 << 24);
    }
    v.sort_unstable();
    v.dedup();
    v
}

fn acquisition(c: &Ctx, s: &Scanner, n: usize, salt: u64) -> Vec<DataFrameV2> {
    if n == 0 {
        return Vec::new();
    }
    let mut f = gen::acquisition(
        s,
        &gen::AcquisitionConfig {
            seed: c.seed ^ salt,
            singles: n,
            slice: 1_000_000,
            ..Default::default()
        },
    )
    .frames;
    f.truncate(n);
    f
}

fn test_convert(c: &Ctx) -> R {
    let g = c.gpu();
    let s = gen::tiny_scanner(c.seed);
    let pet = PetLauncher::new(g);
    let ds = pet.load_scanner(&s).map_err(e)?;
    for n in sizes(c, kp::CONVERT_TILE as usize) {
        let mut frames = acquisition(c, &s, n, 1);
        // Adversarial frames: energies at and over the table end, bad addresses.
        for (i, f) in frames.iter_mut().enumerate() {
            match (i.wrapping_mul(2654435761) >> 7) % 97 {
                0 => f.energy = 9999u16.to_be_bytes(),
                1 => f.energy = 10_000u16.to_be_bytes(),
                2 => f.energy = u16::MAX.to_be_bytes(),
                3 => f.bdm = 200,
                4 => f.head_du = 0xAF,
                5 => f.x = 255,
                _ => {}
            }
        }
        let (want, want_st) = oracle::convert(&frames, &s.params, &s.position, &s.energy);
        let bytes: &[u8] = bytemuck::cast_slice(&frames);
        let d = if n == 0 {
            g.zeros::<u8>(16).map_err(e)?
        } else {
            g.upload(bytes).map_err(e)?
        };
        let mut out = g.poisoned_records(n + 1, POISON).map_err(e)?;
        let mut st = g.poisoned(kp::STAT_WORDS, 0xAAAA_AAAAu32).map_err(e)?;
        pet.convert(&d, n, &ds, &mut out, 0, &mut st).map_err(e)?;
        let got = g.download_records(&out).map_err(e)?;
        let stw = g.download(&st).map_err(e)?;
        let k = stw[kp::STAT_ACCEPTED] as usize;
        ensure(k == want.len(), || {
            format!("convert n={n}: accepted {k}, oracle {}", want.len())
        })?;
        exact(&format!("convert n={n} singles"), &got[..k], &want)?;
        ensure(got[k..].iter().all(poison), || {
            format!("convert n={n}: wrote past the accepted singles")
        })?;
        let got_st = (
            stw[kp::STAT_REJECTED_ENERGY] as u64,
            stw[kp::STAT_CLAMPED] as u64,
            stw[kp::STAT_BAD_ADDRESS] as u64,
            (stw[kp::STAT_FIRST_BAD] != u32::MAX).then_some(stw[kp::STAT_FIRST_BAD] as u64),
        );
        let want_t = (
            want_st.rejected_energy,
            want_st.clamped,
            want_st.bad_address,
            want_st.first_bad_address,
        );
        ensure(got_st == want_t, || {
            format!("convert n={n} stats {got_st:?}, oracle {want_t:?}")
        })?;
        // The backend API agrees too.
        if n <= 5000 {
            let (b, bst) = c.backend.pet_convert(&frames, &s).map_err(e)?;
            exact(&format!("backend convert n={n}"), &b, &want)?;
            ensure(bst == want_st, || format!("backend convert stats n={n}"))?;
        }
    }
    Ok(())
}

fn sort_inputs(c: &Ctx, n: usize) -> Vec<(&'static str, Vec<Single>)> {
    let r = c.rand(20, n, 1 << 30);
    let few = c.rand(21, n, 5);
    // Signs, both zeros (equal: input order kept), extremes and subnormals: every corner of
    // the order-preserving key of the radix path.
    const ODD: [f64; 10] = [
        -0.0,
        0.0,
        -1e-300,
        1e300,
        -2.5,
        3.25,
        f64::MIN_POSITIVE,
        -f64::MAX,
        f64::MAX,
        5e-324,
    ];
    let odd = c.rand(22, n, ODD.len() as u32);
    vec![
        (
            "signs-zeros-extremes",
            odd.iter()
                .enumerate()
                .map(|(i, &k)| Single {
                    crystal: i as u32,
                    energy: 4.0,
                    time: ODD[k as usize],
                })
                .collect(),
        ),
        (
            "random",
            r.iter()
                .enumerate()
                .map(|(i, &t)| Single {
                    crystal: i as u32,
                    energy: 1.0,
                    time: t as f64,
                })
                .collect(),
        ),
        (
            "five-times",
            few.iter()
                .enumerate()
                .map(|(i, &t)| Single {
                    crystal: i as u32,
                    energy: 2.0,
                    time: t as f64 * 0.5 - 1.0,
                })
                .collect(),
        ),
        (
            "reversed",
            (0..n)
                .map(|i| Single {
                    crystal: i as u32,
                    energy: 3.0,
                    time: (n - i) as f64,
                })
                .collect(),
        ),
        (
            "equal",
            (0..n)
                .map(|i| Single {
                    crystal: i as u32,
                    energy: 4.0,
                    time: 7.0,
                })
                .collect(),
        ),
        (
            // Integer ticks spanning 2^43 (the radix path's u64 integer keys).
            "wide-ticks",
            r.iter()
                .zip(&few)
                .map(|(&hi, &lo)| Single {
                    crystal: hi ^ lo,
                    energy: 5.0,
                    time: ((hi as u64) << 13 | lo as u64) as f64,
                })
                .collect(),
        ),
        (
            // Negative and positive integers up to the integer keys' limit, 2^53 (every
            // fifth single: -2^53, 2^53, or -0.0), around 2^31 otherwise.
            "integers-to-2^53",
            r.iter()
                .enumerate()
                .map(|(i, &t)| Single {
                    crystal: i as u32,
                    energy: 6.0,
                    time: match i % 15 {
                        0 => -kp::TIME_INT_LIMIT,
                        5 => kp::TIME_INT_LIMIT,
                        10 => -0.0,
                        _ => t as f64 - (1u64 << 29) as f64,
                    },
                })
                .collect(),
        ),
        (
            // One integer beyond 2^53 sends the whole sort to the float keys.
            "beyond-2^53",
            r.iter()
                .enumerate()
                .map(|(i, &t)| Single {
                    crystal: i as u32,
                    energy: 7.0,
                    time: if i == n / 2 {
                        kp::TIME_INT_LIMIT * 2.0
                    } else {
                        t as f64
                    },
                })
                .collect(),
        ),
    ]
}

fn test_sort(c: &Ctx) -> R {
    let g = c.gpu();
    for (si, n) in sizes(c, kp::SORT_TILE as usize).into_iter().enumerate() {
        for (li, (label, v)) in sort_inputs(c, n).into_iter().enumerate() {
            // The largest size takes random times only; with --quick (the sanitizer runs,
            // where this group took a minute of racecheck) so does 2^20 + 7, and in the
            // sanitizer mode every other input kind runs at each size.
            if (n >= 1 << 24 || (c.quick && n >= 1 << 20)) && label != "random"
                || c.sanitize && n > 3 * kp::SORT_TILE as usize + 5 && label != "random"
                || !c.keep(si + li, 2)
            {
                continue;
            }
            let want = oracle::sort(&v).map_err(e)?;
            let pet = PetLauncher::new(g);
            let mut a = if n == 0 {
                g.zeros::<Record<Single>>(1).map_err(e)?
            } else {
                g.upload_records(&v).map_err(e)?
            };
            let mut b = g.poisoned_records(a.len(), POISON).map_err(e)?;
            let in_b = pet.sort_merge(&mut a, &mut b, 0, n).map_err(e)?;
            let got = g.download_records(if in_b { &b } else { &a }).map_err(e)?;
            exact(&format!("merge sort {label} n={n}"), &got[..n], &want)?;
            // The radix path, from a fresh copy, at an offset inside larger buffers.
            let off = 3;
            let mut a2 = g.poisoned_records(n + off + 1, POISON).map_err(e)?;
            if n > 0 {
                g.stream()
                    .memcpy_htod(Record::slice(&v), &mut a2.slice_mut(off..off + n))
                    .map_err(|x| x.to_string())?;
            }
            let mut b2 = g.poisoned_records(a2.len(), POISON).map_err(e)?;
            let in_b = pet.sort_radix(&mut a2, &mut b2, off, n).map_err(e)?;
            let got = g
                .download_records(if in_b { &b2 } else { &a2 })
                .map_err(e)?;
            exact(
                &format!("radix sort {label} n={n}"),
                &got[off..off + n],
                &want,
            )?;
        }
    }
    let bad = vec![
        Single {
            crystal: 0,
            energy: 0.0,
            time: 1.0,
        },
        Single {
            crystal: 1,
            energy: 0.0,
            time: f64::NAN,
        },
    ];
    ensure(
        matches!(c.backend.pet_sort(&bad), Err(Error::InvalidInput { .. })),
        || "NaN time accepted by sort".into(),
    )
}

fn test_sort_runs(c: &Ctx) -> R {
    // Realistic: one readout slice, 256 per-BDM time-ordered streams, converted.
    let s = gen::bench_scanner(c.seed);
    // A backend with another tuning (narrow tile, merge rounds only), made once: a context
    // of its own costs seconds under the sanitizers (its module is instrumented again).
    let tuned = detkit::Backend::cuda(0)
        .and_then(|b| {
            b.with_pet_tuning(&PetTuning {
                tile: MergeTile::Narrow,
                radix_bits: 0,
                ..Default::default()
            })
        })
        .map_err(e)?;
    for n in [
        1000usize,
        c.big(100_000, 20_000),
        if c.quick {
            c.big(200_000, 50_000)
        } else {
            2_000_000
        },
    ] {
        let acq = gen::acquisition(
            &s,
            &gen::AcquisitionConfig {
                seed: c.seed,
                singles: n,
                slice: u64::MAX,
                pileup: 0.0,
                ..Default::default()
            },
        );
        // Singles in frame order (no energy cut, so runs = BDM streams).
        let mut p = s.clone();
        p.params.energy_lo = f32::MIN;
        p.params.energy_hi = f32::MAX;
        let (v, _) = oracle::convert(&acq.frames, &p.params, &p.position, &p.energy);
        let want = oracle::sort(&v).map_err(e)?;
        let got = c.backend.pet_sort_runs(&v, &acq.bdm_runs).map_err(e)?;
        exact(&format!("sort_runs bdm streams n={n}"), &got, &want)?;
        // The tuned backend: the same result.
        let got = tuned.pet_sort_runs(&v, &acq.bdm_runs).map_err(e)?;
        exact(&format!("sort_runs bdm streams n={n}, tuned"), &got, &want)?;
        let got = c.backend.pet_sort(&v).map_err(e)?;
        exact(&format!("sort bdm streams n={n}"), &got, &want)?;
    }
    // Random run boundaries, including empty runs and ties across runs.
    for (nruns, n) in [
        (1usize, 5000usize),
        (2, 3),
        (3, 4097),
        (77, 100_000),
        (1000, 50_000),
    ] {
        let mut cuts: Vec<u32> = c.rand(22 + nruns as u64, nruns - 1, n as u32 + 1);
        cuts.push(0);
        cuts.push(n as u32);
        cuts.sort_unstable();
        let mut v: Vec<Single> = c
            .rand(23, n, 50)
            .iter()
            .enumerate()
            .map(|(i, &t)| Single {
                crystal: i as u32,
                energy: 0.0,
                time: t as f64,
            })
            .collect();
        for w in cuts.windows(2) {
            v[w[0] as usize..w[1] as usize].sort_by(|a, b| a.time.total_cmp(&b.time));
        }
        let got = c.backend.pet_sort_runs(&v, &cuts).map_err(e)?;
        exact(
            &format!("sort_runs random {nruns} runs n={n}"),
            &got,
            &oracle::sort(&v).map_err(e)?,
        )?;
    }
    let v = vec![
        Single {
            crystal: 0,
            energy: 0.0,
            time: 2.0,
        },
        Single {
            crystal: 1,
            energy: 0.0,
            time: 1.0,
        },
    ];
    ensure(
        matches!(
            c.backend.pet_sort_runs(&v, &[0, 2]),
            Err(Error::InvalidInput { .. })
        ),
        || "unsorted run accepted".into(),
    )
}

fn configs() -> Vec<CoincideConfig> {
    let mut v = Vec::new();
    for policy in Policy::ALL {
        for delay in [None, Some(20_000.0)] {
            v.push(CoincideConfig {
                window: 5000.0,
                delay,
                policy,
            });
        }
    }
    v
}

fn sorted_singles(c: &Ctx, n: usize, rate: f64) -> Vec<Single> {
    let s = gen::tiny_scanner(c.seed);
    let frames = if n == 0 {
        vec![]
    } else {
        gen::acquisition(
            &s,
            &gen::AcquisitionConfig {
                seed: c.seed ^ 9,
                singles: n,
                singles_rate: rate,
                ..Default::default()
            },
        )
        .frames
    };
    let (v, _) = oracle::convert(&frames, &s.params, &s.position, &s.energy);
    oracle::sort(&v).expect("finite")
}

fn check_coincide(c: &Ctx, what: &str, v: &[Single], cfg: &CoincideConfig) -> R {
    let want = oracle::coincide(v, cfg);
    let got = c.backend.pet_coincide(v, cfg);
    match (got, want) {
        (Ok(g), Ok(w)) => exact(&format!("{what} {cfg:?}"), &g, &w),
        (
            Err(Error::CapacityExceeded { needed: a, .. }),
            Err(Error::CapacityExceeded { needed: b, .. }),
        ) => ensure(a == b, || {
            format!("{what} {cfg:?}: capacity {a} vs oracle {b}")
        }),
        (g, w) => Err(format!("{what} {cfg:?}: gpu {g:?}, oracle {w:?}")),
    }
}

fn test_coincide(c: &Ctx) -> R {
    for (si, n) in sizes(c, kp::COINCIDE_TILE as usize).into_iter().enumerate() {
        if n > 1 << 20 && c.quick {
            continue;
        }
        for (ri, rate) in [1e6, 5e7].into_iter().enumerate() {
            // 2^24 once, at the dense rate (the most multiples for KillAll); both rates run
            // at every smaller size, 2^20 + 7 included.
            if n >= 1 << 24 && rate < 5e7 {
                continue;
            }
            let v = sorted_singles(c, n, rate);
            for (ci, cfg) in configs().into_iter().enumerate() {
                if n >= 1 << 24 && cfg.policy != Policy::KillAll || !c.keep(si + ri + ci, 3) {
                    continue;
                }
                check_coincide(c, &format!("coincide n={n} rate={rate}"), &v, &cfg)?;
            }
        }
    }
    Ok(())
}

/// `PetLauncher::coincide_enqueue` / `coincide_finish`: two launches in flight on two scratch
/// buffers, finished in the opposite order, each equal to the oracle (every policy, delayed
/// window, `TakeAllGoods`' relaunch on a first buffer too small); a finish before any launch is
/// a typed error; an unsorted input is reported by the finish.
fn test_coincide_enqueue(c: &Ctx) -> R {
    let gpu = PetLauncher::new(c.gpu());
    let sizes: &[usize] = if c.quick {
        &[0, 1, 2049, 70_000]
    } else {
        &[0, 1, 2047, 2049, 70_000, 1 << 21]
    };
    for (si, &n) in sizes.iter().enumerate() {
        let (a, b) = (sorted_singles(c, n, 5e7), sorted_singles(c, n / 2 + 1, 1e6));
        for (ci, cfg) in configs().into_iter().enumerate() {
            if !c.keep(si + ci, 2) {
                continue;
            }
            let what = format!("enqueue n={n} {cfg:?}");
            let (want_a, want_b) = (oracle::coincide(&a, &cfg), oracle::coincide(&b, &cfg));
            let (Ok(want_a), Ok(want_b)) = (want_a, want_b) else {
                continue; // an oversize window: covered by pet_coincide
            };
            let (da, db) = (
                gpu.upload_records(&at_least_one(&a)).map_err(e)?,
                gpu.upload_records(&at_least_one(&b)).map_err(e)?,
            );
            let (mut sa, mut sb) = (
                detkit::pet::CoincideScratch::default(),
                detkit::pet::CoincideScratch::default(),
            );
            let la = gpu
                .coincide_enqueue(&mut sa, &da, 0, a.len(), &cfg, f64::INFINITY)
                .map_err(e)?;
            let lb = gpu
                .coincide_enqueue(&mut sb, &db, 0, b.len(), &cfg, f64::INFINITY)
                .map_err(e)?;
            for (label, scratch, d, l, want) in [
                ("b", &mut sb, &db, lb, &want_b),
                ("a", &mut sa, &da, la, &want_a),
            ] {
                let (total, resume) = gpu.coincide_finish(scratch, d, l).map_err(e)?;
                ensure(resume == l_len(label, &a, &b), || {
                    format!("{what} {label}: resume {resume}")
                })?;
                let mut got = vec![<Coincidence as bytemuck::Zeroable>::zeroed(); total];
                gpu.download_pairs(scratch, &mut got).map_err(e)?;
                exact(&format!("{what} {label}"), &got, want)?;
            }
        }
    }
    // A finish with a scratch whose last launch is another (or none): typed error, no panic.
    let d = gpu
        .upload_records(&[sgl(1, 1.0, 0.0), sgl(2, 1.0, 1.0)])
        .map_err(e)?;
    let mut fresh = detkit::pet::CoincideScratch::default();
    let mut other = detkit::pet::CoincideScratch::default();
    let prompt = CoincideConfig::prompt(5.0);
    let enqueue_two = |s: &mut detkit::pet::CoincideScratch| {
        gpu.coincide_enqueue(s, &d, 0, 2, &prompt, f64::INFINITY)
            .map_err(e)
    };
    let l = enqueue_two(&mut other)?;
    match gpu.coincide_finish(&mut fresh, &d, l) {
        Err(Error::InvalidInput { .. }) => {}
        r => return Err(format!("finish on a scratch without a launch: {r:?}")),
    }
    let _newer = enqueue_two(&mut other)?;
    match gpu.coincide_finish(&mut other, &d, l) {
        Err(Error::InvalidInput { .. }) => {}
        r => return Err(format!("finish of a launch replaced by a newer one: {r:?}")),
    }
    // Unsorted singles: the finish names the first one out of order.
    let bad = [sgl(1, 1.0, 0.0), sgl(2, 1.0, 10.0), sgl(3, 1.0, 5.0)];
    let d = gpu.upload_records(&bad).map_err(e)?;
    let l = gpu
        .coincide_enqueue(
            &mut fresh,
            &d,
            0,
            3,
            &CoincideConfig::prompt(5.0),
            f64::INFINITY,
        )
        .map_err(e)?;
    match gpu.coincide_finish(&mut fresh, &d, l) {
        Err(Error::InvalidInput { detail, .. }) if detail.contains("single 2") => Ok(()),
        r => Err(format!("unsorted singles through enqueue/finish: {r:?}")),
    }
}

/// The resume index a complete run reports: the input's length.
fn l_len(label: &str, a: &[Single], b: &[Single]) -> usize {
    if label == "a" {
        a.len()
    } else {
        b.len()
    }
}

/// The singles to upload (one zero single for none: no empty allocation).
fn at_least_one(v: &[Single]) -> Vec<Single> {
    if v.is_empty() {
        return vec![Single::default()];
    }
    v.to_vec()
}

fn sgl(crystal: u32, energy: f32, time: f64) -> Single {
    Single {
        crystal,
        energy,
        time,
    }
}

fn test_coincide_adversarial(c: &Ctx) -> R {
    let w = 10.0;
    let mut cases: Vec<(&str, Vec<Single>)> = vec![
        ("empty", vec![]),
        ("one", vec![sgl(1, 1.0, 0.0)]),
        // Every single in one window.
        (
            "one-window",
            (0..5000)
                .map(|i| sgl(i % 7, i as f32, 0.001 * i as f64))
                .collect(),
        ),
        // Exactly `window` apart: a chain of closed windows.
        (
            "boundary",
            (0..4099).map(|i| sgl(i % 5, 1.0, w * i as f64)).collect(),
        ),
        (
            "half-window",
            (0..4099)
                .map(|i| sgl(i % 3, 1.0, 0.5 * w * i as f64))
                .collect(),
        ),
        (
            "equal-times",
            (0..3000)
                .map(|i| sgl(i % 4, (i % 9) as f32, (i / 3) as f64 * 100.0))
                .collect(),
        ),
        (
            "same-crystal",
            (0..3000)
                .map(|i| sgl(7, 1.0, (i / 2) as f64 * 100.0 + (i % 2) as f64))
                .collect(),
        ),
        (
            "pairs-then-gap",
            (0..10_000)
                .map(|i| sgl(i % 2, 1.0, (i / 2) as f64 * 25.0 + (i % 2) as f64 * 3.0))
                .collect(),
        ),
        // The same after one lone single: the pairs' openers at odd indices (lane 31, the
        // last item of a thread, the last single of a tile open windows too).
        (
            "pairs-then-gap-odd",
            (0..10_001)
                .map(|i| {
                    let k = i.max(1) - 1;
                    let t = if i == 0 {
                        0.0
                    } else {
                        100.0 + (k / 2) as f64 * 25.0 + (k % 2) as f64 * 3.0
                    };
                    sgl(i % 3, 1.0, t)
                })
                .collect(),
        ),
    ];
    // Windows of 10 singles of distinct crystals: TakeAllGoods yields 45 pairs per window,
    // 4.5 per single, more than the first launch's buffer (n pairs): the launch is repeated.
    cases.push((
        "many-goods",
        (0..10_000)
            .map(|i| sgl(i % 10, 1.0, (i / 10) as f64 * 100.0 + (i % 10) as f64 * 0.5))
            .collect(),
    ));
    // Long dense chain (no gap > window): one segment walked by one thread.
    cases.push((
        "dense-chain",
        (0..c.big(200_000, 50_000) as u32)
            .map(|i| sgl(i % 11, (i % 13) as f32, 0.4 * w * i as f64))
            .collect(),
    ));
    for (li, (label, v)) in cases.iter().enumerate() {
        let mut cfgs = configs();
        for cfg in cfgs.iter_mut() {
            cfg.window = w;
            if cfg.delay.is_some() {
                cfg.delay = Some(3.0 * w);
            }
        }
        cfgs.push(CoincideConfig::prompt(0.0));
        for (ci, cfg) in cfgs.iter().enumerate() {
            if !c.keep(li + ci, 2) {
                continue;
            }
            check_coincide(c, &format!("adversarial {label}"), v, cfg)?;
        }
    }
    // Unsorted input: typed error naming the first single out of order.
    let mut v = sorted_singles(c, 5000, 1e7);
    v.swap(1234, 1235);
    if v[1234].time != v[1235].time {
        match c.backend.pet_coincide(&v, &CoincideConfig::prompt(w)) {
            Err(Error::InvalidInput { detail, .. }) if detail.contains("single 1235") => {}
            other => return Err(format!("unsorted coincide input: {other:?}")),
        }
    }
    // The device path reports unsorted input itself (the backend checks on the host first).
    let g = c.gpu();
    let d = g
        .upload_records(&[sgl(0, 0.0, 5.0), sgl(1, 0.0, 6.0), sgl(2, 0.0, 1.0)])
        .map_err(e)?;
    match PetLauncher::new(g).coincide(&d, 0, 3, &CoincideConfig::prompt(w), f64::INFINITY) {
        Err(Error::InvalidInput { detail, .. }) if detail.contains("single 2") => Ok(()),
        other => Err(format!("device coincide, unsorted: {other:?}")),
    }
}

/// A generated acquisition for the streamed chain: `n` singles at 3·10^7 per second, read
/// out in slices of `slice` ticks.
fn stream_acquisition(s: &Scanner, seed: u64, n: usize, slice: u64) -> gen::Acquisition {
    gen::acquisition(
        s,
        &gen::AcquisitionConfig {
            seed,
            singles: n,
            singles_rate: 3e7,
            slice,
            ..Default::default()
        },
    )
}

fn test_stream(c: &Ctx) -> R {
    let s = gen::tiny_scanner(c.seed);
    for (n, chunks) in [
        // Under --quick (the sanitizer runs) smaller streams and fewer one-frame chunks, so
        // that racecheck finishes (500 frames in chunks of 1, 2, 3, 7 and 64 did not in 240 s:
        // every chunk is a dozen launches).
        if c.quick {
            (c.big(60, 24), vec![1usize, 7, 64])
        } else {
            (3000, vec![1, 2, 3, 7, 64])
        },
        if c.quick {
            (10_000, vec![1000, 4096, 1 << 22])
        } else {
            (200_000, vec![1000, 4096, 65_536, 1 << 22])
        },
    ] {
        let acq = stream_acquisition(&s, c.seed ^ 77, n, 100_000);
        let bytes = gen::frame_bytes(&acq.frames);
        for (ci, cfg) in [
            CoincideConfig::prompt(5000.0),
            CoincideConfig {
                window: 5000.0,
                delay: Some(20_000.0),
                policy: Policy::TakeAllGoods,
            },
            CoincideConfig {
                window: 8000.0,
                delay: None,
                policy: Policy::TakeWinnerOfGoods,
            },
        ]
        .into_iter()
        .enumerate()
        {
            let (v, want_st) = oracle::convert(&acq.frames, &s.params, &s.position, &s.energy);
            let want = oracle::coincide(&oracle::sort(&v).map_err(e)?, &cfg).map_err(e)?;
            for (hi, &chunk) in chunks.iter().enumerate() {
                // The sanitizer mode: one-frame chunks (a dozen launches per frame) with the
                // first configuration only; the others still run chunks of 7 and 64 frames.
                if !c.keep(ci + hi, 2) || c.sanitize && chunk == 1 && ci > 0 {
                    continue;
                }
                let mut got: Vec<Coincidence> = Vec::new();
                let st = c
                    .backend
                    .pet_run_stream(
                        &mut &bytes[..],
                        &s,
                        &cfg,
                        &StreamConfig {
                            chunk_frames: chunk,
                            pending_capacity: 1 << 16,
                        },
                        |p| {
                            got.extend_from_slice(p);
                            Ok(())
                        },
                        |_| {},
                    )
                    .map_err(e)?;
                exact(&format!("stream n={n} chunk={chunk} {cfg:?}"), &got, &want)?;
                ensure(st.convert == want_st, || {
                    format!(
                        "stream n={n} chunk={chunk}: stats {:?} vs {want_st:?}",
                        st.convert
                    )
                })?;
                // The same frames from memory (the buffers cached by the run above reused).
                let mut got2: Vec<Coincidence> = Vec::new();
                let st2 = c
                    .backend
                    .pet_run_frames(
                        bytes,
                        &s,
                        &cfg,
                        &StreamConfig {
                            chunk_frames: chunk,
                            pending_capacity: 1 << 16,
                        },
                        |p| {
                            got2.extend_from_slice(p);
                            Ok(())
                        },
                        |_| {},
                    )
                    .map_err(e)?;
                exact(
                    &format!("frames from memory n={n} chunk={chunk} {cfg:?}"),
                    &got2,
                    &want,
                )?;
                ensure(st2 == st, || format!("stats {st2:?} vs {st:?}"))?;
            }
        }
        // A scanner with the same parameters but other tables: the device tables the runs
        // above left in the context must not be reused.
        let other = gen::tiny_scanner(c.seed ^ 0x5eed);
        let cfg = CoincideConfig::prompt(5000.0);
        let (v, _) = oracle::convert(&acq.frames, &other.params, &other.position, &other.energy);
        let want = oracle::coincide(&oracle::sort(&v).map_err(e)?, &cfg).map_err(e)?;
        let mut got: Vec<Coincidence> = Vec::new();
        c.backend
            .pet_run_frames(
                bytes,
                &other,
                &cfg,
                &StreamConfig::default(),
                |p| {
                    got.extend_from_slice(p);
                    Ok(())
                },
                |_| {},
            )
            .map_err(e)?;
        exact(&format!("stream n={n}, another scanner"), &got, &want)?;
    }
    Ok(())
}

/// The streamed chain's order check (on the device) against the CPU path's (on the host):
/// ordered streams give the same pairs and the same statistics (the largest pending count
/// depends on every chunk's watermark, so equal statistics mean equal watermarks); a stream
/// with a BDM's time going down gives the CPU's error, naming the same frame, wherever the
/// disorder sits (inside a warp's 32 frames, across warps, blocks of the check, chunks).
fn test_order_check(c: &Ctx) -> R {
    use detkit::rng::Draw;
    let cpu = detkit::Backend::cpu();
    let mut rng = detkit::rng::rng(c.seed ^ 0x0de7);
    // 8 BDMs (many frames of one BDM in each warp step) and 256 (the check's table size).
    for (name, s) in [
        ("8 BDMs", gen::tiny_scanner(c.seed)),
        (
            "256 BDMs",
            gen::scanner(gen::params(64, 4, (1, 1), (2, 2), 8), 5000.0, c.seed),
        ),
    ] {
        let bdms = s.params.bdm_count();
        let n = if c.quick { 40_000 } else { 150_000 };
        let acq = stream_acquisition(&s, c.seed ^ 91, n, 200_000);
        let time = |f: &DataFrameV2| u64::from_be_bytes(f.time);
        let mut variants: Vec<(String, Vec<DataFrameV2>)> =
            vec![("ordered".into(), acq.frames.clone())];
        // BDM 3 silent for the first half (the watermark stays -inf), invalid BDM bytes with
        // any time sprinkled in (skipped by the check).
        let half = acq.frames.len() / 2;
        let mut silent: Vec<DataFrameV2> = acq.frames[..half]
            .iter()
            .filter(|f| f.bdm != 3)
            .copied()
            .collect();
        silent.extend_from_slice(&acq.frames[half..]);
        for k in (0..silent.len()).step_by(977) {
            silent[k].bdm = (bdms + k as u32 % (256 - bdms).max(1)).min(255) as u8;
            silent[k].time = (rng.below(u32::MAX) as u64).to_be_bytes();
        }
        if bdms < 256 {
            variants.push(("a silent BDM, invalid BDM bytes".into(), silent));
        }
        // Disorders: frame j (the next frame of frame i's BDM) gets a time below frame i's.
        let len = acq.frames.len();
        let mut at: Vec<usize> = vec![0, 31, 32, 1023, 1024, 8191, 8192, 8193, 1 << 15, len - 2];
        if c.sanitize {
            // The sanitizer mode: each boundary kind once (warp, block, chunk, the end).
            at = vec![0, 32, 1024, 8192, 1 << 15, len - 2];
        }
        at.extend((0..if c.sanitize { 1 } else { 6 }).map(|_| rng.below(len as u32 - 1) as usize));
        for i in at {
            let mut f = acq.frames.clone();
            let b = f[i].bdm;
            let Some(j) = (i + 1..len).find(|&j| f[j].bdm == b) else {
                continue;
            };
            let t = time(&f[i]);
            if t == 0 {
                continue;
            }
            let d = rng.below((t - 1).min(1000) as u32 + 1) as u64;
            f[j].time = (t - 1 - d).to_be_bytes();
            variants.push((format!("disorder at frames {i} -> {j}"), f));
        }
        let cfg = CoincideConfig::prompt(5000.0);
        for (vi, (what, frames)) in variants.iter().enumerate() {
            let bytes = gen::frame_bytes(frames);
            for (ci, chunk) in [1000usize, 8192, 8193, 1 << 15, 1 << 22]
                .into_iter()
                .enumerate()
            {
                // The sanitizer mode: chunks of 1000 frames (40 chunks, each a dozen launches)
                // for the ordered frames only; every disorder still runs through chunks of
                // 8192, 8193, 2^15 or one chunk.
                if !c.keep(vi + ci, 4) || c.sanitize && ci == 0 && vi > 0 {
                    continue;
                }
                let sc = StreamConfig {
                    chunk_frames: chunk,
                    pending_capacity: 1 << 20,
                };
                let run = |b: &detkit::Backend| {
                    let mut got: Vec<Coincidence> = Vec::new();
                    b.pet_run_frames(
                        bytes,
                        &s,
                        &cfg,
                        &sc,
                        |p| {
                            got.extend_from_slice(p);
                            Ok(())
                        },
                        |_| {},
                    )
                    .map(|st| (st, got))
                    .map_err(|x| x.to_string())
                };
                let (want, got) = (run(&cpu), run(&c.backend));
                let label = format!("{name}, {what}, chunk {chunk}");
                match (&want, &got) {
                    (Ok((ws, wp)), Ok((gs, gp))) => {
                        exact(&label, gp, wp)?;
                        ensure(gs == ws, || format!("{label}: stats {gs:?}, CPU {ws:?}"))?;
                    }
                    _ => ensure(want == got, || {
                        format!(
                            "{label}: GPU {:?}, CPU {:?}",
                            got.as_ref().err(),
                            want.as_ref().err()
                        )
                    })?,
                }
                if what.starts_with("disorder") {
                    ensure(want.is_err(), || {
                        format!("{label}: the CPU path accepted it")
                    })?;
                }
            }
        }
    }
    Ok(())
}

/// Runs of the given lengths, each sorted, times from `time(run, i)` (crystal = input index,
/// so that any instability shows). Returns the singles and the run starts.
fn runs_input(lens: &[usize], time: impl Fn(usize, usize) -> f64) -> (Vec<Single>, Vec<u32>) {
    let mut v = Vec::new();
    let mut starts = vec![0u32];
    for (r, &len) in lens.iter().enumerate() {
        let mut ts: Vec<f64> = (0..len).map(|i| time(r, i)).collect();
        ts.sort_by(|a, b| a.total_cmp(b));
        for t in ts {
            v.push(Single {
                crystal: v.len() as u32,
                energy: r as f32,
                time: t,
            });
        }
        starts.push(v.len() as u32);
    }
    (v, starts)
}

/// The multiway merge of `v` (runs `starts`) with both tiles, the default radix limit and
/// merge rounds only (`radix_bits` 0: no segment may take the radix path), the bucket path
/// on (default bound), off (`bucket_max` 0: no segment may take it) and forced back to the
/// radix passes (`bucket_max` 1), from poisoned outputs at an offset inside larger buffers,
/// against the oracle; the status word must stay clear and the poison outside the range
/// intact. Also the default entry points.
/// A launcher with the merge's tuning: the wide or narrow tile, the radix limit and the
/// bucket bound.
fn tuned(
    g: &detkit::GpuContext,
    wide: bool,
    bits: u32,
    bmax: u32,
) -> Result<PetLauncher<'_>, String> {
    let t = PetTuning {
        tile: if wide {
            MergeTile::Wide
        } else {
            MergeTile::Narrow
        },
        radix_bits: bits,
        bucket_max: bmax,
        ..Default::default()
    };
    PetLauncher::tuned(g, &t).map_err(e)
}

fn check_multiway(c: &Ctx, what: &str, v: &[Single], starts: &[u32]) -> R {
    let g = c.gpu();
    let n = v.len();
    let want = oracle::sort(v).map_err(e)?;
    let off = 5;
    // Quick (sanitizer) runs: each tile once, one with each path.
    let (rb, bm) = (kp::MW_RADIX_BITS, kp::MW_BUCKET_MAX);
    let variants = if c.quick {
        vec![(false, rb, bm), (true, 0, bm), (true, rb, 1)]
    } else {
        vec![
            (false, rb, bm),
            (true, rb, bm),
            (false, rb, 0),
            (true, rb, 0),
            (true, rb, 1),
            (false, 0, bm),
            (true, 0, bm),
        ]
    };
    // Whether the merge kernels run at all (2 to MW_MAX_RUNS non-empty runs).
    let mut distinct = starts.to_vec();
    distinct.dedup();
    let merged = distinct.len() >= 3 && distinct.len() - 1 <= kp::MW_MAX_RUNS as usize;
    for (vi, (wide, bits, bmax)) in variants.into_iter().enumerate() {
        let mut a = g.poisoned_records(n + off + 2, POISON).map_err(e)?;
        if n > 0 {
            g.stream()
                .memcpy_htod(Record::slice(v), &mut a.slice_mut(off..off + n))
                .map_err(|x| x.to_string())?;
        }
        let mut b = g.poisoned_records(a.len(), POISON).map_err(e)?;
        let pet = tuned(g, wide, bits, bmax)?;
        let in_b = pet.merge_runs(&mut a, &mut b, off, n, starts).map_err(e)?;
        let got = g.download_records(if in_b { &b } else { &a }).map_err(e)?;
        let label = format!(
            "{what} n={n} runs={} wide={wide} radix_bits={bits} bucket_max={bmax}",
            starts.len() - 1
        );
        exact(&label, &got[off..off + n], &want)?;
        if merged {
            let r = pet.merge_radix_segments().map_err(e)?;
            let k = pet.merge_bucket_segments().map_err(e)?;
            ensure(bits != 0 || r == 0, || {
                format!("{label}: {r} radix segments")
            })?;
            ensure(k <= r, || {
                format!("{label}: {k} bucket of {r} radix segments")
            })?;
            ensure(bmax != 0 || k == 0, || {
                format!("{label}: {k} bucket segments with the bucket path off")
            })?;
        }
        ensure(got[..off].iter().chain(&got[off + n..]).all(poison), || {
            format!("{label}: wrote outside its range")
        })?;
        // The sanitizer mode: the checked entry point after the first variant only.
        if c.sanitize && vi > 0 {
            continue;
        }
        let in_b = pet
            .merge_runs_checked(&mut a, &mut b, off, n, starts)
            .map_err(e)?;
        let got = g.download_records(if in_b { &b } else { &a }).map_err(e)?;
        exact(&format!("{label} (checked)"), &got[off..off + n], &want)?;
    }
    let got = c.backend.pet_sort_runs(v, starts).map_err(e)?;
    exact(&format!("{what} n={n} backend"), &got, &want)
}

fn test_merge_multiway(c: &Ctx) -> R {
    let tile = kp::MW_TILE as usize;
    let wide = kp::MW_WIDE_TILE as usize;
    // The sanitizer mode: 20,000 (three wide segments, five narrow ones; racecheck's cost
    // follows the singles merged, see docs/benchmarks.md, "shape").
    let big = if c.quick {
        c.big(100_000, 20_000)
    } else {
        (1 << 20) + 7
    };
    // Run counts (random lengths, empty ones included; few distinct times: ties across
    // runs).
    for (nruns, n) in [
        (1usize, 1000usize),
        (2, 5000),
        (2, big),
        (255, 20_000),
        (256, 50_000),
        (256, big),
        (257, 20_000),
        (
            4096,
            if c.quick {
                c.big(20_000, 10_000)
            } else {
                300_000
            },
        ),
    ] {
        let cuts = c.rand(40 + nruns as u64, nruns - 1, n as u32 + 1);
        let mut bounds: Vec<u32> = cuts;
        bounds.push(0);
        bounds.push(n as u32);
        bounds.sort_unstable();
        let lens: Vec<usize> = bounds.windows(2).map(|w| (w[1] - w[0]) as usize).collect();
        let r = c.rand(41, n, 64);
        let (v, s) = runs_input(&lens, |run, i| {
            r[(bounds[run] as usize + i) % n.max(1)] as f64 * 0.25
        });
        check_multiway(c, "random runs", &v, &s)?;
    }
    // Sizes around the tiles, 256 and 3 runs, 50 distinct times. The sanitizer mode: each
    // size with one of the two run counts, in turn (each count at six sizes, both tiles'
    // edges with each).
    for (si, n) in [
        0usize,
        1,
        31,
        32,
        33,
        tile - 1,
        tile,
        tile + 1,
        wide - 1,
        wide,
        wide + 1,
        big,
    ]
    .into_iter()
    .enumerate()
    {
        for (ri, nruns) in [3usize, 256].into_iter().enumerate() {
            if !c.keep(si + ri, 2) {
                continue;
            }
            let lens: Vec<usize> = (0..nruns)
                .map(|r| n / nruns + usize::from(r < n % nruns))
                .collect();
            let r = c.rand(42, n, 50);
            let (v, s) = runs_input(&lens, |run, i| r[(run * 7919 + i) % n.max(1)] as f64);
            check_multiway(c, "sizes", &v, &s)?;
        }
    }
    // Runs of length 0 and 1.
    let lens: Vec<usize> = (0..256).map(|r| r % 2).collect();
    let (v, s) = runs_input(&lens, |run, _| (run % 5) as f64);
    check_multiway(c, "runs of 0 and 1", &v, &s)?;
    let (v, s) = runs_input(&[0, 0, 1, 0, 1, 1, 0], |run, _| -(run as f64));
    check_multiway(c, "tiny runs", &v, &s)?;
    // Adversarial segment shapes.
    let m = if c.quick { c.big(2000, 1000) } else { 20_000 };
    // All times equal.
    let (v, s) = runs_input(&vec![m / 10; 256], |_, _| 3.5);
    check_multiway(c, "all equal", &v, &s)?;
    // Every run the same sequence (each run's hidden singles between samples land in one
    // segment).
    let (v, s) = runs_input(&vec![m / 10; 256], |_, i| i as f64);
    check_multiway(c, "identical runs", &v, &s)?;
    // One huge run, 255 tiny ones packed just after one of its times.
    let mut lens = vec![10 * m];
    lens.extend(std::iter::repeat_n(7, 255));
    let (v, s) = runs_input(&lens, |run, i| {
        if run == 0 {
            2.0 * i as f64
        } else {
            2.0 * (5 * m) as f64 + 1.0 + (i % 2) as f64 * 0.5
        }
    });
    check_multiway(c, "huge and tiny", &v, &s)?;
    // Every run's singles packed just after the first splitter's time: all runs hold the
    // same long stretch of one time right after their first few distinct times.
    let (v, s) = runs_input(&vec![m / 10; 256], |run, i| {
        if i < 3 {
            (i * 256 + run) as f64
        } else {
            1e6
        }
    });
    check_multiway(c, "packed after a splitter", &v, &s)?;
    // Signs, zeros, extremes across runs.
    let odd = [
        -0.0,
        0.0,
        -1e300,
        1e300,
        f64::MIN_POSITIVE,
        -f64::MAX,
        f64::MAX,
        5e-324,
    ];
    let r = c.rand(43, 30_000, odd.len() as u32);
    let (v, s) = runs_input(&vec![30_000 / 100; 100], |run, i| {
        odd[r[run * 300 + i] as usize]
    });
    check_multiway(c, "signs and zeros", &v, &s)?;
    // An unsorted run: typed error from the Backend API.
    let (mut v, s) = runs_input(&[4, 4], |_, i| i as f64);
    v.swap(1, 2);
    ensure(
        matches!(
            c.backend.pet_sort_runs(&v, &s),
            Err(Error::InvalidInput { .. })
        ),
        || "unsorted run accepted by the multiway merge".into(),
    )?;
    v[3].time = f64::NAN;
    ensure(
        matches!(
            c.backend.pet_sort_runs(&v, &s),
            Err(Error::InvalidInput { .. })
        ),
        || "NaN accepted by the multiway merge".into(),
    )
}

/// The merge of `v` (runs `starts`) with one tile and radix limit, checked against the
/// oracle; returns how many segments took the radix path.
fn multiway_radix_count(
    c: &Ctx,
    what: &str,
    v: &[Single],
    starts: &[u32],
    wide: bool,
    bits: u32,
) -> Result<u32, String> {
    multiway_counts(c, what, v, starts, wide, bits, kp::MW_BUCKET_MAX).map(|x| x.0)
}

/// The merge of `v` (runs `starts`) with one tile, radix limit and bucket bound, checked
/// against the oracle; returns how many segments took the radix way (radix passes or
/// buckets) and how many of them the bucket path.
fn multiway_counts(
    c: &Ctx,
    what: &str,
    v: &[Single],
    starts: &[u32],
    wide: bool,
    bits: u32,
    bmax: u32,
) -> Result<(u32, u32), String> {
    let g = c.gpu();
    let n = v.len();
    let want = oracle::sort(v).map_err(e)?;
    let mut a = g.upload_records(v).map_err(e)?;
    let mut b = g.poisoned_records(a.len(), POISON).map_err(e)?;
    let pet = tuned(g, wide, bits, bmax)?;
    let in_b = pet.merge_runs(&mut a, &mut b, 0, n, starts).map_err(e)?;
    let got = g.download_records(if in_b { &b } else { &a }).map_err(e)?;
    exact(
        &format!("{what} wide={wide} radix_bits={bits} bucket_max={bmax}"),
        &got,
        &want,
    )?;
    Ok((
        pet.merge_radix_segments().map_err(e)?,
        pet.merge_bucket_segments().map_err(e)?,
    ))
}

/// The bucket path of the merge blocks (`mw_bucket_plan`): one segment of 256 runs whose
/// keys span exactly the path's limit (50 bits) and one bit over (radix passes), the last
/// span whose slot words compare in 32 bits (30 bits narrow, 31 wide) and one bit over, the
/// bucket bits and one more (no low bits, one low bit), one bucket of exactly
/// the bound and one over (equal times across
/// runs: ties in input order), all times equal (one bucket: radix passes with no pass),
/// a bound of 1 (every segment back to the radix passes), bound 0 (path off), and the
/// bench's kind of data (integral times in ps, several levels) where every level-0
/// segment must take it.
fn test_merge_bucket(c: &Ctx) -> R {
    let t0 = 2f64.powi(52);
    let bm = kp::MW_BUCKET_MAX;
    // 256 runs in one segment: times t0 + x (unit steps), x spread over [0, span].
    let one_segment = |seed: u64, span: u64| {
        let n = 4000usize;
        let r = c.rand(seed, n, u32::MAX);
        let lens = vec![n / 256; 256];
        runs_input(&lens, |run, i| {
            let j = run * (n / 256) + i;
            let x = match j {
                0 => 0,
                1 => span,
                _ => (r[j] as u64 * 7919 + ((r[(j * 31) % n] as u64) << 21)) % (span + 1),
            };
            t0 + x as f64
        })
    };
    // Times t0 + 512 m (at most 2 per bucket of a 20-bit span: buckets of 256 or 128) and
    // `k` equal ones at t0 + 512 * 2047 + 5, spread over the runs: one bucket of exactly k.
    let one_bucket = |k: usize| {
        let n = 3000 + k;
        let per = n.div_ceil(256);
        let lens: Vec<usize> = (0..256)
            .map(|r| per.min(n.saturating_sub(r * per)))
            .collect();
        let starts: Vec<usize> = lens
            .iter()
            .scan(0, |a, &l| {
                *a += l;
                Some(*a - l)
            })
            .collect();
        runs_input(&lens, |run, i| {
            // Input index j; the equal ones every (n / k)-th, so most runs hold some.
            let j = starts[run] + i;
            if j.is_multiple_of(n / k) && j / (n / k) < k {
                t0 + (512 * 2047 + 5) as f64
            } else {
                t0 + (512 * (j % 2047)) as f64
            }
        })
    };
    for wide in [false, true] {
        // 2^12 buckets narrow, 2^13 wide; slot words compared in 32 bits up to 30 and 31
        // bits of span, in 64 bits up to 50.
        let bb = kp::mw_bucket_bits(if wide {
            kp::MW_WIDE_THREADS
        } else {
            kp::MW_THREADS
        });
        let low32 = bb + 32 - kp::MW_BUCKET_IDX_BITS;
        let top = 64 - kp::MW_BUCKET_IDX_BITS;
        for (span, bucket) in [
            ((1u64 << top) - 1, 1u32),
            (1 << top, 0),
            ((1 << low32) - 1, 1),
            (1 << low32, 1),
            ((1 << bb) - 1, 1),
            ((1 << (bb + 1)) - 1, 1),
        ] {
            let (v, s) = one_segment(70, span);
            let got = multiway_counts(c, "span", &v, &s, wide, kp::MW_RADIX_BITS, bm)?;
            ensure(got == (1, bucket), || {
                format!("span {span} wide={wide}: (radix, bucket) segments {got:?}")
            })?;
        }
        for (k, bucket) in [(bm as usize, 1u32), (bm as usize + 1, 0)] {
            let (v, s) = one_bucket(k);
            let got = multiway_counts(c, "one bucket", &v, &s, wide, kp::MW_RADIX_BITS, bm)?;
            ensure(got == (1, bucket), || {
                format!("bucket of {k} wide={wide}: (radix, bucket) segments {got:?}")
            })?;
        }
        let (v, s) = runs_input(&vec![15; 256], |_, _| 1e9);
        let got = multiway_counts(c, "all equal", &v, &s, wide, kp::MW_RADIX_BITS, bm)?;
        ensure(got == (1, 0), || {
            format!("all equal wide={wide}: (radix, bucket) segments {got:?}")
        })?;
        // The bench's kind of data: integral times in ps, 20 M singles/s over 256 runs (the
        // sanitizer mode: 30,000, still several segments of each tile on level 0).
        let n = if c.quick {
            c.big(60_000, 30_000)
        } else {
            1 << 20
        };
        let r = c.rand(71, n, u32::MAX);
        let lens = vec![n / 256; 256];
        let (v, s) = runs_input(&lens, |run, i| {
            6e11 + (r[run * (n / 256) + i] as u64 * 13 % (n as u64 * 50_000)) as f64
        });
        let (radix, bucket) =
            multiway_counts(c, "times in ps", &v, &s, wide, kp::MW_RADIX_BITS, bm)?;
        let tile = if wide { kp::MW_WIDE_TILE } else { kp::MW_TILE };
        let first = detkit::pet::merge::merge_plan(&s, tile)[0].nsplit + 1;
        ensure(bucket >= first && radix >= bucket, || {
            format!("times in ps wide={wide}: {bucket} bucket, {radix} radix segments, {first} on level 0")
        })?;
        for bmax in [0, 1] {
            let got = multiway_counts(c, "times in ps", &v, &s, wide, kp::MW_RADIX_BITS, bmax)?;
            ensure(got == (radix, 0), || {
                format!("times in ps wide={wide} bucket_max={bmax}: {got:?}, want ({radix}, 0)")
            })?;
        }
    }
    Ok(())
}

/// The radix path of the merge blocks (`mw_radix_plan`): segments whose keys span exactly
/// the limit and one bit more, the 32/33-bit edge between `u32` and `u64` sort keys, all
/// times equal, two runs (merge rounds), integral times in ps (13 common low bits) over
/// several levels.
fn test_merge_radix(c: &Ctx) -> R {
    let t0 = 2f64.powi(52);
    // 256 runs in one segment (n below both tiles): times t0 + x, unit steps, so the key
    // span is max x - min x.
    let one_segment = |seed: u64, span: u64| {
        let n = 4000usize;
        let r = c.rand(seed, n, u32::MAX);
        let lens = vec![n / 256; 256];
        runs_input(&lens, |run, i| {
            let j = run * (n / 256) + i;
            let x = match j {
                0 => 0,
                1 => 1,
                2 => span,
                _ => (r[j] as u64 * 7919) % (span + 1),
            };
            t0 + x as f64
        })
    };
    for wide in [false, true] {
        for limit in [12u32, 20] {
            let (v, s) = one_segment(60, (1 << limit) - 1);
            let got = multiway_radix_count(c, "span at the limit", &v, &s, wide, limit)?;
            ensure(got == 1, || {
                format!("span at the limit {limit}: {got} radix segments")
            })?;
            let (v, s) = one_segment(61, 1 << limit);
            let got = multiway_radix_count(c, "span one over", &v, &s, wide, limit)?;
            ensure(got == 0, || {
                format!("span one over {limit}: {got} radix segments")
            })?;
        }
        for span in [(1u64 << 32) - 1, 1 << 32, (1 << 33) - 1] {
            let (v, s) = one_segment(62, span);
            let got = multiway_radix_count(c, "u32/u64 keys", &v, &s, wide, kp::MW_RADIX_BITS)?;
            ensure(got == 1, || format!("span {span}: {got} radix segments"))?;
        }
        // All times equal: radix with no pass, input order kept.
        let (v, s) = runs_input(&vec![15; 256], |_, _| 1e9);
        let got = multiway_radix_count(c, "all equal", &v, &s, wide, kp::MW_RADIX_BITS)?;
        ensure(got == 1, || format!("all equal: {got} radix segments"))?;
        // Two runs: one merge round beats the radix passes.
        let (v, s) = runs_input(&[2000, 2100], |run, i| (1000 * i + run) as f64);
        let got = multiway_radix_count(c, "two runs", &v, &s, wide, kp::MW_RADIX_BITS)?;
        ensure(got == 0, || format!("two runs: {got} radix segments"))?;
        // Integral times in ps (one binade: 13 common low bits), several levels (the sanitizer
        // mode: 30,000, several segments of each tile).
        let n = if c.quick {
            c.big(60_000, 30_000)
        } else {
            1 << 20
        };
        let r = c.rand(63, n, 100_000);
        let lens = vec![n / 256; 256];
        let (v, s) = runs_input(&lens, |run, i| {
            6e11 + (r[run * (n / 256) + i] as f64) * (n as f64 / 256.0)
        });
        let got = multiway_radix_count(c, "times in ps", &v, &s, wide, kp::MW_RADIX_BITS)?;
        ensure(got > 0, || "times in ps: no radix segment".into())?;
        let got = multiway_radix_count(c, "times in ps", &v, &s, wide, 0)?;
        ensure(got == 0, || {
            format!("times in ps, radix off: {got} radix segments")
        })?;
    }
    Ok(())
}

fn test_sort_auto(c: &Ctx) -> R {
    use detkit::pet::PetSortPath;
    let g = c.gpu();
    // The sanitizer mode: 20,000 (the 256-run case still has 254 runs of 79, random times
    // thousands of runs: the radix path).
    let n = if c.quick {
        c.big(50_000, 20_000)
    } else {
        1 << 20
    };
    let r = c.rand(50, n, 1000);
    let cases: Vec<(&str, Vec<Single>, Option<PetSortPath>)> = vec![
        ("empty", Vec::new(), Some(PetSortPath::Sorted)),
        (
            "sorted",
            (0..n).map(|i| sgl(i as u32, 1.0, (i / 3) as f64)).collect(),
            Some(PetSortPath::Sorted),
        ),
        (
            "two natural runs",
            (0..n)
                .map(|i| sgl(i as u32, 1.0, ((i + n / 2) % n) as f64))
                .collect(),
            Some(PetSortPath::Merge { runs: 2 }),
        ),
        (
            "256 natural runs",
            (0..n)
                .map(|i| sgl(i as u32, 1.0, (i % (n / 256 + 1)) as f64))
                .collect(),
            None,
        ),
        (
            "random",
            r.iter()
                .enumerate()
                .map(|(i, &t)| sgl(i as u32, 1.0, t as f64))
                .collect(),
            Some(PetSortPath::Radix),
        ),
    ];
    for (what, v, path) in cases {
        let want = oracle::sort(&v).map_err(e)?;
        let (got, p) = c.backend.pet_sort_auto(&v).map_err(e)?;
        exact(&format!("sort_auto {what}"), &got, &want)?;
        if let Some(path) = path {
            ensure(p == path, || {
                format!("sort_auto {what}: path {p:?}, expected {path:?}")
            })?;
        }
        // The detected runs equal the host's natural runs.
        if !v.is_empty() {
            let a = g.upload_records(&v).map_err(e)?;
            let got = PetLauncher::new(g).detect_runs(&a, 0, v.len()).map_err(e)?;
            let mut host = vec![0u32];
            host.extend(
                (1..v.len())
                    .filter(|&i| v[i].time < v[i - 1].time)
                    .map(|i| i as u32),
            );
            host.push(v.len() as u32);
            let want = (host.len() - 1 <= kp::MW_MAX_RUNS as usize).then_some(host);
            ensure(got == want, || format!("detect runs {what}"))?;
        }
    }
    Ok(())
}
