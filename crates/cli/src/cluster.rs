//! `detkit cluster`: CMS pixel clustering.
//!
//! ```text
//! detkit cluster [--geometry phase1|phase2] --input digis.csv --output clusters.csv
//!                [--backend auto|cpu|cuda] [--charge-cut ELECTRONS]
//! detkit cluster generate [--geometry phase1|phase2] [--dense] [--seed S] --output digis.csv
//! ```
//! Input: CSV with header `module,x,y,adc`, or the binary format (`DKDIGI01`, detected by
//! its magic). Output: CSV with header `module,x,y,adc,cluster` (same rows, same order), or
//! binary cluster indices (`DKCLUS01`) when the output name ends in `.bin`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use detkit::clustering::{self as cl, gen, ChargeCut, Geometry};
use detkit::Backend;

use crate::demo::{timed, Row};
use crate::output::{check_outputs, AtomicFile, OutputSet};
use crate::ui::Ui;
use crate::BackendChoice;

/// `detkit cluster`: cluster a file of digis, or `generate` one.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct ClusterCmd {
    #[command(subcommand)]
    sub: Option<ClusterSub>,
    #[command(flatten)]
    run: ClusterArgs,
}

#[derive(Subcommand, Debug)]
pub(crate) enum ClusterSub {
    /// Write a generated event (Run-3-like pile-up, or dense heavy-ion-like with --dense).
    Generate(GenerateArgs),
}

/// The pixel detector.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum GeometryName {
    /// CMS Phase-1 (Run 3): 1856 modules of 160 x 416 pixels; charge cut 2000 e- on layer 1,
    /// 4000 e- elsewhere.
    Phase1,
    /// CMS Phase-2 (HL-LHC) inner tracker.
    Phase2,
}

impl GeometryName {
    fn geometry(self) -> Geometry {
        match self {
            GeometryName::Phase1 => Geometry::phase1(),
            GeometryName::Phase2 => Geometry::phase2(),
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct ClusterArgs {
    /// The pixel detector the module numbers refer to.
    #[arg(long, value_enum, default_value_t = GeometryName::Phase1)]
    geometry: GeometryName,
    /// Digis: CSV with header `module,x,y,adc` (module 65534 = invalid digi; one module's
    /// digis consecutive), or binary `DKDIGI01` (detected by its magic). Repeat for several
    /// events, each with its own `--output` (same order).
    #[arg(long = "input", required = true, value_name = "FILE")]
    inputs: Vec<PathBuf>,
    /// Clusters: CSV `module,x,y,adc,cluster` (the input rows in input order; cluster = index
    /// within the module, -1 = invalid, duplicate or cut), or binary `DKCLUS01` i32 indices if
    /// the name ends in `.bin`. One per `--input`.
    #[arg(long = "output", required = true, value_name = "FILE")]
    outputs: Vec<PathBuf>,
    /// Which implementation runs the kernels.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    /// Spread the input files over these GPUs (`all` or ordinals such as `0,1`; CUDA only);
    /// outputs are the same as on one device.
    #[arg(long, value_name = "all|0,1")]
    devices: Option<String>,
    /// Minimum cluster charge for every module, in electrons (the unit of the `adc` column);
    /// default: the geometry's CMS cut (Phase-1: 2000 on layer 1, 4000 elsewhere); 0 keeps
    /// every cluster.
    #[arg(long, value_name = "ELECTRONS")]
    charge_cut: Option<u32>,
}

#[derive(Args, Debug)]
pub(crate) struct GenerateArgs {
    /// The pixel detector to generate for.
    #[arg(long, value_enum, default_value_t = GeometryName::Phase1)]
    geometry: GeometryName,
    /// A dense, heavy-ion-like event (about 1.7 M digis) instead of Run-3-like pile-up.
    #[arg(long)]
    dense: bool,
    /// Random seed: the same seed gives the same event.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Digis file: CSV `module,x,y,adc`, or binary `DKDIGI01` if the name ends in `.bin`.
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
}

fn is_bin(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "bin")
}

/// Runs `detkit cluster ...`.
pub fn run(ui: &Ui, c: ClusterCmd) -> Result<()> {
    match c.sub {
        Some(ClusterSub::Generate(g)) => generate(ui, g),
        None => cluster(ui, c.run),
    }
}

/// The digis and, for CSV, the file line of each.
fn read_digis(path: &Path) -> Result<(cl::Digis, Option<Vec<u64>>)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let name = path.display().to_string();
    // Binary when it starts with a detkit magic (`DK`) or is not text: then a wrong magic, a
    // short header or a count that disagrees with the length is named with the sizes.
    let head = &bytes[..bytes.len().min(4096)];
    let text = match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(), // cut inside a character at the 4096th byte
    };
    Ok(if bytes.starts_with(b"DK") || !text {
        (cl::io::read_binary_bytes(&bytes, &name)?, None)
    } else {
        let (d, lines) = cl::read_csv_with_lines(&bytes[..], &name)?;
        (d, Some(lines))
    })
}

