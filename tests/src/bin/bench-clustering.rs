//! bench-clustering: the CMS pixel clustering chain (count_modules + find_clus + charge cut)
//! on Run-3-like, dense and Phase-2 events: latency of one event, throughput over streams ×
//! events per launch, and the seed's `findClus` (the faithful baseline) beside ours.
//!
//! Every configuration is checked against the CPU oracle before it is timed (ours exactly;
//! the seed's numbering is `atomicInc` order, so its partition into clusters is checked).
//! The oracle of a batch is its events' oracles concatenated (`concat_clusters`). GPU times
//! are CUDA events around the launches, host times `Instant` around launch + synchronise;
//! medians after a warm-up.
//!
//! Sections: (1) per case and events per launch: the chain split into count / find / cut
//! (`Clusterer::run`, events between the steps), the whole chain as one graph
//! (`Clusterer::run_graph`), and the seed; (2) latency of one Run-3-like event: each stream
//! operation, `run` vs `run_graph`, host-side latency with and without copies; (3) the pass
//! configurations (warp-pass capacity × block-pass threads) at 1 and 128 events per launch;
//! (4) throughput: lanes (streams, one `Clusterer` and one forked context each) × events per
//! launch, device-resident, one host thread keeping every lane busy (with that thread's µs
//! per launch inside the launch calls and waiting for a lane); (5) the same from host
//! memory through `ClusterQueue` (copies in and out included).
//!
//! (6) dense events: the chain with each of `--dense-variants`, split by stream operation.
//!
//! Usage: `bench-clustering [--reps 30] [--csv FILE] [--batches 1,8,32,128,512]
//! [--lanes 1,2,4,8,16] [--per-launch 1,2,4,8,16,32,64,128,256,512] [--seconds 0.2]
//! [--sections 1,2,3,4,4b,5,6] [--cases run3,dense,phase2] [--variants default,...]
//! [--dense-variants default,...]`
//!
//! A variant is `default` or `+`-joined changes to the default `Clusterer`: `resident`
//! (resident grids, `ClusterTuning::tight_grids`), `last<N>` (`ClusterTuning::small_threads`),
//! `larger<S>x<F>` (`ClusterTuning::larger_threads`), `table<M>x<L>` (`ClusterTuning::table_scale`),
//! `shared<C>` (the shared-memory kernel's capacity, `Clusterer::with_capacity(.., C)`;
//! modules over it take the fallback), `small<C>` (the small-module passes' capacity,
//! `Clusterer::with_capacity(.., C, ..)`; modules over it take the shared-memory kernel). Sections (2) and (4) run once per
//! `--variants` entry, section (6) once per `--dense-variants` entry.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;
use detkit::clustering::{
    gen, ChargeCut, ClusterQueue, ClusterTuning, Clusterer, Clusters, DeviceDigis, Digis, Geometry,
};
use detkit::{Backend, GpuContext};
use detkit_tests::{concat_clusters, median};

/// A benchmark case: name, geometry, distinct events, their oracles, events per launch.
type Case<'a> = (
    &'a str,
    &'a Geometry,
    &'a Vec<Digis>,
    &'a Vec<Clusters>,
    Vec<usize>,
);

fn ev(g: &GpuContext) -> Result<CudaEvent> {
    Ok(g.stream()
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?)
}

/// One lane of the throughput rows: a stream (fork), its digis, its clusterer (graph
/// captured) and the event of its last launch.
type Lane<'g> = (
    &'g Arc<GpuContext>,
    DeviceDigis,
    Clusterer,
    Option<CudaEvent>,
);

/// Graph launches per second of [`launches_per_second`], with the host thread's time per
/// launch inside the launch calls (graph launch and event record) and waiting for a lane.
struct Rate {
    per_second: f64,
    launch_us: f64,
    wait_us: f64,
}

