//! The seeding family's launch settings in one value, as CUB's tuning policies
//! (`cub/device/dispatch/tuning/tuning_radix_sort.cuh`) and as [`crate::pet::PetTuning`] and
//! [`crate::clustering::ClusterTuning`] for the other families: [`SeedTuning`] (a plain
//! struct with defaults) is checked once and turned into a [`SeedPlan`], which a
//! [`SeedingWorkspace`] (and through it every launch of the chain) and a
//! [`crate::Backend`]'s seeding door use. Results never depend on it.
//!
//! ```
//! use detkit::seeding::{SeedTuning, SeedingWorkspace};
//! // A workspace whose doublet buffers start tiny (the overflow-and-retry path), and a
//! // backend whose pipelined calls split into two equal parts.
//! let ws = SeedingWorkspace::tuned(&SeedTuning {
//!     capacity_factors: [0.01, 0.01, 0.01],
//!     ..Default::default()
//! })?;
//! let b = detkit::Backend::cpu().with_seed_tuning(&SeedTuning {
//!     pipeline_parts: &[1, 1],
//!     ..Default::default()
//! })?;
//! // Out of range: a typed error, not a panic.
//! let bad = SeedTuning { threads: 100, ..Default::default() };
//! assert!(bad.plan().is_err());
//! # let _ = (ws, b);
//! # Ok::<(), detkit::Error>(())
//! ```
//!
//! Not in it: the CPU backend's grains (`par.rs`: middles per task, the SIMD width of its
//! doublet loop, a compile-time array length) and the validation's piece size (`mod.rs`),
//! which are no launch settings; the two lanes of a pipelined call (the workspace pool hands
//! out exactly two); and the 25 % margin by which an overflowed capacity grows.

use detkit_gpu::seeding as k;

use super::cuda::SeedingWorkspace;
use crate::cuda::{cfg as launch_cfg, check_block_size};
use crate::error::{invalid, Result};
use crate::Backend;

/// Initial capacity factors (entries per spacepoint: middle–bottom, middle–top, triplets):
/// at ⟨μ⟩ = 200 an event has about 22 middle–bottom and 8 middle–top doublets and 1.4
/// triplets per spacepoint.
pub const DEFAULT_CAPACITY_FACTORS: [f64; 3] = [32.0, 12.0, 3.0];

/// The seeding chain's launch settings. Every field has a default ([`SeedTuning::default`]:
/// the constants the chain was launched with before this value existed); results never depend
/// on them. [`SeedTuning::plan`] checks them once. The CPU backend has no launches and
/// ignores them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeedTuning {
    /// Threads per block of the one-thread-per-item kernels: the binning
    /// (`seeding_bin_spacepoints`, `seeding_bin_place`), the two gathers, the triplet kernel
    /// and the device-view interleave. A multiple of 32, 32 to 1024; default
    /// [`k::SEEDING_THREADS`].
    pub threads: u32,
    /// Threads per block of `seeding_find_doublets` (one warp per middle, each warp with
    /// [`k::DOUBLET_WARP_WORDS`] words of shared memory). A multiple of 32 up to
    /// [`k::SEEDING_THREADS`], the launch bound it is compiled with; default
    /// [`k::SEEDING_THREADS`].
    pub doublet_threads: u32,
    /// Threads per block of `seeding_select_seeds` (one warp per middle). A multiple of 32,
    /// 32 to 1024; default [`k::SELECT_THREADS`].
    pub select_threads: u32,
    /// Threads per block of `seeding_bin_count`, whose last block scans up to
    /// `bin_count_threads × `[`k::BIN_SCAN_ITEMS`] grid counts itself (more take the device
    /// scan, one launch more). A multiple of 32, 32 to 1024 (its launch bound); default
    /// [`k::BIN_COUNT_THREADS`].
    pub bin_count_threads: u32,
    /// Most blocks per multiprocessor of the triplet kernel's grid-stride grid (at least 1;
    /// default 1024: one thread per middle–bottom doublet of the capacity up to that). A
    /// bound of 16 had each thread walk about 90 doublets in a batch of 32 ⟨μ⟩ = 200 events:
    /// 4,234–4,283 events/s against 4,514 with one thread per doublet; 9, all resident at
    /// once, was slower (H200, issue 14 session 6).
    pub triplet_blocks_per_sm: u32,
    /// Initial doublet and triplet capacities, entries per spacepoint (middle–bottom,
    /// middle–top, triplets; each finite and above 0). A batch that overflows one repeats its
    /// chain with the capacity raised to its need plus 25 %. Default
    /// [`DEFAULT_CAPACITY_FACTORS`].
    pub capacity_factors: [f64; 3],
    /// Most spacepoints of one chain of a host call: larger calls run as several chains
    /// (an event is never split). At least 1; default 2^22.
    pub chunk_spacepoints: usize,
    /// The speculative copy of the seeds behind the counts' read-back: the last call's seeds
    /// per spacepoint times this margin (finite, at least 0; 0: no speculative copy; default
    /// 1.1).
    pub prefetch_margin: f64,
    /// Spacepoints of a call (two events or more) above which its events run as two halves
    /// side by side on two workspaces (pageable copies; default 2^20).
    pub split_spacepoints: usize,
    /// Spacepoints of a pinned-staging call (two events or more) from which it runs as a
    /// pipeline of parts on two workspaces (default 2^20).
    pub pipeline_spacepoints: usize,
    /// The parts of a pipelined call as weights of its spacepoints, in order (1 to 16 parts,
    /// each weight at least 1; default `[1, 4, 4, 2, 1]`: a small first part, so that the GPU
    /// starts early, and a small last part, so that little is left to copy back after).
    pub pipeline_parts: &'static [usize],
}

