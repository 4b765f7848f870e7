//! Compaction launchers on [`GpuContext`].

use detkit_gpu::compact as k;

use super::check_len;
use crate::cuda::{cfg, DeviceBuffer, GpuContext};
use crate::error::{invalid, Result};

/// What to keep.
pub enum Selection<'a> {
    /// `lo <= x < hi`.
    Range {
        /// Inclusive lower bound.
        lo: u32,
        /// Exclusive upper bound.
        hi: u32,
    },
    /// `flags[i] != 0`, one flag byte per item, already on the device.
    Flagged(&'a DeviceBuffer<u8>),
}

impl GpuContext {
    /// Writes the selected items of `input[..n]`, in input order, to the front of `output`,
    /// and their number to `num_selected[0]`. Items of `output` past that number are left
    /// as they were.
    pub fn select_u32(
        &self,
        input: &DeviceBuffer<u32>,
        n: usize,
        selection: Selection<'_>,
        output: &mut DeviceBuffer<u32>,
        num_selected: &mut DeviceBuffer<u32>,
    ) -> Result<()> {
        check_len(n)?;
        if input.len() < n || output.len() < n || num_selected.is_empty() {
            return Err(invalid(
                "compaction buffers",
                format!(
                    "n = {n}, input {}, output {}, count {}",
                    input.len(),
                    output.len(),
                    num_selected.len()
                ),
            ));
        }
        if n == 0 {
            return self.memset_zero(num_selected);
        }
        // The range kernel's tile shape (`crate::tuning`; the default unless a benchmark
        // chose); the flagged kernel has the default shape only.
        let (range_kernel, range_threads, range_items) =
            crate::tuning::Tuned::SelectRange.current();
        let range_tile = range_threads as u64 * range_items as u64;
        let tiles = match selection {
            Selection::Range { .. } => (n as u64).div_ceil(range_tile),
            Selection::Flagged(_) => k::select_tiles(n as u64),
        };
        let mut lb = self.take_lookback::<u32>(tiles)?;
        let n64 = n as u64;
        let r = match selection {
            Selection::Range { lo, hi } => {
                let params = k::CompactSelectRangeU32Params {
                    input: self.ptr(input),
                    n: n64,
                    lo,
                    hi,
                    output: self.ptr_mut(&mut *output),
                    num_selected: self.ptr_mut(&mut *num_selected),
                    flags: self.ptr_mut(&mut lb.flags),
                    aggregates: self.ptr_mut(&mut lb.agg),
                    inclusive: self.ptr_mut(&mut lb.inc),
                };
                // SAFETY: the shape's threads, one block per tile of its size, its
                // `select_smem_bytes_for`;
                // n < 2^32 and buffer lengths checked; cudarc buffers are 256-byte aligned and
                // distinct; look-back state zeroed with at least `tiles` entries.
                unsafe {
                    self.launch(
                        range_kernel,
                        cfg(tiles, range_threads, k::select_smem_bytes_for(range_tile)),
                        &params,
                    )
                }
            }
            Selection::Flagged(flags) => {
                if flags.len() < n {
                    self.put_lookback(lb);
                    return Err(invalid(
                        "selection flags",
                        format!("{} flags for {n} items", flags.len()),
                    ));
                }
                let params = k::CompactSelectFlaggedU32Params {
                    input: self.ptr(input),
                    selection: self.ptr(flags),
                    n: n64,
                    output: self.ptr_mut(&mut *output),
                    num_selected: self.ptr_mut(&mut *num_selected),
                    flags: self.ptr_mut(&mut lb.flags),
                    aggregates: self.ptr_mut(&mut lb.agg),
                    inclusive: self.ptr_mut(&mut lb.inc),
                };
                // SAFETY: as for the range kernel, and `flags` holds n bytes (checked).
                unsafe {
                    self.launch(
                        k::KERNEL_SELECT_FLAGGED_U32,
                        cfg(tiles, k::SELECT_THREADS, k::select_smem_bytes()),
                        &params,
                    )
                }
            }
        };
        self.put_lookback(lb);
        r
    }

    pub(crate) fn select_host(&self, data: &[u32], selection: Selection<'_>) -> Result<Vec<u32>> {
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let d_in = self.upload(data)?;
        let mut d_out = self.zeros::<u32>(data.len())?;
        let mut d_n = self.zeros::<u32>(1)?;
        self.select_u32(&d_in, data.len(), selection, &mut d_out, &mut d_n)?;
        let count = self.download(&d_n)?[0] as usize;
        let mut out = self.download(&d_out)?;
        out.truncate(count);
        Ok(out)
    }
}
