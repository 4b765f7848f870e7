//! GPU tests of the kernel image choice (issue 28): the image this process loaded is the one
//! `detkit::ptx::candidates` names for the device and `DETKIT_IMAGE`, and a fresh process
//! with the driver's JIT cache disabled loads a cubin, with no JIT (its load time is a
//! fraction of the forced PTX's, which the driver must compile).
//!
//! The load probe runs in a child process (this binary with `--load-probe`): the driver reads
//! `CUDA_CACHE_DISABLE` when it initialises, before any test could set it.

use std::process::Command;
use std::time::Duration;

use detkit::ptx::{self, ImageKind};
use detkit::GpuContext;

use crate::{e, Ctx, Test, R};

/// The image tests, run by `main` before the others.
pub(crate) const TESTS: &[Test] = &[("image_choice", test_choice), ("image_no_jit", test_no_jit)];

/// The argument that turns this binary into the load probe.
pub(crate) const PROBE_ARG: &str = "--load-probe";

/// A cubin loads in milliseconds; the sm_70 PTX takes seconds to compile. One second is the
/// cold-start budget of the whole `detkit cluster` command.
const CUBIN_LOAD_LIMIT: Duration = Duration::from_secs(1);

/// The probe: opens device 0, runs one kernel and prints `image=NAME kind=cubin|ptx
/// load_ms=X first_launch_ms=Y cc=M.N refused=K` (the first launch too, in case a driver
/// defers work from the load to it).
pub(crate) fn probe() -> i32 {
    match GpuContext::new(0) {
        Ok(g) => {
            let l = g.loaded_image();
            let t = std::time::Instant::now();
            let p = detkit_gpu::params::ParamsProbeParams {
                out: detkit_gpu::DevPtr::NULL,
                wide: 1,
                other: detkit_gpu::DevPtr::NULL,
                count: 2,
                signed: -3,
                real: 4.0,
                short: 5,
                byte: 6,
                _pad: 0,
            };
            if let Err(err) = g.params_probe(p) {
                println!("error=first launch: {err}");
                return 1;
            }
            let first = t.elapsed();
            println!(
                "image={} kind={} load_ms={:.3} first_launch_ms={:.3} cc={}.{} refused={}",
                l.image.name(),
                match l.image.kind() {
                    ImageKind::Cubin => "cubin",
                    ImageKind::Ptx => "ptx",
                },
                l.load_time.as_secs_f64() * 1e3,
                first.as_secs_f64() * 1e3,
                l.compute_capability.major,
                l.compute_capability.minor,
                l.refused.len()
            );
            0
        }
        Err(err) => {
            println!("error={err}");
            1
        }
    }
}

/// The image this process loaded is the first candidate for its device and `DETKIT_IMAGE`
/// (none refused by the driver), and its kernels run (the parameter probe).
fn test_choice(c: &Ctx) -> R {
    let g = c.gpu();
    let l = g.loaded_image();
    let forced = std::env::var(ptx::IMAGE_ENV).ok();
    let want = ptx::candidates(l.compute_capability, forced.as_deref()).map_err(e)?;
    let first = want.first().ok_or("no candidate image")?;
    if !l.refused.is_empty() {
        return Err(format!(
            "the driver refused {} before {} loaded",
            l.refused.join("; "),
            l.image
        ));
    }
    if l.image.file() != first.file() {
        return Err(format!(
            "loaded {}, expected {} (compute capability {}, {}={forced:?})",
            l.image.file(),
            first.file(),
            l.compute_capability,
            ptx::IMAGE_ENV
        ));
    }
    println!(
        "  image: {} ({}) loaded in {:.1} ms on compute capability {}",
        l.image,
        l.image.file(),
        l.load_time.as_secs_f64() * 1e3,
        l.compute_capability
    );
    crate::test_params_layout(c)
}

struct Probe {
    image: String,
    kind: String,
    /// Loading the image plus the first kernel launch.
    load: Duration,
}

fn run_probe(image: &str) -> Result<Probe, String> {
    let exe = std::env::current_exe().map_err(|err| format!("current_exe: {err}"))?;
    let out = Command::new(exe)
        .arg(PROBE_ARG)
        .env("CUDA_CACHE_DISABLE", "1")
        .env(ptx::IMAGE_ENV, image)
        .output()
        .map_err(|err| format!("starting the probe: {err}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "probe ({}={image}) failed: {}{}",
            ptx::IMAGE_ENV,
            text,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let field = |k: &str| -> Result<String, String> {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .map(str::to_string)
            .ok_or_else(|| format!("probe printed no `{k}=`: {text}"))
    };
    let ms =
        |k: &str| -> Result<f64, String> { field(k)?.parse().map_err(|err| format!("{k}: {err}")) };
    // The load and the first launch together: where a JIT would show.
    let load = ms("load_ms")? + ms("first_launch_ms")?;
    Ok(Probe {
        image: field("image")?,
        kind: field("kind")?,
        load: Duration::from_secs_f64(load / 1e3),
    })
}

/// With `CUDA_CACHE_DISABLE=1`, a fresh process loads the cubin of its device (when one is
/// embedded) within [`CUBIN_LOAD_LIMIT`], and the forced sm_70 PTX, which the driver must
/// compile, takes several times longer: the load time tells a JIT apart.
fn test_no_jit(c: &Ctx) -> R {
    if c.quick {
        println!(
            "  skipped under --quick (a JIT of the PTX takes seconds, more under a sanitizer)"
        );
        return Ok(());
    }
    let cc = c.gpu().loaded_image().compute_capability;
    let default = ptx::candidates(cc, None).map_err(e)?;
    let Some(cubin) = default.first().filter(|i| i.kind() == ImageKind::Cubin) else {
        println!("  no embedded cubin runs on compute capability {cc}: the PTX is JIT-compiled");
        return Ok(());
    };
    let auto = run_probe("auto")?;
    let ptx70 = run_probe("ptx70")?;
    println!(
        "  CUDA_CACHE_DISABLE=1, load + first launch: {} ({}) {:.1} ms; the sm_70 PTX ({}) {:.1} ms",
        auto.image,
        auto.kind,
        auto.load.as_secs_f64() * 1e3,
        ptx70.kind,
        ptx70.load.as_secs_f64() * 1e3
    );
    if auto.kind != "cubin" || auto.image != cubin.name() {
        return Err(format!(
            "a fresh process loaded {} ({}), expected the cubin {}",
            auto.image,
            auto.kind,
            cubin.name()
        ));
    }
    if auto.load > CUBIN_LOAD_LIMIT {
        return Err(format!(
            "loading the cubin took {:?} (> {CUBIN_LOAD_LIMIT:?}): a JIT?",
            auto.load
        ));
    }
    if ptx70.image != "ptx70" || ptx70.load < 3 * auto.load {
        return Err(format!(
            "the forced sm_70 PTX ({}) loaded in {:?}, not clearly slower than the cubin's \
             {:?}: the load time would not show a JIT",
            ptx70.image, ptx70.load, auto.load
        ));
    }
    Ok(())
}
