//! Device-wide LSD radix sort of `u32` and `u64` keys, with optional values: stable, any
//! length from 0 to 2^32 - 1, ordered by a bit range of the key (`begin_bit..end_bit`; bits
//! outside it take no part in the order and are kept in the output), ascending or
//! descending. Kernels: `detkit_gpu::sort` (the onesweep structure of Adinets & Merrill and
//! CUB's `DeviceRadixSort`; `docs/sort.md` has the design and the traffic per pass);
//! launchers: [`cuda`]; oracle (also the CPU backend): [`cpu`]; benchmark inputs: [`gen`].
//!
//! ```
//! use detkit::sort::SortOptions;
//! let b = detkit::Backend::cpu();
//! let keys = [0x0102u32, 0x0201, 0x0101, 0x0202];
//! let (k, v) = b.sort_pairs_u32(&keys, &[0u32, 1, 2, 3], SortOptions::default()).unwrap();
//! assert_eq!(k, [0x0101, 0x0102, 0x0201, 0x0202]);
//! assert_eq!(v, [2, 0, 1, 3]);
//! // Only bits 8..16 count: the low byte is ignored by the order but kept; equal keys keep
//! // their input order.
//! let (k, v) = b.sort_pairs_u32(&keys, &[0u32, 1, 2, 3], SortOptions::bits(8, 16)).unwrap();
//! assert_eq!(k, [0x0102, 0x0101, 0x0201, 0x0202]);
//! assert_eq!(v, [0, 2, 1, 3]);
//! // Descending, still stable.
//! let k = b.sort_keys_u32(&keys, SortOptions::default().descending()).unwrap();
//! assert_eq!(k, [0x0202, 0x0201, 0x0102, 0x0101]);
//! ```
//!
//! # Rules
//! - Bit range: `begin_bit <= end_bit <= key bits` (32 or 64), else [`Error::InvalidInput`].
//!   `end_bit: None` means all the key's bits. `begin_bit == end_bit` is allowed and sorts
//!   by nothing: the output is the input, unchanged (no kernel runs; a device-to-device copy).
//! - Length: at most 2^32 - 1 keys, else [`Error::CapacityExceeded`]. Lengths 0 and 1 are
//!   fine (0 launches nothing).
//! - Values: any `bytemuck::Pod` type of 4, 8, 12 or 16 bytes (one to four 32-bit words:
//!   `u32`, `f32`, `u64`, `[f32; 3]`, a `#[repr(C)]` record of 16 bytes, ...), as many as
//!   keys; other sizes are an [`Error::InvalidInput`] (sort a `u32` index and gather).
//! - Launches per call on the GPU: one (`n <= SINGLE_TILE`, the single-tile kernel) or
//!   `1 + passes` with `passes = ceil((end_bit - begin_bit) / 8)`, and no host round trip
//!   ([`GpuContext::sort_launches`] counts them).

pub mod cpu;
pub mod cuda;
pub mod gen;

pub use cuda::SortTemp;

use crate::error::{invalid, Error, Result};
use crate::{Backend, GpuContext};
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

/// A key type the radix sort orders: `u32` or `u64`.
pub trait SortKey:
    sealed::Sealed
    + Copy
    + Ord
    + Send
    + Sync
    + std::fmt::Debug
    + bytemuck::Pod
    + DeviceRepr
    + ValidAsZeroBits
    + 'static
{
    /// Bits of the key.
    const BITS: u32;
    /// The key, widened.
    fn to_u64(self) -> u64;
}

impl SortKey for u32 {
    const BITS: u32 = 32;
    fn to_u64(self) -> u64 {
        self as u64
    }
}

impl SortKey for u64 {
    const BITS: u32 = 64;
    fn to_u64(self) -> u64 {
        self
    }
}

/// How to sort: the bit range that orders the keys and the direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SortOptions {
    /// First bit of the range (0 = the least significant).
    pub begin_bit: u32,
    /// One past the last bit of the range; `None`: all the key's bits.
    pub end_bit: Option<u32>,
    /// Largest keys first (still stable: equal keys keep their input order).
    pub descending: bool,
}

impl SortOptions {
    /// Ascending by the bits `begin_bit..end_bit`.
    pub fn bits(begin_bit: u32, end_bit: u32) -> Self {
        Self {
            begin_bit,
            end_bit: Some(end_bit),
            descending: false,
        }
    }

    /// The same, descending.
    pub fn descending(self) -> Self {
        Self {
            descending: true,
            ..self
        }
    }

    /// The checked bit range `(begin_bit, end_bit)` for keys of type `K`.
    pub fn range<K: SortKey>(&self) -> Result<(u32, u32)> {
        let end = self.end_bit.unwrap_or(K::BITS);
        if end > K::BITS {
            return Err(invalid(
                "sort bit range",
                format!("end_bit {end} is past the {} bits of the key", K::BITS),
            ));
        }
        if self.begin_bit > end {
            return Err(invalid(
                "sort bit range",
                format!("begin_bit {} is after end_bit {end}", self.begin_bit),
            ));
        }
        Ok((self.begin_bit, end))
    }

    /// Number of 8-bit digit passes for keys of type `K` (0 for an empty range).
    pub fn passes<K: SortKey>(&self) -> Result<u32> {
        let (b, e) = self.range::<K>()?;
        Ok(detkit_gpu::sort::passes(b, e))
    }
}

