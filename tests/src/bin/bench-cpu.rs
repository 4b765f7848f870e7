//! bench-cpu: the CPU backend (`Backend::cpu_with_threads(t)`, the rayon fast paths of
//! `<family>/par.rs`) beside the oracle (`<family>/cpu.rs`, sequential), on 1, 2, 4, 8 and
//! 16 threads (capped at the cores available). No GPU needed.
//!
//! Rows: clustering (a batch of Run-3-like events, a batch of dense events, and one Run-3
//! event alone), PET (conversion, stable time sort, prompt coincidence, and the streamed
//! chain frames → pairs, at 2^20 and 2^24 frames or singles), seeding (⟨μ⟩ = 50, 100, 200,
//! 300, 1000: one event per call, and a batch of events per call at μ = 200).
//! For every row the oracle runs first (its output is the reference and its time the
//! baseline: the best of up to 4 runs, or its one run when over 2 s); each thread count's
//! result is checked equal to it before any time is printed (a mismatch aborts). Every pool
//! then runs once (a warm-up, the checked run; a pool whose warm-up took over 2 s is timed by
//! it alone), and the `--reps` repetitions go round the pools (1, 2, 4, …, 1, 2, …), so each
//! thread count is sampled over the same minutes. Columns: the median time per call, events
//! (or items) per second, speed-up over the oracle, the scaling efficiency
//! `rate(t) / (t × rate(1))` from the medians, and the least and most time (with eff from the
//! least times). Rows `… (into)` call the `_into` entry point with one output per pool,
//! reused by every call.
//!
//! Each row also gives the bytes it reads and writes per second (its input and output once:
//! how close it runs to the memory's bandwidth) and the minor page faults per call (a fresh
//! output's first touch: 1 per 4 KiB, or 1 per 2 MiB where transparent huge pages took).
//! `--probe` first measures the machine's bandwidth on the same pools (a parallel read, write
//! and copy of 1 GiB buffers, and a write into fresh memory with and without huge pages), so
//! the floor is measured in the same run, and each row then prints a roofline line (its
//! bytes over the probe's bandwidth at each thread count, beside the time eff 0.8 needs);
//! `--phases` prints, per row and thread count, where
//! one fast call's time goes (`detkit::par_timing`: wall time, page faults, and the share of
//! the workers kept busy in each parallel step).
//!
//! Usage: `bench-cpu [--threads 1,2,4,8,16] [--reps 5] [--mu 50,100,200,300,1000]
//! [--pet 20,24] [--batch 16] [--only clustering,pet,seeding] [--case SUBSTR,..] [--probe]
//! [--phases] [--quick] [--csv FILE]`.
//! `--quick`: the sizes of a 2-core CI-class machine (μ up to 300 plus 1000 once, PET 2^20
//! and 2^22, batches of 4 events, 3 repetitions).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use detkit::Backend;

/// The best of the timed runs: the machine may be shared, and the least disturbed run is
/// the closest to the code's own speed.
fn best(v: Vec<f64>) -> f64 {
    v.into_iter().fold(f64::INFINITY, f64::min)
}

struct Opts {
    threads: Vec<usize>,
    reps: usize,
    mus: Vec<f64>,
    pet: Vec<u32>,
    batch: usize,
    only: Vec<String>,
    /// Only rows whose case contains one of these.
    cases: Vec<String>,
    phases: bool,
    probe: bool,
    csv: Option<std::fs::File>,
}

/// One row per thread count (t = 0: the oracle).
struct Bench<'a> {
    o: &'a mut Opts,
    pools: Vec<(usize, Backend)>,
    /// One thread: the oracle runs here (the oracle's sort would use every core).
    one: rayon::ThreadPool,
    /// The bandwidth probe's figures per thread count (`--probe`), for the roofline lines.
    probe: Vec<(usize, Bandwidth)>,
}

/// Times of one pool over a row's repetitions.
struct Times {
    v: Vec<f64>,
    faults: f64,
}

impl Times {
    fn median(&self) -> f64 {
        detkit_tests::median(self.v.clone())
    }
    fn min(&self) -> f64 {
        best(self.v.clone())
    }
    fn max(&self) -> f64 {
        self.v.iter().copied().fold(0.0, f64::max)
    }
}

