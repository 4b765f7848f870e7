//! Device helpers shared by the stages: event bounds, union-find, pixel status.

#[allow(unused_imports)]
use super::kernels::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;
use core::ptr::read_volatile;

/// [`event_of`] over a device pointer.
///
/// # Safety
/// `offsets` valid for `nevents + 1` entries and `offsets[0] <= i < offsets[nevents]`.
#[inline(always)]
pub(crate) unsafe fn event_bounds(offsets: *const u32, nevents: u32, i: u32) -> (u32, u32, u32) {
    // SAFETY: every e passed is <= nevents (forwarded contract).
    event_of(nevents, |e| unsafe { offsets.add(e as usize).read() }, i)
}

/// One past the last digi of module `mid` starting at digi `first` (the seed's `msize`):
/// the first later digi of the event that belongs to another valid module, or `ev_end`.
/// The group's threads (`lt` of `gsize`) search with stride `gsize`; the smallest hit wins
/// through an `atomicMin` on `hdr`, which must hold `ev_end` before the group's previous
/// barrier. `sync` is the group barrier, called once before `hdr` is read. Used by the
/// small-module pass and the seed kernel.
///
/// # Safety
/// `module` valid for `ev_end` digis; `hdr` a shared word holding `ev_end`, visible to the
/// whole group; every thread of the group calls this.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn module_end(
    module: *const u16,
    first: u32,
    ev_end: u32,
    mid: u16,
    hdr: *mut u32,
    lt: u32,
    gsize: u32,
    sync: impl Fn(),
) -> u32 {
    let mut d = first + lt;
    while d < ev_end {
        // SAFETY: d < ev_end (contract).
        let id = unsafe { module.add(d as usize).read() };
        if id != INVALID_MODULE && id != mid {
            // SAFETY: shared header word (contract).
            unsafe { i::atomic_min_u32(hdr, d) };
            break;
        }
        d += gsize;
    }
    sync();
    // SAFETY: final after the barrier.
    unsafe { read_volatile(hdr) }
}

/// In-place inclusive scan of the column counts `off[0..=cols]` by the whole block, in
/// chunks of `blockDim.x` (one block scan and one barrier per chunk): afterwards `off[b]` is
/// the end of column `b` in the bucket container. Returns the total. Used by the
/// shared-memory kernel and the seed kernel.
///
/// # Safety
/// `off` valid for `cols + 1` shared words, final (a barrier after the counting); every
/// thread of the block calls this; `bs` the block's scan storage.
#[inline(always)]
pub(crate) unsafe fn column_scan(bs: &BlockScan<u32>, off: *mut u32, cols: u32) -> u32 {
    let (tid, bd) = (i::thread_idx_x(), i::block_dim_x());
    let mut carry = 0u32;
    let mut c = 0u32;
    while c <= cols {
        let b = c + tid;
        // SAFETY: b <= cols.
        let v = if b <= cols {
            unsafe { off.add(b as usize).read() }
        } else {
            0
        };
        let (e, tot) = bs.exclusive_sum(v);
        if b <= cols {
            // SAFETY: b <= cols.
            unsafe { off.add(b as usize).write(carry + e + v) };
        }
        carry += tot;
        i::sync_threads();
        c += bd;
    }
    carry
}

/// An array of `u32` words that the union-find walks: a generic pointer (global memory, or
/// shared memory through the generic window) or a [`SharedWords`] array addressed in the
/// shared state space (`ld.shared`, `atom.shared.cas`: no 64-bit address arithmetic, no
/// generic-to-shared resolution).
pub(crate) trait Words: Copy {
    /// The word at `i`, re-read from memory on every call (other threads write it).
    ///
    /// # Safety
    /// `i` inside the array.
    unsafe fn load(self, i: u32) -> u32;
    /// `atomicCAS` on the word at `i`; returns the old word.
    ///
    /// # Safety
    /// As [`Words::load`].
    unsafe fn cas(self, i: u32, compare: u32, val: u32) -> u32;
}

impl Words for *mut u32 {
    #[inline(always)]
    unsafe fn load(self, i: u32) -> u32 {
        // SAFETY: i inside the array (contract).
        unsafe { read_volatile(self.add(i as usize)) }
    }
    #[inline(always)]
    unsafe fn cas(self, i: u32, compare: u32, val: u32) -> u32 {
        // SAFETY: i inside the array (contract); u32 words are aligned.
        unsafe { i::atomic_cas_u32(self.add(i as usize), compare, val) }
    }
}

/// A `u32` array in the block's shared memory, by its 32-bit shared-window address (from
/// [`i::shared_base`]): every access is one `ld.shared` / `st.shared` / `atom.shared`
/// with a 32-bit address.
#[derive(Clone, Copy)]
pub(crate) struct SharedWords(pub(crate) u32);

