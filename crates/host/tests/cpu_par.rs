//! The CPU backend's fast paths (`<family>/par.rs`) against the oracles (`<family>/cpu.rs`):
//! the same results, bit for bit and in the same order, on 1, 2 and 7 threads, on the
//! generated and adversarial inputs the GPU is tested on, and (PET) with pieces small
//! enough that every piece boundary is crossed.

use detkit::clustering::gen::{self as cgen, Adversarial};
use detkit::clustering::{self as cl, ChargeCut, Digis, Geometry};
use detkit::pet::cpu::{self as poracle, CoincideConfig};
use detkit::pet::{self, gen as pgen, StreamConfig};
use detkit::rng::{rng, Draw};
use detkit::seeding::{self, gen as sgen, SeedingOutput, SeedingSettings, SpacePoint};
use detkit::Backend;
use detkit_gpu::pet::{Coincidence, DataFrameV2, Policy, Single};

const THREADS: [usize; 3] = [1, 2, 7];

fn backends() -> Vec<(usize, Backend)> {
    THREADS
        .iter()
        .map(|&t| (t, Backend::cpu_with_threads(t).unwrap()))
        .collect()
}

#[test]
fn threads_setting() {
    for (t, b) in backends() {
        assert_eq!(b.threads(), t);
        assert_eq!(b.kind(), detkit::BackendKind::Cpu);
    }
    // 0: rayon's global pool (RAYON_NUM_THREADS, else every core).
    let b = Backend::cpu().with_threads(0).unwrap();
    assert_eq!(b.threads(), rayon_threads());
}

fn rayon_threads() -> usize {
    Backend::cpu().threads()
}

// ---------------------------------------------------------------------------------------
// Seeding
// ---------------------------------------------------------------------------------------

fn sp(x: f32, y: f32, z: f32) -> SpacePoint {
    SpacePoint {
        x,
        y,
        z,
        var_z: 0.0,
        var_r: 0.0,
    }
}

fn tracks_in_window(seed: u64, n_tracks: usize, phi0: f64, width: f64) -> Vec<SpacePoint> {
    let mut rng = rng(seed);
    let mut out = Vec::new();
    for _ in 0..n_tracks {
        let phi = phi0 + width * rng.uniform();
        let cot = 2.0 * rng.uniform() - 1.0;
        let z0 = 100.0 * (rng.uniform() - 0.5);
        let curv = 0.002 * (rng.uniform() - 0.5);
        for r in [34.0, 70.0, 116.0, 172.0] {
            let p = phi + curv * r;
            out.push(sp(
                (r * p.cos()) as f32,
                (r * p.sin()) as f32,
                (z0 + cot * r + 0.05 * rng.normal()) as f32,
            ));
        }
    }
    out
}

fn seeding_oracle(cfg: &seeding::SeedingConfig, sps: &[SpacePoint]) -> SeedingOutput {
    let (seeds, stats) = seeding::cpu::seeds(cfg, sps);
    let params = seeding::cpu::params(cfg, sps, &seeds);
    SeedingOutput {
        seeds,
        params,
        stats,
    }
}

fn check_seeding(label: &str, cfg: &seeding::SeedingConfig, sps: &[SpacePoint]) {
    let want = seeding_oracle(cfg, sps);
    for (t, b) in backends() {
        let got = b.seed(sps, cfg).unwrap();
        assert_eq!(got.stats, want.stats, "{label}, {t} threads: counts");
        let bad = (0..got.seeds.len().min(want.seeds.len()))
            .filter(|&i| got.seeds[i] != want.seeds[i] || got.params[i] != want.params[i])
            .count();
        assert!(
            bad == 0 && got.seeds.len() == want.seeds.len(),
            "{label}, {t} threads: {bad} seeds differ ({} vs {})",
            got.seeds.len(),
            want.seeds.len()
        );
    }
}

