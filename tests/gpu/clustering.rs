//! GPU tests of CMS pixel clustering against the CPU oracle: generated events (single and
//! batched, with and without the charge cut), adversarial modules at the default and at
//! tiny capacities (forcing the fallback kernel), awkward module sizes, Phase-2, and the
//! device-side guard against unvalidated input. Per-digi outputs are poisoned first.

use detkit::clustering::gen::{self, Adversarial, EventConfig};
use detkit::clustering::{
    self as cl, ChargeCut, ClusterTuning, Clusterer, Clusters, DeviceDigis, Digis, Geometry,
};
use detkit::rng::Draw as _;
use detkit::Error;
use detkit_gpu::clustering::INVALID_MODULE;
use detkit_tests::{ensure, exact_clusters};

use crate::{e, Ctx, Test, R};
use detkit::GpuContext;

/// The clustering tests, run by `main` after the Foundation tests.
pub(crate) const TESTS: &[Test] = &[
    ("clustering_events", test_events),
    ("clustering_adversarial", test_adversarial),
    ("clustering_sizes", test_sizes),
    ("clustering_phase2", test_phase2),
    ("clustering_cut_paths", test_cut_paths),
    ("clustering_bad_input", test_bad_input),
    ("clustering_streams", test_streams),
    ("clustering_passes", test_passes),
    ("clustering_larger_threads", test_larger_threads),
];

/// Runs the GPU chain on `d` and compares every output with the oracle; returns the
/// number of modules that took the fallback path.
fn check(
    c: &Ctx,
    what: &str,
    d: &Digis,
    offsets: &[u32],
    g: &Geometry,
    cut: Option<ChargeCut>,
    (small, capacity): (u32, u32),
) -> Result<u32, String> {
    cl::validate(d, offsets, g).map_err(|err| format!("{what}: generator: {err}"))?;
    let gpu = c.gpu_shared();
    let dd = DeviceDigis::upload(gpu, d, offsets).map_err(e)?;
    let mut run =
        Clusterer::with_capacity(gpu, g, d.len(), offsets.len() - 1, small, capacity).map_err(e)?;
    sanitizer_grids(c, &mut run);
    run.poison_outputs().map_err(e)?;
    run.run(&dd, cut).map_err(e)?;
    let got = run.results(&dd).map_err(e)?;
    let want = detkit::clustering::cpu::cluster(d, offsets, g, cut);
    exact_clusters(what, &got, &want)?;
    let (mut medium, mut fallback) = (0, 0);
    for (m, &first) in got.module_first.iter().enumerate() {
        if first == u32::MAX {
            continue;
        }
        let e = m / g.modules as usize;
        let end = (first as usize + 1..offsets[e + 1] as usize)
            .find(|&i| d.module[i] != INVALID_MODULE && d.module[i] != d.module[first as usize])
            .unwrap_or(offsets[e + 1] as usize);
        let size = (end - first as usize) as u32;
        medium += (size > small) as u32;
        fallback += (size > capacity) as u32;
    }
    ensure(
        (got.medium_modules, got.fallback_modules) == (medium, fallback),
        || {
            format!(
                "{what}: modules by path (medium, fallback) = {:?}, expected {:?}",
                (got.medium_modules, got.fallback_modules),
                (medium, fallback)
            )
        },
    )?;
    Ok(got.fallback_modules)
}

/// The chain run both ways (`run`, then `run_graph`), each from poisoned outputs; `check`
/// gets each way's results and whether it was the graph.
fn run_both_ways(
    run: &mut Clusterer,
    dd: &DeviceDigis,
    cut: Option<detkit::clustering::ChargeCut>,
    mut check: impl FnMut(Clusters, bool) -> R,
) -> R {
    for graph in [false, true] {
        run.poison_outputs().map_err(e)?;
        if graph {
            run.run_graph(dd, cut).map_err(e)?;
        } else {
            run.run(dd, cut).map_err(e)?;
        }
        check(run.results(dd).map_err(e)?, graph)?;
    }
    Ok(())
}

