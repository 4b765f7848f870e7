//! PET conversion of raw frames that are already on the device (a CuPy `uint8` array, a
//! DMA target of the acquisition): a borrowed device view in, the accepted singles in a new
//! device buffer out, no host round trip. The frames are copied device-to-device into the
//! workspace's frame buffer, converted by the same launcher as host frames
//! ([`PetLauncher::convert`]), the statistics read back (the one wait), and the
//! accepted singles copied device-to-device into a buffer of exactly their size. Frames need
//! no validation beyond their byte count (every frame is classified by the kernel and counted
//! in the statistics, as on the host path).
//!
//! Sort and coincidences of singles already on the device (issue 27: a `DeviceArray` from
//! Python, a CuPy array of records, an earlier call's [`SinglesDev`]) take a borrowed
//! [`SinglesView`] the same way: the singles copied device-to-device into the workspace (so
//! the caller's memory is free when the call returns), sorted ([`PetLauncher::sort_radix`])
//! or paired ([`PetLauncher::coincide_resident`]) there, the result copied into a new device
//! buffer of exactly its size ([`SinglesDev`], [`PairsDev`]). What they check on the device
//! (finite times, order) and how a fault is named: see `Backend::pet_sort_device`.

use std::marker::PhantomData;

use detkit_gpu::pet::{self as k, Coincidence, Single};

use super::cpu::{CoincideConfig, ConvertStats};
use super::cuda::{check_u32_len, ensure_len, stats_from_words};
use super::door::{frame_count_of, PetWorkspace, ScannerArg};
use super::launch::PetLauncher;
use crate::cuda::{DeviceBuffer, DeviceVec, GpuContext, Record};
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

/// Singles on the device in a new buffer owned by the caller: `len` typed records (the
/// buffer holds at least one). What the device-view calls return.
pub struct SinglesDev {
    /// The records (`len` of them are the result).
    pub singles: DeviceVec<Single>,
    /// Number of singles.
    pub len: usize,
}

impl SinglesDev {
    /// The singles copied to the host (synchronises).
    pub fn to_host(&self, gpu: &GpuContext) -> Result<Vec<Single>> {
        gpu.stream()
            .clone_dtoh(&self.singles.slice(0..self.len))
            .map(Record::unwrap_vec)
            .ctx("copying singles from the device")
    }

    /// A borrowed view of these singles, for the next device-view call.
    pub fn view(&self, gpu: &GpuContext) -> SinglesView<'_> {
        SinglesView {
            addr: gpu.ptr(&self.singles).addr(),
            len: self.len,
            _memory: PhantomData,
        }
    }
}

/// Coincidence pairs on the device in a new buffer owned by the caller: `len` typed records
/// (the buffer holds at least one), in time order.
pub struct PairsDev {
    /// The pairs (`len` of them are the result).
    pub pairs: DeviceVec<Coincidence>,
    /// Number of pairs.
    pub len: usize,
}

impl PairsDev {
    /// The pairs copied to the host (synchronises).
    pub fn to_host(&self, gpu: &GpuContext) -> Result<Vec<Coincidence>> {
        gpu.stream()
            .clone_dtoh(&self.pairs.slice(0..self.len))
            .map(Record::unwrap_vec)
            .ctx("copying pairs from the device")
    }
}

/// Singles on the device, borrowed (16-byte `Single` records): a device address in the
/// backend's context and a count. What [`Backend::pet_sort_device`] and
/// [`Backend::pet_coincide_device`] take.
#[derive(Clone, Copy, Debug)]
pub struct SinglesView<'a> {
    addr: u64,
    len: usize,
    _memory: PhantomData<&'a [Single]>,
}

impl<'a> SinglesView<'a> {
    /// A view of `len` singles at device address `addr`.
    ///
    /// # Safety
    /// `addr` is a device address in the context of the backend this view is given to,
    /// valid for reads of `16 len` bytes (any address when `len` is 0);
    /// the memory stays allocated and is not written from the moment the view is given to a
    /// call until that call returns. Work producing it on another stream is ordered before
    /// the backend's stream.
    pub unsafe fn from_raw(addr: u64, len: usize) -> Self {
        Self {
            addr,
            len,
            _memory: PhantomData,
        }
    }

    /// A view of the first `len` singles of a device buffer of this process (at most its
    /// length). Safe: borrowed for `'a`.
    pub fn from_buffer(gpu: &GpuContext, singles: &'a DeviceVec<Single>, len: usize) -> Self {
        Self {
            addr: gpu.ptr(singles).addr(),
            len: len.min(singles.len()),
            _memory: PhantomData,
        }
    }

