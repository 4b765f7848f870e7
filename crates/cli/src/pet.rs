//! `detkit pet`: the PET acquisition chain (issue 4).
//!
//! ```text
//! detkit pet convert  --scanner scanner.toml --input frames.bin --output singles.csv
//! detkit pet sort     --input singles.csv --output sorted.csv
//! detkit pet coincide --input sorted.csv --window T [--delay D] [--policy NAME] --output pairs.csv
//! detkit pet run      --scanner scanner.toml --input frames.bin --output pairs.csv
//! detkit pet generate --dir DIR [--singles N] [--rate R] [--seed S] [--scanner tiny|small-animal|bench]
//! ```
//! Every command takes `--backend auto|cpu|cuda`. Singles and pairs files ending in `.bin` are
//! raw little-endian records (16 and 32 bytes), others CSV.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use detkit::cpu::pet::{self as oracle, CoincideConfig};
use detkit::pet::{self, gen, PairsWriter, Scanner, StreamConfig};
use detkit::Backend;
use detkit_gpu::pet::Policy;

use crate::{backend_from, timed, Line};

const USAGE: &str = "usage:
  detkit pet convert  --scanner scanner.toml --input frames.bin --output singles.csv
  detkit pet sort     --input singles.csv --output sorted.csv
  detkit pet coincide --input sorted.csv --window T [--delay D] [--policy NAME] --output pairs.csv
  detkit pet run      --scanner scanner.toml --input frames.bin --output pairs.csv
                      [--window T] [--delay D] [--policy NAME] [--chunk FRAMES] [--pending SINGLES]
  detkit pet generate --dir DIR [--singles N] [--rate PER_S] [--seed S]
                      [--scanner tiny|small-animal|bench] [--slice TICKS]
options: --backend auto|cpu|cuda (default auto); files ending in .bin are binary records.
policies: killAll (default), takeAllGoods, takeWinnerOfGoods, takeWinnerIfIsGood,
          takeWinnerIfAllAreGoods, killAllIfMultipleGoods";

struct Args {
    pairs: Vec<(String, String)>,
}

impl Args {
    fn parse(args: &[String]) -> Result<Self> {
        let mut pairs = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let Some(name) = a.strip_prefix("--") else {
                bail!("unexpected argument `{a}`\n{USAGE}");
            };
            let v = it
                .next()
                .with_context(|| format!("--{name} needs a value\n{USAGE}"))?;
            pairs.push((name.to_string(), v.clone()));
        }
        Ok(Self { pairs })
    }
    fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn path(&self, name: &str) -> Result<PathBuf> {
        self.get(name)
            .map(PathBuf::from)
            .with_context(|| format!("--{name} is required\n{USAGE}"))
    }
    fn num<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>>
    where
        T::Err: std::fmt::Display,
    {
        self.get(name)
            .map(|v| {
                v.parse::<T>()
                    .map_err(|e| anyhow::anyhow!("--{name} {v}: {e}"))
            })
            .transpose()
    }
    fn only(&self, allowed: &[&str]) -> Result<()> {
        for (n, _) in &self.pairs {
            if n != "backend" && !allowed.contains(&n.as_str()) {
                bail!("unknown option --{n}\n{USAGE}");
            }
        }
        Ok(())
    }
    fn backend(&self) -> Result<Backend> {
        let b = backend_from(self.get("backend").unwrap_or("auto"))?;
        eprintln!("{}", b.description());
        Ok(b)
    }
    fn coincide_config(&self, default_window: Option<f64>) -> Result<CoincideConfig> {
        let window = match (self.num::<f64>("window")?, default_window) {
            (Some(w), _) | (None, Some(w)) => w,
            (None, None) => bail!("--window is required\n{USAGE}"),
        };
        let policy = match self.get("policy") {
            Some(p) => pet::policy_from_name(p)?,
            None => Policy::KillAll,
        };
        let c = CoincideConfig {
            window,
            delay: self.num("delay")?,
            policy,
        };
        c.validate()?;
        Ok(c)
    }
}

fn read_frames(path: &Path) -> Result<Vec<detkit_gpu::pet::DataFrameV2>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(pet::frames_from_bytes(&bytes)?)
}

