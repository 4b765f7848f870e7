//! `detkit seed`: traccc-style track seeding.
//!
//! ```text
//! detkit seed --input spacepoints.csv --output seeds.csv [--params params.csv]
//!             [--config seeding.toml] [--backend auto|cpu|cuda]
//! detkit seed generate [--mu N] [--seed S] --output spacepoints.csv [--truth truth.csv]
//! ```
//! - input: CSV with columns `x,y,z` (mm, global frame) in any order, extra columns ignored;
//! - output: `bottom,middle,top,weight,z_vertex`, indices are 0-based input data rows;
//! - `--params`: `seed,loc0,loc1,phi,theta,qop` per seed (see README / docs/seeding.md);
//! - `--config`: TOML `key = value` over traccc's defaults (keys: the fields of
//!   `detkit::seeding::SeedingSettings`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use detkit::seeding::{gen, io, SeedingSettings};
use detkit::Backend;

use crate::demo::{timed, Row};
use crate::output::{check_outputs, AtomicFile, OutputSet};
use crate::ui::Ui;
use crate::BackendChoice;

/// `detkit seed`: seed a file of spacepoints, or `generate` one.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct SeedCmd {
    #[command(subcommand)]
    sub: Option<SeedSub>,
    #[command(flatten)]
    run: SeedArgs,
}

#[derive(Subcommand, Debug)]
pub(crate) enum SeedSub {
    /// Write a generated event: pile-up vertices plus a hard scatter, helical tracks through
    /// a barrel pixel detector, hits smeared by the pixel resolution.
    Generate(GenerateArgs),
}

#[derive(Args, Debug)]
pub(crate) struct SeedArgs {
    /// Spacepoints: CSV with columns `x,y,z` (mm, global frame), extra columns ignored.
    /// Repeat for several events, each with its own `--output` (same order).
    #[arg(long = "input", required = true, value_name = "FILE")]
    inputs: Vec<PathBuf>,
    /// Seeds: CSV `bottom,middle,top,weight,z_vertex` (indices: 0-based data rows of the
    /// input; z_vertex in mm).
    /// One per `--input`.
    #[arg(long = "output", required = true, value_name = "FILE")]
    outputs: Vec<PathBuf>,
    /// Also write track parameters per seed: CSV `seed,loc0,loc1,phi,theta,qop` (mm, mm,
    /// rad, rad, e/GeV) at the bottom spacepoint (with one `--input` only).
    #[arg(long, value_name = "FILE")]
    params: Option<PathBuf>,
    /// Seeding settings: TOML `key = number` lines over traccc's defaults (e.g. `min_pt =
    /// 0.9`, GeV); an unknown key is an error.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Which implementation runs the kernels.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    /// Spread the input files over these GPUs (`all` or ordinals such as `0,1`; CUDA only).
    #[arg(long, value_name = "all|0,1")]
    devices: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct GenerateArgs {
    /// Mean number of pile-up collisions ⟨μ⟩ (e.g. 200 for the HL-LHC); a Poisson number of
    /// vertices is drawn.
    #[arg(long, default_value_t = 200.0, value_parser = parse_mu)]
    mu: f64,
    /// Random seed: the same seed gives the same event.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Spacepoints: CSV `x,y,z,var_r,var_z` (mm, mm²).
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
    /// Truth: CSV `spacepoint,particle` (0-based data row of the output; particle id, or
    /// 4294967295 for noise).
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
}

fn parse_mu(s: &str) -> std::result::Result<f64, String> {
    let mu: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(mu.is_finite() && (0.0..=10_000.0).contains(&mu)) {
        return Err(format!("{mu} is not a pile-up between 0 and 10000"));
    }
    Ok(mu)
}

/// Runs `detkit seed ...`.
pub fn run(ui: &Ui, c: SeedCmd) -> Result<()> {
    match c.sub {
        Some(SeedSub::Generate(g)) => generate(ui, g),
        None => seed(ui, c.run),
    }
}

fn seed(ui: &Ui, a: SeedArgs) -> Result<()> {
    if a.inputs.len() != a.outputs.len() {
        crate::usage_error(format!(
            "{} --input but {} --output: give one output per input, in the same order",
            a.inputs.len(),
            a.outputs.len()
        ));
    }
    if a.params.is_some() && a.inputs.len() > 1 {
        crate::usage_error("--params needs a single --input");
    }
    let mut outs: Vec<&Path> = a.outputs.iter().map(|p| p.as_path()).collect();
    outs.extend(a.params.as_deref());
    let mut ins: Vec<&Path> = a.inputs.iter().map(|p| p.as_path()).collect();
    ins.extend(a.config.as_deref());
    check_outputs(&outs, &ins)?;
    let settings = match &a.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read `{}`", path.display()))?;
            SeedingSettings::from_toml(&text).with_context(|| path.display().to_string())?
        }
        None => SeedingSettings::default(),
    };
    let cfg = settings.to_config()?;
    let pool = crate::open_pool(a.backend, a.devices.as_deref(), ui)?;
    let start = Instant::now();
    let spin = ui.spinner(&format!(
        "seeding {} file(s) on {} device(s)",
        a.inputs.len(),
        pool.len()
    ));
    let jobs: Vec<usize> = (0..a.inputs.len()).collect();
    let done = pool.map(jobs, |backend, j| {
        let params = if j == 0 { a.params.as_deref() } else { None };
        seed_file(ui, backend, &cfg, &a.inputs[j], &a.outputs[j], params)
    })?;
    drop(spin);
    let mut files = OutputSet::default();
    let (mut nsps, mut nseeds) = (0, 0);
    for (set, sps, seeds) in done {
        for f in set {
            files.push(f);
        }
        nsps += sps;
        nseeds += seeds;
    }
    // Every output is renamed into place only after all were written.
    files.commit()?;
    ui.summary(&format!("seed: {nseeds} seeds"), nsps, "spacepoints", start);
    Ok(())
}