impl Default for SeedTuning {
    fn default() -> Self {
        Self {
            threads: k::SEEDING_THREADS,
            doublet_threads: k::SEEDING_THREADS,
            select_threads: k::SELECT_THREADS,
            bin_count_threads: k::BIN_COUNT_THREADS,
            triplet_blocks_per_sm: 1024,
            capacity_factors: DEFAULT_CAPACITY_FACTORS,
            chunk_spacepoints: 1 << 22,
            prefetch_margin: 1.1,
            split_spacepoints: 1 << 20,
            pipeline_spacepoints: 1 << 20,
            pipeline_parts: &[1, 4, 4, 2, 1],
        }
    }
}

/// Most parts of a pipelined call.
const MAX_PIPELINE_PARTS: usize = 16;

impl SeedTuning {
    /// The launch plan of these settings; a typed error naming the first field out of range.
    pub fn plan(&self) -> Result<SeedPlan> {
        let field = |name: &str, r: Result<()>| {
            r.map_err(|e| invalid("seeding tuning", format!("{name}: {e}")))
        };
        field("threads", check_block_size(self.threads))?;
        field("doublet_threads", check_block_size(self.doublet_threads))?;
        if self.doublet_threads > k::SEEDING_THREADS {
            return Err(invalid(
                "seeding tuning",
                format!(
                    "doublet_threads: {} over {}, the doublet kernel's launch bound",
                    self.doublet_threads,
                    k::SEEDING_THREADS
                ),
            ));
        }
        field("select_threads", check_block_size(self.select_threads))?;
        field(
            "bin_count_threads",
            check_block_size(self.bin_count_threads),
        )?;
        let positive = [
            ("triplet_blocks_per_sm", self.triplet_blocks_per_sm as usize),
            ("chunk_spacepoints", self.chunk_spacepoints),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(invalid("seeding tuning", format!("{name}: 0 (at least 1)")));
        }
        if let Some(f) = self
            .capacity_factors
            .iter()
            .find(|f| !(f.is_finite() && **f > 0.0))
        {
            return Err(invalid(
                "seeding tuning",
                format!("capacity_factors: {f} (finite and above 0)"),
            ));
        }
        if !(self.prefetch_margin.is_finite() && self.prefetch_margin >= 0.0) {
            return Err(invalid(
                "seeding tuning",
                format!(
                    "prefetch_margin: {} (finite, at least 0)",
                    self.prefetch_margin
                ),
            ));
        }
        let parts = self.pipeline_parts;
        if parts.is_empty() || parts.len() > MAX_PIPELINE_PARTS || parts.contains(&0) {
            return Err(invalid(
                "seeding tuning",
                format!(
                    "pipeline_parts: {parts:?} (1 to {MAX_PIPELINE_PARTS} weights, each at least 1)"
                ),
            ));
        }
        Ok(SeedPlan {
            t: *self,
            doublet_smem: (self.doublet_threads / 32 * k::DOUBLET_WARP_WORDS * 4) as usize,
            bin_scan_tile: self.bin_count_threads as u64 * k::BIN_SCAN_ITEMS as u64,
        })
    }
}