impl Bench<'_> {
    fn wanted(&self, label: &str) -> bool {
        self.o.cases.is_empty() || self.o.cases.iter().any(|c| label.contains(c.as_str()))
    }

    /// Times `oracle` (on one thread) and `fast` on every pool; `items` counts events (or
    /// singles/frames) per call, `unit` names them; `bytes` is the input and the output size
    /// of one call; `same` checks a fast result against the oracle's. Returns the oracle's
    /// result and time (`None`: the row is filtered out).
    #[allow(clippy::too_many_arguments)]
    fn row<T, U>(
        &mut self,
        family: &str,
        label: &str,
        items: f64,
        unit: &str,
        bytes: (f64, f64),
        oracle: impl Fn() -> Result<T> + Sync,
        fast: impl Fn(&Backend) -> Result<U>,
        same: impl Fn(&U, &T) -> Result<()>,
    ) -> Result<Option<(T, f64)>>
    where
        T: Send,
    {
        if !self.wanted(label) {
            return Ok(None);
        }
        let reps = self.o.reps;
        // The oracle is sequential: fewer repetitions of the slow rows.
        let oracle = || self.one.install(&oracle);
        let t0 = Instant::now();
        let want = oracle()?;
        let first = t0.elapsed().as_secs_f64();
        let oracle_s = if first > 2.0 || reps <= 1 {
            first
        } else {
            let mut v = vec![first];
            for _ in 0..reps.min(3) {
                let t = Instant::now();
                std::hint::black_box(oracle()?);
                v.push(t.elapsed().as_secs_f64());
            }
            best(v)
        };
        self.row_given(
            family, label, items, unit, bytes, &want, oracle_s, fast, same,
        )?;
        Ok(Some((want, oracle_s)))
    }

    /// [`Bench::row`] against an oracle result and time already measured. Every pool runs
    /// once (a warm-up, whose result is checked), then the repetitions go round the pools
    /// (1, 2, …, 16 threads, 1, 2, …), so every thread count is sampled over the same minutes
    /// and a slow minute of the machine does not fall on one of them only. Printed: the
    /// median (and the least and most) of each pool's repetitions; "eff" from the medians
    /// and from the least times.
    #[allow(clippy::too_many_arguments)]
    fn row_given<T, U>(
        &mut self,
        family: &str,
        label: &str,
        items: f64,
        unit: &str,
        bytes: (f64, f64),
        want: &T,
        oracle_s: f64,
        fast: impl Fn(&Backend) -> Result<U>,
        same: impl Fn(&U, &T) -> Result<()>,
    ) -> Result<()> {
        if !self.wanted(label) {
            return Ok(());
        }
        let reps = self.o.reps;
        let csv = &mut self.o.csv;
        let r = Row {
            family,
            label,
            items,
            unit,
            bytes: bytes.0 + bytes.1,
            oracle_s,
        };
        r.print(csv, "oracle", oracle_s, None, None)?;
        // Warm-up and check on every pool; pools whose warm-up took over 2 s are timed by
        // it alone.
        let mut times: Vec<Times> = Vec::with_capacity(self.pools.len());
        for (t, b) in &self.pools {
            let t0 = Instant::now();
            let got = fast(b)?;
            let s = t0.elapsed().as_secs_f64();
            same(&got, want).with_context(|| format!("{family} {label}: {t} threads"))?;
            drop(got);
            times.push(Times {
                v: if s > 2.0 || reps == 0 {
                    vec![s]
                } else {
                    vec![]
                },
                faults: 0.0,
            });
        }
        let mut faults = vec![0u64; self.pools.len()];
        for _ in 0..reps {
            for (i, (_, b)) in self.pools.iter().enumerate() {
                if times[i].v.len() == 1 && reps > 1 && times[i].v[0] > 2.0 {
                    continue;
                }
                let f0 = detkit::par_timing::minor_faults();
                let t0 = Instant::now();
                std::hint::black_box(fast(b)?);
                times[i].v.push(t0.elapsed().as_secs_f64());
                faults[i] += detkit::par_timing::minor_faults() - f0;
            }
        }
        for (tm, f) in times.iter_mut().zip(&faults) {
            tm.faults = *f as f64 / tm.v.len().max(1) as f64;
        }
        let one_med = times[0].median() * self.pools[0].0 as f64;
        let one_min = times[0].min() * self.pools[0].0 as f64;
        for (i, (t, b)) in self.pools.iter().enumerate() {
            let tm = &times[i];
            let (med, min, max) = (tm.median(), tm.min(), tm.max());
            let eff = one_med / (med * *t as f64);
            let eff_min = one_min / (min * *t as f64);
            r.print_times(
                csv,
                *t,
                (med, min, max),
                tm.v.len(),
                (eff, eff_min),
                tm.faults,
            )?;
            if self.o.phases {
                phases(*t, || fast(b).map(|_| ()))?;
            }
        }
        self.roofline(label, bytes, one_med, &times);
        Ok(())
    }

    /// What the memory system allows (`--probe`): each thread count's time for the row's
    /// bytes at the probe's bandwidth (a reused output: read + write at the copy rate; a
    /// fresh output: the input at the read rate and the output at the rate of writing fresh
    /// huge pages), beside the time that eff 0.8 asks for (`one-thread time / (0.8 × t)`).
    fn roofline(&self, label: &str, (inb, outb): (f64, f64), one: f64, times: &[Times]) {
        if self.probe.is_empty() {
            return;
        }
        let mut line = format!(
            "#   roofline {label}: {:.0} MB in + {:.0} MB out;",
            inb * 1e-6,
            outb * 1e-6
        );
        for (i, (t, _)) in self.pools.iter().enumerate() {
            let Some((_, bw)) = self.probe.iter().find(|(pt, _)| pt == t) else {
                continue;
            };
            let reused = (inb + outb) / (bw.copy * 1e9) * 1e3;
            let fresh = (inb / (bw.read * 1e9) + outb / (bw.fresh_huge * 1e9)) * 1e3;
            let need = one / (0.8 * *t as f64) * 1e3;
            line += &format!(
                " | {t} thr: floor {reused:.2} ms (fresh out {fresh:.2}), eff 0.8 needs \
                 {need:.2} ms, median {:.2}",
                times[i].median() * 1e3
            );
        }
        println!("{line}");
    }
}

