//! The CUDA context: one device, one stream, the kernel image loaded once (a cubin for the
//! device's architecture when one is embedded, else PTX: see [`crate::ptx`]), and the one
//! typed launch helper every family's launchers use. This module calls no family; the
//! families' reusable buffers are the typed fields of [`crate::scratch::Scratch`].
//!
//! `cudarc` loads `libcuda` at run time (`dynamic-loading`): nothing of CUDA is needed to
//! build detkit. [`GpuContext::new`] checks that the library is present before touching
//! cudarc (which panics when it is missing) and reports a typed error instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DevicePtrMut,
    DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;
use detkit_gpu::{DevPtr, KernelParams};

use crate::error::{DriverContext, Error, Result};
use crate::ptx::{Arch, Image, ImageKind};
use crate::scratch::{Scratch, ScratchSlot};

/// A buffer in device memory (cudarc's `CudaSlice`; allocations are 256-byte aligned).
pub type DeviceBuffer<T> = CudaSlice<T>;

/// A `#[repr(C)]` record of `detkit-gpu` (a [`bytemuck::Pod`] type such as `Seed` or
/// `Single`) as the element of a device buffer: [`DeviceVec<T>`] is a typed device vector of
/// `T`, the one way every family keeps records on the device.
///
/// cudarc's buffers take elements that implement its `DeviceRepr`; the shared record types
/// live in `detkit-gpu`, which depends on nothing but `bytemuck`, and Rust's orphan rule
/// forbids implementing cudarc's trait for them here, so this transparent wrapper carries
/// it. Host slices and vectors of `T` and of `Record<T>` convert into each other without a
/// copy ([`Record::slice`], [`Record::unwrap_slice`], [`Record::unwrap_vec`]).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Record<T>(pub T);

// SAFETY: `Record<T>` is `#[repr(transparent)]` over a `Pod` `T`: plain bytes, any bit
// pattern valid, no padding, `Copy`.
unsafe impl<T: bytemuck::Pod> bytemuck::Zeroable for Record<T> {}
// SAFETY: as above.
unsafe impl<T: bytemuck::Pod> bytemuck::Pod for Record<T> {}
// SAFETY: a `Pod` record is plain bytes with the layout its kernels declare (the same
// `#[repr(C)]` definition from `detkit-gpu` on both sides), so it can be copied to and from
// the device byte for byte.
unsafe impl<T: bytemuck::Pod> DeviceRepr for Record<T> {}
// SAFETY: all-zero bytes are a valid `Pod` value.
unsafe impl<T: bytemuck::Pod> ValidAsZeroBits for Record<T> {}

impl<T: bytemuck::Pod> Record<T> {
    /// Host records as the elements of a device vector (the same bytes).
    pub fn slice(records: &[T]) -> &[Record<T>] {
        bytemuck::cast_slice(records)
    }

    /// Host records as the elements of a device vector, to write into (the same bytes).
    pub fn slice_mut(records: &mut [T]) -> &mut [Record<T>] {
        bytemuck::cast_slice_mut(records)
    }

    /// The records a slice of `Record<T>` wraps (the same bytes).
    pub fn unwrap_slice(records: &[Record<T>]) -> &[T] {
        bytemuck::cast_slice(records)
    }

    /// The records a slice of `Record<T>` wraps, to write into (the same bytes).
    pub fn unwrap_slice_mut(records: &mut [Record<T>]) -> &mut [T] {
        bytemuck::cast_slice_mut(records)
    }

    /// The records a vector of `Record<T>` wraps (the standard library collects this in
    /// place, in the same allocation, as the layouts are equal).
    pub fn unwrap_vec(records: Vec<Record<T>>) -> Vec<T> {
        records.into_iter().map(|r| r.0).collect()
    }
}

/// A typed device vector of `detkit-gpu` records (see [`Record`]).
pub type DeviceVec<T> = DeviceBuffer<Record<T>>;

/// Shared memory a block may use after the opt-in (Volta: 96 KiB; the smallest detkit
/// supports): the limit every family's launch plan checks its blocks against.
pub const MAX_BLOCK_SMEM: usize = 96 * 1024;