/// Under `--quick` (the sanitizer runs) the persistent grids are capped: racecheck's shadow
/// state grows with the shared memory of every resident block, and at full grids
/// `clustering_sizes` (small capacities, so many resident blocks) needed about 120 GB of
/// host memory. Results do not depend on the grid.
const SANITIZER_GRID: u32 = 48;

fn sanitizer_grids(c: &Ctx, run: &mut Clusterer) {
    if c.quick {
        run.tune(&ClusterTuning {
            grid_limit: Some(SANITIZER_GRID),
            ..Default::default()
        })
        .expect("a grid limit is always accepted");
    }
}

const DEFAULT: (u32, u32) = (detkit_gpu::clustering::SMALL_CAPACITY, cl::DEFAULT_CAPACITY);

fn single(d: &Digis) -> Vec<u32> {
    vec![0, d.len() as u32]
}

/// A Run-3 event; in the sanitizer mode a lighter one (a tenth of the clusters, one noise
/// digi per module: about 6,000 digis instead of 60,000, the same modules and paths).
fn run3(c: &Ctx, seed: u64) -> Digis {
    if c.sanitize {
        let cfg = EventConfig {
            clusters: 1800.0,
            noise_per_module: 1.0,
            ..EventConfig::run3()
        };
        gen::event(&Geometry::phase1(), &cfg, seed)
    } else {
        gen::run3_event(seed)
    }
}

fn test_events(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let nev = if c.quick { 2 } else { 6 };
    let mut batch = Digis::default();
    let mut offsets = vec![0u32];
    for k in 0..nev {
        let d = run3(c, c.seed ^ (k as u64) << 20);
        for cut in [None, Some(g.default_cut)] {
            let fb = check(
                c,
                &format!("run3 event {k} cut {cut:?}"),
                &d,
                &single(&d),
                &g,
                cut,
                DEFAULT,
            )?;
            ensure(fb == 0, || {
                format!("run3 event {k}: {fb} modules took the fallback")
            })?;
        }
        batch.extend(&d);
        offsets.push(batch.len() as u32);
    }
    // Several events per launch, an empty event among them.
    offsets.insert(2, offsets[1]);
    check(
        c,
        "run3 batch",
        &batch,
        &offsets,
        &g,
        Some(g.default_cut),
        DEFAULT,
    )?;
    // Events of only invalid digis and empty events at the start, middle and end of a batch.
    let mut odd = Digis::default();
    let mut odd_offsets = vec![0u32];
    let mut rng = detkit::rng::rng(c.seed ^ 0x1b7);
    let first = run3(c, c.seed ^ 0x1b8);
    for part in 0..5 {
        match part {
            1 => odd.extend(&first),
            0 | 3 => {
                for _ in 0..(1 + rng.below(300)) {
                    let (x, y) = (rng.below(160) as u16, rng.below(416) as u16);
                    odd.push(INVALID_MODULE, x, y, 1000 + rng.below(9000) as u16);
                }
            }
            _ => {} // empty events
        }
        odd_offsets.push(odd.len() as u32);
    }
    for cut in [None, Some(g.default_cut)] {
        check(
            c,
            &format!("batch with invalid-only and empty events, cut {cut:?}"),
            &odd,
            &odd_offsets,
            &g,
            cut,
            DEFAULT,
        )?;
    }
    // Dense events: large modules (check() verifies which path each module took).
    // The sanitizer mode: an eighth of the clusters (the 1.66 M digis of the dense event
    // are most of this group's racecheck time), still large modules.
    let dense = if c.sanitize {
        let cfg = EventConfig {
            clusters: 22_000.0,
            ..EventConfig::dense()
        };
        gen::event(&g, &cfg, c.seed ^ 0xd3)
    } else {
        gen::dense_event(c.seed ^ 0xd3)
    };
    let dense_fb = check(
        c,
        "dense event",
        &dense,
        &single(&dense),
        &g,
        Some(g.default_cut),
        DEFAULT,
    )?;
    // Everything through the fallback; everything through the shared-memory kernel.
    let d = run3(c, c.seed ^ 0xfb);
    let cut = Some(g.default_cut);
    let fb = check(
        c,
        "run3 event, capacities 8/8",
        &d,
        &single(&d),
        &g,
        cut,
        (8, 8),
    )?;
    // The sanitizer mode's lighter event: the fallback taken at all.
    let least = if c.sanitize { 0 } else { 100 };
    ensure(fb > least, || {
        format!("capacities 8/8: only {fb} fallback modules")
    })?;
    check(
        c,
        "run3 event, capacities 8/6000",
        &d,
        &single(&d),
        &g,
        cut,
        (8, 6000),
    )?;
    println!(
        "  clustering: {nev} run3 events ({} digis), dense event {} digis ({dense_fb} fallback modules), {fb} fallback modules at capacities 8/8",
        batch.len(),
        dense.len()
    );
    Ok(())
}