#[test]
fn seeding_generated_and_adversarial() {
    let cfg = SeedingSettings::default().to_config().unwrap();
    for (mu, seed) in [(5.0, 1u64), (20.0, 2), (40.0, 3)] {
        let ev = sgen::generate(seed, mu, true).spacepoints;
        check_seeding(&format!("mu {mu}"), &cfg, &ev);
    }
    check_seeding("empty", &cfg, &[]);
    check_seeding("one", &cfg, &[sp(70.0, 0.0, 0.0)]);
    let ex = [
        sp(34.0, 0.0, 10.0),
        sp(70.0, 0.0, 20.588),
        sp(116.0, 0.0, 34.118),
    ];
    check_seeding("worked example", &cfg, &ex);
    let one_bin = tracks_in_window(11, 600, 0.01, 0.05);
    check_seeding("one bin", &cfg, &one_bin);
    check_seeding(
        "phi wrap",
        &cfg,
        &tracks_in_window(12, 400, std::f64::consts::PI - 0.1, 0.2),
    );
    let mut edge = vec![sp(70.0, 0.0, 0.0)];
    for (x, z) in [
        (50.0, 0.0),
        (49.99, 0.0),
        (35.0, 125.0),
        (35.0, 124.99),
        (35.0, -125.0),
        (150.0, 0.0),
        (149.99, 0.0),
        (149.99, 450.0),
        (120.0, 449.99),
    ] {
        edge.push(sp(x, 0.0, z));
        edge.push(sp(-x, 0.0, z));
        edge.push(sp(0.0, x, -z));
    }
    check_seeding("cut boundaries", &cfg, &edge);
    let mut inval = one_bin.clone();
    inval.extend([
        sp(50.0, 0.0, 2000.5),
        sp(200.0, 0.0, 0.0),
        sp(-70.0, -0.0, 10.0),
        sp(0.0, 0.0, 0.0),
    ]);
    check_seeding("invalid", &cfg, &inval);
    let mut r = rng(13);
    let noise: Vec<SpacePoint> = (0..3000)
        .map(|_| {
            let rr = 30.0 + 170.0 * r.uniform();
            let p = 2.0 * std::f64::consts::PI * r.uniform();
            sp(
                (rr * p.cos()) as f32,
                (rr * p.sin()) as f32,
                (600.0 * (r.uniform() - 0.5)) as f32,
            )
        })
        .collect();
    check_seeding("random", &cfg, &noise);
    let mut dup = tracks_in_window(14, 50, -1.0, 0.5);
    dup.extend(dup.clone());
    check_seeding("duplicates", &cfg, &dup);
    // Fans: one middle with exactly k bottoms and k tops (every pair near the cut with
    // variance 100).
    for k in [0usize, 1, 15, 16, 17, 33, 200] {
        for var in [0.0f32, 100.0] {
            check_seeding(&format!("fan {k} {var}"), &cfg, &sgen::fan(k, var));
        }
    }
}

/// Variances from tiny to huge (the top bounds then prove nothing: every top is tried),
/// and the configurations of the GPU tests.
#[test]
fn seeding_variances_and_configs() {
    let cfg = SeedingSettings::default().to_config().unwrap();
    let base = sgen::generate(0x5eed, 15.0, true).spacepoints;
    let mut r = rng(0x7a1);
    for (label, lo, hi) in [
        ("tiny", -12.0, -6.0),
        ("pixel", -5.0, -2.0),
        ("large", -2.0, 2.0),
        ("huge", 30.0, 38.0),
        ("mixed", -12.0, 3.0),
    ] {
        let sps: Vec<SpacePoint> = base
            .iter()
            .map(|p| {
                let mut q = *p;
                let mut draw = || {
                    if r.below(4) == 0 {
                        0.0
                    } else {
                        10f64.powf(lo + (hi - lo) * r.uniform()) as f32
                    }
                };
                q.var_r = draw();
                q.var_z = draw();
                q
            })
            .collect();
        check_seeding(label, &cfg, &sps);
    }
    let ev = sgen::generate(21, 15.0, true).spacepoints;
    let variants = [
        SeedingSettings {
            max_seeds_per_spm: 1,
            ..Default::default()
        },
        SeedingSettings {
            max_seeds_per_spm: 16,
            ..Default::default()
        },
        SeedingSettings {
            compat_seed_limit: 0,
            ..Default::default()
        },
        SeedingSettings {
            compat_seed_limit: 8,
            delta_inv_helix_diameter: 0.001,
            ..Default::default()
        },
        SeedingSettings {
            cot_theta_max: 2.0,
            ..Default::default()
        },
        SeedingSettings {
            b_field_in_z: 0.0,
            ..Default::default()
        },
        SeedingSettings {
            delta_r_min: 0.0,
            delta_r_max: 200.0,
            impact_max: 50.0,
            phi_bin_deflection_coverage: 3,
            ..Default::default()
        },
    ];
    for (i, s) in variants.iter().enumerate() {
        check_seeding(&format!("config {i}"), &s.to_config().unwrap(), &ev);
    }
}