impl SharedWords {
    /// The array starting `words` words after this one.
    #[inline(always)]
    pub(crate) fn offset(self, words: u32) -> Self {
        Self(self.0 + 4 * words)
    }
    /// Shared-window address of word `i`.
    #[inline(always)]
    pub(crate) fn addr(self, i: u32) -> u32 {
        self.0 + 4 * i
    }
    /// Loads word `i`.
    ///
    /// # Safety
    /// `i` inside the array, which lies in this block's shared memory.
    #[inline(always)]
    pub(crate) unsafe fn ld(self, i: u32) -> u32 {
        // SAFETY: forwarded contract.
        unsafe { i::ld_shared_u32(self.addr(i)) }
    }
    /// Stores word `i`.
    ///
    /// # Safety
    /// As [`SharedWords::ld`].
    #[inline(always)]
    pub(crate) unsafe fn st(self, i: u32, v: u32) {
        // SAFETY: forwarded contract.
        unsafe { i::st_shared_u32(self.addr(i), v) }
    }
    /// `atomicCAS` on word `i`; returns the old word.
    ///
    /// # Safety
    /// As [`SharedWords::ld`].
    #[inline(always)]
    pub(crate) unsafe fn cas(self, i: u32, compare: u32, val: u32) -> u32 {
        // SAFETY: forwarded contract.
        unsafe { i::atom_shared_cas_u32(self.addr(i), compare, val) }
    }
    /// `atomicExch` on word `i`; returns the old word.
    ///
    /// # Safety
    /// As [`SharedWords::ld`].
    #[inline(always)]
    pub(crate) unsafe fn exch(self, i: u32, val: u32) -> u32 {
        // SAFETY: forwarded contract.
        unsafe { i::atom_shared_exch_u32(self.addr(i), val) }
    }
    /// `atomicAdd` on word `i`, result unused.
    ///
    /// # Safety
    /// As [`SharedWords::ld`].
    #[inline(always)]
    pub(crate) unsafe fn red_add(self, i: u32, v: u32) {
        // SAFETY: forwarded contract.
        unsafe { i::red_shared_add_u32(self.addr(i), v) }
    }
}

impl Words for SharedWords {
    #[inline(always)]
    unsafe fn load(self, i: u32) -> u32 {
        // SAFETY: forwarded contract (the asm load is never merged or hoisted).
        unsafe { self.ld(i) }
    }
    #[inline(always)]
    unsafe fn cas(self, i: u32, compare: u32, val: u32) -> u32 {
        // SAFETY: forwarded contract.
        unsafe { SharedWords::cas(self, i, compare, val) }
    }
}

/// Union-find root with path halving. Parents only ever point to smaller indices.
///
/// # Safety
/// `parent` valid for every index reachable from `a`; concurrent writers only store
/// ancestors or hook roots by CAS.
#[inline(always)]
pub(crate) unsafe fn find<W: Words>(parent: W, mut a: u32) -> u32 {
    loop {
        // SAFETY: a is a valid index (contract).
        let pa = unsafe { parent.load(a) };
        if pa == a {
            return a;
        }
        // SAFETY: pa is an ancestor, a valid index.
        let ppa = unsafe { parent.load(pa) };
        if ppa != pa {
            // Path halving by CAS (an atomic, so concurrent readers see either pointer,
            // both valid ancestors; compute-sanitizer's racecheck does not flag it).
            // SAFETY: a is no longer a root, so the hooking CAS can never succeed on it;
            // storing an ancestor keeps the forest valid.
            unsafe { parent.cas(a, pa, ppa) };
        }
        a = ppa;
    }
}

/// Union-find root without writing (safe to run while other threads write roots).
///
/// # Safety
/// As [`find`].
#[inline(always)]
pub(crate) unsafe fn find_root<W: Words>(parent: W, mut a: u32) -> u32 {
    loop {
        // SAFETY: a is a valid index (contract).
        let pa = unsafe { parent.load(a) };
        if pa == a {
            return a;
        }
        a = pa;
    }
}

/// Joins the trees of `a` and `b`, hooking the larger root under the smaller.
///
/// # Safety
/// As [`find`].
#[inline(always)]
pub(crate) unsafe fn union<W: Words>(parent: W, a: u32, b: u32) {
    // SAFETY: forwarded contract.
    unsafe {
        let mut a = find(parent, a);
        let mut b = find(parent, b);
        while a != b {
            if a > b {
                core::mem::swap(&mut a, &mut b);
            }
            let old = parent.cas(b, b, a);
            if old == b {
                return;
            }
            b = find(parent, old);
            a = find(parent, a);
        }
    }
}

/// Marks pixel `(x, y)` seen once more (the seed's `promote`, a CAS loop).
///
/// # Safety
/// `status` valid for `status_words(rows, cols)` words, `x < rows`, `y < cols`.
#[inline(always)]
pub(crate) unsafe fn promote_pixel(status: *mut u32, rows: u32, x: u32, y: u32) {
    let (w, sh) = status_position(rows, x, y);
    // SAFETY: w < status_words (contract).
    let p = unsafe { status.add(w as usize) };
    // SAFETY: p valid.
    let mut old = unsafe { read_volatile(p) };
    loop {
        let st = (old >> sh) & 3;
        if st == STATUS_DUPLICATE {
            return;
        }
        let new = (old & !(3 << sh)) | (promote(st) << sh);
        // SAFETY: p valid and aligned.
        let seen = unsafe { i::atomic_cas_u32(p, old, new) };
        if seen == old {
            return;
        }
        old = seen;
    }
}

/// The block's pixel status words: `nwords` words at `in_smem`, cleared to `STATUS_EMPTY` by
/// the block's threads (the caller synchronises before reading them), or, when
/// `status_global` is not null, the block's own zeroed slab of global memory.
///
/// # Safety
/// `in_smem` valid for `nwords` words of this block's shared memory when `status_global` is
/// null; otherwise `status_global` holds `nwords` zeroed words per block of the grid.
#[inline(always)]
pub(crate) unsafe fn status_area(
    in_smem: *mut u32,
    status_global: *mut u32,
    nwords: u32,
) -> *mut u32 {
    if status_global.is_null() {
        let mut w = i::thread_idx_x();
        while w < nwords {
            // SAFETY: w < nwords.
            unsafe { in_smem.add(w as usize).write(STATUS_EMPTY) };
            w += i::block_dim_x();
        }
        in_smem
    } else {
        // SAFETY: one zeroed slab per block (caller contract).
        unsafe { status_global.add(i::block_idx_x() as usize * nwords as usize) }
    }
}
