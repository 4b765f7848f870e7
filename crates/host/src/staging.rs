//! Host staging for the [`crate::Backend`] calls: page-locked (pinned) buffers that are grown
//! on demand and reused, and the copies through them.
//!
//! A copy from pageable memory makes the driver stage it through its own small pinned buffers
//! and return only when the host side is done; a copy from pinned memory is one asynchronous
//! DMA. The calls copy the caller's data into a pinned buffer (several threads for large
//! arrays), launch the DMA and go on, so the copies of several arrays, the kernels and the
//! copies back run back to back on the stream. [`HostCopies::Pageable`] copies straight from
//! and to the caller's memory instead (`bench-host` measures both).

use cudarc::driver::{DevicePtrMut, DeviceRepr, PinnedHostSlice, ValidAsZeroBits};

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

/// Elements per piece of a parallel host copy: below this a copy is done by one thread.
const PAR_COPY: usize = 1 << 17;

/// Copies `src` into `dst` (equal lengths), in pieces on several threads when large.
pub(crate) fn par_copy<T: Copy + Send + Sync>(dst: &mut [T], src: &[T]) {
    use rayon::prelude::*;
    if src.len() <= PAR_COPY {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(PAR_COPY)
            .zip(src.par_chunks(PAR_COPY))
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

/// Copies `src` to `dst[..src.len()]` on `gpu`'s stream: through `stage` (copied into pinned
/// memory, then one asynchronous DMA) or, without one, straight from `src`.
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
    match stage {
        Some(p) => {
            let p = &mut p[..src.len()];
            par_copy(p, src);
            gpu.stream().memcpy_htod(&*p, dst).ctx(what)
        }
        None => gpu.stream().memcpy_htod(src, dst).ctx(what),
    }
}
