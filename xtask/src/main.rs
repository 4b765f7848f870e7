//! detkit's build tasks, in matklad's `cargo xtask` style: one binary, subcommands parsed
//! by hand, no dependencies beyond `anyhow` (and `detkit-gpu` for the kernel list).
//!
//! Run `cargo xtask help` for the list of tasks.

use std::collections::BTreeSet;
use std::env;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Context, Result};

mod images;

const USAGE: &str = "\
usage: cargo xtask <task> [options]

tasks:
  build-ptx [--check]
      Build every kernel image the host embeds into crates/host/ptx/: the kernels
      (crates/gpu) as PTX for sm_70 (detkit.ptx, the JIT fallback) and for sm_80
      (detkit-sm_80.ptx), and that sm_80 PTX assembled by ptxas into cubins for
      sm_80, sm_86, sm_89, sm_90, sm_100 and sm_120 (detkit-sm_XX.cubin). Checks
      that each PTX's `.entry` kernels are exactly detkit_gpu::ALL_KERNELS and that
      no kernel can reach a panic; prints ptxas' resource reports for sm_70 and
      sm_90 (all are written to target/ptx-<arch>/resources-<arch>.txt).
      With --check nothing is written and the task fails if a committed image is
      stale. Needs the pinned ptxas (scripts/setup.sh).

  build-ptx --arch sm_70|sm_80|sm_90 [--require-ptxas]
      Build one PTX in target/ptx-<arch>/ (checked as above) and print its ptxas
      resource report; nothing in crates/ is written. Without ptxas the report is
      skipped (an error with --require-ptxas).

      ptxas is $PTXAS, else the pinned one scripts/setup.sh puts in
      .tools/ptxas-venv/, else `ptxas` on PATH.

  gpu-bundle [DIR]
      Refresh the embedded kernel images (as build-ptx), build the CLI, the
      benchmarks (every `bench-*` binary, `bench-cpu` included: the CPU backend on
      the host's cores) and the GPU tests in release mode, and gather them with the
      CUB baseline and a run.sh into DIR (default: gpu-bundle/), a folder to run on a
      GPU host that has no Rust: `./run.sh` runs the GPU tests, the benchmarks
      against CUB, the tests under compute-sanitizer, the cold start and the demo, on
      each kernel image of IMAGES (env: OUT_DIR, CUDA_ARCH, IMAGES, SKIP_BENCH,
      SKIP_SANITIZER, SANITIZER_ISOLATE, SKIP_COLD_START; see run.sh).

  help
      Print this text.
";

fn main() {
    if let Err(e) = try_main() {
        // The cause chain, without the backtrace `{:?}` adds under RUST_BACKTRACE.
        eprintln!("error: {e}");
        for cause in e.chain().skip(1) {
            eprintln!("  caused by: {cause}");
        }
        std::process::exit(1);
    }
}

fn try_main() -> Result<()> {
    let mut args = env::args().skip(1);
    let task = args.next();
    let rest: Vec<String> = args.collect();
    match task.as_deref() {
        None | Some("help" | "-h" | "--help") => {
            print!("{USAGE}");
            Ok(())
        }
        Some("build-ptx") => {
            let opts = PtxOptions::parse(&rest)?;
            match &opts.arch {
                None => images::build_images(opts.check).map(|_| ()),
                Some(arch) => build_single(arch, opts.require_ptxas),
            }
        }
        Some("gpu-bundle") => {
            let dir = match rest.as_slice() {
                [] => project_root().join("gpu-bundle"),
                [d] if !d.starts_with('-') => absolute(Path::new(d))?,
                _ => bail!("usage: cargo xtask gpu-bundle [DIR]"),
            };
            gpu_bundle(&dir)
        }
        Some(other) => bail!("unknown task `{other}`\n\n{USAGE}"),
    }
}

/// The workspace root: xtask lives one level below it.
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent directory")
        .to_path_buf()
}

fn absolute(p: &Path) -> Result<PathBuf> {
    Ok(if p.is_absolute() {
        p.to_path_buf()
    } else {
        env::current_dir()?.join(p)
    })
}

/// The cargo that runs us (so the pinned toolchain is used), else `cargo`.
fn cargo() -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(project_root());
    cmd
}

/// Runs `cmd`, inheriting stdio; fails on a non-zero exit.
fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("failed to start {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed: {status}");
    Ok(())
}

/// `path` relative to the project root, for messages.
pub(crate) fn rel(path: &Path) -> String {
    let root = project_root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

// ---------------------------------------------------------------------------------------
// build-ptx
// ---------------------------------------------------------------------------------------

/// The architectures `build-ptx --arch` accepts.
const PTX_ARCHES: &[&str] = &["sm_70", "sm_80", "sm_90"];

/// The PTX ISA version each architecture is built with: 7.0 for the sm_70 fallback (any
/// driver since CUDA 11.0 JIT-compiles it); 7.8 (CUDA 11.8 drivers) for the sm_80+ build,
/// whose PTX is only the fallback of the cubins built from it, and for sm_90.
fn ptx_isa_feature(arch: &str) -> &'static str {
    match arch {
        "sm_70" => "+ptx70",
        _ => "+ptx78",
    }
}

