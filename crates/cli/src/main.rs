//! `detkit`: the command-line tool.
//!
//! `detkit demo [--backend auto|cpu|cuda] [--size N]` runs every primitive on generated
//! data, checks each result against its CPU oracle and prints a table: primitive, size,
//! backend, check, throughput. Each algorithm family adds its subcommand and its demo line
//! in a module of its own ([`cluster`], [`pet`], [`seed`]).

mod cluster;
#[allow(dead_code)] // wired up by the CLI rewrite (issue 10)
mod output;
mod pet;
mod seed;

use std::time::Instant;

use anyhow::{bail, Context, Result};
use detkit::{cpu, data, Backend, BucketOrder, ScanKind};

const USAGE: &str = "usage: detkit demo [--backend auto|cpu|cuda] [--size N]
       detkit cluster ...   (detkit cluster --help)
       detkit pet ...       (detkit pet --help)
       detkit seed ...      (detkit seed --help)";

pub(crate) fn backend_from(name: &str) -> Result<Backend> {
    Ok(match name {
        "auto" => Backend::auto(),
        "cpu" => Backend::cpu(),
        "cuda" => Backend::cuda(0).context("--backend cuda")?,
        other => bail!("unknown backend `{other}` (auto, cpu or cuda)"),
    })
}

/// One row of the demo table.
pub(crate) struct Line {
    pub primitive: &'static str,
    pub ok: bool,
    pub secs: f64,
    pub items: usize,
}

pub(crate) fn timed<T>(f: impl FnOnce() -> detkit::Result<T>) -> Result<(T, f64)> {
    let t = Instant::now();
    let r = f()?;
    Ok((r, t.elapsed().as_secs_f64()))
}

fn demo(backend: &Backend, n: usize) -> Result<bool> {
    println!("{}", backend.description());
    let mut lines = Vec::new();
    let steps = 10;
    let mut step = 0;
    let mut progress = |name: &str| {
        step += 1;
        eprintln!("[{step}/{steps}] {name}");
    };

    progress("exclusive scan u32");
    let v = data::scan_values(n);
    let (got, secs) = timed(|| backend.scan_u32(&v, ScanKind::Exclusive))?;
    lines.push(Line {
        primitive: "scan u32 (exclusive)",
        ok: got == cpu::scan::scan(&v, ScanKind::Exclusive),
        secs,
        items: n,
    });

    progress("inclusive scan u64");
    let v64: Vec<u64> = v.iter().map(|&x| (x as u64) << 30).collect();
    let (got, secs) = timed(|| backend.scan_u64(&v64, ScanKind::Inclusive))?;
    lines.push(Line {
        primitive: "scan u64 (inclusive)",
        ok: got == cpu::scan::scan(&v64, ScanKind::Inclusive),
        secs,
        items: n,
    });

    progress("block scan");
    let (got, secs) = timed(|| backend.block_scan_u32(&v, 256, ScanKind::Exclusive))?;
    lines.push(Line {
        primitive: "block scan (256 threads)",
        ok: got == cpu::scan::block_scan(&v, 256, ScanKind::Exclusive),
        secs,
        items: n,
    });

    progress("compaction");
    let s = data::select_values(n);
    let (got, secs) = timed(|| backend.select_in_range_u32(&s, 0, 1 << 31))?;
    lines.push(Line {
        primitive: "select (50%, in order)",
        ok: got == cpu::compact::select(&s, |_, x| x < 1 << 31),
        secs,
        items: n,
    });

    progress("histogram");
    let k = detkit::histogram::gen::skewed_keys(n);
    let (got, secs) = timed(|| backend.histogram(&k, 256))?;
    lines.push(Line {
        primitive: "histogram (256 bins, skewed)",
        ok: got == detkit::histogram::cpu::histogram(&k, 256),
        secs,
        items: n,
    });

    progress("bucket container");
    let keys = data::random_below(5, n, 4096);
    let (got, secs) = timed(|| backend.bucket(&keys, 4096, BucketOrder::Stable))?;
    lines.push(Line {
        primitive: "bucket (4096 bins, stable)",
        ok: got == cpu::bucket::bucket(&keys, 4096),
        secs,
        items: n,
    });

    progress("block bucket container");
    let mut segments = vec![0u32];
    while (*segments.last().expect("non-empty") as usize) < n {
        let next =
            (*segments.last().expect("non-empty") as usize + 1 + (segments.len() * 7919) % 3000)
                .min(n);
        segments.push(next as u32);
    }
    let cols = data::random_below(6, n, 416);
    let (got, secs) =
        timed(|| backend.block_bucket(&cols, &segments, 416, BucketOrder::Stable, None))?;
    let want = cpu::bucket::block_bucket(&cols, &segments, 416);
    lines.push(Line {
        primitive: "block bucket (416 bins)",
        ok: got.offsets == want.offsets && got.content == want.content,
        secs,
        items: n,
    });

    progress("cms pixel clustering");
    lines.extend(cluster::demo(backend)?);
    progress("pet chain");
    lines.extend(pet::demo(backend)?);
    progress("track seeding");
    lines.extend(seed::demo(backend)?);

    println!(
        "{:<30} {:>10} {:>8} {:>7} {:>14}",
        "primitive", "size", "backend", "check", "M items/s"
    );
    let mut all = true;
    for l in &lines {
        all &= l.ok;
        println!(
            "{:<30} {:>10} {:>8} {:>7} {:>14.1}",
            l.primitive,
            l.items,
            backend.kind().to_string(),
            if l.ok { "ok" } else { "MISMATCH" },
            l.items as f64 / l.secs / 1e6
        );
    }
    println!(
        "(throughput includes host-device copies; see `detkit-bench` for device-resident timings)"
    );
    Ok(all)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        bail!("{USAGE}");
    };
    match cmd.as_str() {
        "cluster" => return cluster::main(&args[1..]),
        "pet" => return pet::main(&args[1..]),
        "seed" => return seed::main(&args[1..]),
        _ => {}
    }
    let mut backend = "auto".to_string();
    let mut size = 1usize << 22;
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--backend" => backend = it.next().context("--backend needs a value")?.clone(),
            "--size" => {
                size = it
                    .next()
                    .context("--size needs a value")?
                    .parse()
                    .context("--size")?
            }
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }
    match cmd.as_str() {
        "demo" => {
            let b = backend_from(&backend)?;
            if !demo(&b, size)? {
                bail!("a primitive disagreed with its CPU oracle");
            }
            Ok(())
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command `{other}`\n{USAGE}"),
    }
}