fn test_adversarial(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let mut kinds = vec![
        Adversarial::One,
        Adversarial::Lattice,
        Adversarial::Checkerboard,
        Adversarial::AllDuplicated,
        Adversarial::SmallSnake(12),
        Adversarial::SmallSnake(3),
        Adversarial::Snake,
        Adversarial::Full,
    ];
    if c.quick {
        // The sanitizer runs: the full-module cases are too slow under racecheck.
        kinds.retain(|k| {
            !matches!(
                k,
                Adversarial::Snake | Adversarial::Full | Adversarial::Checkerboard
            )
        });
    } else {
        kinds.push(Adversarial::FullDuplicated);
    }
    for kind in kinds {
        // The adversarial module between two ordinary ones, plus invalid digis around it.
        let mut d = Digis::default();
        d.push(3, 10, 10, 5000);
        d.push(3, 11, 11, 5000);
        d.push(INVALID_MODULE, 0, 0, 0);
        d.extend(&gen::adversarial(kind, &g, 4, c.seed));
        d.push(INVALID_MODULE, 0, 0, 0);
        d.push(95, 0, 0, 2500);
        for cap in [DEFAULT, (32, 300), (8, 8)] {
            for cut in [None, Some(g.default_cut)] {
                check(
                    c,
                    &format!("{kind:?} capacities {cap:?} cut {cut:?}"),
                    &d,
                    &single(&d),
                    &g,
                    cut,
                    cap,
                )?;
            }
        }
    }
    Ok(())
}

fn test_sizes(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let cap = 300u32;
    let mut rng = detkit::rng::rng(c.seed ^ 0x5123);
    for n in [
        0,
        1,
        2,
        31,
        32,
        33,
        255,
        256,
        257,
        cap - 1,
        cap,
        cap + 1,
        2000,
    ] {
        // One module of n digis in a 24 × 24 corner: dense enough to connect and to repeat.
        let mut d = Digis::default();
        for _ in 0..n {
            let (x, y) = (rng.below(24) as u16, rng.below(24) as u16);
            d.push(17, x, y, 1000 + rng.below(4000) as u16);
        }
        // Each size through the three paths in turn (small-module kernel, shared-memory
        // kernel, fallback). The chain's block sizes are `ClusterTuning`'s, tested in
        // `clustering_passes` and `clustering_larger_threads`.
        for caps in [(cap, 6000), (32, cap), (32, 32)] {
            let what = format!("{n} digis, capacities {caps:?}");
            check(c, &what, &d, &single(&d), &g, Some(g.default_cut), caps)?;
        }
    }
    Ok(())
}

