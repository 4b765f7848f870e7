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
//! are binary (a 16-byte header, magic `DKSNGL01` / `DKPAIR01` and a `u64` record count,
//! then little-endian records of 16 and 32 bytes), others CSV. Raw frames are the
//! scanner's headerless stream of 16-byte records; `pet run` reads them from a file, a pipe
//! or a FIFO (`-`: standard input) to the end of the stream.

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
    /// ones of the same name, all or none of them).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// About how many singles to generate (at least 1; about 80 bytes of memory each, checked
    /// before generating).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=(1u64 << 32) - 1))]
    singles: u64,
    /// Singles rate of the acquisition, per second (finite, > 0; 1e6 to 5e7 is typical). The
    /// acquisition (`--singles` / `--rate` seconds) must span less than 2^53 ticks (about 2.5
    /// hours), where times in ticks are exact.
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
    /// Singles: CSV `crystal,energy,time`, or binary (`DKSNGL01` header, 16-byte records) if
    /// the name ends in `.bin`; `-` is standard output.
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    backend: BackendArg,
}

#[derive(Args, Debug)]
pub(crate) struct SortArgs {
    /// Singles: CSV `crystal,energy,time` (energy in the scanner's corrected units, 0.1 keV
    /// for the generated scanners, finite; time in ticks), or binary (`.bin`).
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
    #[arg(long, value_name = "TICKS", value_parser = nonneg_f64, allow_negative_numbers = true)]
    window: Option<f64>,
    /// Delayed window: open it DELAY ticks after each single (random-coincidence estimate;
    /// finite, > 0); default: the prompt window.
    #[arg(long, value_name = "TICKS", value_parser = positive_f64, allow_negative_numbers = true)]
    delay: Option<f64>,
    /// What to do with a window of more than two singles.
    #[arg(long, default_value = "killAll", value_parser = parse_policy, value_name = "NAME",
          help = format!("What to do with a window of more than two singles: {}", Policy::ALL.map(|p| p.name()).join(", ")))]
    policy: Policy,
}

