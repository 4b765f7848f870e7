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
    let piece = (PAR_COPY_BYTES / std::mem::size_of::<T>().max(1)).max(1);
    if std::mem::size_of_val(src) <= SERIAL_COPY_BYTES {
        dst.copy_from_slice(src);
    } else {
        // The parts in order with the calling thread working too ([`parts_in_order`]): it
        // starts at once instead of waiting for the pool to take the whole loop.
        assert_eq!(dst.len(), src.len(), "par_copy: lengths differ");
        let n = src.len();
        let base = dst.as_mut_ptr() as usize;
        parts_in_order(n.div_ceil(piece), &|k| {
            let (lo, hi) = (k * piece, ((k + 1) * piece).min(n));
            // SAFETY: `lo..hi` lies inside `dst` (as long as `src`), and part `k` is handed
            // to one thread only, so no two threads write the same elements; `dst` is not
            // otherwise used until every part is done (`parts_in_order` returns after).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src[lo..hi].as_ptr(),
                    (base as *mut T).add(lo),
                    hi - lo,
                )
            };
            true
        });
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

impl<T> Pinned<T> {
    /// Elements the buffer holds now (a [`Pinned::get`] of at most this many keeps its
    /// contents).
    pub(crate) fn capacity(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len())
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
            let (base, _record) = dst.device_ptr_mut(s);
            stream_up(gpu, src, base, p, &|_, _| false).map(|_| ())
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
    let (base, _record) = dst.device_ptr_mut(s);
    stream_up(gpu, src, base, stage, &bad)
}

/// Bytes per DMA of a streamed copy ([`stream_up`]): small enough that the
/// DMA starts soon after the first parts are copied, large enough that the copy engine runs
/// at full speed.
const STREAM_PIECE_BYTES: usize = 2 << 20;

/// The first error of the pool's threads in a streamed copy (a DMA that could not be
/// issued), kept while the others go on stopping.
#[derive(Default)]
struct FirstError(std::sync::Mutex<Option<crate::Error>>);

impl FirstError {
    /// Keeps `e` unless an error is kept already.
    fn keep(&self, e: crate::Error) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(e);
    }

    /// The kept error, after waiting for the DMAs issued before it on `s` (their pinned
    /// memory is the caller's to reuse once this returns); `Ok` when there is none.
    fn finish(self, s: &cudarc::driver::CudaStream) -> Result<()> {
        match self.0.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => {
                let _ = s.synchronize();
                Err(e)
            }
            None => Ok(()),
        }
    }
}

/// Runs `work(k)` for the parts `k = 0..n` on the pool's threads, handed out in increasing
/// order (one atomic counter), so that the parts finish about in order; stops handing out
/// parts once `work` returns `false`.
fn parts_in_order(n: usize, work: &(dyn Fn(usize) -> bool + Sync)) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let run = || loop {
        let k = next.fetch_add(1, Relaxed);
        if k >= n || stop.load(Relaxed) {
            break;
        }
        if !work(k) {
            stop.store(true, Relaxed);
        }
    };
    let threads = rayon::current_num_threads().min(n);
    if threads <= 1 {
        run();
    } else {
        // In place: a calling thread outside the pool starts on the parts at once instead
        // of waiting for a pool thread to take the scope's body (a wake-up per call).
        rayon::in_place_scope(|sc| {
            for _ in 1..threads {
                sc.spawn(|_| run());
            }
            run();
        });
    }
}

