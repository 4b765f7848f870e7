//! `detkit pet`: the PET acquisition chain.
//!
//! ```text
//! detkit pet generate --dir DIR [--singles N] [--rate PER_S] [--seed S] [--scanner NAME]
//! detkit pet convert  --scanner scanner.toml --input frames.bin --output singles.csv
//! detkit pet sort     --input singles.csv --output sorted.csv
//! detkit pet coincide --input sorted.csv --window TICKS [--delay TICKS] [--policy NAME] --output pairs.csv
//! detkit pet run      --scanner scanner.toml --input frames.bin --output pairs.csv
//! ```
//! Every command takes `--backend auto|cpu|cuda`. Singles and pairs files ending in `.bin`
//! are raw little-endian records (16 and 32 bytes), others CSV.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use detkit::pet::cpu::{self as oracle, CoincideConfig};
use detkit::pet::{self, gen, Scanner, StreamConfig};
use detkit::Backend;
use detkit_gpu::pet::{Coincidence, Policy, Single};

use crate::demo::{timed, Row};
use crate::output::{check_outputs, AtomicFile};
use crate::ui::Ui;
use crate::BackendChoice;

/// `detkit pet` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum PetCmd {
    /// Write a generated acquisition: DIR/scanner.toml, its tables, and DIR/frames.bin.
    Generate(GenerateArgs),
    /// Raw frames -> singles (energy window applied, table lookups).
    Convert(ConvertArgs),
    /// Singles -> singles sorted by time (stable: equal times keep input order).
    Sort(SortArgs),
    /// Time-sorted singles -> coincidence pairs.
    Coincide(CoincideArgs),
    /// The whole chain streamed from a frames file: frames -> pairs, chunk by chunk.
    Run(RunArgs),
}

/// Which generated scanner.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum ScannerName {
    /// A few crystals (tests).
    Tiny,
    /// A small-animal scanner.
    SmallAnimal,
    /// The benchmark scanner: a few hundred per-BDM streams, 37 MB energy table.
    Bench,
}

#[derive(Args, Debug)]
pub(crate) struct BackendArg {
    /// Which implementation runs the kernels.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
}

#[derive(Args, Debug)]
pub(crate) struct GenerateArgs {
    /// Output directory (created; an existing directory gets the files added, replacing
    /// ones of the same name).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// About how many singles to generate (at least 1).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=(1u64 << 32) - 1))]
    singles: u64,
    /// Singles rate of the acquisition, per second (finite, > 0; 1e6 to 5e7 is typical).
    #[arg(long, default_value_t = 1e7, value_name = "PER_S", value_parser = positive_f64)]
    rate: f64,
    /// Random seed: the same seed gives the same acquisition.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Which scanner to generate.
    #[arg(long, value_enum, default_value_t = ScannerName::SmallAnimal)]
    scanner: ScannerName,
    /// Readout slice length in frame-counter ticks (1 tick = 1 ps): frames are written slice
    /// by slice, each slice BDM by BDM (at least 1).
    #[arg(long, default_value_t = 1_000_000_000, value_name = "TICKS", value_parser = clap::value_parser!(u64).range(1..))]
    slice: u64,
}

#[derive(Args, Debug)]
pub(crate) struct ConvertArgs {
    /// Scanner description (TOML naming the position and energy tables).
    #[arg(long, value_name = "FILE")]
    scanner: PathBuf,
    /// Raw frames: 16-byte `DataFrameV2` records.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Singles: CSV `crystal,energy,time`, or raw 16-byte records if the name ends in `.bin`.
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    backend: BackendArg,
}

#[derive(Args, Debug)]
pub(crate) struct SortArgs {
    /// Singles: CSV `crystal,energy,time` (energy in keV, finite; time in ticks), or raw
    /// 16-byte records (`.bin`).
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Time-sorted singles, in the format its name says (`.bin` or CSV).
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    backend: BackendArg,
}

#[derive(Args, Debug)]
pub(crate) struct WindowArgs {
    /// Coincidence window in frame-counter ticks (1 tick = 1 ps with the generated
    /// scanners): a later single pairs when `t - t_open <= WINDOW`.
    #[arg(long, value_name = "TICKS", value_parser = nonneg_f64)]
    window: Option<f64>,
    /// Delayed window: open it DELAY ticks after each single (random-coincidence estimate);
    /// default: the prompt window.
    #[arg(long, value_name = "TICKS", value_parser = nonneg_f64)]
    delay: Option<f64>,
    /// What to do with a window of more than two singles.
    #[arg(long, default_value = "killAll", value_parser = parse_policy, value_name = "NAME",
          help = format!("What to do with a window of more than two singles: {}", Policy::ALL.map(|p| p.name()).join(", ")))]
    policy: Policy,
}