/// Replays the lanes' graphs round robin for at least `seconds` (and 4 launches per lane),
/// each lane waiting for its previous launch before the next; graph launches per second.
fn launches_per_second(ls: &mut [Lane<'_>], seconds: f64, cut: ChargeCut) -> Result<Rate> {
    let lanes = ls.len() as u64;
    let t0 = Instant::now();
    let mut launches = 0u64;
    let (mut launch, mut wait) = (0f64, 0f64);
    while t0.elapsed().as_secs_f64() < seconds || launches < 4 * lanes {
        let (f, d, c, pending) = &mut ls[(launches % lanes) as usize];
        let t1 = Instant::now();
        if let Some(e) = pending.take() {
            e.synchronize()?;
        }
        let t2 = Instant::now();
        c.run_graph(d, Some(cut))?;
        *pending = Some(ev(f)?);
        launch += t2.elapsed().as_secs_f64();
        wait += (t2 - t1).as_secs_f64();
        launches += 1;
    }
    for (f, _, _, _) in ls.iter() {
        f.synchronize()?;
    }
    let n = launches as f64;
    Ok(Rate {
        per_second: n / t0.elapsed().as_secs_f64(),
        launch_us: launch * 1e6 / n,
        wait_us: wait * 1e6 / n,
    })
}

/// A batch of `b` events cycled from `pool`, with the oracle's results.
struct Batch {
    digis: Digis,
    offsets: Vec<u32>,
    want: Clusters,
}

fn batch(pool: &[Digis], oracle: &[Clusters], b: usize) -> Batch {
    let mut digis = Digis::default();
    let mut offsets = vec![0u32];
    let mut parts = Vec::new();
    for k in 0..b {
        digis.extend(&pool[k % pool.len()]);
        offsets.push(digis.len() as u32);
        parts.push(&oracle[k % pool.len()]);
    }
    Batch {
        digis,
        offsets,
        want: concat_clusters(&parts),
    }
}

fn check_exact(what: &str, got: &Clusters, want: &Clusters) -> Result<()> {
    if let Err(msg) = detkit_tests::exact("clus", &got.clus, &want.clus)
        .and_then(|_| {
            detkit_tests::exact("clus_in_module", &got.clus_in_module, &want.clus_in_module)
        })
        .and_then(|_| detkit_tests::exact("module_first", &got.module_first, &want.module_first))
    {
        bail!("CHECK FAILED {what}: {msg}");
    }
    Ok(())
}

/// Same clusters up to a renumbering within each module (for the seed's atomicInc order).
fn same_partition(got: &Clusters, want: &Clusters, d: &Digis, offsets: &[u32]) -> Result<()> {
    if got.clus_in_module != want.clus_in_module {
        bail!("CHECK FAILED clus_in_module differs");
    }
    let mut fwd: HashMap<(usize, u16, i32), i32> = HashMap::new();
    let mut back: HashMap<(usize, u16, i32), i32> = HashMap::new();
    for e in 0..offsets.len() - 1 {
        for i in offsets[e] as usize..offsets[e + 1] as usize {
            let (g, w) = (got.clus[i], want.clus[i]);
            if (g < 0) != (w < 0) {
                bail!("CHECK FAILED digi {i}: got {g}, want {w}");
            }
            if w < 0 {
                continue;
            }
            let m = d.module[i];
            if *fwd.entry((e, m, w)).or_insert(g) != g || *back.entry((e, m, g)).or_insert(w) != w {
                bail!("CHECK FAILED digi {i}: clusters split or merged");
            }
        }
    }
    Ok(())
}

/// Medians (ms) of: count_modules (with its memset), find_clus (ours: small modules cut
/// inline; the seed's: no cut), the charge cut (ours: larger modules only; the seed's: every
/// module), the whole chain; CUDA events between the steps.
fn time_steps(
    g: &GpuContext,
    reps: usize,
    c: &mut Clusterer,
    d: &DeviceDigis,
    cut: Option<ChargeCut>,
    seed: bool,
) -> Result<[f64; 4]> {
    let mut t: [Vec<f64>; 4] = Default::default();
    for rep in 0..reps + 5 {
        let e0 = ev(g)?;
        c.count_modules(d)?;
        let e1 = ev(g)?;
        if seed {
            c.find_clus_seed(d)?;
        } else {
            c.find_clus(d, cut)?;
        }
        let e2 = ev(g)?;
        if let Some(cut) = cut {
            if seed {
                c.charge_cut(d, cut)?;
            } else {
                c.charge_cut_larger(d, cut)?;
            }
        }
        let e3 = ev(g)?;
        e3.synchronize()?;
        if rep >= 5 {
            t[0].push(e0.elapsed_ms(&e1)? as f64);
            t[1].push(e1.elapsed_ms(&e2)? as f64);
            t[2].push(e2.elapsed_ms(&e3)? as f64);
            t[3].push(e0.elapsed_ms(&e3)? as f64);
        }
    }
    Ok(t.map(median))
}

/// Median GPU time (ms) of the chain as one graph launch.
fn time_graph(
    g: &GpuContext,
    reps: usize,
    c: &mut Clusterer,
    d: &DeviceDigis,
    cut: Option<ChargeCut>,
) -> Result<f64> {
    let mut t = Vec::new();
    for rep in 0..reps + 5 {
        let e0 = ev(g)?;
        c.run_graph(d, cut)?;
        let e1 = ev(g)?;
        e1.synchronize()?;
        if rep >= 5 {
            t.push(e0.elapsed_ms(&e1)? as f64);
        }
    }
    Ok(median(t))
}

/// Median GPU times (µs) of each stream operation of `run` (memset + count_modules, pass 1,
/// pass 2, shared-memory kernel, fallback, cut) and of the whole chain.
fn time_ops(
    g: &GpuContext,
    reps: usize,
    c: &mut Clusterer,
    d: &DeviceDigis,
    cut: ChargeCut,
) -> Result<[f64; 6]> {
    let mut t: [Vec<f64>; 6] = Default::default();
    for rep in 0..reps + 5 {
        let e0 = ev(g)?;
        c.count_modules(d)?;
        let e1 = ev(g)?;
        // Pass 1 alone is not a public step: time find_clus_small and attribute it below.
        c.find_clus_small(d, Some(cut))?;
        let e2 = ev(g)?;
        c.find_clus_shared(d)?;
        let e3 = ev(g)?;
        c.find_clus_fallback(d)?;
        let e4 = ev(g)?;
        c.charge_cut_larger(d, cut)?;
        let e5 = ev(g)?;
        e5.synchronize()?;
        if rep >= 5 {
            for (k, (a, b)) in [(&e0, &e1), (&e1, &e2), (&e2, &e3), (&e3, &e4), (&e4, &e5)]
                .into_iter()
                .enumerate()
            {
                t[k].push(a.elapsed_ms(b)? as f64 * 1e3);
            }
            t[5].push(e0.elapsed_ms(&e5)? as f64 * 1e3);
        }
    }
    Ok(t.map(median))
}

/// Median host wall time (µs) of `f` + synchronise.
fn wall(reps: usize, g: &GpuContext, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut t = Vec::new();
    for rep in 0..reps + 5 {
        let t0 = Instant::now();
        f()?;
        g.synchronize()?;
        if rep >= 5 {
            t.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(median(t))
}

/// A `Clusterer` for a variant: its `shared<C>` and `small<C>` parts (the shared-memory
/// kernel's and the small-module passes' capacities, digis) at construction, the rest by
/// [`apply_variant`].
fn clusterer_for(
    g: &Arc<GpuContext>,
    geo: &Geometry,
    digis: usize,
    events: usize,
    v: &str,
) -> Result<Clusterer> {
    let part = |prefix: &str| {
        v.split('+')
            .find_map(|t| t.strip_prefix(prefix))
            .map(str::parse::<u32>)
            .transpose()
    };
    let (shared, small) = (part("shared")?, part("small")?);
    let mut c = Clusterer::with_capacity(
        g,
        geo,
        digis,
        events,
        small.unwrap_or(detkit_gpu::clustering::SMALL_CAPACITY),
        shared.unwrap_or(detkit::clustering::DEFAULT_CAPACITY),
    )?;
    apply_variant(&mut c, v)?;
    Ok(c)
}

/// Applies a variant (see the usage) to a fresh `Clusterer`.
fn apply_variant(c: &mut Clusterer, v: &str) -> Result<()> {
    let mut t = ClusterTuning::default();
    for p in v.split('+') {
        if p == "default" || p.starts_with("shared") || p.starts_with("small") {
        } else if p == "resident" {
            t.tight_grids = Some(false);
        } else if let Some(n) = p.strip_prefix("last") {
            t.small_threads = Some(n.parse()?);
        } else if let Some(st) = p.strip_prefix("table") {
            let (a, b) = st.split_once('x').context("table<M>x<L>")?;
            t.table_scale = Some((a.parse()?, b.parse()?));
        } else if let Some(st) = p.strip_prefix("larger") {
            let (a, b) = st.split_once('x').context("larger<S>x<F>")?;
            t.larger_threads = Some((a.parse()?, b.parse()?));
        } else {
            bail!("unknown variant `{p}`");
        }
    }
    c.tune(&t)?;
    Ok(())
}

struct Args {
    sections: Vec<String>,
    cases: Vec<String>,
    variants: Vec<String>,
    dense_variants: Vec<String>,
    reps: usize,
    csv: Option<String>,
    batches: Vec<usize>,
    lanes: Vec<usize>,
    per_launch: Vec<usize>,
    seconds: f64,
}

fn args() -> Result<Args> {
    let list = |v: &str| v.split(',').map(str::to_string).collect::<Vec<_>>();
    let mut a = Args {
        sections: list("1,2,3,4,4b,5,6"),
        cases: list("run3,dense,phase2"),
        variants: list("default"),
        dense_variants: list("default"),
        reps: 30,
        csv: None,
        batches: vec![1, 8, 32, 128, 512],
        lanes: vec![1, 2, 4, 8, 16],
        per_launch: vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
        seconds: 0.2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().with_context(|| format!("{x} needs a value"));
        match x.as_str() {
            "--reps" => a.reps = val()?.parse()?,
            "--csv" => a.csv = Some(val()?),
            "--batches" => a.batches = detkit_tests::parse_list(&val()?)?,
            "--lanes" => a.lanes = detkit_tests::parse_list(&val()?)?,
            "--per-launch" => a.per_launch = detkit_tests::parse_list(&val()?)?,
            "--seconds" => a.seconds = val()?.parse()?,
            "--sections" => a.sections = list(&val()?),
            "--cases" => a.cases = list(&val()?),
            "--variants" => a.variants = list(&val()?),
            "--dense-variants" => a.dense_variants = list(&val()?),
            other => bail!("unknown argument `{other}`"),
        }
    }
    Ok(a)
}

fn main() -> Result<()> {
    let a = args()?;
    let on = |sec: &str| a.sections.iter().any(|x| x == sec);
    if !detkit::driver_present() {
        println!("skipped: no CUDA driver (libcuda not found); nothing timed");
        return Ok(());
    }
    let backend = Backend::cuda(0)?;
    let g = backend.gpu_shared().context("cuda backend")?;
    println!("{}", backend.description());
    let geo = Geometry::phase1();
    let cut = geo.default_cut;
    let oracle_of = |pool: &[Digis], geo: &Geometry| -> Vec<Clusters> {
        pool.iter()
            .map(|d| {
                detkit::clustering::cpu::cluster(
                    d,
                    &[0, d.len() as u32],
                    geo,
                    Some(geo.default_cut),
                )
            })
            .collect()
    };
    let run3: Vec<Digis> = (0..16).map(|s| gen::run3_event(1000 + s as u64)).collect();
    let t = Instant::now();
    let run3_want = oracle_of(&run3, &geo);
    println!(
        "cpu oracle, 16 run3 events ({} digis in the first): {:.1} ms per event",
        run3[0].len(),
        t.elapsed().as_secs_f64() * 1e3 / 16.0
    );
    let dense: Vec<Digis> = (0..4).map(|s| gen::dense_event(2000 + s as u64)).collect();
    let dense_want = oracle_of(&dense, &geo);
    let geo2 = Geometry::phase2();
    let phase2: Vec<Digis> = (0..2)
        .map(|s| {
            gen::event(
                &geo2,
                &gen::EventConfig {
                    clusters: 30_000.0,
                    ..gen::EventConfig::run3()
                },
                3000 + s,
            )
        })
        .collect();
    let phase2_want = oracle_of(&phase2, &geo2);

    // (1) Cases × events per launch: steps, graph, seed.
    let mut out = String::from(
        "case,events,digis,medium_modules,fallback_modules,count_us,find_us,cut_us,chain_us_per_event,graph_us_per_event,graph_events_per_s,seed_find_us,seed_chain_us_per_event,graph_vs_seed\n",
    );
    if on("1") {
        println!("\n(1) chain per case, µs per event (GPU time, CUDA events)");
        println!(
        "{:<6} {:>6} {:>10} {:>9} | {:>8} {:>8} {:>7} {:>9} | {:>9} {:>10} | {:>9} {:>9} | {:>7}",
        "case",
        "events",
        "digis",
        "med/fb",
        "count",
        "find",
        "cut",
        "run()",
        "graph",
        "events/s",
        "seed find",
        "seed",
        "vs seed"
    );
        let cases: Vec<Case> = vec![
            ("run3", &geo, &run3, &run3_want, a.batches.clone()),
            (
                "dense",
                &geo,
                &dense,
                &dense_want,
                a.batches.iter().copied().filter(|&b| b <= 8).collect(),
            ),
            ("phase2", &geo2, &phase2, &phase2_want, vec![1]),
        ];
        for (name, geom, pool, want, sizes) in cases {
            if !a.cases.iter().any(|c| c == name) {
                continue;
            }
            let ccut = geom.default_cut;
            for &b in &sizes {
                let bt = batch(pool, want, b);
                let d = DeviceDigis::upload(g, &bt.digis, &bt.offsets)?;
                let mut c = Clusterer::new(g, geom, bt.digis.len(), b)?;
                c.run(&d, Some(ccut))?;
                let ours = c.results(&d)?;
                check_exact(&format!("{name} x{b} run"), &ours, &bt.want)?;
                c.poison_outputs()?;
                c.run_graph(&d, Some(ccut))?;
                check_exact(&format!("{name} x{b} graph"), &c.results(&d)?, &bt.want)?;
                let seed_ok = name != "phase2";
                if seed_ok {
                    c.count_modules(&d)?;
                    c.find_clus_seed(&d)?;
                    c.charge_cut(&d, ccut)?;
                    same_partition(&c.results(&d)?, &bt.want, &bt.digis, &bt.offsets)
                        .with_context(|| format!("seed {name} x{b}"))?;
                }
                let [tc, tf, tq, tt] = time_steps(g, a.reps, &mut c, &d, Some(ccut), false)?;
                let tg = time_graph(g, a.reps, &mut c, &d, Some(ccut))?;
                let [_, sf, _, st] = if seed_ok {
                    time_steps(g, a.reps, &mut c, &d, Some(ccut), true)?
                } else {
                    [f64::NAN; 4]
                };
                let per = |ms: f64| ms * 1e3 / b as f64;
                println!(
                "{:<6} {:>6} {:>10} {:>9} | {:>8.2} {:>8.2} {:>7.2} {:>9.2} | {:>9.2} {:>10.0} | {:>9.2} {:>9.2} | {:>6.2}x",
                name, b, bt.digis.len(), format!("{}/{}", ours.medium_modules, ours.fallback_modules),
                per(tc), per(tf), per(tq), per(tt), per(tg), b as f64 / tg * 1e3, per(sf), per(st), st / tg
            );
                out.push_str(&format!(
                    "{name},{b},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.0},{:.3},{:.3},{:.3}\n",
                    bt.digis.len(),
                    ours.medium_modules,
                    ours.fallback_modules,
                    per(tc),
                    per(tf),
                    per(tq),
                    per(tt),
                    per(tg),
                    b as f64 / tg * 1e3,
                    per(sf),
                    per(st),
                    st / tg
                ));
            }
        }
    }

    // (2) Latency of one Run-3-like event.
    for v in a.variants.iter().filter(|_| on("2")) {
        println!(
            "\n(2) one run3 event ({} digis): where the time goes [{v}]",
            run3[0].len()
        );
        let one = batch(&run3, &run3_want, 1);
        let d1 = DeviceDigis::upload(g, &one.digis, &one.offsets)?;
        let mut c1 = Clusterer::new(g, &geo, one.digis.len(), 1)?;
        apply_variant(&mut c1, v)?;
        c1.run_graph(&d1, Some(cut))?;
        check_exact(&format!("run3 x1 [{v}]"), &c1.results(&d1)?, &one.want)?;
        let ops = time_ops(g, a.reps, &mut c1, &d1, cut)?;
        println!(
        "  GPU µs, run() with an event between the steps: memset+count {:.1}, sort + small-module passes (side by side) {:.1}, shared-memory kernel {:.1}, fallback {:.1}, larger-module cut {:.1}; whole {:.1}",
        ops[0], ops[1], ops[2], ops[3], ops[4], ops[5]
    );
        let [_, _, _, run_ms] = time_steps(g, a.reps, &mut c1, &d1, Some(cut), false)?;
        let graph_ms = time_graph(g, a.reps, &mut c1, &d1, Some(cut))?;
        println!(
            "  GPU µs, whole chain: run() {:.1}, run_graph() {:.1}",
            run_ms * 1e3,
            graph_ms * 1e3
        );
        let w_run = wall(a.reps, g, || Ok(c1.run(&d1, Some(cut))?))?;
        let w_graph = wall(a.reps, g, || Ok(c1.run_graph(&d1, Some(cut))?))?;
        let mut d1b = DeviceDigis::with_capacity(g, one.digis.len(), 1)?;
        let mut res = c1.results(&d1)?;
        let w_e2e = wall(a.reps, g, || {
            d1b.copy_from(g, &one.digis, &one.offsets)?;
            c1.run_graph(&d1b, Some(cut))?;
            c1.results_into(&d1b, &mut res)?;
            Ok(())
        })?;
        check_exact("run3 x1 end to end", &res, &one.want)?;
        println!(
        "  host µs (launch + synchronise): run() {w_run:.1}, run_graph() {w_graph:.1}; from host memory (copy in, graph, copy out) {w_e2e:.1}"
    );
        out.push_str(&format!(
        "latency,run3,{v},1,ops_us,{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},gpu_run_us,{:.2},gpu_graph_us,{:.2},host_run_us,{w_run:.2},host_graph_us,{w_graph:.2},host_e2e_us,{w_e2e:.2}\n",
        ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], run_ms * 1e3, graph_ms * 1e3
    ));
    }

    // (3) Pass configurations: warp-pass capacity × block-pass threads.
    if on("3") {
        println!("\n(3) pass configurations, run3, µs per event (GPU): sort + small passes, shared, cut | graph chain");
        for &b in &[1usize, 2, 8, 128] {
            let bt = batch(&run3, &run3_want, b);
            let d = DeviceDigis::upload(g, &bt.digis, &bt.offsets)?;
            // Since issue 13's second step the passes run side by side (sorted by size first),
            // so the rows measure how the passes share the GPU.
            for (warp, mid, threads) in [
                (128u32, None, 256u32),
                (128, None, 512),
                (64, None, 512),
                (32, None, 512),
                (32, None, 1024),
                (0, None, 256),
                (32, Some((128u32, 128u32)), 256),
                (32, Some((128, 128)), 512),
                (32, Some((128, 128)), 1024),
                (32, Some((128, 64)), 512),
                (32, Some((128, 64)), 1024),
                (32, Some((64, 64)), 512),
                (32, Some((64, 64)), 1024),
                (32, Some((256, 256)), 1024),
                (64, Some((256, 256)), 1024),
                (64, Some((128, 128)), 512),
            ] {
                let mut c = Clusterer::new(g, &geo, bt.digis.len(), b)?;
                c.tune(&ClusterTuning {
                    warp_capacity: Some(warp),
                    mid_pass: Some(mid),
                    small_threads: Some(threads),
                    ..Default::default()
                })?;
                c.run_graph(&d, Some(cut))?;
                check_exact(
                    &format!("run3 x{b} passes {:?}", c.passes()),
                    &c.results(&d)?,
                    &bt.want,
                )?;
                let o = time_ops(g, a.reps, &mut c, &d, cut)?;
                let tg = time_graph(g, a.reps, &mut c, &d, Some(cut))? * 1e3;
                let per = |us: f64| us / b as f64;
                let mids = mid.map_or("-".to_string(), |(c, t)| format!("{c}/{t}"));
                println!(
                "  x{b:<4} warp pass {warp:>3}, middle pass {mids:>7}, last pass {threads:>4} threads: {:>8.2} {:>7.2} {:>7.2} | {:>8.2}",
                per(o[1]), per(o[2]), per(o[4]), per(tg)
            );
                out.push_str(&format!(
                    "passes,run3,{b},{warp},{mids},{threads},{:.3},{:.3},{:.3},{:.3}\n",
                    per(o[1]),
                    per(o[2]),
                    per(o[4]),
                    per(tg)
                ));
            }
        }
    }

    // (4) Throughput: lanes × events per launch, device-resident.
    let max_lanes = a.lanes.iter().copied().max().unwrap_or(1);
    let forks: Vec<Arc<GpuContext>> = (0..max_lanes)
        .map(|_| g.fork().map(Arc::new))
        .collect::<Result<_, _>>()?;
    for v in a.variants.iter().filter(|_| on("4")) {
        println!("\n(4) events/s, device-resident, one host thread: lanes (streams) × events per launch (graph per lane; a lane waits for its previous launch before the next) [{v}]");
        print!("{:>6}", "lanes");
        for &b in &a.per_launch {
            print!(" {b:>8}");
        }
        println!();
        for &lanes in &a.lanes {
            print!("{lanes:>6}");
            let mut host = String::new();
            for &b in &a.per_launch {
                let bt = batch(&run3, &run3_want, b);
                let mut ls = Vec::new();
                for f in &forks[..lanes] {
                    let d = DeviceDigis::upload(f, &bt.digis, &bt.offsets)?;
                    let c = clusterer_for(f, &geo, bt.digis.len(), b, v)?;
                    ls.push((f, d, c, None::<CudaEvent>));
                }
                // Warm-up (captures the graphs) and a check of every lane.
                for (f, d, c, _) in ls.iter_mut() {
                    c.run_graph(d, Some(cut))?;
                    f.synchronize()?;
                    if b <= 32 || lanes == 1 {
                        check_exact(&format!("lanes {lanes} x{b}"), &c.results(d)?, &bt.want)?;
                    }
                }
                let r = launches_per_second(&mut ls, a.seconds, cut)?;
                let rate = b as f64 * r.per_second;
                print!(" {rate:>8.0}");
                std::io::stdout().flush()?;
                host.push_str(&format!(" {b}:{:.1}/{:.1}", r.launch_us, r.wait_us));
                out.push_str(&format!(
                    "throughput,run3,{v},{lanes},{b},{rate:.0},{:.2},{:.2}\n",
                    r.launch_us, r.wait_us
                ));
            }
            println!();
            println!(
                "{:>6} host µs per launch, in launch calls / waiting:{host}",
                ""
            );
        }
    }

    // (4b) One event per launch with the throughput configuration on every lane.
    if on("4b") {
        println!("\n(4b) events/s at 1 event per launch with the throughput configuration (warp pass 128, no middle pass, block pass 256 threads) on every lane");
        for &lanes in &a.lanes {
            let bt = batch(&run3, &run3_want, 1);
            let mut ls = Vec::new();
            for f in &forks[..lanes] {
                let d = DeviceDigis::upload(f, &bt.digis, &bt.offsets)?;
                let mut c = Clusterer::new(f, &geo, bt.digis.len(), 1)?;
                c.tune(&ClusterTuning {
                    warp_capacity: Some(128),
                    mid_pass: Some(None),
                    small_threads: Some(256),
                    ..Default::default()
                })?;
                c.run_graph(&d, Some(cut))?;
                check_exact(&format!("4b lanes {lanes}"), &c.results(&d)?, &bt.want)?;
                ls.push((f, d, c, None::<CudaEvent>));
            }
            let rate = launches_per_second(&mut ls, a.seconds, cut)?.per_second;
            println!("  {lanes:>2} lanes: {rate:>8.0} events/s");
            out.push_str(&format!("throughput_cfg128,run3,{lanes},1,{rate:.0}\n"));
        }
    }

    // (5) From host memory through ClusterQueue (copy in, graph, copy out).
    if on("5") {
        println!("\n(5) events/s from host memory, ClusterQueue (copies in and out included; pageable host memory)");
        for &lanes in &[1usize, 2, 4, 8] {
            if lanes > forks.len() {
                continue;
            }
            for &b in &[1usize, 8, 32, 128] {
                let bt = batch(&run3, &run3_want, b);
                let mut q = ClusterQueue::new(&forks[..lanes], &geo, bt.digis.len(), b, Some(cut))?;
                let t0 = Instant::now();
                let mut n = 0u64;
                let mut done = Vec::new();
                while t0.elapsed().as_secs_f64() < a.seconds || n < 2 * lanes as u64 {
                    if let Some(r) = q.submit(&bt.digis, &bt.offsets)? {
                        done.push(r);
                    }
                    n += 1;
                    if done.len() > 2 {
                        done.clear();
                    }
                }
                let rest = q.finish()?;
                let rate = (n * b as u64) as f64 / t0.elapsed().as_secs_f64();
                if let Some((_, r)) = rest.last() {
                    check_exact(&format!("queue {lanes} x{b}"), r, &bt.want)?;
                }
                println!("  {lanes} lanes, {b:>4} events per launch: {rate:>8.0} events/s");
                out.push_str(&format!("queue,run3,{lanes},{b},{rate:.0}\n"));
            }
        }
    }

    // (6) Dense events: each variant, split by stream operation.
    for v in a.dense_variants.iter().filter(|_| on("6")) {
        println!("\n(6) dense events [{v}], µs per event (GPU): memset+count, sort + small passes, shared-memory kernel, fallback, larger-module cut | graph chain, events/s");
        for &b in a.batches.iter().filter(|&&b| b <= 8) {
            let bt = batch(&dense, &dense_want, b);
            let d = DeviceDigis::upload(g, &bt.digis, &bt.offsets)?;
            let mut c = clusterer_for(g, &geo, bt.digis.len(), b, v)?;
            c.poison_outputs()?;
            c.run_graph(&d, Some(cut))?;
            check_exact(&format!("dense x{b} [{v}]"), &c.results(&d)?, &bt.want)?;
            let o = time_ops(g, a.reps, &mut c, &d, cut)?;
            let tg = time_graph(g, a.reps, &mut c, &d, Some(cut))? * 1e3 / b as f64;
            let per = |us: f64| us / b as f64;
            println!(
                "  x{b:<3} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} | {:>8.1} {:>8.0}",
                per(o[0]),
                per(o[1]),
                per(o[2]),
                per(o[3]),
                per(o[4]),
                tg,
                1e6 / tg
            );
            out.push_str(&format!(
                "dense,{v},{b},{:.2},{:.2},{:.2},{:.2},{:.2},{tg:.2}\n",
                per(o[0]),
                per(o[1]),
                per(o[2]),
                per(o[3]),
                per(o[4])
            ));
        }
    }
    if let Some(path) = a.csv {
        std::fs::File::create(&path)?.write_all(out.as_bytes())?;
    }
    Ok(())
}
