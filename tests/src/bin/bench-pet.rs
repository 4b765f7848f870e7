//! bench-pet: the PET chain on the GPU, checked against the oracles before any time is
//! printed, with baselines in the same run: the device-to-device copy (bandwidth ceiling),
//! the pinned host-to-device copy (ceiling of the streamed chain), CUB's radix and merge sort
//! on the same keys (`bench/pet_cub.cu`, compiled with nvcc when present) and the CPU oracles.
//!
//! Device-resident rows are timed with CUDA events (median of `--reps`, after warm-up); the
//! streamed chain from host memory with `Instant` around the whole call (median of 3).
//!
//! Usage: `bench-pet [--sizes 20,22,24,26,28] [--reps 20] [--csv FILE] [--coincide-only]` (inputs from
//! `gen::acquisition_par`, generated in parallel so that 2^28 singles fit one run).

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use detkit::error::DriverContext;
use detkit::pet::cpu::{self as oracle, CoincideConfig};
use detkit::pet::{gen, PetLauncher, StreamConfig};
use detkit::{Backend, Record};
use detkit_gpu::pet::{self as kp, Single};
use detkit_tests::{check, median_ms, parse_list};

fn print_row(r: &Row) {
    let (bname, bms) = r.baseline.clone().unwrap_or_default();
    println!(
        "{:<34} {:>10} {:>10.3} {:>9.1} {:>11.1} {:>9}  {}",
        r.what,
        r.n,
        r.ms,
        r.bytes / r.ms / 1e6,
        r.n as f64 / r.ms / 1e3,
        if bms > 0.0 {
            format!("{:.2}", bms / r.ms)
        } else {
            "-".into()
        },
        if bms > 0.0 {
            format!("{bname} {bms:.3} ms")
        } else {
            String::new()
        }
    );
    let _ = std::io::stdout().flush();
}

fn header() {
    println!(
        "{:<34} {:>10} {:>10} {:>9} {:>11} {:>9}  baseline",
        "what", "n", "ms", "GB/s", "M items/s", "x base"
    );
}

fn push(rows: &mut Vec<Row>, r: Row) {
    print_row(&r);
    rows.push(r);
}

struct Row {
    what: String,
    n: usize,
    ms: f64,
    bytes: f64,
    baseline: Option<(String, f64)>,
}

/// Writes the sort keys (f64 bits of non-negative times) for the CUB baseline.
fn key_file(
    dir: &std::path::Path,
    label: &str,
    n: usize,
    v: &[Single],
) -> Result<std::path::PathBuf> {
    let p = dir.join(format!("{label}-{n}.keys"));
    let k: Vec<u64> = v.iter().map(|s| s.time.to_bits()).collect();
    std::fs::write(&p, bytemuck::cast_slice::<u64, u8>(&k))?;
    Ok(p)
}