/// Runs `work(k)` for the parts `k = 0..n` on the pool's threads, handed out in increasing
/// order, while the calling thread runs `ready(j)` for each group `j` of `per` consecutive
/// parts, in order, as soon as every part of the group is done: the calling thread issues
/// (for example) a group's DMA while the pool works on later parts. A part for which
/// `work` returns `false` stops the handing out and the groups (every part handed out is
/// finished before this returns); an error of `ready` stops them too and is returned.
pub(crate) fn parts_then_groups(
    n: usize,
    per: usize,
    work: &(dyn Fn(usize) -> bool + Sync),
    ready: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let per = per.max(1);
    let groups = n.div_ceil(per);
    let left: Vec<AtomicUsize> = (0..groups)
        .map(|j| AtomicUsize::new(((j + 1) * per).min(n) - j * per))
        .collect();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    // One part: `false` once none is left (or a part failed).
    let step = || {
        let k = next.fetch_add(1, Ordering::Relaxed);
        if k >= n || stop.load(Ordering::Relaxed) {
            return false;
        }
        if work(k) {
            left[k / per].fetch_sub(1, Ordering::AcqRel);
        } else {
            stop.store(true, Ordering::Release);
        }
        true
    };
    let run = || while step() {};
    // A calling thread outside the pool takes parts too between its groups, instead of
    // spinning.
    let helps = rayon::current_thread_index().is_none();
    let mut result = Ok(());
    let threads = rayon::current_num_threads().min(n).max(1);
    rayon::in_place_scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|_| run());
        }
        // One group (a small call): the calling thread, outside the pool, takes parts too
        // while the pool's threads wake.
        if groups == 1 && rayon::current_thread_index().is_none() {
            run();
        }
        for (j, left) in left.iter().enumerate() {
            while left.load(Ordering::Acquire) != 0 {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                if helps && step() {
                    continue;
                }
                // On a pool thread, help with the parts; else let the pool's threads run.
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    std::thread::yield_now();
                }
            }
            if let Err(e) = ready(j) {
                stop.store(true, Ordering::Release);
                result = Err(e);
                return;
            }
        }
    });
    result
}

