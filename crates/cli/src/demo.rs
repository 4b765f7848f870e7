//! `detkit demo`: every kernel on generated data, each result checked against its CPU oracle,
//! in a table with a throughput for every row.

use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use detkit::{Backend, BucketOrder, ScanKind};

use crate::ui::{rate, Ui};
use crate::BackendChoice;

/// Largest `--size`: 2^28 items (the primitives' inputs, outputs and oracle results then take
/// about 27 GB of host memory: [`BYTES_PER_ITEM`]).
pub const MAX_SIZE: u64 = 1 << 28;

/// Host memory the primitive rows hold per item of `--size` (every row's input, result and
/// oracle result are kept for the table; measured peak about 94 bytes an item on the CPU).
pub const BYTES_PER_ITEM: u64 = 100;
/// Host memory of the chain rows (fixed generated events), and the program itself.
pub const FIXED_BYTES: u64 = 512 << 20;

/// Arguments of `detkit demo`.
#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Which implementation runs the kernels.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    /// Items per primitive (1 to 2^28 = 268435456); about 100 bytes of host memory per item
    /// (27 GB at 2^28), checked before the run; the chain rows use fixed generated events.
    #[arg(long, default_value_t = 1 << 22, value_parser = clap::value_parser!(u64).range(1..=MAX_SIZE))]
    size: u64,
}

/// One row of the demo table.
pub struct Row {
    /// What ran.
    pub name: &'static str,
    /// Items processed.
    pub items: usize,
    /// The unit of `items`.
    pub unit: &'static str,
    /// Equal to the oracle.
    pub ok: bool,
    /// Wall time of the backend call, host-device copies included.
    pub secs: f64,
}

/// Times one backend call.
pub fn timed<T>(f: impl FnOnce() -> detkit::Result<T>) -> Result<(T, f64)> {
    let t = Instant::now();
    let r = f()?;
    Ok((r, t.elapsed().as_secs_f64()))
}

/// The rows, in table order, and how many there are (the progress counts to it).
const ROWS: usize = 14;

fn primitives(
    backend: &Backend,
    n: usize,
    rows: &mut Vec<Row>,
    tick: &mut dyn FnMut(&Row),
) -> Result<()> {
    let mut push = |rows: &mut Vec<Row>, r: Row| {
        tick(&r);
        rows.push(r);
    };
    let v = detkit::scan::gen::scan_values(n);
    let (got, secs) = timed(|| backend.scan_u32(&v, ScanKind::Exclusive))?;
    let ok = got == detkit::scan::cpu::scan(&v, ScanKind::Exclusive);
    push(
        rows,
        Row {
            name: "scan u32 (exclusive)",
            items: n,
            unit: "items",
            ok,
            secs,
        },
    );

    let v64: Vec<u64> = v.iter().map(|&x| (x as u64) << 30).collect();
    let (got, secs) = timed(|| backend.scan_u64(&v64, ScanKind::Inclusive))?;
    let ok = got == detkit::scan::cpu::scan(&v64, ScanKind::Inclusive);
    push(
        rows,
        Row {
            name: "scan u64 (inclusive)",
            items: n,
            unit: "items",
            ok,
            secs,
        },
    );

    let (got, secs) = timed(|| backend.block_scan_u32(&v, 256, ScanKind::Exclusive))?;
    let ok = got == detkit::scan::cpu::block_scan(&v, 256, ScanKind::Exclusive);
    push(
        rows,
        Row {
            name: "block scan (256 threads)",
            items: n,
            unit: "items",
            ok,
            secs,
        },
    );

    let s = detkit::compact::gen::select_values(n);
    let (got, secs) = timed(|| backend.select_in_range_u32(&s, 0, 1 << 31))?;
    let ok = got == detkit::compact::cpu::select(&s, |_, x| x < 1 << 31);
    push(
        rows,
        Row {
            name: "select (50%, in order)",
            items: n,
            unit: "items",
            ok,
            secs,
        },
    );

    let k = detkit::histogram::gen::skewed_keys(n);
    let (got, secs) = timed(|| backend.histogram(&k, 256))?;
    let ok = got == detkit::histogram::cpu::histogram(&k, 256);
    push(
        rows,
        Row {
            name: "histogram (256 bins, skewed)",
            items: n,
            unit: "items",
            ok,
            secs,
        },
    );

    // 48-bit keys (a timestamp's width) with their input index: 6 radix passes.
    let lo = detkit::rng::random_below(7, n, u32::MAX);
    let hi = detkit::rng::random_below(8, n, 1 << 16);
    let k48: Vec<u64> = lo
        .iter()
        .zip(&hi)
        .map(|(&l, &h)| (h as u64) << 32 | l as u64)
        .collect();
    let idx: Vec<u32> = (0..n as u32).collect();
    let opts = detkit::sort::SortOptions::bits(0, 48);
    let (got, secs) = timed(|| backend.sort_pairs_u64(&k48, &idx, opts))?;
    let ok = got == detkit::sort::cpu::sort_pairs(&k48, &idx, &opts);
    push(
        rows,
        Row {
            name: "radix sort (48-bit keys + index)",
            items: n,
            unit: "items",
            ok,
            secs,
        },
    );

    let keys = detkit::rng::random_below(5, n, 4096);
    let (got, secs) = timed(|| backend.bucket(&keys, 4096, BucketOrder::Stable))?;
    let ok = got == detkit::bucket::cpu::bucket(&keys, 4096);
    push(
        rows,
        Row {
            name: "bucket (4096 bins, stable)",
            items: n,
            unit: "items",
            ok,
            secs,
        },
    );

    // Segments of 1 to 3000 items, as modules of a pixel detector.
    let mut segments = vec![0u32];
    while (*segments.last().expect("non-empty") as usize) < n {
        let last = *segments.last().expect("non-empty") as usize;
        segments.push((last + 1 + (segments.len() * 7919) % 3000).min(n) as u32);
    }
    let cols = detkit::rng::random_below(6, n, 416);
    let (got, secs) =
        timed(|| backend.block_bucket(&cols, &segments, 416, BucketOrder::Stable, None))?;
    let want = detkit::bucket::cpu::block_bucket(&cols, &segments, 416);
    let ok = got.offsets == want.offsets && got.content == want.content;
    push(
        rows,
        Row {
            name: "block bucket (416 bins)",
            items: n,
            unit: "items",
            ok,
            secs,
        },
    );
    Ok(())
}