/// One fast call timed by `detkit::par_timing` (`--phases`): its steps, with page faults,
/// the workers' busy share, CPU and system time.
fn phases(t: usize, call: impl FnOnce() -> Result<()>) -> Result<()> {
    detkit::par_timing::take();
    detkit::par_timing::enable(true);
    let t0 = Instant::now();
    let res = call();
    let wall = t0.elapsed().as_secs_f64();
    detkit::par_timing::enable(false);
    res?;
    let steps = detkit::par_timing::take();
    let sum: f64 = steps.iter().map(|s| s.wall_s).sum();
    let mut line = format!(
        "#   phases {t:>2} thr ({:.3} ms, steps {:.3} ms):",
        wall * 1e3,
        sum * 1e3
    );
    for st in &steps {
        line += &format!(" | {} {:.3} ms", st.name, st.wall_s * 1e3);
        if st.faults > 0 {
            line += &format!(" {}flt", st.faults);
        }
        let pool = st.wall_s * t as f64;
        if st.busy_s > 0.0 {
            line += &format!(" busy {:.0}%", 100.0 * st.busy_s / pool);
        }
        if st.wall_s > 1e-3 {
            line += &format!(
                " cpu {:.0}% sys {:.0}%",
                100.0 * (st.user_s + st.sys_s) / pool,
                100.0 * st.sys_s / pool
            );
        }
        if st.preempted > 0 {
            line += &format!(" {}csw", st.preempted);
        }
    }
    println!("{line}");
    Ok(())
}

/// What a row prints beside each thread count's time.
struct Row<'a> {
    family: &'a str,
    label: &'a str,
    items: f64,
    unit: &'a str,
    /// Input and output bytes of one call.
    bytes: f64,
    oracle_s: f64,
}

