//! # detkit
//!
//! Reconstruction kernels for particle and medical-imaging detectors: Rust kernels compiled
//! to PTX (crate `detkit-gpu`), launched on NVIDIA GPUs through `cudarc`, each with a CPU
//! reference ("oracle") that is also the CPU backend.
//!
//! [`Backend`] is the entry point. [`Backend::auto`] picks CUDA when a driver and a device
//! are present and the CPU otherwise, and says which it picked and why:
//!
//! ```
//! use detkit::{Backend, ScanKind};
//!
//! let backend = Backend::auto();
//! println!("{}", backend.description());
//! let sums = backend.scan_u32(&[3, 1, 4, 1, 5], ScanKind::Exclusive).unwrap();
//! assert_eq!(sums, [0, 3, 4, 8, 9]);
//! let kept = backend.select_in_range_u32(&[5, 2, 8, 1, 9], 3, 9).unwrap();
//! assert_eq!(kept, [5, 8]);
//! let h = backend.histogram(&[0, 3, 3, 7, 1], 4).unwrap();
//! assert_eq!(h.counts, [1, 1, 0, 2]);
//! assert_eq!(h.first_out_of_range, Some(3));
//! ```
//!
//! Device-resident work (buffers that stay on the GPU between kernels) goes through
//! [`GpuContext`], available as [`Backend::gpu`].
//!
//! Every algorithm family is one folder with the same five names: `<family>/mod.rs` (public
//! types, validation, the [`Backend`] methods), `cuda.rs` (launchers on [`GpuContext`]),
//! `cpu.rs` (the oracle, also the CPU backend), `io.rs` (file formats), `gen.rs`
//! (generators); a family has the ones that apply. The families: [`scan`], [`compact`],
//! [`histogram`], [`bucket`], [`clustering`], [`pet`], [`seeding`], [`sort`]. Each is mirrored by the
//! module of the same name in `detkit-gpu`. [`cuda`] (the context and the launch helper),
//! [`rng`], [`csvio`] and [`error`] are shared and depend on no family.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod bucket;
pub mod clustering;
pub mod compact;
pub mod csvio;
pub mod cuda;
pub mod error;
pub mod histogram;
pub mod mem;
pub mod pet;
pub mod pool;
pub mod ptx;
pub mod rng;
pub mod scan;
pub mod seeding;
pub mod sort;

pub use bucket::{BlockBuckets, BucketOrder, Buckets};
pub use cuda::{driver_present, DeviceBuffer, GpuContext};
pub use error::{Error, Result};
pub use histogram::Histogram;
pub use scan::ScanKind;
pub use sort::SortOptions;

/// Which implementation runs the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// The CPU references.
    Cpu,
    /// The PTX kernels on a CUDA device.
    Cuda,
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        })
    }
}

/// The backend every detkit operation runs on: the same public API on CPU and CUDA.
#[derive(Debug)]
pub struct Backend {
    gpu: Option<GpuContext>,
    description: String,
}

impl Backend {
    /// CUDA on device 0 when a driver and a device are present, else the CPU. Never fails;
    /// [`Backend::description`] says which was picked and why.
    pub fn auto() -> Self {
        match Self::cuda(0) {
            Ok(b) => b,
            Err(e) => Self {
                gpu: None,
                description: format!("backend: cpu (CUDA not used: {e})"),
            },
        }
    }

    /// The CPU references.
    pub fn cpu() -> Self {
        Self {
            gpu: None,
            description: "backend: cpu (requested)".into(),
        }
    }

    /// CUDA on device `ordinal`, or an error saying why not.
    pub fn cuda(ordinal: usize) -> Result<Self> {
        let gpu = GpuContext::new(ordinal)?;
        let description = format!(
            "backend: cuda (device {ordinal}: {}, {} SMs)",
            gpu.device_name(),
            gpu.sm_count()
        );
        Ok(Self {
            gpu: Some(gpu),
            description,
        })
    }

    /// Which implementation runs.
    pub fn kind(&self) -> BackendKind {
        if self.gpu.is_some() {
            BackendKind::Cuda
        } else {
            BackendKind::Cpu
        }
    }

    /// One line saying which backend was picked and why.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The CUDA context, when the backend is CUDA.
    pub fn gpu(&self) -> Option<&GpuContext> {
        self.gpu.as_ref()
    }
}

/// The README's embedding example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
