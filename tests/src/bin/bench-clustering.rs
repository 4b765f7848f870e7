//! bench-clustering: device-resident throughput of the CMS pixel clustering chain
//! (count_modules + find_clus + charge cut) on Run-3-like and dense Phase-1 events, several
//! events per launch, beside the seed's `findClus` (the faithful baseline) in the same run.
//!
//! For each case: generate the events, run both chains once and check them against the CPU
//! oracle (ours exactly; the seed's numbering is `atomicInc` order, so its partition into
//! clusters is checked), then time `reps` runs after a warm-up with CUDA events between the
//! kernels and report medians. The CPU oracle's time for one event is printed for scale.
//!
//! Usage: `bench-clustering [--reps 30] [--csv FILE] [--batches 1,8,32,128]`

use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use cudarc::driver::sys::CUevent_flags;
use detkit::clustering::{gen, Clusterer, Clusters, DeviceDigis, Digis, Geometry};
use detkit::{Backend, GpuContext};

/// Medians (ms) of: count_modules, find_clus (ours: small modules cut inline; the seed's:
/// no cut), the charge cut (ours: larger modules only; the seed's: every module), whole chain.
fn time_chain(
    g: &GpuContext,
    reps: usize,
    c: &mut Clusterer,
    d: &DeviceDigis,
    seed: bool,
) -> Result<[f64; 4]> {
    let cut = Some(c.geometry().default_cut);
    let ev = || {
        g.stream()
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
    };
    let mut t: [Vec<f64>; 4] = Default::default();
    for rep in 0..reps + 5 {
        let e0 = ev()?;
        c.count_modules(d)?;
        let e1 = ev()?;
        if seed {
            c.find_clus_seed(d)?;
        } else {
            c.find_clus(d, cut)?;
        }
        let e2 = ev()?;
        if let Some(cut) = cut {
            if seed {
                c.charge_cut(d, cut)?;
            } else {
                c.charge_cut_larger(d, cut)?;
            }
        }
        let e3 = ev()?;
        e3.synchronize()?;
        if rep >= 5 {
            t[0].push(e0.elapsed_ms(&e1)? as f64);
            t[1].push(e1.elapsed_ms(&e2)? as f64);
            t[2].push(e2.elapsed_ms(&e3)? as f64);
            t[3].push(e0.elapsed_ms(&e3)? as f64);
        }
    }
    Ok(t.map(detkit_tests::median))
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

fn main() -> Result<()> {
    let mut reps = 30usize;
    let mut csv = None;
    let mut batches = vec![1usize, 8, 32, 128];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reps" => reps = args.next().context("--reps needs a number")?.parse()?,
            "--csv" => csv = Some(args.next().context("--csv needs a file")?),
            "--batches" => {
                batches = detkit_tests::parse_list(&args.next().context("--batches needs a list")?)?
            }
            other => bail!("unknown argument `{other}`"),
        }
    }
    if !detkit::driver_present() {
        println!("skipped: no CUDA driver (libcuda not found); nothing timed");
        return Ok(());
    }
    let backend = Backend::cuda(0)?;
    let g = backend.gpu().context("cuda backend")?;
    println!("{}", backend.description());
    let geo = Geometry::phase1();
    let distinct = 16usize;
    let run3: Vec<Digis> = (0..distinct)
        .map(|s| gen::run3_event(1000 + s as u64))
        .collect();
    let dense: Vec<Digis> = (0..4).map(|s| gen::dense_event(2000 + s as u64)).collect();

    let t = Instant::now();
    let one = &run3[0];
    let _ =
        detkit::clustering::cpu::cluster(one, &[0, one.len() as u32], &geo, Some(geo.default_cut));
    let cpu_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "cpu oracle, one run3 event ({} digis): {cpu_ms:.1} ms",
        one.len()
    );

    let mut out = String::from(
        "case,events,digis,medium_modules,fallback_modules,ours_count_us,ours_find_us,ours_cut_us,ours_chain_us_per_event,ours_events_per_s,seed_find_us,seed_chain_us_per_event,seed_events_per_s,speedup_vs_seed\n",
    );
    println!(
        "{:<6} {:>6} {:>10} {:>9} | {:>9} {:>9} {:>9} {:>11} {:>11} | {:>9} {:>11} {:>11} | {:>7}",
        "case",
        "events",
        "digis",
        "fb",
        "count µs",
        "find µs",
        "cut µs",
        "µs/event",
        "events/s",
        "seed find",
        "µs/event",
        "events/s",
        "speedup"
    );
    let cases: Vec<(&str, &Vec<Digis>, Vec<usize>)> = vec![
        ("run3", &run3, batches.clone()),
        (
            "dense",
            &dense,
            batches.iter().copied().filter(|&b| b <= 8).collect(),
        ),
    ];
    for (name, pool, sizes) in cases {
        for &b in &sizes {
            let mut batch = Digis::default();
            let mut offsets = vec![0u32];
            for k in 0..b {
                batch.extend(&pool[k % pool.len()]);
                offsets.push(batch.len() as u32);
            }
            let want =
                detkit::clustering::cpu::cluster(&batch, &offsets, &geo, Some(geo.default_cut));
            let d = DeviceDigis::upload(g, &batch, &offsets)?;
            let mut c = Clusterer::new(g, &geo, batch.len(), b)?;
            c.run(&d, Some(geo.default_cut))?;
            let ours = c.results(&d)?;
            if let Err(msg) = detkit_tests::exact("clus", &ours.clus, &want.clus)
                .and_then(|_| {
                    detkit_tests::exact(
                        "clus_in_module",
                        &ours.clus_in_module,
                        &want.clus_in_module,
                    )
                })
                .and_then(|_| {
                    detkit_tests::exact("module_first", &ours.module_first, &want.module_first)
                })
            {
                bail!("CHECK FAILED {name} x{b}: {msg}");
            }
            c.count_modules(&d)?;
            c.find_clus_seed(&d)?;
            c.charge_cut(&d, geo.default_cut)?;
            same_partition(&c.results(&d)?, &want, &batch, &offsets)
                .with_context(|| format!("seed {name} x{b}"))?;

            let [tc, tf, tq, tt] = time_chain(g, reps, &mut c, &d, false)?;
            let [_, sf, _, st] = time_chain(g, reps, &mut c, &d, true)?;
            let per = |ms: f64| ms * 1e3 / b as f64;
            println!(
                "{:<6} {:>6} {:>10} {:>9} | {:>9.2} {:>9.2} {:>9.2} {:>11.2} {:>11.0} | {:>9.2} {:>11.2} {:>11.0} | {:>6.2}x",
                name, b, batch.len(), format!("{}/{}", ours.medium_modules, ours.fallback_modules), per(tc), per(tf), per(tq), per(tt), b as f64 / tt * 1e3, per(sf), per(st), b as f64 / st * 1e3, st / tt
            );
            out.push_str(&format!(
                "{name},{b},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.0},{:.3},{:.3},{:.0},{:.3}\n",
                batch.len(),
                ours.medium_modules,
                ours.fallback_modules,
                per(tc),
                per(tf),
                per(tq),
                per(tt),
                b as f64 / tt * 1e3,
                per(sf),
                per(st),
                b as f64 / st * 1e3,
                st / tt
            ));
        }
    }
    // Tuning: block size of the small-module kernel, 128 Run-3 events per launch.
    let mut batch = Digis::default();
    let mut offsets = vec![0u32];
    for k in 0..128 {
        batch.extend(&run3[k % run3.len()]);
        offsets.push(batch.len() as u32);
    }
    let d = DeviceDigis::upload(g, &batch, &offsets)?;
    let want = detkit::clustering::cpu::cluster(&batch, &offsets, &geo, Some(geo.default_cut));
    println!("tuning (run3 x128), µs/event: small-module kernel, shared-memory kernel, fallback, larger-module cut, chain");
    let cut = geo.default_cut;
    for (cap, t) in [
        (128u32, 256u32),
        (512, 256),
        (1024, 128),
        (1024, 256),
        (1024, 512),
    ] {
        let mut c = Clusterer::with_capacity(
            g,
            &geo,
            batch.len(),
            128,
            cap,
            detkit::clustering::DEFAULT_CAPACITY,
        )?;
        c.set_small_threads(t)?;
        c.run(&d, Some(cut))?;
        let r = c.results(&d)?;
        if r.clus != want.clus {
            bail!("CHECK FAILED small capacity {cap} threads {t}");
        }
        let ev = || {
            g.stream()
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        };
        let mut t5: [Vec<f64>; 5] = Default::default();
        for rep in 0..reps + 3 {
            c.count_modules(&d)?;
            let e0 = ev()?;
            c.find_clus_small(&d, Some(cut))?;
            let e1 = ev()?;
            c.find_clus_shared(&d)?;
            let e2 = ev()?;
            c.find_clus_fallback(&d)?;
            let e3 = ev()?;
            c.charge_cut_larger(&d, cut)?;
            let e4 = ev()?;
            e4.synchronize()?;
            if rep >= 3 {
                for (k, (a, b)) in [(&e0, &e1), (&e1, &e2), (&e2, &e3), (&e3, &e4), (&e0, &e4)]
                    .into_iter()
                    .enumerate()
                {
                    t5[k].push(a.elapsed_ms(b)? as f64 * 1e3 / 128.0);
                }
            }
        }
        let med = t5.map(detkit_tests::median);
        println!(
            "  small capacity {cap:>4}, {t:>3} threads ({:>5} larger modules): {:>7.2} {:>7.2} {:>7.2} {:>7.2} | {:>7.2}",
            r.medium_modules, med[0], med[1], med[2], med[3], med[4]
        );
    }
    if let Some(path) = csv {
        std::fs::File::create(&path)?.write_all(out.as_bytes())?;
    }
    Ok(())
}