impl Row<'_> {
    /// The oracle's line.
    fn print(
        &self,
        csv: &mut Option<std::fs::File>,
        threads: &str,
        s: f64,
        eff: Option<f64>,
        faults: Option<f64>,
    ) -> Result<()> {
        let Row {
            family,
            label,
            items,
            unit,
            bytes,
            oracle_s,
        } = *self;
        let eff_s = eff.map_or("-".to_string(), |e| format!("{:.2}", e));
        let flt = faults.map_or("-".to_string(), |f| format!("{f:.0}"));
        println!(
            "{family:<10} {label:<32} {threads:>7} {:>11.3} ms {:>13.1} {unit}/s {:>7.2}x {:>6} {:>7.2} GB/s {:>8}",
            s * 1e3,
            items / s,
            oracle_s / s,
            eff_s,
            bytes / s * 1e-9,
            flt
        );
        if let Some(f) = csv {
            writeln!(
                f,
                "{family},{label},{threads},{:.6},{:.6},{:.6},1,{:.3},{unit},{:.4},,,{:.3},{}",
                s * 1e3,
                s * 1e3,
                s * 1e3,
                items / s,
                oracle_s / s,
                bytes / s * 1e-9,
                faults.map_or(String::new(), |f| format!("{f:.0}"))
            )?;
        }
        Ok(())
    }

    /// A pool's line: median time (rate, speed-up, bandwidth from it), least and most time,
    /// repetitions, eff from the medians and from the least times.
    fn print_times(
        &self,
        csv: &mut Option<std::fs::File>,
        threads: usize,
        (med, min, max): (f64, f64, f64),
        n: usize,
        (eff, eff_min): (f64, f64),
        faults: f64,
    ) -> Result<()> {
        let Row {
            family,
            label,
            items,
            unit,
            bytes,
            oracle_s,
        } = *self;
        println!(
            "{family:<10} {label:<32} {threads:>7} {:>11.3} ms {:>13.1} {unit}/s {:>7.2}x {:>6.2} {:>7.2} GB/s {:>8.0}   min {:.3} max {:.3} ms (n={n}, eff of mins {eff_min:.2})",
            med * 1e3,
            items / med,
            oracle_s / med,
            eff,
            bytes / med * 1e-9,
            faults,
            min * 1e3,
            max * 1e3,
        );
        if let Some(f) = csv {
            writeln!(
                f,
                "{family},{label},{threads},{:.6},{:.6},{:.6},{n},{:.3},{unit},{:.4},{eff:.4},{eff_min:.4},{:.3},{faults:.0}",
                med * 1e3,
                min * 1e3,
                max * 1e3,
                items / med,
                oracle_s / med,
                bytes / med * 1e-9,
            )?;
        }
        Ok(())
    }
}

/// The probe's figures for one thread count (GB/s of bytes read plus written).
#[derive(Clone, Copy)]
struct Bandwidth {
    read: f64,
    copy: f64,
    fresh_huge: f64,
}

