//! Scan launchers on [`GpuContext`] and the look-back state they reuse.

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use detkit_gpu::scan::{self as k, ScanKind};
use detkit_gpu::DevPtr;

use super::check_block_size;
use crate::cuda::{cfg, DeviceBuffer, GpuContext, MAX_GRID};
use crate::error::{invalid, DriverContext, Result};

/// Reusable look-back state: tile status words (2 per tile), aggregates, inclusive prefixes.
/// Grown on demand and kept between calls so that timed runs allocate nothing.
#[derive(Default)]
pub struct ScanTemp {
    pub(crate) flags: Option<DeviceBuffer<u32>>,
    pub(crate) agg32: Option<DeviceBuffer<u32>>,
    pub(crate) inc32: Option<DeviceBuffer<u32>>,
    pub(crate) agg64: Option<DeviceBuffer<u64>>,
    pub(crate) inc64: Option<DeviceBuffer<u64>>,
}

fn grow<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &GpuContext,
    slot: &mut Option<DeviceBuffer<T>>,
    n: usize,
) -> Result<()> {
    if slot.as_ref().is_none_or(|b| b.len() < n) {
        *slot = Some(gpu.zeros(n.max(1))?);
    }
    Ok(())
}

/// A value type the device scan supports (`u32`, `u64`).
pub trait DeviceScanValue: DeviceRepr + ValidAsZeroBits + crate::scan::cpu::Summable {
    /// Kernel name.
    const KERNEL: &'static str;
    /// Bytes per value.
    const BYTES: usize;
    /// The kernel's parameter struct.
    type Params: detkit_gpu::KernelParams;
    /// The parameters of one device scan.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn params(
        input: DevPtr<Self>,
        output: DevPtr<Self>,
        n: u64,
        kind: u32,
        flags: DevPtr<u32>,
        aggregates: DevPtr<Self>,
        inclusive: DevPtr<Self>,
    ) -> Self::Params;
    #[doc(hidden)]
    fn slots(
        t: &mut ScanTemp,
    ) -> (
        &mut Option<DeviceBuffer<Self>>,
        &mut Option<DeviceBuffer<Self>>,
    );
}
/// `DeviceScanValue` for one value type: its kernel, parameter struct, size and scratch slots.
macro_rules! device_scan_value {
    ($t:ty, $kernel:ident, $params:ident, $bytes:expr, $agg:ident, $inc:ident) => {
        impl DeviceScanValue for $t {
            const KERNEL: &'static str = k::$kernel;
            type Params = k::$params;
            fn params(
                input: DevPtr<$t>,
                output: DevPtr<$t>,
                n: u64,
                kind: u32,
                flags: DevPtr<u32>,
                aggregates: DevPtr<$t>,
                inclusive: DevPtr<$t>,
            ) -> k::$params {
                k::$params {
                    input,
                    output,
                    n,
                    flags,
                    aggregates,
                    inclusive,
                    kind,
                    lookback_ns: crate::tuning::Tuned::LookbackNs.current().1,
                }
            }
            const BYTES: usize = $bytes;
            fn slots(
                t: &mut ScanTemp,
            ) -> (&mut Option<DeviceBuffer<$t>>, &mut Option<DeviceBuffer<$t>>) {
                (&mut t.$agg, &mut t.$inc)
            }
        }
    };
}
device_scan_value!(
    u32,
    KERNEL_DEVICE_SCAN_U32,
    ScanDeviceU32Params,
    4,
    agg32,
    inc32
);
device_scan_value!(
    u64,
    KERNEL_DEVICE_SCAN_U64,
    ScanDeviceU64Params,
    8,
    agg64,
    inc64
);

/// The look-back state of one single-pass launch, taken from the context's pool.
pub(crate) struct Lookback<T: DeviceScanValue> {
    pub flags: DeviceBuffer<u32>,
    pub agg: DeviceBuffer<T>,
    pub inc: DeviceBuffer<T>,
}