/// Copies `src` to the device at `base` through pinned `stage`, streamed: the pool's threads
/// copy parts of 64 KiB into `stage` in increasing order (each part tested by `bad` right
/// after its copy, with the index of its first element), and the thread that completes the
/// last part of a piece of [`STREAM_PIECE_BYTES`] issues that piece's DMA at once. So the
/// DMA of the first pieces runs while later parts are copied, and no thread waits between
/// pieces. Small inputs are copied by the calling thread and sent in one DMA. Returns
/// `Ok(true)` when a part was bad (the DMA already issued is waited for first).
fn stream_up<T>(
    gpu: &GpuContext,
    src: &[T],
    base: u64,
    stage: &mut [T],
    bad: &(dyn Fn(&[T], usize) -> bool + Sync),
) -> Result<bool>
where
    T: DeviceRepr + Copy + Send + Sync,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    let what = "copying to the device";
    let s = gpu.stream();
    let n = src.len();
    let size = std::mem::size_of::<T>().max(1);
    let stage = &mut stage[..n];
    // SAFETY (both DMA calls below): the caller's device buffer at `base` holds at least
    // `src.len()` elements, so each piece's range lies inside it; the piece's pinned memory
    // is not written again until the stream has finished this copy (the callers wait before
    // reusing a stage).
    if std::mem::size_of_val(src) <= SERIAL_COPY_BYTES {
        stage.copy_from_slice(src);
        if bad(src, 0) {
            return Ok(true);
        }
        // SAFETY: see above.
        unsafe { cudarc::driver::result::memcpy_htod_async(base, &*stage, s.cu_stream()) }
            .ctx(what)?;
        return Ok(false);
    }
    let part = (PAR_COPY_BYTES / size).max(1);
    let per_piece = (STREAM_PIECE_BYTES / PAR_COPY_BYTES).max(1);
    let piece = part * per_piece;
    let n_parts = n.div_ceil(part);
    let n_pieces = n.div_ceil(piece);
    // The threads write disjoint parts of the stage and the DMA reads whole pieces of it:
    // through its address, with no `&mut` borrow alive meanwhile.
    let stage_ptr = stage.as_mut_ptr() as usize;
    let left: Vec<AtomicUsize> = (0..n_pieces)
        .map(|j| AtomicUsize::new(((j + 1) * per_piece).min(n_parts) - j * per_piece))
        .collect();
    let found = std::sync::atomic::AtomicBool::new(false);
    let failed = FirstError::default();
    parts_in_order(n_parts, &|k| {
        let first = k * part;
        let h = &src[first..(first + part).min(n)];
        // SAFETY: part `k` (`first .. first + h.len()`, inside the stage's `n` elements) is
        // handed to this thread only, and its piece's DMA reads it only after this copy
        // (ordered by the piece's counter below).
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), (stage_ptr as *mut T).add(first), h.len())
        };
        if bad(h, first) {
            found.store(true, Ordering::Relaxed);
            return false;
        }
        let j = k / per_piece;
        if left[j].fetch_sub(1, Ordering::AcqRel) == 1 {
            // The piece's last part: every part of it is in the stage (the other threads'
            // copies happen before their decrements, acquired above).
            let lo = j * piece;
            let hi = ((j + 1) * piece).min(n);
            let r = gpu.context().bind_to_thread().ctx(what).and_then(|()| {
                // SAFETY: `lo..hi` lies inside the stage (`n` elements from `stage_ptr`), every
                // part of it was written (the decrements above order those writes before
                // this), and no thread writes it again during this call.
                let host =
                    unsafe { std::slice::from_raw_parts((stage_ptr as *const T).add(lo), hi - lo) };
                // SAFETY: see above.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(
                        base + (lo * size) as u64,
                        host,
                        s.cu_stream(),
                    )
                }
                .ctx(what)
            });
            if let Err(e) = r {
                failed.keep(e);
                return false;
            }
        }
        true
    });
    failed.finish(s)?;
    if found.load(Ordering::Relaxed) {
        s.synchronize().ctx(what)?;
        return Ok(true);
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
            // Piece by piece, each copied out as soon as it has landed.
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

/// Inputs up to which [`stream_up_many`] copies in parts of [`SMALL_PART_BYTES`].
const SMALL_STREAM_BYTES: usize = 4 << 20;

/// Bytes per part of a small streamed copy.
const SMALL_PART_BYTES: usize = 16 << 10;

/// Copies the arrays `srcs` to the device (array `i` to `bases[i]`, a device buffer of at
/// least `srcs[i].len()` elements) through pinned `stage` (the arrays one after the other),
/// streamed as [`stream_up`] streams one: the pool's threads (the calling thread first)
/// copy parts of 64 KiB in increasing order over all the arrays, and the thread that
/// completes a piece of [`STREAM_PIECE_BYTES`] of an array issues its DMA at once. One fork
/// for all the arrays (the clustering door's four digi columns), no check on the way: each
/// DMA is issued on `gpu`'s stream, none is waited for. Inputs of at most 512 KiB in all are
/// copied by the calling thread, one DMA per array.
pub(crate) fn stream_up_many<T>(
    gpu: &GpuContext,
    srcs: &[&[T]],
    bases: &[u64],
    stage: &mut [T],
) -> Result<()>
where
    T: DeviceRepr + Copy + Send + Sync,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    let what = "copying to the device";
    let total: usize = srcs.iter().map(|a| a.len()).sum();
    if bases.len() != srcs.len() || stage.len() < total {
        return Err(crate::error::invalid(
            "upload",
            format!(
                "{} arrays to {} buffers through a stage of {} elements for {total}",
                srcs.len(),
                bases.len(),
                stage.len()
            ),
        ));
    }
    let s = gpu.stream();
    gpu.context().bind_to_thread().ctx(what)?;
    let size = std::mem::size_of::<T>().max(1);
    // Where array `i` starts in the stage.
    let at: Vec<usize> = srcs
        .iter()
        .scan(0, |acc, a| {
            let o = *acc;
            *acc += a.len();
            Some(o)
        })
        .collect();
    let stage_ptr = stage.as_mut_ptr() as usize;
    // SAFETY (every DMA below): `bases[i]` holds at least `srcs[i].len()` elements (the
    // caller's contract), so each piece's range lies inside it; the piece's pinned memory is
    // not written again until the stream has finished this copy (the callers wait before
    // reusing a stage).
    let dma = |i: usize, lo: usize, hi: usize| -> Result<()> {
        // SAFETY: `at[i] + lo .. at[i] + hi` lies inside the stage (`total` elements from
        // `stage_ptr`) and was written before this call; nobody writes it during the copy.
        let host =
            unsafe { std::slice::from_raw_parts((stage_ptr as *const T).add(at[i] + lo), hi - lo) };
        // SAFETY: see above.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(
                bases[i] + (lo * size) as u64,
                host,
                s.cu_stream(),
            )
        }
        .ctx(what)
    };
    if total * size <= SERIAL_COPY_BYTES {
        for (i, a) in srcs.iter().enumerate() {
            stage[at[i]..at[i] + a.len()].copy_from_slice(a);
        }
        for (i, a) in srcs.iter().enumerate() {
            if !a.is_empty() {
                dma(i, 0, a.len())?;
            }
        }
        return Ok(());
    }
    // Small inputs (an event or a few) in smaller parts, so that the threads as they wake
    // find work left (the calling thread starts at once).
    let part_bytes = if total * size <= SMALL_STREAM_BYTES {
        SMALL_PART_BYTES
    } else {
        PAR_COPY_BYTES
    };
    let part = (part_bytes / size).max(1);
    let per_piece = (STREAM_PIECE_BYTES / part_bytes).max(1);
    let piece = part * per_piece;
    // Parts and pieces numbered over all the arrays: array `i` has parts
    // `first_part[i]..first_part[i + 1]` and pieces `first_piece[i]..first_piece[i + 1]`.
    let mut first_part = vec![0usize];
    let mut first_piece = vec![0usize];
    for a in srcs {
        first_part.push(first_part.last().copied().unwrap_or(0) + a.len().div_ceil(part));
        first_piece.push(first_piece.last().copied().unwrap_or(0) + a.len().div_ceil(piece));
    }
    let n_parts = *first_part.last().unwrap_or(&0);
    let left: Vec<AtomicUsize> = srcs
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            let parts = first_part[i + 1] - first_part[i];
            (0..a.len().div_ceil(piece))
                .map(move |j| AtomicUsize::new(((j + 1) * per_piece).min(parts) - j * per_piece))
        })
        .collect();
    let failed = FirstError::default();
    parts_in_order(n_parts, &|k| {
        let i = first_part.partition_point(|&f| f <= k) - 1;
        let kl = k - first_part[i];
        let a = srcs[i];
        let (lo, hi) = (kl * part, ((kl + 1) * part).min(a.len()));
        // SAFETY: part `k` (`at[i] + lo .. at[i] + hi`, inside the stage's `total`
        // elements) is handed to this thread only, and its piece's DMA reads it only after
        // this copy (ordered by the piece's counter below).
        unsafe {
            std::ptr::copy_nonoverlapping(
                a[lo..hi].as_ptr(),
                (stage_ptr as *mut T).add(at[i] + lo),
                hi - lo,
            )
        };
        let j = kl / per_piece;
        if left[first_piece[i] + j].fetch_sub(1, Ordering::AcqRel) == 1 {
            // The piece's last part: every part of it is in the stage (the other threads'
            // copies happen before their decrements, acquired above).
            let (plo, phi) = (j * piece, ((j + 1) * piece).min(a.len()));
            let r = gpu
                .context()
                .bind_to_thread()
                .ctx(what)
                .and_then(|()| dma(i, plo, phi));
            if let Err(e) = r {
                failed.keep(e);
                return false;
            }
        }
        true
    });
    failed.finish(s)
}