/// The one place the PTX build is spelled out: the command that compiles `detkit-gpu`
/// for `arch` into its own target directory (`target/ptx-<arch>`), so that it never
/// contends with the host build for the target-dir lock nor changes its flags.
/// Returns the command and the path of the PTX it produces.
fn ptx_build_command(arch: &str) -> (Command, PathBuf) {
    let target_dir = ptx_target_dir(arch);
    let target_cpu = format!("target-cpu={arch}");
    let target_feature = format!("target-feature={}", ptx_isa_feature(arch));
    let mut cmd = cargo();
    cmd.args([
        "rustc",
        "-p",
        "detkit-gpu",
        "--release",
        "--target",
        "nvptx64-nvidia-cuda",
        "-Zbuild-std=core",
        "--crate-type",
        "cdylib",
        "--target-dir",
    ])
    .arg(&target_dir)
    .args([
        "--",
        "-C",
        &target_cpu,
        "-C",
        &target_feature,
        "-C",
        "llvm-args=-unroll-threshold=1000",
        // A warning in the kernel crate fails the build (CI runs this).
        "-D",
        "warnings",
    ])
    // `core` and `compiler_builtins` (built by -Zbuild-std) need the same target-cpu and
    // PTX version, or rustc refuses to link them ("mixing `-Ctarget-cpu` will cause an ABI
    // mismatch") for any arch but the target's default (sm_70). The flags after `--` above
    // only reach detkit-gpu. This replaces any RUSTFLAGS for this build only.
    .env(
        "CARGO_ENCODED_RUSTFLAGS",
        format!("-C{target_cpu}\x1f-C{target_feature}"),
    )
    .env_remove("RUSTFLAGS")
    // Debug info in PTX is noise (and `debug = 1` in the release profile is for the host).
    .env("CARGO_PROFILE_RELEASE_DEBUG", "0");
    let ptx = target_dir.join("nvptx64-nvidia-cuda/release/detkit_gpu.ptx");
    (cmd, ptx)
}

pub(crate) fn ptx_target_dir(arch: &str) -> PathBuf {
    project_root().join("target").join(format!("ptx-{arch}"))
}

struct PtxOptions {
    /// `None`: every embedded image; `Some`: one PTX, for its resource report.
    arch: Option<String>,
    check: bool,
    require_ptxas: bool,
}

impl PtxOptions {
    fn parse(args: &[String]) -> Result<Self> {
        let mut opts = PtxOptions {
            arch: None,
            check: false,
            require_ptxas: false,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--check" => opts.check = true,
                "--require-ptxas" => opts.require_ptxas = true,
                "--arch" => {
                    opts.arch = Some(
                        it.next()
                            .context("--arch needs a value (sm_70, sm_80 or sm_90)")?
                            .clone(),
                    )
                }
                _ => match a.strip_prefix("--arch=") {
                    Some(v) => opts.arch = Some(v.to_string()),
                    None => bail!(
                        "unknown build-ptx argument `{a}`\n\
                         usage: cargo xtask build-ptx [--check] | \
                         cargo xtask build-ptx --arch sm_70|sm_80|sm_90 [--require-ptxas]"
                    ),
                },
            }
        }
        if let Some(arch) = &opts.arch {
            ensure!(
                PTX_ARCHES.contains(&arch.as_str()),
                "unsupported --arch `{arch}`: expected one of {}",
                PTX_ARCHES.join(", ")
            );
            ensure!(
                !opts.check,
                "--check checks every embedded image: give it without --arch"
            );
        }
        Ok(opts)
    }
}

/// `build-ptx --arch`: builds and checks one PTX and prints its resource report.
fn build_single(arch: &str, require_ptxas: bool) -> Result<()> {
    let (ptx_path, _) = build_ptx_module(arch)?;
    resource_report(arch, &ptx_path, require_ptxas)?;
    println!(
        "{}/ left unchanged (`cargo xtask build-ptx` without --arch builds the embedded images)",
        images::IMAGE_DIR
    );
    Ok(())
}

/// Builds the PTX for `arch`, writes the launch bounds into it and checks its entries and
/// calls; returns its path and text.
pub(crate) fn build_ptx_module(arch: &str) -> Result<(PathBuf, String)> {
    let (mut cmd, ptx_path) = ptx_build_command(arch);
    eprintln!("building PTX for {arch} in {}", rel(&ptx_target_dir(arch)));
    run(&mut cmd).context(
        "building the PTX failed (it needs the pinned nightly with rust-src; \
         see rust-toolchain.toml)",
    )?;
    let raw = fs::read_to_string(&ptx_path)
        .with_context(|| format!("cargo succeeded but {} is missing", ptx_path.display()))?;
    let ptx = apply_launch_bounds(&raw)?;
    if ptx != raw {
        fs::write(&ptx_path, &ptx).with_context(|| format!("writing {}", ptx_path.display()))?;
    }
    println!(
        "built {} ({} lines, {} bytes)",
        rel(&ptx_path),
        ptx.lines().count(),
        ptx.len()
    );

    check_entries(&ptx)?;
    check_panics_and_locals(&ptx)?;
    Ok((ptx_path, ptx))
}

/// Writes `detkit_gpu::LAUNCH_BOUNDS` into the PTX: `.maxntid T, 1, 1` and `.minnctapersm B`
/// between the parameter list and the body of each listed kernel (rustc has no
/// `__launch_bounds__`). Idempotent: a kernel that already has `.maxntid` is left as it is.
fn apply_launch_bounds(ptx: &str) -> Result<String> {
    let mut out = String::with_capacity(ptx.len() + 64 * detkit_gpu::LAUNCH_BOUNDS.len());
    let mut pending: Option<(u32, u32)> = None;
    let mut seen = BTreeSet::new();
    for line in ptx.split_inclusive('\n') {
        let code = strip_comment(line);
        if let Some((_, after)) = code.split_once(".entry ") {
            let name = after.split('(').next().unwrap_or("").trim();
            pending = detkit_gpu::LAUNCH_BOUNDS
                .iter()
                .find(|(k, ..)| *k == name)
                .map(|&(k, threads, blocks)| {
                    seen.insert(k);
                    (threads, blocks)
                });
        } else if code.trim_start().starts_with(".maxntid") {
            pending = None;
        }
        if code.trim() == "{" {
            if let Some((threads, blocks)) = pending.take() {
                let _ = write!(out, ".maxntid {threads}, 1, 1\n.minnctapersm {blocks}\n");
            }
        }
        out.push_str(line);
    }
    let missing: Vec<&str> = detkit_gpu::LAUNCH_BOUNDS
        .iter()
        .map(|(k, ..)| *k)
        .filter(|k| !seen.contains(k))
        .collect();
    ensure!(
        missing.is_empty(),
        "kernels in detkit_gpu::LAUNCH_BOUNDS but not in the PTX: {}",
        missing.join(", ")
    );
    Ok(out)
}

