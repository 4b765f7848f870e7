//! GPU tests: every primitive against its CPU oracle, on fresh random and adversarial
//! inputs at many sizes, with poisoned outputs.
//!
//! A custom harness (`harness = false`) so that a machine without a CUDA driver prints a
//! visible `skipped: no CUDA driver` line, and so that the same binary runs in the GPU
//! bundle and under compute-sanitizer. Arguments: `--quick` (smaller sizes), `--sanitize`
//! (the sanitizer runs: `--quick` and fewer launches, see [`Ctx::sanitize`]), an optional
//! substring that selects tests by name, `--exact NAME`, `--tests A,B,..` (those names) or
//! `--family NAME` (one family of [`FAMILIES`], whole, in one process), `--list` (the tests
//! and their families),
//! `--isolate` (each selected test in a process of its own: see [`run_isolated`]),
//! `--isolate-family` (each family's selected tests in a process of their own),
//! `--shard K/N` (of the tests the other arguments select, in order, every N-th from the
//! K-th: N machines or GPUs split one list, e.g. `CUDA_VISIBLE_DEVICES=1 gpu-tests --isolate
//! --shard 2/2`) and `--deadline S` (start no test after S seconds; each one left is printed
//! as `SKIP NAME (deadline)` and the run exits with status 2, so a cut run says what it did
//! not cover instead of being killed mid-test). Every test's wall time is printed (its `PASS`
//! line; under `--isolate` also its process's, `TIME`), and the slowest at the end.
//!
//! `--sanitize` (or `DETKIT_SANITIZE=1` in the environment, for scripts that wrap the
//! binary) turns the sanitizer mode on; `bench/sanitize_all.sh` passes it. compute-sanitizer
//! sets nothing this binary could detect reliably (its `CUDA_INJECTION64_PATH` did not name
//! the tool on the H100 host), so the mode is asked for, not guessed. Why the mode exists:
//! racecheck costs about 9 ms per launch plus about 30 ns per shared-memory access of the
//! whole grid, and holds host memory in proportion to the largest launch's shared memory
//! (see docs/benchmarks.md, "race (session 11, issue 28)"). In the mode, grids sized per
//! multiprocessor are sized for 8 of them (`DETKIT_GRID_SMS`, unless set).
//!
//! Every test runs on the kernel image the context loads: the default choice (a cubin for
//! the card), or the one `DETKIT_IMAGE` forces (`DETKIT_IMAGE=ptx70`: the sm_70 fallback), so
//! running the binary twice tests both images (`run.sh` does).

use std::time::Instant;

// One module per algorithm family added after the Foundation; each exports `TESTS`.
mod clustering;
mod device_views;
mod doors;
mod image;
mod pet;
mod seeding;
mod shapes;
mod sort;

use detkit::bucket::POISON;
use detkit::compact::Selection;
use detkit::histogram::HistogramStrategy;
use detkit::{Backend, BucketOrder, Error, GpuContext, ScanKind};
use detkit_gpu::{compact as kc, histogram as kh, scan as ks};
use detkit_tests::{ensure, exact, sizes};