#[test]
fn seeding_batches_equal_events_one_by_one() {
    let cfg = SeedingSettings::default().to_config().unwrap();
    let events: Vec<Vec<SpacePoint>> = vec![
        sgen::generate(400, 10.0, true).spacepoints,
        Vec::new(),
        sgen::fan(33, 100.0),
        tracks_in_window(41, 300, 0.01, 0.05),
        sgen::generate(401, 20.0, true).spacepoints,
    ];
    let refs: Vec<&[SpacePoint]> = events.iter().map(|e| e.as_slice()).collect();
    let want: Vec<SeedingOutput> = refs.iter().map(|e| seeding_oracle(&cfg, e)).collect();
    for (t, b) in backends() {
        assert!(b.seed_events(&refs, &cfg).unwrap() == want, "{t} threads");
    }
}

// ---------------------------------------------------------------------------------------
// Clustering
// ---------------------------------------------------------------------------------------

fn check_clusters(label: &str, d: &Digis, offsets: &[u32], g: &Geometry) {
    for cut in [None, Some(g.default_cut), Some(ChargeCut::uniform(7000))] {
        let want = cl::cpu::cluster(d, offsets, g, cut);
        for (t, b) in backends() {
            let got = b.cluster_events(d, offsets, g, cut).unwrap();
            assert!(got == want, "{label}, cut {cut:?}, {t} threads");
        }
    }
}

#[test]
fn clustering_generated_events_and_batches() {
    let g = Geometry::phase1();
    let ev = cgen::run3_event(1000);
    check_clusters("run3", &ev, &[0, ev.len() as u32], &g);
    // A batch: small events, an empty one, a dense-ish one.
    let mut all = Digis::default();
    let mut offsets = vec![0u32];
    for (i, clusters) in [500.0, 0.0, 3000.0, 20.0].into_iter().enumerate() {
        let e = cgen::event(
            &g,
            &cgen::EventConfig {
                clusters,
                extra_width: i as u32 % 3,
                ..cgen::EventConfig::run3()
            },
            7 + i as u64,
        );
        all.extend(&e);
        offsets.push(all.len() as u32);
    }
    check_clusters("batch", &all, &offsets, &g);
}

#[test]
fn clustering_adversarial_modules() {
    let g = Geometry::phase1();
    let small = Geometry::custom(4, 40, 24, ChargeCut::uniform(4000)).unwrap();
    for (geo, m) in [(&g, 95u16), (&g, 1200), (&small, 3)] {
        for kind in [
            Adversarial::One,
            Adversarial::Full,
            Adversarial::Lattice,
            Adversarial::Checkerboard,
            Adversarial::Snake,
            Adversarial::SmallSnake(9),
            Adversarial::AllDuplicated,
            Adversarial::FullDuplicated,
        ] {
            let d = cgen::adversarial(kind, geo, m, 5);
            check_clusters(
                &format!("{kind:?} in module {m}"),
                &d,
                &[0, d.len() as u32],
                geo,
            );
        }
    }
    // Invalid digis inside and between modules, and a module id reused in a later event.
    let mut d = Digis::default();
    for (m, x, y) in [
        (3u16, 1u16, 1u16),
        (detkit_gpu::clustering::INVALID_MODULE, 0, 0),
        (3, 2, 2),
        (3, 0, 0),
        (3, 1, 1),
        (5, 0, 0),
        (detkit_gpu::clustering::INVALID_MODULE, 9, 9),
        (3, 4, 4),
        (3, 5, 5),
    ] {
        d.push(m, x, y, 5000);
    }
    check_clusters("invalid digis", &d, &[0, 6, 9], &g);
}

