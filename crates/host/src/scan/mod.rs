//! Prefix sums: warp, block and device-wide (single-pass, decoupled look-back) scans of
//! `u32` and `u64`. Kernels: `detkit_gpu::scan`; launchers: [`cuda`]; oracle (also the CPU
//! backend): [`cpu`]; benchmark inputs: [`gen`].
//!
//! ```
//! use detkit::{Backend, ScanKind};
//! let b = Backend::cpu();
//! assert_eq!(b.scan_u32(&[3, 1, 4, 1, 5], ScanKind::Exclusive).unwrap(), [0, 3, 4, 8, 9]);
//! assert_eq!(b.scan_u32(&[3, 1, 4, 1, 5], ScanKind::Inclusive).unwrap(), [3, 4, 8, 9, 14]);
//! ```

pub mod cpu;
pub mod cuda;
pub mod gen;

pub use cuda::DeviceScanValue;
pub use detkit_gpu::scan::ScanKind;

use crate::error::Result;
use crate::Backend;

pub(crate) use crate::cuda::check_block_size;

impl Backend {
    /// Inclusive or exclusive sum of `u32` values (wrapping).
    pub fn scan_u32(&self, input: &[u32], kind: ScanKind) -> Result<Vec<u32>> {
        self.scan(input, kind)
    }

    /// Inclusive or exclusive sum of `u64` values (wrapping).
    pub fn scan_u64(&self, input: &[u64], kind: ScanKind) -> Result<Vec<u64>> {
        self.scan(input, kind)
    }

    fn scan<T: DeviceScanValue>(&self, input: &[T], kind: ScanKind) -> Result<Vec<T>> {
        match self.gpu() {
            None => Ok(crate::scan::cpu::scan(input, kind)),
            Some(gpu) => {
                if input.is_empty() {
                    return Ok(Vec::new());
                }
                let d_in = gpu.upload(input)?;
                let mut d_out = gpu.zeros::<T>(input.len())?;
                gpu.scan_device(&d_in, &mut d_out, input.len(), kind)?;
                gpu.download(&d_out)
            }
        }
    }

    /// Block scan: each run of `block` consecutive elements scanned on its own (`block` a
    /// multiple of 32 up to 1024). Returns the scan and each block's total.
    pub fn block_scan_u32(
        &self,
        input: &[u32],
        block: u32,
        kind: ScanKind,
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        check_block_size(block)?;
        match self.gpu() {
            None => Ok(crate::scan::cpu::block_scan(input, block as usize, kind)),
            Some(gpu) => {
                if input.is_empty() {
                    return Ok((Vec::new(), Vec::new()));
                }
                let blocks = input.len().div_ceil(block as usize);
                let d_in = gpu.upload(input)?;
                let mut d_out = gpu.zeros::<u32>(input.len())?;
                let mut d_tot = gpu.zeros::<u32>(blocks)?;
                gpu.block_scan_u32(&d_in, &mut d_out, &mut d_tot, input.len(), block, kind)?;
                Ok((gpu.download(&d_out)?, gpu.download(&d_tot)?))
            }
        }
    }
}