/// Block sizes of block-level collectives, for every family: a multiple of 32, from 32 to
/// 1024.
pub(crate) fn check_block_size(block: u32) -> Result<()> {
    if block == 0 || !block.is_multiple_of(32) || block > detkit_gpu::scan::MAX_BLOCK_THREADS {
        return Err(crate::error::invalid(
            "block size",
            format!("{block} is not a multiple of 32 in 32..=1024"),
        ));
    }
    Ok(())
}

/// Whether a CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the shared library; no cudarc state is touched.
    unsafe { sys::is_culib_present() }
}

/// Number of CUDA devices the driver reports (an error when no driver can be loaded).
pub fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(crate::error::invalid(
            "devices",
            "no CUDA driver on this machine",
        ));
    }
    let n = CudaContext::device_count().ctx("counting CUDA devices")?;
    Ok(n.max(0) as usize)
}

/// `n` (at least one) zeroed elements of page-locked host memory of `ctx`'s driver, allocated
/// with the `cuMemHostAlloc` `flags`: the one allocation behind [`GpuContext::pinned`]
/// (staging) and the caller-owned [`crate::HostBuf`].
pub(crate) fn zeroed_pinned<T: DeviceRepr + ValidAsZeroBits>(
    ctx: &Arc<CudaContext>,
    n: usize,
    flags: std::ffi::c_uint,
) -> Result<cudarc::driver::PinnedHostSlice<T>> {
    // SAFETY: the memory is zeroed below before any slice of it is made.
    let mut p = unsafe { ctx.alloc_pinned_with_flags::<T>(n.max(1), flags) }
        .ctx("allocating pinned host memory")?;
    let ptr = p.as_mut_ptr().ctx("mapping pinned host memory")?;
    // SAFETY: `ptr` addresses `n.max(1)` elements of this allocation; all-zero bytes are a
    // valid `T` (`ValidAsZeroBits`).
    unsafe { std::ptr::write_bytes(ptr, 0, n.max(1)) };
    Ok(p)
}

/// A CUDA device with its stream and the detkit kernels.
pub struct GpuContext {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernels: HashMap<&'static str, CudaFunction>,
    name: String,
    sm_count: u32,
    loaded: Arc<LoadedImage>,
    scratch: Mutex<Scratch>,
    capturing: AtomicBool,
    /// Device and pinned host allocations made through this context and its forks.
    allocations: Arc<AtomicU64>,
    /// Kernel launches issued through this context and its forks.
    launches: Arc<AtomicU64>,
}

/// Which kernel image a context loaded, and what that cost.
#[derive(Debug)]
pub struct LoadedImage {
    /// The image (a cubin, or PTX the driver compiled).
    pub image: &'static Image,
    /// The device's compute capability.
    pub compute_capability: Arch,
    /// Wall time of inflating the image, `cuModuleLoadData` and resolving every kernel:
    /// milliseconds for a cubin; seconds for PTX the driver compiles (unless its cache holds
    /// the result).
    pub load_time: Duration,
    /// Images tried before it that the driver refused, with its reason (an old driver
    /// refusing a newer cubin or PTX ISA).
    pub refused: Vec<String>,
}

/// A kernel parameter struct as the driver's one kernel argument: its bytes, by value.
#[repr(transparent)]
struct ParamBytes<P>(P);

// SAFETY: `P: Pod` is plain bytes with the layout the kernel declares (the same `#[repr(C)]`
// definition from `detkit-gpu` on both sides), so passing a pointer to it as the argument
// is what `cuLaunchKernel` expects for a by-value struct parameter.
unsafe impl<P: KernelParams> DeviceRepr for ParamBytes<P> {}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext")
            .field("device", &self.name)
            .finish()
    }
}