fn cluster(ui: &Ui, a: ClusterArgs) -> Result<()> {
    if a.inputs.len() != a.outputs.len() {
        crate::usage_error(format!(
            "{} --input but {} --output: give one output per input, in the same order",
            a.inputs.len(),
            a.outputs.len()
        ));
    }
    let outs: Vec<&Path> = a.outputs.iter().map(|p| p.as_path()).collect();
    let ins: Vec<&Path> = a.inputs.iter().map(|p| p.as_path()).collect();
    check_outputs(&outs, &ins)?;
    let geometry = a.geometry.geometry();
    let cut = a
        .charge_cut
        .map_or(geometry.default_cut, ChargeCut::uniform);
    let pool = crate::open_pool(a.backend, a.devices.as_deref(), ui)?;
    let start = Instant::now();
    let spin = ui.spinner(&format!(
        "clustering {} file(s) on {} device(s)",
        ins.len(),
        pool.len()
    ));
    let jobs: Vec<(&Path, &Path)> = ins.iter().copied().zip(outs.iter().copied()).collect();
    let done = pool.map(jobs, |backend, (input, output)| {
        cluster_file(ui, backend, &geometry, cut, input, output)
    })?;
    drop(spin);
    let mut files = OutputSet::default();
    let mut digis = 0;
    for (f, n) in done {
        files.push(f);
        digis += n;
    }
    // Every output is renamed into place only after all were written.
    files.commit()?;
    ui.summary("cluster", digis, "digis", start);
    Ok(())
}

/// Clusters one input file into a written, not yet committed, output; returns it and the
/// number of digis.
fn cluster_file(
    ui: &Ui,
    backend: &Backend,
    geometry: &Geometry,
    cut: ChargeCut,
    input: &Path,
    output: &Path,
) -> Result<(AtomicFile, u64)> {
    let (digis, lines) = read_digis(input)?;
    let clus = if digis.is_empty() {
        Vec::new()
    } else {
        let clusters = backend
            .cluster(&digis, geometry, Some(cut))
            .map_err(|e| crate::locate(e, input, lines.as_deref()))?;
        ui.verbose(format!(
            "{}: {} modules, {} clusters (charge cut {} / {} e-), {} modules over the fast path's capacity",
            input.display(),
            clusters.module_first.iter().filter(|&&f| f != u32::MAX).count(),
            clusters.total(),
            cut.layer1,
            cut.other,
            clusters.fallback_modules,
        ));
        clusters.clus
    };
    let mut f = AtomicFile::create(output)?;
    if is_bin(output) {
        cl::write_binary_clusters(&mut f, &clus)?;
    } else {
        cl::write_csv(&mut f, &digis, &clus)?;
    }
    Ok((f, digis.len() as u64))
}

fn generate(ui: &Ui, a: GenerateArgs) -> Result<()> {
    check_outputs(&[&a.output], &[])?;
    let start = Instant::now();
    let geometry = a.geometry.geometry();
    let config = if a.dense {
        gen::EventConfig::dense()
    } else {
        gen::EventConfig::run3()
    };
    let digis = gen::event(&geometry, &config, a.seed);
    let mut f = AtomicFile::create(&a.output)?;
    if is_bin(&a.output) {
        cl::write_binary(&mut f, &digis)?;
    } else {
        writeln!(f, "module,x,y,adc")?;
        for i in 0..digis.len() {
            writeln!(
                f,
                "{},{},{},{}",
                digis.module[i], digis.x[i], digis.y[i], digis.adc[i]
            )?;
        }
    }
    f.commit()?;
    ui.summary(
        &format!("cluster generate: {}", a.output.display()),
        digis.len() as u64,
        "digis",
        start,
    );
    Ok(())
}

/// The demo row: a Run-3-like Phase-1 event with the CMS charge cut, checked against the
/// oracle.
pub fn demo(backend: &Backend) -> Result<Vec<Row>> {
    let g = Geometry::phase1();
    let d = gen::run3_event(2026);
    let (got, secs) = timed(|| backend.cluster(&d, &g, Some(g.default_cut)))?;
    let want = detkit::clustering::cpu::cluster(&d, &[0, d.len() as u32], &g, Some(g.default_cut));
    Ok(vec![Row {
        name: "pixel clustering (run3 event)",
        items: d.len(),
        unit: "digis",
        ok: got.same_clusters(&want),
        secs,
    }])
}