#[derive(Args, Debug)]
pub(crate) struct CoincideArgs {
    /// Time-sorted singles (CSV or `.bin`).
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Pairs: CSV `crystal_a,energy_a,time_a,crystal_b,energy_b,time_b`, or raw 32-byte
    /// records if the name ends in `.bin`.
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    window: WindowArgs,
    #[command(flatten)]
    backend: BackendArg,
}

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// Scanner description (TOML); its `time_window` is the default window.
    #[arg(long, value_name = "FILE")]
    scanner: PathBuf,
    /// Raw frames: 16-byte `DataFrameV2` records.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Pairs (CSV or `.bin`).
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    window: WindowArgs,
    /// Frames per chunk (at least 1).
    #[arg(long, default_value_t = 1 << 22, value_name = "FRAMES", value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    chunk: u64,
    /// Capacity for singles carried between chunks (windows straddling a chunk edge).
    #[arg(long, default_value_t = 1 << 22, value_name = "SINGLES", value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pending: u64,
    #[command(flatten)]
    backend: BackendArg,
}

fn positive_f64(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("{s} is not a finite number > 0"));
    }
    Ok(v)
}

fn nonneg_f64(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(format!("{s} is not a finite number >= 0"));
    }
    Ok(v)
}

fn parse_policy(s: &str) -> std::result::Result<Policy, String> {
    pet::policy_from_name(s).map_err(|e| e.to_string())
}

impl WindowArgs {
    fn config(&self, default_window: Option<f64>) -> Result<CoincideConfig> {
        let Some(window) = self.window.or(default_window) else {
            bail!("--window TICKS is required");
        };
        let c = CoincideConfig {
            window,
            delay: self.delay,
            policy: self.policy,
        };
        c.validate()?;
        Ok(c)
    }
}

fn is_bin(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "bin")
}

fn write_singles(path: &Path, singles: &[Single]) -> Result<()> {
    let mut f = AtomicFile::create(path)?;
    if is_bin(path) {
        f.write_all(bytemuck::cast_slice(singles))?;
    } else {
        pet::write_singles_csv(f.writer(), singles)?;
    }
    f.commit()
}

/// Pairs into an atomic file, header first for CSV.
struct PairsOut {
    f: AtomicFile,
    binary: bool,
    count: u64,
}

impl PairsOut {
    fn create(path: &Path) -> Result<Self> {
        let mut f = AtomicFile::create(path)?;
        let binary = is_bin(path);
        if !binary {
            writeln!(f, "{}", pet::PAIRS_HEADER)?;
        }
        Ok(Self {
            f,
            binary,
            count: 0,
        })
    }
    fn write(&mut self, pairs: &[Coincidence]) -> std::io::Result<()> {
        self.count += pairs.len() as u64;
        if self.binary {
            self.f.write_all(bytemuck::cast_slice(pairs))
        } else {
            pet::write_pairs_csv(self.f.writer(), pairs)
        }
    }
}

fn read_frames(path: &Path) -> Result<Vec<detkit_gpu::pet::DataFrameV2>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    pet::frames_from_bytes(&bytes).with_context(|| path.display().to_string())
}

