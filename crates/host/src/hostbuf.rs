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
use std::sync::RwLock;

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
        let flags = cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: the memory is zeroed below before any slice of it is made.
        let mut p = unsafe { gpu.context().alloc_pinned_with_flags::<T>(n.max(1), flags) }
            .ctx("allocating pinned host memory")?;
        let ptr = p.as_mut_ptr().ctx("mapping pinned host memory")?;
        // SAFETY: `ptr` addresses `n.max(1)` elements of this allocation; all-zero bytes are a
        // valid `T` (`ValidAsZeroBits`).
        unsafe { std::ptr::write_bytes(ptr, 0, n.max(1)) };
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
}