#[derive(Args, Debug)]
#[command(mut_arg("window", |a| a.required(true)))]
pub(crate) struct CoincideArgs {
    /// Time-sorted singles (CSV or `.bin`).
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Pairs: CSV `crystal_a,energy_a,time_a,crystal_b,energy_b,time_b`, or binary
    /// (`DKPAIR01` header, 32-byte records) if the name ends in `.bin`.
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
    /// Raw frames: 16-byte `DataFrameV2` records, from a file, a pipe or a FIFO (read to
    /// the end of the stream; `-`: standard input).
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Pairs (CSV or `.bin`).
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    window: WindowArgs,
    /// Frames per chunk (at least 1; about 80 bytes of memory each, checked before the run).
    #[arg(long, default_value_t = 1 << 22, value_name = "FRAMES", value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    chunk: u64,
    /// Capacity for singles carried between chunks (windows straddling a chunk edge, and every
    /// single after the last frame of a BDM that stops reporting).
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
        if let Some(d) = self.delay {
            if !(window + d).is_finite() {
                crate::usage_error(format!(
                    "--window {window:e} + --delay {d:e} overflows: a delayed window must end \
                     at a finite time (the sum must be below {:e})",
                    f64::MAX
                ));
            }
        }
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
        pet::write_singles_bin(f.writer(), singles)?;
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
        if binary {
            // The count is patched in at the end where the output can be rewritten.
            f.write_all(&pet::bin_header(pet::PAIRS_MAGIC, pet::COUNT_TO_END))?;
        } else {
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
    fn commit(mut self) -> Result<()> {
        if self.binary {
            self.f.patch(8, &self.count.to_le_bytes())?;
        }
        self.f.commit()
    }
}

/// Every file a scanner description reads (the TOML and its tables), as inputs of the
/// same-file check; the TOML alone when it cannot be read (its error comes later).
fn scanner_files(scanner: &Path) -> Vec<PathBuf> {
    Scanner::files_of(scanner).unwrap_or_else(|_| vec![scanner.to_path_buf()])
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
            let mut inputs = scanner_files(&a.scanner);
            inputs.push(a.input.clone());
            let ins: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
            check_outputs(&[&a.output], &ins)?;
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
            // `--window` is required by clap for `coincide` (a usage error, exit 2).
            check_outputs(&[&a.output], &[&a.input])?;
            let c = a.window.config(None)?;
            let b = a.backend.backend.open(ui)?;
            let start = Instant::now();
            let singles = pet::read_singles(&a.input)?;
            let pairs = b.pet_coincide(&singles, &c)?;
            let mut out = PairsOut::create(&a.output)?;
            out.write(&pairs)?;
            out.commit()?;
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
    let mut inputs = scanner_files(&a.scanner);
    inputs.push(a.input.clone());
    let ins: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    check_outputs(&[&a.output], &ins)?;
    let scanner = Scanner::from_toml_file(&a.scanner)?;
    let c = a.window.config(Some(scanner.time_window))?;
    let sc = StreamConfig {
        chunk_frames: a.chunk as usize,
        pending_capacity: a.pending as usize,
    };
    // The chunk buffer, its singles, their sort and merge: about 80 bytes a chunk frame; the
    // carried singles twice over.
    detkit::mem::check_estimate(
        format!("--chunk {} --pending {}", a.chunk, a.pending),
        a.chunk * 80 + a.pending * 32,
    )?;
    let b = a.backend.backend.open(ui)?;
    // A regular file is read by several threads at their offsets; a pipe, FIFO or `-`
    // (standard input), whose length is unknown, in order to the end of the stream.
    let stdin = a.input.as_os_str() == "-";
    let meta = if stdin {
        None
    } else {
        Some(
            std::fs::metadata(&a.input)
                .with_context(|| format!("cannot open `{}`", a.input.display()))?,
        )
    };
    let regular = meta.as_ref().is_some_and(|m| m.is_file());
    if let Some(m) = meta.as_ref().filter(|m| m.is_file() && m.len() % 16 != 0) {
        bail!(
            "{}: {} bytes, not a whole number of 16-byte frames ({} frames and {} bytes over; \
             expected {} or {} bytes)",
            a.input.display(),
            m.len(),
            m.len() / 16,
            m.len() % 16,
            m.len() / 16 * 16,
            m.len() / 16 * 16 + 16
        );
    }
    let mut out = PairsOut::create(&a.output)?;
    let mut fifo = if regular || stdin {
        None
    } else {
        Some(
            std::fs::File::open(&a.input)
                .with_context(|| format!("cannot open `{}`", a.input.display()))?,
        )
    };
    let bar = if regular {
        ui.bar(meta.as_ref().map_or(0, |m| m.len()) / 16, "frames")
    } else {
        ui.spinner("reading frames to the end of the stream")
    };
    let start = Instant::now();
    let progress = |s: &pet::StreamStats| {
        bar.set_position(s.convert.frames);
        bar.set_message(format!("{} pairs", s.pairs));
    };
    // The pairs are written by another thread (to a file, `-` or a FIFO alike) while the next
    // chunk runs.
    let output = a.output.display().to_string();
    let (st, written) = crate::write_behind::write_behind(
        |p| out.write(p),
        |sink| {
            if regular {
                b.pet_run_file(&a.input, &scanner, &c, &sc, sink, progress)
            } else if let Some(f) = fifo.as_mut() {
                b.pet_run_stream(f, &scanner, &c, &sc, sink, progress)
            } else {
                b.pet_run_stream(&mut std::io::stdin(), &scanner, &c, &sc, sink, progress)
            }
        },
    );
    written.with_context(|| format!("cannot write `{output}`"))?;
    let st = st.map_err(|e| match e {
        detkit::Error::CapacityExceeded { what, .. } if what.starts_with("pending") => {
            anyhow::Error::new(e).context(format!(
                "{}: raise --pending (now {}) to carry more singles between chunks",
                a.input.display(),
                a.pending
            ))
        }
        other => anyhow::Error::new(other).context(a.input.display().to_string()),
    })?;
    drop(bar);
    let count = out.count;
    out.commit()?;
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

/// Largest acquisition span in ticks: times are `f64` ticks in the singles, exact below 2^53.
const MAX_SPAN_TICKS: f64 = (1u64 << 53) as f64;

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
    // The generated frames count ticks of 1 ps; a span past 2^53 ticks saturates or loses
    // whole ticks in the singles' times.
    let span = a.singles as f64 / a.rate * 1e12;
    if !(span.is_finite() && span < MAX_SPAN_TICKS) {
        crate::usage_error(format!(
            "--singles {} at --rate {:e} per second spans {:e} s = {span:e} ticks of 1 ps; \
             times are exact only below 2^53 ticks (about {:.0} s): raise --rate or lower \
             --singles",
            a.singles,
            a.rate,
            a.singles as f64 / a.rate,
            MAX_SPAN_TICKS / 1e12
        ));
    }
    let scanner = match a.scanner {
        ScannerName::Tiny => gen::tiny_scanner(a.seed),
        ScannerName::SmallAnimal => gen::small_animal_scanner(a.seed),
        ScannerName::Bench => gen::bench_scanner(a.seed),
    };
    let tables = scanner.position.len() as u64 + 4 * scanner.energy.len() as u64;
    detkit::mem::check_estimate(
        format!("--singles {}", a.singles),
        gen::acquisition_bytes(a.singles as usize).saturating_add(tables),
    )?;
    // Everything is written into a temporary directory (inside DIR when it exists, so the
    // final renames stay on one file system) and moved into place at the end, so a failure
    // leaves nothing behind; SIGINT/SIGTERM remove it too.
    let exists = a.dir.exists();
    let tmp_parent = if exists { a.dir.clone() } else { parent };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".detkit-pet-generate.");
    #[cfg(unix)]
    {
        // It becomes DIR when DIR is new: `0777 & !umask`, as `mkdir` makes it.
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o777));
    }
    let tmp = builder
        .tempdir_in(&tmp_parent)
        .with_context(|| format!("cannot create a directory in `{}`", tmp_parent.display()))?;
    crate::output::register_temporary(tmp.path());
    let result = generate_into(&scanner, &a, tmp.path(), exists);
    let truth = match result {
        Ok(t) => t,
        Err(e) => {
            crate::output::unregister_temporary(tmp.path());
            return Err(e);
        }
    };
    // The moves into place run whole: a signal meanwhile waits for them (and for the removal
    // of the old files set aside), then finds nothing left to remove.
    let mut held = crate::output::hold_signals();
    if exists {
        let moved = replace_all(tmp.path(), &a.dir);
        let path = tmp.path().to_path_buf();
        let aside = path.join(".replaced");
        let stranded = std::fs::read_dir(&aside).is_ok_and(|mut d| d.next().is_some());
        held.retain(|p| *p != path);
        if moved.is_err() && stranded {
            // An old file could not be put back: keep it where it is and say so.
            let kept = tmp.keep();
            return moved.with_context(|| {
                format!(
                    "old files that could not be put back are in `{}`",
                    kept.join(".replaced").display()
                )
            });
        }
        drop(tmp); // the new files are in place or back: remove what is left
        moved?;
    } else {
        let tmp = tmp.keep();
        let moved = std::fs::rename(&tmp, &a.dir);
        if moved.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        held.retain(|p| *p != tmp);
        moved.with_context(|| format!("cannot create `{}`", a.dir.display()))?;
    }
    drop(held);
    let (frames, pairs) = truth;
    ui.info(format!(
        "wrote {}/scanner.toml, its tables and {}/frames.bin ({pairs} truth pairs)",
        a.dir.display(),
        a.dir.display(),
    ));
    ui.summary("pet generate", frames, "frames", start);
    Ok(())
}

