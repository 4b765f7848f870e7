//! PET conversion of raw frames that are already on the device (a CuPy `uint8` array, a
//! DMA target of the acquisition): a borrowed device view in, the accepted singles in a new
//! device buffer out, no host round trip. The frames are copied device-to-device into the
//! workspace's frame buffer, converted by the same launcher as host frames
//! ([`GpuContext::pet_convert_device`]), the statistics read back (the one wait), and the
//! accepted singles copied device-to-device into a buffer of exactly their size. Frames need
//! no validation beyond their byte count (every frame is classified by the kernel and counted
//! in the statistics, as on the host path).

use std::marker::PhantomData;

use cudarc::driver::{result, DevicePtrMut};
use detkit_gpu::pet as k;

use super::cpu::ConvertStats;
use super::cuda::{ensure_len, stats_from_words};
use super::door::{frame_count_of, PetWorkspace, ScannerArg};
use crate::cuda::{DeviceBuffer, GpuContext};
use crate::error::{invalid, DriverContext, Result};
use crate::Backend;

/// Raw frames on the device (16 bytes each, the file format): a device address in the
/// backend's context and a byte count. What [`Backend::pet_convert_frames_device`] takes.
#[derive(Clone, Copy, Debug)]
pub struct FramesDev<'a> {
    addr: u64,
    bytes: usize,
    _memory: PhantomData<&'a [u8]>,
}

impl<'a> FramesDev<'a> {
    /// A view of `bytes` bytes at device address `addr`.
    ///
    /// # Safety
    /// `addr` is a device address in the context of the backend this view is given to,
    /// valid for reads of `bytes` bytes (any address when `bytes` is 0); the memory stays
    /// allocated and is not written from the moment the view is given to a call until that
    /// call returns. Work producing it on another stream is ordered before the backend's
    /// stream.
    pub unsafe fn from_raw(addr: u64, bytes: usize) -> Self {
        Self {
            addr,
            bytes,
            _memory: PhantomData,
        }
    }

    /// A view of a device buffer of this process, all its bytes. Safe: borrowed for `'a`.
    pub fn from_buffer(gpu: &GpuContext, frames: &'a DeviceBuffer<u8>) -> Self {
        Self {
            addr: gpu.ptr(frames).addr(),
            bytes: frames.len(),
            _memory: PhantomData,
        }
    }
}

/// Singles on the device: `len` records of 16 bytes (`Single`, two `u64` words each) in a
/// new buffer owned by the caller (at least one word).
pub struct SinglesDev {
    /// The records as words.
    pub words: DeviceBuffer<u64>,
    /// Number of singles.
    pub len: usize,
}

impl SinglesDev {
    /// The singles copied to the host (synchronises).
    pub fn to_host(&self, gpu: &GpuContext) -> Result<Vec<k::Single>> {
        let w = gpu.download(&self.words)?;
        Ok(bytemuck::cast_slice::<u64, k::Single>(&w[..2 * self.len]).to_vec())
    }
}

impl PetWorkspace {
    /// Converts device frames (see the module doc); `caller` is the backend's context,
    /// whose stream the frames are ordered on.
    pub(crate) fn convert_device(
        &mut self,
        caller: &GpuContext,
        frames: FramesDev<'_>,
        scanner: &(impl ScannerArg + ?Sized),
    ) -> Result<(SinglesDev, ConvertStats)> {
        let n = frame_count_of(frames.bytes)?;
        let ds = self.tables(scanner)?;
        let g = self.gpu.clone();
        ensure_len(&g, &mut self.frames, 16 * n.max(1))?;
        ensure_len(&g, &mut self.a, 2 * n.max(1))?;
        ensure_len(&g, &mut self.stats, k::STAT_WORDS)?;
        let s = g.stream();
        crate::outputs::order_after(s, caller.stream())?;
        if n > 0 {
            let what = "copying device frames";
            g.context().bind_to_thread().ctx(what)?;
            let d = self.frames.as_mut().expect("sized above");
            let (dst, _record) = d.device_ptr_mut(s);
            // SAFETY: `dst` holds at least `16 n` bytes (sized above); the source is valid
            // for `16 n` bytes and not written until this call returns
            // (`FramesDev::from_raw`'s contract); the copy is on the workspace's stream,
            // which this call waits for before it returns.
            unsafe { result::memcpy_dtod_async(dst, frames.addr, 16 * n, s.cu_stream()) }
                .ctx(what)?;
        }
        let (d_frames, a, stats) = (
            self.frames.as_ref().expect("sized above"),
            self.a.as_mut().expect("sized above"),
            self.stats.as_mut().expect("sized above"),
        );
        g.pet_convert_device(d_frames, n, &ds, a, 0, stats)?;
        let st = self.stats_out.get(&g, k::STAT_WORDS)?;
        s.memcpy_dtoh(&stats.slice(0..k::STAT_WORDS), st)
            .ctx("copying the conversion statistics")?;
        g.synchronize()?;
        let st = stats_from_words(st, n);
        let m = st.accepted as usize;
        // SAFETY: the `2 m` words read later are written by the copy below before this
        // returns; with no single the two words are never read.
        let mut words = unsafe { crate::outputs::alloc_output::<u64>(&g, 2 * m) }?;
        if m > 0 {
            s.memcpy_dtod(&a.slice(0..2 * m), &mut words.slice_mut(0..2 * m))
                .ctx("copying singles")?;
            g.synchronize()?;
        }
        Ok((SinglesDev { words, len: m }, st))
    }
}

impl Backend {
    /// Converts raw frames on the device ([`FramesDev`]) into accepted singles on the device
    /// ([`SinglesDev`]), with no host round trip: the singles and statistics of
    /// [`Backend::pet_convert_frames`] on the same bytes, bit for bit. The frames are read
    /// in the order of the backend's stream; the results are complete when this returns.
    /// CUDA backends only.
    pub fn pet_convert_frames_device(
        &self,
        frames: FramesDev<'_>,
        scanner: &(impl ScannerArg + ?Sized),
    ) -> Result<(SinglesDev, ConvertStats)> {
        frame_count_of(frames.bytes)?;
        let Some(gpu) = self.gpu() else {
            return Err(invalid(
                "frames",
                "device frames need a CUDA backend (this one runs on the CPU)",
            ));
        };
        self.ws.pet.run(
            gpu,
            || PetWorkspace::new(gpu),
            |w| w.convert_device(gpu, frames, scanner),
        )
    }
}