/// Runs `detkit demo`.
pub fn run(ui: &Ui, a: DemoArgs) -> Result<()> {
    detkit::mem::check_estimate(
        format!("demo --size {}", a.size),
        a.size * BYTES_PER_ITEM + FIXED_BYTES,
    )?;
    let backend = a.backend.open(ui)?;
    let n = a.size as usize;
    let start = Instant::now();
    if !ui.is_quiet() {
        println!("{}", backend.description());
    }
    let mut rows: Vec<Row> = Vec::with_capacity(ROWS);
    let mut done = 0;
    let mut tick = |r: &Row| {
        done += 1;
        ui.info(format!(
            "[{done:>2}/{ROWS}] {:<30} {}",
            r.name,
            if r.ok { "ok" } else { "MISMATCH" }
        ));
    };
    primitives(&backend, n, &mut rows, &mut tick)?;
    for r in crate::cluster::demo(&backend)?
        .into_iter()
        .chain(crate::pet::demo(&backend)?)
        .chain(crate::seed::demo(&backend)?)
    {
        tick(&r);
        rows.push(r);
    }
    debug_assert_eq!(rows.len(), ROWS);
    let all = rows.iter().all(|r| r.ok);
    // With -q nothing but errors: the table only when a row disagreed with its oracle.
    let table = |line: String| {
        if !ui.is_quiet() || !all {
            println!("{line}");
        }
    };

    table(format!(
        "{:<30} {:>10} {:<12} {:>8} {:>7} {:>10} {:>22}",
        "kernel", "items", "unit", "backend", "check", "time", "throughput"
    ));
    for r in &rows {
        table(format!(
            "{:<30} {:>10} {:<12} {:>8} {:>7} {:>10} {:>22}",
            r.name,
            r.items,
            r.unit,
            backend.kind().to_string(),
            if r.ok { "ok" } else { "MISMATCH" },
            crate::ui::human_secs(r.secs),
            rate(r.items as f64, r.secs, r.unit)
        ));
    }
    table(
        "legend: items = input size; check = result equal to the CPU oracle (bit for bit); \
         time = wall time of one backend call, including host-device copies and, on CUDA, \
         allocation; throughput = items / time. Device-resident timings: `detkit-bench`."
            .to_string(),
    );
    ui.summary(
        "demo",
        rows.iter().map(|r| r.items as u64).sum(),
        "items",
        start,
    );
    if !all {
        bail!("a kernel disagreed with its CPU oracle (see MISMATCH above)");
    }
    Ok(())
}