/// Runs `detkit pet ...`.
pub fn run(ui: &Ui, c: PetCmd) -> Result<()> {
    match c {
        PetCmd::Generate(a) => generate(ui, a),
        PetCmd::Convert(a) => {
            check_outputs(&[&a.output], &[&a.input, &a.scanner])?;
            let scanner = Scanner::from_toml_file(&a.scanner)?;
            let b = a.backend.backend.open(ui)?;
            let start = Instant::now();
            let frames = read_frames(&a.input)?;
            let (singles, st) = b.pet_convert(&frames, &scanner)?;
            write_singles(&a.output, &singles)?;
            ui.info(format!(
                "{} singles accepted, {} outside the energy window, {} with the energy-table \
                 index clamped to 999, {} with a bad address{}",
                st.accepted,
                st.rejected_energy,
                st.clamped,
                st.bad_address,
                st.first_bad_address
                    .map(|i| format!(" (first: frame {i})"))
                    .unwrap_or_default()
            ));
            ui.summary("pet convert", st.frames, "frames", start);
            Ok(())
        }
        PetCmd::Sort(a) => {
            check_outputs(&[&a.output], &[&a.input])?;
            let b = a.backend.backend.open(ui)?;
            let start = Instant::now();
            let singles = pet::read_singles(&a.input)?;
            // On the GPU: already sorted → nothing; up to 256 presorted runs (how per-BDM
            // frame streams arrive) → the multiway merge; else the radix sort of the time keys
            // (docs/pet.md). The CPU runs the stable reference sort.
            let (sorted, path) = b.pet_sort_auto(&singles)?;
            write_singles(&a.output, &sorted)?;
            let method = match b.kind() {
                detkit::BackendKind::Cuda => format!("GPU: {path}"),
                detkit::BackendKind::Cpu => "CPU stable sort".to_string(),
            };
            ui.summary(
                &format!("pet sort ({method})"),
                sorted.len() as u64,
                "singles",
                start,
            );
            Ok(())
        }
        PetCmd::Coincide(a) => {
            if a.window.window.is_none() {
                // A usage error (exit 2), like every other missing argument.
                use clap::CommandFactory;
                crate::Cli::command()
                    .error(
                        clap::error::ErrorKind::MissingRequiredArgument,
                        "`pet coincide` needs --window <TICKS>",
                    )
                    .exit();
            }
            check_outputs(&[&a.output], &[&a.input])?;
            let c = a.window.config(None)?;
            let b = a.backend.backend.open(ui)?;
            let start = Instant::now();
            let singles = pet::read_singles(&a.input)?;
            let pairs = b.pet_coincide(&singles, &c)?;
            let mut out = PairsOut::create(&a.output)?;
            out.write(&pairs)?;
            out.f.commit()?;
            ui.info(format!(
                "{} coincidences ({})",
                pairs.len(),
                c.policy.name()
            ));
            ui.summary("pet coincide", singles.len() as u64, "singles", start);
            Ok(())
        }
        PetCmd::Run(a) => run_stream(ui, a),
    }
}

fn run_stream(ui: &Ui, a: RunArgs) -> Result<()> {
    check_outputs(&[&a.output], &[&a.input, &a.scanner])?;
    let scanner = Scanner::from_toml_file(&a.scanner)?;
    let c = a.window.config(Some(scanner.time_window))?;
    let sc = StreamConfig {
        chunk_frames: a.chunk as usize,
        pending_capacity: a.pending as usize,
    };
    let b = a.backend.backend.open(ui)?;
    let bytes = std::fs::metadata(&a.input)
        .with_context(|| format!("cannot open `{}`", a.input.display()))?
        .len();
    let mut out = PairsOut::create(&a.output)?;
    let bar = ui.bar(bytes / 16, "frames");
    let start = Instant::now();
    // Each chunk is read by several threads at its offset in the file; the pairs are written
    // by another thread while the next chunk runs.
    let output = a.output.display().to_string();
    let (st, written) = crate::write_behind::write_behind(
        |p| out.write(p),
        |sink| {
            b.pet_run_file(&a.input, &scanner, &c, &sc, sink, |s| {
                bar.set_position(s.convert.frames);
                bar.set_message(format!("{} pairs", s.pairs));
            })
        },
    );
    written.with_context(|| format!("cannot write `{output}`"))?;
    let st = st.with_context(|| a.input.display().to_string())?;
    drop(bar);
    let count = out.count;
    out.f.commit()?;
    let secs = start.elapsed().as_secs_f64();
    ui.info(format!(
        "{} chunks, {} singles, {count} coincidences; {} frames outside the energy window, {} \
         clamped energy-table indices, {} bad addresses; at most {} singles carried between \
         chunks; {:.2} GB/s of frames",
        st.chunks,
        st.convert.accepted,
        st.convert.rejected_energy,
        st.convert.clamped,
        st.convert.bad_address,
        st.max_pending,
        st.convert.frames as f64 * 16.0 / secs / 1e9,
    ));
    ui.summary("pet run", st.convert.frames, "frames", start);
    Ok(())
}

