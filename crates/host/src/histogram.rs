//! Device histogram: launchers and the backend-neutral API. See `detkit_gpu::histogram`.

use cudarc::driver::PushKernelArg;
use detkit_gpu::histogram as k;

use crate::cuda::{cfg, DeviceBuffer, GpuContext};
use crate::error::{invalid, Result};
use crate::{cpu, Backend};

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

/// The device-side result of a histogram launch.
pub struct DeviceHistogram {
    /// `nbins` counts.
    pub counts: DeviceBuffer<u32>,
    /// `[out_of_range, encoded first index]`, see `detkit_gpu::histogram::decode_first_index`.
    pub out_of_range: DeviceBuffer<u32>,
}

fn check(n: usize, nbins: u32) -> Result<()> {
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
        let per_block = k::HISTOGRAM_THREADS as u64 * 16;
        let blocks = (n as u64)
            .div_ceil(per_block)
            .clamp(1, self.sm_count() as u64 * 8);
        let n64 = n as u64;
        let agg = aggregate as u32;
        let (oor, first) = out.out_of_range.split_at_mut(1);
        let (mut oor, mut first) = (oor, first);
        let (name, r) = if shared {
            let copies = k::histogram_copies(nbins);
            let mut b = self
                .stream()
                .launch_builder(self.kernel(k::KERNEL_HISTOGRAM_SHARED)?);
            b.arg(keys)
                .arg(&n64)
                .arg(&nbins)
                .arg(&copies)
                .arg(&agg)
                .arg(&mut out.counts)
                .arg(&mut oor)
                .arg(&mut first);
            // SAFETY: HISTOGRAM_THREADS threads, `histogram_smem_bytes(nbins)` (<= 48 KiB) of
            // shared memory with `copies = histogram_copies(nbins)`; n < 2^32 and buffer
            // lengths checked; keys 256-byte aligned (cudarc allocation).
            (k::KERNEL_HISTOGRAM_SHARED, unsafe {
                b.launch(cfg(
                    blocks,
                    k::HISTOGRAM_THREADS,
                    k::histogram_smem_bytes(nbins),
                ))
            })
        } else {
            let mut b = self
                .stream()
                .launch_builder(self.kernel(k::KERNEL_HISTOGRAM_GLOBAL)?);
            b.arg(keys)
                .arg(&n64)
                .arg(&nbins)
                .arg(&agg)
                .arg(&mut out.counts)
                .arg(&mut oor)
                .arg(&mut first);
            // SAFETY: as above, without shared memory.
            (k::KERNEL_HISTOGRAM_GLOBAL, unsafe {
                b.launch(cfg(blocks, k::HISTOGRAM_THREADS, 0))
            })
        };
        self.check_launch(name, r)
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
            None => Ok(cpu::histogram::histogram(keys, nbins)),
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
