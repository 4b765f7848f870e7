//! Histogram launchers on [`GpuContext`]. See `detkit_gpu::histogram`.

use detkit_gpu::histogram::{self as k, HistogramFillParams};

use super::{check, Histogram, HistogramStrategy};
use crate::cuda::{cfg, DeviceBuffer, GpuContext};
use crate::error::{invalid, Result};

/// The device-side result of a histogram launch.
pub struct DeviceHistogram {
    /// `nbins` counts.
    pub counts: DeviceBuffer<u32>,
    /// `[out_of_range, encoded first index]`, see `detkit_gpu::histogram::decode_first_index`.
    pub out_of_range: DeviceBuffer<u32>,
}

impl GpuContext {
    /// Allocates zeroed device outputs for an `nbins` histogram.
    pub fn histogram_outputs(&self, nbins: u32) -> Result<DeviceHistogram> {
        Ok(DeviceHistogram {
            counts: self.zeros(nbins as usize)?,
            out_of_range: self.zeros(2)?,
        })
    }

    /// Adds the histogram of `keys[..n]` to `out` (which the caller zeroes for a fresh one).
    /// `aggregate` merges equal keys within a warp (`match.any`) before the atomic. Measured on
    /// an H200 it costs more than it saves, on uniform and on 80%-skewed keys alike
    /// (`docs/benchmarks.md`), so the backend API passes `false`; it pays only when nearly all
    /// keys of a warp are equal.
    pub fn histogram_device(
        &self,
        keys: &DeviceBuffer<u32>,
        n: usize,
        nbins: u32,
        strategy: HistogramStrategy,
        aggregate: bool,
        out: &mut DeviceHistogram,
    ) -> Result<()> {
        check(n, nbins)?;
        if keys.len() < n || out.counts.len() < nbins as usize || out.out_of_range.len() < 2 {
            return Err(invalid("histogram buffers", "shorter than n, nbins or 2"));
        }
        if n == 0 {
            return Ok(());
        }
        let shared = match strategy {
            HistogramStrategy::Auto => nbins <= k::HISTOGRAM_SHARED_MAX_BINS,
            HistogramStrategy::Shared => {
                if nbins > k::HISTOGRAM_SHARED_MAX_BINS {
                    return Err(crate::Error::CapacityExceeded {
                        what: "shared-memory histogram bins",
                        needed: nbins as u64,
                        capacity: k::HISTOGRAM_SHARED_MAX_BINS as u64,
                    });
                }
                true
            }
            HistogramStrategy::Global => false,
        };
        // Enough blocks to fill the device a few times over; each walks the keys grid-stride.
        // The shared kernel's shape (`crate::tuning`; the default unless a benchmark chose):
        // loads in flight per lane, blocks per multiprocessor at most.
        let (shared_kernel, _, per_sm) = crate::tuning::Tuned::HistogramShared.current();
        let per_block = k::HISTOGRAM_THREADS as u64 * 16;
        let blocks = (n as u64).div_ceil(per_block).clamp(
            1,
            self.sm_count() as u64 * if shared { per_sm } else { 8 } as u64,
        );
        let params = HistogramFillParams {
            keys: self.ptr(keys),
            n: n as u64,
            hist: self.ptr_mut(&mut out.counts),
            out_of_range: self.ptr_mut(&mut out.out_of_range),
            first_out_of_range: self.ptr_mut(&mut out.out_of_range).offset(1),
            nbins,
            copies: k::histogram_copies(nbins),
            aggregate: aggregate as u32,
            _pad: 0,
        };
        if shared {
            // SAFETY: HISTOGRAM_THREADS threads, `histogram_smem_bytes(nbins)` (<= 48 KiB) of
            // shared memory with `copies = histogram_copies(nbins)`; n < 2^32 and buffer
            // lengths checked above (`out_of_range` holds 2 words); keys 256-byte aligned
            // (cudarc allocation).
            unsafe {
                self.launch(
                    shared_kernel,
                    cfg(blocks, k::HISTOGRAM_THREADS, k::histogram_smem_bytes(nbins)),
                    &params,
                )
            }
        } else {
            // SAFETY: as above, without shared memory.
            unsafe {
                self.launch(
                    k::KERNEL_HISTOGRAM_GLOBAL,
                    cfg(blocks, k::HISTOGRAM_THREADS, 0),
                    &params,
                )
            }
        }
    }

    /// Downloads a device histogram.
    pub fn download_histogram(&self, h: &DeviceHistogram) -> Result<Histogram> {
        let oor = self.download(&h.out_of_range)?;
        Ok(Histogram {
            counts: self.download(&h.counts)?,
            out_of_range: oor[0],
            first_out_of_range: k::decode_first_index(oor[1]).map(|i| i as usize),
        })
    }
}