/// Seeds one spacepoint file into written, not yet committed, outputs; returns them and the
/// numbers of spacepoints and seeds.
fn seed_file(
    ui: &Ui,
    backend: &Backend,
    cfg: &detkit::seeding::SeedingConfig,
    input: &Path,
    output: &Path,
    params_path: Option<&Path>,
) -> Result<(Vec<AtomicFile>, u64, u64)> {
    let file =
        std::fs::File::open(input).with_context(|| format!("cannot open `{}`", input.display()))?;
    let (sps, lines) = detkit::seeding::read_csv_with_lines(
        std::io::BufReader::new(file),
        &input.display().to_string(),
    )?;
    // Zero spacepoints (a header-only file) give zero seeds.
    let out = if sps.is_empty() {
        None
    } else {
        Some(
            backend
                .seed(&sps, cfg)
                .map_err(|e| crate::locate(e, input, Some(&lines)))?,
        )
    };
    let (seeds, params) = out
        .as_ref()
        .map_or((&[][..], &[][..]), |o| (&o.seeds[..], &o.params[..]));
    let mut files = vec![AtomicFile::create(output)?];
    io::write_seeds_csv(&mut files[0], seeds)?;
    if let Some(path) = params_path {
        let mut f = AtomicFile::create(path)?;
        io::write_params_csv(&mut f, params)?;
        files.push(f);
    }
    if let Some(out) = &out {
        ui.verbose(format!(
            "{}: {} spacepoints ({} invalid, dropped), {} middle-bottom and {} middle-top \
             doublets, {} triplets, {} seeds",
            input.display(),
            out.stats.spacepoints,
            out.stats.invalid,
            out.stats.mid_bot,
            out.stats.mid_top,
            out.stats.triplets,
            out.stats.seeds,
        ));
    }
    Ok((files, sps.len() as u64, seeds.len() as u64))
}

fn generate(ui: &Ui, a: GenerateArgs) -> Result<()> {
    let mut outs = vec![a.output.as_path()];
    outs.extend(a.truth.as_deref());
    check_outputs(&outs, &[])?;
    let start = Instant::now();
    let ev = gen::generate(a.seed, a.mu, true);
    let mut files = OutputSet::default();
    let i = files.add(&a.output)?;
    io::write_spacepoints_csv(files.get(i), &ev.spacepoints)?;
    if let Some(path) = &a.truth {
        let i = files.add(path)?;
        io::write_truth_csv(files.get(i), &ev.truth)?;
    }
    files.commit()?;
    ui.summary(
        &format!(
            "seed generate: {} ({} particles)",
            a.output.display(),
            ev.particles.len()
        ),
        ev.spacepoints.len() as u64,
        "spacepoints",
        start,
    );
    Ok(())
}

/// The demo row: a generated ⟨μ⟩ = 200 event, checked against the oracle.
pub fn demo(backend: &Backend) -> Result<Vec<Row>> {
    let cfg = SeedingSettings::default().to_config()?;
    let ev = gen::generate(2026, 200.0, true);
    let (out, secs) = timed(|| backend.seed(&ev.spacepoints, &cfg))?;
    let (want, stats) = detkit::seeding::cpu::seeds(&cfg, &ev.spacepoints);
    let want_params = detkit::seeding::cpu::params(&cfg, &ev.spacepoints, &want);
    let ok = out.seeds == want && out.params == want_params && out.stats == stats;
    Ok(vec![Row {
        name: "seeding (mu=200 event)",
        items: ev.spacepoints.len(),
        unit: "spacepoints",
        ok,
        secs,
    }])
}