    /// Number of singles.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view holds no single.
    pub fn is_empty(&self) -> bool {
        self.len == 0
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
        ensure_len(&g, &mut self.a, n.max(1))?;
        ensure_len(&g, &mut self.stats, k::STAT_WORDS)?;
        let s = g.stream();
        crate::outputs::order_after(s, caller.stream())?;
        let d = self.frames.as_mut().expect("sized above");
        // SAFETY: the source is valid for `16 n` bytes and not written until this call
        // returns (`FramesDev::from_raw`'s contract); this call waits for the workspace's
        // stream before it returns.
        unsafe { g.copy_in_raw(frames.addr, d, 16 * n, "copying device frames") }?;
        let (d_frames, a, stats) = (
            self.frames.as_ref().expect("sized above"),
            self.a.as_mut().expect("sized above"),
            self.stats.as_mut().expect("sized above"),
        );
        PetLauncher::with_plan(&g, self.plan).convert(d_frames, n, &ds, a, 0, stats)?;
        let st = self.stats_out.get(&g, k::STAT_WORDS)?;
        s.memcpy_dtoh(&stats.slice(0..k::STAT_WORDS), st)
            .ctx("copying the conversion statistics")?;
        g.synchronize()?;
        let st = stats_from_words(st, n);
        let m = st.accepted as usize;
        // SAFETY: the `m` singles read later are written by the copy below before this
        // returns; with no single the one record is never read.
        let mut singles = unsafe { crate::outputs::alloc_output::<Record<Single>>(&g, m) }?;
        if m > 0 {
            s.memcpy_dtod(&a.slice(0..m), &mut singles.slice_mut(0..m))
                .ctx("copying singles")?;
            g.synchronize()?;
        }
        Ok((SinglesDev { singles, len: m }, st))
    }
}

impl PetWorkspace {
    /// The singles of `view` copied device-to-device into `a` (sized, with `b`, for them),
    /// after the work issued so far on `caller`'s stream.
    fn take_in(&mut self, caller: &GpuContext, view: SinglesView<'_>) -> Result<usize> {
        let n = view.len;
        check_u32_len("singles", n)?;
        let g = self.gpu.clone();
        ensure_len(&g, &mut self.a, n.max(1))?;
        ensure_len(&g, &mut self.b, n.max(1))?;
        let s = g.stream();
        crate::outputs::order_after(s, caller.stream())?;
        let a = self.a.as_mut().expect("sized above");
        // SAFETY: the source is valid for `16 n` bytes and not written until this call
        // returns (`SinglesView::from_raw`'s contract); the call waits for the workspace's
        // stream before it returns.
        unsafe { g.copy_in_raw(view.addr, a, 16 * n, "copying device singles") }?;
        Ok(n)
    }

    /// The error of input the device flagged: the singles copied back and checked on the
    /// host by `check` (the host path's check, so the same error and index); `fallback` if
    /// the host finds nothing.
    fn host_error(
        &self,
        n: usize,
        check: impl FnOnce(&[Single]) -> Result<()>,
        fallback: crate::Error,
    ) -> Result<crate::Error> {
        let a = self.a.as_ref().expect("sized by take_in");
        let host = self
            .gpu
            .stream()
            .clone_dtoh(&a.slice(0..n))
            .map(Record::unwrap_vec)
            .ctx("copying singles back")?;
        Ok(check(&host).err().unwrap_or(fallback))
    }

    /// A new output buffer holding `n` singles of `a` (`from_b`: of `b`), complete when this
    /// returns.
    fn singles_out(&mut self, from_b: bool, n: usize) -> Result<SinglesDev> {
        let g = self.gpu.clone();
        // SAFETY: the `n` singles read later are written by the copy below before this
        // returns; with no single the one record is never read.
        let mut singles = unsafe { crate::outputs::alloc_output::<Record<Single>>(&g, n) }?;
        if n > 0 {
            let src = if from_b { &self.b } else { &self.a };
            let src = src.as_ref().expect("sized by take_in");
            g.stream()
                .memcpy_dtod(&src.slice(0..n), &mut singles.slice_mut(0..n))
                .ctx("copying singles")?;
        }
        g.synchronize()?;
        Ok(SinglesDev { singles, len: n })
    }