/// The machine's memory bandwidth on each pool: a parallel read (sum), write (fill) and copy
/// of 1 GiB buffers already touched, and a fill of fresh memory (page faults and the
/// kernel's zeroing included) with 4 KiB pages and with `MADV_HUGEPAGE`; best of 3, GB/s of
/// bytes read plus written.
fn probe(pool_of: &[(usize, rayon::ThreadPool)]) -> Vec<(usize, Bandwidth)> {
    let mut figures = Vec::new();
    const N: usize = 1 << 27; // u64 words: 1 GiB
    const CHUNK: usize = 1 << 15;
    let mut src = vec![1u64; N];
    let mut dst = vec![0u64; N];
    src[N / 2] = 3;
    println!(
        "# bandwidth probe (GB/s, best of 3; fresh: a new 1 GiB vector filled, faults per call)"
    );
    println!(
        "# {:>7} {:>9} {:>9} {:>9} {:>18} {:>18}",
        "threads", "read", "write", "copy", "fresh 4K", "fresh huge"
    );
    for (t, pool) in pool_of {
        let best3 = |f: &mut dyn FnMut()| -> f64 {
            (0..3)
                .map(|_| {
                    let t0 = Instant::now();
                    f();
                    t0.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        let bytes = (N * 8) as f64;
        let read = pool.install(|| {
            best3(&mut || {
                use rayon::prelude::*;
                let s: u64 = src
                    .par_chunks(CHUNK)
                    .map(|c| c.iter().fold(0u64, |a, &x| a.wrapping_add(x)))
                    .sum();
                std::hint::black_box(s);
            })
        });
        let write = pool.install(|| {
            best3(&mut || {
                use rayon::prelude::*;
                dst.par_chunks_mut(CHUNK).for_each(|c| c.fill(7));
            })
        });
        let copy = pool.install(|| {
            best3(&mut || {
                use rayon::prelude::*;
                dst.par_chunks_mut(CHUNK)
                    .zip(src.par_chunks(CHUNK))
                    .for_each(|(d, s)| d.copy_from_slice(s));
            })
        });
        let fresh = |huge: bool| -> (f64, f64) {
            let f0 = detkit::par_timing::minor_faults();
            let s = pool.install(|| {
                best3(&mut || {
                    use rayon::prelude::*;
                    let mut v: Vec<u64> = Vec::with_capacity(N);
                    if huge {
                        detkit::mem::huge_pages(&mut v);
                    }
                    v.spare_capacity_mut()
                        .par_chunks_mut(CHUNK)
                        .for_each(|c| c.fill(std::mem::MaybeUninit::new(7)));
                    // SAFETY: every slot was written above.
                    unsafe { v.set_len(N) };
                    std::hint::black_box(&v);
                })
            });
            (s, (detkit::par_timing::minor_faults() - f0) as f64 / 3.0)
        };
        let (f4k, n4k) = fresh(false);
        let (fhuge, nhuge) = fresh(true);
        println!(
            "# {t:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.1} ({:>6.0}) {:>9.1} ({:>6.0})",
            bytes / read * 1e-9,
            bytes / write * 1e-9,
            2.0 * bytes / copy * 1e-9,
            bytes / f4k * 1e-9,
            n4k,
            bytes / fhuge * 1e-9,
            nhuge
        );
        figures.push((
            *t,
            Bandwidth {
                read: bytes / read * 1e-9,
                copy: 2.0 * bytes / copy * 1e-9,
                fresh_huge: bytes / fhuge * 1e-9,
            },
        ));
    }
    figures
}

fn main() -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut o = Opts {
        threads: vec![1, 2, 4, 8, 16],
        reps: 5,
        mus: vec![50.0, 100.0, 200.0, 300.0, 1000.0],
        pet: vec![20, 24],
        batch: 16,
        only: vec![],
        cases: vec![],
        phases: false,
        probe: false,
        csv: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--threads" => o.threads = detkit_tests::parse_list(&val()?)?,
            "--reps" => o.reps = val()?.parse()?,
            "--mu" => o.mus = detkit_tests::parse_list(&val()?)?,
            "--pet" => o.pet = detkit_tests::parse_list(&val()?)?,
            "--batch" => o.batch = val()?.parse()?,
            "--only" => o.only = val()?.split(',').map(str::to_string).collect(),
            "--case" => o.cases = val()?.split(',').map(str::to_string).collect(),
            "--phases" => o.phases = true,
            "--probe" => o.probe = true,
            "--csv" => {
                let mut f = std::fs::File::create(val()?)?;
                writeln!(
                    f,
                    "family,case,threads,ms_median,ms_min,ms_max,reps,rate,unit,vs_oracle,efficiency,efficiency_of_mins,gb_per_s,faults_per_call"
                )?;
                o.csv = Some(f);
            }
            "--quick" => {
                o.reps = 3;
                o.mus = vec![50.0, 100.0, 200.0, 300.0, 1000.0];
                o.pet = vec![20, 22];
                o.batch = 4;
            }
            other => bail!("unknown argument {other}"),
        }
    }
    o.threads.retain(|&t| t >= 1 && t <= cores);
    if o.threads.is_empty() {
        o.threads = vec![1];
    }
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    println!(
        "# bench-cpu: {model}, {cores} cores available; threads {:?}",
        o.threads
    );
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("# load average at start: {}", load().trim());
    let thp = |f: &str| {
        std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{f}"))
            .unwrap_or_else(|_| "unknown".into())
    };
    println!(
        "# transparent huge pages: enabled {}; defrag {}",
        thp("enabled").trim(),
        thp("defrag").trim()
    );
    let pools = o
        .threads
        .iter()
        .map(|&t| Ok((t, Backend::cpu_with_threads(t)?)))
        .collect::<Result<Vec<_>>>()?;
    let mut figures = Vec::new();
    if o.probe {
        let raw = o
            .threads
            .iter()
            .map(|&t| Ok((t, rayon::ThreadPoolBuilder::new().num_threads(t).build()?)))
            .collect::<Result<Vec<_>>>()?;
        figures = probe(&raw);
    }
    println!(
        "{:<10} {:<32} {:>7} {:>14} {:>20} {:>8} {:>6} {:>12} {:>8}",
        "family", "case", "threads", "median/call", "rate", "/oracle", "eff", "in+out", "flt/call"
    );
    let want = |f: &str, o: &Opts| o.only.is_empty() || o.only.iter().any(|x| x == f);
    let run_cl = want("clustering", &o);
    let run_pet = want("pet", &o);
    let run_seed = want("seeding", &o);
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let mut b = Bench {
        o: &mut o,
        pools,
        one,
        probe: figures,
    };
    if run_cl {
        clustering(&mut b)?;
    }
    if run_pet {
        pet(&mut b)?;
    }
    if run_seed {
        seeding(&mut b)?;
    }
    println!("# load average at end: {}", load().trim());
    Ok(())
}

/// Bytes per digi of a clustering call: module, x, y, adc (2 bytes each) in, the cluster
/// number (4) out.
const DIGI_BYTES: (f64, f64) = (8.0, 4.0);

/// `bytes` per item, for `n` items.
fn times(n: usize, (i, o): (f64, f64)) -> (f64, f64) {
    (n as f64 * i, n as f64 * o)
}

fn clustering(b: &mut Bench) -> Result<()> {
    use detkit::clustering::{cpu, gen, Digis, Geometry};
    let g = Geometry::phase1();
    let cut = Some(g.default_cut);
    let n = b.o.batch;
    let batch = |events: Vec<Digis>| {
        let mut all = Digis::default();
        let mut off = vec![0u32];
        for e in &events {
            all.extend(e);
            off.push(all.len() as u32);
        }
        (all, off)
    };
    let same = |x: &detkit::clustering::Clusters, y: &detkit::clustering::Clusters| {
        if x != y {
            bail!("clusters differ from the oracle's");
        }
        Ok(())
    };
    let one = gen::run3_event(1000);
    let off1 = [0, one.len() as u32];
    b.row(
        "clustering",
        "Run-3 event, alone",
        1.0,
        "ev",
        times(one.len(), DIGI_BYTES),
        || Ok(cpu::cluster(&one, &off1, &g, cut)),
        |bk| Ok(bk.cluster_events(&one, &off1, &g, cut)?),
        same,
    )?;
    let (all, off) = batch((0..n).map(|s| gen::run3_event(1000 + s as u64)).collect());
    b.row(
        "clustering",
        &format!("Run-3 batch of {n}"),
        n as f64,
        "ev",
        times(all.len(), DIGI_BYTES),
        || Ok(cpu::cluster(&all, &off, &g, cut)),
        |bk| Ok(bk.cluster_events(&all, &off, &g, cut)?),
        same,
    )?;
    let nd = n.div_ceil(4).max(2);
    let (all, off) = batch((0..nd).map(|s| gen::dense_event(2000 + s as u64)).collect());
    b.row(
        "clustering",
        &format!("dense batch of {nd}"),
        nd as f64,
        "ev",
        times(all.len(), DIGI_BYTES),
        || Ok(cpu::cluster(&all, &off, &g, cut)),
        |bk| Ok(bk.cluster_events(&all, &off, &g, cut)?),
        same,
    )?;
    Ok(())
}

/// The check of an `_into` row: the pool's output (kept in `outs` by thread count) against
/// the oracle's.
fn same_out<T: PartialEq>(
    outs: &BTreeMap<usize, Mutex<Vec<T>>>,
) -> impl Fn(&usize, &Vec<T>) -> Result<()> + '_ {
    move |t, want| {
        if *outs[t].lock().unwrap() != *want {
            bail!("outputs differ");
        }
        Ok(())
    }
}

