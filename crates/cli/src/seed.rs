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

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use detkit::seeding::{gen, io, SeedingSettings};
use detkit::Backend;

use crate::demo::{timed, Row};
use crate::output::{check_outputs, OutputSet};
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
    #[arg(long, required = true, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Seeds: CSV `bottom,middle,top,weight,z_vertex` (indices: 0-based data rows of the
    /// input; z_vertex in mm).
    #[arg(long, required = true, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also write track parameters per seed: CSV `seed,loc0,loc1,phi,theta,qop` (mm, mm,
    /// rad, rad, e/GeV) at the bottom spacepoint.
    #[arg(long, value_name = "FILE")]
    params: Option<PathBuf>,
    /// Seeding settings: TOML `key = number` lines over traccc's defaults (e.g. `min_pt =
    /// 0.9`, GeV); an unknown key is an error.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Which implementation runs the kernels.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
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
    let (input, output) = (
        a.input.expect("required by clap"),
        a.output.expect("required by clap"),
    );
    let mut outs = vec![output.as_path()];
    outs.extend(a.params.as_deref());
    let mut ins = vec![input.as_path()];
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
    let backend = a.backend.open(ui)?;
    let start = Instant::now();
    let file = std::fs::File::open(&input)
        .with_context(|| format!("cannot open `{}`", input.display()))?;
    let (sps, lines) = detkit::seeding::read_csv_with_lines(
        std::io::BufReader::new(file),
        &input.display().to_string(),
    )?;
    let spin = ui.spinner(&format!("seeding {} spacepoints", sps.len()));
    // Zero spacepoints (a header-only file) give zero seeds.
    let out = if sps.is_empty() {
        None
    } else {
        Some(
            backend
                .seed(&sps, &cfg)
                .map_err(|e| crate::locate(e, &input, Some(&lines)))?,
        )
    };
    drop(spin);
    let mut files = OutputSet::default();
    let seeds_file = files.add(&output)?;
    let (seeds, params) = out
        .as_ref()
        .map_or((&[][..], &[][..]), |o| (&o.seeds[..], &o.params[..]));
    io::write_seeds_csv(files.get(seeds_file), seeds)?;
    if let Some(path) = &a.params {
        let i = files.add(path)?;
        io::write_params_csv(files.get(i), params)?;
    }
    files.commit()?;
    if let Some(out) = &out {
        ui.verbose(format!(
            "{} spacepoints ({} invalid, dropped), {} middle-bottom and {} middle-top doublets, \
         {} triplets, {} seeds",
            out.stats.spacepoints,
            out.stats.invalid,
            out.stats.mid_bot,
            out.stats.mid_top,
            out.stats.triplets,
            out.stats.seeds,
        ));
    }
    ui.summary(
        &format!("seed: {} seeds", seeds.len()),
        sps.len() as u64,
        "spacepoints",
        start,
    );
    Ok(())
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
