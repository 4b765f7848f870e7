//! Host staging for the [`crate::Backend`] calls: page-locked (pinned) buffers that are grown
//! on demand and reused, and the copies through them.
//!
//! A copy from pageable memory makes the driver stage it through its own small pinned buffers
//! and return only when the host side is done; a copy from pinned memory is one asynchronous
//! DMA. The calls copy the caller's data into a pinned buffer (several threads for large
//! arrays), launch the DMA and go on, so the copies of several arrays, the kernels and the
//! copies back run back to back on the stream. [`HostCopies::Pageable`] copies straight from
//! and to the caller's memory instead (`bench-host` measures both).

use cudarc::driver::{
    CudaView, DevicePtr, DevicePtrMut, DeviceRepr, PinnedHostSlice, ValidAsZeroBits,
};

use crate::cuda::GpuContext;
use crate::error::{DriverContext, Result};

/// How a [`crate::Backend`] call moves host data to and from the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostCopies {
    /// Through pinned staging buffers that the backend keeps (the default).
    #[default]
    Pinned,
    /// Straight from and to the caller's (pageable) memory.
    Pageable,
}

/// Bytes per piece of a parallel host copy: about 5 µs of one core's copying, a few times
/// what handing a piece to a thread costs.
const PAR_COPY_BYTES: usize = 64 << 10;

/// Bytes below which one thread copies: waking the pool's sleeping threads costs tens of
/// µs, about what one core takes to copy this much (see docs/benchmarks.md, "Front door,
/// session 9").
const SERIAL_COPY_BYTES: usize = 512 << 10;

/// Copies `src` into `dst` (equal lengths), in pieces on several threads when large.
pub(crate) fn par_copy<T: Copy + Send + Sync>(dst: &mut [T], src: &[T]) {
    use rayon::prelude::*;
    let piece = (PAR_COPY_BYTES / std::mem::size_of::<T>().max(1)).max(1);
    if std::mem::size_of_val(src) <= SERIAL_COPY_BYTES {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(piece)
            .zip(src.par_chunks(piece))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }
}

/// A pinned host buffer, grown on demand (by at least half again, so that a slowly growing
/// input reallocates rarely), never shrunk.
pub(crate) struct Pinned<T> {
    buf: Option<PinnedHostSlice<T>>,
    write_combined: bool,
}