/// Checks that the PTX's `.entry` kernels are exactly `detkit_gpu::ALL_KERNELS`.
fn check_entries(ptx: &str) -> Result<()> {
    let entries = ptx_entries(ptx);
    println!("{} kernels (.entry):", entries.len());
    for e in &entries {
        println!("  {e}");
    }
    let expected: BTreeSet<&str> = detkit_gpu::ALL_KERNELS.iter().copied().collect();
    let found: BTreeSet<&str> = entries.iter().map(String::as_str).collect();
    let missing: Vec<&str> = expected.difference(&found).copied().collect();
    let extra: Vec<&str> = found.difference(&expected).copied().collect();
    let mut problems = String::new();
    if !missing.is_empty() {
        let _ = writeln!(
            problems,
            "kernels in detkit_gpu::ALL_KERNELS but not in the PTX: {}",
            missing.join(", ")
        );
    }
    if !extra.is_empty() {
        let _ = writeln!(
            problems,
            "kernels in the PTX but not in detkit_gpu::ALL_KERNELS: {}",
            extra.join(", ")
        );
    }
    ensure!(problems.is_empty(), "{}", problems.trim_end());
    println!("entries match detkit_gpu::ALL_KERNELS");
    Ok(())
}

/// The names of the `.entry NAME(` lines of a PTX module, in file order.
fn ptx_entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|line| {
            let line = strip_comment(line);
            let (_, after) = line.split_once(".entry ")?;
            let name = after.split('(').next()?.trim();
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

fn strip_comment(line: &str) -> &str {
    line.split_once("//").map_or(line, |(code, _)| code)
}

/// Fails on any `call` to a panic function (a panic path that survived optimisation);
/// warns on local memory (`.local`: a stack frame, usually from spilled arrays).
fn check_panics_and_locals(ptx: &str) -> Result<()> {
    let calls = ptx_calls(ptx);
    let is_panic = |f: &str| f.contains("panic") || f.contains("begin_unwind");
    let panics: BTreeSet<String> = calls
        .iter()
        .filter(|(_, callee)| is_panic(callee))
        .map(|(caller, callee)| format!("{caller} calls {callee}"))
        .collect();
    ensure!(
        panics.is_empty(),
        "the PTX calls panic functions (a kernel has a reachable panic path: an index \
         bounds check, unwrap, division or overflow check that did not optimise away):\n  {}",
        panics.into_iter().collect::<Vec<_>>().join("\n  ")
    );
    if !calls.is_empty() {
        let unique: BTreeSet<String> = calls
            .iter()
            .map(|(caller, callee)| format!("{caller} -> {callee}"))
            .collect();
        println!(
            "note: the PTX has {} call(s): {}",
            calls.len(),
            unique.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    let locals: Vec<(usize, &str)> = ptx
        .lines()
        .enumerate()
        .filter(|(_, l)| strip_comment(l).contains(".local"))
        .collect();
    if !locals.is_empty() {
        println!(
            "warning: the PTX uses local memory ({} line(s) with `.local`), e.g.:",
            locals.len()
        );
        for (i, l) in locals.iter().take(5) {
            println!("  line {}: {}", i + 1, l.trim());
        }
    }
    Ok(())
}

/// Every `call` instruction of the PTX as (calling function, callee). Handles
/// `call.uni (retval0), foo, (param0);` and the same split over several lines.
fn ptx_calls(ptx: &str) -> Vec<(String, String)> {
    let code: String = ptx
        .lines()
        .map(strip_comment)
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut caller = String::from("?");
    let mut pos = 0;
    // Walk the whitespace-separated words; a function header (`.entry`/`.func`) sets the
    // caller for the calls that follow it (forward declarations hold no calls).
    while pos < code.len() {
        let rest = &code[pos..];
        let word_start = rest
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(rest.len());
        let rest = &rest[word_start..];
        let word_len =
            match rest.find(|c: char| c.is_whitespace() || matches!(c, '(' | ';' | '{' | '}')) {
                Some(0) => rest.chars().next().map_or(0, char::len_utf8),
                Some(n) => n,
                None => rest.len(),
            };
        let word = &rest[..word_len];
        let after = &rest[word.len()..];
        if word == ".entry" || word == ".func" {
            if let Some(name) = symbol_after(after) {
                caller = name;
            }
        } else if word == "call" || word.starts_with("call.") {
            if let Some(callee) = symbol_after(after) {
                out.push((caller.clone(), callee));
            }
        }
        pos += word_start + word.len();
    }
    out
}

/// The symbol at the start of `s`, after whitespace and an optional return-value list
/// `(...)` and its comma: `(retval0), foo, (...)` and ` foo(` both give `foo`.
fn symbol_after(s: &str) -> Option<String> {
    let mut s = s.trim_start();
    if let Some(inner) = s.strip_prefix('(') {
        s = inner[inner.find(')')? + 1..].trim_start();
        s = s.strip_prefix(',').unwrap_or(s).trim_start();
    }
    let name: String = s
        .chars()
        .take_while(|&c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.'))
        .collect();
    (!name.is_empty()).then_some(name)
}

// --- ptxas resource report ---------------------------------------------------------------

/// ptxas: `$PTXAS`, else the pinned one scripts/setup.sh installs
/// (`.tools/ptxas-venv/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas`), else `ptxas`
/// on PATH.
pub(crate) fn find_ptxas() -> Result<Option<PathBuf>> {
    if let Some(p) = env::var_os("PTXAS").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        ensure!(
            p.is_file() || p.components().count() == 1,
            "PTXAS={} does not exist",
            p.display()
        );
        return Ok(Some(p));
    }
    let exe = format!("ptxas{}", env::consts::EXE_SUFFIX);
    let lib = project_root().join(".tools/ptxas-venv/lib");
    let mut pythons: Vec<PathBuf> = fs::read_dir(&lib)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    pythons.sort();
    if let Some(p) = pythons
        .iter()
        .rev()
        .map(|d| d.join("site-packages/nvidia/cuda_nvcc/bin").join(&exe))
        .find(|p| p.is_file())
    {
        return Ok(Some(p));
    }
    Ok(env::var_os("PATH").and_then(|path| {
        env::split_paths(&path)
            .map(|d| d.join(&exe))
            .find(|p| p.is_file())
    }))
}

/// The release line of `ptxas --version` ("Cuda compilation tools, release 12.9, V12.9.86").
pub(crate) fn ptxas_version(ptxas: &Path) -> String {
    Command::new(ptxas)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .rfind(|l| l.contains("release"))
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "version unknown".to_string())
}

#[derive(Default, Clone)]
struct KernelResources {
    registers: Option<u64>,
    smem: u64,
    stack: Option<u64>,
    spill_stores: Option<u64>,
    spill_loads: Option<u64>,
}

/// `build-ptx --arch`: assembles the PTX for `arch` with `ptxas -v` and prints the per-kernel
/// resource report (also written to `target/ptx-<arch>/resources.txt`).
fn resource_report(arch: &str, ptx_path: &Path, require_ptxas: bool) -> Result<()> {
    let report_path = ptx_target_dir(arch).join("resources.txt");
    let Some(ptxas) = find_ptxas()? else {
        ensure!(
            !require_ptxas,
            "ptxas not found (and --require-ptxas was given): set PTXAS or run \
             scripts/setup.sh"
        );
        let msg = "ptxas not found: set PTXAS or run scripts/setup.sh; \
                   skipping the resource report";
        println!("note: {msg}");
        fs::write(&report_path, format!("{msg}\n"))?;
        return Ok(());
    };
    let cubin = ptx_target_dir(arch).join("detkit_gpu.cubin");
    let mut cmd = Command::new(&ptxas);
    cmd.arg(format!("-arch={arch}"))
        .arg("-v")
        .arg(ptx_path)
        .arg("-o")
        .arg(&cubin);
    let out = cmd
        .output()
        .with_context(|| format!("failed to run ptxas ({})", ptxas.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success(),
        "ptxas rejected the PTX ({}):\n{}{}",
        out.status,
        stderr,
        stdout
    );
    let version = ptxas_version(&ptxas);
    let report = format_ptxas_report(arch, &ptxas, &version, &format!("{stdout}\n{stderr}"));
    print!("{report}");
    fs::write(&report_path, &report)
        .with_context(|| format!("writing {}", report_path.display()))?;
    println!("(written to {})", rel(&report_path));
    Ok(())
}

/// The per-kernel resource table of `ptxas -v` output (`text`), for `arch`.
pub(crate) fn format_ptxas_report(arch: &str, ptxas: &Path, version: &str, text: &str) -> String {
    let kernels = parse_ptxas_verbose(text);
    let mut order: Vec<&str> = detkit_gpu::ALL_KERNELS
        .iter()
        .copied()
        .filter(|k| kernels.iter().any(|(n, _)| n == k))
        .collect();
    for (n, _) in &kernels {
        if !order.contains(&n.as_str()) {
            order.push(n);
        }
    }

    let mut report = String::new();
    let _ = writeln!(
        report,
        "ptxas resource report for {arch} ({}; {})",
        ptxas.display(),
        version
    );
    let width = order.iter().map(|k| k.len()).max().unwrap_or(6).max(6);
    let _ = writeln!(
        report,
        "{:<width$}  {:>9}  {:>10}  {:>11}  {:>12}  {:>11}",
        "kernel", "registers", "smem bytes", "stack bytes", "spill stores", "spill loads"
    );
    let opt = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
    for k in &order {
        let r = &kernels.iter().find(|(n, _)| n == k).expect("listed").1;
        let _ = writeln!(
            report,
            "{:<width$}  {:>9}  {:>10}  {:>11}  {:>12}  {:>11}",
            k,
            opt(r.registers),
            r.smem,
            opt(r.stack),
            opt(r.spill_stores),
            opt(r.spill_loads)
        );
    }
    let _ = writeln!(
        report,
        "(smem is static shared memory only; the dynamic shared memory each kernel is \
         launched with is set by the host and is not in this report)"
    );
    let spilling: Vec<&str> = order
        .iter()
        .copied()
        .filter(|k| {
            let r = &kernels.iter().find(|(n, _)| n == k).expect("listed").1;
            r.spill_stores.unwrap_or(0) + r.spill_loads.unwrap_or(0) + r.stack.unwrap_or(0) > 0
        })
        .collect();
    if !spilling.is_empty() {
        let _ = writeln!(
            report,
            "warning: stack frame or register spills in: {}",
            spilling.join(", ")
        );
    }
    let unreported: Vec<&str> = detkit_gpu::ALL_KERNELS
        .iter()
        .copied()
        .filter(|k| !order.contains(k))
        .collect();
    if !unreported.is_empty() {
        let _ = writeln!(
            report,
            "warning: ptxas reported nothing for: {}",
            unreported.join(", ")
        );
    }
    report
}

/// Parses `ptxas -v` output into per-entry resources, in the order ptxas reports them.
fn parse_ptxas_verbose(text: &str) -> Vec<(String, KernelResources)> {
    let mut kernels: Vec<(String, KernelResources)> = Vec::new();
    // The entry the following lines describe; `None` inside a non-entry function.
    let mut current: Option<usize> = None;
    let quoted = |s: &str| -> Option<String> {
        let start = s.find('\'')? + 1;
        let end = start + s[start..].find('\'')?;
        Some(s[start..end].to_string())
    };
    for line in text.lines() {
        let body = line
            .split_once("info    :")
            .or_else(|| line.split_once("info :"))
            .map_or(line, |(_, b)| b)
            .trim();
        if let Some(rest) = body.strip_prefix("Compiling entry function") {
            if let Some(name) = quoted(rest) {
                current = Some(entry_index(&mut kernels, &name));
            }
        } else if body.starts_with("Compiling function") {
            current = None;
        } else if let Some(name) = body.strip_prefix("Function properties for ") {
            let name = name.trim();
            current = kernels.iter().position(|(n, _)| n == name);
        } else if let Some(i) = current {
            let r = &mut kernels[i].1;
            for part in body.split(',') {
                let part = part.trim();
                let part = part
                    .strip_prefix("Used ")
                    .or_else(|| part.strip_prefix("used "))
                    .unwrap_or(part);
                let mut words = part.split_whitespace();
                let Some(Ok(num)) = words.next().map(str::parse::<u64>) else {
                    continue;
                };
                match (words.next(), words.next(), words.next()) {
                    (Some("registers"), ..) => r.registers = Some(num),
                    (Some("bytes"), Some("stack"), _) => r.stack = Some(num),
                    (Some("bytes"), Some("spill"), Some("stores")) => r.spill_stores = Some(num),
                    (Some("bytes"), Some("spill"), Some("loads")) => r.spill_loads = Some(num),
                    (Some("bytes"), Some("smem"), _) => r.smem += num,
                    _ => {}
                }
            }
        }
    }
    kernels
}

fn entry_index(kernels: &mut Vec<(String, KernelResources)>, name: &str) -> usize {
    if let Some(i) = kernels.iter().position(|(n, _)| n == name) {
        return i;
    }
    kernels.push((name.to_string(), KernelResources::default()));
    kernels.len() - 1
}

// ---------------------------------------------------------------------------------------
// gpu-bundle
// ---------------------------------------------------------------------------------------

fn gpu_bundle(dir: &Path) -> Result<()> {
    // 1. Refresh the embedded images so the binaries carry the current kernels.
    let ptx_files = images::build_images(false)?;

    // 2. Release binaries: the CLI, the benchmark and the GPU test executable.
    eprintln!("building release binaries");
    let bins = cargo_executables(&[
        "build",
        "--release",
        "-p",
        "detkit-cli",
        "-p",
        "detkit-tests",
        "--bins",
    ])?;
    let tests = cargo_executables(&[
        "test",
        "--release",
        "-p",
        "detkit-tests",
        "--test",
        "gpu",
        "--no-run",
    ])?;
    let find = |list: &[(String, PathBuf)], name: &str| -> Result<PathBuf> {
        list.iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
            .with_context(|| format!("cargo reported no executable for target `{name}`"))
    };
    let detkit = find(&bins, "detkit")?;
    let bench = find(&bins, "detkit-bench")?;
    let gpu_tests = find(&tests, "gpu")?;

    // 3. Assemble the folder.
    prepare_bundle_dir(dir)?;
    let root = project_root();
    for sub in ["bin", "bench", "ptx"] {
        fs::create_dir_all(dir.join(sub))?;
    }
    let copies: [(&Path, PathBuf); 10] = [
        (&detkit, dir.join("bin/detkit")),
        (&bench, dir.join("bin/detkit-bench")),
        (&gpu_tests, dir.join("bin/gpu-tests")),
        (
            &root.join("bench/cub_baseline.cu"),
            dir.join("bench/cub_baseline.cu"),
        ),
        (&root.join("bench/compare.py"), dir.join("bench/compare.py")),
        (
            &root.join("bench/profile_sort.sh"),
            dir.join("bench/profile_sort.sh"),
        ),
        (
            &root.join("bench/final_sort_check.sh"),
            dir.join("bench/final_sort_check.sh"),
        ),
        (
            &root.join("bench/cold_start.sh"),
            dir.join("bench/cold_start.sh"),
        ),
        (
            &root.join("bench/sanitize_all.sh"),
            dir.join("bench/sanitize_all.sh"),
        ),
        (
            &root.join("bench/racecheck_probe.cu"),
            dir.join("bench/racecheck_probe.cu"),
        ),
    ];
    let copies: Vec<(&Path, PathBuf)> = copies
        .into_iter()
        .chain(ptx_files.iter().map(|p| {
            let name = p.file_name().expect("a PTX file name");
            (p.as_path(), dir.join("ptx").join(name))
        }))
        .collect();
    for (from, to) in &copies {
        fs::copy(from, to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    }
    for exe in [
        "bin/detkit",
        "bin/detkit-bench",
        "bin/gpu-tests",
        "bench/profile_sort.sh",
        "bench/final_sort_check.sh",
        "bench/cold_start.sh",
        "bench/sanitize_all.sh",
    ] {
        set_mode(&dir.join(exe), 0o755)?;
    }
    // Per-family benchmarks: every `bench-*` binary of detkit-tests; run.sh runs each.
    for (name, path) in bins.iter().filter(|(n, _)| n.starts_with("bench-")) {
        let to = dir.join("bin").join(name);
        fs::copy(path, &to)
            .with_context(|| format!("copying {} to {}", path.display(), to.display()))?;
        set_mode(&to, 0o755)?;
        println!("  bin/{name}");
    }
    strip_binaries(&dir.join("bin"))?;
    let run_sh = dir.join("run.sh");
    fs::write(&run_sh, RUN_SH)?;
    set_mode(&run_sh, 0o755)?;
    fs::write(dir.join("BUNDLE_INFO"), bundle_info())?;

    println!("bundle ready: {}", dir.display());
    for (_, to) in &copies {
        println!("  {}", to.strip_prefix(dir).unwrap_or(to).display());
    }
    println!("  run.sh\n  BUNDLE_INFO");
    println!(
        "total size: {:.1} MiB; on the GPU host run `./run.sh` \
         (env: OUT_DIR, CUDA_ARCH, SKIP_BENCH=1, SKIP_SANITIZER=1)",
        dir_size(dir)? as f64 / (1024.0 * 1024.0)
    );
    Ok(())
}

/// Runs a cargo build with `--message-format=json` (human diagnostics still go to the
/// terminal) and returns (target name, executable) for every executable it reports.
fn cargo_executables(args: &[&str]) -> Result<Vec<(String, PathBuf)>> {
    let mut cmd = cargo();
    cmd.args(args)
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let out = cmd
        .output()
        .with_context(|| format!("failed to start {cmd:?}"))?;
    ensure!(out.status.success(), "{cmd:?} failed: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|line| executable_of(line).transpose())
        .collect()
}

/// One line of cargo's JSON messages: `Some((target name, executable))` for a
/// `compiler-artifact` with an executable, `None` for anything else (libraries have
/// `"executable": null`).
fn executable_of(line: &str) -> Result<Option<(String, PathBuf)>> {
    #[derive(serde::Deserialize)]
    struct Target {
        name: String,
    }
    #[derive(serde::Deserialize)]
    struct Message {
        reason: String,
        target: Option<Target>,
        executable: Option<PathBuf>,
    }
    if !line.starts_with('{') {
        return Ok(None);
    }
    let m: Message = serde_json::from_str(line)
        .with_context(|| format!("cargo printed a message that is not JSON: {line}"))?;
    Ok(match (m.reason.as_str(), m.target, m.executable) {
        ("compiler-artifact", Some(t), Some(exe)) => Some((t.name, exe)),
        _ => None,
    })
}

/// Strips the debug info from every binary in `bin` (about 110 MiB with it, 10 without: the
/// bundle must fit a 64 MiB transfer). Without a `strip` on PATH the bundle stays as built.
fn strip_binaries(bin: &Path) -> Result<()> {
    if Command::new("strip").arg("--version").output().is_err() {
        eprintln!("warning: no `strip` on PATH: the bundle keeps its debug info");
        return Ok(());
    }
    for entry in fs::read_dir(bin)? {
        let path = entry?.path();
        run(Command::new("strip").arg(&path))?;
    }
    Ok(())
}

/// Empties `dir` if it is a previous bundle; refuses to touch any other non-empty folder.
fn prepare_bundle_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        let empty = fs::read_dir(dir)?.next().is_none();
        ensure!(
            empty || dir.join("run.sh").is_file(),
            "{} exists and does not look like a gpu bundle (no run.sh); refusing to \
             overwrite it",
            dir.display()
        );
        fs::remove_dir_all(dir).with_context(|| format!("removing old {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> Result<()> {
    Ok(())
}

fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// What the bundle was built from, for the run log.
fn bundle_info() -> String {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(project_root())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_string());
    let dirty = git(&["status", "--porcelain"]).map_or("unknown".to_string(), |s| {
        if s.is_empty() {
            "clean".to_string()
        } else {
            format!("{} changed file(s)", s.lines().count())
        }
    });
    let built = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "detkit gpu bundle\ncommit: {commit} (working tree: {dirty})\n\
         built: unix time {built}\nimages: PTX {} (ptx/detkit.ptx) and {} (ptx/detkit-{}.ptx), \
         cubins {}\n",
        images::FALLBACK_ARCH,
        images::MODERN_ARCH,
        images::MODERN_ARCH,
        images::CUBIN_ARCHES.join(" ")
    )
}

/// The bundle's entry point, run on the GPU host (bash, CUDA driver, nvcc,
/// compute-sanitizer and python3; no Rust).
const RUN_SH: &str = r#"#!/usr/bin/env bash
# detkit GPU bundle (generated by `cargo xtask gpu-bundle`).
#
# Runs the GPU tests, the benchmarks against CUB, the GPU tests under compute-sanitizer
# and the CLI demo; prints a PASS/FAIL summary and exits non-zero if any step failed.
# Environment:
#   OUT_DIR=DIR        where logs and results go (default: ./out)
#   CUDA_ARCH=sm_XX    arch for the CUB baseline build (default: sm_90)
#   SKIP_BENCH=1       skip the benchmarks
#   SKIP_SANITIZER=1   skip the compute-sanitizer runs
#   SKIP_CUB=1         skip the primitive benchmark and its CUB baseline (family benches still run)
#   GPU_TEST_FILTER=S  run only the GPU tests whose name contains S (also under the sanitizer)
#   BENCH_FILTER=S     run only the bin/bench-* benchmarks whose name contains S
#   IMAGES="auto ptx70" the kernel images to run everything on (DETKIT_IMAGE values): the
#                      default choice (a cubin for this card) and the forced sm_70 PTX; logs
#                      and CSVs of a non-default image carry its name (gpu-tests-ptx70.log)
#   SKIP_COLD_START=1  skip bench/cold_start.sh (first `detkit cluster`, JIT cache disabled)
#   SANITIZER_ISOLATE=0  run the sanitized tests in one process (default 1: `--isolate`, each
#                      test group in a fresh child process, all under one compute-sanitizer);
#                      the tests run in their sanitizer mode (`--sanitize`); one process per
#                      family, families in parallel: bench/sanitize_all.sh bin/gpu-tests DIR
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
HERE="$(pwd)"
OUT="${OUT_DIR:-$HERE/out}"
mkdir -p "$OUT" || exit 1
OUT="$(cd "$OUT" && pwd)"
CUDA_ARCH="${CUDA_ARCH:-sm_90}"

# The CUDA tools are often installed off PATH.
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
  [ -d "$d" ] && PATH="$PATH:$d"
done
export PATH
chmod +x bin/* 2>/dev/null || true

STEPS=()
RESULTS=()
record() { # record NAME STATUS
  STEPS+=("$1")
  if [ "$2" -eq 0 ]; then RESULTS+=("PASS"); else RESULTS+=("FAIL (exit $2)"); fi
}
skip() { # skip NAME WHY
  STEPS+=("$1")
  RESULTS+=("SKIP ($2)")
}
# record_gpu NAME STATUS LOG: like record, but a run that did not use the GPU (the test
# binary "skips" without a usable CUDA driver; the CLI falls back to its CPU backend)
# fails: this bundle exists to exercise the GPU.
record_gpu() {
  if [ "$2" -eq 0 ] && grep -qE '^skipped: no CUDA|^backend: cpu' "$3"; then
    STEPS+=("$1")
    RESULTS+=("FAIL (no GPU used: see $(basename "$3"))")
  else
    record "$1" "$2"
  fi
}
banner() { printf '\n==== %s ====\n' "$*"; }
IMAGES="${IMAGES:-auto ptx70}"
# suffix IMAGE: "" for the default choice, "-IMAGE" for a forced image (file names, steps).
suffix() { if [ "$1" = auto ]; then echo ""; else echo "-$1"; fi; }

main() {
  banner "detkit gpu bundle"
  date
  cat BUNDLE_INFO 2>/dev/null
  echo "out: $OUT"
  nvidia-smi -L || echo "nvidia-smi -L failed"
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true

  bin/detkit info 2>&1 | tee "$OUT/info.log"
  local image sfx
  for image in $IMAGES; do
    sfx="$(suffix "$image")"
    banner "GPU tests: DETKIT_IMAGE=$image bin/gpu-tests ${GPU_TEST_FILTER:-}"
    DETKIT_IMAGE="$image" bin/gpu-tests ${GPU_TEST_FILTER:-} 2>&1 | tee "$OUT/gpu-tests$sfx.log"
    record_gpu "gpu tests$sfx" "${PIPESTATUS[0]}" "$OUT/gpu-tests$sfx.log"
  done

  banner "CUB baseline: nvcc -arch=$CUDA_ARCH"
  local have_cub=0
  if [ "${SKIP_BENCH:-0}" = "1" ] || [ "${SKIP_CUB:-0}" = "1" ]; then
    skip "nvcc cub_baseline" "SKIP_BENCH or SKIP_CUB"
  elif command -v nvcc >/dev/null; then
    nvcc -O3 -std=c++17 -arch="$CUDA_ARCH" -o bench/cub_baseline bench/cub_baseline.cu 2>&1 \
      | tee "$OUT/nvcc.log"
    local st="${PIPESTATUS[0]}"
    record "nvcc cub_baseline" "$st"
    [ "$st" -eq 0 ] && have_cub=1
  else
    echo "nvcc not found (looked on PATH and in /usr/local/cuda/bin)"
    record "nvcc cub_baseline" 127
  fi

  if [ "${SKIP_BENCH:-0}" = "1" ] || [ "${SKIP_CUB:-0}" = "1" ]; then
    banner "primitive benchmarks: skipped (SKIP_BENCH or SKIP_CUB)"
    skip "bench detkit" "SKIP_BENCH or SKIP_CUB"
    skip "bench cub" "SKIP_BENCH or SKIP_CUB"
    skip "compare" "SKIP_BENCH or SKIP_CUB"
  else
    rm -f "$OUT"/detkit*.csv "$OUT/cub.csv"
    # compare.py compares the default image's run (else the first image's) with CUB.
    local st_detkit=1 st_image first=1 cmp_csv="$OUT/detkit.csv"
    for image in $IMAGES; do
      sfx="$(suffix "$image")"
      banner "benchmark: DETKIT_IMAGE=$image bin/detkit-bench"
      DETKIT_IMAGE="$image" bin/detkit-bench --csv "$OUT/detkit$sfx.csv" 2>&1 \
        | tee "$OUT/detkit-bench$sfx.log"
      st_image="${PIPESTATUS[0]}"
      record "bench detkit$sfx" "$st_image"
      if [ -z "$sfx" ] || [ "$first" -eq 1 ]; then
        st_detkit="$st_image"
        cmp_csv="$OUT/detkit$sfx.csv"
      fi
      first=0
    done

    banner "benchmark: bench/cub_baseline"
    local st_cub=1
    if [ "$have_cub" -eq 1 ]; then
      bench/cub_baseline 2> >(tee "$OUT/cub-baseline.stderr.log" >&2) | tee "$OUT/cub.csv"
      st_cub="${PIPESTATUS[0]}"
      if [ "$st_cub" -eq 0 ] && grep -q 'CHECK FAILED' "$OUT/cub.csv"; then st_cub=1; fi
      record "bench cub" "$st_cub"
    else
      skip "bench cub" "nvcc failed"
    fi

    banner "compare: bench/compare.py"
    if [ "$st_detkit" -eq 0 ] && [ "$st_cub" -eq 0 ]; then
      python3 bench/compare.py "$cmp_csv" "$OUT/cub.csv" --out "$OUT/compare.md" 2>&1 \
        | tee "$OUT/compare.log"
      record "compare" "${PIPESTATUS[0]}"
    else
      echo "skipped: a benchmark failed"
      skip "compare" "a benchmark failed"
    fi
  fi

  if [ "${SKIP_BENCH:-0}" != "1" ]; then
    local b
    for b in bin/bench-*; do
      [ -x "$b" ] || continue
      local name
      name="$(basename "$b")"
      if [ -n "${BENCH_FILTER:-}" ] && [[ "$name" != *"$BENCH_FILTER"* ]]; then continue; fi
      for image in $IMAGES; do
        sfx="$(suffix "$image")"
        banner "benchmark: DETKIT_IMAGE=$image $b"
        DETKIT_IMAGE="$image" "$b" --csv "$OUT/$name$sfx.csv" 2>&1 | tee "$OUT/$name$sfx.log"
        record "$name$sfx" "${PIPESTATUS[0]}"
      done
    done
  fi

  if [ "${SKIP_SANITIZER:-0}" = "1" ]; then
    banner "compute-sanitizer: skipped (SKIP_SANITIZER=1)"
    for tool in memcheck racecheck synccheck; do skip "sanitizer $tool" "SKIP_SANITIZER=1"; done
  elif ! command -v compute-sanitizer >/dev/null; then
    banner "compute-sanitizer: not found"
    for tool in memcheck racecheck synccheck; do record "sanitizer $tool" 127; done
  else
    for image in $IMAGES; do
      sfx="$(suffix "$image")"
      for tool in memcheck racecheck synccheck; do
        local log="$OUT/sanitizer-$tool$sfx.log"
        banner "DETKIT_IMAGE=$image compute-sanitizer --tool $tool (log: $log)"
        local isolate=""
        [ "${SANITIZER_ISOLATE:-1}" = "1" ] && isolate="--isolate"
        DETKIT_IMAGE="$image" compute-sanitizer --tool "$tool" --error-exitcode 1 \
          --target-processes all bin/gpu-tests --sanitize $isolate ${GPU_TEST_FILTER:-} > "$log" 2>&1
        local st=$?
        grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" || echo "(no summary line in the log)"
        if [ "$st" -ne 0 ]; then
          echo "--- last 40 lines of $log ---"
          tail -n 40 "$log"
        fi
        record_gpu "sanitizer $tool$sfx" "$st" "$log"
      done
    done
  fi

  if [ "${SKIP_COLD_START:-0}" = "1" ]; then
    skip "cold start" "SKIP_COLD_START=1"
  else
    banner "cold start: bench/cold_start.sh (CUDA_CACHE_DISABLE=1)"
    IMAGES="$IMAGES" bench/cold_start.sh "$OUT" 2>&1 | tee "$OUT/cold_start.log"
    record "cold start" "${PIPESTATUS[0]}"
  fi

  banner "demo: bin/detkit demo"
  bin/detkit demo 2>&1 | tee "$OUT/demo.log"
  record_gpu "detkit demo" "${PIPESTATUS[0]}" "$OUT/demo.log"

  banner "summary"
  local failed=0 i
  {
    for i in "${!STEPS[@]}"; do
      printf '  %-20s %s\n' "${STEPS[$i]}" "${RESULTS[$i]}"
      case "${RESULTS[$i]}" in FAIL*) failed=1 ;; esac
    done
    if [ "$failed" -ne 0 ]; then echo "RESULT: FAIL"; else echo "RESULT: PASS"; fi
  } > "$OUT/summary.txt"
  cat "$OUT/summary.txt"
  date
  return "$failed"
}

main 2>&1 | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_calls() {
        let ptx = "\
.func (.param .b32 func_retval0) helper(.param .b32 x)
.visible .entry k1(
\t.param .u64 k1_param_0
)
{
\tcall.uni (retval0), helper, (param0); // a call
\t{ // callseq 0, 0
\tcall.uni
\t_ZN4core9panicking5panic17h01E,
\t(
\tparam0
\t);
}
.visible .entry k2(.param .u64 p)
{
\tret;
}
";
        assert_eq!(ptx_entries(ptx), ["k1", "k2"]);
        let calls = ptx_calls(ptx);
        assert_eq!(
            calls,
            [
                ("k1".to_string(), "helper".to_string()),
                (
                    "k1".to_string(),
                    "_ZN4core9panicking5panic17h01E".to_string()
                ),
            ]
        );
        assert!(check_panics_and_locals(ptx).is_err());
        assert!(check_panics_and_locals("call.uni helper, (param0);").is_ok());
    }

    #[test]
    fn ptxas_report() {
        let text = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'scan_device_u32' for 'sm_70'
ptxas info    : Function properties for scan_device_u32
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 44 registers, used 1 barriers, 1024 bytes smem, 416 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compile time = 23.433 ms
ptxas info    : Function properties for some_device_fn
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Function properties for k2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers
";
        let k = parse_ptxas_verbose(text);
        assert_eq!(k.len(), 2);
        assert_eq!(k[0].0, "scan_device_u32");
        let r = &k[0].1;
        assert_eq!(
            (r.registers, r.smem, r.stack, r.spill_stores, r.spill_loads),
            (Some(44), 1024, Some(8), Some(4), Some(12))
        );
        assert_eq!(k[1].0, "k2");
        assert_eq!((k[1].1.registers, k[1].1.stack), (Some(10), Some(0)));
    }

    #[test]
    fn cargo_json() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#detkit-tests@0.1.0","target":{"kind":["test"],"crate_types":["bin"],"name":"gpu","src_path":"/w/tests/gpu/main.rs"},"executable":"/w/target/release/deps/gpu-0a\\b\"c","fresh":true}"#;
        assert_eq!(
            executable_of(line).unwrap(),
            Some((
                "gpu".to_string(),
                PathBuf::from(r#"/w/target/release/deps/gpu-0a\b"c"#)
            ))
        );
        let lib = r#"{"reason":"compiler-artifact","target":{"name":"detkit"},"executable":null}"#;
        assert_eq!(executable_of(lib).unwrap(), None);
        let done = r#"{"reason":"build-finished","success":true}"#;
        assert_eq!(executable_of(done).unwrap(), None);
        assert!(executable_of("{not json").is_err());
    }
}
