//! Order-preserving stream compaction (select by range or by flags). Kernels:
//! `detkit_gpu::compact`; launchers: [`cuda`]; oracle (also the CPU backend): [`cpu`];
//! benchmark inputs: [`gen`].
//!
//! ```
//! let kept = detkit::Backend::cpu().select_in_range_u32(&[5, 2, 8, 1, 9], 3, 9).unwrap();
//! assert_eq!(kept, [5, 8]);
//! ```

pub mod cpu;
pub mod cuda;
pub mod gen;

pub use cuda::Selection;

use crate::error::{invalid, Result};
use crate::Backend;

fn check_len(n: usize) -> Result<()> {
    if n as u64 > u32::MAX as u64 {
        return Err(invalid(
            "compaction input",
            format!("{n} items; at most 2^32 - 1 are supported"),
        ));
    }
    Ok(())
}

impl Backend {
    /// The items `x` of `data` with `lo <= x < hi`, in input order.
    pub fn select_in_range_u32(&self, data: &[u32], lo: u32, hi: u32) -> Result<Vec<u32>> {
        check_len(data.len())?;
        match self.gpu() {
            None => Ok(crate::compact::cpu::select(data, |_, x| {
                detkit_gpu::compact::in_range(x, lo, hi)
            })),
            Some(gpu) => gpu.select_host(data, Selection::Range { lo, hi }),
        }
    }

    /// The items `data[i]` with `flags[i] != 0`, in input order.
    pub fn select_flagged_u32(&self, data: &[u32], flags: &[u8]) -> Result<Vec<u32>> {
        check_len(data.len())?;
        if flags.len() != data.len() {
            return Err(invalid(
                "selection flags",
                format!("{} flags for {} items", flags.len(), data.len()),
            ));
        }
        match self.gpu() {
            None => Ok(crate::compact::cpu::select(data, |i, _| flags[i] != 0)),
            Some(gpu) => {
                if data.is_empty() {
                    return Ok(Vec::new());
                }
                let d_flags = gpu.upload(flags)?;
                gpu.select_host(data, Selection::Flagged(&d_flags))
            }
        }
    }
}
