//! `detkit info`: the version, the embedded kernel images and, for each CUDA device, the
//! image it loads and how long loading took.

use anyhow::Result;
use clap::Args;
use detkit::ptx::{self, ImageKind};

use crate::ui::Ui;

/// Arguments of `detkit info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Only list the embedded images; open no device.
    #[arg(long)]
    pub no_device: bool,
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Prints the report on stdout; fails when a device cannot load the kernels.
pub fn run(_ui: &Ui, a: InfoArgs) -> Result<()> {
    println!("detkit {}", env!("CARGO_PKG_VERSION"));
    println!("kernel images embedded (zlib-compressed; built by `cargo xtask build-ptx`):");
    let mut total = 0;
    for img in ptx::images() {
        total += img.embedded_len();
        let what = match img.kind() {
            ImageKind::Cubin => format!("cubin {}", img.arch()),
            ImageKind::Ptx => format!("PTX {} (JIT at load)", img.arch()),
        };
        println!(
            "  {:<24} {:<20} {:>5.2} MiB ({:.2} MiB embedded)",
            what,
            img.file(),
            mib(img.len()),
            mib(img.embedded_len())
        );
    }
    println!("  total embedded: {:.2} MiB", mib(total));
    let forced = std::env::var(ptx::IMAGE_ENV).unwrap_or_default();
    println!(
        "choice: the cubin of the device's architecture, else a cubin of the same major and \
         lower minor, else the sm_80 PTX (compute capability >= 8.0), else the sm_70 PTX; \
         {}={} ({})",
        ptx::IMAGE_ENV,
        if forced.is_empty() {
            "<unset>"
        } else {
            &forced
        },
        if forced.is_empty() || forced == "auto" {
            "default choice"
        } else {
            "forced"
        }
    );
    if a.no_device {
        return Ok(());
    }
    if !detkit::driver_present() {
        println!("devices: none (no CUDA driver library on this machine)");
        return Ok(());
    }
    let n = match detkit::cuda::device_count() {
        Ok(n) => n,
        Err(e) => {
            println!("devices: none ({e})");
            return Ok(());
        }
    };
    println!("devices: {n}");
    let mut failed = 0;
    for d in 0..n {
        match detkit::GpuContext::new(d) {
            Ok(g) => {
                let l = g.loaded_image();
                println!(
                    "  {d}: {} (compute capability {}.{}, {} SMs): loaded {} ({}) in {:.1} ms",
                    g.device_name(),
                    l.compute_capability.major,
                    l.compute_capability.minor,
                    g.sm_count(),
                    l.image,
                    l.image.file(),
                    l.load_time.as_secs_f64() * 1e3
                );
                for r in &l.refused {
                    println!("     refused by the driver first: {r}");
                }
            }
            Err(e) => {
                failed += 1;
                println!("  {d}: cannot load the kernels: {e}");
            }
        }
    }
    anyhow::ensure!(
        failed == 0,
        "{failed} of {n} device(s) could not load the kernels"
    );
    Ok(())
}