fn main() -> Result<()> {
    let mut sizes = vec![20u32, 22, 24, 26, 28];
    let mut reps = 20usize;
    let mut csv = None;
    // --coincide-only: copy, conversion and coincidence rows only (no sorts, no streamed
    // chain, no CUB).
    let mut coincide_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sizes" => sizes = parse_list(&args.next().context("--sizes needs a list")?)?,
            "--reps" => reps = args.next().context("--reps needs a number")?.parse()?,
            "--csv" => csv = Some(args.next().context("--csv needs a file")?),
            "--coincide-only" => coincide_only = true,
            other => bail!("unknown argument {other}"),
        }
    }
    if !detkit::driver_present() {
        println!("skipped: no CUDA driver");
        return Ok(());
    }
    let backend = match Backend::cuda(0) {
        Ok(b) => b,
        Err(detkit::Error::NoCuda(why)) => {
            println!("skipped: no CUDA driver usable ({why})");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let g = backend.gpu().expect("cuda");
    println!("# device: {}; kernels: {}", g.device_name(), g.image());
    let scanner = gen::bench_scanner(11);
    let pet = PetLauncher::new(g);
    let ds = pet.load_scanner(&scanner)?;
    let c = CoincideConfig::prompt(scanner.time_window);
    let tmp = std::env::temp_dir().join(format!("bench-pet-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let mut rows: Vec<Row> = Vec::new();
    header();
    let mut key_files = Vec::new();
    for &log in &sizes {
        let n = 1usize << log;
        eprintln!("2^{log}: generating");
        // One readout slice: 256 per-BDM time-ordered streams, 20 M singles/s.
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
        let frames = &acq.frames[..n];
        // copy ceiling: 16 n bytes device to device
        let src = g.zeros::<Record<Single>>(n)?;
        let mut dst = g.zeros::<Record<Single>>(n)?;
        let copy_ms = median_ms(g, 3, reps, || {
            g.stream().memcpy_dtod(&src, &mut dst).ctx("copy")
        })?;
        push(
            &mut rows,
            Row {
                what: "copy (d2d, 16 B/item)".into(),
                n,
                ms: copy_ms,
                bytes: 32.0 * n as f64,
                baseline: None,
            },
        );
        // conversion
        let (want_s, want_st) =
            oracle::convert_par(frames, &scanner.params, &scanner.position, &scanner.energy);
        let d_frames = g.upload(bytemuck::cast_slice::<_, u8>(frames))?;
        let mut out = g.zeros::<Record<Single>>(n)?;
        let mut st = g.zeros::<u32>(kp::STAT_WORDS)?;
        pet.convert(&d_frames, n, &ds, &mut out, 0, &mut st)?;
        let acc = g.download(&st)?[kp::STAT_ACCEPTED] as usize;
        check("convert", &g.download_records(&out)?[..acc], &want_s)?;
        let ms = median_ms(g, 3, reps, || {
            pet.convert(&d_frames, n, &ds, &mut out, 0, &mut st)
        })?;
        push(
            &mut rows,
            Row {
                what: "convert".into(),
                n,
                ms,
                bytes: 16.0 * (n + want_st.accepted as usize) as f64,
                baseline: Some(("copy".into(), copy_ms * (n + acc) as f64 / (2 * n) as f64)),
            },
        );
        if !coincide_only {
            // sorts: realistic (converted, per-BDM streams, no energy cut) and random
            let mut all = scanner.clone();
            all.params.energy_lo = f32::MIN;
            all.params.energy_hi = f32::MAX;
            let (streams, _) = oracle::convert_par(frames, &all.params, &all.position, &all.energy);
            let runs: Vec<u32> = acq.bdm_runs.iter().map(|&r| r.min(n as u32)).collect();
            let random: Vec<Single> = detkit::rng::random_below(9, n, u32::MAX)
                .iter()
                .enumerate()
                .map(|(i, &t)| Single {
                    crystal: i as u32,
                    energy: 1.0,
                    time: t as f64,
                })
                .collect();
            for (label, v) in [("presorted-streams", &streams), ("random", &random)] {
                let t0 = Instant::now();
                let want = oracle::sort(v)?;
                let cpu_ms = t0.elapsed().as_secs_f64() * 1e3;
                let host = g.upload_records(v)?;
                let mut a = g.zeros::<Record<Single>>(n)?;
                let mut b = g.zeros::<Record<Single>>(n)?;
                // The seed's merge sort, the radix path (time keys, argsort over the differing
                // bits, gather) and, for the per-BDM streams, the merge of the presorted runs;
                // each from a fresh copy of the input, one row each.
                let mut methods: Vec<(String, detkit_tests::PetSortFn)> = vec![
                    (
                        format!("merge sort, {label}"),
                        Box::new(|g, a, b, n| PetLauncher::new(g).sort_merge(a, b, 0, n)),
                    ),
                    (
                        format!("radix sort, {label}"),
                        Box::new(|g, a, b, n| PetLauncher::new(g).sort_radix(a, b, 0, n)),
                    ),
                ];
                if label == "presorted-streams" {
                    methods.push((
                        format!("merge of {} BDM runs", runs.len() - 1),
                        Box::new(|g, a, b, n| PetLauncher::new(g).merge_runs(a, b, 0, n, &runs)),
                    ));
                }
                for (method, sort) in &methods {
                    let ms = detkit_tests::time_pet_sort(
                        g, method, sort, &host, &mut a, &mut b, n, &want, reps, copy_ms,
                    )?;
                    push(
                        &mut rows,
                        Row {
                            what: method.clone(),
                            n,
                            ms,
                            bytes: 32.0 * n as f64,
                            baseline: Some(("CPU stable sort".into(), cpu_ms)),
                        },
                    );
                }
                key_files.push((label.to_string(), n, key_file(&tmp, label, n, v)?));
            }
        }
        // coincidences on the sorted realistic singles (energy window applied)
        let sorted = oracle::sort(&want_s)?;
        let t0 = Instant::now();
        let want_p = oracle::coincide(&sorted, &c)?;
        let cpu_ms = t0.elapsed().as_secs_f64() * 1e3;
        let ds_sorted = g.upload_records(&sorted)?;
        let mut scratch = detkit::pet::CoincideScratch::default();
        let (got_p, _) =
            pet.coincide_with(&mut scratch, &ds_sorted, 0, sorted.len(), &c, f64::INFINITY)?;
        check("coincide", &got_p, &want_p)?;
        let ms = median_ms(g, 3, reps, || {
            pet.coincide_with(&mut scratch, &ds_sorted, 0, sorted.len(), &c, f64::INFINITY)
                .map(|_| ())
        })?;
        push(
            &mut rows,
            Row {
                what: "coincide (killAll)".into(),
                n: sorted.len(),
                ms,
                bytes: 16.0 * sorted.len() as f64,
                baseline: Some(("CPU oracle".into(), cpu_ms)),
            },
        );
        // The same pairs left on the device (kernels, the scan and two status reads), and
        // copied into a reused host buffer instead of a new vector.
        let (total, _) =
            pet.coincide_resident(&mut scratch, &ds_sorted, 0, sorted.len(), &c, f64::INFINITY)?;
        let mut reused = vec![<detkit::pet::Coincidence as bytemuck::Zeroable>::zeroed(); total];
        pet.download_pairs(&scratch, &mut reused)?;
        check("coincide resident", &reused, &want_p)?;
        let ms_res = median_ms(g, 3, reps, || {
            pet.coincide_resident(&mut scratch, &ds_sorted, 0, sorted.len(), &c, f64::INFINITY)
                .map(|_| ())
        })?;
        push(
            &mut rows,
            Row {
                what: "coincide, pairs left on device".into(),
                n: sorted.len(),
                ms: ms_res,
                bytes: 16.0 * sorted.len() as f64,
                baseline: Some(("CPU oracle".into(), cpu_ms)),
            },
        );
        // The kernel alone (issue 12's "kernels only"): the status and flag memsets and the
        // launch, enqueued; the status read-back of `PetLauncher::coincide_finish` outside the timing.
        let launch =
            pet.coincide_enqueue(&mut scratch, &ds_sorted, 0, sorted.len(), &c, f64::INFINITY)?;
        let (total_k, _) = pet.coincide_finish(&mut scratch, &ds_sorted, launch)?;
        let mut reused_k =
            vec![<detkit::pet::Coincidence as bytemuck::Zeroable>::zeroed(); total_k];
        pet.download_pairs(&scratch, &mut reused_k)?;
        check("coincide kernel only", &reused_k, &want_p)?;
        let mut last = None;
        let ms_k = median_ms(g, 3, reps, || {
            last = Some(pet.coincide_enqueue(
                &mut scratch,
                &ds_sorted,
                0,
                sorted.len(),
                &c,
                f64::INFINITY,
            )?);
            Ok(())
        })?;
        if let Some(l) = last {
            let (t, _) = pet.coincide_finish(&mut scratch, &ds_sorted, l)?;
            if t != want_p.len() {
                bail!(
                    "CHECK FAILED coincide kernel only: {t} pairs in the timed launches, want {}",
                    want_p.len()
                );
            }
        }
        push(
            &mut rows,
            Row {
                what: "coincide, kernel only (enqueued)".into(),
                n: sorted.len(),
                ms: ms_k,
                bytes: 16.0 * sorted.len() as f64,
                baseline: Some(("CPU oracle".into(), cpu_ms)),
            },
        );
        let ms_dl = median_ms(g, 3, reps, || {
            pet.coincide_resident(&mut scratch, &ds_sorted, 0, sorted.len(), &c, f64::INFINITY)?;
            pet.download_pairs(&scratch, &mut reused)
        })?;
        push(
            &mut rows,
            Row {
                what: "coincide, into a reused host buffer".into(),
                n: sorted.len(),
                ms: ms_dl,
                bytes: 16.0 * sorted.len() as f64,
                baseline: Some(("CPU oracle".into(), cpu_ms)),
            },
        );
        // whole chain from host memory, streamed (Instant), vs the pinned H2D copy of the frames
        if !coincide_only {
            // Readout slices of 100 us (each slice BDM by BDM), as a DAQ delivers them.
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
            let frames = &sliced.frames[..n];
            let bytes = gen::frame_bytes(frames);
            let (s_sl, _) =
                oracle::convert_par(frames, &scanner.params, &scanner.position, &scanner.energy);
            let want_chain = oracle::coincide(&oracle::sort(&s_sl)?, &c)?;
            let sc = StreamConfig {
                chunk_frames: (n / 8).max(1 << 16),
                pending_capacity: 1 << 22,
            };
            let mut got = Vec::new();
            backend.pet_run_stream(
                &mut &bytes[..],
                &scanner,
                &c,
                &sc,
                |p| {
                    got.extend_from_slice(p);
                    Ok(())
                },
                |_| {},
            )?;
            check("streamed chain", &got, &want_chain)?;
            // From memory (several copying threads) too, checked the same way.
            let mut got = Vec::new();
            backend.pet_run_frames(
                bytes,
                &scanner,
                &c,
                &sc,
                |p| {
                    got.extend_from_slice(p);
                    Ok(())
                },
                |_| {},
            )?;
            check("streamed chain from memory", &got, &want_chain)?;
            let file = tmp.join(format!("frames-{n}.bin"));
            std::fs::write(&file, bytes)?;
            // Median of 3 whole runs each: a reader over memory, frames in memory, a file.
            let time3 = |f: &mut dyn FnMut() -> detkit::Result<()>| -> Result<f64> {
                let mut t = Vec::new();
                for _ in 0..3 {
                    let t0 = Instant::now();
                    f()?;
                    t.push(t0.elapsed().as_secs_f64() * 1e3);
                }
                t.sort_by(f64::total_cmp);
                Ok(t[1])
            };
            let t_read = time3(&mut || {
                backend
                    .pet_run_stream(&mut &bytes[..], &scanner, &c, &sc, |_| Ok(()), |_| {})
                    .map(|_| ())
            })?;
            let t_mem = time3(&mut || {
                backend
                    .pet_run_frames(bytes, &scanner, &c, &sc, |_| Ok(()), |_| {})
                    .map(|_| ())
            })?;
            let t_file = time3(&mut || {
                backend
                    .pet_run_file(&file, &scanner, &c, &sc, |_| Ok(()), |_| {})
                    .map(|_| ())
            })?;
            std::fs::remove_file(&file).ok();
            // What page-locking the frames costs (GpuContext::page_lock; pet_run_frames copies
            // pageable frames through its pinned buffers instead).
            let t_lock = time3(&mut || {
                let lock = g.page_lock(bytes);
                if lock.is_none() {
                    eprintln!("page-locking refused by the driver");
                }
                Ok(())
            })?;
            // Pageable frames locked once, then run (the lock outside the timing).
            let t_locked = {
                let _lock = g.page_lock(bytes);
                time3(&mut || {
                    backend
                        .pet_run_frames(bytes, &scanner, &c, &sc, |_| Ok(()), |_| {})
                        .map(|_| ())
                })?
            };
            // Frames already in pinned memory (a DAQ's DMA buffer): no lock, no host copy.
            // SAFETY: written below before any copy reads it.
            let mut daq = unsafe { g.context().alloc_pinned_with_flags::<u8>(bytes.len(), 0) }?;
            daq.as_mut_slice()?.copy_from_slice(bytes);
            let daq_bytes = daq.as_slice()?;
            let mut got = Vec::new();
            backend.pet_run_frames(
                daq_bytes,
                &scanner,
                &c,
                &sc,
                |p| {
                    got.extend_from_slice(p);
                    Ok(())
                },
                |_| {},
            )?;
            check("streamed chain from pinned memory", &got, &want_chain)?;
            let t_pinned = time3(&mut || {
                backend
                    .pet_run_frames(daq_bytes, &scanner, &c, &sc, |_| Ok(()), |_| {})
                    .map(|_| ())
            })?;
            // SAFETY: written below before the copy reads it.
            let mut pinned = unsafe { g.context().alloc_pinned_with_flags::<u8>(bytes.len(), 0) }?;
            pinned.as_mut_slice()?.copy_from_slice(bytes);
            let mut dev = g.zeros::<u8>(bytes.len())?;
            let h2d = median_ms(g, 3, reps.min(10), || {
                g.stream().memcpy_htod(&pinned, &mut dev).ctx("h2d")
            })?;
            for (how, ms) in [
                ("reader", t_read),
                ("memory", t_mem),
                ("pinned memory", t_pinned),
                ("memory locked once", t_locked),
                ("file", t_file),
                ("page-lock only", t_lock),
            ] {
                push(
                    &mut rows,
                    Row {
                        what: format!(
                            "chain streamed ({how}), chunks 2^{}",
                            sc.chunk_frames.trailing_zeros()
                        ),
                        n,
                        ms,
                        bytes: 16.0 * n as f64,
                        baseline: Some(("pinned H2D copy".into(), h2d)),
                    },
                );
            }
        }
    }
    if coincide_only {
        key_files.clear();
    }
    // CUB on the same sort keys.
    let files: Vec<std::path::PathBuf> = key_files.iter().map(|k| k.2.clone()).collect();
    match detkit_tests::run_pet_cub(&tmp, reps, &files) {
        Ok(cub) => {
            for (label, n, f) in &key_files {
                let name = f.to_string_lossy().to_string();
                for (algo, file, ms) in &cub {
                    if *file == name {
                        push(
                            &mut rows,
                            Row {
                                what: format!("CUB {algo} sort, {label}"),
                                n: *n,
                                ms: *ms,
                                bytes: 32.0 * *n as f64,
                                baseline: None,
                            },
                        );
                    }
                }
            }
        }
        Err(why) => println!("CUB baseline: skipped ({why})"),
    }
    std::fs::remove_dir_all(&tmp).ok();
    println!("\nsummary");
    header();
    for r in &rows {
        print_row(r);
    }
    if let Some(path) = csv {
        let mut f = std::fs::File::create(&path)?;
        writeln!(f, "what,n,ms,gbps,mitems_per_s,baseline,baseline_ms")?;
        for r in &rows {
            let (bname, bms) = r.baseline.clone().unwrap_or_default();
            writeln!(
                f,
                "{},{},{:.6},{:.3},{:.3},{},{:.6}",
                r.what,
                r.n,
                r.ms,
                r.bytes / r.ms / 1e6,
                r.n as f64 / r.ms / 1e3,
                bname,
                bms
            )?;
        }
    }
    Ok(())
}