impl<T> Pinned<T> {
    /// An empty buffer: `write_combined` for memory the host only writes (uploads).
    pub(crate) fn new(write_combined: bool) -> Self {
        Self {
            buf: None,
            write_combined,
        }
    }
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy> Pinned<T> {
    /// The first `n` elements, after growing the buffer to hold them. The caller makes sure
    /// that no copy issued earlier still reads or writes the buffer (the calls synchronise
    /// before they return; queues wait for the lane that used it).
    pub(crate) fn get(&mut self, gpu: &GpuContext, n: usize) -> Result<&mut [T]> {
        let have = self.buf.as_ref().map_or(0, |b| b.len());
        if have < n {
            self.buf = None;
            let len = n.max(have + have / 2);
            self.buf = Some(gpu.pinned::<T>(len, self.write_combined)?);
        }
        match self.buf.as_mut() {
            Some(b) => Ok(&mut b.as_mut_slice().ctx("mapping pinned host memory")?[..n]),
            None => Ok(&mut []),
        }
    }
}

/// Bytes per piece of a pipelined copy through pinned memory: the host copies piece `i + 1`
/// while the DMA engine moves piece `i`, so a large copy takes about the longer of the two
/// instead of their sum.
pub(crate) const PIPELINE_BYTES: usize = 4 << 20;

/// Copies `src` to `dst[..src.len()]` on `gpu`'s stream: through `stage` (copied into pinned
/// memory piece by piece, each piece's DMA launched at once, so host copies and DMA overlap)
/// or, without one, straight from `src`.
pub(crate) fn upload_into<T, D>(
    gpu: &GpuContext,
    src: &[T],
    dst: &mut D,
    stage: Option<&mut [T]>,
) -> Result<()>
where
    T: DeviceRepr + Copy + Send + Sync,
    D: DevicePtrMut<T>,
{
    if src.is_empty() {
        return Ok(());
    }
    let what = "copying to the device";
    let s = gpu.stream();
    // The raw copies below need the context current on this thread (cudarc's own calls bind
    // it themselves).
    gpu.context().bind_to_thread().ctx(what)?;
    match stage {
        Some(p) => {
            if dst.len() < src.len() {
                return Err(crate::error::invalid(
                    "upload",
                    format!("{} elements into a buffer of {}", src.len(), dst.len()),
                ));
            }
            let piece = (PIPELINE_BYTES / std::mem::size_of::<T>().max(1)).max(1);
            let p = &mut p[..src.len()];
            let (base, _record) = dst.device_ptr_mut(s);
            for (i, (d, h)) in p.chunks_mut(piece).zip(src.chunks(piece)).enumerate() {
                par_copy(d, h);
                let at = base + (i * piece * std::mem::size_of::<T>()) as u64;
                // SAFETY: `dst` holds at least `src.len()` elements (checked above), so
                // `at .. at + size_of_val(d)` lies inside it; `d` is pinned host memory that
                // nobody writes until the stream has finished this copy (the callers wait
                // before reusing a stage).
                unsafe { cudarc::driver::result::memcpy_htod_async(at, &*d, s.cu_stream()) }
                    .ctx(what)?;
            }
            Ok(())
        }
        None => s.memcpy_htod(src, dst).ctx(what),
    }
}

/// [`upload_into`] through pinned `stage` with a check of every piece on the way: the threads
/// that copy a part of a piece into pinned memory test it right after (`bad(part, index of
/// its first element in src)`), while it is still in their cache, so the input is read
/// once and the check overlaps the DMA of the previous piece. Returns `Ok(true)` as soon as
/// a piece is found bad (after waiting for the DMA already issued; the caller names the
/// error with its own full check, so it is the same error as a check before the copy), else
/// `Ok(false)` with every piece's DMA issued.
pub(crate) fn upload_checked<T, D>(
    gpu: &GpuContext,
    src: &[T],
    dst: &mut D,
    stage: &mut [T],
    bad: impl Fn(&[T], usize) -> bool + Sync,
) -> Result<bool>
where
    T: DeviceRepr + Copy + Send + Sync,
    D: DevicePtrMut<T>,
{
    use rayon::prelude::*;
    if src.is_empty() {
        return Ok(false);
    }
    let what = "copying to the device";
    if dst.len() < src.len() || stage.len() < src.len() {
        return Err(crate::error::invalid(
            "upload",
            format!(
                "{} elements into a buffer of {} through a stage of {}",
                src.len(),
                dst.len(),
                stage.len()
            ),
        ));
    }
    let s = gpu.stream();
    gpu.context().bind_to_thread().ctx(what)?;
    let size = std::mem::size_of::<T>().max(1);
    let piece = (PIPELINE_BYTES / size).max(1);
    let part = (PAR_COPY_BYTES / size).max(1);
    let p = &mut stage[..src.len()];
    let (base, _record) = dst.device_ptr_mut(s);
    for (i, (d, h)) in p.chunks_mut(piece).zip(src.chunks(piece)).enumerate() {
        let first = i * piece;
        let found = if std::mem::size_of_val(h) <= SERIAL_COPY_BYTES {
            d.copy_from_slice(h);
            bad(h, first)
        } else {
            d.par_chunks_mut(part)
                .zip(h.par_chunks(part))
                .enumerate()
                .map(|(j, (d, h))| {
                    d.copy_from_slice(h);
                    bad(h, first + j * part)
                })
                .reduce(|| false, |a, b| a | b)
        };
        if found {
            // The pieces already sent still read the stage: done before it is reused.
            s.synchronize().ctx(what)?;
            return Ok(true);
        }
        let at = base + (first * size) as u64;
        // SAFETY: `dst` holds at least `src.len()` elements (checked above), so
        // `at .. at + size_of_val(d)` lies inside it; `d` is pinned host memory that nobody
        // writes until the stream has finished this copy (the callers wait before reusing a
        // stage).
        unsafe { cudarc::driver::result::memcpy_htod_async(at, &*d, s.cu_stream()) }.ctx(what)?;
    }
    Ok(false)
}

/// Copies `src` (device) into `dst` (host, the same length) on `gpu`'s stream and waits:
/// through `stage` (DMA into pinned memory piece by piece, each piece copied out by the host
/// as soon as it has landed while the next one moves) or, without one, straight into `dst`.
pub(crate) fn download_into<T>(
    gpu: &GpuContext,
    src: &CudaView<'_, T>,
    dst: &mut [T],
    stage: Option<&mut [T]>,
) -> Result<()>
where
    T: DeviceRepr + Copy + Send + Sync,
{
    let what = "copying from the device";
    if dst.is_empty() {
        return Ok(());
    }
    if src.len() < dst.len() {
        return Err(crate::error::invalid(
            "download",
            format!("{} elements asked of a buffer of {}", dst.len(), src.len()),
        ));
    }
    let s = gpu.stream();
    gpu.context().bind_to_thread().ctx(what)?;
    match stage {
        Some(p) => {
            let piece = (PIPELINE_BYTES / std::mem::size_of::<T>().max(1)).max(1);
            let p = &mut p[..dst.len()];
            let (base, _record) = src.device_ptr(s);
            let mut landed = Vec::new();
            for (i, h) in p.chunks_mut(piece).enumerate() {
                let at = base + (i * piece * std::mem::size_of::<T>()) as u64;
                // SAFETY: `src` holds at least `dst.len()` elements (checked above), so
                // `at .. at + size_of_val(h)` lies inside it; `h` is pinned host memory read
                // only after the event recorded behind this copy has completed.
                unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut *h, at, s.cu_stream()) }
                    .ctx(what)?;
                landed.push(
                    s.record_event(Some(
                        cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
                    ))
                    .ctx(what)?,
                );
            }
            for ((h, d), e) in p.chunks(piece).zip(dst.chunks_mut(piece)).zip(&landed) {
                e.synchronize().ctx(what)?;
                par_copy(d, h);
            }
            Ok(())
        }
        None => {
            s.memcpy_dtoh(&src.slice(0..dst.len()), dst).ctx(what)?;
            s.synchronize().ctx(what)
        }
    }
}
