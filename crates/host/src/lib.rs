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
//! `cpu.rs` (the oracle), `io.rs` (file formats), `gen.rs` (generators), `door.rs` (the
//! workspace a [`Backend`] keeps for the family's host calls); a family has the ones that
//! apply. Where it pays, `par.rs` is the CPU backend's fast path (every core, equal to the
//! oracle bit for bit; threads: [`Backend::with_threads`]). The families: [`scan`], [`compact`],
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
pub mod hostbuf;
pub mod mem;
pub mod outputs;
pub mod par_timing;
pub mod pet;
pub mod phases;
pub mod pool;
pub mod ptx;
pub mod rng;
pub mod scan;
pub(crate) mod scratch;
pub mod seeding;
pub mod sort;
pub mod staging;
#[doc(hidden)]
pub mod tuning;
pub(crate) mod workspace;

pub use bucket::{BlockBuckets, BucketOrder, Buckets};
pub use cuda::{driver_present, DeviceBuffer, DeviceVec, GpuContext, Record};
pub use error::{Error, Result};
pub use histogram::Histogram;
pub use hostbuf::{HostBuf, HostDigis, HostPool, PooledBuf};
pub use scan::ScanKind;
pub use sort::SortOptions;
pub use staging::HostCopies;

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
///
/// A CUDA backend keeps a workspace per family (device buffers, cached launch plans, pinned
/// staging) between calls, grown on demand: a call whose sizes fit what an earlier call
/// left allocates nothing. It is safe to call from several threads at once: each call takes
/// a workspace of its own, with its own stream, out of the family's pool (see
/// [`Backend::allocations`] and `docs/host.md`).
pub struct Backend {
    gpu: Option<std::sync::Arc<GpuContext>>,
    description: String,
    copies: HostCopies,
    pub(crate) ws: workspace::Workspaces,
    /// The CPU threads of this backend (`None`: rayon's global pool, `RAYON_NUM_THREADS`
    /// or every core); see [`Backend::with_threads`].
    threads: Option<std::sync::Arc<rayon::ThreadPool>>,
    /// The PET merge's launch plan ([`Backend::with_pet_tuning`]).
    pub(crate) pet_plan: pet::MergePlan,
    /// The seeding launch plan ([`Backend::with_seed_tuning`]).
    pub(crate) seed_plan: seeding::SeedPlan,
    /// The clustering tuning ([`Backend::with_cluster_tuning`]).
    pub(crate) cluster_tuning: clustering::ClusterTuning,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("description", &self.description)
            .field("copies", &self.copies)
            .finish()
    }
}

impl Backend {
    fn with_gpu(gpu: Option<GpuContext>, description: String) -> Self {
        Self {
            gpu: gpu.map(std::sync::Arc::new),
            description,
            copies: HostCopies::default(),
            ws: Default::default(),
            threads: None,
            pet_plan: Default::default(),
            seed_plan: Default::default(),
            cluster_tuning: Default::default(),
        }
    }

    /// CUDA on device 0 when a driver and a device are present, else the CPU. Never fails;
    /// [`Backend::description`] says which was picked and why.
    pub fn auto() -> Self {
        match Self::cuda(0) {
            Ok(b) => b,
            Err(e) => Self::with_gpu(None, format!("backend: cpu (CUDA not used: {e})")),
        }
    }

    /// The CPU references.
    pub fn cpu() -> Self {
        Self::with_gpu(None, "backend: cpu (requested)".into())
    }

    /// The CPU backend on `threads` threads of its own (see [`Backend::with_threads`]).
    pub fn cpu_with_threads(threads: usize) -> Result<Self> {
        Self::cpu().with_threads(threads)
    }

    /// CUDA on device `ordinal`, or an error saying why not.
    pub fn cuda(ordinal: usize) -> Result<Self> {
        let gpu = GpuContext::new(ordinal)?;
        let description = format!(
            "backend: cuda (device {ordinal}: {}, {} SMs; kernels: {} loaded in {:.0} ms)",
            gpu.device_name(),
            gpu.sm_count(),
            gpu.image(),
            gpu.load_time().as_secs_f64() * 1e3
        );
        Ok(Self::with_gpu(Some(gpu), description))
    }

    /// This backend with host data copied as `copies` says (default: through pinned
    /// staging buffers; `bench-host` measures both).
    pub fn with_host_copies(mut self, copies: HostCopies) -> Self {
        self.copies = copies;
        self
    }

    /// How host data is copied to and from the device.
    pub fn host_copies(&self) -> HostCopies {
        self.copies
    }

    /// Device and pinned host allocations made so far by this backend's context and its
    /// workspaces (0 on the CPU). A call whose sizes fit its workspace adds nothing: tests
    /// and benchmarks read it around a call.
    pub fn allocations(&self) -> u64 {
        self.gpu.as_ref().map_or(0, |g| g.allocations())
    }

    /// Frees the device and pinned memory the backend's workspaces hold (they grow to the
    /// largest call and never shrink), and the CPU backend's kept scratch (the PET
    /// conversion's and coincidences' host buffers); the next calls allocate again.
    /// Workspaces in use by calls running on other threads are kept.
    pub fn release_workspaces(&self) {
        self.ws.clear();
    }

    /// The shared handle of the CUDA context, when the backend is CUDA.
    pub fn gpu_shared(&self) -> Option<&std::sync::Arc<GpuContext>> {
        self.gpu.as_ref()
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
        self.gpu.as_deref()
    }
}

/// The README's embedding example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
