//! bench-seeding: milliseconds per event of the seeding chain, per stage and total,
//! device-resident (spacepoints already on the GPU, seeds and parameters left there), on
//! generated events from about 10k spacepoints up to ⟨μ⟩ = 300, side by side with the CPU
//! backend (the sequential oracle, one core) on the same machine; then events in flight:
//! ⟨μ⟩ = 200 events per second with one event per call and with batches of events per call.
//!
//! For each size: generate the event, run the CPU backend once (timed with `Instant`), run
//! the GPU chain and check seeds, parameters and counts against it (no time is printed for a
//! wrong result), warm up, then time `reps` runs: per-stage GPU times from CUDA events around
//! each stage's launches (medians), the GPU time of the whole chain (first to last event),
//! and, in separate runs without events, the wall time of the whole call with `Instant`
//! (median; it includes the launches and the one read of the counts at the end). The
//! workspace is reused from call to call (no allocation per call).
//!
//! In flight: `--events` distinct ⟨μ⟩ = 200 events (each checked: batch == one per call,
//! the first against the CPU backend); for each batch size B, the wall time of one call that
//! seeds B device-resident events (median over `reps`), as events/s. Then the host API
//! (`Backend::seed_events` vs `Backend::seed` per event: upload, chain, download).
//!
//! Usage: `bench-seeding [--mu 50,100,200,300] [--reps 30] [--events 32]
//! [--batches 1,4,16,32,64,128] [--csv FILE] [--tune KEY=V,..]`. `--tune` sets fields of the
//! chain's `SeedTuning` (`threads`, `doublet_threads`, `select_threads`,
//! `bin_count_threads`, `triplet_blocks_per_sm`) for the workspace and the backend; results
//! are checked the same way.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use detkit::seeding::{
    as_words, gen, SeedTuning, SeedingSettings, SeedingWorkspace, SpacePoint, StageTimes,
};
use detkit::{driver_present, Backend};
use detkit_tests::median;