fn test_phase2(c: &Ctx) -> R {
    let g = Geometry::phase2();
    let cfg = EventConfig {
        clusters: if c.sanitize { 3000.0 } else { 30_000.0 },
        noise_per_module: if c.sanitize { 1.0 } else { 4.5 },
        ..EventConfig::run3()
    };
    let d = gen::event(&g, &cfg, c.seed ^ 0x9902);
    let cut = Some(g.default_cut);
    check(c, "phase2 event", &d, &single(&d), &g, cut, DEFAULT)?;
    // Every module through the shared-memory kernel, whose Phase-2 status words live in a
    // global slab.
    check(
        c,
        "phase2 event, capacities 8/6000",
        &d,
        &single(&d),
        &g,
        cut,
        (8, 6000),
    )?;
    // Every module over 16 digis through the fallback, whose Phase-2 status words live in
    // a global slab per block (left zeroed for the block's next module).
    check(
        c,
        "phase2 event, capacities 8/16",
        &d,
        &single(&d),
        &g,
        cut,
        (8, 16),
    )?;
    let kinds: &[Adversarial] = if c.quick {
        &[Adversarial::Lattice]
    } else {
        &[Adversarial::Full, Adversarial::Snake]
    };
    for &kind in kinds {
        let d = gen::adversarial(kind, &g, 3891, c.seed);
        check(
            c,
            &format!("phase2 {kind:?}"),
            &d,
            &single(&d),
            &g,
            None,
            DEFAULT,
        )?;
    }
    Ok(())
}

/// The standalone charge-cut kernel over every module: after an uncut clustering, and
/// after a clustering that already cut the small modules (a second cut changes nothing).
/// Also the seed-faithful kernel's partition.
fn test_cut_paths(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let d = gen::run3_event(c.seed ^ 0xc07);
    let offs = single(&d);
    let gpu = c.gpu_shared();
    let dd = DeviceDigis::upload(gpu, &d, &offs).map_err(e)?;
    let mut run = Clusterer::new(gpu, &g, d.len(), 1).map_err(e)?;
    sanitizer_grids(c, &mut run);
    for cut in [
        ChargeCut::uniform(3000),
        g.default_cut,
        ChargeCut::uniform(0),
    ] {
        let want = detkit::clustering::cpu::cluster(&d, &offs, &g, Some(cut));
        for pre_cut in [None, Some(cut)] {
            run.poison_outputs().map_err(e)?;
            run.count_modules(&dd).map_err(e)?;
            run.find_clus(&dd, pre_cut).map_err(e)?;
            run.charge_cut(&dd, cut).map_err(e)?;
            let got = run.results(&dd).map_err(e)?;
            exact_clusters(
                &format!("cut {cut:?} after find_clus({pre_cut:?})"),
                &got,
                &want,
            )?;
        }
    }
    Ok(())
}

