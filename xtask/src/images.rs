//! `cargo xtask build-ptx` (no `--arch`): every kernel image the host embeds.
//!
//! - `detkit.ptx`: the kernels for `sm_70` (PTX ISA 7.0), the fallback the driver JIT-compiles
//!   on any card without a cubin (Volta, Turing, and cards newer than the cubins);
//! - `detkit-sm_80.ptx`: the same sources built for `sm_80` (PTX ISA 7.8), where
//!   `intrinsics.rs` selects its sm_80 paths (`cfg(target_feature = "sm_80")`);
//! - `detkit-sm_XX.cubin` for each of [`CUBIN_ARCHES`]: that PTX assembled by the pinned
//!   `ptxas` ([`PTXAS_RELEASE`]), so no listed card compiles anything at load.
//!
//! All are written to `crates/host/ptx/` and committed; `--check` rebuilds them and fails when
//! a committed file differs. ptxas is deterministic (same PTX and release, same bytes, also
//! from another path), so the check is exact.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::{build_ptx_module, find_ptxas, format_ptxas_report, project_root, ptx_target_dir, rel};

/// The fallback PTX's architecture.
pub(crate) const FALLBACK_ARCH: &str = "sm_70";
/// The architecture of the second kernel build, the source of every cubin.
pub(crate) const MODERN_ARCH: &str = "sm_80";
/// The cubins embedded: one per architecture family member whose SASS differs (a cubin
/// also runs on later minor versions of its major: sm_86 on sm_87/sm_88, sm_100 on sm_103,
/// sm_120 on sm_121). Every one the pinned ptxas supports from sm_80 up but the
/// arch-specific `a`/`f` variants and the embedded-only sm_87/sm_101.
pub(crate) const CUBIN_ARCHES: &[&str] = &["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"];
/// The ptxas release the committed cubins were built with (PyPI `nvidia-cuda-nvcc-cu12`,
/// pinned in scripts/setup.sh): another release gives other bytes.
pub(crate) const PTXAS_RELEASE: &str = "V12.9.86";
/// Where the images are committed, relative to the project root.
pub(crate) const IMAGE_DIR: &str = "crates/host/ptx";

/// The committed file name of the PTX built for `arch`.
pub(crate) fn ptx_file(arch: &str) -> String {
    if arch == FALLBACK_ARCH {
        "detkit.ptx".to_string()
    } else {
        format!("detkit-{arch}.ptx")
    }
}

fn cubin_file(arch: &str) -> String {
    format!("detkit-{arch}.cubin")
}

/// One ptxas job: assemble `ptx` for `arch` into `cubin`.
struct Job {
    arch: &'static str,
    ptx: PathBuf,
    cubin: PathBuf,
}

/// A finished job: the resource report and the time ptxas took.
struct Assembled {
    report: String,
    elapsed: Duration,
}

/// Builds every image; writes the changed ones to `crates/host/ptx/` (or, with `check`,
/// writes nothing and fails when one is stale). Returns the committed paths of the PTX files.
pub(crate) fn build_images(check: bool) -> Result<Vec<PathBuf>> {
    let ptxas = find_ptxas()?.context(
        "ptxas not found: the cubins need it. Run scripts/setup.sh (it installs the pinned \
         PyPI nvidia-cuda-nvcc-cu12 into .tools/ptxas-venv) or set PTXAS",
    )?;
    let version = crate::ptxas_version(&ptxas);
    ensure!(
        version.contains(PTXAS_RELEASE),
        "ptxas {} is `{version}`, but the committed cubins are built with {PTXAS_RELEASE} \
         (another release gives other bytes): run scripts/setup.sh or set PTXAS to the pinned \
         one",
        ptxas.display()
    );
    let t0 = Instant::now();
    let (ptx70_path, ptx70) = build_ptx_module(FALLBACK_ARCH)?;
    let (ptx80_path, ptx80) = build_ptx_module(MODERN_ARCH)?;
    let ptx_time = t0.elapsed();

    // The sm_70 cubin is not embedded (the fallback is PTX), but its resource report is the
    // one most readers compare with.
    let mut jobs = vec![Job {
        arch: FALLBACK_ARCH,
        ptx: ptx70_path.clone(),
        cubin: ptx_target_dir(FALLBACK_ARCH).join("detkit_gpu.cubin"),
    }];
    for &arch in CUBIN_ARCHES {
        jobs.push(Job {
            arch,
            ptx: ptx80_path.clone(),
            cubin: ptx_target_dir(MODERN_ARCH).join(cubin_file(arch)),
        });
    }
    let t1 = Instant::now();
    let results = run_jobs(&ptxas, &version, &jobs)?;
    let ptxas_wall = t1.elapsed();
    let ptxas_cpu: Duration = results.iter().map(|r| r.elapsed).sum();

    for (job, r) in jobs.iter().zip(&results) {
        let dir = job.cubin.parent().expect("cubin in a target dir");
        let report_path = dir.join(format!("resources-{}.txt", job.arch));
        fs::write(&report_path, &r.report)
            .with_context(|| format!("writing {}", report_path.display()))?;
        if job.arch == FALLBACK_ARCH || job.arch == "sm_90" {
            print!("{}", r.report);
        } else {
            for w in r.report.lines().filter(|l| l.starts_with("warning:")) {
                println!("{}: {w}", job.arch);
            }
        }
        println!(
            "{} from {}: {:.1} s, report in {}",
            job.arch,
            rel(&job.ptx),
            r.elapsed.as_secs_f64(),
            rel(&report_path)
        );
    }

    let mut files: Vec<(String, Vec<u8>)> = vec![
        (ptx_file(FALLBACK_ARCH), ptx70.into_bytes()),
        (ptx_file(MODERN_ARCH), ptx80.into_bytes()),
    ];
    for job in jobs.iter().filter(|j| j.arch != FALLBACK_ARCH) {
        let bytes =
            fs::read(&job.cubin).with_context(|| format!("reading {}", job.cubin.display()))?;
        files.push((cubin_file(job.arch), bytes));
    }
    let stale = sync_files(&files, check)?;
    let total: usize = files.iter().map(|(_, b)| b.len()).sum();
    println!(
        "images: {} files, {:.1} MiB in {IMAGE_DIR} (the host embeds them zlib-compressed); \
         PTX builds {:.0} s, ptxas {:.0} s wall ({:.0} s summed over its jobs)",
        files.len(),
        total as f64 / (1024.0 * 1024.0),
        ptx_time.as_secs_f64(),
        ptxas_wall.as_secs_f64(),
        ptxas_cpu.as_secs_f64()
    );
    if check {
        ensure!(
            stale.is_empty(),
            "stale kernel images in {IMAGE_DIR} (they differ from what the current crates/gpu \
             sources and ptxas {PTXAS_RELEASE} produce): {}\nrun `cargo xtask build-ptx` and \
             commit the result",
            stale.join(", ")
        );
        println!("every image in {IMAGE_DIR} is up to date");
    }
    let root = project_root().join(IMAGE_DIR);
    Ok(vec![
        root.join(ptx_file(FALLBACK_ARCH)),
        root.join(ptx_file(MODERN_ARCH)),
    ])
}