/// Writes the scanner files and `frames.bin` into `tmp`; returns the numbers of frames and
/// truth pairs.
fn generate_into(
    scanner: &Scanner,
    a: &GenerateArgs,
    tmp: &Path,
    existing: bool,
) -> Result<(u64, usize)> {
    if existing {
        // Nothing of DIR is replaced unless every file can be: a name taken by a directory
        // (or anything but a file or link) is refused before the work.
        for name in [
            "scanner.toml",
            "scanner.position.bin",
            "scanner.energy.bin",
            "frames.bin",
        ] {
            let p = a.dir.join(name);
            if let Ok(m) = std::fs::symlink_metadata(&p) {
                if !(m.is_file() || m.file_type().is_symlink()) {
                    bail!(
                        "`{}` exists and is not a file: nothing written",
                        p.display()
                    );
                }
            }
        }
    }
    scanner.write_files(tmp, "scanner")?;
    let cfg = gen::AcquisitionConfig {
        seed: a.seed,
        singles: a.singles as usize,
        singles_rate: a.rate,
        slice: a.slice,
        ..Default::default()
    };
    let acq = gen::acquisition(scanner, &cfg);
    std::fs::write(tmp.join("frames.bin"), gen::frame_bytes(&acq.frames))
        .context("writing frames.bin")?;
    Ok((acq.frames.len() as u64, acq.truth.len()))
}

/// Moves every file of `from` into `dir`, all or none: the files they replace are first
/// moved aside into `from`, and put back if any move fails.
fn replace_all(from: &Path, dir: &Path) -> Result<()> {
    let aside = from.join(".replaced");
    std::fs::create_dir(&aside)
        .with_context(|| format!("cannot create a directory in `{}`", from.display()))?;
    let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(from)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()?;
    names.retain(|n| n != ".replaced");
    names.sort();
    // (name, whether an old file was moved aside, whether the new one is in place)
    let mut done: Vec<(std::ffi::OsString, bool, bool)> = Vec::new();
    let step = |name: &std::ffi::OsString,
                done: &mut Vec<(std::ffi::OsString, bool, bool)>|
     -> std::io::Result<()> {
        let to = dir.join(name);
        let had_old = std::fs::symlink_metadata(&to).is_ok();
        if had_old {
            std::fs::rename(&to, aside.join(name))?;
        }
        done.push((name.clone(), had_old, false));
        std::fs::rename(from.join(name), &to)?;
        done.last_mut().expect("just pushed").2 = true;
        Ok(())
    };
    for name in &names {
        if let Err(e) = step(name, &mut done) {
            // Undo in reverse order: the new file out, the old one back.
            for (n, had_old, placed) in done.iter().rev() {
                if *placed {
                    let _ = std::fs::rename(dir.join(n), from.join(n));
                }
                if *had_old {
                    let _ = std::fs::rename(aside.join(n), dir.join(n));
                }
            }
            return Err(e).with_context(|| {
                format!(
                    "cannot create `{}` (nothing in `{}` was changed)",
                    dir.join(name).display(),
                    dir.display()
                )
            });
        }
    }
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