    /// Sorts device singles (see [`Backend::pet_sort_device`]).
    pub(crate) fn sort_device(
        &mut self,
        caller: &GpuContext,
        view: SinglesView<'_>,
    ) -> Result<SinglesDev> {
        let n = self.take_in(caller, view)?;
        let what = "singles to sort";
        if n <= 1 {
            // Nothing to sort; the one time is checked on the host (16 bytes back).
            let a = self.a.as_ref().expect("sized by take_in");
            let host = self
                .gpu
                .stream()
                .clone_dtoh(&a.slice(0..n))
                .map(Record::unwrap_vec)
                .ctx("copying singles back")?;
            super::par::check_times(&host, what)?;
            return self.singles_out(false, n);
        }
        let g = self.gpu.clone();
        let pet = PetLauncher::with_plan(&g, self.plan);
        let (a, b) = (
            self.a.as_ref().expect("sized by take_in"),
            self.b.as_mut().expect("sized by take_in"),
        );
        match pet.sort_radix_checked(a, b, 0, n, true)? {
            Some(in_b) => self.singles_out(in_b, n),
            None => Err(self.host_error(
                n,
                |s| super::par::check_times(s, what),
                invalid(what, "the device found a time that is not finite"),
            )?),
        }
    }

    /// Pairs device singles sorted by time (see [`Backend::pet_coincide_device`]).
    pub(crate) fn coincide_device(
        &mut self,
        caller: &GpuContext,
        view: SinglesView<'_>,
        c: &CoincideConfig,
    ) -> Result<PairsDev> {
        let n = self.take_in(caller, view)?;
        let g = self.gpu.clone();
        let pet = PetLauncher::with_plan(&g, self.plan);
        let a = self.a.as_ref().expect("sized by take_in");
        let flagged = invalid(
            "singles to pair",
            "the device found a fault the host does not",
        );
        if !pet.times_finite(a, 0, n)? {
            return Err(self.host_error(n, super::par::check_sorted, flagged)?);
        }
        let total = match pet.coincide_resident(&mut self.coincide, a, 0, n, c, f64::INFINITY) {
            Ok((total, _)) => total,
            // Out of order: the host's check names the first single, as on the host path.
            Err(e @ crate::Error::InvalidInput { .. }) => {
                return Err(self.host_error(n, super::par::check_sorted, e)?)
            }
            Err(e) => return Err(e),
        };
        // SAFETY: the `total` pairs read later are written by the copy below before this
        // returns; with no pair the one record is never read.
        let mut pairs = unsafe { crate::outputs::alloc_output::<Record<Coincidence>>(&g, total) }?;
        if total > 0 {
            let src = self
                .coincide
                .pairs()
                .filter(|p| p.len() >= total)
                .ok_or_else(|| invalid("pairs", "fewer pairs on the device than counted"))?;
            g.stream()
                .memcpy_dtod(&src.slice(0..total), &mut pairs.slice_mut(0..total))
                .ctx("copying pairs")?;
        }
        g.synchronize()?;
        Ok(PairsDev { pairs, len: total })
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
            || PetWorkspace::new(gpu, self.pet_plan),
            |w| w.convert_device(gpu, frames, scanner),
        )
    }

    /// Stable sort by time of singles on the device ([`SinglesView`]) into a new device
    /// buffer ([`SinglesDev`]), with no host round trip: the result of
    /// [`Backend::pet_sort`] on the same singles, bit for bit. The singles are read in the
    /// order of the backend's stream (copied device-to-device into the workspace, so the
    /// caller's memory is free when this returns); the result is complete when this
    /// returns. A time that is not finite is the host path's typed error, naming the same
    /// single (found by the device's range check, then named by the host's check on the
    /// singles copied back). CUDA backends only.
    pub fn pet_sort_device(&self, singles: SinglesView<'_>) -> Result<SinglesDev> {
        check_u32_len("singles to sort", singles.len)?;
        let gpu = self.device_only("singles")?;
        self.ws.pet.run(
            gpu,
            || PetWorkspace::new(gpu, self.pet_plan),
            |w| w.sort_device(gpu, singles),
        )
    }

    /// Coincidences of time-sorted singles on the device ([`SinglesView`]) into a new device
    /// buffer of pairs ([`PairsDev`]), with no host round trip: the pairs of
    /// [`Backend::pet_coincide`] on the same singles, bit for bit. Ordered and complete as
    /// [`Backend::pet_sort_device`]; unsorted singles or a time that is not finite are the
    /// host path's typed errors (the device flags them, the host names them on the singles
    /// copied back). CUDA backends only.
    pub fn pet_coincide_device(
        &self,
        singles: SinglesView<'_>,
        c: &CoincideConfig,
    ) -> Result<PairsDev> {
        c.validate()?;
        check_u32_len("singles", singles.len)?;
        let gpu = self.device_only("singles")?;
        self.ws.pet.run(
            gpu,
            || PetWorkspace::new(gpu, self.pet_plan),
            |w| w.coincide_device(gpu, singles, c),
        )
    }

    fn device_only(&self, what: &'static str) -> Result<&GpuContext> {
        self.gpu().ok_or_else(|| {
            invalid(
                what,
                "device singles need a CUDA backend (this one runs on the CPU)",
            )
        })
    }
}
