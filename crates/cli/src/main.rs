//! `detkit`: the command-line tool.
//!
//! Subcommands: `demo` (every kernel on generated data, checked against its CPU oracle),
//! `cluster` (CMS pixel clustering), `pet` (the PET acquisition chain), `seed` (track
//! seeding), `info` (the embedded kernel images and the one each device loads); `detkit help SUBCOMMAND` or `--help` on any of them describes every flag with its
//! unit and default.
//!
//! Conventions, the same in every subcommand:
//! - usage errors exit with status 2 (clap); failures with status 1 and one line on stderr,
//!   `error: ` and the cause chain (`-v` adds the debug form with a backtrace when
//!   `RUST_BACKTRACE=1`);
//! - outputs are checked before the work starts (an output that is an input, or in a missing
//!   directory, is refused), written to a temporary file beside the target and renamed into
//!   place only on success ([`output`]): a failed command leaves no file behind;
//! - file positions in errors are `FILE:LINE` (1-based line in the file) and the column name;
//! - a CSV input with a header and no rows holds zero items (the output then has a header
//!   and no rows); an input without a header is an error;
//! - progress bars go to stderr only when it is a terminal and `-q` is not given; every
//!   command ends with a summary line (items, time, rate) unless `-q`.

mod cluster;
mod demo;
mod info;
mod output;
mod pet;
mod seed;
mod ui;
mod write_behind;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use detkit::Backend;

/// Reconstruction kernels for particle and medical-imaging detectors, on NVIDIA GPUs or the
/// CPU, every result equal to the CPU reference.
#[derive(Parser, Debug)]
#[command(name = "detkit", version, about, propagate_version = true)]
pub struct Cli {
    /// Print nothing but errors (no progress, no summary).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Say more: the backend picked and why, per-stage figures; errors in full.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run every kernel on generated data and check it against its CPU oracle.
    Demo(demo::DemoArgs),
    /// CMS pixel clustering of digis (CSV or binary) into clusters.
    Cluster(cluster::ClusterCmd),
    /// The PET acquisition chain: raw frames -> singles -> time sort -> coincidences.
    #[command(subcommand)]
    Pet(pet::PetCmd),
    /// traccc-style track seeding: spacepoints -> triplet seeds and track parameters.
    Seed(seed::SeedCmd),
    /// The version, the embedded kernel images (cubins per architecture, PTX) and, per CUDA
    /// device, the image it loads and how long loading took.
    Info(info::InfoArgs),
}

/// Which implementation runs the kernels.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// CUDA when a driver and a device are present, else the CPU.
    #[default]
    Auto,
    /// The CPU references.
    Cpu,
    /// CUDA on device 0 (an error when there is none).
    Cuda,
}

impl BackendChoice {
    /// The backend, announced on stderr with `-v`.
    pub fn open(self, ui: &ui::Ui) -> Result<Backend> {
        let b = match self {
            BackendChoice::Auto => Backend::auto(),
            BackendChoice::Cpu => Backend::cpu(),
            BackendChoice::Cuda => Backend::cuda(0).context("--backend cuda")?,
        };
        ui.verbose(b.description());
        Ok(b)
    }
}

/// Exits with a usage error (status 2, clap's format), as clap does for its own checks.
pub fn usage_error(msg: impl std::fmt::Display) -> ! {
    use clap::CommandFactory;
    Cli::command()
        .error(clap::error::ErrorKind::ArgumentConflict, msg)
        .exit()
}

/// The devices a command runs on: the pool of `--devices` (CUDA only), or the one backend
/// of `--backend`.
pub fn open_pool(
    choice: BackendChoice,
    devices: Option<&str>,
    ui: &ui::Ui,
) -> Result<detkit::pool::DevicePool> {
    match devices {
        None => Ok(detkit::pool::DevicePool::from_backends(vec![
            choice.open(ui)?
        ])?),
        Some(d) => {
            if choice == BackendChoice::Cpu {
                usage_error("--devices needs the CUDA backend (not --backend cpu)");
            }
            let list: detkit::pool::Devices = d.parse().context("--devices")?;
            let pool = detkit::pool::DevicePool::cuda(&list).context("--devices")?;
            for b in pool.backends() {
                ui.verbose(b.description());
            }
            Ok(pool)
        }
    }
}

/// Places an error that names an input element by index (`detkit::Error::InvalidItem`) at
/// its `FILE:LINE`, using the line of every element from the reader (`None`: a binary input,
/// where the element index is the position).
pub fn locate(e: detkit::Error, file: &std::path::Path, lines: Option<&[u64]>) -> anyhow::Error {
    match e {
        detkit::Error::InvalidItem {
            what,
            index,
            column,
            detail,
        } => match lines.and_then(|l| l.get(index)) {
            Some(line) => anyhow::anyhow!("{}:{line}: column `{column}`: {detail}", file.display()),
            None => anyhow::anyhow!(
                "{}: {what} {index} (0-based): column `{column}`: {detail}",
                file.display()
            ),
        },
        other => anyhow::Error::new(other),
    }
}

fn run(cli: Cli) -> Result<()> {
    let ui = ui::Ui::new(cli.quiet, cli.verbose);
    match cli.command {
        Command::Demo(a) => demo::run(&ui, a),
        Command::Cluster(c) => cluster::run(&ui, c),
        Command::Pet(c) => pet::run(&ui, c),
        Command::Seed(c) => seed::run(&ui, c),
        Command::Info(a) => info::run(&ui, a),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // Help and version print to stdout and exit 0; usage errors exit 2.
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    let verbose = cli.verbose;
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if verbose {
                eprintln!("error: {e:?}");
            } else {
                eprintln!("error: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
