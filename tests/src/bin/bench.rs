//! detkit-bench: device-resident timings of the primitives, to put beside CUB's
//! (`bench/cub_baseline.cu`, same inputs, same CSV format; `bench/compare.py` joins them).
//!
//! Each primitive and size: generate the input (the formula of `detkit::data`), run once and
//! check the result against the CPU oracle (no time is printed for a wrong result), warm up,
//! then time `reps` runs with CUDA events and report the median.
//!
//! Usage: `detkit-bench [--sizes 20,22,24,26,28] [--reps 30] [--csv FILE] [--sort-only]
//! [--no-sort] [--variants]`
//! (`--sort-only`: the copy and the radix-sort rows only, e.g. with `--sizes
//! 10,12,14,16,18,20,22,24,26,28`; `--no-sort`: every row but the sorts; `--variants`: also
//! every kernel shape of `detkit::tuning` for the scan, the select, the histogram and the
//! sort's onesweep launches (every sort row under each shape), as rows
//! `NAME@vK` (shape K of the table printed first), each checked against the oracle first;
//! `--sort-shapes 0,1,3`: the sort rows under these onesweep shapes only, with or without
//! `--variants`).

use anyhow::{bail, Context, Result};
use detkit::compact::Selection;
use detkit::error::DriverContext;
use detkit::histogram::HistogramStrategy;
use detkit::tuning::Tuned;
use detkit::{Backend, BucketOrder, ScanKind};
use detkit_tests::{check, median_ms, parse_list};
use std::io::Write;

struct Row {
    primitive: String,
    n: usize,
    ms: f64,
    bytes: f64,
}