impl GpuContext {
    /// Opens device `ordinal`, creates a stream and loads every kernel of the embedded PTX
    /// (a missing kernel fails here, not mid-run).
    pub fn new(ordinal: usize) -> Result<Self> {
        if !driver_present() {
            return Err(Error::NoCuda(
                "no CUDA driver library (libcuda.so) found".into(),
            ));
        }
        let count = CudaContext::device_count().ctx("counting CUDA devices")?;
        if count <= 0 {
            return Err(Error::NoCuda("the CUDA driver reports no device".into()));
        }
        if ordinal >= count as usize {
            return Err(Error::NoCuda(format!(
                "device {ordinal} requested, {count} present"
            )));
        }
        let ctx = CudaContext::new(ordinal).ctx("creating the CUDA context")?;
        // SAFETY: every operation of a `GpuContext` (copies, memsets, launches) runs on its
        // one stream, in issue order, so cudarc's cross-stream events are not needed; kernel
        // parameters carry raw device addresses (`DevPtr`), which cudarc could not track.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().ctx("creating the stream")?;
        let (kernels, loaded) = load_image(&ctx)?;
        let name = ctx.name().ctx("reading the device name")?;
        let sm_count = (ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .ctx("reading the multiprocessor count")? as u32)
            .min(grid_sms_cap());
        Ok(Self {
            ctx,
            stream,
            kernels,
            name,
            sm_count,
            loaded: Arc::new(loaded),
            scratch: Mutex::new(Scratch::default()),
            capturing: AtomicBool::new(false),
            allocations: Arc::new(AtomicU64::new(0)),
            launches: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The kernel image this context loaded (see [`crate::ptx`] for the choice).
    pub fn image(&self) -> &'static Image {
        self.loaded.image
    }

    /// How long loading the kernel image took (inflating, `cuModuleLoadData`, resolving the
    /// kernels): what a JIT compilation of PTX would show up in.
    pub fn load_time(&self) -> Duration {
        self.loaded.load_time
    }

    /// The image, the device's compute capability, the load time and any image the driver
    /// refused before it.
    pub fn loaded_image(&self) -> &LoadedImage {
        &self.loaded
    }

    /// A second handle on the same device and the same loaded kernels, with a stream of its
    /// own (and its own scratch state): work issued through it runs concurrently with other
    /// streams' work. Several events or batches in flight are several forks, each with its
    /// own buffers (a `Clusterer` and `DeviceDigis` per fork); nothing is shared between
    /// them but the module, so no cross-stream ordering is needed. Loading the PTX is not
    /// repeated.
    pub fn fork(&self) -> Result<Self> {
        let stream = self.ctx.new_stream().ctx("creating a stream")?;
        Ok(Self {
            ctx: self.ctx.clone(),
            stream,
            kernels: self.kernels.clone(),
            name: self.name.clone(),
            sm_count: self.sm_count,
            loaded: self.loaded.clone(),
            scratch: Mutex::new(Scratch::default()),
            capturing: AtomicBool::new(false),
            allocations: self.allocations.clone(),
            launches: self.launches.clone(),
        })
    }

    /// Number of device allocations (buffers made by [`GpuContext::upload`],
    /// [`GpuContext::zeros`], [`GpuContext::filled_u32`], [`GpuContext::poisoned`]) and pinned
    /// host allocations ([`GpuContext::pinned`]) made so far through this context and every
    /// fork of it. Tests read it before and after a call to check that a call whose sizes fit
    /// the workspace allocates nothing.
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }

    /// Number of kernel launches issued directly (not graph replays) through this context
    /// and every fork of it. The GPU tests print it per test: under compute-sanitizer's
    /// racecheck every launch costs about 9 ms (docs/benchmarks.md, "race (session 11)").
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    fn count_allocation(&self) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` elements of page-locked (pinned) host memory, zeroed, for staging copies: copies
    /// from and to it are asynchronous DMA. `write_combined` suits memory the host only
    /// writes (uploads); memory the host reads back must not be write-combined.
    pub fn pinned<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        n: usize,
        write_combined: bool,
    ) -> Result<cudarc::driver::PinnedHostSlice<T>> {
        let flags = if write_combined {
            sys::CU_MEMHOSTALLOC_WRITECOMBINED
        } else {
            0
        };
        let p = zeroed_pinned(&self.ctx, n, flags)?;
        self.count_allocation();
        Ok(p)
    }

    /// Records what `f` issues on the stream as a CUDA graph (stream capture, relaxed
    /// mode) instead of running it, and returns the instantiated graph, already uploaded.
    /// Launching the graph replays the same operations with the same arguments (device
    /// addresses included) in one driver call. Nothing `f` issues may synchronise.
    pub fn capture(&self, f: impl FnOnce() -> Result<()>) -> Result<cudarc::driver::CudaGraph> {
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .ctx("beginning a stream capture")?;
        self.capturing.store(true, Ordering::Relaxed);
        let r = f();
        self.capturing.store(false, Ordering::Relaxed);
        let g = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .ctx("ending a stream capture");
        r?;
        let g = g?.ok_or_else(|| crate::error::invalid("graph", "the capture recorded nothing"))?;
        g.upload().ctx("uploading a CUDA graph")?;
        Ok(g)
    }

    /// The device's name, as the driver reports it.
    pub fn device_name(&self) -> &str {
        &self.name
    }

    /// Number of streaming multiprocessors (at most [`GRID_SMS_ENV`] when that is set): the
    /// count every grid sized per multiprocessor is sized from.
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The stream every detkit launch uses.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Copies `bytes` bytes from the device address `src` (memory this context does not own:
    /// a caller's array) to the start of `dst`, on this context's stream (the caller waits
    /// for the stream before `src` may change). Nothing is issued for zero bytes; a `dst`
    /// smaller than `bytes` is an error.
    ///
    /// # Safety
    /// `src` is valid for `bytes` bytes on this context's device and is not written until the
    /// stream's work up to this copy has finished.
    pub(crate) unsafe fn copy_in_raw<T: DeviceRepr>(
        &self,
        src: u64,
        dst: &mut DeviceBuffer<T>,
        bytes: usize,
        what: &str,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        if dst.len() * std::mem::size_of::<T>() < bytes {
            return Err(crate::error::invalid(
                "device copy",
                format!(
                    "{what}: {bytes} bytes into a buffer of {} elements",
                    dst.len()
                ),
            ));
        }
        let s = self.stream();
        self.context().bind_to_thread().ctx(what)?;
        let (d, _record) = dst.device_ptr_mut(s);
        // SAFETY: `d` holds at least `bytes` bytes (checked above); `src` is valid for
        // `bytes` bytes and stays unwritten until the stream has run this copy (the caller's
        // contract); both on this context's device, the copy ordered on its stream.
        unsafe { cudarc::driver::result::memcpy_dtod_async(d, src, bytes, s.cu_stream()) }.ctx(what)
    }

    /// The cudarc context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A kernel by name (all are loaded at construction).
    pub(crate) fn kernel(&self, name: &'static str) -> Result<&CudaFunction> {
        self.kernels
            .get(name)
            .ok_or_else(|| Error::MissingKernel(name.to_string()))
    }

    /// Copies `data` to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        self.count_allocation();
        self.stream.clone_htod(data).ctx("copying to the device")
    }

    /// Copies a device buffer back to the host (synchronises the stream).
    pub fn download<T: DeviceRepr>(&self, buf: &DeviceBuffer<T>) -> Result<Vec<T>> {
        self.stream.clone_dtoh(buf).ctx("copying from the device")
    }

    /// Copies host records to a new typed device vector.
    pub fn upload_records<T: bytemuck::Pod>(&self, data: &[T]) -> Result<DeviceVec<T>> {
        self.upload(Record::slice(data))
    }

    /// Copies a typed device vector back to the host (synchronises the stream).
    pub fn download_records<T: bytemuck::Pod>(&self, buf: &DeviceVec<T>) -> Result<Vec<T>> {
        self.download(buf).map(Record::unwrap_vec)
    }

    /// A typed device vector of `n` copies of `poison` (see [`GpuContext::poisoned`]).
    pub fn poisoned_records<T: bytemuck::Pod>(&self, n: usize, poison: T) -> Result<DeviceVec<T>> {
        self.poisoned(n, Record(poison))
    }

    /// A zeroed device buffer of `n` elements.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<DeviceBuffer<T>> {
        self.count_allocation();
        self.stream.alloc_zeros(n).ctx("allocating device memory")
    }

    /// A device buffer of `n` copies of `poison`: tests fill outputs with it so that an
    /// element the kernel failed to write shows up.
    pub fn poisoned<T: DeviceRepr + Copy>(&self, n: usize, poison: T) -> Result<DeviceBuffer<T>> {
        self.upload(&vec![poison; n])
    }

    /// A device buffer of `n` words all equal to `value`, filled on the device
    /// (`cuMemsetD32Async`): no host copy.
    pub fn filled_u32(&self, n: usize, value: u32) -> Result<DeviceBuffer<u32>> {
        self.filled_words(n, value)
    }

    /// A device buffer of `n` elements whose every 32-bit word is `value` (`T` a whole
    /// number of words: `u32` or a [`Record`]), filled on the device: no host copy.
    pub(crate) fn filled_words<T: DeviceRepr>(
        &self,
        n: usize,
        value: u32,
    ) -> Result<DeviceBuffer<T>> {
        // SAFETY: every element is written by the memset below before anyone reads it.
        let mut buf = unsafe { self.stream.alloc::<T>(n) }.ctx("allocating device memory")?;
        self.count_allocation();
        self.fill_words(&mut buf, n, value)?;
        Ok(buf)
    }

    /// Sets every 32-bit word of the first `n` elements of `buf` (`T` a whole number of
    /// words) to `value` on the device (`cuMemsetD32Async` on the stream; no wait).
    pub(crate) fn fill_words<T: DeviceRepr>(
        &self,
        buf: &mut DeviceBuffer<T>,
        n: usize,
        value: u32,
    ) -> Result<()> {
        let size = std::mem::size_of::<T>();
        if !size.is_multiple_of(4) || n > buf.len() {
            return Err(crate::error::invalid(
                "fill_words",
                format!("{n} elements of {size} bytes in a buffer of {}", buf.len()),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let (ptr, _record) = buf.device_ptr_mut(&self.stream);
        // SAFETY: `ptr` addresses `n * size` bytes of this allocation (checked above), `size`
        // a multiple of 4; the memset runs on our stream.
        unsafe { sys::cuMemsetD32Async(ptr, value, n * size / 4, self.stream.cu_stream()) }
            .result()
            .ctx("filling device memory")
    }

    /// Sets the first `n` words of `buf` to `value` on the device (`cuMemsetD32Async` on
    /// the stream; no host copy).
    pub fn fill_u32(&self, buf: &mut DeviceBuffer<u32>, n: usize, value: u32) -> Result<()> {
        self.fill_u32_range(buf, 0..n, value)
    }

    /// Sets the words `range` of `buf` to `value` on the device (`cuMemsetD32Async` on the
    /// stream; no host copy, no wait).
    pub fn fill_u32_range(
        &self,
        buf: &mut DeviceBuffer<u32>,
        range: std::ops::Range<usize>,
        value: u32,
    ) -> Result<()> {
        if range.start > range.end || range.end > buf.len() {
            return Err(crate::error::invalid(
                "fill_u32",
                format!("words {range:?} requested in a buffer of {}", buf.len()),
            ));
        }
        if range.is_empty() {
            return Ok(());
        }
        let (ptr, _record) = buf.device_ptr_mut(&self.stream);
        // SAFETY: `ptr + 4 start` addresses at least `end - start` words of this allocation
        // (checked above); the memset runs on our stream.
        unsafe {
            sys::cuMemsetD32Async(
                ptr + 4 * range.start as u64,
                value,
                range.end - range.start,
                self.stream.cu_stream(),
            )
        }
        .result()
        .ctx("filling device memory")
    }

    /// Zeroes a device buffer.
    pub fn memset_zero<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        buf: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        self.stream.memset_zeros(buf).ctx("zeroing device memory")
    }

    /// Waits for all work on the stream.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().ctx("synchronising the stream")
    }

    /// After a launch: in debug builds, synchronise and name the kernel on failure
    /// (traccc checks after every launch); in release builds only the launch error is checked.
    pub(crate) fn check_launch(
        &self,
        kernel: &'static str,
        r: std::result::Result<
            Option<(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent)>,
            cudarc::driver::DriverError,
        >,
    ) -> Result<()> {
        r.ctx(format!("launching `{kernel}`"))?;
        if cfg!(debug_assertions) && !self.capturing.load(Ordering::Relaxed) {
            self.stream
                .synchronize()
                .ctx(format!("running `{kernel}`"))?;
        }
        Ok(())
    }

    /// Launches `kernel` with its one parameter struct: the only way detkit launches.
    ///
    /// Refuses a struct that `kernel` does not take ([`KernelParams::KERNELS`]), raises the
    /// kernel's dynamic shared-memory limit when `cfg` asks for more than 48 KiB, and in
    /// debug builds synchronises and names the kernel on failure.
    ///
    /// # Safety
    /// `params` satisfies `kernel`'s launch contract (its `# Safety` section in `detkit-gpu`):
    /// every `DevPtr` addresses a live allocation of this context of the length the kernel
    /// reads or writes, with no aliasing the kernel forbids, and `cfg` has the block size and
    /// shared memory the kernel requires.
    pub(crate) unsafe fn launch<P: KernelParams>(
        &self,
        kernel: &'static str,
        cfg: LaunchConfig,
        params: &P,
    ) -> Result<()> {
        if !P::KERNELS.contains(&kernel) {
            return Err(crate::error::invalid(
                "kernel parameters",
                format!("`{kernel}` does not take `{}`", std::any::type_name::<P>()),
            ));
        }
        self.allow_smem(kernel, cfg.shared_mem_bytes as usize)?;
        let arg = ParamBytes(*params);
        let mut b = self.stream.launch_builder(self.kernel(kernel)?);
        b.arg(&arg);
        // SAFETY: the caller guarantees the launch contract (see `# Safety`); the argument is
        // the kernel's one struct parameter (checked above against `P::KERNELS`).
        let r = unsafe { b.launch(cfg) };
        self.launches.fetch_add(1, Ordering::Relaxed);
        self.check_launch(kernel, r)
    }

    /// Runs the parameter-layout probe: the words `detkit_gpu::params::params_probe` writes
    /// for `p` (with `p.out` replaced by a buffer of this context). A test of the host-device
    /// agreement on parameter structs: compare with `detkit_gpu::params::params_probe_words`.
    pub fn params_probe(&self, p: detkit_gpu::params::ParamsProbeParams) -> Result<Vec<u32>> {
        use detkit_gpu::params as pp;
        let mut out = self.poisoned(pp::PARAMS_PROBE_WORDS, 0xDEAD_BEEFu32)?;
        let params = pp::ParamsProbeParams {
            out: self.ptr_mut(&mut out),
            ..p
        };
        // SAFETY: one thread; `out` holds PARAMS_PROBE_WORDS words; `other` is never
        // dereferenced (the kernel writes its address only).
        unsafe { self.launch(pp::KERNEL_PARAMS_PROBE, cfg(1, 1, 0), &params)? };
        self.download(&out)
    }

    /// The device address of a buffer (or view), for a kernel parameter struct.
    pub fn ptr<T, B: DevicePtr<T>>(&self, buf: &B) -> DevPtr<T> {
        let (p, _sync) = buf.device_ptr(&self.stream);
        DevPtr::from_addr(p)
    }

    /// The device address of a buffer (or view) the kernel writes.
    pub fn ptr_mut<T, B: DevicePtrMut<T>>(&self, buf: &mut B) -> DevPtr<T> {
        let (p, _sync) = buf.device_ptr_mut(&self.stream);
        DevPtr::from_addr(p)
    }

    /// Runs `f` on this context's scratch state of type `S` (its own typed field of
    /// [`Scratch`], created empty with the context and kept between calls): temporary device
    /// buffers a family reuses, such as the scan's tile flags.
    pub(crate) fn with_scratch<S: ScratchSlot, R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        f(S::slot(&mut scratch))
    }