fn pet(b: &mut Bench) -> Result<()> {
    use detkit::pet::cpu::{self as oracle, CoincideConfig};
    use detkit::pet::{gen, Coincidence, Single, StreamConfig};
    let scanner = gen::bench_scanner(11);
    let c = CoincideConfig::prompt(scanner.time_window);
    let (pos, en) = (&scanner.position, &scanner.energy);
    for &log in &b.o.pet.clone() {
        let n = 1usize << log;
        let acq = gen::acquisition_par(
            &scanner,
            &gen::AcquisitionConfig {
                seed: 5,
                singles: n,
                singles_rate: 2e7,
                slice: u64::MAX,
                ..Default::default()
            },
        );
        let frames = &acq.frames[..n.min(acq.frames.len())];
        let p = &scanner.params;
        let accepted = oracle::convert_par(frames, p, pos, en).0.len();
        let same_singles = |x: &Vec<Single>, y: &Vec<Single>| {
            if x != y {
                bail!("singles differ");
            }
            Ok(())
        };
        // `_into` rows: one output per pool, reused by every call (no fresh page).
        let threads: Vec<usize> = b.pools.iter().map(|(t, _)| *t).collect();
        let outs = || -> BTreeMap<usize, Mutex<Vec<Single>>> {
            threads
                .iter()
                .map(|&t| (t, Mutex::new(Vec::new())))
                .collect()
        };
        let conv = b.row(
            "pet",
            &format!("convert 2^{log} frames"),
            frames.len() as f64,
            "frame",
            (16.0 * frames.len() as f64, 16.0 * accepted as f64),
            || Ok(oracle::convert(frames, p, pos, en)),
            |bk| Ok(bk.pet_convert(frames, &scanner)?),
            |x, y| {
                if x != y {
                    bail!("singles differ");
                }
                Ok(())
            },
        )?;
        if let Some(((want, _), oracle_s)) = conv {
            let o = outs();
            let fb: &[u8] = bytemuck::cast_slice(frames);
            b.row_given(
                "pet",
                &format!("convert 2^{log} frames (into)"),
                frames.len() as f64,
                "frame",
                (16.0 * frames.len() as f64, 16.0 * accepted as f64),
                &want,
                oracle_s,
                |bk| {
                    let t = bk.threads();
                    bk.pet_convert_into(fb, &scanner, &mut o[&t].lock().unwrap())?;
                    Ok(t)
                },
                same_out(&o),
            )?;
        }
        // Sort and coincidence on 2^log singles (the accepted singles of more frames).
        let (mut singles, _) = oracle::convert_par(&acq.frames, p, pos, en);
        singles.truncate(n);
        let sorted_row = b.row(
            "pet",
            &format!("sort 2^{log} singles"),
            singles.len() as f64,
            "single",
            (16.0 * singles.len() as f64, 16.0 * singles.len() as f64),
            || Ok(oracle::sort(&singles)?),
            |bk| Ok(bk.pet_sort(&singles)?),
            same_singles,
        )?;
        if let Some((want, oracle_s)) = sorted_row {
            let o = outs();
            b.row_given(
                "pet",
                &format!("sort 2^{log} singles (into)"),
                singles.len() as f64,
                "single",
                (16.0 * singles.len() as f64, 16.0 * singles.len() as f64),
                &want,
                oracle_s,
                |bk| {
                    let t = bk.threads();
                    bk.pet_sort_into(&singles, &mut o[&t].lock().unwrap())?;
                    Ok(t)
                },
                same_out(&o),
            )?;
        }
        let sorted = oracle::sort(&singles)?;
        let pairs = detkit::pet::par::coincide(&sorted, &c)?.len();
        let same_pairs = |x: &Vec<Coincidence>, y: &Vec<Coincidence>| {
            if x.len() != y.len() || x.iter().zip(y).any(|(a, b)| a.a != b.a || a.b != b.b) {
                bail!("pairs differ");
            }
            Ok(())
        };
        let pair_bytes = (16.0 * sorted.len() as f64, 32.0 * pairs as f64);
        let coin = b.row(
            "pet",
            &format!("coincide 2^{log} singles"),
            sorted.len() as f64,
            "single",
            pair_bytes,
            || Ok(oracle::coincide(&sorted, &c)?),
            |bk| Ok(bk.pet_coincide(&sorted, &c)?),
            same_pairs,
        )?;
        if let Some((want, oracle_s)) = coin {
            let o: BTreeMap<usize, Mutex<Vec<Coincidence>>> = threads
                .iter()
                .map(|&t| (t, Mutex::new(Vec::new())))
                .collect();
            b.row_given(
                "pet",
                &format!("coincide 2^{log} singles (into)"),
                sorted.len() as f64,
                "single",
                pair_bytes,
                &want,
                oracle_s,
                |bk| {
                    let t = bk.threads();
                    bk.pet_coincide_into(&sorted, &c, &mut o[&t].lock().unwrap())?;
                    Ok(t)
                },
                |t, want| same_pairs(&o[t].lock().unwrap(), want),
            )?;
        }
        // The chain as bench-pet runs it: readout slices of 100 us (each slice BDM by BDM),
        // streamed in 8 chunks.
        let sliced = gen::acquisition_par(
            &scanner,
            &gen::AcquisitionConfig {
                seed: 6,
                singles: n,
                singles_rate: 2e7,
                slice: 100_000_000,
                ..Default::default()
            },
        );
        let frames = &sliced.frames[..n.min(sliced.frames.len())];
        let bytes = gen::frame_bytes(frames);
        let sc = StreamConfig {
            chunk_frames: (n / 8).max(1 << 16),
            pending_capacity: 1 << 22,
        };
        b.row(
            "pet",
            &format!("chain 2^{log} frames, 8 chunks"),
            frames.len() as f64,
            "frame",
            (16.0 * frames.len() as f64, 32.0 * pairs as f64),
            || {
                let (s, _) = oracle::convert(frames, p, pos, en);
                Ok(oracle::coincide(&oracle::sort(&s)?, &c)?)
            },
            |bk| {
                let mut out = Vec::new();
                bk.pet_run_frames(
                    bytes,
                    &scanner,
                    &c,
                    &sc,
                    |x| {
                        out.extend_from_slice(x);
                        Ok(())
                    },
                    |_| {},
                )?;
                Ok(out)
            },
            same_pairs,
        )?;
    }
    Ok(())
}