/// Runs the ptxas jobs, as many at once as there are CPUs.
fn run_jobs(ptxas: &Path, version: &str, jobs: &[Job]) -> Result<Vec<Assembled>> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<Assembled>>>> =
        jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..workers.min(jobs.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let r = assemble(ptxas, version, job);
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| bail!("a ptxas job did not run"))
        })
        .collect()
}

fn assemble(ptxas: &Path, version: &str, job: &Job) -> Result<Assembled> {
    let t = Instant::now();
    let out = Command::new(ptxas)
        .arg(format!("-arch={}", job.arch))
        .arg("-v")
        .arg(&job.ptx)
        .arg("-o")
        .arg(&job.cubin)
        .output()
        .with_context(|| format!("failed to run ptxas ({})", ptxas.display()))?;
    let elapsed = t.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success(),
        "ptxas -arch={} rejected {} ({}):\n{stderr}{stdout}",
        job.arch,
        rel(&job.ptx),
        out.status
    );
    let mut report = format_ptxas_report(job.arch, ptxas, version, &format!("{stdout}\n{stderr}"));
    // E.g. a `.minnctapersm` above what the architecture holds (sm_86/sm_89/sm_120 run 1,536
    // threads per SM, sm_80/sm_90 2,048): ptxas ignores the bound there.
    for w in stderr.lines().filter(|l| l.contains("warning")) {
        report.push_str(&format!("warning: {}\n", w.trim()));
    }
    Ok(Assembled { report, elapsed })
}

/// Compares each `(file name, bytes)` with its committed copy; writes the differing ones
/// unless `check`. Returns the names of the stale (or missing) files.
fn sync_files(files: &[(String, Vec<u8>)], check: bool) -> Result<Vec<String>> {
    let dir = project_root().join(IMAGE_DIR);
    fs::create_dir_all(&dir).with_context(|| format!("creating {IMAGE_DIR}"))?;
    let mut stale = Vec::new();
    for (name, bytes) in files {
        let path = dir.join(name);
        let committed = match fs::read(&path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if committed.as_deref() == Some(bytes.as_slice()) {
            println!("{IMAGE_DIR}/{name}: up to date ({} bytes)", bytes.len());
            continue;
        }
        stale.push(name.clone());
        if check {
            println!(
                "{IMAGE_DIR}/{name}: STALE ({})",
                if committed.is_some() {
                    "differs from the build"
                } else {
                    "missing"
                }
            );
        } else {
            fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
            println!("{IMAGE_DIR}/{name}: UPDATED (commit it)");
        }
    }
    // A leftover image (an architecture dropped from CUBIN_ARCHES) would still be embedded.
    let known: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for entry in fs::read_dir(&dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let image = name.ends_with(".ptx") || name.ends_with(".cubin");
        if image && !known.contains(&name.as_str()) {
            stale.push(name.clone());
            if check {
                println!("{IMAGE_DIR}/{name}: STALE (no longer built)");
            } else {
                fs::remove_file(dir.join(&name))?;
                println!("{IMAGE_DIR}/{name}: REMOVED (no longer built; commit it)");
            }
        }
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(ptx_file("sm_70"), "detkit.ptx");
        assert_eq!(ptx_file("sm_80"), "detkit-sm_80.ptx");
        assert_eq!(cubin_file("sm_120"), "detkit-sm_120.cubin");
        assert!(CUBIN_ARCHES.contains(&MODERN_ARCH));
    }
}