    /// Raises a kernel's dynamic shared-memory limit when a launch needs more than 48 KiB.
    pub(crate) fn allow_smem(&self, kernel: &'static str, bytes: usize) -> Result<()> {
        if bytes > 48 * 1024 {
            self.kernel(kernel)?
                .set_attribute(
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes as i32,
                )
                .ctx(format!("raising the shared-memory limit of `{kernel}`"))?;
        }
        Ok(())
    }
}

/// Loads the kernel image for `ctx`'s device: the candidates of [`crate::ptx::candidates`]
/// for its compute capability and `DETKIT_IMAGE`, in order, until the driver accepts one;
/// then resolves every kernel of `detkit_gpu::ALL_KERNELS` (a missing kernel fails here).
fn load_image(
    ctx: &Arc<CudaContext>,
) -> Result<(HashMap<&'static str, CudaFunction>, LoadedImage)> {
    let major = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .ctx("reading the compute capability")?;
    let minor = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        .ctx("reading the compute capability")?;
    let cc = Arch {
        major: major.max(0) as u32,
        minor: minor.max(0) as u32,
    };
    let forced = std::env::var(crate::ptx::IMAGE_ENV).ok();
    let candidates = crate::ptx::candidates(cc, forced.as_deref())?;
    if candidates.is_empty() {
        return Err(Error::NoCuda(format!(
            "no detkit kernel image runs on a {cc} device (the oldest is sm_70)"
        )));
    }
    let mut refused = Vec::new();
    let last = candidates.len() - 1;
    for (i, &image) in candidates.iter().enumerate() {
        let t = Instant::now();
        let module = match load_module(ctx, image) {
            Ok(m) => m,
            Err(e) if i < last => {
                refused.push(format!("{image}: {e}"));
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut kernels = HashMap::new();
        for &name in detkit_gpu::ALL_KERNELS {
            let f = module
                .load_function(name)
                .map_err(|_| Error::MissingKernel(name.to_string()))?;
            kernels.insert(name, f);
        }
        let loaded = LoadedImage {
            image,
            compute_capability: cc,
            load_time: t.elapsed(),
            refused,
        };
        return Ok((kernels, loaded));
    }
    unreachable!("the last candidate returns")
}

/// Inflates `image` and loads it with `cuModuleLoadData` (cudarc's `load_module`: a cubin as
/// binary data, a PTX as NUL-terminated text).
fn load_module(ctx: &Arc<CudaContext>, image: &Image) -> Result<Arc<CudaModule>> {
    let mut bytes = image.bytes()?;
    let src = match image.kind() {
        ImageKind::Cubin => Ptx::from_binary(bytes),
        ImageKind::Ptx => {
            bytes.pop(); // the NUL: `from_src` adds its own
            let text = String::from_utf8(bytes).map_err(|_| {
                crate::error::invalid("kernel image", format!("{} is not UTF-8", image.file()))
            })?;
            Ptx::from_src(text)
        }
    };
    ctx.load_module(src)
        .ctx(format!("loading the detkit kernel image {}", image.file()))
}

/// A 1-D launch configuration.
/// `DETKIT_GRID_SMS=K` sizes every grid that detkit sizes per multiprocessor (persistent
/// and grid-stride kernels) as for a device of at most `K` multiprocessors; results do not
/// depend on it. The GPU tests set it under compute-sanitizer, whose racecheck holds host
/// memory in proportion to the shared memory of the blocks a launch keeps resident
/// (docs/benchmarks.md, "race (session 11, issue 28)"). Unset, 0 or not a number: no cap.
pub const GRID_SMS_ENV: &str = "DETKIT_GRID_SMS";

fn grid_sms_cap() -> u32 {
    std::env::var(GRID_SMS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&k| k > 0)
        .unwrap_or(u32::MAX)
}

pub fn cfg(blocks: u64, threads: u32, smem: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: smem as u32,
    }
}

/// Largest grid of 1-D blocks detkit launches (`gridDim.x` limit).
pub const MAX_GRID: u64 = (1 << 31) - 1;

#[cfg(test)]
mod tests {
    use super::Record;
    use detkit_gpu::pet::Single;

    fn singles(n: usize) -> Vec<Single> {
        (0..n)
            .map(|i| Single {
                crystal: i as u32 * 7 + 1,
                energy: 400.0 + i as f32,
                time: -(i as f64) * 0.5,
            })
            .collect()
    }

    #[test]
    fn records_wrap_and_unwrap_the_same_values() {
        for n in [0, 1, 3, 33] {
            let v = singles(n);
            let wrapped = Record::slice(&v);
            assert_eq!(wrapped.len(), n);
            assert!(wrapped.iter().zip(&v).all(|(r, s)| r.0 == *s));
            assert_eq!(Record::unwrap_slice(wrapped), &v[..]);
            assert_eq!(Record::unwrap_vec(wrapped.to_vec()), v);
            let mut w = v.clone();
            if let Some(r) = Record::slice_mut(&mut w).last_mut() {
                r.0.crystal = 99;
            }
            if let Some(s) = Record::unwrap_slice_mut(Record::slice_mut(&mut w)).first_mut() {
                s.time = 2.0;
            }
            if n > 1 {
                assert_eq!((w[0].time, w[n - 1].crystal), (2.0, 99));
                assert_eq!(&w[1..n - 1], &v[1..n - 1]);
            }
        }
    }
}
