//! The PET launcher: one object that launches the `detkit_gpu::pet` kernels on a
//! [`GpuContext`] with one [`PetTuning`] (the merge's launch settings, as CUB's tuning
//! policies), turned into a [`MergePlan`] once when the launcher is made. The conversion,
//! sorts, merges, coincidences and the streamed chain are its methods (`cuda.rs`,
//! `merge.rs`); the context itself knows nothing of PET.
//!
//! ```no_run
//! use detkit::pet::{PetLauncher, PetTuning, MergeTile};
//! # fn f(gpu: &detkit::GpuContext) -> detkit::Result<()> {
//! let pet = PetLauncher::new(gpu); // the default tuning
//! let narrow = PetLauncher::tuned(gpu, &PetTuning { tile: MergeTile::Narrow, ..Default::default() })?;
//! # let _ = (pet, narrow); Ok(()) }
//! ```

use detkit_gpu::pet::{self as k, Single};

use super::cuda::SinglesBuffer;
use crate::cuda::{GpuContext, Record};
use crate::error::{invalid, DriverContext, Result};
use crate::Backend;

/// The segment tile of the multiway merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MergeTile {
    /// [`k::MW_WIDE_TILE`] singles per segment, 1024 threads, one block per multiprocessor
    /// (the default: measured faster on an H200, 1.46 against 1.63 ms at 2^24 singles, 0.44
    /// against 0.53 ms at 2^22; docs/benchmarks.md).
    #[default]
    Wide,
    /// [`k::MW_TILE`] singles per segment, 512 threads, two blocks per multiprocessor.
    Narrow,
}

/// The PET merge's launch settings (what were the `DETKIT_PET_MERGE_*` environment
/// variables). Results never depend on them; `bench-pet-merge` sweeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PetTuning {
    /// The segment tile.
    pub tile: MergeTile,
    /// The largest key span (bits) that a merge block sorts by radix
    /// ([`k::mw_radix_plan`]); 0: merge rounds only. Default [`k::MW_RADIX_BITS`].
    pub radix_bits: u32,
    /// The largest bucket of a merge block's bucket path ([`k::mw_bucket_plan`]); 0: the
    /// radix passes only. Default [`k::MW_BUCKET_MAX`].
    pub bucket_max: u32,
    /// The first level's `div` of [`k::mw_sampling`] (2 to 64; default 3; the levels of
    /// samples use 2).
    pub first_div: u32,
}

impl Default for PetTuning {
    fn default() -> Self {
        Self {
            tile: MergeTile::Wide,
            radix_bits: k::MW_RADIX_BITS,
            bucket_max: k::MW_BUCKET_MAX,
            first_div: 3,
        }
    }
}

impl PetTuning {
    /// The launch plan of these settings: the tile's size, block size and kernel, and the
    /// limits passed to every merge block. A typed error for settings out of range.
    pub fn plan(&self) -> Result<MergePlan> {
        if !(2..=64).contains(&self.first_div) {
            return Err(invalid(
                "PET tuning",
                format!("first_div {} (2 to 64)", self.first_div),
            ));
        }
        let (tile, threads, kernel) = match self.tile {
            MergeTile::Wide => (k::MW_WIDE_TILE, k::MW_WIDE_THREADS, k::KERNEL_MW_MERGE_WIDE),
            MergeTile::Narrow => (k::MW_TILE, k::MW_THREADS, k::KERNEL_MW_MERGE),
        };
        Ok(MergePlan {
            tile,
            threads,
            kernel,
            smem: k::mw_smem_bytes(tile),
            radix_bits: self.radix_bits,
            bucket_max: self.bucket_max,
            first_div: self.first_div,
        })
    }
}

/// A [`PetTuning`] turned into launch settings (checked once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergePlan {
    /// Singles per segment.
    pub tile: u32,
    /// Threads per merge block.
    pub threads: u32,
    /// The merge kernel of that tile.
    pub kernel: &'static str,
    /// Shared memory per merge block (bytes).
    pub smem: usize,
    /// See [`PetTuning::radix_bits`].
    pub radix_bits: u32,
    /// See [`PetTuning::bucket_max`].
    pub bucket_max: u32,
    /// See [`PetTuning::first_div`].
    pub first_div: u32,
}

impl Default for MergePlan {
    fn default() -> Self {
        PetTuning::default()
            .plan()
            .expect("the default tuning is in range")
    }
}

