//! Page-locked (pinned) host memory that callers hold: [`HostBuf`], made by
//! [`crate::Backend::pinned`], and [`HostDigis`], four of them for a clustering call's digis.
//!
//! A host door copies the caller's pageable memory into its own pinned staging before the DMA
//! (and back out after it): for a large clustering call that is two more passes over host
//! memory than the DMA's (see docs/benchmarks.md, "chost" and "pinned"). Memory of a
//! [`HostBuf`] is page-locked already, so the doors that know it (the clustering door: digis
//! in, cluster indices out) DMA straight from and to it. Each allocation's address range is
//! kept in a process-wide registry while it lives; a door asks the registry whether a slice
//! lies inside one allocation (a look-up in an ordered map, no driver call), so a
//! [`crate::clustering::DigisRef`] or [`crate::clustering::ClustersMut`] of sub-slices of
//! [`HostBuf`]s is recognised as well. Slices that are not (ordinary `Vec`s, numpy's memory)
//! take the staging path as before; the results are the same either way.
//!
//! On the CPU backend (no driver) a [`HostBuf`] is ordinary zeroed memory and registers
//! nothing, so the same code runs on both backends.
//!
//! ```
//! use detkit::clustering::{gen, ClustersMut, Geometry};
//! use detkit::Backend;
//!
//! let b = Backend::cpu(); // Backend::cuda(0)? on a GPU host: the memory is then pinned
//! let ev = gen::run3_event(7);
//! let g = Geometry::phase1();
//! let mut digis = b.pinned_digis(ev.len())?;
//! digis.copy_from((&ev).into())?;
//! let slots = g.modules as usize;
//! let (mut clus, mut per_module, mut first) =
//!     (b.pinned::<i32>(ev.len())?, b.pinned::<u32>(slots)?, b.pinned::<u32>(slots)?);
//! let out = ClustersMut { clus: &mut clus, clus_in_module: &mut per_module, module_first: &mut first };
//! b.cluster_events_into_slices(&digis, &[0, ev.len() as u32], &g, None, out)?;
//! assert_eq!(&clus[..], &b.cluster(&ev, &g, None)?.clus[..]);
//! # Ok::<(), detkit::Error>(())
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use cudarc::driver::{DeviceRepr, PinnedHostSlice, ValidAsZeroBits};

use crate::clustering::DigisRef;
use crate::cuda::GpuContext;
use crate::error::{DriverContext, Result};

/// Start address → end address (exclusive) of every live pinned [`HostBuf`].
static PINNED: RwLock<BTreeMap<usize, usize>> = RwLock::new(BTreeMap::new());

/// Adds `start..end` to the registry.
fn register(start: usize, end: usize) {
    PINNED
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(start, end);
}

/// Removes the range starting at `start`.
fn unregister(start: usize) {
    PINNED
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&start);
}

/// Whether the bytes `start..end` (not empty) lie inside one registered range.
fn registered(start: usize, end: usize) -> bool {
    if end <= start {
        return false;
    }
    let map = PINNED.read().unwrap_or_else(|e| e.into_inner());
    map.range(..=start)
        .next_back()
        .is_some_and(|(_, &e)| end <= e)
}

/// Whether `s` (not empty) lies inside a live pinned [`HostBuf`]: a DMA may then read or
/// write it directly (asynchronously, for as long as the caller's borrow of it lasts).
pub fn is_pinned<T>(s: &[T]) -> bool {
    let start = s.as_ptr() as usize;
    registered(start, start + std::mem::size_of_val(s))
}

/// Whether all four arrays of `d` (not empty) lie inside live pinned [`HostBuf`]s.
pub(crate) fn digis_pinned(d: DigisRef<'_>) -> bool {
    [d.module, d.x, d.y, d.adc].iter().all(|a| is_pinned(a))
}