/// A [`SeedTuning`] checked and turned into launch settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeedPlan {
    /// The checked settings.
    pub(crate) t: SeedTuning,
    /// Dynamic shared memory of a doublet block (bytes).
    pub doublet_smem: usize,
    /// Most grid offsets that `seeding_bin_count` scans itself.
    pub bin_scan_tile: u64,
}

impl Default for SeedPlan {
    fn default() -> Self {
        SeedTuning::default()
            .plan()
            .expect("the default tuning is in range")
    }
}

impl SeedPlan {
    /// The settings it was made from.
    pub fn tuning(&self) -> &SeedTuning {
        &self.t
    }

    /// One thread per item for `n` items (at least one block) at [`SeedTuning::threads`].
    pub(crate) fn items(&self, n: u64) -> cudarc::driver::LaunchConfig {
        launch_cfg(n.div_ceil(self.t.threads as u64).max(1), self.t.threads, 0)
    }

    /// The doublet kernel's launch for `n` middles: one warp each, blocks of
    /// [`SeedTuning::doublet_threads`] with their shared memory.
    pub(crate) fn doublets(&self, n: u64) -> cudarc::driver::LaunchConfig {
        let t = self.t.doublet_threads;
        launch_cfg((32 * n).div_ceil(t as u64).max(1), t, self.doublet_smem)
    }

    /// Blocks of a grid-stride kernel over a capacity of `n` items at
    /// [`SeedTuning::threads`]: one thread per item, at most
    /// [`SeedTuning::triplet_blocks_per_sm`] blocks per multiprocessor of `sm_count`.
    pub(crate) fn stride_blocks(&self, sm_count: u32, n: u64) -> u64 {
        n.div_ceil(self.t.threads as u64)
            .clamp(1, sm_count as u64 * self.t.triplet_blocks_per_sm as u64)
    }
}

impl SeedingWorkspace {
    /// An empty workspace launching with `tuning` (a typed error when out of range): its
    /// capacities start at [`SeedTuning::capacity_factors`] (tests use tiny factors to force
    /// the overflow-and-retry path).
    pub fn tuned(tuning: &SeedTuning) -> Result<Self> {
        Ok(Self::with_plan(tuning.plan()?))
    }
}

impl Backend {
    /// The backend with another seeding tuning, turned into its launch plan here, once; a
    /// typed error when out of range. The seeding workspaces it kept are dropped (the next
    /// calls make them with the new plan). Results never depend on it.
    pub fn with_seed_tuning(mut self, tuning: &SeedTuning) -> Result<Self> {
        self.seed_plan = tuning.plan()?;
        self.ws.seeding.clear();
        Ok(self)
    }