fn test_bad_input(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let gpu = c.gpu_shared();
    // Unvalidated digis straight to the device: the kernels must not touch memory out of
    // bounds and must name the first bad digi.
    let mut d = Digis::default();
    d.push(3, 1, 1, 100);
    d.push(5, 1, 60_000, 100);
    d.push(6, 60_000, 1, 100);
    d.push(40_000, 1, 1, 100);
    let dd = DeviceDigis::upload(gpu, &d, &single(&d)).map_err(e)?;
    let mut run = Clusterer::new(gpu, &g, d.len(), 1).map_err(e)?;
    sanitizer_grids(c, &mut run);
    run.run(&dd, Some(g.default_cut)).map_err(e)?;
    match run.results(&dd) {
        Err(Error::InvalidInput { detail, .. }) if detail.contains("digi 1") => {}
        other => return Err(format!("unvalidated bad digis: {other:?}")),
    }
    // A module id repeated within an event (unvalidated): module ends are recorded by event
    // and module id, so the two runs of module 3 share one; the sort clamps it to each
    // run's event, the kernels stay in bounds, and every digi of a valid module gets a
    // cluster or -1 (poisoned outputs are overwritten). Results beyond that are unspecified.
    let mut rep = Digis::default();
    for k in 0..40u16 {
        rep.push(3, k % 20, k / 20, 3000);
    }
    rep.push(4, 1, 1, 3000);
    for k in 0..300u16 {
        rep.push(3, k % 100, 50 + k / 100, 3000);
    }
    rep.push(INVALID_MODULE, 0, 0, 0);
    rep.push(4, 7, 7, 3000);
    let drep = DeviceDigis::upload(gpu, &rep, &single(&rep)).map_err(e)?;
    let mut run = Clusterer::new(gpu, &g, rep.len(), 1).map_err(e)?;
    sanitizer_grids(c, &mut run);
    for graph in [false, true] {
        run.poison_outputs().map_err(e)?;
        if graph {
            run.run_graph(&drep, Some(g.default_cut)).map_err(e)?;
        } else {
            run.run(&drep, Some(g.default_cut)).map_err(e)?;
        }
        let got = run
            .results(&drep)
            .map_err(|err| format!("repeated module id: {err}"))?;
        ensure(
            got.clus
                .iter()
                .all(|&v| (-1..rep.len() as i32).contains(&v)),
            || "repeated module id: a digi left unwritten or out of range".into(),
        )?;
    }
    // The backend validates first.
    let mut split = Digis::default();
    split.push(3, 1, 1, 100);
    split.push(4, 1, 1, 100);
    split.push(3, 2, 2, 100);
    ensure(
        matches!(
            c.backend.cluster(&split, &g, None),
            Err(Error::InvalidItem {
                what: "digi",
                index: 2,
                ..
            })
        ),
        || "non-consecutive module accepted".into(),
    )?;
    // Workspace too small.
    let big = gen::run3_event(1);
    let dbig = DeviceDigis::upload(gpu, &big, &single(&big)).map_err(e)?;
    let mut small = Clusterer::new(gpu, &g, 10, 1).map_err(e)?;
    ensure(
        matches!(small.run(&dbig, None), Err(Error::CapacityExceeded { .. })),
        || "oversized input accepted by a small workspace".into(),
    )
}

/// A pool of events for the batch tests: Run-3-like events (smaller ones under `--quick`,
/// for the sanitizers; in the sanitizer mode with one noise digi per module instead of 4.5,
/// as [`run3`]'s: every module still has digis, so the same module slots and passes run),
/// an event with zero digis and an event of only invalid digis.
fn event_pool(c: &Ctx, g: &Geometry) -> Vec<Digis> {
    let cfg = if c.quick {
        EventConfig {
            clusters: 1500.0,
            noise_per_module: if c.sanitize { 1.0 } else { 4.5 },
            ..EventConfig::run3()
        }
    } else {
        EventConfig::run3()
    };
    let mut pool: Vec<Digis> = (0..4)
        .map(|k| gen::event(g, &cfg, c.seed ^ (0x5743 + k)))
        .collect();
    let mut rng = detkit::rng::rng(c.seed ^ 0x1d1);
    let mut invalid = Digis::default();
    for _ in 0..(1 + rng.below(200)) {
        let (x, y) = (rng.below(160) as u16, rng.below(416) as u16);
        invalid.push(INVALID_MODULE, x, y, 1000 + rng.below(9000) as u16);
    }
    // Zero digis and only invalid digis, between ordinary events.
    pool.insert(1, Digis::default());
    pool.insert(3, invalid);
    pool
}