/// Runs `detkit pet ARGS`.
pub fn main(args: &[String]) -> Result<()> {
    let Some(cmd) = args.first() else {
        bail!("{USAGE}");
    };
    if matches!(cmd.as_str(), "help" | "--help" | "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    let a = Args::parse(&args[1..])?;
    match cmd.as_str() {
        "convert" => {
            a.only(&["scanner", "input", "output"])?;
            let scanner = Scanner::from_toml_file(&a.path("scanner")?)?;
            let (input, output) = (a.path("input")?, a.path("output")?);
            let b = a.backend()?;
            let frames = read_frames(&input)?;
            let (singles, st) = b.pet_convert(&frames, &scanner)?;
            pet::write_singles(&output, &singles)?;
            eprintln!(
                "{} frames: {} singles accepted, {} outside the energy window, {} with the \
                 energy-table index clamped to 999, {} with a bad address{}",
                st.frames,
                st.accepted,
                st.rejected_energy,
                st.clamped,
                st.bad_address,
                st.first_bad_address
                    .map(|i| format!(" (first: frame {i})"))
                    .unwrap_or_default()
            );
            Ok(())
        }
        "sort" => {
            a.only(&["input", "output"])?;
            let (input, output) = (a.path("input")?, a.path("output")?);
            let b = a.backend()?;
            let singles = pet::read_singles(&input)?;
            let sorted = b.pet_sort(&singles)?;
            pet::write_singles(&output, &sorted)?;
            eprintln!("{} singles sorted", sorted.len());
            Ok(())
        }
        "coincide" => {
            a.only(&["input", "output", "window", "delay", "policy"])?;
            let (input, output) = (a.path("input")?, a.path("output")?);
            let c = a.coincide_config(None)?;
            let b = a.backend()?;
            let singles = pet::read_singles(&input)?;
            let pairs = b.pet_coincide(&singles, &c)?;
            let mut w = PairsWriter::create(&output)?;
            w.write(&pairs)?;
            let n = w.finish()?;
            eprintln!(
                "{} singles: {n} coincidences ({})",
                singles.len(),
                c.policy.name()
            );
            Ok(())
        }
        "run" => {
            a.only(&[
                "scanner", "input", "output", "window", "delay", "policy", "chunk", "pending",
            ])?;
            let scanner = Scanner::from_toml_file(&a.path("scanner")?)?;
            let (input, output) = (a.path("input")?, a.path("output")?);
            let c = a.coincide_config(Some(scanner.time_window))?;
            let sc = StreamConfig {
                chunk_frames: a.num("chunk")?.unwrap_or(1 << 22),
                pending_capacity: a.num("pending")?.unwrap_or(1 << 22),
            };
            let b = a.backend()?;
            let f = std::fs::File::open(&input)
                .with_context(|| format!("opening {}", input.display()))?;
            let total_frames = f.metadata().map(|m| m.len() / 16).unwrap_or(0).max(1);
            let mut r = std::io::BufReader::with_capacity(1 << 20, f);
            let mut w = PairsWriter::create(&output)?;
            let t = std::time::Instant::now();
            let st = b.pet_run_stream(
                &mut r,
                &scanner,
                &c,
                &sc,
                |p| w.write(p),
                |s| {
                    let frac = s.convert.frames as f64 / total_frames as f64;
                    let bar = (frac * 30.0).round().min(30.0) as usize;
                    eprint!(
                        "\r[{}{}] {:5.1}%  {} frames  {} pairs  {:.1} M frames/s ",
                        "#".repeat(bar),
                        ".".repeat(30 - bar),
                        100.0 * frac.min(1.0),
                        s.convert.frames,
                        s.pairs,
                        s.convert.frames as f64 / t.elapsed().as_secs_f64() / 1e6
                    );
                    std::io::stderr().flush().ok();
                },
            )?;
            eprintln!();
            w.finish()?;
            eprintln!(
                "{} chunks, {} frames, {} singles, {} coincidences; {} frames outside the \
                 energy window, {} clamped energy-table indices, {} bad addresses; at most {} \
                 singles carried between chunks",
                st.chunks,
                st.convert.frames,
                st.convert.accepted,
                st.pairs,
                st.convert.rejected_energy,
                st.convert.clamped,
                st.convert.bad_address,
                st.max_pending
            );
            Ok(())
        }
        "generate" => {
            a.only(&["dir", "singles", "rate", "seed", "scanner", "slice"])?;
            let dir = a.path("dir")?;
            std::fs::create_dir_all(&dir)?;
            let seed = a.num("seed")?.unwrap_or(1u64);
            let scanner = match a.get("scanner").unwrap_or("small-animal") {
                "tiny" => gen::tiny_scanner(seed),
                "small-animal" => gen::small_animal_scanner(seed),
                "bench" => gen::bench_scanner(seed),
                other => bail!("unknown scanner `{other}` (tiny, small-animal, bench)"),
            };
            let toml = scanner.write_files(&dir, "scanner")?;
            let cfg = gen::AcquisitionConfig {
                seed,
                singles: a.num("singles")?.unwrap_or(1_000_000),
                singles_rate: a.num("rate")?.unwrap_or(1e7),
                slice: a.num("slice")?.unwrap_or(1_000_000_000),
                ..Default::default()
            };
            let acq = gen::acquisition(&scanner, &cfg);
            let frames = dir.join("frames.bin");
            std::fs::write(&frames, gen::frame_bytes(&acq.frames))?;
            eprintln!(
                "wrote {} ({} frames, {} truth pairs) and {}",
                frames.display(),
                acq.frames.len(),
                acq.truth.len(),
                toml.display()
            );
            Ok(())
        }
        other => bail!("unknown pet command `{other}`\n{USAGE}"),
    }
}

/// The demo lines of this family: conversion, sort, coincidences and the streamed chain on a
/// generated acquisition, each checked against the oracle.
pub fn demo(backend: &Backend) -> Result<Vec<Line>> {
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
    let mut lines = Vec::new();
    let (want_s, want_st) = oracle::convert(
        &acq.frames,
        &scanner.params,
        &scanner.position,
        &scanner.energy,
    );
    let ((singles, st), secs) = timed(|| backend.pet_convert(&acq.frames, &scanner))?;
    lines.push(Line {
        primitive: "pet convert frames",
        ok: singles == want_s && st == want_st,
        secs,
        items: n,
    });
    let want_sorted = oracle::sort(&want_s)?;
    let (sorted, secs) = timed(|| backend.pet_sort(&singles))?;
    lines.push(Line {
        primitive: "pet merge sort (time)",
        ok: sorted == want_sorted,
        secs,
        items: singles.len(),
    });
    let c = CoincideConfig::prompt(scanner.time_window);
    let want_pairs = oracle::coincide(&want_sorted, &c)?;
    let (pairs, secs) = timed(|| backend.pet_coincide(&sorted, &c))?;
    lines.push(Line {
        primitive: "pet coincide (killAll)",
        ok: pairs == want_pairs,
        secs,
        items: sorted.len(),
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
    lines.push(Line {
        primitive: "pet chain (streamed)",
        ok: streamed == want_pairs,
        secs,
        items: n,
    });
    Ok(lines)
}