    /// The seeding launch plan of this backend ([`Backend::with_seed_tuning`]).
    pub fn seed_plan(&self) -> &SeedPlan {
        &self.seed_plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn defaults_are_the_former_constants() {
        let t = SeedTuning::default();
        assert_eq!(
            (
                t.threads,
                t.doublet_threads,
                t.select_threads,
                t.bin_count_threads
            ),
            (128, 128, 64, 1024)
        );
        assert_eq!(t.triplet_blocks_per_sm, 1024);
        assert_eq!(t.capacity_factors, [32.0, 12.0, 3.0]);
        assert_eq!(t.chunk_spacepoints, 1 << 22);
        assert_eq!(t.prefetch_margin, 1.1);
        assert_eq!(
            (t.split_spacepoints, t.pipeline_spacepoints),
            (1 << 20, 1 << 20)
        );
        assert_eq!(t.pipeline_parts, &[1, 4, 4, 2, 1]);
        // The plan's derived launch settings are the kernels' own constants.
        let p = SeedPlan::default();
        assert_eq!(p.doublet_smem, k::doublet_smem_bytes());
        assert_eq!(p.bin_scan_tile, k::BIN_SCAN_TILE);
        let items = p.items(1000);
        assert_eq!(
            (items.grid_dim.0, items.block_dim.0, items.shared_mem_bytes),
            (8, 128, 0)
        );
        let d = p.doublets(1000);
        assert_eq!(
            (d.grid_dim.0, d.block_dim.0, d.shared_mem_bytes as usize),
            (250, 128, k::doublet_smem_bytes())
        );
        assert_eq!(p.items(0).grid_dim.0, 1);
        assert_eq!(p.stride_blocks(132, 1 << 40), 132 * 1024);
        assert_eq!(p.stride_blocks(132, 0), 1);
        assert_eq!(SeedingWorkspace::new().plan(), &p);
        assert_eq!(Backend::cpu().seed_plan(), &p);
    }

    #[test]
    fn out_of_range_is_a_typed_error_naming_the_field() {
        let d = SeedTuning::default;
        let bad = [
            ("threads", SeedTuning { threads: 0, ..d() }),
            (
                "threads",
                SeedTuning {
                    threads: 96 + 1,
                    ..d()
                },
            ),
            (
                "threads",
                SeedTuning {
                    threads: 1056,
                    ..d()
                },
            ),
            (
                "doublet_threads",
                SeedTuning {
                    doublet_threads: 256,
                    ..d()
                },
            ),
            (
                "doublet_threads",
                SeedTuning {
                    doublet_threads: 48,
                    ..d()
                },
            ),
            (
                "select_threads",
                SeedTuning {
                    select_threads: 2048,
                    ..d()
                },
            ),
            (
                "bin_count_threads",
                SeedTuning {
                    bin_count_threads: 0,
                    ..d()
                },
            ),
            (
                "triplet_blocks_per_sm",
                SeedTuning {
                    triplet_blocks_per_sm: 0,
                    ..d()
                },
            ),
            (
                "capacity_factors",
                SeedTuning {
                    capacity_factors: [1.0, 0.0, 1.0],
                    ..d()
                },
            ),
            (
                "capacity_factors",
                SeedTuning {
                    capacity_factors: [f64::NAN, 1.0, 1.0],
                    ..d()
                },
            ),
            (
                "chunk_spacepoints",
                SeedTuning {
                    chunk_spacepoints: 0,
                    ..d()
                },
            ),
            (
                "prefetch_margin",
                SeedTuning {
                    prefetch_margin: -1.0,
                    ..d()
                },
            ),
            (
                "prefetch_margin",
                SeedTuning {
                    prefetch_margin: f64::INFINITY,
                    ..d()
                },
            ),
            (
                "pipeline_parts",
                SeedTuning {
                    pipeline_parts: &[],
                    ..d()
                },
            ),
            (
                "pipeline_parts",
                SeedTuning {
                    pipeline_parts: &[1, 0, 1],
                    ..d()
                },
            ),
            (
                "pipeline_parts",
                SeedTuning {
                    pipeline_parts: &[1; 17],
                    ..d()
                },
            ),
        ];
        for (name, t) in bad {
            match t.plan() {
                Err(Error::InvalidInput { what, detail }) => {
                    assert_eq!(what, "seeding tuning");
                    assert!(detail.starts_with(name), "{name}: {detail}");
                }
                other => panic!("{name}: {other:?}"),
            }
            assert!(SeedingWorkspace::tuned(&t).is_err(), "{name}");
            assert!(Backend::cpu().with_seed_tuning(&t).is_err(), "{name}");
        }
        // In range at the edges.
        let edges = SeedTuning {
            threads: 1024,
            doublet_threads: 32,
            select_threads: 32,
            bin_count_threads: 32,
            triplet_blocks_per_sm: 1,
            prefetch_margin: 0.0,
            pipeline_parts: &[1],
            ..d()
        };
        let p = edges.plan().unwrap();
        assert_eq!(p.doublet_smem, (k::DOUBLET_WARP_WORDS * 4) as usize);
        assert_eq!(p.bin_scan_tile, 32 * k::BIN_SCAN_ITEMS as u64);
        assert_eq!(p.stride_blocks(132, 1 << 40), 132);
        let ws = SeedingWorkspace::tuned(&SeedTuning {
            capacity_factors: [0.5, 0.25, 0.125],
            ..d()
        })
        .unwrap();
        assert_eq!(ws.capacity_factors(), [0.5, 0.25, 0.125]);
    }
}
