//! GPU tests of the seeding family against its CPU oracle: generated events of many sizes,
//! adversarial events (empty, one spacepoint, all in one bin, exactly on cut boundaries,
//! phi wrap-around at ±π, invalid spacepoints), configuration variants, and input errors.
//! Seeds, parameters and stage counts must be identical (floats bit for bit). Every buffer
//! the kernels fill is poisoned before the launch (`detkit::seeding::POISON`).

use detkit::rng::Draw as _;
use detkit::seeding::{
    gen, SeedTuning, SeedingConfig, SeedingSettings, SeedingWorkspace, SpacePoint, StageTimes,
};
use detkit::Error;
use detkit_tests::{ensure, exact};

use crate::{e, Ctx, Test, R};

/// The seeding tests, run by `main` after the Foundation tests.
pub(crate) const TESTS: &[Test] = &[
    ("seeding_generated_sizes", test_generated),
    ("seeding_adversarial", test_adversarial),
    ("seeding_config_variants", test_configs),
    ("seeding_device_stages", test_device_stages),
    ("seeding_errors", test_errors),
    ("seeding_events_in_flight", test_in_flight),
    ("seeding_capacity_retry", test_capacity_retry),
    ("seeding_variance_scales", test_variance_scales),
    ("seeding_triplet_lanes", test_triplet_lanes),
    ("seeding_binning_paths", test_binning_paths),
    ("seeding_tuning", test_tuning),
];

fn default_cfg() -> SeedingConfig {
    SeedingSettings::default()
        .to_config()
        .expect("default config")
}

/// Runs the GPU backend and the oracle on `sps` and compares everything.
fn compare(c: &Ctx, label: &str, cfg: &SeedingConfig, sps: &[SpacePoint]) -> R {
    let got = c.backend.seed(sps, cfg).map_err(e)?;
    let (seeds, stats) = detkit::seeding::cpu::seeds(cfg, sps);
    let params = detkit::seeding::cpu::params(cfg, sps, &seeds);
    ensure(got.stats == stats, || {
        format!(
            "{label} n={}: stats {:?} want {:?}",
            sps.len(),
            got.stats,
            stats
        )
    })?;
    exact(
        &format!("{label} n={} seeds", sps.len()),
        &got.seeds,
        &seeds,
    )?;
    exact(
        &format!("{label} n={} params", sps.len()),
        &got.params,
        &params,
    )
}

fn test_generated(c: &Ctx) -> R {
    let cfg = default_cfg();
    let big = gen::generate(c.seed, 200.0, true);
    for &n in SIZES {
        let n = n.min(big.spacepoints.len());
        compare(c, "mu=200 prefix", &cfg, &big.spacepoints[..n])?;
    }
    for mu in [1.0, 10.0, 50.0] {
        let ev = gen::generate(c.seed ^ mu as u64, mu, true);
        compare(c, &format!("mu={mu}"), &cfg, &ev.spacepoints)?;
    }
    if !c.quick {
        compare(c, "mu=200", &cfg, &big.spacepoints)?;
        let ev = gen::generate(c.seed.wrapping_add(1), 300.0, true);
        compare(c, "mu=300", &cfg, &ev.spacepoints)?;
    }
    Ok(())
}

/// Prefix sizes: 0, 1, warp ± 1, block (`SEEDING_THREADS` = 128) ± 1, larger.
const SIZES: &[usize] = &[0, 1, 2, 3, 31, 32, 33, 127, 128, 129, 1000, 5000];

fn sp(x: f32, y: f32, z: f32) -> SpacePoint {
    SpacePoint {
        x,
        y,
        z,
        var_z: 0.0,
        var_r: 0.0,
    }
}