fn generate(ui: &Ui, a: GenerateArgs) -> Result<()> {
    let start = Instant::now();
    if a.dir.exists() && !a.dir.is_dir() {
        bail!("--dir `{}` exists and is not a directory", a.dir.display());
    }
    let parent = match a.dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        bail!(
            "--dir `{}`: directory `{}` does not exist",
            a.dir.display(),
            parent.display()
        );
    }
    // Everything is written into a temporary directory beside the target and moved into
    // place at the end, so a failure leaves nothing behind.
    let tmp = tempfile::Builder::new()
        .prefix(".detkit-pet-generate.")
        .tempdir_in(&parent)
        .with_context(|| format!("cannot create a directory in `{}`", parent.display()))?;
    let scanner = match a.scanner {
        ScannerName::Tiny => gen::tiny_scanner(a.seed),
        ScannerName::SmallAnimal => gen::small_animal_scanner(a.seed),
        ScannerName::Bench => gen::bench_scanner(a.seed),
    };
    scanner.write_files(tmp.path(), "scanner")?;
    let cfg = gen::AcquisitionConfig {
        seed: a.seed,
        singles: a.singles as usize,
        singles_rate: a.rate,
        slice: a.slice,
        ..Default::default()
    };
    let acq = gen::acquisition(&scanner, &cfg);
    std::fs::write(tmp.path().join("frames.bin"), gen::frame_bytes(&acq.frames))
        .context("writing frames.bin")?;
    if a.dir.exists() {
        for e in std::fs::read_dir(tmp.path())? {
            let e = e?;
            let to = a.dir.join(e.file_name());
            std::fs::rename(e.path(), &to)
                .with_context(|| format!("cannot create `{}`", to.display()))?;
        }
    } else {
        let tmp = tmp.keep();
        if let Err(e) = std::fs::rename(&tmp, &a.dir) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e).with_context(|| format!("cannot create `{}`", a.dir.display()));
        }
    }
    ui.info(format!(
        "wrote {}/scanner.toml, its tables and {}/frames.bin ({} truth pairs)",
        a.dir.display(),
        a.dir.display(),
        acq.truth.len()
    ));
    ui.summary("pet generate", acq.frames.len() as u64, "frames", start);
    Ok(())
}

/// The demo rows of this family: conversion, sort, coincidences and the streamed chain on a
/// generated acquisition, each checked against the oracle.
pub fn demo(backend: &Backend) -> Result<Vec<Row>> {
    let scanner = gen::bench_scanner(3);
    let acq = gen::acquisition(
        &scanner,
        &gen::AcquisitionConfig {
            seed: 3,
            singles: 1 << 20,
            singles_rate: 2e7,
            ..Default::default()
        },
    );
    let n = acq.frames.len();
    let mut rows = Vec::new();
    let (want_s, want_st) = oracle::convert(
        &acq.frames,
        &scanner.params,
        &scanner.position,
        &scanner.energy,
    );
    let ((singles, st), secs) = timed(|| backend.pet_convert(&acq.frames, &scanner))?;
    rows.push(Row {
        name: "pet convert frames",
        items: n,
        unit: "frames",
        ok: singles == want_s && st == want_st,
        secs,
    });
    let want_sorted = oracle::sort(&want_s)?;
    let (sorted, secs) = timed(|| backend.pet_sort(&singles))?;
    rows.push(Row {
        name: "pet sort (time)",
        items: singles.len(),
        unit: "singles",
        ok: sorted == want_sorted,
        secs,
    });
    let c = CoincideConfig::prompt(scanner.time_window);
    let want_pairs = oracle::coincide(&want_sorted, &c)?;
    let (pairs, secs) = timed(|| backend.pet_coincide(&sorted, &c))?;
    rows.push(Row {
        name: "pet coincide (killAll)",
        items: sorted.len(),
        unit: "singles",
        ok: pairs == want_pairs,
        secs,
    });
    let bytes = gen::frame_bytes(&acq.frames);
    let mut streamed = Vec::new();
    let (_, secs) = timed(|| {
        backend.pet_run_stream(
            &mut &bytes[..],
            &scanner,
            &c,
            &StreamConfig {
                chunk_frames: 1 << 18,
                pending_capacity: 1 << 18,
            },
            |p| {
                streamed.extend_from_slice(p);
                Ok(())
            },
            |_| {},
        )
    })?;
    rows.push(Row {
        name: "pet chain (streamed)",
        items: n,
        unit: "frames",
        ok: streamed == want_pairs,
        secs,
    });
    Ok(rows)
}