/// The results written into reused outputs (stale contents, larger and smaller than the
/// batch) and into the caller's arrays equal fresh ones; a module run cut by the run pass's
/// pieces (16384 digis), with invalid digis on both sides of the cut, is one run.
#[test]
fn clustering_into_reused_outputs_and_runs_across_pieces() {
    let g = Geometry::phase1();
    let inv = detkit_gpu::clustering::INVALID_MODULE;
    // Event 0: module 7 over digis 0..20000 (every 5th digi invalid, pixels in a lattice of
    // touching pairs), then module 9; event 1: module 7 again, after invalid digis.
    let mut d = Digis::default();
    for i in 0..20_000u32 {
        if i % 5 == 4 || (16_380..16_390).contains(&i) {
            d.push(inv, 0, 0, 1000);
        } else {
            let (x, y) = ((i / 400 % 160) as u16, (i % 400) as u16);
            d.push(7, x, y, 1000 + (i % 7000) as u16);
        }
    }
    for i in 0..300u16 {
        d.push(9, i % 160, i / 160 * 3, 9000);
    }
    let e1 = d.len() as u32;
    for _ in 0..40 {
        d.push(inv, 1, 1, 1000);
    }
    for i in 0..17_000u32 {
        d.push(7, (i % 160) as u16, (i / 160 % 416) as u16, 4000);
    }
    let offsets = [0, e1, d.len() as u32];
    for cut in [None, Some(g.default_cut)] {
        let want = cl::cpu::cluster(&d, &offsets, &g, cut);
        for (t, b) in backends() {
            assert!(
                b.cluster_events(&d, &offsets, &g, cut).unwrap() == want,
                "{t} threads"
            );
            let stale = cl::Clusters {
                clus: vec![77; d.len() + 9],
                clus_in_module: vec![5; 3],
                module_first: vec![5; 1 << 14],
                ..Default::default()
            };
            for mut out in [stale, cl::Clusters::default()] {
                for _ in 0..2 {
                    b.cluster_events_into(&d, &offsets, &g, cut, &mut out)
                        .unwrap();
                    assert!(out == want, "into, {t} threads");
                }
            }
            let slots = 2 * g.modules as usize;
            let (mut clus, mut cim, mut first) =
                (vec![55; d.len()], vec![55; slots], vec![55; slots]);
            b.cluster_events_into_slices(
                &d,
                &offsets,
                &g,
                cut,
                cl::ClustersMut {
                    clus: &mut clus,
                    clus_in_module: &mut cim,
                    module_first: &mut first,
                },
            )
            .unwrap();
            assert!(
                clus == want.clus && cim == want.clus_in_module && first == want.module_first,
                "slices, {t} threads"
            );
        }
    }
}

