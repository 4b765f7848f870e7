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
//! `cpu.rs` (the oracle), `io.rs` (file formats), `gen.rs` (generators); a family has the
//! ones that apply. Where it pays, `par.rs` is the CPU backend's fast path (every core,
//! equal to the oracle bit for bit; threads: [`Backend::with_threads`]). The families: [`scan`], [`compact`],
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
    /// The CPU threads of this backend (`None`: rayon's global pool, `RAYON_NUM_THREADS`
    /// or every core); see [`Backend::with_threads`].
    threads: Option<std::sync::Arc<rayon::ThreadPool>>,
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
                threads: None,
            },
        }
    }

    /// The CPU references.
    pub fn cpu() -> Self {
        Self {
            gpu: None,
            description: "backend: cpu (requested)".into(),
            threads: None,
        }
    }

    /// The CPU backend on `threads` threads of its own (see [`Backend::with_threads`]).
    pub fn cpu_with_threads(threads: usize) -> Result<Self> {
        Self::cpu().with_threads(threads)
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
            threads: None,
        })
    }

    /// This backend with the CPU backend's work (the fast paths of `<family>/par.rs`, and the
    /// streamed PET chain's reading) on a pool of `threads` threads of its own; `0` means
    /// the caller's pool (rayon's global pool unless called inside another: `RAYON_NUM_THREADS`
    /// when set, else one thread per core), the default. The host-side loops of the CUDA
    /// backend run on the caller's pool. Results never depend on the thread count.
    pub fn with_threads(mut self, threads: usize) -> Result<Self> {
        self.threads = if threads == 0 {
            None
        } else {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("detkit-cpu-{i}"))
                .build()
                .map_err(|e| error::invalid("threads", e.to_string()))?;
            Some(std::sync::Arc::new(pool))
        };
        Ok(self)
    }

    /// The number of CPU threads the backend's CPU work runs on.
    pub fn threads(&self) -> usize {
        self.threads
            .as_ref()
            .map_or_else(rayon::current_num_threads, |p| p.current_num_threads())
    }

    /// Runs `f` on the backend's CPU threads (its pool, or the caller's current pool).
    pub(crate) fn on_cpu<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.threads {
            Some(p) => p.install(f),
            None => f(),
        }
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