fn main() -> Result<()> {
    let mut mus = vec![50.0f64, 100.0, 150.0, 200.0, 250.0, 300.0];
    let mut reps = 30usize;
    let mut n_events = 32usize;
    let mut batches = vec![1usize, 4, 16, 32, 64, 128];
    let mut csv = None;
    let mut tuning = SeedTuning::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--mu" => mus = detkit_tests::parse_list(&args.next().context("--mu needs a list")?)?,
            "--reps" => reps = args.next().context("--reps needs a number")?.parse()?,
            "--events" => n_events = args.next().context("--events needs a number")?.parse()?,
            "--batches" => {
                batches = detkit_tests::parse_list(&args.next().context("--batches needs a list")?)?
            }
            "--csv" => csv = Some(args.next().context("--csv needs a file")?),
            "--tune" => tuning = parse_tuning(&args.next().context("--tune needs KEY=V,..")?)?,
            other => bail!("unknown argument {other}"),
        }
    }
    if !driver_present() {
        println!("skipped: no CUDA driver");
        return Ok(());
    }
    let backend = Backend::cuda(0)
        .context("bench-seeding needs a CUDA device")?
        .with_seed_tuning(&tuning)?;
    let g = backend.gpu().expect("cuda");
    println!("# device: {}; kernels: {}", g.device_name(), g.image());
    let cfg = SeedingSettings::default().to_config()?;
    let mut rows = Vec::new();
    if tuning != SeedTuning::default() {
        println!("# tuning: {tuning:?}");
    }
    let mut ws = SeedingWorkspace::tuned(&tuning)?;
    for &mu in &mus {
        let ev = gen::generate(1000 + mu as u64, mu, true);
        let sps = &ev.spacepoints;
        let n = sps.len();
        let t = Instant::now();
        let (want, stats) = detkit::seeding::cpu::seeds(&cfg, sps);
        let want_params = detkit::seeding::cpu::params(&cfg, sps, &want);
        let cpu_ms = t.elapsed().as_secs_f64() * 1e3;
        let d_sps = g.upload(as_words(sps))?;
        let offsets = [0, n];
        let got = g.seed_batch_device(&mut ws, &cfg, &d_sps, &offsets, None)?;
        let out = g.download_batch(&ws)?;
        let (seeds, params) = &out[0];
        if let Err(m) = detkit_tests::exact("seeds", seeds, &want) {
            bail!("CHECK FAILED mu={mu}: {m}");
        }
        if let Err(m) = detkit_tests::exact("params", params, &want_params) {
            bail!("CHECK FAILED mu={mu}: {m}");
        }
        if got[0] != stats {
            bail!("CHECK FAILED mu={mu}: stats {:?} want {:?}", got[0], stats);
        }
        for _ in 0..3 {
            g.seed_batch_device(&mut ws, &cfg, &d_sps, &offsets, None)?;
        }
        let retries0 = ws.retries();
        let mut stage_ms: Vec<(&'static str, Vec<f64>)> = Vec::new();
        let mut chain = Vec::new();
        for _ in 0..reps {
            let mut tm = StageTimes::default();
            g.seed_batch_device(&mut ws, &cfg, &d_sps, &offsets, Some(&mut tm))?;
            chain.push(tm.chain_ms);
            // Stages that appear twice (binning) are summed.
            let mut merged: Vec<(&'static str, f64)> = Vec::new();
            for (name, ms) in tm.stages {
                match merged.iter_mut().find(|(m, _)| *m == name) {
                    Some(e) => e.1 += ms,
                    None => merged.push((name, ms)),
                }
            }
            for (name, ms) in merged {
                match stage_ms.iter_mut().find(|(m, _)| *m == name) {
                    Some(e) => e.1.push(ms),
                    None => stage_ms.push((name, vec![ms])),
                }
            }
        }
        let mut wall = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            g.seed_batch_device(&mut ws, &cfg, &d_sps, &offsets, None)?;
            wall.push(t.elapsed().as_secs_f64() * 1e3);
        }
        if ws.retries() != retries0 {
            bail!(
                "capacity retries during timing: {} -> {}",
                retries0,
                ws.retries()
            );
        }
        let wall_ms = median(wall);
        let chain_ms = median(chain);
        let phys = gen::physics(&ev, seeds, params);
        println!(
            "\n## mu={mu}: {n} spacepoints, {} + {} doublets (mb + mt), {} triplets, {} seeds",
            stats.mid_bot, stats.mid_top, stats.triplets, stats.seeds
        );
        println!("{:<18} {:>10}", "stage", "GPU ms");
        let mut sum = 0.0;
        for (name, v) in &stage_ms {
            let m = median(v.clone());
            sum += m;
            println!("{name:<18} {m:>10.4}");
            rows.push(format!("seeding,{mu},{n},{name},{m:.5}"));
        }
        println!("{:<18} {sum:>10.4}", "sum of stages");
        println!("{:<18} {chain_ms:>10.4}", "chain (GPU)");
        println!("{:<18} {wall_ms:>10.4}", "wall (call)");
        println!("{:<18} {:>10.3}", "wall / chain", wall_ms / chain_ms);
        println!("{:<18} {cpu_ms:>10.2}", "CPU backend");
        println!(
            "speed-up (CPU backend / GPU wall): {:.0}x",
            cpu_ms / wall_ms
        );
        println!("physics: {phys}");
        rows.push(format!("seeding,{mu},{n},sum_of_stages,{sum:.5}"));
        rows.push(format!("seeding,{mu},{n},chain_gpu,{chain_ms:.5}"));
        rows.push(format!("seeding,{mu},{n},gpu_wall,{wall_ms:.5}"));
        rows.push(format!("seeding,{mu},{n},cpu_backend,{cpu_ms:.3}"));
        rows.push(format!(
            "seeding,{mu},{n},efficiency_pt1_barrel,{:.5}",
            phys.efficiency()
        ));
        rows.push(format!(
            "seeding,{mu},{n},fake_rate,{:.5}",
            phys.fake_rate()
        ));
    }
    println!(
        "# capacity factors after the sizes: {:?}, retries {}",
        ws.capacity_factors(),
        ws.retries()
    );

    if n_events > 0 && !batches.is_empty() {
        in_flight(
            g, &backend, &cfg, &mut ws, n_events, &batches, reps, &mut rows,
        )?;
    }

    if let Some(path) = csv {
        let mut f = std::fs::File::create(&path).with_context(|| format!("creating {path}"))?;
        writeln!(f, "family,mu,spacepoints,stage,value")?;
        for r in rows {
            writeln!(f, "{r}")?;
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn in_flight(
    g: &detkit::GpuContext,
    backend: &Backend,
    cfg: &detkit::seeding::SeedingConfig,
    ws: &mut SeedingWorkspace,
    n_events: usize,
    batches: &[usize],
    reps: usize,
    rows: &mut Vec<String>,
) -> Result<()> {
    let events: Vec<Vec<SpacePoint>> = (0..n_events)
        .map(|i| gen::generate(5000 + i as u64, 200.0, true).spacepoints)
        .collect();
    let sizes: Vec<usize> = events.iter().map(|e| e.len()).collect();
    println!(
        "\n## in flight: {n_events} distinct mu=200 events, {}..{} spacepoints (mean {:.0})",
        sizes.iter().min().unwrap_or(&0),
        sizes.iter().max().unwrap_or(&0),
        sizes.iter().sum::<usize>() as f64 / n_events as f64
    );
    // One per call: each event's own device buffer; reference results for the checks.
    let d_one: Vec<_> = events
        .iter()
        .map(|e| g.upload(as_words(e)))
        .collect::<Result<_, _>>()?;
    let mut reference = Vec::new();
    for (i, (e, d)) in events.iter().zip(&d_one).enumerate() {
        let st = g.seed_batch_device(ws, cfg, d, &[0, e.len()], None)?;
        let out = g.download_batch(ws)?.remove(0);
        if i == 0 {
            let (want, stats) = detkit::seeding::cpu::seeds(cfg, e);
            if let Err(m) = detkit_tests::exact("seeds", &out.0, &want) {
                bail!("CHECK FAILED in flight event 0: {m}");
            }
            if st[0] != stats {
                bail!("CHECK FAILED in flight event 0: stats");
            }
        }
        reference.push((st[0], out));
    }
    println!(
        "{:<28} {:>12} {:>12} {:>12}",
        "events per call", "ms per call", "ms per event", "events/s"
    );
    for &b in batches {
        let (ms, label) = if b == 1 {
            // One event per call, cycling through the distinct events.
            let mut t = Vec::new();
            for r in 0..reps.max(n_events) {
                let i = r % n_events;
                let s = Instant::now();
                g.seed_batch_device(ws, cfg, &d_one[i], &[0, events[i].len()], None)?;
                t.push(s.elapsed().as_secs_f64() * 1e3);
            }
            (median(t), "1 (one call per event)".to_string())
        } else {
            let mut all = Vec::new();
            let mut offsets = vec![0usize];
            for j in 0..b {
                all.extend_from_slice(&events[j % n_events]);
                offsets.push(all.len());
            }
            let d = g.upload(as_words(&all))?;
            let st = g.seed_batch_device(ws, cfg, &d, &offsets, None)?;
            let out = g.download_batch(ws)?;
            for j in 0..b {
                let (rs, ro) = &reference[j % n_events];
                if st[j] != *rs || out[j].0 != ro.0 || out[j].1 != ro.1 {
                    bail!("CHECK FAILED batch {b}: event {j} differs from one per call");
                }
            }
            let mut t = Vec::new();
            for _ in 0..reps.clamp(5, 20) {
                let s = Instant::now();
                g.seed_batch_device(ws, cfg, &d, &offsets, None)?;
                t.push(s.elapsed().as_secs_f64() * 1e3);
            }
            // Where a batch's GPU time goes: per-stage medians per call (binning summed).
            let mut per_stage: Vec<(&'static str, Vec<f64>)> = Vec::new();
            for _ in 0..reps.clamp(5, 20) {
                let mut tm = StageTimes::default();
                g.seed_batch_device(ws, cfg, &d, &offsets, Some(&mut tm))?;
                let mut merged: Vec<(&'static str, f64)> = Vec::new();
                for (name, ms) in tm.stages.into_iter().chain([("chain", tm.chain_ms)]) {
                    match merged.iter_mut().find(|(m, _)| *m == name) {
                        Some(e) => e.1 += ms,
                        None => merged.push((name, ms)),
                    }
                }
                for (name, ms) in merged {
                    match per_stage.iter_mut().find(|(m, _)| *m == name) {
                        Some(e) => e.1.push(ms),
                        None => per_stage.push((name, vec![ms])),
                    }
                }
            }
            let parts: Vec<String> = per_stage
                .iter()
                .map(|(name, v)| format!("{name} {:.4}", median(v.clone())))
                .collect();
            println!("  batch {b}, GPU ms per call: {}", parts.join(", "));
            (median(t), format!("{b}"))
        };
        let per = ms / b as f64;
        println!("{label:<28} {ms:>12.4} {per:>12.4} {:>12.0}", 1e3 / per);
        rows.push(format!("seeding_in_flight,200,{b},ms_per_call,{ms:.5}"));
        rows.push(format!(
            "seeding_in_flight,200,{b},events_per_s,{:.1}",
            1e3 / per
        ));
    }
    // Host API: upload, chain, download, per event vs all events in one call.
    let refs: Vec<&[SpacePoint]> = events.iter().map(|v| v.as_slice()).collect();
    let batch = backend.seed_events(&refs, cfg)?;
    for (j, o) in batch.iter().enumerate() {
        if o.stats != reference[j].0 || o.seeds != reference[j].1 .0 {
            bail!("CHECK FAILED seed_events: event {j}");
        }
    }
    let mut t_one = Vec::new();
    let mut t_all = Vec::new();
    for _ in 0..3 {
        let s = Instant::now();
        for e in &refs {
            backend.seed(e, cfg)?;
        }
        t_one.push(s.elapsed().as_secs_f64() * 1e3);
        let s = Instant::now();
        backend.seed_events(&refs, cfg)?;
        t_all.push(s.elapsed().as_secs_f64() * 1e3);
    }
    let (one, all) = (median(t_one), median(t_all));
    println!(
        "host API, {n_events} events: Backend::seed per event {:.0} events/s; Backend::seed_events {:.0} events/s",
        n_events as f64 * 1e3 / one,
        n_events as f64 * 1e3 / all
    );
    rows.push(format!(
        "seeding_in_flight,200,host_seed,events_per_s,{:.1}",
        n_events as f64 * 1e3 / one
    ));
    rows.push(format!(
        "seeding_in_flight,200,host_seed_events,events_per_s,{:.1}",
        n_events as f64 * 1e3 / all
    ));
    Ok(())
}

/// `KEY=V,..` over the default `SeedTuning` (the launch shapes; checked by `plan`).
fn parse_tuning(text: &str) -> Result<SeedTuning> {
    let mut t = SeedTuning::default();
    for kv in text.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').context("--tune wants KEY=V")?;
        let v: u32 = v.parse().with_context(|| format!("--tune {k}: {v}"))?;
        match k {
            "threads" => t.threads = v,
            "doublet_threads" => t.doublet_threads = v,
            "select_threads" => t.select_threads = v,
            "bin_count_threads" => t.bin_count_threads = v,
            "triplet_blocks_per_sm" => t.triplet_blocks_per_sm = v,
            other => bail!("--tune: unknown key {other}"),
        }
    }
    t.plan()?;
    Ok(t)
}
