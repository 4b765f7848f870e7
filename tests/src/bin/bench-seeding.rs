//! bench-seeding: milliseconds per event of the seeding chain, per stage and total,
//! device-resident (spacepoints already on the GPU, seeds and parameters left there), on
//! generated events from about 10k spacepoints up to ⟨μ⟩ = 200 (and 300), side by side with
//! the CPU backend (the sequential oracle, one core) on the same machine.
//!
//! For each size: generate the event, run the CPU backend once (timed with `Instant`), run
//! the GPU chain and check seeds, parameters and counts against it (no time is printed for a
//! wrong result), warm up, then time `reps` runs: per-stage GPU times from CUDA events around
//! each stage's launches (medians), and the wall time of the whole call with `Instant`
//! (median; it includes the three host synchronisations that read the doublet, triplet and
//! seed counts, and the stream-ordered allocations). Physics figures from truth are printed.
//!
//! Usage: `bench-seeding [--mu 50,100,200,300] [--reps 30] [--csv FILE]`

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use detkit::seeding::{as_words, gen, SeedingSettings, StageTimes};
use detkit::{driver_present, Backend};
use detkit_tests::median;

fn main() -> Result<()> {
    let mut mus = vec![50.0f64, 100.0, 150.0, 200.0, 300.0];
    let mut reps = 30usize;
    let mut csv = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--mu" => mus = detkit_tests::parse_list(&args.next().context("--mu needs a list")?)?,
            "--reps" => reps = args.next().context("--reps needs a number")?.parse()?,
            "--csv" => csv = Some(args.next().context("--csv needs a file")?),
            other => bail!("unknown argument {other}"),
        }
    }
    if !driver_present() {
        println!("skipped: no CUDA driver");
        return Ok(());
    }
    let backend = Backend::cuda(0).context("bench-seeding needs a CUDA device")?;
    let g = backend.gpu().expect("cuda");
    println!("# device: {}", g.device_name());
    let cfg = SeedingSettings::default().to_config()?;
    let mut rows = Vec::new();
    for &mu in &mus {
        let ev = gen::generate(1000 + mu as u64, mu, true);
        let sps = &ev.spacepoints;
        let n = sps.len();
        let t = Instant::now();
        let (want, stats) = detkit::seeding::cpu::seeds(&cfg, sps);
        let want_params = detkit::seeding::cpu::params(&cfg, sps, &want);
        let cpu_ms = t.elapsed().as_secs_f64() * 1e3;
        let d_sps = g.upload(as_words(sps))?;
        let out = g.seed_device(&cfg, &d_sps, n, None)?;
        let (seeds, params) = g.download_seeds(&out)?;
        if let Err(m) = detkit_tests::exact("seeds", &seeds, &want) {
            bail!("CHECK FAILED mu={mu}: {m}");
        }
        if let Err(m) = detkit_tests::exact("params", &params, &want_params) {
            bail!("CHECK FAILED mu={mu}: {m}");
        }
        if out.stats != stats {
            bail!(
                "CHECK FAILED mu={mu}: stats {:?} want {:?}",
                out.stats,
                stats
            );
        }
        drop(out);
        for _ in 0..3 {
            g.seed_device(&cfg, &d_sps, n, None)?;
        }
        g.synchronize()?;
        let mut stage_ms: Vec<(&'static str, Vec<f64>)> = Vec::new();
        let mut wall = Vec::new();
        for _ in 0..reps {
            let mut tm = StageTimes::default();
            let t = Instant::now();
            let o = g.seed_device(&cfg, &d_sps, n, Some(&mut tm))?;
            g.synchronize()?;
            wall.push(t.elapsed().as_secs_f64() * 1e3);
            drop(o);
            // Stages that appear twice (binning, selection) are summed.
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
        let wall_ms = median(wall);
        let phys = gen::physics(&ev, &seeds, &params);
        println!(
            "\n## mu={mu}: {n} spacepoints, {} doublets (mb), {} triplets, {} seeds",
            stats.mid_bot, stats.triplets, stats.seeds
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
        println!("{:<18} {wall_ms:>10.4}", "wall (call)");
        println!("{:<18} {cpu_ms:>10.2}", "CPU backend");
        println!(
            "speed-up (CPU backend / GPU wall): {:.0}x",
            cpu_ms / wall_ms
        );
        println!("physics: {phys}");
        rows.push(format!("seeding,{mu},{n},sum_of_stages,{sum:.5}"));
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
        rows.push(format!(
            "seeding,{mu},{n},duplicate_rate,{:.5}",
            phys.duplicate_rate()
        ));
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