/// `cluster_batches` on the CPU (one output reused from batch to batch: larger, smaller,
/// larger again) gives each batch what `cluster_events` gives it alone.
#[test]
fn clustering_batches_reuse_one_output() {
    let g = Geometry::phase1();
    let events: Vec<Digis> = [800.0, 50.0, 0.0, 1500.0]
        .into_iter()
        .enumerate()
        .map(|(i, clusters)| {
            cgen::event(
                &g,
                &cgen::EventConfig {
                    clusters,
                    ..cgen::EventConfig::run3()
                },
                30 + i as u64,
            )
        })
        .collect();
    let offsets: Vec<[u32; 2]> = events.iter().map(|e| [0, e.len() as u32]).collect();
    let batches: Vec<(cl::DigisRef<'_>, &[u32])> = events
        .iter()
        .zip(&offsets)
        .map(|(e, o)| (cl::DigisRef::from(e), &o[..]))
        .collect();
    let cut = Some(g.default_cut);
    for (t, b) in backends() {
        let mut seen = 0;
        b.cluster_batches(&batches, &g, cut, |i, got| {
            let want = cl::cpu::cluster(&events[i], &offsets[i], &g, cut);
            assert!(*got == want, "batch {i}, {t} threads");
            seen += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, events.len());
    }
}

// ---------------------------------------------------------------------------------------
// PET
// ---------------------------------------------------------------------------------------

const PIECES: [usize; 5] = [1, 2, 7, 64, 1 << 16];

fn on_threads<R: Send>(f: impl Fn() -> R + Sync) -> Vec<(usize, R)> {
    THREADS
        .iter()
        .map(|&t| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap();
            (t, pool.install(&f))
        })
        .collect()
}

#[test]
fn pet_conversion() {
    for scanner in [pgen::tiny_scanner(7), pgen::small_animal_scanner(3)] {
        let mut frames = pgen::acquisition(
            &scanner,
            &pgen::AcquisitionConfig {
                singles: 5000,
                ..Default::default()
            },
        )
        .frames;
        // Bad addresses (BDM, DU, x, y out of range) and clamped energies, spread out.
        let mut r = rng(9);
        for i in (0..frames.len()).step_by(37) {
            let f = &mut frames[i];
            match r.below(5) {
                0 => f.bdm = 255,
                1 => f.head_du = 0xAF,
                2 => f.x = 255,
                3 => f.y = 255,
                _ => f.energy = 65535u16.to_be_bytes(),
            }
        }
        let want = poracle::convert(&frames, &scanner.params, &scanner.position, &scanner.energy);
        for piece in PIECES {
            for (t, got) in on_threads(|| {
                pet::par::convert_in_pieces(
                    &frames,
                    &scanner.params,
                    &scanner.position,
                    &scanner.energy,
                    piece,
                )
            }) {
                assert!(got.0 == want.0, "singles, piece {piece}, {t} threads");
                assert_eq!(got.1, want.1, "stats, piece {piece}, {t} threads");
            }
        }
        for (t, b) in backends() {
            assert!(
                b.pet_convert(&frames, &scanner).unwrap() == want,
                "{t} threads"
            );
            // Into a reused vector: stale contents, too small and then large enough.
            let mut out = vec![want.0.first().copied().unwrap_or_default(); 3];
            for _ in 0..2 {
                let st = b
                    .pet_convert_into(bytemuck::cast_slice(&frames), &scanner, &mut out)
                    .unwrap();
                assert!(out == want.0 && st == want.1, "into, {t} threads");
            }
        }
        for piece in PIECES {
            for (t, (got, st)) in on_threads(|| {
                let mut out = vec![Single::default(); frames.len() + 5];
                let st = pet::par::convert_into_in_pieces(
                    &frames,
                    &scanner.params,
                    &scanner.position,
                    &scanner.energy,
                    piece,
                    &mut out,
                );
                (out, st)
            }) {
                assert!(
                    got == want.0 && st == want.1,
                    "into, piece {piece}, {t} threads"
                );
            }
        }
    }
    // More frames than one wave of the parallel conversion holds (4 pieces of 8192 frames
    // per thread), with the default piece.
    let scanner = pgen::small_animal_scanner(4);
    let frames = pgen::acquisition(
        &scanner,
        &pgen::AcquisitionConfig {
            singles: 120_000,
            ..Default::default()
        },
    )
    .frames;
    assert!(frames.len() > 8 * 8192, "{}", frames.len());
    let want = poracle::convert(&frames, &scanner.params, &scanner.position, &scanner.energy);
    for (t, got) in on_threads(|| {
        pet::par::convert(&frames, &scanner.params, &scanner.position, &scanner.energy)
    }) {
        assert!(got == want, "{} frames, {t} threads", frames.len());
    }
    // An empty input, and a scanner whose tables are too short: the oracle's way.
    let s = pgen::tiny_scanner(7);
    let none: [DataFrameV2; 0] = [];
    assert!(pet::par::convert(&none, &s.params, &s.position, &s.energy)
        .0
        .is_empty());
}

/// The conversion's blocks (64 frames) and tables: lengths around a block and a piece,
/// frames dropped or rejected at the first and last position, at a block boundary and in
/// the tail, origins outside the DU in the position table, and every BDM byte and DU
/// nibble (inside and outside the scanner), on 1, 2 and 7 threads.
#[test]
fn pet_conversion_blocks() {
    for scanner in [pgen::tiny_scanner(5), pgen::small_animal_scanner(6)] {
        // Some position-table entries point outside the DU (origin >= crystals per DU).
        let mut position = scanner.position.to_vec();
        for i in (0..position.len()).step_by(53) {
            position[i] = 200 + (i % 56) as u8;
        }
        let all = pgen::acquisition(
            &scanner,
            &pgen::AcquisitionConfig {
                singles: 3000,
                ..Default::default()
            },
        )
        .frames;
        assert!(all.len() > 1000, "{}", all.len());
        for n in [0usize, 1, 2, 63, 64, 65, 127, 128, 129, 64 * 7 + 17, 1000] {
            for how in 0..3 {
                let mut frames = all[..n].to_vec();
                let mut r = rng(n as u64 * 3 + how);
                let spoil = |f: &mut DataFrameV2, k: u32| match k {
                    0 => f.bdm = 255,
                    1 => f.head_du = (f.head_du & 0xf0) | 0x0f,
                    2 => f.x = 255,
                    3 => f.energy = 0u16.to_be_bytes(), // rejected by the window
                    _ => f.energy = 64000u16.to_be_bytes(), // clamped (and rejected)
                };
                if n > 0 {
                    spoil(&mut frames[0], r.below(5));
                    spoil(&mut frames[n - 1], r.below(5));
                }
                for i in [63usize, 64, 65, 128, n.saturating_sub(2)] {
                    if i < n && how > 0 {
                        spoil(&mut frames[i], r.below(5));
                    }
                }
                // Every BDM byte and DU nibble.
                for (i, f) in frames.iter_mut().enumerate().skip(3).step_by(5) {
                    if how == 2 {
                        f.bdm = (i * 7) as u8;
                        f.head_du = (f.head_du & 0xf0) | (i % 16) as u8;
                    }
                }
                let want = poracle::convert(&frames, &scanner.params, &position, &scanner.energy);
                for piece in [1, 64, 65, 100, 1 << 16] {
                    for (t, got) in on_threads(|| {
                        pet::par::convert_in_pieces(
                            &frames,
                            &scanner.params,
                            &position,
                            &scanner.energy,
                            piece,
                        )
                    }) {
                        assert!(
                            got.0 == want.0,
                            "singles, {n} frames, piece {piece}, {t} thr"
                        );
                        assert_eq!(got.1, want.1, "stats, {n} frames, piece {piece}, {t} thr");
                    }
                }
            }
        }
    }
}

fn singles(seed: u64, n: usize, step: u32, crystals: u32) -> Vec<Single> {
    let mut r = rng(seed);
    let mut t = 1000.0;
    (0..n)
        .map(|_| {
            t += r.below(step) as f64;
            Single {
                crystal: r.below(crystals),
                energy: 400.0 + r.below(300) as f32,
                time: t,
            }
        })
        .collect()
}

#[test]
fn pet_sort_and_merge() {
    let mut r = rng(4);
    let mut cases: Vec<Vec<Single>> = vec![vec![], singles(1, 1, 5, 4)];
    // Shuffled times with many ties, negative times, both zeros, a huge spread.
    for (n, spread) in [(300usize, 5u32), (5000, 100), (3000, 1 << 30)] {
        let mut v = singles(n as u64, n, 3, 8);
        for s in &mut v {
            s.time = r.below(spread) as f64 - spread as f64 / 2.0;
        }
        v[0].time = -0.0;
        v[n / 2].time = 0.0;
        v[n - 1].time = 1e300;
        cases.push(v);
    }
    for v in &cases {
        let want = poracle::sort(v).unwrap();
        for piece in PIECES {
            for (t, got) in on_threads(|| pet::par::sort_in_pieces(v, piece).unwrap()) {
                assert!(
                    got.len() == want.len()
                        && got
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.time.to_bits() == b.time.to_bits() && a == b),
                    "sort of {}, piece {piece}, {t} threads",
                    v.len()
                );
            }
        }
        for (t, b) in backends() {
            assert!(b.pet_sort(v).unwrap() == want, "{t} threads");
            // Into a reused vector: stale contents, too small and then large enough.
            let mut out = vec![Single::default(); 3];
            for _ in 0..2 {
                b.pet_sort_into(v, &mut out).unwrap();
                assert!(out == want, "into, {t} threads");
            }
        }
        // Merge of two sorted halves (ties between them: the first list first).
        let (x, y) = v.split_at(v.len() / 3);
        let (x, y) = (poracle::sort(x).unwrap(), poracle::sort(y).unwrap());
        let want = poracle::merge(&x, &y);
        for piece in PIECES {
            for (a, b) in [(&x, &y), (&y, &x)] {
                let want = poracle::merge(a, b);
                assert!(
                    pet::par::merge_in_pieces(a, b, piece) == want,
                    "merge, piece {piece}"
                );
            }
        }
        assert!(pet::par::merge(&x, &y) == want);
    }
    // A non-finite time: the oracle's error.
    let mut bad = singles(2, 10, 3, 4);
    bad[6].time = f64::NAN;
    assert_eq!(
        format!("{:?}", pet::par::sort(&bad).unwrap_err()),
        format!("{:?}", poracle::sort(&bad).unwrap_err())
    );
}