#[cfg(test)]
mod tests {
    use super::{par_copy, parts_then_groups};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Copies of every size class (serial, one part, many parts with a short last one) equal
    /// their source, from a thread outside the pool and from inside it.
    #[test]
    fn par_copy_copies_every_element() {
        for n in [0usize, 5, 100_000, 131_072, 1_000_003] {
            let src: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761))
                .collect();
            let mut dst = vec![0u32; n];
            par_copy(&mut dst, &src);
            assert!(dst == src, "n = {n}");
            let mut dst2 = vec![0u32; n];
            rayon::scope(|_| par_copy(&mut dst2, &src));
            assert!(dst2 == src, "n = {n}, in the pool");
        }
    }

    /// Groups come in order, each after all its parts; a failing part stops the groups
    /// from its own on, and every part before it is done.
    #[test]
    fn groups_follow_their_parts_in_order() {
        for (n, per, fail) in [
            (0, 4, None),
            (1, 4, None),
            (37, 4, None),
            (37, 4, Some(21)),
            (64, 8, Some(0)),
        ] {
            let done: Vec<AtomicBool> = (0..n).map(|_| AtomicBool::new(false)).collect();
            let work = |k: usize| {
                if Some(k) == fail {
                    return false;
                }
                done[k].store(true, Ordering::Release);
                true
            };
            let mut groups = Vec::new();
            let mut ready = |j: usize| {
                assert!((j * per..((j + 1) * per).min(n)).all(|k| done[k].load(Ordering::Acquire)));
                groups.push(j);
                Ok(())
            };
            parts_then_groups(n, per, &work, &mut ready).unwrap();
            let last = fail.map_or(n.div_ceil(per), |f| f / per);
            assert!(groups.iter().copied().eq(0..groups.len()), "{groups:?}");
            assert!(groups.len() <= last);
            match fail {
                None => assert_eq!(groups.len(), last),
                Some(f) => assert!((0..f).all(|k| done[k].load(Ordering::Acquire))),
            }
        }
    }
}