/// Where a [`HostBuf`]'s memory comes from.
enum Mem<T> {
    /// Page-locked by the driver (kept for its `Drop`, which frees it).
    Pinned(#[allow(dead_code)] PinnedHostSlice<T>),
    /// Ordinary memory (no GPU).
    Heap(#[allow(dead_code)] Vec<T>),
}

/// `n` elements of host memory owned by the caller, zeroed: page-locked on a CUDA backend
/// (the doors that take it DMA straight from and to it), ordinary memory on the CPU backend.
/// Dereferences to `[T]`, so it is filled, read and sliced as a slice is; a slice of it
/// passed to a door is recognised as pinned ([`is_pinned`]). Made by
/// [`crate::Backend::pinned`] or [`HostBuf::pinned`].
pub struct HostBuf<T> {
    ptr: *mut T,
    len: usize,
    mem: Mem<T>,
}

// SAFETY: a `HostBuf` owns its memory alone (like a `Vec<T>`): moving it to another thread
// or sharing `&HostBuf` moves or shares only access to `T`s.
unsafe impl<T: Send> Send for HostBuf<T> {}
// SAFETY: as above; `&HostBuf<T>` gives only `&[T]`.
unsafe impl<T: Sync> Sync for HostBuf<T> {}

impl<T: DeviceRepr + ValidAsZeroBits + Copy + Default> HostBuf<T> {
    /// `n` zeroed elements of page-locked memory of `gpu`'s driver (portable: pinned for
    /// every context; cached, not write-combined, so the host reads it at full speed).
    pub fn pinned(gpu: &GpuContext, n: usize) -> Result<Self> {
        Self::pinned_in(gpu.context(), n)
    }

    /// [`HostBuf::pinned`] of the context `ctx`.
    fn pinned_in(ctx: &Arc<cudarc::driver::CudaContext>, n: usize) -> Result<Self> {
        let flags = cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE;
        let mut p = crate::cuda::zeroed_pinned::<T>(ctx, n, flags)?;
        let ptr = p.as_mut_ptr().ctx("mapping pinned host memory")?;
        let start = ptr as usize;
        register(start, start + n.max(1) * std::mem::size_of::<T>());
        Ok(Self {
            ptr,
            len: n,
            mem: Mem::Pinned(p),
        })
    }

    /// `n` zeroed elements of ordinary memory (what a CPU backend hands out).
    pub fn heap(n: usize) -> Self {
        let mut v = vec![T::default(); n];
        Self {
            ptr: v.as_mut_ptr(),
            len: n,
            mem: Mem::Heap(v),
        }
    }
}

impl<T> HostBuf<T> {
    /// Whether the memory is page-locked (a CUDA backend's).
    pub fn is_pinned(&self) -> bool {
        matches!(self.mem, Mem::Pinned(_))
    }

    /// The address of the first element.
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }
}

impl<T> Drop for HostBuf<T> {
    fn drop(&mut self) {
        // Out of the registry before the memory is freed (the field's own drop, after this).
        if self.is_pinned() {
            unregister(self.ptr as usize);
        }
    }
}

impl<T> std::ops::Deref for HostBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` addresses `len` initialised (zeroed, then only written through
        // `&mut self`) elements that live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> std::ops::DerefMut for HostBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for HostBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuf")
            .field("len", &self.len)
            .field("pinned", &self.is_pinned())
            .finish()
    }
}

/// A clustering call's digis in four [`HostBuf`]s of one length (module, x, y, adc): what
/// [`crate::Backend::pinned_digis`] makes. `&HostDigis` converts into a [`DigisRef`], and
/// the clustering door DMAs straight from it.
#[derive(Debug)]
pub struct HostDigis {
    /// Module ids.
    pub module: HostBuf<u16>,
    /// Rows.
    pub x: HostBuf<u16>,
    /// Columns.
    pub y: HostBuf<u16>,
    /// Charges.
    pub adc: HostBuf<u16>,
}

impl HostDigis {
    /// Number of digis.
    pub fn len(&self) -> usize {
        self.module.len()
    }

    /// Whether there is no digi.
    pub fn is_empty(&self) -> bool {
        self.module.is_empty()
    }

    /// Copies `d` (of this length) into the four buffers; an error when the lengths differ.
    pub fn copy_from(&mut self, d: DigisRef<'_>) -> Result<()> {
        let n = self.len();
        if [d.module, d.x, d.y, d.adc].iter().any(|a| a.len() != n) {
            return Err(crate::error::invalid(
                "digis",
                format!("{} digis into pinned digis of {n}", d.len()),
            ));
        }
        self.module.copy_from_slice(d.module);
        self.x.copy_from_slice(d.x);
        self.y.copy_from_slice(d.y);
        self.adc.copy_from_slice(d.adc);
        Ok(())
    }
}

impl<'a> From<&'a HostDigis> for DigisRef<'a> {
    fn from(d: &'a HostDigis) -> Self {
        DigisRef {
            module: &d.module,
            x: &d.x,
            y: &d.y,
            adc: &d.adc,
        }
    }
}

/// What a [`HostPool`] keeps: its free buffers and counts.
struct Shelf<T> {
    free: Mutex<Vec<HostBuf<T>>>,
    keep: usize,
    allocations: AtomicU64,
    /// The largest buffer made (elements).
    high: std::sync::atomic::AtomicUsize,
    /// Buffers handed out and not back yet.
    out: std::sync::atomic::AtomicUsize,
}

/// A pool of [`HostBuf`]s that a backend recycles for results: [`HostPool::take`] hands out a
/// [`PooledBuf`] of the length asked for, from a free buffer that is large enough (no
/// allocation), else a new one (with 1/8 headroom, and at least the largest size made so far
/// when that is within 2× of it, so that calls of varying sizes settle on buffers that fit
/// them all); dropping the [`PooledBuf`] puts its buffer back (the pool keeps at
/// most `keep` free buffers, the largest). A result held by the caller is out of the pool
/// until it is dropped, so later calls never overwrite it. Page-locked on a CUDA backend
/// (the clustering door DMAs results straight into it), ordinary memory on the CPU.
/// Safe from several threads (one lock around the free list, held for a look-up, never
/// around an allocation). Buffers outliving the pool are freed when dropped.
pub struct HostPool<T> {
    ctx: Option<Arc<cudarc::driver::CudaContext>>,
    shelf: Arc<Shelf<T>>,
}

impl<T> std::fmt::Debug for HostPool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostPool")
            .field("pinned", &self.ctx.is_some())
            .field("free", &self.free())
            .field("allocations", &self.allocations())
            .finish()
    }
}

/// A buffer taken from a [`HostPool`]: dereferences to its first `len` elements (what was
/// asked for; their contents are those of an earlier use, or zeros); back to its pool when
/// dropped.
pub struct PooledBuf<T> {
    buf: Option<HostBuf<T>>,
    len: usize,
    home: Weak<Shelf<T>>,
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy + Default> HostPool<T> {
    /// An empty pool of `backend`'s memory keeping at most `keep` free buffers.
    pub fn new(backend: &crate::Backend, keep: usize) -> Self {
        Self {
            ctx: backend.gpu().map(|g| g.context().clone()),
            shelf: Arc::new(Shelf {
                free: Mutex::new(Vec::new()),
                keep,
                allocations: AtomicU64::new(0),
                high: Default::default(),
                out: Default::default(),
            }),
        }
    }

    /// `n` elements: the smallest free buffer that holds them, else a new one.
    pub fn take(&self, n: usize) -> Result<PooledBuf<T>> {
        let (found, dropped) = {
            let mut free = self.shelf.free.lock().unwrap_or_else(|e| e.into_inner());
            let fit = (0..free.len())
                .filter(|&i| free[i].len() >= n)
                .min_by_key(|&i| free[i].len());
            match fit {
                Some(i) => (Some(free.swap_remove(i)), None),
                // None fits: the largest free buffer goes (a new larger one replaces it).
                None => {
                    let big = (0..free.len()).max_by_key(|&i| free[i].len());
                    (None, big.map(|i| free.swap_remove(i)))
                }
            }
        };
        drop(dropped);
        let buf = match found {
            Some(b) => b,
            None => {
                // The largest size made so far when the call is not much smaller (within
                // 2×), so that calls of varying sizes settle on buffers that fit them all.
                let need = n.saturating_add(n / 8).max(1);
                let high = self.shelf.high.load(Ordering::Relaxed);
                let cap = if high / 2 <= need {
                    need.max(high)
                } else {
                    need
                };
                self.shelf.high.fetch_max(cap, Ordering::Relaxed);
                self.shelf.allocations.fetch_add(1, Ordering::Relaxed);
                match &self.ctx {
                    Some(ctx) => HostBuf::pinned_in(ctx, cap)?,
                    None => HostBuf::heap(cap),
                }
            }
        };
        self.shelf.out.fetch_add(1, Ordering::Relaxed);
        Ok(PooledBuf {
            buf: Some(buf),
            len: n,
            home: Arc::downgrade(&self.shelf),
        })
    }
}

impl<T> HostPool<T> {
    /// Buffers allocated by this pool so far (a call whose sizes fit allocates none).
    pub fn allocations(&self) -> u64 {
        self.shelf.allocations.load(Ordering::Relaxed)
    }

    /// Buffers handed out now (taken, not yet dropped).
    pub fn in_use(&self) -> usize {
        self.shelf.out.load(Ordering::Relaxed)
    }

    /// Free buffers kept now.
    pub fn free(&self) -> usize {
        self.shelf
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Whether the buffers are page-locked (a CUDA backend's pool).
    pub fn is_pinned(&self) -> bool {
        self.ctx.is_some()
    }

    /// Frees every kept buffer (buffers handed out stay valid and come back when dropped).
    pub fn clear(&self) {
        let all = std::mem::take(&mut *self.shelf.free.lock().unwrap_or_else(|e| e.into_inner()));
        drop(all);
    }
}

impl<T> PooledBuf<T> {
    /// Elements of the whole buffer (at least `len`).
    pub fn capacity(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len())
    }
}

impl<T> Drop for PooledBuf<T> {
    fn drop(&mut self) {
        let (Some(buf), Some(shelf)) = (self.buf.take(), self.home.upgrade()) else {
            return;
        };
        shelf.out.fetch_sub(1, Ordering::Relaxed);
        let dropped = {
            let mut free = shelf.free.lock().unwrap_or_else(|e| e.into_inner());
            free.push(buf);
            if free.len() > shelf.keep {
                // The smallest goes.
                let small = (0..free.len()).min_by_key(|&i| free[i].len());
                small.map(|i| free.swap_remove(i))
            } else {
                None
            }
        };
        drop(dropped);
    }
}

impl<T> std::ops::Deref for PooledBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self
            .buf
            .as_ref()
            .expect("a pooled buffer holds its buffer until dropped")[..self.len]
    }
}

impl<T> std::ops::DerefMut for PooledBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let len = self.len;
        &mut self
            .buf
            .as_mut()
            .expect("a pooled buffer holds its buffer until dropped")[..len]
    }
}

impl<T> std::fmt::Debug for PooledBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl crate::Backend {
    /// `n` zeroed elements of host memory for this backend's doors: page-locked on CUDA (the
    /// clustering door DMAs straight from and to it: digis in, cluster indices out), ordinary
    /// memory on the CPU. Allocating pinned memory is slow (about a millisecond per tens of
    /// MB, and it locks the pages): make the buffers once and reuse them.
    pub fn pinned<T: DeviceRepr + ValidAsZeroBits + Copy + Default>(
        &self,
        n: usize,
    ) -> Result<HostBuf<T>> {
        match self.gpu() {
            Some(g) => HostBuf::pinned(g, n),
            None => Ok(HostBuf::heap(n)),
        }
    }

    /// Four [`Backend::pinned`] arrays of `n` digis.
    ///
    /// [`Backend::pinned`]: crate::Backend::pinned
    pub fn pinned_digis(&self, n: usize) -> Result<HostDigis> {
        Ok(HostDigis {
            module: self.pinned(n)?,
            x: self.pinned(n)?,
            y: self.pinned(n)?,
            adc: self.pinned(n)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranges are found while registered, only when wholly inside one, and not after removal.
    #[test]
    fn registry_finds_ranges_inside_one_allocation() {
        // Fake addresses far from any real allocation of this process.
        let (a, b) = (0x7000_0000_0000usize, 0x7000_0010_0000usize);
        register(a, a + 4096);
        register(b, b + 100);
        assert!(registered(a, a + 4096));
        assert!(registered(a + 10, a + 20));
        assert!(!registered(a + 10, a + 4097), "past the end");
        assert!(!registered(a - 1, a + 10), "before the start");
        assert!(!registered(a + 4000, b + 10), "across two ranges");
        assert!(registered(b + 99, b + 100));
        assert!(!registered(b + 50, b + 50), "empty");
        unregister(a);
        assert!(!registered(a + 10, a + 20));
        assert!(registered(b, b + 1));
        unregister(b);
        assert!(!registered(b, b + 1));
    }

    /// Without a GPU the buffer is ordinary zeroed memory, not registered; slices of it and
    /// a `HostDigis` work as slices do.
    #[test]
    fn heap_buffers_are_plain_memory() {
        let mut h = HostBuf::<u32>::heap(1000);
        assert!(!h.is_pinned());
        assert!(h.iter().all(|&v| v == 0));
        h[999] = 7;
        assert_eq!(h[999], 7);
        assert!(!is_pinned(&h[..]));
        let b = crate::Backend::cpu();
        let mut d = b.pinned_digis(3).unwrap();
        assert!(d.copy_from(DigisRef::default()).is_err());
        let v = [1u16, 2, 3];
        d.copy_from(DigisRef {
            module: &v,
            x: &v,
            y: &v,
            adc: &v,
        })
        .unwrap();
        let r = DigisRef::from(&d);
        assert_eq!(r.adc, &v);
        assert!(!digis_pinned(r));
    }

    /// The pool without a GPU: sizes that fit allocate nothing, a buffer held is out of the
    /// pool, buffers come back on drop, at most `keep` are kept, and a too-small free
    /// buffer is replaced by a larger one.
    #[test]
    fn pool_reuses_buffers_that_fit() {
        let b = crate::Backend::cpu();
        let pool = HostPool::<u32>::new(&b, 2);
        assert!(!pool.is_pinned());
        let mut a = pool.take(100).unwrap();
        assert_eq!((a.len(), a.capacity(), pool.allocations()), (100, 112, 1));
        a.iter_mut().for_each(|v| *v = 7);
        let c = pool.take(60).unwrap();
        assert_eq!(pool.allocations(), 2, "`a` is held: not handed out again");
        assert_eq!(pool.in_use(), 2);
        assert_eq!(c.capacity(), 112, "within 2× of the largest: made as large");
        let tiny = pool.take(10).unwrap();
        assert_eq!(tiny.capacity(), 11, "far smaller: its own size");
        drop((c, tiny));
        assert_eq!((pool.free(), pool.in_use()), (2, 1));
        let d = pool.take(11).unwrap();
        assert_eq!(
            (d.capacity(), pool.allocations()),
            (11, 3),
            "the smallest that fits"
        );
        assert!(a.iter().all(|&v| v == 7), "the held result is untouched");
        drop((a, d));
        assert_eq!(pool.free(), 2, "at most `keep` kept: the smallest went");
        let e = pool.take(1000).unwrap();
        assert_eq!(pool.allocations(), 4);
        assert_eq!(pool.free(), 1, "the largest too-small buffer went");
        assert_eq!(e.capacity(), 1125);
        drop(e);
        let big = pool.take(900).unwrap();
        assert_eq!((big.capacity(), pool.allocations()), (1125, 4), "reused");
        drop(pool);
        assert_eq!(big.len(), 900, "a buffer outlives its pool");
    }
}