/// Presorted runs, as PET data come (module by module, each in time order): `runs` runs of
/// integer times, with ties inside and across runs.
fn runs_of(seed: u64, runs: usize, per_run: usize, spread: u32) -> Vec<Single> {
    let mut r = rng(seed);
    let mut v = Vec::new();
    for k in 0..runs {
        let mut t = r.below(spread) as f64;
        for _ in 0..per_run + r.below(3) as usize {
            t += r.below(3) as f64;
            v.push(Single {
                crystal: k as u32,
                energy: r.below(1000) as f32,
                time: t,
            });
        }
    }
    v
}

#[test]
fn pet_sort_of_presorted_runs() {
    // One run, a few, the GPU chain's 256 modules, the most the multiway merge takes, one
    // more (radix sort), and runs of non-integer times (radix sort).
    let mut cases = vec![
        runs_of(1, 1, 500, 10),
        runs_of(2, 3, 200, 50),
        runs_of(3, 256, 20, 300),
        runs_of(4, pet::par::MAX_RUNS, 3, 40),
        runs_of(5, pet::par::MAX_RUNS + 1, 3, 40),
        // Over 4 MiB: the output on huge pages.
        runs_of(8, 64, 5000, 1000),
    ];
    let mut halves = runs_of(6, 5, 100, 20);
    for s in &mut halves {
        s.time = s.time / 2.0 - 3.0;
    }
    cases.push(halves);
    // Times near 2^53, a zero among them: the widest integer keys.
    let mut wide = runs_of(7, 4, 50, 5);
    for s in &mut wide {
        s.time += ((1u64 << 53) - (1 << 20)) as f64;
    }
    wide[0].time = 0.0;
    cases.push(wide);
    for v in &cases {
        let want = poracle::sort(v).unwrap();
        // Small pieces of the large case would take minutes (a histogram per piece).
        for piece in PIECES.into_iter().filter(|&p| v.len() < 10_000 || p >= 64) {
            for (t, got) in on_threads(|| pet::par::sort_in_pieces(v, piece).unwrap()) {
                assert!(
                    got == want,
                    "runs of {}, piece {piece}, {t} threads",
                    v.len()
                );
            }
            let radix = pet::par::radix_sort_in_pieces(v, piece).unwrap();
            assert!(radix == want, "radix, {}, piece {piece}", v.len());
        }
        for (t, b) in backends() {
            assert!(b.pet_sort(v).unwrap() == want, "{t} threads");
            let mut out = vec![Single::default(); v.len() + 9];
            for _ in 0..2 {
                b.pet_sort_into(v, &mut out).unwrap();
                assert!(out == want, "into, {t} threads");
            }
        }
    }
}