/// Points of straight and curved tracks from the beam line, with random smearing, in a
/// phi window `[phi0, phi0 + width]`.
fn tracks_in_window(c: &Ctx, salt: u64, n_tracks: usize, phi0: f64, width: f64) -> Vec<SpacePoint> {
    let mut rng = detkit::rng::rng(c.seed ^ salt);
    let mut out = Vec::new();
    for _ in 0..n_tracks {
        let phi = phi0 + width * rng.uniform();
        let cot = 2.0 * rng.uniform() - 1.0;
        let z0 = 100.0 * (rng.uniform() - 0.5);
        let curv = 0.002 * (rng.uniform() - 0.5); // 1/mm, bends phi with r
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

fn test_adversarial(c: &Ctx) -> R {
    let cfg = default_cfg();
    compare(c, "empty", &cfg, &[])?;
    compare(c, "one", &cfg, &[sp(70.0, 0.0, 0.0)])?;
    // The worked example of the module docs: one seed.
    let ex = [
        sp(34.0, 0.0, 10.0),
        sp(70.0, 0.0, 20.588),
        sp(116.0, 0.0, 34.118),
    ];
    compare(c, "worked example", &cfg, &ex)?;
    let got = c.backend.seed(&ex, &cfg).map_err(e)?;
    ensure(got.seeds.len() == 1, || {
        format!("worked example: {:?}", got.seeds)
    })?;
    // All in one phi bin (bin width 2π/78 ≈ 0.08).
    let one_bin = tracks_in_window(c, 11, 600, 0.01, 0.05);
    compare(c, "one bin", &cfg, &one_bin)?;
    // Phi wrap-around: tracks straddling ±π (bins 77 and 0).
    let wrap = tracks_in_window(c, 12, 400, std::f64::consts::PI - 0.1, 0.2);
    compare(c, "phi wrap", &cfg, &wrap)?;
    // Exactly on the doublet cut boundaries: middle at (70, 0, 0); bottoms at dR = 20
    // (rejected), just above, and z0 exactly at the collision-region edge; tops at dR = 80
    // (rejected) and just below.
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
    edge.push(sp(-70.0, 0.0, 0.0));
    edge.push(sp(0.0, 70.0, 0.0));
    compare(c, "cut boundaries", &cfg, &edge)?;
    // Invalid spacepoints are dropped and counted: |z| > 2000, r >= 200, phi exactly ±π.
    let mut inval = one_bin.clone();
    inval.extend([
        sp(50.0, 0.0, 2000.5),
        sp(199.9, 0.0, 0.0),
        sp(200.0, 0.0, 0.0),
        sp(-70.0, 0.0, 0.0),
        sp(-70.0, -0.0, 10.0),
        sp(0.0, 0.0, 0.0),
    ]);
    compare(c, "invalid", &cfg, &inval)?;
    let got = c.backend.seed(&inval, &cfg).map_err(e)?;
    ensure(got.stats.invalid == 2, || {
        format!("invalid: {} dropped, want 2", got.stats.invalid)
    })?;
    // Random points in the whole volume (many fakes, many ties).
    let mut rng = detkit::rng::rng(c.seed ^ 13);
    let noise: Vec<SpacePoint> = (0..3000)
        .map(|_| {
            let r = 30.0 + 170.0 * rng.uniform();
            let p = 2.0 * std::f64::consts::PI * rng.uniform();
            sp(
                (r * p.cos()) as f32,
                (r * p.sin()) as f32,
                (600.0 * (rng.uniform() - 0.5)) as f32,
            )
        })
        .collect();
    compare(c, "random", &cfg, &noise)?;
    // Duplicated spacepoints (equal weights, tie-break on indices).
    let mut dup = tracks_in_window(c, 14, 50, -1.0, 0.5);
    dup.extend(dup.clone());
    compare(c, "duplicates", &cfg, &dup)
}

fn test_configs(c: &Ctx) -> R {
    let ev = gen::generate(c.seed ^ 21, 30.0, true);
    let variants: Vec<(&str, SeedingSettings)> = vec![
        (
            "max_seeds=1",
            SeedingSettings {
                max_seeds_per_spm: 1,
                ..Default::default()
            },
        ),
        (
            "max_seeds=16",
            SeedingSettings {
                max_seeds_per_spm: 16,
                ..Default::default()
            },
        ),
        (
            "compat_limit=0",
            SeedingSettings {
                compat_seed_limit: 0,
                ..Default::default()
            },
        ),
        (
            "compat_limit=8",
            SeedingSettings {
                compat_seed_limit: 8,
                delta_inv_helix_diameter: 0.001,
                ..Default::default()
            },
        ),
        (
            "many z bins",
            SeedingSettings {
                cot_theta_max: 2.0,
                ..Default::default()
            },
        ),
        (
            "no field",
            SeedingSettings {
                b_field_in_z: 0.0,
                ..Default::default()
            },
        ),
        (
            "loose",
            SeedingSettings {
                delta_r_min: 0.0,
                delta_r_max: 200.0,
                impact_max: 50.0,
                phi_bin_deflection_coverage: 3,
                ..Default::default()
            },
        ),
    ];
    for (label, s) in variants {
        let cfg = s.to_config().map_err(e)?;
        compare(c, label, &cfg, &ev.spacepoints)?;
    }
    Ok(())
}

fn test_device_stages(c: &Ctx) -> R {
    let g = c.gpu();
    let cfg = default_cfg();
    let ev = gen::generate(c.seed ^ 31, 50.0, true);
    let d = g.upload(bytemuck_words(&ev.spacepoints)).map_err(e)?;
    let mut times = StageTimes::default();
    let out = g
        .seed_device(&cfg, &d, ev.spacepoints.len(), Some(&mut times))
        .map_err(e)?;
    let (seeds, _) = g.download_seeds(&out).map_err(e)?;
    let (want, _) = detkit::seeding::cpu::seeds(&cfg, &ev.spacepoints);
    exact("device-resident seeds", &seeds, &want)?;
    // Every stage of the chain, in order (the binning records two intervals).
    let mut names: Vec<&str> = times.stages.iter().map(|(n, _)| *n).collect();
    names.dedup();
    ensure(
        names
            == [
                "bin_spacepoints",
                "find_doublets",
                "find_triplets",
                "select_seeds",
                "gather_seeds",
            ],
        || format!("stage times: {times:?}"),
    )?;
    ensure(times.stages.iter().all(|(_, ms)| *ms >= 0.0), || {
        format!("stage times: {times:?}")
    })
}

fn bytemuck_words(sps: &[SpacePoint]) -> &[u32] {
    // SpacePoint is five f32 fields, `#[repr(C)]`, no padding (size assertion in detkit-gpu).
    detkit::seeding::as_words(sps)
}

fn test_errors(c: &Ctx) -> R {
    let cfg = default_cfg();
    let mut bad = vec![sp(70.0, 0.0, 0.0); 5];
    bad[3].z = f32::NAN;
    match c.backend.seed(&bad, &cfg) {
        Err(Error::InvalidItem {
            what: "spacepoint",
            index: 3,
            column: "z",
            ..
        }) => {}
        other => return Err(format!("NaN spacepoint: {other:?}")),
    }
    bad[3].z = 0.0;
    bad[1].var_z = -1.0;
    ensure(
        matches!(
            c.backend.seed(&bad, &cfg),
            Err(Error::InvalidItem {
                index: 1,
                column: "var_z",
                ..
            })
        ),
        || "negative variance accepted".into(),
    )?;
    let mut cfg2 = cfg;
    cfg2.max_seeds_per_spm = 17;
    ensure(
        matches!(
            c.backend.seed(&bad[..1], &cfg2),
            Err(Error::InvalidInput { .. })
        ),
        || "max_seeds_per_spm 17 accepted".into(),
    )?;
    let mut cfg3 = cfg;
    cfg3.n_phi = 0;
    ensure(
        matches!(
            c.backend.seed(&bad[..1], &cfg3),
            Err(Error::InvalidInput { .. })
        ),
        || "empty phi axis accepted".into(),
    )
}

/// The oracle's seeds, parameters and counts of one event.
fn oracle(
    cfg: &SeedingConfig,
    sps: &[SpacePoint],
) -> (
    Vec<detkit::seeding::Seed>,
    Vec<detkit::seeding::BoundParams>,
    detkit::seeding::SeedingStats,
) {
    let (seeds, stats) = detkit::seeding::cpu::seeds(cfg, sps);
    let params = detkit::seeding::cpu::params(cfg, sps, &seeds);
    (seeds, params, stats)
}

/// Runs `events` as one device batch in `ws` and compares every event with the oracle.
fn compare_batch(
    c: &Ctx,
    label: &str,
    ws: &mut SeedingWorkspace,
    cfg: &SeedingConfig,
    events: &[Vec<SpacePoint>],
) -> R {
    let g = c.gpu();
    let mut all = Vec::new();
    let mut offsets = vec![0usize];
    for ev in events {
        all.extend_from_slice(ev);
        offsets.push(all.len());
    }
    let d = if all.is_empty() {
        g.zeros::<u32>(1).map_err(e)?
    } else {
        g.upload(bytemuck_words(&all)).map_err(e)?
    };
    let stats = g
        .seed_batch_device(ws, cfg, &d, &offsets, None)
        .map_err(e)?;
    let got = g.download_batch(ws).map_err(e)?;
    ensure(
        stats.len() == events.len() && got.len() == events.len(),
        || format!("{label}: {} results for {} events", got.len(), events.len()),
    )?;
    for (i, ev) in events.iter().enumerate() {
        let (seeds, params, st) = oracle(cfg, ev);
        ensure(stats[i] == st, || {
            format!("{label} event {i}: stats {:?} want {st:?}", stats[i])
        })?;
        exact(&format!("{label} event {i} seeds"), &got[i].0, &seeds)?;
        exact(&format!("{label} event {i} params"), &got[i].1, &params)?;
    }
    Ok(())
}

/// Events in flight: one batch (one chain of launches) gives every event's seeds exactly as
/// one call per event and as the oracle, with empty events inside and at the ends of the
/// batch, through the device API (poisoned workspace) and `Backend::seed_events`.
fn test_in_flight(c: &Ctx) -> R {
    let cfg = default_cfg();
    let ev = |salt: u64, mu: f64| gen::generate(c.seed ^ salt, mu, true).spacepoints;
    let mut invalid = tracks_in_window(c, 41, 50, 0.3, 0.1);
    invalid.push(sp(50.0, 0.0, 2500.0));
    let events: Vec<Vec<SpacePoint>> = vec![
        Vec::new(),
        ev(42, 30.0),
        Vec::new(),
        vec![sp(70.0, 0.0, 0.0)],
        tracks_in_window(c, 43, 300, 0.01, 0.05),
        ev(44, if c.quick { 10.0 } else { 100.0 }),
        invalid,
        Vec::new(),
    ];
    let mut ws = SeedingWorkspace::new();
    ws.set_poison(true);
    compare_batch(c, "batch", &mut ws, &cfg, &events)?;
    // The same workspace again, a different batch (buffers reused), and a batch of empties.
    compare_batch(
        c,
        "batch reversed",
        &mut ws,
        &cfg,
        &events.iter().rev().cloned().collect::<Vec<_>>(),
    )?;
    compare_batch(c, "empty batch", &mut ws, &cfg, &[Vec::new(), Vec::new()])?;
    // One event per call in the same workspace.
    for (i, ev) in events.iter().enumerate() {
        compare_batch(
            c,
            &format!("single {i}"),
            &mut ws,
            &cfg,
            std::slice::from_ref(ev),
        )?;
    }
    // The host API: in flight == one at a time == oracle.
    let refs: Vec<&[SpacePoint]> = events.iter().map(|v| v.as_slice()).collect();
    let batch = c.backend.seed_events(&refs, &cfg).map_err(e)?;
    ensure(batch.len() == events.len(), || {
        "seed_events: wrong length".into()
    })?;
    for (i, ev) in events.iter().enumerate() {
        let one = c.backend.seed(ev, &cfg).map_err(e)?;
        ensure(one == batch[i], || {
            format!("seed_events event {i} differs from seed")
        })?;
        let (seeds, params, st) = oracle(&cfg, ev);
        ensure(batch[i].stats == st, || {
            format!("seed_events event {i}: stats")
        })?;
        exact(
            &format!("seed_events event {i} seeds"),
            &batch[i].seeds,
            &seeds,
        )?;
        exact(
            &format!("seed_events event {i} params"),
            &batch[i].params,
            &params,
        )?;
    }
    Ok(())
}

/// Tiny doublet and triplet capacities: the chain overflows, detects it on the device,
/// repeats with larger buffers and still gives the oracle's results (nothing lost); the
/// workspace keeps the larger capacities (no retry on the next call).
fn test_capacity_retry(c: &Ctx) -> R {
    let cfg = default_cfg();
    let events = vec![
        gen::generate(c.seed ^ 51, 50.0, true).spacepoints,
        Vec::new(),
        gen::generate(c.seed ^ 52, 20.0, true).spacepoints,
    ];
    let mut ws = tuned_factors([0.01, 0.01, 0.01])?;
    ws.set_poison(true);
    compare_batch(c, "tiny capacities", &mut ws, &cfg, &events)?;
    let r = ws.retries();
    ensure(r >= 2, || {
        format!("expected >= 2 retries (doublets, triplets), got {r}")
    })?;
    compare_batch(c, "grown capacities", &mut ws, &cfg, &events)?;
    ensure(ws.retries() == r, || {
        format!(
            "retried again with grown capacities: {} > {r}",
            ws.retries()
        )
    })?;
    // Only the triplets too small.
    let mut ws = tuned_factors([64.0, 64.0, 0.01])?;
    compare_batch(c, "tiny triplet capacity", &mut ws, &cfg, &events)?;
    ensure(ws.retries() == 1, || {
        format!("triplet overflow: {} retries", ws.retries())
    })
}

/// A workspace whose capacities start at `factors` entries per spacepoint.
fn tuned_factors(factors: [f64; 3]) -> Result<SeedingWorkspace, String> {
    SeedingWorkspace::tuned(&SeedTuning {
        capacity_factors: factors,
        ..Default::default()
    })
    .map_err(e)
}

/// Other launch shapes (`SeedTuning`) give the oracle's results: the smallest and the
/// largest block of every kernel (doublets up to their launch bound), a triplet grid of one
/// block per multiprocessor (every thread strides over many doublets), and a counting kernel of
/// 32 threads whose own scan covers 512 grid counts, so that a batch takes the device scan
/// instead; through the device-resident chain and, with chunks of one event, groups of one
/// spacepoint, pipelines of two parts from 1 spacepoint on and no speculative copy, through
/// the backend's door. Out-of-range values are typed errors.
fn test_tuning(c: &Ctx) -> R {
    let cfg = default_cfg();
    let mu = if c.quick { 10.0 } else { 50.0 };
    let events: Vec<Vec<SpacePoint>> = vec![
        gen::generate(c.seed ^ 0x7a1, mu, true).spacepoints,
        Vec::new(),
        vec![sp(70.0, 0.0, 0.0)],
        gen::generate(c.seed ^ 0x7a2, mu / 2.0, true).spacepoints,
    ];
    let small = SeedTuning {
        threads: 32,
        doublet_threads: 32,
        select_threads: 32,
        bin_count_threads: 32,
        triplet_blocks_per_sm: 1,
        ..Default::default()
    };
    let large = SeedTuning {
        threads: 1024,
        doublet_threads: detkit_gpu::seeding::SEEDING_THREADS,
        select_threads: 1024,
        bin_count_threads: 1024,
        ..Default::default()
    };
    for (label, t) in [("smallest blocks", small), ("largest blocks", large)] {
        let mut ws = SeedingWorkspace::tuned(&t).map_err(e)?;
        ws.set_poison(true);
        compare_batch(c, label, &mut ws, &cfg, &events)?;
    }
    let door = SeedTuning {
        chunk_spacepoints: 1,
        prefetch_margin: 0.0,
        split_spacepoints: 1,
        pipeline_spacepoints: 1,
        pipeline_parts: &[1, 1],
        ..small
    };
    let refs: Vec<&[SpacePoint]> = events.iter().map(|v| v.as_slice()).collect();
    // The sanitizer mode: pinned copies only (each backend is a context of its own, whose
    // module the sanitizer instruments again).
    let copies: &[detkit::HostCopies] = if c.sanitize {
        &[detkit::HostCopies::Pinned]
    } else {
        &[detkit::HostCopies::Pinned, detkit::HostCopies::Pageable]
    };
    for &copies in copies {
        let b = detkit::Backend::cuda(0)
            .map_err(e)?
            .with_host_copies(copies)
            .with_seed_tuning(&door)
            .map_err(e)?;
        let got = b.seed_events(&refs, &cfg).map_err(e)?;
        ensure(got.len() == events.len(), || {
            "seed_events: wrong length".into()
        })?;
        for (i, ev) in events.iter().enumerate() {
            let (seeds, params, st) = oracle(&cfg, ev);
            let what = format!("tuned door {copies:?} event {i}");
            ensure(got[i].stats == st, || format!("{what}: stats"))?;
            exact(&format!("{what} seeds"), &got[i].seeds, &seeds)?;
            exact(&format!("{what} params"), &got[i].params, &params)?;
        }
    }
    for bad in [
        SeedTuning {
            doublet_threads: 2 * detkit_gpu::seeding::SEEDING_THREADS,
            ..Default::default()
        },
        SeedTuning {
            select_threads: 48,
            ..Default::default()
        },
    ] {
        ensure(
            matches!(
                SeedingWorkspace::tuned(&bad),
                Err(Error::InvalidInput { .. })
            ),
            || format!("{bad:?} accepted"),
        )?;
    }
    Ok(())
}

/// The triplet kernel visits only the tops in its cot θ window (and, for a middle with
/// `var_r != 0`, the tops of the other sign): variances of every scale, from none to so large
/// that the window is infinite (every top visited), on barrel and disk hits alike, and
/// `var_r` on barrel middles (other-sign tops, negative `error2`), must give the oracle's seeds.
fn test_variance_scales(c: &Ctx) -> R {
    let cfg = default_cfg();
    let mu = if c.quick { 20.0 } else { 60.0 };
    let base = gen::generate(c.seed ^ 0x5eed, mu, true).spacepoints;
    let mut rng = detkit::rng::rng(c.seed ^ 0x7a1);
    for (label, lo, hi) in [
        ("tiny variances", -12.0, -6.0),
        ("pixel variances", -5.0, -2.0),
        ("large variances", -2.0, 2.0),
        ("huge variances", 30.0, 38.0),
        ("mixed variances", -12.0, 3.0),
    ] {
        let sps: Vec<SpacePoint> = base
            .iter()
            .map(|p| {
                let mut q = *p;
                let draw = |rng: &mut detkit::rng::Rng| {
                    if rng.below(4) == 0 {
                        0.0
                    } else {
                        10f64.powf(lo + (hi - lo) * rng.uniform()) as f32
                    }
                };
                q.var_r = draw(&mut rng);
                q.var_z = draw(&mut rng);
                q
            })
            .collect();
        compare(c, label, &cfg, &sps)?;
    }
    Ok(())
}

/// The triplet kernel's lanes at chosen sizes: one middle with exactly `k` bottoms and `k`
/// tops (`gen::fan`), so `k` middle–bottom doublets (no doublet, a partial warp, 31, 32,
/// 33, several warps); with no variance few pairs pass the first (cot θ) cut, with a large
/// one every pair does (every lane runs the whole test at every step); also in one batch
/// with an empty event and a one-bin event, so that a warp's lanes span events.
fn test_triplet_lanes(c: &Ctx) -> R {
    let cfg = default_cfg();
    for k in [0usize, 1, 31, 32, 33, 200] {
        for var in [0.0f32, 100.0] {
            let fan = gen::fan(k, var);
            compare(c, &format!("fan k={k} var={var}"), &cfg, &fan)?;
            let got = c.backend.seed(&fan, &cfg).map_err(e)?;
            let want = if k == 0 { 0 } else { k as u64 };
            ensure(got.stats.mid_bot == want, || {
                format!("fan k={k} var={var}: {:?}", got.stats)
            })?;
            // The selection takes a middle's triplets of 32 bottoms as one flat list, 32 at a
            // time: with var 0 each bottom has one triplet (a round of exactly 31, 32 or 33
            // positions), with var 100 about 27 to 180 (runs crossing the 32-triplet chunks,
            // runs longer than a chunk, several rounds of bottoms for k = 200; CPU counts:
            // 851, 902, 961, 35,794 triplets for k = 31, 32, 33, 200).
            if k >= 31 {
                let t = got.stats.triplets;
                let ok = if var == 0.0 {
                    t == want
                } else {
                    t >= 25 * want
                };
                ensure(ok, || format!("fan k={k} var={var}: {t} triplets"))?;
            }
        }
    }
    // Fans and a one-bin event in one batch (lanes of one warp then span events).
    let g = c.gpu();
    let mut all = Vec::new();
    let mut offsets = vec![0usize];
    let events = [
        Vec::new(),
        gen::fan(33, 100.0),
        tracks_in_window(c, 41, 300, 0.01, 0.05),
        gen::fan(31, 0.0),
    ];
    for ev in &events {
        all.extend_from_slice(ev);
        offsets.push(all.len());
    }
    let d = g.upload(bytemuck_words(&all)).map_err(e)?;
    let mut ws = SeedingWorkspace::new();
    g.seed_batch_device(&mut ws, &cfg, &d, &offsets, None)
        .map_err(e)?;
    let out = g.download_batch(&ws).map_err(e)?;
    for (j, ev) in events.iter().enumerate() {
        let (seeds, _) = detkit::seeding::cpu::seeds(&cfg, ev);
        exact(&format!("batch event {j} seeds"), &out[j].0, &seeds)?;
    }
    Ok(())
}

/// The binning's paths. The counting binning restores the input order inside a grid key by
/// counting, up to `BIN_RANK_MAX` spacepoints per key: a key with more (here 620 spacepoints
/// at r = 34.2 mm in one phi bin, 20 of them the bottoms of tracks) makes the chain repeat
/// once with the radix-sort binning, with the oracle's seeds; a normal event in the same
/// workspace then needs no repeat. Alone and inside a batch. A large event (70,000
/// spacepoints, all but the 400 of tracks invalid: one key holds them, counted by the
/// warp-aggregated atomics, not ranked, no repeat).
fn test_binning_paths(c: &Ctx) -> R {
    let cfg = default_cfg();
    let mut rng = detkit::rng::rng(c.seed ^ 0xb1);
    let mut big: Vec<SpacePoint> = (0..600)
        .map(|_| {
            let p = 0.020 + 0.001 * rng.uniform();
            sp(
                (34.2 * p.cos()) as f32,
                (34.2 * p.sin()) as f32,
                (100.0 * (rng.uniform() - 0.5)) as f32,
            )
        })
        .collect();
    for (i, mut t) in tracks_in_window(c, 62, 20, 0.0202, 0.0005)
        .into_iter()
        .enumerate()
    {
        if i % 4 == 0 {
            // The bottom layer: into the crowded key's radius slice.
            let r = (t.x * t.x + t.y * t.y).sqrt();
            t.x *= 34.2 / r;
            t.y *= 34.2 / r;
        }
        big.push(t);
    }
    // Interleave (620 and 7919 are coprime: a permutation), so that the key's spacepoints
    // are spread over the input.
    let n = big.len();
    let big: Vec<SpacePoint> = (0..n).map(|i| big[(i * 7919) % n]).collect();
    let normal = gen::generate(c.seed ^ 63, 20.0, true).spacepoints;
    let mut ws = SeedingWorkspace::new();
    ws.set_poison(true);
    compare_batch(c, "crowded key", &mut ws, &cfg, std::slice::from_ref(&big))?;
    ensure(ws.radix_binnings() == 1, || {
        format!(
            "crowded key: {} radix binnings, want 1",
            ws.radix_binnings()
        )
    })?;
    compare_batch(
        c,
        "normal after",
        &mut ws,
        &cfg,
        std::slice::from_ref(&normal),
    )?;
    ensure(ws.radix_binnings() == 1, || {
        format!(
            "normal event: {} radix binnings, want 1",
            ws.radix_binnings()
        )
    })?;
    compare_batch(
        c,
        "crowded key in a batch",
        &mut ws,
        &cfg,
        &[normal.clone(), big.clone(), Vec::new(), normal],
    )?;
    ensure(ws.radix_binnings() == 2, || {
        format!("batch: {} radix binnings, want 2", ws.radix_binnings())
    })?;
    compare(c, "crowded key (backend)", &cfg, &big)?;
    let tracks = tracks_in_window(c, 64, 100, 0.5, 0.3);
    let mut large: Vec<SpacePoint> = (0..70_000)
        .map(|i| sp(50.0 + (i % 100) as f32, 0.0, 2500.0))
        .collect();
    for (i, t) in tracks.into_iter().enumerate() {
        large[i * 170 + 3] = t;
    }
    compare_batch(
        c,
        "large event",
        &mut ws,
        &cfg,
        std::slice::from_ref(&large),
    )?;
    ensure(ws.radix_binnings() == 2, || {
        format!(
            "large event: {} radix binnings, want 2",
            ws.radix_binnings()
        )
    })
}