/// Results equal to the oracle's with 1 to 8 streams in flight (`ClusterQueue` over forks of
/// one context: every lane replays its captured graph on batches of different sizes copied
/// into the same buffers) and 1, 2, 3, 5 or 6 events per launch, with the empty and the
/// invalid-only events at every position of a batch.
fn test_streams(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let cut = Some(g.default_cut);
    let pool = event_pool(c, &g);
    let oracle: Vec<Clusters> = pool
        .iter()
        .map(|d| detkit::clustering::cpu::cluster(d, &single(d), &g, cut))
        .collect();
    let per_launch: &[usize] = &[1, 2, 3, 5, 6];
    let lane_counts: Vec<usize> = if c.quick {
        vec![1, 3, 8]
    } else {
        (1..=8).collect()
    };
    let max_events = *per_launch.iter().max().unwrap_or(&1);
    let max_digis: usize = {
        let mut sizes: Vec<usize> = pool.iter().map(|d| d.len()).collect();
        sizes.sort_unstable();
        sizes.iter().rev().take(max_events).sum()
    };
    let forks: Vec<std::sync::Arc<GpuContext>> = (0..8)
        .map(|_| c.gpu().fork().map(std::sync::Arc::new))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    let mut checked = 0usize;
    for &lanes in &lane_counts {
        let mut q =
            cl::ClusterQueue::new(&forks[..lanes], &g, max_digis, max_events, cut).map_err(e)?;
        // Batch b: `per_launch[b % len]` events starting at pool index b (cycling).
        let nbatches = 2 * lanes + 3;
        let mut wants = Vec::new();
        let mut results = Vec::new();
        for b in 0..nbatches {
            let ne = per_launch[b % per_launch.len()];
            let idx: Vec<usize> = (0..ne).map(|k| (b + k) % pool.len()).collect();
            let mut batch = Digis::default();
            let mut offsets = vec![0u32];
            for &i in &idx {
                batch.extend(&pool[i]);
                offsets.push(batch.len() as u32);
            }
            cl::validate(&batch, &offsets, &g).map_err(e)?;
            let parts: Vec<&Clusters> = idx.iter().map(|&i| &oracle[i]).collect();
            wants.push(detkit_tests::concat_clusters(&parts));
            if let Some(r) = q.submit(&batch, &offsets).map_err(e)? {
                results.push(r);
            }
        }
        results.extend(q.finish().map_err(e)?);
        ensure(results.len() == nbatches, || {
            format!(
                "{lanes} lanes: {} results for {nbatches} batches",
                results.len()
            )
        })?;
        for (k, (id, got)) in results.iter().enumerate() {
            ensure(*id == k as u64, || {
                format!("{lanes} lanes: result {k} is batch {id} (out of order)")
            })?;
            exact_clusters(&format!("{lanes} lanes, batch {k}"), got, &wants[k])?;
            checked += 1;
        }
    }
    println!("  clustering: {checked} batches through 1..8 streams equal to the oracle");
    Ok(())
}

