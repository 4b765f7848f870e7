//! Device histogram of `u32` keys into `nbins` bins: key `k < nbins` counts in bin `k`; other
//! keys are counted as out of range and the first one's index is reported. Kernels:
//! `detkit_gpu::histogram`; launchers: [`cuda`]; oracle (also the CPU backend): [`cpu`];
//! benchmark inputs: [`gen`].
//!
//! ```
//! let h = detkit::Backend::cpu().histogram(&[0, 3, 3, 7, 1], 4).unwrap();
//! assert_eq!(h.counts, [1, 1, 0, 2]);
//! assert_eq!((h.out_of_range, h.first_out_of_range), (1, Some(3)));
//! ```

pub mod cpu;
pub mod cuda;
pub mod gen;

pub use cuda::DeviceHistogram;

use crate::error::{invalid, Result};
use crate::Backend;

/// A histogram and what fell outside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// `counts[b]`: number of keys equal to `b`.
    pub counts: Vec<u32>,
    /// Number of keys `>= nbins`.
    pub out_of_range: u32,
    /// Index of the first key `>= nbins`, if any.
    pub first_out_of_range: Option<usize>,
}

/// Which kernel fills the histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistogramStrategy {
    /// Shared memory for `nbins <= HISTOGRAM_SHARED_MAX_BINS`, global atomics above.
    Auto,
    /// Shared-memory sub-histograms (fails above `HISTOGRAM_SHARED_MAX_BINS`).
    Shared,
    /// Global atomics.
    Global,
}

pub(crate) fn check(n: usize, nbins: u32) -> Result<()> {
    if nbins == 0 {
        return Err(invalid("nbins", "must be at least 1"));
    }
    if n as u64 > u32::MAX as u64 {
        return Err(invalid(
            "histogram keys",
            format!("{n} keys; at most 2^32 - 1 are supported"),
        ));
    }
    Ok(())
}

impl Backend {
    /// Histogram of `keys` into `nbins` bins (key `k < nbins` counts in bin `k`).
    pub fn histogram(&self, keys: &[u32], nbins: u32) -> Result<Histogram> {
        self.histogram_with(keys, nbins, HistogramStrategy::Auto)
    }

    /// As [`Backend::histogram`], choosing the GPU strategy.
    pub fn histogram_with(
        &self,
        keys: &[u32],
        nbins: u32,
        strategy: HistogramStrategy,
    ) -> Result<Histogram> {
        check(keys.len(), nbins)?;
        match self.gpu() {
            None => Ok(cpu::histogram(keys, nbins)),
            Some(gpu) => {
                let mut out = gpu.histogram_outputs(nbins)?;
                if !keys.is_empty() {
                    let d = gpu.upload(keys)?;
                    gpu.histogram_device(&d, keys.len(), nbins, strategy, false, &mut out)?;
                }
                gpu.download_histogram(&out)
            }
        }
    }
}
