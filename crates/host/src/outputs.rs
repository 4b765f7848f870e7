//! Device buffers handed to the caller: the outputs of the device-view calls
//! ([`crate::Backend::cluster_events_device`], [`crate::Backend::seed_events_device`], …)
//! and the Python layer's `DeviceArray`s. A new buffer per call, since the caller keeps it
//! for as long as it likes (after the next call, after the backend is gone).
//!
//! They come from a stream-ordered memory pool of detkit's own, one per device
//! (`cuMemPoolCreate`, `cuMemAllocFromPoolAsync`), whose release threshold is unlimited: a
//! buffer freed when its owner drops it (`cuMemFreeAsync` on its stream, cudarc's drop) goes
//! back to the pool and serves the next call's outputs without the driver mapping new memory.
//! The device's default pool, which cudarc's `alloc` uses, gives its free memory back to the
//! system at every synchronisation (its release threshold is 0), so a call that allocates its
//! outputs after the previous call's were freed pays for a fresh mapping (tens of µs per
//! buffer; see docs/benchmarks.md, "devpath"). detkit leaves the default pool's setting
//! alone: other libraries of the process share it.
//!
//! The pool keeps what it has cached until the process ends ([`trim`] gives it back). Where
//! the driver has no stream-ordered allocator (`has_async_alloc` false), buffers come from
//! the stream's ordinary allocation.

use std::sync::Mutex;

use cudarc::driver::{sys, CudaStream, DeviceRepr};

use crate::cuda::{DeviceBuffer, GpuContext};
use crate::error::{DriverContext, Result};

/// The pools made so far: (device ordinal, pool handle). A pool is a device-level object of
/// the driver, valid in every context of the process; it is never destroyed (buffers of it
/// may outlive every backend).
static POOLS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// detkit's output pool on `g`'s device (made on first use), or `None` without a
/// stream-ordered allocator.
fn pool(g: &GpuContext) -> Result<Option<sys::CUmemoryPool>> {
    let ctx = g.context();
    if !ctx.has_async_alloc() {
        return Ok(None);
    }
    let ordinal = ctx.ordinal();
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, p)) = pools.iter().find(|(o, _)| *o == ordinal) {
        return Ok(Some(p as sys::CUmemoryPool));
    }
    // SAFETY: a plain C struct of enums (0 is a valid value of each), integers, a null
    // pointer and reserved bytes that must be zero: all-zero is valid.
    let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
    props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ordinal as i32;
    let mut p: sys::CUmemoryPool = std::ptr::null_mut();
    let what = "creating detkit's output memory pool";
    // SAFETY: `props` is initialised above; `p` receives the new pool.
    unsafe { sys::cuMemPoolCreate(&mut p, &props) }
        .result()
        .ctx(what)?;
    let mut threshold: u64 = u64::MAX;
    // SAFETY: RELEASE_THRESHOLD takes a `cuuint64_t` by pointer; `p` is the pool just made.
    unsafe {
        sys::cuMemPoolSetAttribute(
            p,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
    }
    .result()
    .ctx(what)?;
    pools.push((ordinal, p as usize));
    Ok(Some(p))
}

/// A new device buffer of `n.max(1)` elements for the caller, from detkit's output pool,
/// allocated in the order of `g`'s stream (and freed in the order of that stream when
/// dropped). Its memory is not initialised.
///
/// # Safety
/// The caller writes (in the order of `g`'s stream) every element that is read later.
pub unsafe fn alloc_output<T: DeviceRepr>(g: &GpuContext, n: usize) -> Result<DeviceBuffer<T>> {
    let n = n.max(1);
    let what = "allocating device memory for the results";
    let stream = g.stream();
    let Some(p) = pool(g)? else {
        // SAFETY: the caller's contract.
        return unsafe { stream.alloc::<T>(n) }.ctx(what);
    };
    g.context().bind_to_thread().ctx(what)?;
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: `p` is a live pool of this device; the allocation is ordered on `stream`, a
    // stream of this context.
    unsafe {
        sys::cuMemAllocFromPoolAsync(
            &mut ptr,
            n * std::mem::size_of::<T>(),
            p,
            stream.cu_stream(),
        )
    }
    .result()
    .ctx(what)?;
    // SAFETY: `ptr` is a stream-ordered allocation of `n` elements of `T`, valid in the order
    // of `stream`; the buffer made here is its only owner and frees it with
    // `cuMemFreeAsync` on `stream` (the context has a stream-ordered allocator).
    Ok(unsafe { stream.upgrade_device_ptr::<T>(ptr, n) })
}

/// A new zeroed device buffer of `n.max(1)` elements from detkit's output pool (see
/// [`alloc_output`]), zeroed on `g`'s stream.
pub fn zeroed_output<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    g: &GpuContext,
    n: usize,
) -> Result<DeviceBuffer<T>> {
    // SAFETY: every element is zeroed below, in the order of the stream, before any read.
    let mut b = unsafe { alloc_output::<T>(g, n) }?;
    g.memset_zero(&mut b)?;
    Ok(b)
}

/// Gives the memory the output pool of `g`'s device holds cached (freed buffers) back to
/// the system, keeping `keep` bytes. Buffers still held are not affected.
pub fn trim(g: &GpuContext, keep: usize) -> Result<()> {
    if let Some(p) = pool(g)? {
        // SAFETY: `p` is a live pool; trimming only releases unused memory.
        unsafe { sys::cuMemPoolTrimTo(p, keep) }
            .result()
            .ctx("trimming detkit's output memory pool")?;
    }
    Ok(())
}

/// `stream` waits for the work issued so far on `other` (an event recorded there), unless
/// `other` has none left (`cuStreamQuery`: one driver call instead of four when it is idle,
/// the usual case between calls). A device-view call orders its workspace's stream after the
/// backend's stream, on which the caller's inputs were ordered.
pub(crate) fn order_after(stream: &CudaStream, other: &CudaStream) -> Result<()> {
    let what = "ordering after the caller's stream";
    stream.context().bind_to_thread().ctx(what)?;
    // SAFETY: `other` is a live stream of this context; the query only reads its state.
    match unsafe { sys::cuStreamQuery(other.cu_stream()) } {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        sys::CUresult::CUDA_ERROR_NOT_READY => stream.join(other).ctx(what),
        e => e.result().ctx(what),
    }
}