/// The pass configurations (warp pass capacity 0 to 128; with and without a middle block
/// pass; last block pass of 128 to 1024 threads; pixel tables up to 8 times larger) and the
/// graph replay give the oracle's results, also on grids of one and three blocks (every
/// group clusters many modules in turn, reusing its pixel table). Under `--quick` (the
/// sanitizer runs: racecheck did not finish all eight configurations × three runs × two
/// cuts in 430 s) four configurations, one of each kind, with the cut, `run` then the
/// graph once, and one event on grids of 8 blocks.
fn test_passes(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let gpu = c.gpu_shared();
    let pool = event_pool(c, &g);
    let (d, offsets) = {
        let mut d = Digis::default();
        let mut offsets = vec![0u32];
        for ev in &pool {
            d.extend(ev);
            offsets.push(d.len() as u32);
        }
        (d, offsets)
    };
    let dd = DeviceDigis::upload(gpu, &d, &offsets).map_err(e)?;
    let all_configs = [
        (0u32, None, 256u32),
        (0, None, 1024),
        (32, None, 128),
        (32, None, 512),
        (128, None, 256),
        (32, Some((128u32, 128u32)), 1024),
        (0, Some((64, 64)), 256),
        (8, Some((300, 96)), 160),
    ];
    // Block passes only; warp + block; warp + middle + block; warp groups over 32 digis
    // (several groups' tables in one block).
    let quick_configs = [
        all_configs[1],
        all_configs[3],
        all_configs[5],
        all_configs[4],
    ];
    let (configs, cuts, graphs): (&[_], &[_], &[bool]) = if c.quick {
        (&quick_configs, &[Some(g.default_cut)], &[false, true])
    } else {
        (
            &all_configs,
            &[None, Some(g.default_cut)],
            &[false, true, true],
        )
    };
    for &cut in cuts {
        let want = detkit::clustering::cpu::cluster(&d, &offsets, &g, cut);
        for (ci, &(warp, mid, threads)) in configs.iter().enumerate() {
            let mut run = Clusterer::new(gpu, &g, d.len(), offsets.len() - 1).map_err(e)?;
            sanitizer_grids(c, &mut run);
            run.tune(&ClusterTuning {
                warp_capacity: Some(warp),
                mid_pass: Some(mid),
                small_threads: Some(threads),
                ..Default::default()
            })
            .map_err(e)?;
            for &graph in graphs {
                // The sanitizer mode: the graph after every other configuration (the graph
                // replays the same launches; `clustering_larger_threads` replays it too).
                if graph && c.sanitize && ci % 2 == 1 {
                    continue;
                }
                run.poison_outputs().map_err(e)?;
                if graph {
                    run.run_graph(&dd, cut).map_err(e)?;
                } else {
                    run.run(&dd, cut).map_err(e)?;
                }
                let got = run.results(&dd).map_err(e)?;
                exact_clusters(
                    &format!("passes {:?}, graph {graph}, cut {cut:?}", run.passes()),
                    &got,
                    &want,
                )?;
            }
        }
    }
    // Larger pixel tables in the middle and the last pass (`ClusterTuning::table_scale`).
    let scales: &[(u32, u32)] = if c.quick {
        &[(2, 1)]
    } else {
        &[(0, 0), (1, 0), (0, 1), (2, 1), (3, 2)]
    };
    let cut = Some(g.default_cut);
    let want = detkit::clustering::cpu::cluster(&d, &offsets, &g, cut);
    for &(mid, last) in scales {
        let mut run = Clusterer::new(gpu, &g, d.len(), offsets.len() - 1).map_err(e)?;
        sanitizer_grids(c, &mut run);
        run.tune(&ClusterTuning {
            table_scale: Some((mid, last)),
            ..Default::default()
        })
        .map_err(e)?;
        run_both_ways(&mut run, &dd, cut, |got, graph| {
            exact_clusters(
                &format!("table scale {mid}/{last}, graph {graph}"),
                &got,
                &want,
            )
        })?;
    }
    // Few blocks, so that every group clusters many modules one after another: a group
    // clears its pixel table before its first module only, and each pixel's owner empties
    // its slot after every later one (duplicated pixels included). Warp groups over 32
    // digis too. Under `--quick` (racecheck slows a grid of few blocks most) the first
    // event on 8 blocks, `run` only; the other quick runs' grids of 48 blocks also give
    // every group many modules.
    if c.quick {
        let one = &pool[0];
        let offs = single(one);
        let done = DeviceDigis::upload(gpu, one, &offs).map_err(e)?;
        let want_one = detkit::clustering::cpu::cluster(one, &offs, &g, cut);
        let mut run = Clusterer::new(gpu, &g, one.len(), 1).map_err(e)?;
        run.tune(&ClusterTuning {
            warp_capacity: Some(128),
            grid_limit: Some(8),
            ..Default::default()
        })
        .map_err(e)?;
        run.poison_outputs().map_err(e)?;
        run.run(&done, cut).map_err(e)?;
        let got = run.results(&done).map_err(e)?;
        exact_clusters("grids of 8 blocks, warp pass 128", &got, &want_one)?;
    } else {
        for limit in [1u32, 3] {
            for warp in [32u32, 128] {
                let mut run = Clusterer::new(gpu, &g, d.len(), offsets.len() - 1).map_err(e)?;
                run.tune(&ClusterTuning {
                    warp_capacity: Some(warp),
                    grid_limit: Some(limit),
                    ..Default::default()
                })
                .map_err(e)?;
                run_both_ways(&mut run, &dd, cut, |got, graph| {
                    exact_clusters(
                        &format!("grids of {limit} block(s), warp pass {warp}, graph {graph}"),
                        &got,
                        &want,
                    )
                })?;
            }
        }
    }
    let mut run = Clusterer::new(gpu, &g, d.len(), offsets.len() - 1).map_err(e)?;
    let too_large = ClusterTuning {
        table_scale: Some((4, 0)),
        ..Default::default()
    };
    ensure(run.tune(&too_large).is_err(), || {
        "table scale 4 accepted".to_string()
    })?;
    Ok(())
}