/// Launches the PET kernels on one context (its stream) with one merge plan. Cheap to make
/// (a reference and the plan); the device buffers it works on are the caller's (the
/// backend's `PetWorkspace`, or the caller's own for device-resident pipelines), and its
/// temporaries live in the context's scratch state. See the module doc.
#[derive(Clone, Copy, Debug)]
pub struct PetLauncher<'g> {
    gpu: &'g GpuContext,
    plan: MergePlan,
}

impl<'g> PetLauncher<'g> {
    /// A launcher with the default tuning.
    pub fn new(gpu: &'g GpuContext) -> Self {
        Self::with_plan(gpu, MergePlan::default())
    }

    /// A launcher with `tuning` (a typed error when out of range).
    pub fn tuned(gpu: &'g GpuContext, tuning: &PetTuning) -> Result<Self> {
        Ok(Self::with_plan(gpu, tuning.plan()?))
    }

    /// A launcher with a plan made before.
    pub fn with_plan(gpu: &'g GpuContext, plan: MergePlan) -> Self {
        Self { gpu, plan }
    }

    /// The context it launches on.
    pub fn gpu(&self) -> &'g GpuContext {
        self.gpu
    }

    /// The merge plan.
    pub fn plan(&self) -> &MergePlan {
        &self.plan
    }
}

impl PetLauncher<'_> {
    /// `singles` copied into a new device buffer `a` (and a scratch buffer `b` of the same
    /// length), `f(self, a, b, n)` run on them, and the singles copied back from the buffer
    /// it names (`true`: `b`, else `a`), with what else it returned. The plain host round
    /// trip of the `Backend` calls that run a launcher method once.
    pub(crate) fn round_trip<T>(
        &self,
        singles: &[Single],
        f: impl FnOnce(&Self, &mut SinglesBuffer, &mut SinglesBuffer, usize) -> Result<(bool, T)>,
    ) -> Result<(Vec<Single>, T)> {
        let n = singles.len();
        let mut a = self.upload_singles(singles)?;
        let mut b = self.zeros(a.len())?;
        let (in_b, x) = f(self, &mut a, &mut b, n)?;
        let out = self
            .stream()
            .clone_dtoh(&(if in_b { b } else { a }).slice(0..n))
            .map(Record::unwrap_vec)
            .ctx("copying singles from the device")?;
        Ok((out, x))
    }
}

impl Backend {
    /// The backend with another PET tuning (the multiway merge of
    /// [`Backend::pet_sort_runs`] and [`Backend::pet_sort_auto`]), turned into its launch
    /// plan here, once; a typed error when out of range. Results never depend on it.
    pub fn with_pet_tuning(mut self, tuning: &PetTuning) -> Result<Self> {
        self.pet_plan = tuning.plan()?;
        Ok(self)
    }

    /// A launcher on `gpu` (this backend's context or a workspace's fork) with this
    /// backend's plan.
    pub(crate) fn pet_launcher<'g>(&self, gpu: &'g GpuContext) -> PetLauncher<'g> {
        PetLauncher::with_plan(gpu, self.pet_plan)
    }
}

/// The launcher's methods use the context's launch helper, buffers and stream directly.
impl std::ops::Deref for PetLauncher<'_> {
    type Target = GpuContext;
    fn deref(&self) -> &GpuContext {
        self.gpu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_plans_and_refusals() {
        let p = PetTuning::default().plan().unwrap();
        assert_eq!(
            (p.tile, p.kernel, p.first_div),
            (k::MW_WIDE_TILE, k::KERNEL_MW_MERGE_WIDE, 3)
        );
        let n = PetTuning {
            tile: MergeTile::Narrow,
            ..Default::default()
        }
        .plan()
        .unwrap();
        assert_eq!((n.tile, n.threads), (k::MW_TILE, k::MW_THREADS));
        for d in [0, 1, 65] {
            let t = PetTuning {
                first_div: d,
                ..Default::default()
            };
            assert!(t.plan().is_err(), "{d}");
        }
        // A backend takes a tuning in range, and refuses one out of it.
        let narrow = PetTuning {
            tile: MergeTile::Narrow,
            ..Default::default()
        };
        assert_eq!(
            Backend::cpu().with_pet_tuning(&narrow).unwrap().pet_plan,
            narrow.plan().unwrap()
        );
        let bad = PetTuning {
            first_div: 1,
            ..Default::default()
        };
        assert!(Backend::cpu().with_pet_tuning(&bad).is_err());
    }
}
