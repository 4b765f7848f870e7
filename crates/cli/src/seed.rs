//! `detkit seed`: traccc-style track seeding (issue 5).
//!
//! `detkit seed --input spacepoints.csv --output seeds.csv [--config seeding.toml]
//! [--params params.csv] [--backend auto|cpu|cuda]`
//! - input: CSV with a header starting `x,y,z` (mm, global frame), extra columns ignored;
//! - output: `bottom,middle,top,weight,z_vertex`, indices are 0-based input data rows;
//! - `--params`: `seed,loc0,loc1,phi,theta,qop` per seed (see README / docs/seeding.md);
//! - `--config`: flat TOML `key = value` over traccc's defaults (keys: the fields of
//!   `detkit::seeding::SeedingSettings`).

use std::fmt::Write as _;

use anyhow::{bail, Context, Result};
use detkit::seeding::{gen, SeedingSettings};
use detkit::{cpu, Backend};

use crate::{backend_from, timed, Line};

const USAGE: &str = "usage: detkit seed --input spacepoints.csv --output seeds.csv \
[--config seeding.toml] [--params params.csv] [--backend auto|cpu|cuda]";

/// Runs `detkit seed ARGS`.
pub fn main(args: &[String]) -> Result<()> {
    let (mut input, mut output, mut config, mut params, mut backend) =
        (None, None, None, None, "auto".to_string());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .with_context(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--input" => input = Some(val()?.clone()),
            "--output" => output = Some(val()?.clone()),
            "--config" => config = Some(val()?.clone()),
            "--params" => params = Some(val()?.clone()),
            "--backend" => backend = val()?.clone(),
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }
    let (Some(input), Some(output)) = (input, output) else {
        bail!("--input and --output are required\n{USAGE}");
    };
    let settings = match &config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
            SeedingSettings::from_toml(&text).with_context(|| format!("in {path}"))?
        }
        None => SeedingSettings::default(),
    };
    let cfg = settings.to_config()?;
    let text = std::fs::read_to_string(&input).with_context(|| format!("reading {input}"))?;
    let sps = gen::read_csv(&text).with_context(|| format!("in {input}"))?;
    let b = backend_from(&backend)?;
    eprintln!("{}", b.description());
    let (out, secs) = timed(|| b.seed(&sps, &cfg))?;
    let mut csv = String::from("bottom,middle,top,weight,z_vertex\n");
    for s in &out.seeds {
        writeln!(
            csv,
            "{},{},{},{},{}",
            s.bottom, s.middle, s.top, s.weight, s.z_vertex
        )?;
    }
    std::fs::write(&output, csv).with_context(|| format!("writing {output}"))?;
    if let Some(path) = params {
        let mut csv = String::from("seed,loc0,loc1,phi,theta,qop\n");
        for (i, p) in out.params.iter().enumerate() {
            writeln!(
                csv,
                "{i},{},{},{},{},{}",
                p.loc0, p.loc1, p.phi, p.theta, p.qop
            )?;
        }
        std::fs::write(&path, csv).with_context(|| format!("writing {path}"))?;
    }
    eprintln!(
        "{} spacepoints ({} invalid, dropped), {} middle-bottom and {} middle-top doublets, \
         {} triplets, {} seeds in {:.1} ms",
        out.stats.spacepoints,
        out.stats.invalid,
        out.stats.mid_bot,
        out.stats.mid_top,
        out.stats.triplets,
        out.stats.seeds,
        secs * 1e3
    );
    Ok(())
}

/// The demo line of this family: a generated ⟨μ⟩ = 200 event, checked against the oracle,
/// with the physics figures printed.
pub fn demo(backend: &Backend) -> Result<Vec<Line>> {
    let cfg = SeedingSettings::default().to_config()?;
    let ev = gen::generate(2026, 200.0, true);
    let (out, secs) = timed(|| backend.seed(&ev.spacepoints, &cfg))?;
    let (want, stats) = cpu::seeding::seeds(&cfg, &ev.spacepoints);
    let want_params = cpu::seeding::params(&cfg, &ev.spacepoints, &want);
    let ok = out.seeds == want && out.params == want_params && out.stats == stats;
    eprintln!(
        "seeding: {} spacepoints, {} seeds; {}",
        ev.spacepoints.len(),
        out.seeds.len(),
        gen::physics(&ev, &out.seeds, &out.params)
    );
    Ok(vec![Line {
        primitive: "seeding (mu=200 event)",
        ok,
        secs,
        items: ev.spacepoints.len(),
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_command_writes_the_documented_formats() {
        let ev = gen::generate(3, 2.0, true);
        let dir = std::env::temp_dir().join(format!("detkit-seed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (inp, out, par, cfgf) = (
            dir.join("sp.csv"),
            dir.join("seeds.csv"),
            dir.join("params.csv"),
            dir.join("seeding.toml"),
        );
        let mut csv = String::from("x,y,z,particle\n");
        for (s, t) in ev.spacepoints.iter().zip(&ev.truth) {
            csv.push_str(&format!("{},{},{},{t}\n", s.x, s.y, s.z));
        }
        std::fs::write(&inp, csv).unwrap();
        std::fs::write(&cfgf, "max_seeds_per_spm = 2 # fewer\n").unwrap();
        let args: Vec<String> = [
            "--input",
            inp.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--params",
            par.to_str().unwrap(),
            "--config",
            cfgf.to_str().unwrap(),
            "--backend",
            "cpu",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        main(&args).unwrap();
        let seeds = std::fs::read_to_string(&out).unwrap();
        let params = std::fs::read_to_string(&par).unwrap();
        let mut lines = seeds.lines();
        assert_eq!(lines.next(), Some("bottom,middle,top,weight,z_vertex"));
        assert_eq!(params.lines().next(), Some("seed,loc0,loc1,phi,theta,qop"));
        // The CSV round trip of f32 is exact (shortest representation), so the rows equal
        // the library's result on the same numbers.
        let sps = gen::read_csv(&std::fs::read_to_string(&inp).unwrap()).unwrap();
        let cfg = SeedingSettings {
            max_seeds_per_spm: 2,
            ..Default::default()
        }
        .to_config()
        .unwrap();
        let want = Backend::cpu().seed(&sps, &cfg).unwrap();
        assert!(!want.seeds.is_empty());
        let rows: Vec<&str> = lines.collect();
        assert_eq!(rows.len(), want.seeds.len());
        for (row, s) in rows.iter().zip(&want.seeds) {
            assert_eq!(
                *row,
                format!(
                    "{},{},{},{},{}",
                    s.bottom, s.middle, s.top, s.weight, s.z_vertex
                )
            );
        }
        assert_eq!(params.lines().count(), want.seeds.len() + 1);
        assert!(main(&["--input".to_string()]).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