fn same_pairs(a: &[Coincidence], b: &[Coincidence]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.a == y.a && x.b == y.b)
}

/// A pair no input of the tests makes (stale contents of a reused output).
const STALE: Coincidence = Coincidence {
    a: Single {
        crystal: 9999,
        energy: -1.0,
        time: -1.0,
    },
    b: Single {
        crystal: 9998,
        energy: -1.0,
        time: -1.0,
    },
};

#[test]
fn pet_coincidence_every_policy_and_piece() {
    let policies = [
        Policy::KillAll,
        Policy::TakeAllGoods,
        Policy::TakeWinnerOfGoods,
        Policy::TakeWinnerIfIsGood,
        Policy::TakeWinnerIfAllAreGoods,
        Policy::KillAllIfMultipleGoods,
    ];
    // Sparse (most windows one single), dense (multiples), very dense (long chains).
    let inputs = [
        singles(1, 2000, 40, 6),
        singles(2, 2000, 6, 6),
        singles(3, 600, 2, 3),
    ];
    for s in &inputs {
        for policy in policies {
            for delay in [None, Some(7.0)] {
                let c = CoincideConfig {
                    window: 10.0,
                    delay,
                    policy,
                };
                let last = s.last().unwrap().time;
                for watermark in [f64::INFINITY, last - 30.0, s[0].time] {
                    let want = poracle::coincide_until(s, &c, watermark).unwrap();
                    // (piece, openers a walk keeps): few kept, the join walks to a piece's
                    // end where the chains have not met by then.
                    let shapes =
                        PIECES
                            .iter()
                            .map(|&p| (p, 64))
                            .chain([(7, 1), (64, 1), (64, 2), (300, 3)]);
                    for (piece, keep) in shapes {
                        for (t, got) in on_threads(|| {
                            pet::par::coincide_in_pieces_keeping(s, &c, watermark, piece, keep)
                                .unwrap()
                        }) {
                            assert!(
                                same_pairs(&got.0, &want.0) && got.1 == want.1,
                                "{policy:?} delay {delay:?} watermark {watermark}, piece \
                                 {piece} keep {keep}, {t} threads: {} pairs resume {} vs {} \
                                 resume {}",
                                got.0.len(),
                                got.1,
                                want.0.len(),
                                want.1
                            );
                        }
                    }
                }
                {
                    // The backend's call on the whole input.
                    let want = poracle::coincide(s, &c).unwrap();
                    for (t, b) in backends() {
                        // Into a reused vector: stale contents, too small, then large enough.
                        let mut out = vec![want.first().copied().unwrap_or(STALE); 2];
                        for _ in 0..2 {
                            b.pet_coincide_into(s, &c, &mut out).unwrap();
                            assert!(same_pairs(&out, &want), "{policy:?} into, {t} threads");
                        }
                        assert!(same_pairs(&b.pet_coincide(s, &c).unwrap(), &want));
                    }
                }
            }
        }
    }
    // A window of more than MAX_MULTIPLE singles: the oracle's error, raised only when the
    // true chain reaches it (a speculative walk meets it too).
    let mut s = singles(5, 1000, 30, 6);
    let t0 = s[500].time;
    for (i, x) in s.iter_mut().enumerate().skip(500).take(300) {
        x.time = t0 + i as f64 * 1e-3;
    }
    let tail = s[799].time;
    for x in s.iter_mut().skip(800) {
        x.time += tail - t0;
    }
    let s = poracle::sort(&s).unwrap();
    for policy in [Policy::TakeAllGoods, Policy::KillAll] {
        let c = CoincideConfig {
            window: 10.0,
            delay: None,
            policy,
        };
        let want = format!("{:?}", poracle::coincide(&s, &c).map(|v| v.len()));
        for piece in PIECES {
            for keep in [1, 64] {
                let got = format!(
                    "{:?}",
                    pet::par::coincide_in_pieces_keeping(&s, &c, f64::INFINITY, piece, keep)
                        .map(|v| v.0.len())
                );
                assert_eq!(got, want, "{policy:?}, piece {piece} keep {keep}");
            }
        }
        for (t, b) in backends() {
            let mut out = Vec::new();
            let got = format!("{:?}", b.pet_coincide_into(&s, &c, &mut out).map(|_| 0));
            let want = format!("{:?}", poracle::coincide(&s, &c).map(|_| 0));
            assert_eq!(got, want, "{policy:?} into, {t} threads");
        }
    }
}