pub(crate) type R = Result<(), String>;
pub(crate) type Test = (&'static str, fn(&Ctx) -> R);

pub(crate) fn e(err: Error) -> String {
    err.to_string()
}

/// A fresh seed per run (time-based), printed so a failure can be replayed with `SEED=`.
/// Every field of a parameter struct of mixed types reaches the kernel: random values, each
/// written back by the probe kernel and compared with the host's expectation.
fn test_params_layout(c: &Ctx) -> Result<(), String> {
    use detkit_gpu::params::{params_probe_words, ParamsProbeParams};
    use detkit_gpu::DevPtr;
    let gpu = c.gpu();
    for round in 0..8u64 {
        let r = detkit::rng::random_below(c.seed ^ (0x9a5a + round), 8, u32::MAX);
        let p = ParamsProbeParams {
            out: DevPtr::NULL,
            wide: (r[0] as u64) << 32 | r[1] as u64,
            other: DevPtr::from_addr((r[2] as u64) << 32 | r[3] as u64),
            count: r[4],
            signed: r[5] as i32,
            real: f32::from_bits(r[6] & 0x7f7f_ffff),
            short: r[7] as u16,
            byte: (r[7] >> 16) as u8,
            _pad: 0,
        };
        let got = gpu.params_probe(p).map_err(e)?;
        let want = params_probe_words(&p);
        if got != want {
            return Err(format!(
                "round {round}: probe wrote {got:x?}, expected {want:x?}"
            ));
        }
    }
    Ok(())
}

fn seed() -> u64 {
    std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

pub(crate) struct Ctx {
    pub backend: Backend,
    /// Skip the largest sizes (sanitizer runs).
    pub quick: bool,
    /// The sanitizer runs (implies `quick`): every size class and every input kind stays,
    /// but the largest sizes shrink to a few dozen tiles and the cross products of inputs ×
    /// options × sizes are thinned ([`Ctx::keep`]), so that a family runs to the end in one
    /// process under racecheck.
    pub sanitize: bool,
    /// This run's seed; derive every input from it.
    pub seed: u64,
}

impl Ctx {
    pub fn gpu(&self) -> &GpuContext {
        self.backend.gpu().expect("cuda backend")
    }
    /// The backend's context as a shared handle (what a `Clusterer` keeps).
    pub fn gpu_shared(&self) -> &std::sync::Arc<GpuContext> {
        self.backend.gpu_shared().expect("cuda backend")
    }
    pub fn rand(&self, salt: u64, n: usize, bound: u32) -> Vec<u32> {
        detkit::rng::random_below(self.seed.wrapping_mul(31).wrapping_add(salt), n, bound)
    }
    /// The sizes of [`detkit_tests::sizes`] for this run; in the sanitizer mode the largest
    /// (2^20 + 7) becomes 40 tiles + 3 (the look-back still crosses more than a warp's
    /// window of predecessors).
    pub fn sizes(&self, block: usize, tile: usize) -> Vec<usize> {
        let mut v = sizes(block, tile, self.quick);
        if self.sanitize {
            let small = (40 * tile + 3).min((1 << 20) + 7);
            for n in v.iter_mut().filter(|n| **n == (1 << 20) + 7) {
                *n = small;
            }
            v.sort_unstable();
            v.dedup();
        }
        v
    }
    /// Whether combination `i` of a test's cross product runs: always, except under the
    /// sanitizer mode, where one in `stride` does (`i % stride == 0`). Callers number their
    /// combinations so that each input kind and option still runs at several sizes (for
    /// example `i = size_index + input_index`).
    pub fn keep(&self, i: usize, stride: usize) -> bool {
        !self.sanitize || i.is_multiple_of(stride.max(1))
    }
    /// `full` normally, `small` in the sanitizer mode (the largest size of a test).
    pub fn big(&self, full: usize, small: usize) -> usize {
        if self.sanitize {
            small
        } else {
            full
        }
    }
    pub fn rand_u32(&self, salt: u64, n: usize) -> Vec<u32> {
        (0..n as u64)
            .map(|i| detkit::rng::splitmix64(self.seed ^ (salt << 40) ^ i) as u32)
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Scans
// ---------------------------------------------------------------------------------------

fn scan_inputs_u32(c: &Ctx, n: usize) -> Vec<(&'static str, Vec<u32>)> {
    vec![
        ("random", c.rand_u32(1, n)),
        ("small", c.rand(2, n, 4)),
        ("all-max", vec![u32::MAX; n]),
        ("ones", vec![1; n]),
    ]
}

fn test_scan_u32(c: &Ctx) -> R {
    let g = c.gpu();
    let tile = ks::device_scan_tile(4) as usize;
    for n in c.sizes(ks::DEVICE_SCAN_THREADS as usize, tile) {
        for (label, input) in scan_inputs_u32(c, n) {
            if n >= 1 << 26 && label != "random" {
                continue;
            }
            let d_in = if n == 0 {
                g.zeros(1).map_err(e)?
            } else {
                g.upload(&input).map_err(e)?
            };
            for kind in [ScanKind::Exclusive, ScanKind::Inclusive] {
                // One extra poisoned element past n: must stay untouched.
                let mut d_out = g.poisoned(n + 1, POISON).map_err(e)?;
                g.scan_device(&d_in, &mut d_out, n, kind).map_err(e)?;
                let got = g.download(&d_out).map_err(e)?;
                let mut want = detkit::scan::cpu::scan(&input, kind);
                want.push(POISON);
                exact(&format!("scan_u32 {kind:?} {label} n={n}"), &got, &want)?;
            }
        }
    }
    Ok(())
}

fn test_scan_u64(c: &Ctx) -> R {
    let g = c.gpu();
    let tile = ks::device_scan_tile(8) as usize;
    for n in c.sizes(ks::DEVICE_SCAN_THREADS as usize, tile) {
        let r = c.rand_u32(3, n);
        let inputs: Vec<(&str, Vec<u64>)> = vec![
            (
                "random",
                r.iter()
                    .enumerate()
                    .map(|(i, &x)| (x as u64) << 20 ^ i as u64)
                    .collect(),
            ),
            ("all-max", vec![u64::MAX; n.min(1 << 20)]),
            ("big", vec![1u64 << 40; n.min(1 << 20)]),
        ];
        for (label, input) in inputs {
            let m = input.len();
            let d_in = if m == 0 {
                g.zeros(1).map_err(e)?
            } else {
                g.upload(&input).map_err(e)?
            };
            for kind in [ScanKind::Exclusive, ScanKind::Inclusive] {
                let mut d_out = g.poisoned(m + 1, u64::MAX - 7).map_err(e)?;
                g.scan_device(&d_in, &mut d_out, m, kind).map_err(e)?;
                let got = g.download(&d_out).map_err(e)?;
                let mut want = detkit::scan::cpu::scan(&input, kind);
                want.push(u64::MAX - 7);
                exact(&format!("scan_u64 {kind:?} {label} n={m}"), &got, &want)?;
            }
        }
    }
    Ok(())
}

fn test_block_scan(c: &Ctx) -> R {
    let g = c.gpu();
    for block in [32u32, 64, 96, 160, 256, 512, 992, 1024] {
        let b = block as usize;
        for n in [0, 1, 31, 32, 33, b - 1, b, b + 1, 5 * b + 3, 100_003] {
            let input = c.rand_u32(4 + block as u64, n);
            for kind in [ScanKind::Exclusive, ScanKind::Inclusive] {
                let blocks = n.div_ceil(b);
                let d_in = if n == 0 {
                    g.zeros(1).map_err(e)?
                } else {
                    g.upload(&input).map_err(e)?
                };
                let mut d_out = g.poisoned(n.max(1), POISON).map_err(e)?;
                let mut d_tot = g.poisoned(blocks.max(1), POISON).map_err(e)?;
                g.block_scan_u32(&d_in, &mut d_out, &mut d_tot, n, block, kind)
                    .map_err(e)?;
                let (want, want_tot) = detkit::scan::cpu::block_scan(&input, b, kind);
                let got = g.download(&d_out).map_err(e)?;
                let tot = g.download(&d_tot).map_err(e)?;
                exact(
                    &format!("block_scan {kind:?} block={block} n={n}"),
                    &got[..n],
                    &want,
                )?;
                exact(
                    &format!("block_scan totals block={block} n={n}"),
                    &tot[..blocks],
                    &want_tot,
                )?;
            }
        }
    }
    for bad in [0u32, 16, 48 + 1, 1056] {
        ensure(
            matches!(
                c.backend
                    .block_scan_u32(&[1, 2, 3], bad, ScanKind::Exclusive),
                Err(Error::InvalidInput { .. })
            ),
            || format!("block size {bad} accepted"),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Compaction
// ---------------------------------------------------------------------------------------

fn test_select(c: &Ctx) -> R {
    let g = c.gpu();
    for n in c.sizes(kc::SELECT_THREADS as usize, kc::SELECT_TILE as usize) {
        let input = c.rand_u32(5, n);
        let cases: Vec<(&str, u32, u32)> = vec![
            ("half", 0, 1 << 31),
            ("none", 5, 5),
            ("all", 0, u32::MAX),
            ("narrow", 1 << 30, (1 << 30) + (1 << 24)),
        ];
        let d_in = if n == 0 {
            g.zeros(1).map_err(e)?
        } else {
            g.upload(&input).map_err(e)?
        };
        for (label, lo, hi) in cases {
            let mut d_out = g.poisoned(n.max(1), POISON).map_err(e)?;
            let mut d_n = g.poisoned(1, POISON).map_err(e)?;
            g.select_u32(&d_in, n, Selection::Range { lo, hi }, &mut d_out, &mut d_n)
                .map_err(e)?;
            let count = g.download(&d_n).map_err(e)?[0] as usize;
            let want = detkit::compact::cpu::select(&input, |_, x| kc::in_range(x, lo, hi));
            ensure(count == want.len(), || {
                format!("select {label} n={n}: count {count} want {}", want.len())
            })?;
            let got = g.download(&d_out).map_err(e)?;
            exact(&format!("select {label} n={n}"), &got[..count], &want)?;
            ensure(got[count..n].iter().all(|&x| x == POISON), || {
                format!("select {label} n={n}: wrote past the selected count")
            })?;
        }
        // Flagged, with a random and an alternating pattern.
        for (label, flags) in [
            (
                "random-flags",
                c.rand(6, n, 2)
                    .iter()
                    .map(|&x| x as u8)
                    .collect::<Vec<u8>>(),
            ),
            ("alternating", (0..n).map(|i| (i % 2) as u8 * 255).collect()),
        ] {
            let got = c.backend.select_flagged_u32(&input, &flags).map_err(e)?;
            let want = detkit::compact::cpu::select(&input, |i, _| flags[i] != 0);
            exact(&format!("select {label} n={n}"), &got, &want)?;
        }
    }
    ensure(
        matches!(
            c.backend.select_flagged_u32(&[1, 2], &[1]),
            Err(Error::InvalidInput { .. })
        ),
        || "flag length mismatch accepted".into(),
    )
}

// ---------------------------------------------------------------------------------------
// Histogram
// ---------------------------------------------------------------------------------------

fn test_histogram(c: &Ctx) -> R {
    let g = c.gpu();
    let big = 1usize << 26;
    for (si, n) in c
        .sizes(
            kh::HISTOGRAM_THREADS as usize,
            kh::HISTOGRAM_THREADS as usize * 4,
        )
        .into_iter()
        .enumerate()
    {
        for (bi, nbins) in [1u32, 7, 256, 1000, kh::HISTOGRAM_SHARED_MAX_BINS, 100_000]
            .into_iter()
            .enumerate()
        {
            if n == big && nbins != 256 || !c.keep(si + bi, 3) {
                continue;
            }
            let mut inputs: Vec<(&str, Vec<u32>)> = vec![
                (
                    "uniform+out-of-range",
                    c.rand(7 + nbins as u64, n, nbins + nbins / 8 + 1),
                ),
                ("one-bin", vec![nbins / 2; n]),
                (
                    "edges",
                    (0..n)
                        .map(|i| [0, nbins - 1, nbins, u32::MAX][i % 4])
                        .collect(),
                ),
            ];
            if nbins == 256 {
                inputs.push(("skewed", detkit::histogram::gen::skewed_keys(n)));
            }
            for (label, keys) in &inputs {
                if n == big && *label != "skewed" && *label != "uniform+out-of-range" {
                    continue;
                }
                let want = detkit::histogram::cpu::histogram(keys, nbins);
                let strategies: &[HistogramStrategy] = if nbins <= kh::HISTOGRAM_SHARED_MAX_BINS {
                    &[HistogramStrategy::Shared, HistogramStrategy::Global]
                } else {
                    &[HistogramStrategy::Global]
                };
                let d = if n == 0 {
                    g.zeros(1).map_err(e)?
                } else {
                    g.upload(keys).map_err(e)?
                };
                for &s in strategies {
                    for aggregate in [true, false] {
                        let mut out = g.histogram_outputs(nbins).map_err(e)?;
                        g.histogram_device(&d, n, nbins, s, aggregate, &mut out)
                            .map_err(e)?;
                        let got = g.download_histogram(&out).map_err(e)?;
                        let what = format!(
                            "histogram {label} nbins={nbins} n={n} {s:?} aggregate={aggregate}"
                        );
                        exact(&what, &got.counts, &want.counts)?;
                        ensure(
                            got.out_of_range == want.out_of_range
                                && got.first_out_of_range == want.first_out_of_range,
                            || {
                                format!(
                                    "{what}: out of range {:?}/{:?} want {:?}/{:?}",
                                    got.out_of_range,
                                    got.first_out_of_range,
                                    want.out_of_range,
                                    want.first_out_of_range
                                )
                            },
                        )?;
                    }
                }
            }
        }
    }
    ensure(
        matches!(
            c.backend.histogram(&[1], 0),
            Err(Error::InvalidInput { .. })
        ),
        || "nbins = 0 accepted".into(),
    )?;
    ensure(
        matches!(
            c.backend
                .histogram_with(&[1], 1 << 20, HistogramStrategy::Shared),
            Err(Error::CapacityExceeded { .. })
        ),
        || "shared histogram over capacity accepted".into(),
    )
}

// ---------------------------------------------------------------------------------------
// Bucket container
// ---------------------------------------------------------------------------------------

/// Unordered fill: offsets equal, each bin holds the same set of items.
fn same_bins(what: &str, got: &detkit::Buckets, want: &detkit::Buckets) -> R {
    exact(&format!("{what} offsets"), &got.offsets, &want.offsets)?;
    ensure(
        !got.content.contains(&POISON) || want.content.contains(&POISON),
        || format!("{what}: unwritten content"),
    )?;
    for b in 0..want.offsets.len() - 1 {
        let mut g = got.bin(b).to_vec();
        g.sort_unstable();
        exact(&format!("{what} bin {b}"), &g, want.bin(b))?;
    }
    Ok(())
}

fn test_bucket(c: &Ctx) -> R {
    for (si, n) in c.sizes(256, 1024).into_iter().enumerate() {
        for (bi, nbins) in [1u32, 2, 64, 256, 257, 1000, 100_000]
            .into_iter()
            .enumerate()
        {
            if n == 1 << 26 && nbins != 1000 || !c.keep(si + bi, 3) {
                continue;
            }
            let inputs: Vec<(&str, Vec<u32>)> = vec![
                ("uniform", c.rand(9 + nbins as u64, n, nbins)),
                ("one-bin", vec![nbins - 1; n]),
                (
                    "edges",
                    (0..n)
                        .map(|i| if i % 3 == 0 { 0 } else { nbins - 1 })
                        .collect(),
                ),
            ];
            for (label, keys) in &inputs {
                if n == 1 << 26 && *label != "uniform" {
                    continue;
                }
                let want = detkit::bucket::cpu::bucket(keys, nbins);
                let what = format!("bucket {label} nbins={nbins} n={n}");
                let stable = c
                    .backend
                    .bucket(keys, nbins, BucketOrder::Stable)
                    .map_err(e)?;
                exact(
                    &format!("{what} stable offsets"),
                    &stable.offsets,
                    &want.offsets,
                )?;
                exact(
                    &format!("{what} stable content"),
                    &stable.content,
                    &want.content,
                )?;
                let unordered = c
                    .backend
                    .bucket(keys, nbins, BucketOrder::Unordered)
                    .map_err(e)?;
                same_bins(&format!("{what} unordered"), &unordered, &want)?;
            }
        }
    }
    // Out of range: 64 and 1000 (whose low 6 bits, the bits the container sorts by, are in
    // range), and u32::MAX, on both sides of the single-tile size.
    for n in [5000, 100_000] {
        let mut keys = c.rand(10, n, 64);
        keys[1234] = 64;
        keys[4000] = 1000;
        keys[n - 1] = u32::MAX;
        for order in [BucketOrder::Stable, BucketOrder::Unordered] {
            match c.backend.bucket(&keys, 64, order) {
                Err(Error::InvalidInput { detail, .. }) if detail.contains("index 1234") => {}
                other => {
                    return Err(format!(
                        "bucket with key 64 >= nbins at 1234 ({order:?}): {other:?}"
                    ))
                }
            }
        }
    }
    Ok(())
}

fn test_block_bucket(c: &Ctx) -> R {
    // Module-like segments: sizes from 0 to a few thousand, 416 bins (a CMS column count).
    for (label, nsegs, max_seg, nbins) in [
        ("modules", 300usize, 3000u32, 416u32),
        ("tiny", 40, 40, 3),
        ("one-bin", 50, 2000, 1),
    ] {
        let sizes = c.rand(11, nsegs, max_seg);
        let mut segments = vec![0u32];
        for s in &sizes {
            segments.push(segments.last().unwrap() + s);
        }
        // Make some adversarial segments: empty, single, huge.
        let n = *segments.last().unwrap() as usize;
        let keys = c.rand(12, n, nbins);
        let want = detkit::bucket::cpu::block_bucket(&keys, &segments, nbins);
        for capacity in [None, Some(16), Some(0)] {
            let forced = capacity.is_some();
            let got = c
                .backend
                .block_bucket(&keys, &segments, nbins, BucketOrder::Stable, capacity)
                .map_err(e)?;
            let what = format!("block_bucket {label} capacity={capacity:?}");
            exact(&format!("{what} offsets"), &got.offsets, &want.offsets)?;
            exact(&format!("{what} content"), &got.content, &want.content)?;
            let cap = capacity.unwrap_or(detkit::bucket::default_block_capacity(nbins));
            let expect_fb = sizes.iter().filter(|&&s| s > cap).count() as u32;
            ensure(got.fallbacks == expect_fb, || {
                format!("{what}: {} fallbacks, expected {expect_fb}", got.fallbacks)
            })?;
            ensure(!forced || expect_fb > 0, || {
                format!("{what}: capacity did not force the fallback")
            })?;
            let un = c
                .backend
                .block_bucket(&keys, &segments, nbins, BucketOrder::Unordered, capacity)
                .map_err(e)?;
            exact(
                &format!("{what} unordered offsets"),
                &un.offsets,
                &want.offsets,
            )?;
            for s in 0..nsegs {
                for b in 0..nbins as usize {
                    let mut gb = un.bin(&segments, s, b).to_vec();
                    gb.sort_unstable();
                    exact(
                        &format!("{what} unordered seg {s} bin {b}"),
                        &gb,
                        want.bin(&segments, s, b),
                    )?;
                }
            }
        }
    }
    // One segment with every item in one bin, larger than the default capacity.
    let keys = vec![7u32; 20_000];
    let got = c
        .backend
        .block_bucket(&keys, &[0, 20_000], 416, BucketOrder::Stable, None)
        .map_err(e)?;
    exact(
        "block_bucket all-in-one-bin",
        &got.content,
        &(0..20_000).collect::<Vec<u32>>(),
    )?;
    ensure(got.fallbacks == 1, || {
        "block_bucket big segment: fallback not reported".into()
    })?;
    // Errors: bad key, bad segments.
    match c
        .backend
        .block_bucket(&[1, 2, 500, 3], &[0, 2, 4], 416, BucketOrder::Stable, None)
    {
        Err(Error::InvalidInput { detail, .. }) if detail.contains("index 2") => {}
        other => return Err(format!("block_bucket bad key: {other:?}")),
    }
    ensure(
        matches!(
            c.backend
                .block_bucket(&[1, 2], &[0, 2, 1], 4, BucketOrder::Stable, None),
            Err(Error::InvalidInput { .. })
        ),
        || "decreasing segments accepted".into(),
    )
}

/// The families, in the order they run: `(family, its tests)`. `--family NAME` runs one
/// whole (the sanitizer scripts run each family in one process).
pub(crate) const FAMILIES: &[(&str, &[Test])] = &[
    ("image", image::TESTS),
    ("foundation", FOUNDATION),
    ("shapes", shapes::TESTS),
    ("clustering", clustering::TESTS),
    ("device_views", device_views::TESTS),
    ("doors", doors::TESTS),
    ("pet", pet::TESTS),
    ("seeding", seeding::TESTS),
    ("radix_sort", sort::TESTS),
];

const FOUNDATION: &[Test] = &[
    ("params_layout", test_params_layout),
    ("scan_u32", test_scan_u32),
    ("scan_u64", test_scan_u64),
    ("block_scan", test_block_scan),
    ("select", test_select),
    ("histogram", test_histogram),
    ("bucket", test_bucket),
    ("block_bucket", test_block_bucket),
];

/// `DETKIT_GRID_SMS` in the sanitizer mode (unless the environment sets it).
const SANITIZER_GRID_SMS: &str = "8";

/// Every test with its family, in the order they run.
fn all_tests() -> Vec<(&'static str, Test)> {
    FAMILIES
        .iter()
        .flat_map(|(f, tests)| tests.iter().map(move |t| (*f, *t)))
        .collect()
}

/// This process's resident and peak resident host memory (`VmRSS`, `VmHWM` of
/// /proc/self/status), for the PASS lines: under compute-sanitizer the tool's agent lives in
/// the process, so a growth that ends in the kernel's OOM kill shows here first.
fn host_memory() -> String {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return String::new();
    };
    let field = |k: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(k))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / (1024.0 * 1024.0))
    };
    match (field("VmRSS:"), field("VmHWM:")) {
        (Some(rss), Some(hwm)) => format!(", host RSS {rss:.2} GiB, peak {hwm:.2} GiB"),
        _ => String::new(),
    }
}

struct Args {
    quick: bool,
    /// `--sanitize`, or `DETKIT_SANITIZE=1` (see the module doc).
    sanitize: bool,
    /// `--list`: print the tests and their families, run nothing.
    list: bool,
    /// `--family NAME`: the tests of that family.
    family: Option<String>,
    /// Run each selected test in its own child process (`--isolate`).
    isolate: bool,
    /// Run each family's selected tests in a child process of its own (`--isolate-family`).
    isolate_family: bool,
    /// `--tests A,B,..`: exactly these tests (what `--isolate-family` gives each child).
    tests: Option<Vec<String>>,
    /// `--exact NAME`: the one test of that name.
    exact: Option<String>,
    /// A substring that selects tests by name.
    filter: Option<String>,
    /// `--shard K/N`: `(K - 1, N)`, every N-th selected test from the K-th.
    shard: Option<(usize, usize)>,
    /// `--deadline S`: start no test after S seconds from the start of the run.
    deadline: Option<f64>,
}

/// The value after `flag`, if the flag is given.
fn flag_value(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

/// `K/N` with `1 <= K <= N`, as `(K - 1, N)`.
fn parse_shard(s: &str) -> Option<(usize, usize)> {
    let (k, n) = s.split_once('/')?;
    let (k, n): (usize, usize) = (k.trim().parse().ok()?, n.trim().parse().ok()?);
    (1..=n).contains(&k).then(|| (k - 1, n))
}

/// Flags that take a value (the value is not a name filter).
const VALUE_FLAGS: &[&str] = &["--exact", "--family", "--shard", "--deadline", "--tests"];

impl Args {
    fn parse() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let exact = flag_value(&args, "--exact");
        let family = flag_value(&args, "--family");
        let shard = flag_value(&args, "--shard").map(|s| {
            parse_shard(&s).unwrap_or_else(|| {
                println!("FAIL: --shard {s}: expected K/N with 1 <= K <= N");
                std::process::exit(2)
            })
        });
        let deadline = flag_value(&args, "--deadline").map(|s| {
            s.parse::<f64>()
                .ok()
                .filter(|d| d.is_finite() && *d >= 0.0)
                .unwrap_or_else(|| {
                    println!("FAIL: --deadline {s}: expected seconds");
                    std::process::exit(2)
                })
        });
        let filter = args
            .iter()
            .enumerate()
            .find(|(i, a)| {
                !a.starts_with("--") && (*i == 0 || !VALUE_FLAGS.contains(&args[i - 1].as_str()))
            })
            .map(|(_, a)| a.clone());
        let sanitize = args.iter().any(|a| a == "--sanitize") || sanitizer_detected();
        Self {
            quick: sanitize || args.iter().any(|a| a == "--quick"),
            sanitize,
            list: args.iter().any(|a| a == "--list"),
            family,
            isolate: args
                .iter()
                .any(|a| a == "--isolate" || a == "--isolate-family"),
            isolate_family: args.iter().any(|a| a == "--isolate-family"),
            tests: flag_value(&args, "--tests").map(|s| s.split(',').map(str::to_string).collect()),
            exact,
            filter,
            shard,
            deadline,
        }
    }

    /// The tests these arguments select, in running order: by family and name, then this
    /// shard's share of them.
    fn selected(&self) -> Vec<(&'static str, Test)> {
        all_tests()
            .into_iter()
            .filter(|(f, (n, _))| self.selects(f, n))
            .enumerate()
            .filter(|(i, _)| self.shard.is_none_or(|(k, n)| i % n == k))
            .map(|(_, t)| t)
            .collect()
    }

    fn selects(&self, family: &str, name: &str) -> bool {
        if self.family.as_deref().is_some_and(|f| f != family)
            || self
                .tests
                .as_ref()
                .is_some_and(|t| !t.iter().any(|x| x == name))
        {
            return false;
        }
        match (&self.exact, &self.filter) {
            (Some(x), _) => name == x,
            (None, Some(f)) => name.contains(f.as_str()),
            (None, None) => true,
        }
    }
}

/// The sanitizer mode without `--sanitize`: `DETKIT_SANITIZE=1`.
fn sanitizer_detected() -> bool {
    std::env::var("DETKIT_SANITIZE").as_deref() == Ok("1")
}

/// `--isolate`: runs each selected test as `THIS [--quick] [--sanitize] --exact NAME`, one
/// after the other, and sums up; `--isolate-family`: each family's selected tests in one
/// process (`--tests A,B,..`), which saves a context's start per test (about 0.4 s alone on
/// the GPU, 1.5 s beside a dozen other jobs). Under compute-sanitizer (which follows child
/// processes by default) each group gets a fresh process, so state the tool accumulates over
/// a long run cannot end the run. The children's lines pass through; a test whose process
/// ended (a signal, an exit) before it printed a result is reported as failed, naming why.
fn run_isolated(a: &Args) -> ! {
    use std::io::BufRead as _;
    let exe = std::env::current_exe().unwrap_or_else(|err| {
        println!("FAIL: current_exe: {err}");
        std::process::exit(1)
    });
    let start = Instant::now();
    // Units of one process: one test each, or each family's run of selected tests.
    let mut units: Vec<(&str, Vec<&str>)> = Vec::new();
    for (family, (name, _)) in a.selected() {
        match units.last_mut() {
            Some((f, names)) if a.isolate_family && *f == family => names.push(name),
            _ => units.push((family, vec![name])),
        }
    }
    let (mut passed, mut failed, mut skipped) = (0usize, 0usize, 0usize);
    let mut times: Vec<(String, f64)> = Vec::new();
    for (u, (family, names)) in units.iter().enumerate() {
        if past_deadline(a, start) {
            let rest: Vec<&str> = units[u..].iter().flat_map(|(_, n)| n).copied().collect();
            skipped += rest.len();
            skip_rest(rest.into_iter());
            break;
        }
        let label = if a.isolate_family {
            format!("family {family} ({} tests)", names.len())
        } else {
            names[0].to_string()
        };
        let t = Instant::now();
        let mut cmd = std::process::Command::new(&exe);
        if a.quick {
            cmd.arg("--quick");
        }
        if a.sanitize {
            cmd.arg("--sanitize");
        }
        if a.isolate_family {
            cmd.args(["--tests", &names.join(",")]);
        } else {
            cmd.args(["--exact", names[0]]);
        }
        if let Some(d) = a.deadline {
            let left = (d - start.elapsed().as_secs_f64()).max(0.0);
            cmd.args(["--deadline", &format!("{left:.1}")]);
        }
        cmd.stdout(std::process::Stdio::piped());
        // Each test's result as its process printed it.
        let mut seen: Vec<(&str, &'static str)> = Vec::new();
        let status = cmd.spawn().and_then(|mut child| {
            if let Some(out) = child.stdout.take() {
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    println!("{line}");
                    let mut w = line.split_whitespace();
                    let kind = match w.next() {
                        Some("PASS") => "PASS",
                        Some("FAIL") => "FAIL",
                        Some("SKIP") => "SKIP",
                        _ => continue,
                    };
                    let n = w.next().unwrap_or("").trim_end_matches(':');
                    if let Some(name) = names.iter().find(|x| **x == n) {
                        seen.push((name, kind));
                    }
                }
            }
            child.wait()
        });
        let secs = t.elapsed().as_secs_f64();
        println!("TIME {label} {secs:.1} s (its process)");
        times.push((label.clone(), secs));
        let why = match &status {
            Ok(s) if s.success() => None,
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                Some(match s.signal() {
                    Some(sig) => format!("its process was killed by signal {sig}"),
                    None => format!("its process exited with {s}"),
                })
            }
            Err(err) => Some(format!("cannot start its process: {err}")),
        };
        let result = |n: &str| {
            // A failure, once printed, stands.
            let mut r = None;
            for &(name, kind) in &seen {
                if name == n && r != Some("FAIL") {
                    r = Some(kind);
                }
            }
            r
        };
        // A process that failed after its tests passed (a sanitizer's error exit code): its
        // tests fail, since which of them caused it is not known.
        let failed_after = why.is_some() && names.iter().all(|n| result(n) == Some("PASS"));
        for &name in names {
            match result(name) {
                Some("PASS") if failed_after => {
                    failed += 1;
                    let why = why.as_deref().unwrap_or_default();
                    println!("FAIL {name}: {why} after its tests passed");
                }
                Some("PASS") => passed += 1,
                Some("SKIP") => skipped += 1,
                Some(_) => failed += 1,
                None => {
                    failed += 1;
                    let why = why.as_deref().unwrap_or("its process printed no result");
                    println!("FAIL {name}: {why}");
                }
            }
        }
    }
    println!(
        "gpu tests (isolated): {passed} passed, {failed} failed{}",
        if skipped > 0 {
            format!(", {skipped} not run (deadline)")
        } else {
            String::new()
        }
    );
    print_slowest(&mut times);
    std::process::exit(if failed > 0 {
        1
    } else if skipped > 0 {
        2
    } else {
        0
    })
}

/// Whether `--deadline` has passed since `start`.
fn past_deadline(a: &Args, start: Instant) -> bool {
    a.deadline
        .is_some_and(|d| start.elapsed().as_secs_f64() >= d)
}

/// One `SKIP` line per test the deadline left out.
fn skip_rest<'a>(names: impl Iterator<Item = &'a str>) {
    for name in names {
        println!("SKIP {name} (deadline)");
    }
}

/// The slowest tests of a run, by wall time (the place to look when a list does not fit).
fn print_slowest(times: &mut [(String, f64)]) {
    times.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top: Vec<String> = times
        .iter()
        .take(8)
        .map(|(n, s)| format!("{n} {s:.1} s"))
        .collect();
    if !top.is_empty() {
        println!(
            "slowest: {} (of {:.1} s in all)",
            top.join(", "),
            times.iter().map(|t| t.1).sum::<f64>()
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == image::PROBE_ARG) {
        std::process::exit(image::probe());
    }
    let args = Args::parse();
    let quick = args.quick;
    if args.list {
        for (family, (name, _)) in args.selected() {
            println!("{family} {name}");
        }
        return;
    }
    if !detkit::driver_present() {
        println!("skipped: no CUDA driver (libcuda not found); GPU tests did not run");
        return;
    }
    if args.sanitize && std::env::var_os(detkit::cuda::GRID_SMS_ENV).is_none() {
        // Grids sized per multiprocessor as for 8 of them: racecheck's host memory follows
        // the resident blocks' shared memory (see the module doc). Set before any thread.
        std::env::set_var(detkit::cuda::GRID_SMS_ENV, SANITIZER_GRID_SMS);
    }
    if args.isolate {
        run_isolated(&args);
    }
    let backend = match Backend::cuda(0) {
        Ok(b) => b,
        Err(Error::NoCuda(why)) => {
            println!("skipped: no CUDA driver usable ({why}); GPU tests did not run");
            return;
        }
        Err(other) => {
            println!("FAIL: CUDA start-up: {other}");
            std::process::exit(1);
        }
    };
    let c = Ctx {
        backend,
        quick,
        sanitize: args.sanitize,
        seed: seed(),
    };
    println!(
        "{}; seed {} (replay with SEED={}){}",
        c.backend.description(),
        c.seed,
        c.seed,
        match (c.sanitize, quick) {
            (true, _) => "; sanitize (quick, fewer launches, grids per DETKIT_GRID_SMS)",
            (false, true) => "; quick",
            _ => "",
        }
    );
    let mut failed = 0;
    let mut ran = 0;
    let start = Instant::now();
    let tests = args.selected();
    let mut times = Vec::new();
    for (i, (_, (name, f))) in tests.iter().enumerate() {
        if past_deadline(&args, start) {
            skip_rest(tests[i..].iter().map(|(_, (n, _))| *n));
            println!(
                "gpu tests: {} passed, {failed} failed, {} not run (deadline)",
                ran - failed,
                tests.len() - i
            );
            print_slowest(&mut times);
            std::process::exit(2);
        }
        ran += 1;
        // A line before each test, so that a run that ends without a message names the test
        // it was in.
        println!("RUN  {name}");
        let t = Instant::now();
        let launches = c.gpu().launches();
        let r = f(&c);
        times.push((name.to_string(), t.elapsed().as_secs_f64()));
        match r {
            Ok(()) => println!(
                "PASS {name} ({:.1} s, {} launches{})",
                t.elapsed().as_secs_f64(),
                c.gpu().launches() - launches,
                host_memory()
            ),
            Err(msg) => {
                failed += 1;
                println!("FAIL {name}: {msg}");
            }
        }
    }
    println!("gpu tests: {} passed, {failed} failed", ran - failed);
    print_slowest(&mut times);
    if failed > 0 {
        std::process::exit(1);
    }
}