/// The larger-module kernels at other block sizes (`ClusterTuning::larger_threads`) and the resident
/// grids (`tight_grids: Some(false)`) give the oracle's results: a batch of generated events
/// (with an empty and an invalid-only event) at tiny capacities, so that the shared-memory
/// kernel and the fallback take many modules, and at the default capacities; `run`, then
/// the graph. Block sizes the kernels cannot take are refused.
fn test_larger_threads(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let gpu = c.gpu_shared();
    let pool = event_pool(c, &g);
    let mut d = Digis::default();
    let mut offsets = vec![0u32];
    for ev in &pool {
        d.extend(ev);
        offsets.push(d.len() as u32);
    }
    let dd = DeviceDigis::upload(gpu, &d, &offsets).map_err(e)?;
    let cut = Some(g.default_cut);
    let want = detkit::clustering::cpu::cluster(&d, &offsets, &g, cut);
    let configs = [
        ((16u32, 64u32), (256u32, 256u32), false),
        ((16, 64), (32, 1024), true),
        ((16, 64), (1024, 64), true),
        ((16, 64), (512, 512), false),
        (DEFAULT, (1024, 1024), true),
        (DEFAULT, (256, 256), false),
    ];
    for (ci, (caps, (shared, fallback), tight)) in configs.into_iter().enumerate() {
        let what =
            format!("capacities {caps:?}, larger threads {shared}/{fallback}, tight grids {tight}");
        let mut run = Clusterer::with_capacity(gpu, &g, d.len(), offsets.len() - 1, caps.0, caps.1)
            .map_err(e)?;
        sanitizer_grids(c, &mut run);
        run.tune(&ClusterTuning {
            larger_threads: Some((shared, fallback)),
            tight_grids: Some(tight),
            ..Default::default()
        })
        .map_err(e)?;
        // The sanitizer mode: each configuration one way, `run` and the graph in turn (both
        // with tiny and with default capacities).
        let check = |got: Clusters, graph: bool| {
            exact_clusters(&format!("{what}, graph {graph}"), &got, &want)?;
            if caps != DEFAULT {
                ensure(got.medium_modules > 0 && got.fallback_modules > 0, || {
                    format!(
                        "{what}: the larger-module kernels took no module (medium {}, fallback {})",
                        got.medium_modules, got.fallback_modules
                    )
                })?;
            }
            Ok(())
        };
        if c.sanitize {
            let graph = ci % 2 == 1;
            run.poison_outputs().map_err(e)?;
            if graph {
                run.run_graph(&dd, cut).map_err(e)?;
            } else {
                run.run(&dd, cut).map_err(e)?;
            }
            check(run.results(&dd).map_err(e)?, graph)?;
        } else {
            run_both_ways(&mut run, &dd, cut, check)?;
        }
    }
    let mut run = Clusterer::new(gpu, &g, d.len(), offsets.len() - 1).map_err(e)?;
    for (shared, fallback) in [(48, 256), (256, 0), (2048, 256)] {
        let t = ClusterTuning {
            larger_threads: Some((shared, fallback)),
            ..Default::default()
        };
        ensure(run.tune(&t).is_err(), || {
            format!("larger threads {shared}/{fallback} accepted")
        })?;
    }
    Ok(())
}
