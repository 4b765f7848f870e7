//! bench-pet-merge: the merge of presorted per-BDM runs (issue 12) on the GPU, on the data
//! of `bench-pet` (one readout slice of the bench scanner, 256 time-ordered BDM streams,
//! 20 M singles/s, no energy cut), every method checked against the oracle before its time
//! is printed: the multiway merge (both tiles; the wide one also without the bucket path,
//! radix passes only, and with merge rounds only, no radix path), natural-run detection
//! plus merge, the
//! pairwise merge it replaces, the radix sort, and CUB's radix SortPairs on the same keys
//! (`bench/pet_cub.cu`, compiled with nvcc when present). Timed as `bench-pet` times its
//! sorts: CUDA events around (copy of the input + sort), median of `--reps`, minus the
//! median copy.
//!
//! Usage: `bench-pet-merge [--sizes 20,22,24] [--reps 20] [--no-cub]`

use anyhow::{bail, Context, Result};
use detkit::error::DriverContext;
use detkit::pet::cpu as oracle;
use detkit::pet::{gen, MergeTile, PetLauncher, PetTuning};
use detkit::{Backend, Record};
use detkit_gpu::pet::Single;
use detkit_tests::{median_ms, parse_list, time_pet_sort, PetSortFn};

fn main() -> Result<()> {
    let mut sizes = vec![20u32, 22, 24];
    let mut reps = 20usize;
    let mut cub = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sizes" => sizes = parse_list(&args.next().context("--sizes needs a list")?)?,
            "--reps" => reps = args.next().context("--reps needs a number")?.parse()?,
            "--no-cub" => cub = false,
            other => bail!("unknown argument {other}"),
        }
    }
    if !detkit::driver_present() {
        println!("skipped: no CUDA driver");
        return Ok(());
    }
    let backend = Backend::cuda(0)?;
    let g = backend.gpu().context("cuda")?;
    println!("# device: {}; kernels: {}", g.device_name(), g.image());
    let scanner = gen::bench_scanner(11);
    let tmp = std::env::temp_dir().join(format!("bench-pet-merge-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let mut keys = Vec::new();
    println!("{:<36} {:>10} {:>9} {:>9}", "what", "n", "ms", "GB/s");
    for &log in &sizes {
        let n = 1usize << log;
        let acq = gen::acquisition(
            &scanner,
            &gen::AcquisitionConfig {
                seed: 5,
                singles: n,
                singles_rate: 2e7,
                slice: u64::MAX,
                ..Default::default()
            },
        );
        let mut all = scanner.clone();
        all.params.energy_lo = f32::MIN;
        all.params.energy_hi = f32::MAX;
        let (v, _) = oracle::convert_par(&acq.frames[..n], &all.params, &all.position, &all.energy);
        let runs: Vec<u32> = acq.bdm_runs.iter().map(|&r| r.min(n as u32)).collect();
        let want = oracle::sort(&v)?;
        let host = g.upload_records(&v)?;
        let mut a = g.zeros::<Record<Single>>(n)?;
        let mut b = g.zeros::<Record<Single>>(n)?;
        let copy_ms = median_ms(g, 3, reps, || {
            g.stream().memcpy_dtod(&host, &mut a).ctx("copy")
        })?;
        println!(
            "{:<36} {:>10} {:>9.3} {:>9.1}",
            "copy (d2d)",
            n,
            copy_ms,
            32.0 * n as f64 / copy_ms / 1e6
        );
        let nr = runs.len() - 1;
        // The merge's tunings (`PetTuning`), each turned into its launch plan once.
        let narrow = PetTuning {
            tile: MergeTile::Narrow,
            ..Default::default()
        }
        .plan()?;
        let wide = PetTuning::default().plan()?;
        let radix_only = PetTuning {
            radix_bits: 64,
            bucket_max: 0,
            ..Default::default()
        }
        .plan()?;
        let rounds_only = PetTuning {
            radix_bits: 0,
            ..Default::default()
        }
        .plan()?;
        let methods: Vec<(String, PetSortFn)> = vec![
            (
                format!("multiway merge of {nr} runs (tile 4608)"),
                Box::new(|g, a, b, n| {
                    PetLauncher::with_plan(g, narrow).merge_runs(a, b, 0, n, &runs)
                }),
            ),
            (
                format!("multiway merge of {nr} runs (tile 9216)"),
                Box::new(|g, a, b, n| {
                    PetLauncher::with_plan(g, wide).merge_runs(a, b, 0, n, &runs)
                }),
            ),
            (
                "multiway, radix passes only (9216)".into(),
                Box::new(|g, a, b, n| {
                    PetLauncher::with_plan(g, radix_only).merge_runs(a, b, 0, n, &runs)
                }),
            ),
            (
                "multiway, merge rounds only (9216)".into(),
                Box::new(|g, a, b, n| {
                    PetLauncher::with_plan(g, rounds_only).merge_runs(a, b, 0, n, &runs)
                }),
            ),
            (
                "detect runs + multiway merge".into(),
                Box::new(|g, a, b, n| PetLauncher::new(g).sort_auto(a, b, 0, n).map(|x| x.0)),
            ),
            (
                format!("pairwise merge of {nr} runs (old)"),
                Box::new(|g, a, b, n| PetLauncher::new(g).merge_runs_pairwise(a, b, 0, n, &runs)),
            ),
            (
                "radix sort".into(),
                Box::new(|g, a, b, n| PetLauncher::new(g).sort_radix(a, b, 0, n)),
            ),
        ];
        for (what, sort) in &methods {
            let ms = time_pet_sort(
                g, what, sort, &host, &mut a, &mut b, n, &want, reps, copy_ms,
            )?;
            println!(
                "{:<36} {:>10} {:>9.3} {:>9.1}",
                what,
                n,
                ms,
                32.0 * n as f64 / ms / 1e6
            );
        }
        let p = tmp.join(format!("streams-{n}.keys"));
        let k: Vec<u64> = v.iter().map(|s| s.time.to_bits()).collect();
        std::fs::write(&p, bytemuck::cast_slice::<u64, u8>(&k))?;
        keys.push((n, p));
    }
    let files: Vec<std::path::PathBuf> = keys.iter().map(|k| k.1.clone()).collect();
    match if cub {
        detkit_tests::run_pet_cub(&tmp, reps, &files)
    } else {
        Err("--no-cub".into())
    } {
        Ok(rows) => {
            for (n, f) in &keys {
                let name = f.to_string_lossy().to_string();
                for (algo, file, ms) in &rows {
                    if *file == name {
                        println!(
                            "{:<36} {:>10} {:>9.3} {:>9.1}",
                            format!("CUB {algo}"),
                            n,
                            ms,
                            32.0 * *n as f64 / ms / 1e6
                        );
                    }
                }
            }
        }
        Err(why) => println!("CUB baseline: skipped ({why})"),
    }
    std::fs::remove_dir_all(&tmp).ok();
    Ok(())
}