/// Checks a sort of `n` items (values of `value_bytes` bytes, 0 without values).
pub(crate) fn check<K: SortKey>(n: usize, value_bytes: usize, opts: &SortOptions) -> Result<()> {
    opts.range::<K>()?;
    if n as u64 > u32::MAX as u64 {
        return Err(Error::CapacityExceeded {
            what: "sort length",
            needed: n as u64,
            capacity: u32::MAX as u64,
        });
    }
    check_value_bytes(value_bytes)
}

pub(crate) fn check_value_bytes(value_bytes: usize) -> Result<()> {
    if ![0, 4, 8, 12, 16].contains(&value_bytes) {
        return Err(invalid(
            "sort values",
            format!(
                "values of {value_bytes} bytes; 4, 8, 12 or 16 are supported (sort a u32 index \
                 and gather for other sizes)"
            ),
        ));
    }
    Ok(())
}

impl Backend {
    /// Stable sort of `u32` keys by the bits `opts` names.
    pub fn sort_keys_u32(&self, keys: &[u32], opts: SortOptions) -> Result<Vec<u32>> {
        self.sort_keys(keys, opts)
    }

    /// Stable sort of `u64` keys by the bits `opts` names.
    pub fn sort_keys_u64(&self, keys: &[u64], opts: SortOptions) -> Result<Vec<u64>> {
        self.sort_keys(keys, opts)
    }

    /// Stable sort of `u32` keys and their values (any `Pod` of 4, 8, 12 or 16 bytes).
    pub fn sort_pairs_u32<V: bytemuck::Pod>(
        &self,
        keys: &[u32],
        values: &[V],
        opts: SortOptions,
    ) -> Result<(Vec<u32>, Vec<V>)> {
        self.sort_pairs(keys, values, opts)
    }

    /// Stable sort of `u64` keys and their values (any `Pod` of 4, 8, 12 or 16 bytes).
    pub fn sort_pairs_u64<V: bytemuck::Pod>(
        &self,
        keys: &[u64],
        values: &[V],
        opts: SortOptions,
    ) -> Result<(Vec<u64>, Vec<V>)> {
        self.sort_pairs(keys, values, opts)
    }

    /// Stable sort of keys of either key type.
    pub fn sort_keys<K: SortKey>(&self, keys: &[K], opts: SortOptions) -> Result<Vec<K>> {
        check::<K>(keys.len(), 0, &opts)?;
        match self.gpu() {
            None => Ok(cpu::sort_keys(keys, &opts)),
            Some(gpu) => {
                if keys.is_empty() {
                    return Ok(Vec::new());
                }
                let d_in = gpu.upload(keys)?;
                let mut d_out = gpu.zeros::<K>(keys.len())?;
                gpu.sort_keys_device(&d_in, &mut d_out, keys.len(), opts)?;
                gpu.download(&d_out)
            }
        }
    }

    /// Stable sort of keys of either key type and their values (any `Pod` of 4, 8, 12 or
    /// 16 bytes, as many as keys).
    pub fn sort_pairs<K: SortKey, V: bytemuck::Pod>(
        &self,
        keys: &[K],
        values: &[V],
        opts: SortOptions,
    ) -> Result<(Vec<K>, Vec<V>)> {
        let vb = std::mem::size_of::<V>();
        check::<K>(keys.len(), vb, &opts)?;
        if vb == 0 {
            return Err(invalid("sort values", "values of 0 bytes"));
        }
        if values.len() != keys.len() {
            return Err(invalid(
                "sort values",
                format!("{} values for {} keys", values.len(), keys.len()),
            ));
        }
        match self.gpu() {
            None => Ok(cpu::sort_pairs(keys, values, &opts)),
            Some(gpu) => {
                if keys.is_empty() {
                    return Ok((Vec::new(), Vec::new()));
                }
                let n = keys.len();
                let d_keys = gpu.upload(keys)?;
                let d_vals = gpu.upload(bytemuck::cast_slice::<V, u8>(values))?;
                let mut k_out = gpu.zeros::<K>(n)?;
                let mut v_out = gpu.zeros::<u8>(n * vb)?;
                gpu.sort_pairs_bytes_device(&d_keys, &mut k_out, &d_vals, &mut v_out, vb, n, opts)?;
                let k = gpu.download(&k_out)?;
                let mut v = vec![V::zeroed(); n];
                bytemuck::cast_slice_mut::<V, u8>(&mut v).copy_from_slice(&gpu.download(&v_out)?);
                Ok((k, v))
            }
        }
    }
}

/// The launches one device sort of `n` keys makes (what [`GpuContext::sort_launches`]
/// counts): 0 for `n == 0` or an empty bit range, 1 up to `SINGLE_TILE` keys, else
/// `1 + passes`.
pub fn launches_for<K: SortKey>(n: usize, opts: &SortOptions) -> Result<u64> {
    let passes = opts.passes::<K>()? as u64;
    Ok(if n == 0 || passes == 0 {
        0
    } else if n <= detkit_gpu::sort::SINGLE_TILE as usize {
        1
    } else {
        1 + passes
    })
}

impl GpuContext {
    /// Kernel launches made by this context's device sorts so far (see [`launches_for`]).
    pub fn sort_launches(&self) -> u64 {
        self.with_scratch(|t: &mut SortTemp| t.launches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_over_u32_are_capacity_errors() {
        let opts = SortOptions::default();
        assert!(check::<u32>(u32::MAX as usize, 0, &opts).is_ok());
        assert!(matches!(
            check::<u32>(1 << 32, 4, &opts),
            Err(Error::CapacityExceeded { .. })
        ));
        assert!(matches!(
            check::<u64>(10, 6, &opts),
            Err(Error::InvalidInput { .. })
        ));
    }
}
