//! `detkit cluster`: CMS pixel clustering (issue 3).
//!
//! ```text
//! detkit cluster --geometry phase1|phase2 --input digis.csv --output clusters.csv
//!                [--backend auto|cpu|cuda] [--charge-cut ADC]
//! detkit cluster generate --geometry phase1|phase2 [--dense] [--seed S] --output digis.csv
//! ```
//! Input: CSV with header `module,x,y,adc`, or the binary format (`DKDIGI01`, detected by
//! its magic). Output: CSV with header `module,x,y,adc,cluster` (same rows, same order), or
//! binary cluster indices (`DKCLUS01`) when the output name ends in `.bin`.
//! `--charge-cut ADC` applies one threshold to every module; without it the geometry's CMS
//! defaults apply (Phase-1: 2000 e⁻ on layer 1, 4000 elsewhere); `--charge-cut 0` keeps
//! every cluster.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use detkit::clustering::{self as cl, gen, ChargeCut, Geometry};
use detkit::{cpu, Backend};

use crate::Line;

const USAGE: &str = "usage: detkit cluster --geometry phase1|phase2 --input digis.csv --output clusters.csv [--backend auto|cpu|cuda] [--charge-cut ADC]
       detkit cluster generate --geometry phase1|phase2 [--dense] [--seed S] --output digis.csv";

/// Runs `detkit cluster ARGS`.
pub fn main(args: &[String]) -> Result<()> {
    if args.first().map(String::as_str) == Some("generate") {
        return generate(&args[1..]);
    }
    let (mut geometry, mut input, mut output, mut backend, mut cut) =
        (None, None, None, "auto".to_string(), None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .with_context(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--geometry" => geometry = Some(val()?.clone()),
            "--input" => input = Some(val()?.clone()),
            "--output" => output = Some(val()?.clone()),
            "--backend" => backend = val()?.clone(),
            "--charge-cut" => {
                cut = Some(
                    val()?
                        .parse::<u32>()
                        .context("--charge-cut takes an integer charge")?,
                )
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }
    let geometry = Geometry::by_name(&geometry.context(USAGE)?)?;
    let (input, output) = (input.context(USAGE)?, output.context(USAGE)?);
    let backend = crate::backend_from(&backend)?;
    eprintln!("{}", backend.description());

    let mut bytes = Vec::new();
    BufReader::new(File::open(&input).with_context(|| format!("opening {input}"))?)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {input}"))?;
    let digis = if bytes.starts_with(cl::BINARY_MAGIC) {
        cl::read_binary(&bytes[..])?
    } else {
        cl::read_csv(&bytes[..])?
    };
    let cut = cut.map_or(geometry.default_cut, ChargeCut::uniform);
    let t = Instant::now();
    let clusters = backend
        .cluster(&digis, &geometry, Some(cut))
        .with_context(|| format!("clustering {input}"))?;
    let secs = t.elapsed().as_secs_f64();
    let w = BufWriter::new(File::create(&output).with_context(|| format!("creating {output}"))?);
    if output.ends_with(".bin") {
        cl::write_binary_clusters(w, &clusters.clus)?;
    } else {
        cl::write_csv(w, &digis, &clusters.clus)?;
    }
    eprintln!(
        "{} digis, {} modules, {} clusters (charge cut {} / {} e-), {} modules over the fast path's capacity; {:.1} ms",
        digis.len(),
        clusters.module_first.iter().filter(|&&f| f != u32::MAX).count(),
        clusters.total(),
        cut.layer1,
        cut.other,
        clusters.fallback_modules,
        secs * 1e3
    );
    Ok(())
}

fn generate(args: &[String]) -> Result<()> {
    let (mut geometry, mut output, mut dense, mut seed) = ("phase1".to_string(), None, false, 1u64);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--geometry" => geometry = it.next().context("--geometry needs a value")?.clone(),
            "--output" => output = Some(it.next().context("--output needs a value")?.clone()),
            "--seed" => seed = it.next().context("--seed needs a value")?.parse()?,
            "--dense" => dense = true,
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }
    let geometry = Geometry::by_name(&geometry)?;
    let output = output.context(USAGE)?;
    let config = if dense {
        gen::EventConfig::dense()
    } else {
        gen::EventConfig::run3()
    };
    let digis = gen::event(&geometry, &config, seed);
    let w = BufWriter::new(File::create(&output).with_context(|| format!("creating {output}"))?);
    if output.ends_with(".bin") {
        cl::write_binary(w, &digis)?;
    } else {
        let mut w = w;
        use std::io::Write;
        writeln!(w, "module,x,y,adc")?;
        for i in 0..digis.len() {
            writeln!(
                w,
                "{},{},{},{}",
                digis.module[i], digis.x[i], digis.y[i], digis.adc[i]
            )?;
        }
    }
    eprintln!("{} digis written to {output}", digis.len());
    Ok(())
}

/// The demo line: a Run-3-like Phase-1 event with the CMS charge cut, checked against the
/// oracle.
pub fn demo(backend: &Backend) -> Result<Vec<Line>> {
    let g = Geometry::phase1();
    let d = gen::run3_event(2026);
    let (got, secs) = crate::timed(|| backend.cluster(&d, &g, Some(g.default_cut)))?;
    let want = cpu::clustering::cluster(&d, &[0, d.len() as u32], &g, Some(g.default_cut));
    Ok(vec![Line {
        primitive: "pixel clustering (run3 event)",
        ok: got.same_clusters(&want),
        secs,
        items: d.len(),
    }])
}