/// The CPU backend checks the singles as its coincidence walks read them: unsorted or
/// non-finite times at the start, at piece boundaries and at the end give the oracle's
/// error, and before a window's own error (a multiple over the capacity) found earlier in
/// the walk; on 1, 2 and 7 threads.
#[test]
fn pet_coincide_checks_as_it_walks() {
    let c = CoincideConfig {
        window: 10.0,
        delay: None,
        policy: Policy::TakeAllGoods,
    };
    let n = 3 * 65536 + 100;
    let good = singles(21, n, 30, 6);
    // A window of 300 singles (over the capacity) at 1000..1300, the rest shifted after it.
    let mut multiple = good.clone();
    let t0 = multiple[1000].time;
    for (i, x) in multiple.iter_mut().enumerate().skip(1000).take(300) {
        x.time = t0 + i as f64 * 1e-3;
    }
    let tail = multiple[1299].time;
    for x in multiple.iter_mut().skip(1300) {
        x.time += tail - t0;
    }
    let mut cases: Vec<(String, Vec<Single>)> = vec![("multiple".into(), multiple.clone())];
    for at in [0, 1, 65535, 65536, 65537, 2 * 65536, n - 2, n - 1] {
        for (what, t) in [("disorder", 0.0), ("nan", f64::NAN), ("inf", f64::INFINITY)] {
            for (base, v) in [("good", &good), ("multiple", &multiple)] {
                let mut v = v.clone();
                v[at].time = match (what, at) {
                    ("disorder", 0) => v[1].time + 1.0,
                    ("disorder", _) => v[at - 1].time - 1.0,
                    _ => t,
                };
                cases.push((format!("{base}, {what} at {at}"), v));
            }
        }
    }
    // The last window opened before the end of the first checked stretch (65,536 singles)
    // and reaching the end, out of order inside.
    let mut tail = singles(22, 65536 + 3, 30, 6);
    let t = tail[65533].time;
    for (i, dt) in [0.0, 1.0, 2.0, 3.0, 2.5].into_iter().enumerate() {
        tail[65534 + i].time = t + 5.0 + dt;
    }
    cases.push(("tail window".into(), tail));
    for (label, v) in &cases {
        let want = format!("{:?}", poracle::coincide(v, &c).map(|p| p.len()));
        assert!(want.contains("Err"), "{label}: {want}");
        for (t, b) in backends() {
            let mut out = Vec::new();
            let got = format!(
                "{:?}",
                b.pet_coincide_into(v, &c, &mut out).map(|_| out.len())
            );
            assert_eq!(got, want, "{label}, {t} threads");
        }
    }
    let want = poracle::coincide(&good, &c).unwrap();
    for (t, b) in backends() {
        assert!(
            same_pairs(&b.pet_coincide(&good, &c).unwrap(), &want),
            "{t} threads"
        );
    }
}

#[test]
fn pet_streamed_chain_equals_the_oracles() {
    let s = pgen::tiny_scanner(7);
    let acq = pgen::acquisition(
        &s,
        &pgen::AcquisitionConfig {
            singles: 20_000,
            slice: 300_000,
            singles_rate: 4e7,
            ..Default::default()
        },
    );
    let bytes = pgen::frame_bytes(&acq.frames);
    for delay in [None, Some(20_000.0)] {
        let c = CoincideConfig {
            window: 5000.0,
            delay,
            policy: Policy::TakeAllGoods,
        };
        let (sg, _) = poracle::convert(&acq.frames, &s.params, &s.position, &s.energy);
        let want = poracle::coincide(&poracle::sort(&sg).unwrap(), &c).unwrap();
        for (t, b) in backends() {
            for chunk in [7usize, 4096, 1 << 20] {
                let mut got = Vec::new();
                b.pet_run_frames(
                    bytes,
                    &s,
                    &c,
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
                .unwrap();
                assert!(same_pairs(&got, &want), "chunk {chunk}, {t} threads");
            }
        }
    }
}