fn main() -> Result<()> {
    let mut sizes = vec![20u32, 22, 24, 26, 28];
    let mut reps = 30usize;
    let mut csv = None;
    let mut sort_only = false;
    let mut no_sort = false;
    let mut variants = false;
    let mut sort_shapes: Option<Vec<u32>> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sizes" => sizes = parse_list(&args.next().context("--sizes needs a list")?)?,
            "--reps" => reps = args.next().context("--reps needs a number")?.parse()?,
            "--csv" => csv = Some(args.next().context("--csv needs a file")?),
            "--sort-only" => sort_only = true,
            "--no-sort" => no_sort = true,
            "--variants" => variants = true,
            "--sort-shapes" => {
                sort_shapes = Some(parse_list(
                    &args.next().context("--sort-shapes needs a list")?,
                )?)
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if !detkit::driver_present() {
        println!("skipped: no CUDA driver (libcuda not found); nothing timed");
        return Ok(());
    }
    let backend = Backend::cuda(0).context("detkit-bench needs a CUDA device")?;
    let g = backend.gpu().expect("cuda");
    println!("# device: {}; kernels: {}", g.device_name(), g.image());
    // The shapes each row set runs: the default only, or every shape of the table.
    let shapes = |t: Tuned| -> Vec<usize> {
        if variants {
            (0..t.shapes().len()).collect()
        } else {
            vec![0]
        }
    };
    let label = |name: &str, v: usize| -> String {
        if v == 0 {
            name.to_string()
        } else {
            format!("{name}@v{v}")
        }
    };
    if variants {
        for t in [
            Tuned::ScanU32,
            Tuned::SelectRange,
            Tuned::HistogramShared,
            Tuned::LookbackNs,
            Tuned::SortOnesweep,
        ] {
            for (v, (kernel, a, b)) in t.shapes().iter().enumerate() {
                println!("# variant {t:?} v{v}: {kernel} ({a}, {b})");
            }
        }
    }
    let mut rows: Vec<Row> = Vec::new();
    for &log in &sizes {
        let n = 1usize << log;
        eprintln!("2^{log}: generating inputs");
        // copy: our own device-to-device ceiling
        {
            let src = g.upload(&detkit::scan::gen::scan_values(n))?;
            let mut dst = g.zeros::<u32>(n)?;
            let ms = median_ms(g, 5, reps, || {
                g.stream().memcpy_dtod(&src, &mut dst).ctx("copy")
            })?;
            rows.push(Row {
                primitive: "copy".into(),
                n,
                ms,
                bytes: 8.0 * n as f64,
            });
        }
        if !no_sort {
            let sort_v: Vec<usize> = match &sort_shapes {
                Some(list) => list.iter().map(|&v| v as usize).collect(),
                None => shapes(Tuned::SortOnesweep),
            };
            sort_rows(g, n, reps, &sort_v, &mut rows)?;
        }
        if sort_only {
            continue;
        }
        // scan u32 (every shape with --variants)
        for v in shapes(Tuned::ScanU32) {
            Tuned::ScanU32.choose(v)?;
            let input = detkit::scan::gen::scan_values(n);
            let d_in = g.upload(&input)?;
            let name = label("scan_u32", v);
            for kind in [ScanKind::Inclusive, ScanKind::Exclusive] {
                let mut d_out = g.poisoned(n, 0xDEAD_BEEFu32)?;
                g.scan_device(&d_in, &mut d_out, n, kind)?;
                check(
                    &format!("{name} {kind:?}"),
                    &g.download(&d_out)?,
                    &detkit::scan::cpu::scan(&input, kind),
                )?;
            }
            let mut d_out = g.poisoned(n, 0xDEAD_BEEFu32)?;
            let ms = median_ms(g, 5, reps, || {
                g.scan_device(&d_in, &mut d_out, n, ScanKind::Exclusive)
            })?;
            rows.push(Row {
                primitive: name,
                n,
                ms,
                bytes: 8.0 * n as f64,
            });
        }
        Tuned::ScanU32.choose(0)?;
        // The look-back's sleep between polls (the default shape), rows `scan_u32@lbK`.
        for v in shapes(Tuned::LookbackNs).into_iter().skip(1) {
            Tuned::LookbackNs.choose(v)?;
            let input = detkit::scan::gen::scan_values(n);
            let d_in = g.upload(&input)?;
            let name = format!("scan_u32@lb{v}");
            let mut d_out = g.poisoned(n, 0xDEAD_BEEFu32)?;
            g.scan_device(&d_in, &mut d_out, n, ScanKind::Exclusive)?;
            check(
                &name,
                &g.download(&d_out)?,
                &detkit::scan::cpu::scan(&input, ScanKind::Exclusive),
            )?;
            let ms = median_ms(g, 5, reps, || {
                g.scan_device(&d_in, &mut d_out, n, ScanKind::Exclusive)
            })?;
            rows.push(Row {
                primitive: name,
                n,
                ms,
                bytes: 8.0 * n as f64,
            });
        }
        Tuned::LookbackNs.choose(0)?;
        // scan u64
        if log <= 27 {
            let input: Vec<u64> = detkit::scan::gen::scan_values(n)
                .into_iter()
                .map(u64::from)
                .collect();
            let d_in = g.upload(&input)?;
            let mut d_out = g.poisoned(n, u64::MAX)?;
            g.scan_device(&d_in, &mut d_out, n, ScanKind::Exclusive)?;
            check(
                "scan_u64",
                &g.download(&d_out)?,
                &detkit::scan::cpu::scan(&input, ScanKind::Exclusive),
            )?;
            let ms = median_ms(g, 5, reps, || {
                g.scan_device(&d_in, &mut d_out, n, ScanKind::Exclusive)
            })?;
            rows.push(Row {
                primitive: "scan_u64".into(),
                n,
                ms,
                bytes: 16.0 * n as f64,
            });
        }
        // histograms, 256 bins
        for (name, keys) in [
            ("uniform", detkit::histogram::gen::uniform_keys(n)),
            ("skewed", detkit::histogram::gen::skewed_keys(n)),
        ] {
            let want = detkit::histogram::cpu::histogram(&keys, 256);
            let d = g.upload(&keys)?;
            let mut runs: Vec<(String, bool, usize)> = shapes(Tuned::HistogramShared)
                .into_iter()
                .map(|v| (label(&format!("histogram_{name}"), v), false, v))
                .collect();
            runs.push((format!("histogram_{name}_warpagg"), true, 0));
            for (row, aggregate, v) in runs {
                Tuned::HistogramShared.choose(v)?;
                let mut out = g.histogram_outputs(256)?;
                g.histogram_device(&d, n, 256, HistogramStrategy::Shared, aggregate, &mut out)?;
                check(&row, &g.download_histogram(&out)?.counts, &want.counts)?;
                let ms = median_ms(g, 5, reps, || {
                    g.memset_zero(&mut out.counts)?;
                    g.histogram_device(&d, n, 256, HistogramStrategy::Shared, aggregate, &mut out)
                })?;
                rows.push(Row {
                    primitive: row,
                    n,
                    ms,
                    bytes: 4.0 * n as f64,
                });
            }
            Tuned::HistogramShared.choose(0)?;
        }
        // select, 50% (every shape with --variants)
        for v in shapes(Tuned::SelectRange) {
            Tuned::SelectRange.choose(v)?;
            let input = detkit::compact::gen::select_values(n);
            let want = detkit::compact::cpu::select(&input, |_, x| x < 1 << 31);
            let d_in = g.upload(&input)?;
            let mut d_out = g.poisoned(n, 0xDEAD_BEEFu32)?;
            let mut d_n = g.zeros::<u32>(1)?;
            let sel = || Selection::Range { lo: 0, hi: 1 << 31 };
            let name = label("select_50", v);
            g.select_u32(&d_in, n, sel(), &mut d_out, &mut d_n)?;
            let count = g.download(&d_n)?[0] as usize;
            check(&name, &g.download(&d_out)?[..count], &want)?;
            let ms = median_ms(g, 5, reps, || {
                g.select_u32(&d_in, n, sel(), &mut d_out, &mut d_n)
            })?;
            rows.push(Row {
                primitive: name,
                n,
                ms,
                bytes: 4.0 * (n + count) as f64,
            });
        }
        Tuned::SelectRange.choose(0)?;
        // bucket container, 1024 bins (no CUB equivalent; for the record)
        if log <= 26 {
            let keys = detkit::rng::random_below(17, n, 1024);
            let d = g.upload(&keys)?;
            let want = detkit::bucket::cpu::bucket(&keys, 1024);
            for (name, order) in [
                ("bucket_stable", BucketOrder::Stable),
                ("bucket_unordered", BucketOrder::Unordered),
            ] {
                // Outputs allocated once, as the CUB rows do (the container's own scratch is
                // kept in the context); the read-back of the out-of-range word is timed.
                let mut o = g.filled_u32(1025, 0xDEAD_BEEF)?;
                let mut c = g.filled_u32(n, 0xDEAD_BEEF)?;
                g.bucket_device_into(&d, n, 1024, order, &mut o, &mut c)?;
                check(name, &g.download(&o)?, &want.offsets)?;
                check(name, &g.download(&c)?, &want.content)?;
                let ms = median_ms(g, 5, reps.min(10), || {
                    g.bucket_device_into(&d, n, 1024, order, &mut o, &mut c)
                })?;
                rows.push(Row {
                    primitive: name.into(),
                    n,
                    ms,
                    bytes: 8.0 * n as f64,
                });
            }
        }
    }
    println!(
        "{:<26} {:>6} {:>12} {:>10} {:>10}",
        "primitive", "n", "median ms", "GB/s", "G items/s"
    );
    for r in &rows {
        println!(
            "{:<26} 2^{:<4} {:>12.4} {:>10.1} {:>10.2}",
            r.primitive,
            r.n.trailing_zeros(),
            r.ms,
            r.bytes / r.ms / 1e6,
            r.n as f64 / r.ms / 1e6
        );
    }
    if let Some(path) = csv {
        let mut f = std::fs::File::create(&path).with_context(|| format!("creating {path}"))?;
        writeln!(f, "impl,primitive,n,median_ms,gbps,gitems")?;
        writeln!(f, "# device: {}; kernels: {}", g.device_name(), g.image())?;
        for r in &rows {
            let imp = if r.primitive == "copy" {
                "copy"
            } else {
                "detkit"
            };
            writeln!(
                f,
                "{imp},{},{},{:.6},{:.3},{:.4}",
                r.primitive,
                r.n,
                r.ms,
                r.bytes / r.ms / 1e6,
                r.n as f64 / r.ms / 1e6
            )?;
        }
    }
    Ok(())
}

/// Checks a stable sort of `keys` whose values were their input indices: `idx` is a
/// permutation, `out[i] == keys[idx[i]]`, and (order key, index) strictly increases, which
/// holds for exactly one output, the oracle's. O(n), so 2^28 items check in a second.
fn check_pairs_by_index<K: detkit::sort::SortKey>(
    what: &str,
    keys: &[K],
    out: &[K],
    idx: &[u32],
    opts: &detkit::SortOptions,
) -> Result<()> {
    let n = keys.len();
    if out.len() != n || idx.len() != n {
        bail!("CHECK FAILED {what}: lengths");
    }
    let mut seen = vec![false; n];
    for i in 0..n {
        let j = idx[i] as usize;
        if j >= n || std::mem::replace(&mut seen[j], true) || out[i] != keys[j] {
            bail!("CHECK FAILED {what}: output {i} (value {j}) is not a moved input");
        }
        if i > 0 {
            let a = detkit::sort::cpu::order_key(out[i - 1], opts);
            let b = detkit::sort::cpu::order_key(out[i], opts);
            if a > b || (a == b && idx[i - 1] > idx[i]) {
                bail!("CHECK FAILED {what}: unsorted or unstable at {i}");
            }
        }
    }
    Ok(())
}

/// The radix-sort rows (device-resident, inputs kept, output in a separate buffer, as
/// `cub::DeviceRadixSort::SortPairs`/`SortKeys` without a double buffer): u64 keys + u32
/// values over 64 and 48 bits, u32 + u32, u32 keys alone, each under every onesweep shape of
/// `variants` (rows `NAME@vK` for shape K > 0). Values are the input indices, so the pairs
/// check is exact (`check_pairs_by_index`) for the first shape run (the default when it is
/// listed); every other shape must give the same keys and values bit for bit (a cheap
/// sequential comparison, so that 2^28 under several shapes checks in seconds); the keys-only
/// result must equal the keys of the checked u32 pairs sort (the same keys). Bytes: one read
/// and one write of keys and values (`2n (key + value)`), whatever the number of passes.
fn sort_rows(
    g: &detkit::GpuContext,
    n: usize,
    reps: usize,
    variants: &[usize],
    rows: &mut Vec<Row>,
) -> Result<()> {
    use detkit::sort::gen;
    use detkit::SortOptions;
    // The default first (it gets the full check), then the others; the default is chosen
    // again at the end.
    let order: Vec<usize> = variants
        .iter()
        .copied()
        .filter(|&v| v == 0)
        .chain(variants.iter().copied().filter(|&v| v != 0))
        .collect();
    let label = |name: &str, v: usize| -> String {
        if v == 0 {
            name.to_string()
        } else {
            format!("{name}@v{v}")
        }
    };
    let idx = gen::index_values(n);
    let d_idx = g.upload(&idx)?;
    let mut v_out = g.poisoned(n, 0xDEAD_BEEFu32)?;
    // u64 keys + u32 values, all 64 bits and the low 48 (48-bit keys).
    for (name, keys, opts) in [
        (
            "sort_pairs_u64_u32",
            gen::keys_u64(n),
            SortOptions::default(),
        ),
        (
            "sort_pairs_u64b48_u32",
            gen::keys_u48(n),
            SortOptions::bits(0, 48),
        ),
    ] {
        let d_k = g.upload(&keys)?;
        let mut k_out;
        let mut reference: Option<(Vec<u64>, Vec<u32>)> = None;
        for &v in &order {
            Tuned::SortOnesweep.choose(v)?;
            let name = label(name, v);
            // Poisoned again: each shape must write every element.
            k_out = g.poisoned(n, u64::MAX)?;
            g.fill_u32(&mut v_out, n, 0xDEAD_BEEF)?;
            g.sort_pairs_device(&d_k, &mut k_out, &d_idx, &mut v_out, n, opts)?;
            let (got_k, got_v) = (g.download(&k_out)?, g.download(&v_out)?);
            match &reference {
                None => check_pairs_by_index(&name, &keys, &got_k, &got_v, &opts)?,
                Some((rk, rv)) => {
                    check(&name, &got_k, rk)?;
                    check(&name, &got_v, rv)?;
                }
            }
            reference.get_or_insert((got_k, got_v));
            let ms = median_ms(g, 5, reps, || {
                g.sort_pairs_device(&d_k, &mut k_out, &d_idx, &mut v_out, n, opts)
            })?;
            rows.push(Row {
                primitive: name,
                n,
                ms,
                bytes: 24.0 * n as f64,
            });
        }
    }
    // u32 + u32, then u32 keys alone (checked against the pairs' keys).
    let keys = gen::keys_u32(n);
    let d_k = g.upload(&keys)?;
    let mut k_out = g.poisoned(n, 0xDEAD_BEEFu32)?;
    let opts = SortOptions::default();
    let mut reference: Option<(Vec<u32>, Vec<u32>)> = None;
    for &v in &order {
        Tuned::SortOnesweep.choose(v)?;
        let name = label("sort_pairs_u32_u32", v);
        g.fill_u32(&mut k_out, n, 0xDEAD_BEEF)?;
        g.fill_u32(&mut v_out, n, 0xDEAD_BEEF)?;
        g.sort_pairs_device(&d_k, &mut k_out, &d_idx, &mut v_out, n, opts)?;
        let (got_k, got_v) = (g.download(&k_out)?, g.download(&v_out)?);
        match &reference {
            None => check_pairs_by_index(&name, &keys, &got_k, &got_v, &opts)?,
            Some((rk, rv)) => {
                check(&name, &got_k, rk)?;
                check(&name, &got_v, rv)?;
            }
        }
        reference.get_or_insert((got_k, got_v));
        let ms = median_ms(g, 5, reps, || {
            g.sort_pairs_device(&d_k, &mut k_out, &d_idx, &mut v_out, n, opts)
        })?;
        rows.push(Row {
            primitive: name,
            n,
            ms,
            bytes: 16.0 * n as f64,
        });
    }
    let sorted = reference.map(|(k, _)| k).unwrap_or_default();
    let mut k_only = g.poisoned(n, 0xDEAD_BEEFu32)?;
    for &v in &order {
        Tuned::SortOnesweep.choose(v)?;
        let name = label("sort_keys_u32", v);
        g.fill_u32(&mut k_only, n, 0xDEAD_BEEF)?;
        g.sort_keys_device(&d_k, &mut k_only, n, opts)?;
        check(&name, &g.download(&k_only)?, &sorted)?;
        let ms = median_ms(g, 5, reps, || {
            g.sort_keys_device(&d_k, &mut k_only, n, opts)
        })?;
        rows.push(Row {
            primitive: name,
            n,
            ms,
            bytes: 8.0 * n as f64,
        });
    }
    Tuned::SortOnesweep.choose(0)?;
    Ok(())
}