impl GpuContext {
    /// Takes look-back state for `tiles` tiles from the pool (allocating if it is too small)
    /// and zeroes the status words on the stream.
    pub(crate) fn take_lookback<T: DeviceScanValue>(&self, tiles: u64) -> Result<Lookback<T>> {
        if tiles > MAX_GRID {
            return Err(crate::Error::CapacityExceeded {
                what: "single-pass tiles",
                needed: tiles,
                capacity: MAX_GRID,
            });
        }
        let tiles = tiles as usize;
        let mut lb = self.with_scratch(|pool: &mut ScanTemp| -> Result<Lookback<T>> {
            grow(self, &mut pool.flags, 2 * tiles)?;
            let (a, i) = T::slots(pool);
            grow(self, a, tiles)?;
            grow(self, i, tiles)?;
            let (agg, inc) = (a.take().expect("grown"), i.take().expect("grown"));
            Ok(Lookback {
                flags: pool.flags.take().expect("grown"),
                agg,
                inc,
            })
        })?;
        let mut fl = lb.flags.slice_mut(0..2 * tiles);
        self.stream()
            .memset_zeros(&mut fl)
            .ctx("zeroing look-back flags")?;
        Ok(lb)
    }

    /// Returns look-back state to the pool.
    pub(crate) fn put_lookback<T: DeviceScanValue>(&self, lb: Lookback<T>) {
        self.with_scratch(|pool: &mut ScanTemp| {
            pool.flags = Some(lb.flags);
            let (a, i) = T::slots(pool);
            *a = Some(lb.agg);
            *i = Some(lb.inc);
        })
    }

    /// Device-wide scan of the first `n` elements of `input` into `output`.
    pub fn scan_device<T: DeviceScanValue>(
        &self,
        input: &DeviceBuffer<T>,
        output: &mut DeviceBuffer<T>,
        n: usize,
        kind: ScanKind,
    ) -> Result<()> {
        if input.len() < n || output.len() < n {
            return Err(invalid(
                "scan buffers",
                format!(
                    "n = {n} but input holds {} and output {}",
                    input.len(),
                    output.len()
                ),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        // The u32 scan's tile shape (`crate::tuning`; the default unless a benchmark chose).
        let (kernel, threads, tiles) = if T::KERNEL == k::KERNEL_DEVICE_SCAN_U32 {
            let (kernel, threads, items) = crate::tuning::Tuned::ScanU32.current();
            (
                kernel,
                threads,
                (n as u64).div_ceil(threads as u64 * items as u64),
            )
        } else {
            (
                T::KERNEL,
                k::DEVICE_SCAN_THREADS,
                k::device_scan_tiles(n as u64, T::BYTES),
            )
        };
        let mut lb = self.take_lookback::<T>(tiles)?;
        let params = T::params(
            self.ptr(input),
            self.ptr_mut(&mut *output),
            n as u64,
            kind as u32,
            self.ptr_mut(&mut lb.flags),
            self.ptr_mut(&mut lb.agg),
            self.ptr_mut(&mut lb.inc),
        );
        // SAFETY: launch contract of `scan_device_u32/u64` (and the u32 shapes): the shape's
        // threads, one block per tile of its size, `device_scan_smem_bytes` of shared memory; input and output hold
        // n elements (checked), are distinct allocations (borrows) and 256-byte aligned
        // (cudarc allocations); the status words (2 per tile) were zeroed on this stream and
        // the arrays hold at least `tiles` entries.
        let r = unsafe {
            self.launch(
                kernel,
                cfg(tiles, threads, k::device_scan_smem_bytes(T::BYTES)),
                &params,
            )
        };
        self.put_lookback(lb);
        r
    }

    /// Block scan (test primitive): each run of `block` elements scanned on its own; returns
    /// the scan and the per-block totals.
    pub fn block_scan_u32(
        &self,
        input: &DeviceBuffer<u32>,
        output: &mut DeviceBuffer<u32>,
        totals: &mut DeviceBuffer<u32>,
        n: usize,
        block: u32,
        kind: ScanKind,
    ) -> Result<()> {
        check_block_size(block)?;
        let blocks = (n as u64).div_ceil(block as u64);
        if input.len() < n || output.len() < n || (totals.len() as u64) < blocks {
            return Err(invalid(
                "block scan buffers",
                "shorter than n or than the number of blocks",
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let params = k::ScanBlockU32Params {
            input: self.ptr(input),
            output: self.ptr_mut(&mut *output),
            totals: self.ptr_mut(&mut *totals),
            n: n as u64,
            kind: kind as u32,
            _pad0: 0,
        };
        // SAFETY: `block` is a multiple of 32 up to 1024 (checked); buffers hold n elements
        // and one total per block (checked); shared memory sized by `block_scan_smem_bytes`.
        unsafe {
            self.launch(
                k::KERNEL_BLOCK_SCAN_U32,
                cfg(blocks, block, k::block_scan_smem_bytes(4)),
                &params,
            )
        }
    }
}