fn seeding(b: &mut Bench) -> Result<()> {
    use detkit::seeding::{cpu, gen, SeedingOutput, SeedingSettings};
    let cfg = SeedingSettings::default().to_config()?;
    let same = |g: &Vec<SeedingOutput>, w: &Vec<SeedingOutput>| -> Result<()> {
        if g != w {
            bail!("seeds differ from the oracle's");
        }
        Ok(())
    };
    let oracle_of = |sps: &[detkit::seeding::SpacePoint]| {
        let (seeds, stats) = cpu::seeds(&cfg, sps);
        let params = cpu::params(&cfg, sps, &seeds);
        SeedingOutput {
            seeds,
            params,
            stats,
        }
    };
    for &mu in &b.o.mus.clone() {
        let ev = gen::generate(7 + mu as u64, mu, true).spacepoints;
        let evs = [ev.as_slice()];
        b.row(
            "seeding",
            &format!("mu={mu} ({} sps)", ev.len()),
            1.0,
            "ev",
            (std::mem::size_of_val(ev.as_slice()) as f64, 0.0),
            || Ok(vec![oracle_of(&ev)]),
            |bk| Ok(bk.seed_events(&evs, &cfg)?),
            same,
        )?;
    }
    let n = b.o.batch;
    let batch: Vec<Vec<_>> = (0..n)
        .map(|s| gen::generate(300 + s as u64, 200.0, true).spacepoints)
        .collect();
    let refs: Vec<&[_]> = batch.iter().map(|v| v.as_slice()).collect();
    b.row(
        "seeding",
        &format!("batch {n} x mu=200"),
        n as f64,
        "ev",
        (
            batch
                .iter()
                .map(|v| std::mem::size_of_val(v.as_slice()))
                .sum::<usize>() as f64,
            0.0,
        ),
        || Ok(refs.iter().map(|e| oracle_of(e)).collect()),
        |bk| Ok(bk.seed_events(&refs, &cfg)?),
        same,
    )?;
    Ok(())
}
