//! CMS pixel clustering: `countModules`, `findClus` and the cluster charge cut
//! (CMSSW `gpuClustering.h` / `gpuClusterChargeCut.h`; seeds 004, 000 and 001).
//!
//! # Data
//! Digis in structure-of-arrays form: `module` (u16, [`INVALID_MODULE`] for invalid digis),
//! `x` (row), `y` (column), `adc` (charge in electrons after calibration), all `u16`. The digis
//! of one module are consecutive (possibly interleaved with invalid digis). Several events may
//! be clustered in one launch: `event_offsets[e] .. event_offsets[e + 1]` are event `e`'s digis,
//! and an event boundary always ends a module.
//!
//! Outputs: `clus[i]` = the digi's cluster index within its module (0-based, consecutive), or
//! [`NOT_CLUSTERED`] (-1) for invalid digis, duplicated pixels and digis of clusters removed by
//! the charge cut; `clus_in_module[e * modules + m]` = number of clusters of module `m` in event
//! `e`; `module_first[e * modules + m]` = the module's first digi index, or [`NO_MODULE_START`].
//!
//! # Kernels
//! 1. [`KERNEL_COUNT_MODULES`], one thread per digi: initialises `clus`, finds module starts
//!    (the first valid digi whose previous valid digi in the event belongs to another module)
//!    and appends them to the slot list `module_start[1..]` (`module_start[0]` = count), as the
//!    seed does with `atomicInc`. Digis with a module id or coordinates out of range are
//!    reported through `bad` (the smallest such index) and treated as invalid.
//! 2. [`KERNEL_FIND_CLUS_SMALL`], twice: one warp per module (up to 128 digis), then one block
//!    per module (up to 1024 digis): module end, duplicates and neighbours through a pixel hash
//!    table in shared memory, union-find, numbering, and the charge cut in place. Larger
//!    modules are listed for the next kernel. (`docs/clustering.md` has the whole chain.)
//! 3. [`KERNEL_FIND_CLUS`], one block per listed module (grid-stride): module end
//!    (`msize`, `atomicMin`), duplicate detection with 2-bit status words (CMSSW "Alternative 2":
//!    every copy of a pixel that occurs twice or more is invalidated), a bucket container by
//!    column in shared memory (count, block scan, fill), then 8-connected labelling by
//!    lock-free union-find with path halving in shared memory, the neighbours of a pixel
//!    being found, as in the seed, among the later entries of its column and the whole next
//!    column. Hooking always puts the larger root under the smaller, so the final root of every
//!    cluster is its smallest digi index whatever the thread interleaving. Roots are numbered
//!    by a block-wide exclusive scan in digi order: **cluster `c` of a module is the one whose
//!    smallest digi index is the `c`-th smallest**, identical run to run and to the CPU oracle.
//!    A module with more than `capacity` digis is appended to the fallback list instead.
//! 4. [`KERNEL_FIND_CLUS_FALLBACK`], one block per module of the fallback list: the same
//!    result for a module of any size (up to every pixel of the module, duplicates on top),
//!    with a dense per-block pixel grid in global memory for duplicate detection and
//!    neighbour lookup, and union-find on `clus` itself.
//! 5. [`KERNEL_CHARGE_CUT`], one block per module slot: per-cluster charge (64-bit sums),
//!    clusters with charge `< threshold` removed (CMSSW 13/14 keep `charge >= cut`), survivors
//!    renumbered consecutively in their previous order (block scan). No cap on the number of
//!    clusters per module (CMSSW drops clusters beyond 1024).
//!
//! # Example
//! One module (id 7), digis `(x, y)`: `0:(5,5) 1:(9,9) 2:(6,6) 3:(5,5) 4:(10,10) 5:(2,2)`.
//! Digis 0 and 3 are the same pixel: both are invalidated. Digi 2 is then alone, digis 1 and 4
//! touch diagonally, digi 5 is alone. Clusters by smallest digi index: {1,4} → 0, {2} → 1,
//! {5} → 2. `clus = [-1, 0, 1, -1, 0, 2]`, `clus_in_module[7] = 3`, `module_first[7] = 0`.

use crate::params::DevPtr;

/// Module id of an invalid digi (CMSSW `invalidModuleId`, u16 max − 1).
pub const INVALID_MODULE: u16 = 65534;
/// Cluster index of a digi in no cluster (invalid, duplicated pixel, or charge-cut).
pub const NOT_CLUSTERED: i32 = -1;
/// `module_first` of a module with no digi.
pub const NO_MODULE_START: u32 = u32::MAX;
/// Largest module side (rows or columns) supported: packed coordinates keep bit 31 free.
pub const MAX_MODULE_SIDE: u32 = 1 << 15;

/// Kernel: module starts and `clus` initialisation.
pub const KERNEL_COUNT_MODULES: &str = "clustering_count_modules";
/// Kernel: clustering of small modules by pairwise comparisons in shared memory.
pub const KERNEL_FIND_CLUS_SMALL: &str = "clustering_find_clus_small";
/// Kernel: per-module clustering in shared memory (status words, column buckets).
pub const KERNEL_FIND_CLUS: &str = "clustering_find_clus";
/// Kernel: per-module clustering of modules over the fast path's capacity.
pub const KERNEL_FIND_CLUS_FALLBACK: &str = "clustering_find_clus_fallback";
/// Kernel: the seed's `findClus` (nearest-neighbour arrays, iterative `atomicMin` and pointer
/// jumping ending with `__syncthreads_or`, `atomicInc` numbering), the benchmark's baseline.
pub const KERNEL_FIND_CLUS_SEED: &str = "clustering_find_clus_seed";
/// Kernel: cluster charge cut and renumbering.
pub const KERNEL_CHARGE_CUT: &str = "clustering_cluster_charge_cut";

/// Threads per block of `count_modules`.
pub const COUNT_MODULES_THREADS: u32 = 256;
/// Threads per block of the fallback and charge-cut kernels.
pub const FALLBACK_THREADS: u32 = 256;
/// Blocks of the fallback kernel per SM (each block owns one pixel grid in global memory)...
pub const FALLBACK_BLOCKS_PER_SM: u32 = 2;
/// ...as long as all the grids together stay within this many bytes.
pub const FALLBACK_GRID_BYTES: usize = 256 << 20;

/// 2-bit pixel states of the duplicate detection.
pub const STATUS_EMPTY: u32 = 0;
/// Seen once.
pub const STATUS_FOUND: u32 = 1;
/// Seen twice or more.
pub const STATUS_DUPLICATE: u32 = 3;
/// Status words kept in shared memory up to this many (Phase-1: 4160); beyond, each block
/// uses a slab of global memory.
pub const STATUS_SMEM_MAX_WORDS: u32 = 8192;

/// Packed coordinates of an invalid digi in the fast path.
pub const INVALID_XY: u32 = u32::MAX;
/// Flag bit of a duplicated pixel in packed coordinates.
pub const DUPLICATE_BIT: u32 = 1 << 31;
/// Empty cell of the fallback pixel grid.
pub const GRID_EMPTY: u32 = u32::MAX;
/// Cell of the fallback pixel grid holding two or more digis.
pub const GRID_DUPLICATE: u32 = u32::MAX - 1;

/// Number of 2-bit status words for a module of `rows × cols` pixels.
pub const fn status_words(rows: u32, cols: u32) -> u32 {
    (rows * cols).div_ceil(16)
}

/// Word and bit shift of pixel `(x, y)` in the status words (CMSSW: `(rows*y + x)/16` and
/// `(x % 16)*2`, identical when `rows` is a multiple of 16).
#[inline(always)]
pub const fn status_position(rows: u32, x: u32, y: u32) -> (u32, u32) {
    let p = rows * y + x;
    (p / 16, (p % 16) * 2)
}

/// The next 2-bit state of a pixel seen once more: Empty → Found → Duplicate → Duplicate.
#[inline(always)]
pub const fn promote(state: u32) -> u32 {
    if state == STATUS_EMPTY {
        STATUS_FOUND
    } else {
        STATUS_DUPLICATE
    }
}

/// `x | y << 16`.
#[inline(always)]
pub const fn pack_xy(x: u32, y: u32) -> u32 {
    x | (y << 16)
}

/// Whether two pixels are 8-connected neighbours (or the same pixel).
#[inline(always)]
pub const fn touching(x0: u32, y0: u32, x1: u32, y1: u32) -> bool {
    x0.abs_diff(x1) <= 1 && y0.abs_diff(y1) <= 1
}

/// The seed's `maxPixInModule` (CMSSW 13+): histogram capacity of the seed kernel.
pub const SEED_MAX_PIX_IN_MODULE: u32 = 6000;
/// The seed's `maxiter`: strided iterations per thread covered by the `nn` arrays.
pub const SEED_MAX_ITER: u32 = 16;
/// The seed's `maxNeighbours` per pixel.
pub const SEED_MAX_NEIGHBOURS: u32 = 10;

/// Shared-memory bytes of [`KERNEL_FIND_CLUS_SEED`] (status words always in shared memory).
pub const fn find_clus_seed_smem_bytes(rows: u32, cols: u32) -> usize {
    (4 + 36 + (cols + 1).div_ceil(4) * 4 + SEED_MAX_PIX_IN_MODULE + status_words(rows, cols))
        as usize
        * 4
}

/// Words of the fast path's shared memory ahead of the status words: header (4), block-scan
/// storage (36), column offsets (`cols + 1`, padded to 4), then `xy`, `parent` and `content`
/// (`capacity` each).
pub const fn find_clus_words_before_status(cols: u32, capacity: u32) -> u32 {
    4 + 36 + (cols + 1).div_ceil(4) * 4 + 3 * capacity
}

/// Default capacity of [`KERNEL_FIND_CLUS_SMALL`] (digis per module).
pub const SMALL_CAPACITY: u32 = 1024;
/// Default threads per block of [`KERNEL_FIND_CLUS_SMALL`].
pub const SMALL_THREADS: u32 = 256;
/// Default capacity of [`KERNEL_FIND_CLUS`] (CMSSW's `maxPixInModule`).
pub const MEDIUM_CAPACITY: u32 = 6000;

/// Empty slot (key or value) of the small-module kernel's pixel table.
pub const TABLE_EMPTY: u32 = u32::MAX;
/// Value of a table slot whose pixel was inserted twice or more.
pub const TABLE_DUPLICATE: u32 = u32::MAX - 1;

/// Slots of the small-module kernel's pixel table: a power of two at least twice the
/// capacity (load factor ≤ 1/2), at least 32.
pub const fn small_table_size(capacity: u32) -> u32 {
    let t = (2 * capacity).next_power_of_two();
    if t < 32 {
        32
    } else {
        t
    }
}

/// Table slot where the search for packed pixel `v` starts in a table of `2^(32 - shift)`
/// slots: the high bits of a Fibonacci (multiplicative) hash.
#[inline(always)]
pub const fn table_hash(v: u32, shift: u32) -> u32 {
    v.wrapping_mul(0x9e37_79b1) >> shift
}

/// Words of one group of [`KERNEL_FIND_CLUS_SMALL`]: header (4), `xy`, `parent`, `number`,
/// `cl` and `charge` (`capacity` u32 each; a module of at most [`MAX_SMALL_CAPACITY`] digis
/// of at most 65535 e⁻ sums below 2^32), and the pixel table (keys and values,
/// [`small_table_size`] u32 each).
pub const fn small_group_words(capacity: u32) -> u32 {
    4 + 5 * capacity + 2 * small_table_size(capacity)
}

/// Largest capacity of [`KERNEL_FIND_CLUS_SMALL`] (32-bit charge sums cannot overflow).
pub const MAX_SMALL_CAPACITY: u32 = 65536;

/// Shared-memory bytes of [`KERNEL_FIND_CLUS_SMALL`] with `groups` groups per block: the
/// block-scan storage (36 words) and the groups' areas.
pub const fn find_clus_small_smem_bytes(capacity: u32, groups: u32) -> usize {
    (36 + groups * small_group_words(capacity)) as usize * 4
}

/// Default capacity of the warp-group pass of [`KERNEL_FIND_CLUS_SMALL`].
pub const WARP_CAPACITY: u32 = 128;
/// Threads per block of the warp-group pass (4 warps, 4 modules at a time).
pub const WARP_PASS_THREADS: u32 = 128;

/// Shared-memory bytes of [`KERNEL_FIND_CLUS`]; `status_in_smem` adds the status words.
pub const fn find_clus_smem_bytes(
    rows: u32,
    cols: u32,
    capacity: u32,
    status_in_smem: bool,
) -> usize {
    let w = find_clus_words_before_status(cols, capacity)
        + if status_in_smem {
            status_words(rows, cols)
        } else {
            0
        };
    w as usize * 4
}

/// Shared-memory bytes of the fallback and charge-cut kernels (block-scan storage).
pub const fn scan_only_smem_bytes() -> usize {
    // 33 u64 words of BlockScan<u64> storage plus the module-end word, padded.
    36 * 8
}

/// Event of digi `i`: the largest `e < nevents` with `offset(e) <= i`, returned with the
/// event's bounds `(e, offset(e), offset(e + 1))`. Requires `offset(0) <= i < offset(nevents)`
/// and non-decreasing offsets.
#[inline(always)]
pub fn event_of(nevents: u32, offset: impl Fn(u32) -> u32, i: u32) -> (u32, u32, u32) {
    let (mut lo, mut hi) = (0u32, nevents);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if offset(mid) <= i {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo, offset(lo), offset(lo + 1))
}

/// Parameters of the `clustering_count_modules` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringCountModulesParams {
    pub module: DevPtr<u16>,
    pub x: DevPtr<u16>,
    pub y: DevPtr<u16>,
    pub event_offsets: DevPtr<u32>,
    pub clus: DevPtr<i32>,
    pub module_start: DevPtr<u32>,
    pub slot_info: DevPtr<u32>,
    pub bad: DevPtr<u32>,
    pub n: u32,
    pub nevents: u32,
    pub nmodules: u32,
    pub rows: u32,
    pub cols: u32,
    pub _pad0: u32,
}
crate::kernel_params!(
    ClusteringCountModulesParams,
    88,
    ["clustering_count_modules"]
);

/// Parameters of the `clustering_find_clus_small` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringFindClusSmallParams {
    pub module: DevPtr<u16>,
    pub x: DevPtr<u16>,
    pub y: DevPtr<u16>,
    pub adc: DevPtr<u16>,
    pub event_offsets: DevPtr<u32>,
    pub module_start: DevPtr<u32>,
    pub slot_info: DevPtr<u32>,
    pub slot_end: DevPtr<u32>,
    pub clus: DevPtr<i32>,
    pub clus_in_module: DevPtr<u32>,
    pub module_first: DevPtr<u32>,
    pub slots: DevPtr<u32>,
    pub larger: DevPtr<u32>,
    pub nmodules: u32,
    pub rows: u32,
    pub cols: u32,
    pub capacity: u32,
    pub warp_groups: u32,
    pub layer1_modules: u32,
    pub threshold_layer1: u32,
    pub threshold_other: u32,
}
crate::kernel_params!(
    ClusteringFindClusSmallParams,
    136,
    ["clustering_find_clus_small"]
);

/// Parameters of the `clustering_find_clus` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringFindClusParams {
    pub module: DevPtr<u16>,
    pub x: DevPtr<u16>,
    pub y: DevPtr<u16>,
    pub event_offsets: DevPtr<u32>,
    pub module_start: DevPtr<u32>,
    pub slot_end: DevPtr<u32>,
    pub clus: DevPtr<i32>,
    pub clus_in_module: DevPtr<u32>,
    pub module_first: DevPtr<u32>,
    pub status_global: DevPtr<u32>,
    pub slots: DevPtr<u32>,
    pub fallback: DevPtr<u32>,
    pub nevents: u32,
    pub nmodules: u32,
    pub rows: u32,
    pub cols: u32,
    pub capacity: u32,
    pub _pad0: u32,
}
crate::kernel_params!(ClusteringFindClusParams, 120, ["clustering_find_clus"]);

/// Parameters of the `clustering_find_clus_seed` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringFindClusSeedParams {
    pub module: DevPtr<u16>,
    pub x: DevPtr<u16>,
    pub y: DevPtr<u16>,
    pub event_offsets: DevPtr<u32>,
    pub module_start: DevPtr<u32>,
    pub slot_end: DevPtr<u32>,
    pub clus: DevPtr<i32>,
    pub clus_in_module: DevPtr<u32>,
    pub module_first: DevPtr<u32>,
    pub fallback: DevPtr<u32>,
    pub nevents: u32,
    pub nmodules: u32,
    pub rows: u32,
    pub cols: u32,
}
crate::kernel_params!(
    ClusteringFindClusSeedParams,
    96,
    ["clustering_find_clus_seed"]
);

/// Parameters of the `clustering_find_clus_fallback` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringFindClusFallbackParams {
    pub module: DevPtr<u16>,
    pub x: DevPtr<u16>,
    pub y: DevPtr<u16>,
    pub event_offsets: DevPtr<u32>,
    pub module_start: DevPtr<u32>,
    pub slot_end: DevPtr<u32>,
    pub clus: DevPtr<i32>,
    pub clus_in_module: DevPtr<u32>,
    pub module_first: DevPtr<u32>,
    pub fallback: DevPtr<u32>,
    pub grid: DevPtr<u32>,
    pub nevents: u32,
    pub nmodules: u32,
    pub rows: u32,
    pub cols: u32,
}
crate::kernel_params!(
    ClusteringFindClusFallbackParams,
    104,
    ["clustering_find_clus_fallback"]
);

/// Parameters of the `clustering_cluster_charge_cut` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringClusterChargeCutParams {
    pub module: DevPtr<u16>,
    pub adc: DevPtr<u16>,
    pub event_offsets: DevPtr<u32>,
    pub module_start: DevPtr<u32>,
    pub slot_end: DevPtr<u32>,
    pub clus: DevPtr<i32>,
    pub clus_in_module: DevPtr<u32>,
    pub scratch: DevPtr<u64>,
    pub slots: DevPtr<u32>,
    pub nevents: u32,
    pub nmodules: u32,
    pub layer1_modules: u32,
    pub threshold_layer1: u32,
    pub threshold_other: u32,
    pub _pad0: u32,
}
crate::kernel_params!(
    ClusteringClusterChargeCutParams,
    96,
    ["clustering_cluster_charge_cut"]
);

#[cfg(target_arch = "nvptx64")]
mod kernels {
    use super::*;
    use crate::intrinsics as i;
    use crate::scan::device::{warp_inclusive_sum, BlockScan};
    use core::ptr::{read_volatile, write_volatile};

    /// [`event_of`] over a device pointer.
    ///
    /// # Safety
    /// `offsets` valid for `nevents + 1` entries and `offsets[0] <= i < offsets[nevents]`.
    #[inline(always)]
    unsafe fn event_bounds(offsets: *const u32, nevents: u32, i: u32) -> (u32, u32, u32) {
        // SAFETY: every e passed is <= nevents (forwarded contract).
        event_of(nevents, |e| unsafe { offsets.add(e as usize).read() }, i)
    }

    /// Union-find root with path halving. Parents only ever point to smaller indices.
    ///
    /// # Safety
    /// `parent` valid for every index reachable from `a`; concurrent writers only store
    /// ancestors or hook roots by CAS.
    #[inline(always)]
    unsafe fn find(parent: *mut u32, mut a: u32) -> u32 {
        loop {
            // SAFETY: a is a valid index (contract).
            let pa = unsafe { read_volatile(parent.add(a as usize)) };
            if pa == a {
                return a;
            }
            // SAFETY: pa is an ancestor, a valid index.
            let ppa = unsafe { read_volatile(parent.add(pa as usize)) };
            if ppa != pa {
                // Path halving by CAS (an atomic, so concurrent readers see either pointer,
                // both valid ancestors; compute-sanitizer's racecheck does not flag it).
                // SAFETY: a is no longer a root, so the hooking CAS can never succeed on it;
                // storing an ancestor keeps the forest valid.
                unsafe { i::atomic_cas_u32(parent.add(a as usize), pa, ppa) };
            }
            a = ppa;
        }
    }

    /// Union-find root without writing (safe to run while other threads write roots).
    ///
    /// # Safety
    /// As [`find`].
    #[inline(always)]
    unsafe fn find_root(parent: *mut u32, mut a: u32) -> u32 {
        loop {
            // SAFETY: a is a valid index (contract).
            let pa = unsafe { read_volatile(parent.add(a as usize)) };
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
    unsafe fn union(parent: *mut u32, a: u32, b: u32) {
        // SAFETY: forwarded contract.
        unsafe {
            let mut a = find(parent, a);
            let mut b = find(parent, b);
            while a != b {
                if a > b {
                    core::mem::swap(&mut a, &mut b);
                }
                let old = i::atomic_cas_u32(parent.add(b as usize), b, a);
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
    unsafe fn promote_pixel(status: *mut u32, rows: u32, x: u32, y: u32) {
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

    /// Initialises `clus` to [`NOT_CLUSTERED`] and appends every module start to
    /// `module_start[1..]` (`module_start[0]` counts them). Out-of-range module ids and
    /// coordinates: the smallest such index is recorded in `bad`
    /// ([`crate::histogram::encode_first_index`], zero = none); the digi is treated as invalid.
    ///
    /// # Safety
    /// `module`, `x`, `y`, `clus` valid for `n`; `module_start` for `n + 1` words with
    /// `module_start[0] == 0`; `event_offsets` for `nevents + 1` non-decreasing entries from 0
    /// to `n`; `bad` a valid word.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn clustering_count_modules(p: ClusteringCountModulesParams) {
        let (
            module,
            x,
            y,
            n,
            event_offsets,
            nevents,
            nmodules,
            rows,
            cols,
            clus,
            module_start,
            slot_info,
            bad,
        ) = (
            p.module.ptr(),
            p.x.ptr(),
            p.y.ptr(),
            p.n,
            p.event_offsets.ptr(),
            p.nevents,
            p.nmodules,
            p.rows,
            p.cols,
            p.clus.ptr_mut(),
            p.module_start.ptr_mut(),
            p.slot_info.ptr_mut(),
            p.bad.ptr_mut(),
        );
        let mut idx = i::global_thread_idx();
        let stride = i::grid_threads();
        while idx < n as u64 {
            let k = idx as u32;
            // SAFETY: k < n for every array.
            unsafe {
                clus.add(k as usize).write(NOT_CLUSTERED);
                let m = module.add(k as usize).read();
                if m != INVALID_MODULE {
                    if m as u32 >= nmodules
                        || x.add(k as usize).read() as u32 >= rows
                        || y.add(k as usize).read() as u32 >= cols
                    {
                        i::atomic_max_u32(bad, crate::histogram::encode_first_index(k));
                    } else {
                        let (ev, start, _) = event_bounds(event_offsets, nevents, k);
                        let mut j = k;
                        let mut prev = INVALID_MODULE;
                        while j > start {
                            j -= 1;
                            let mj = module.add(j as usize).read();
                            if mj != INVALID_MODULE {
                                prev = mj;
                                break;
                            }
                        }
                        if prev != m {
                            let slot = i::atomic_add_u32(module_start, 1);
                            module_start.add(1 + slot as usize).write(k);
                            slot_info.add(slot as usize).write(m as u32 | (ev << 16));
                        }
                    }
                }
            }
            idx += stride;
        }
    }

    /// Clustering of small modules with a hash table of the module's pixels in shared memory
    /// (open addressing, CAS insert): no status words and no column buckets, so a module needs
    /// a few KiB and the work is O(digis). A pixel inserted twice is marked duplicated and
    /// every copy of it removed (the rule of the status words); each remaining digi joins the
    /// digis at its forward neighbour pixels (x+1,y), (x-1,y+1), (x,y+1), (x+1,y+1) by the
    /// same union-find, and roots are numbered by a scan in digi order: the output equals
    /// [`clustering_find_clus`]'s. With a non-zero threshold the charge cut is applied here too
    /// (the rule of [`clustering_cluster_charge_cut`]: charges summed in shared memory,
    /// survivors renumbered in order), which saves a pass over these modules.
    ///
    /// Work is done by *groups*: with `warp_groups != 0` each warp is a group and clusters its
    /// own modules (warp barriers and warp scans only, so the warps of a block never wait for
    /// each other and many modules are in flight per SM); otherwise the whole block is one
    /// group. Modules come from `slots` (a slot list, `slots[0]` = count) or, when it is null,
    /// are every module slot. A module of more than `capacity` digis is appended to
    /// `larger[1..]` (`larger[0]` counts them). When `slots` is null the kernel also finds each
    /// module's end (`msize`, the seed's `atomicMin`) and stores it in `slot_end`.
    ///
    /// Barriers (group-wide): after the per-module reset (table empty), after the module-end
    /// search, after loading and inserting (table final), after the unions, between numbering
    /// chunks, around the charge cut, and at the end of a module.
    ///
    /// # Safety
    /// Launched after `clustering_count_modules`; `module`, `x`, `y`, `adc`, `clus` valid for
    /// `n`; `slot_end` for `n` words (set for listed slots when `slots` is not null);
    /// `clus_in_module`, `module_first` for `nevents * nmodules`; `larger` for `n + 1` words
    /// with `larger[0] == 0`; dynamic shared memory
    /// [`find_clus_small_smem_bytes`]`(capacity, groups per block)`; `blockDim.x` a multiple
    /// of 32.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn clustering_find_clus_small(p: ClusteringFindClusSmallParams) {
        let (
            module,
            x,
            y,
            adc,
            event_offsets,
            nmodules,
            rows,
            cols,
            module_start,
            slot_info,
            slot_end,
            clus,
            clus_in_module,
            module_first,
            capacity,
            warp_groups,
            layer1_modules,
            threshold_layer1,
            threshold_other,
            slots,
            larger,
        ) = (
            p.module.ptr(),
            p.x.ptr(),
            p.y.ptr(),
            p.adc.ptr(),
            p.event_offsets.ptr(),
            p.nmodules,
            p.rows,
            p.cols,
            p.module_start.ptr(),
            p.slot_info.ptr(),
            p.slot_end.ptr_mut(),
            p.clus.ptr_mut(),
            p.clus_in_module.ptr_mut(),
            p.module_first.ptr_mut(),
            p.capacity,
            p.warp_groups,
            p.layer1_modules,
            p.threshold_layer1,
            p.threshold_other,
            p.slots.ptr(),
            p.larger.ptr_mut(),
        );
        let warp_mode = warp_groups != 0;
        let (gsize, group, ngroups, lt) = if warp_mode {
            (32, i::warp_id(), i::warps_per_block(), i::lane_id())
        } else {
            (i::block_dim_x(), 0, 1, i::thread_idx_x())
        };
        let gsync = || {
            if warp_mode {
                i::sync_warp()
            } else {
                i::sync_threads()
            }
        };
        let smem = i::dynamic_shared_ptr() as *mut u32;
        // SAFETY: 36 words of block-scan storage at the start (block mode only).
        let bs = unsafe { BlockScan::<u32>::new(smem) };
        // Exclusive sum over the group, with the group total.
        let gscan = |v: u32| -> (u32, u32) {
            if warp_mode {
                let incl = warp_inclusive_sum(v);
                (incl - v, i::shfl_idx(incl, 31))
            } else {
                bs.exclusive_sum(v)
            }
        };
        let tsize = small_table_size(capacity);
        let tmask = tsize - 1;
        let tshift = tsize.leading_zeros() + 1;
        let cap = capacity as usize;
        // SAFETY: this group's area inside the launch's dynamic shared memory.
        let (hdr, xy, parent, number, cl, charge, keys, vals) = unsafe {
            let g = smem.add(36 + group as usize * small_group_words(capacity) as usize);
            let xy = g.add(4);
            let charge = xy.add(4 * cap);
            let keys = charge.add(cap);
            (
                g,
                xy,
                xy.add(cap),
                xy.add(2 * cap),
                xy.add(3 * cap),
                charge,
                keys,
                keys.add(tsize as usize),
            )
        };
        let all = slots.is_null();
        // SAFETY: the slot count, written by count_modules or by the previous kernel.
        let nslots = unsafe {
            if all {
                module_start.read()
            } else {
                slots.read()
            }
        };
        let mut idx = i::block_idx_x() * ngroups + group;
        let step = i::grid_dim_x() * ngroups;
        while idx < nslots {
            // SAFETY: idx < nslots; slot k < n; first < n; ev < nevents.
            let (k, first, mid, ev, ev_end) = unsafe {
                let k = if all {
                    idx
                } else {
                    slots.add(1 + idx as usize).read()
                } as usize;
                let first = module_start.add(1 + k).read();
                let info = slot_info.add(k).read();
                let ev = info >> 16;
                (
                    k,
                    first,
                    (info & 0xffff) as u16,
                    ev,
                    event_offsets.add(ev as usize + 1).read(),
                )
            };
            if all && lt == 0 {
                // SAFETY: header word.
                unsafe { hdr.write(ev_end) };
            }
            let mut t = lt;
            while t < tsize {
                // SAFETY: t < tsize.
                unsafe {
                    keys.add(t as usize).write(TABLE_EMPTY);
                    vals.add(t as usize).write(TABLE_EMPTY);
                }
                t += gsize;
            }
            gsync();
            let msize = if all {
                let mut d = first + lt;
                while d < ev_end {
                    // SAFETY: d < n.
                    let id = unsafe { module.add(d as usize).read() };
                    if id != INVALID_MODULE && id != mid {
                        // SAFETY: header word.
                        unsafe { i::atomic_min_u32(hdr, d) };
                        break;
                    }
                    d += gsize;
                }
                gsync();
                // SAFETY: header word, final after the barrier.
                let m = unsafe { read_volatile(hdr) };
                if lt == 0 {
                    // SAFETY: k < n.
                    unsafe { slot_end.add(k).write(m) };
                }
                m
            } else {
                // SAFETY: set by the kernel that listed this slot.
                unsafe { slot_end.add(k).read() }
            };
            let size = msize - first;
            if size > capacity {
                if lt == 0 {
                    // SAFETY: at most n slots are listed.
                    unsafe {
                        let c = i::atomic_add_u32(larger, 1);
                        larger.add(1 + c as usize).write(k as u32);
                    }
                }
                gsync();
                idx += step;
                continue;
            }
            // Load, and insert every valid pixel; `cl` holds the charge until it holds the
            // cluster.
            let mut j = lt;
            while j < size {
                let d = (first + j) as usize;
                // SAFETY: d < msize <= n; j < size <= capacity; table slots < tsize.
                unsafe {
                    let id = module.add(d).read();
                    let xv = x.add(d).read() as u32;
                    let yv = y.add(d).read() as u32;
                    let q = adc.add(d).read() as u32;
                    let v = if id == mid && xv < rows && yv < cols {
                        pack_xy(xv, yv)
                    } else {
                        INVALID_XY
                    };
                    xy.add(j as usize).write(v);
                    parent.add(j as usize).write(j);
                    charge.add(j as usize).write(0);
                    cl.add(j as usize).write(q);
                    if v != INVALID_XY {
                        let mut h = table_hash(v, tshift);
                        loop {
                            let old = i::atomic_cas_u32(keys.add(h as usize), TABLE_EMPTY, v);
                            if old == TABLE_EMPTY || old == v {
                                break;
                            }
                            h = (h + 1) & tmask;
                        }
                        if i::atomic_cas_u32(vals.add(h as usize), TABLE_EMPTY, j) != TABLE_EMPTY {
                            i::atomic_exch_u32(vals.add(h as usize), TABLE_DUPLICATE);
                        }
                    }
                }
                j += gsize;
            }
            gsync();
            let lookup = |v: u32| -> u32 {
                let mut h = table_hash(v, tshift);
                loop {
                    // SAFETY: h < tsize; the table is final after the barrier.
                    let key = unsafe { read_volatile(keys.add(h as usize)) };
                    if key == v {
                        // SAFETY: as above.
                        return unsafe { read_volatile(vals.add(h as usize)) };
                    }
                    if key == TABLE_EMPTY {
                        return TABLE_EMPTY;
                    }
                    h = (h + 1) & tmask;
                }
            };
            let mut j = lt;
            while j < size {
                // SAFETY: j < size <= capacity; table values are module-local indices.
                unsafe {
                    let v = xy.add(j as usize).read();
                    if v != INVALID_XY {
                        if lookup(v) == TABLE_DUPLICATE {
                            xy.add(j as usize).write(v | DUPLICATE_BIT);
                        } else {
                            let (xv, yv) = (v & 0xffff, v >> 16);
                            let join = |nx: u32, ny: u32| {
                                if nx < rows && ny < cols {
                                    let m = lookup(pack_xy(nx, ny));
                                    if m < TABLE_DUPLICATE {
                                        union(parent, j, m);
                                    }
                                }
                            };
                            join(xv + 1, yv);
                            join(xv.wrapping_sub(1), yv + 1);
                            join(xv, yv + 1);
                            join(xv + 1, yv + 1);
                        }
                    }
                }
                j += gsize;
            }
            gsync();
            // Number the roots in digi order.
            let mut nclus = 0u32;
            let mut c = 0u32;
            while c < size {
                let j = c + lt;
                // SAFETY: j < size.
                let root = j < size
                    && unsafe {
                        xy.add(j as usize).read() & DUPLICATE_BIT == 0
                            && read_volatile(parent.add(j as usize)) == j
                    };
                let (e, tot) = gscan(root as u32);
                if root {
                    // SAFETY: j < size.
                    unsafe { number.add(j as usize).write(nclus + e) };
                }
                nclus += tot;
                gsync();
                c += gsize;
            }
            let threshold = if (mid as u32) < layer1_modules {
                threshold_layer1
            } else {
                threshold_other
            };
            let cut = threshold > 0 && nclus > 0;
            // Cluster of each digi; with a cut, the cluster charges.
            let mut j = lt;
            while j < size {
                // SAFETY: j < size; cluster numbers < nclus <= size.
                unsafe {
                    let v = xy.add(j as usize).read();
                    let c = if v & DUPLICATE_BIT == 0 {
                        let c = number.add(find_root(parent, j) as usize).read();
                        if cut {
                            let q = cl.add(j as usize).read();
                            i::atomic_add_u32(charge.add(c as usize), q);
                        }
                        c
                    } else {
                        u32::MAX
                    };
                    cl.add(j as usize).write(c);
                }
                j += gsize;
            }
            if cut {
                gsync();
                // Survivors renumbered in order; charge[c] becomes the new number or MAX.
                let mut kept = 0u32;
                let mut c0 = 0u32;
                while c0 < nclus {
                    let c = c0 + lt;
                    // SAFETY: c < nclus <= capacity.
                    let keep = c < nclus && unsafe { charge.add(c as usize).read() } >= threshold;
                    let (e, tot) = gscan(keep as u32);
                    if c < nclus {
                        let v = if keep { kept + e } else { u32::MAX };
                        // SAFETY: c < nclus.
                        unsafe { charge.add(c as usize).write(v) };
                    }
                    kept += tot;
                    gsync();
                    c0 += gsize;
                }
                nclus = kept;
            }
            let mut j = lt;
            while j < size {
                // SAFETY: j < size; first + j < n; cluster numbers < size.
                unsafe {
                    let c = cl.add(j as usize).read();
                    let out = if c == u32::MAX {
                        NOT_CLUSTERED
                    } else if cut {
                        let v = charge.add(c as usize).read();
                        if v == u32::MAX {
                            NOT_CLUSTERED
                        } else {
                            v as i32
                        }
                    } else {
                        c as i32
                    };
                    clus.add((first + j) as usize).write(out);
                }
                j += gsize;
            }
            if lt == 0 {
                let slot = (ev * nmodules + mid as u32) as usize;
                // SAFETY: ev < nevents and mid < nmodules.
                unsafe {
                    clus_in_module.add(slot).write(nclus);
                    module_first.add(slot).write(first);
                }
            }
            gsync();
            idx += step;
        }
    }

    /// Per-module clustering in shared memory with status words and a column bucket container
    /// (see the module docs), for the module slots of `slots` (those the small-module kernel
    /// passed on). Modules of more than `capacity` digis go to `fallback[1..]`
    /// (`fallback[0]` counts them).
    ///
    /// Barriers: after the per-module reset (offsets zero, `msize` set), after the module-end
    /// search, after loading and promoting (all promotions before any status read), after the
    /// duplicate check and column count, inside and between the scan chunks, after the fill
    /// (bucket complete before the neighbour search), after the union phase (forest final),
    /// between numbering chunks, and at the end of a module (shared memory reused).
    ///
    /// # Safety
    /// Launched after `clustering_count_modules` on the same arrays; `module`, `x`, `y`,
    /// `clus` valid for `n`; `module_start` as written by it; `slot_end` for `n` words, set
    /// for the listed slots; `slots` a slot list (`slots[0]` = count) from
    /// `clustering_find_clus_small`;
    /// `clus_in_module` and `module_first` for `nevents * nmodules`; `fallback` for `n + 1`
    /// words with `fallback[0] == 0`; `rows`, `cols` ≤ [`MAX_MODULE_SIDE`]; dynamic shared
    /// memory `find_clus_smem_bytes(rows, cols, capacity, status_global.is_null())`;
    /// `status_global` null or valid for `gridDim.x * status_words(rows, cols)` zeroed words;
    /// `blockDim.x` a multiple of 32 up to 1024.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn clustering_find_clus(p: ClusteringFindClusParams) {
        let (
            module,
            x,
            y,
            event_offsets,
            nevents,
            nmodules,
            rows,
            cols,
            module_start,
            slot_end,
            clus,
            clus_in_module,
            module_first,
            capacity,
            status_global,
            slots,
            fallback,
        ) = (
            p.module.ptr(),
            p.x.ptr(),
            p.y.ptr(),
            p.event_offsets.ptr(),
            p.nevents,
            p.nmodules,
            p.rows,
            p.cols,
            p.module_start.ptr(),
            p.slot_end.ptr_mut(),
            p.clus.ptr_mut(),
            p.clus_in_module.ptr_mut(),
            p.module_first.ptr_mut(),
            p.capacity,
            p.status_global.ptr_mut(),
            p.slots.ptr(),
            p.fallback.ptr_mut(),
        );
        let tid = i::thread_idx_x();
        let bd = i::block_dim_x();
        let smem = i::dynamic_shared_ptr() as *mut u32;
        let sbase = i::shared_base();
        let off_word = 4 + 36;
        let before_status = find_clus_words_before_status(cols, capacity);
        // SAFETY: all pointers below stay inside the launch's dynamic shared memory.
        let (off, xy, parent, content) = unsafe {
            let off = smem.add(off_word as usize);
            let xy = smem.add((off_word + (cols + 1).div_ceil(4) * 4) as usize);
            (
                off,
                xy,
                xy.add(capacity as usize),
                xy.add(2 * capacity as usize),
            )
        };
        let off_saddr = sbase + off_word * 4;
        // SAFETY: 36 words of scan storage after the header.
        let bs = unsafe { BlockScan::<u32>::new(smem.add(4)) };
        let nwords = status_words(rows, cols);
        let status = if status_global.is_null() {
            // SAFETY: the status words follow the other areas (launch contract).
            let s = unsafe { smem.add(before_status as usize) };
            let mut w = tid;
            while w < nwords {
                // SAFETY: w < nwords.
                unsafe { s.add(w as usize).write(STATUS_EMPTY) };
                w += bd;
            }
            s
        } else {
            // SAFETY: one zeroed slab per block (launch contract).
            unsafe { status_global.add(i::block_idx_x() as usize * nwords as usize) }
        };
        i::sync_threads();
        // SAFETY: the slot list written by the small-module kernel.
        let nslots = unsafe { slots.read() };
        let mut idx = i::block_idx_x();
        while idx < nslots {
            // SAFETY: idx < nslots; listed slots are valid; first < n.
            let (k, first, msize, mid) = unsafe {
                let k = slots.add(1 + idx as usize).read();
                let first = module_start.add(1 + k as usize).read();
                (
                    k,
                    first,
                    slot_end.add(k as usize).read(),
                    module.add(first as usize).read(),
                )
            };
            // SAFETY: offsets cover first.
            let (ev, _, _) = unsafe { event_bounds(event_offsets, nevents, first) };
            let mut b = tid;
            while b <= cols {
                // SAFETY: b <= cols.
                unsafe { off.add(b as usize).write(0) };
                b += bd;
            }
            let size = msize - first;
            if size > capacity {
                if tid == 0 {
                    // SAFETY: at most n slots are listed.
                    unsafe {
                        let c = i::atomic_add_u32(fallback, 1);
                        fallback.add(1 + c as usize).write(k);
                    }
                }
                idx += i::grid_dim_x();
                continue;
            }
            // Load the module and promote every valid pixel's status.
            let mut j = tid;
            while j < size {
                let d = (first + j) as usize;
                // SAFETY: d < msize <= n; j < size <= capacity.
                unsafe {
                    let id = module.add(d).read();
                    let xv = x.add(d).read() as u32;
                    let yv = y.add(d).read() as u32;
                    let v = if id == mid && xv < rows && yv < cols {
                        promote_pixel(status, rows, xv, yv);
                        pack_xy(xv, yv)
                    } else {
                        INVALID_XY
                    };
                    xy.add(j as usize).write(v);
                    parent.add(j as usize).write(j);
                }
                j += bd;
            }
            i::sync_threads();
            // Duplicates (every copy) leave; the others are counted by column.
            let mut j = tid;
            while j < size {
                // SAFETY: j < size <= capacity; the status word index is in range.
                unsafe {
                    let v = xy.add(j as usize).read();
                    if v != INVALID_XY {
                        let (xv, yv) = (v & 0xffff, v >> 16);
                        let (w, sh) = status_position(rows, xv, yv);
                        let st = (read_volatile(status.add(w as usize)) >> sh) & 3;
                        if st == STATUS_DUPLICATE {
                            xy.add(j as usize).write(v | DUPLICATE_BIT);
                        } else {
                            i::red_shared_add_u32(off_saddr + yv * 4, 1);
                        }
                    }
                }
                j += bd;
            }
            i::sync_threads();
            // Inclusive scan of the column counts: off[b] = end of column b.
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
            let total = carry;
            // Fill the buckets (off[b] becomes the start of column b) and clear the status.
            let mut j = tid;
            while j < size {
                // SAFETY: j < size; positions stay below total <= size <= capacity.
                unsafe {
                    let v = xy.add(j as usize).read();
                    if v != INVALID_XY {
                        let (xv, yv) = (v & 0xffff, (v >> 16) & 0x7fff);
                        let (w, _) = status_position(rows, xv, yv);
                        write_volatile(status.add(w as usize), STATUS_EMPTY);
                        if v & DUPLICATE_BIT == 0 {
                            let pos = i::atom_shared_add_u32(off_saddr + yv * 4, u32::MAX) - 1;
                            content.add(pos as usize).write(j);
                        }
                    }
                }
                j += bd;
            }
            i::sync_threads();
            // Union every pixel with its later neighbours in its column and the next one.
            let mut p = tid;
            while p < total {
                // SAFETY: p < total; bucket entries are module-local indices < size.
                unsafe {
                    let jj = content.add(p as usize).read();
                    let v = xy.add(jj as usize).read();
                    let (xv, yv) = (v & 0xffff, v >> 16);
                    let end = off.add((yv + 2).min(cols) as usize).read();
                    let mut q = p + 1;
                    while q < end {
                        let m = content.add(q as usize).read();
                        let xm = xy.add(m as usize).read() & 0xffff;
                        if xm.abs_diff(xv) <= 1 {
                            union(parent, jj, m);
                        }
                        q += 1;
                    }
                }
                p += bd;
            }
            i::sync_threads();
            // Number the roots in digi order; numbers go to content[root].
            let mut base = 0u32;
            let mut c = 0u32;
            while c < size {
                let j = c + tid;
                // SAFETY: j < size.
                let root = j < size
                    && unsafe {
                        xy.add(j as usize).read() & DUPLICATE_BIT == 0
                            && read_volatile(parent.add(j as usize)) == j
                    };
                let (e, tot) = bs.exclusive_sum(root as u32);
                if root {
                    // SAFETY: j < size.
                    unsafe { content.add(j as usize).write(base + e) };
                }
                base += tot;
                i::sync_threads();
                c += bd;
            }
            // Write the cluster index of every digi of the module.
            let mut j = tid;
            while j < size {
                // SAFETY: j < size; first + j < n.
                unsafe {
                    let v = xy.add(j as usize).read();
                    let cl = if v & DUPLICATE_BIT == 0 {
                        let r = find(parent, j);
                        content.add(r as usize).read() as i32
                    } else {
                        NOT_CLUSTERED
                    };
                    clus.add((first + j) as usize).write(cl);
                }
                j += bd;
            }
            if tid == 0 {
                let slot = (ev * nmodules + mid as u32) as usize;
                // SAFETY: ev < nevents and mid < nmodules.
                unsafe {
                    clus_in_module.add(slot).write(base);
                    module_first.add(slot).write(first);
                }
            }
            i::sync_threads();
            idx += i::grid_dim_x();
        }
    }

    /// The seed's `findClus`, kept as the benchmark's baseline (one block per module slot,
    /// grid-stride): module end, duplicate removal with status words in shared memory, the
    /// column histogram (`count`, block scan, `fill` by atomic decrement), per-thread
    /// nearest-neighbour arrays `nn[maxiter][maxNeighbours]`, then the labelling loop of the
    /// seed: even passes `atomicMin` labels (global digi indices in `clus`) across each
    /// neighbour pair and set `more` on a change, odd passes jump pointers, until
    /// `__syncthreads_or(more)` is false; roots numbered by `atomicInc` (order not
    /// deterministic). Differences from the seed: modules whose histogram exceeds
    /// [`SEED_MAX_PIX_IN_MODULE`], or that need more than [`SEED_MAX_ITER`] iterations or
    /// [`SEED_MAX_NEIGHBOURS`] neighbours, are sent to the fallback list (the seed prints
    /// "THIS IS NOT SUPPOSED TO HAPPEN" and writes out of bounds); duplicate removal covers
    /// the whole module (no `msize − 1` quirk); non-clustered digis get -1 (not -9999).
    ///
    /// # Safety
    /// As [`clustering_find_clus`], with dynamic shared memory
    /// [`find_clus_seed_smem_bytes`] and `blockDim.x * SEED_MAX_ITER >= 1`.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn clustering_find_clus_seed(p: ClusteringFindClusSeedParams) {
        let (
            module,
            x,
            y,
            event_offsets,
            nevents,
            nmodules,
            rows,
            cols,
            module_start,
            slot_end,
            clus,
            clus_in_module,
            module_first,
            fallback,
        ) = (
            p.module.ptr(),
            p.x.ptr(),
            p.y.ptr(),
            p.event_offsets.ptr(),
            p.nevents,
            p.nmodules,
            p.rows,
            p.cols,
            p.module_start.ptr(),
            p.slot_end.ptr_mut(),
            p.clus.ptr_mut(),
            p.clus_in_module.ptr_mut(),
            p.module_first.ptr_mut(),
            p.fallback.ptr_mut(),
        );
        let tid = i::thread_idx_x();
        let bd = i::block_dim_x();
        let smem = i::dynamic_shared_ptr() as *mut u32;
        let sbase = i::shared_base();
        let off_word = 4 + 36;
        let hist_word = off_word + (cols + 1).div_ceil(4) * 4;
        // SAFETY: areas inside the launch's dynamic shared memory.
        let (hdr, off, hist, status) = unsafe {
            (
                smem,
                smem.add(off_word as usize),
                smem.add(hist_word as usize),
                smem.add((hist_word + SEED_MAX_PIX_IN_MODULE) as usize),
            )
        };
        let off_saddr = sbase + off_word * 4;
        // SAFETY: scan storage after the header.
        let bs = unsafe { BlockScan::<u32>::new(smem.add(4)) };
        let nwords = status_words(rows, cols);
        let mut w = tid;
        while w < nwords {
            // SAFETY: w < nwords.
            unsafe { status.add(w as usize).write(STATUS_EMPTY) };
            w += bd;
        }
        let labels = clus;
        // SAFETY: written by count_modules.
        let nslots = unsafe { module_start.read() };
        let mut k = i::block_idx_x();
        while k < nslots {
            // SAFETY: k < nslots.
            let (first, mid) = unsafe {
                let first = module_start.add(1 + k as usize).read();
                (first, module.add(first as usize).read())
            };
            // SAFETY: offsets cover first.
            let (ev, _, ev_end) = unsafe { event_bounds(event_offsets, nevents, first) };
            if tid == 0 {
                // SAFETY: header words: msize, foundClusters.
                unsafe {
                    hdr.write(ev_end);
                    hdr.add(1).write(0);
                }
            }
            let mut b = tid;
            while b <= cols {
                // SAFETY: b <= cols.
                unsafe { off.add(b as usize).write(0) };
                b += bd;
            }
            i::sync_threads();
            let mut d = first + tid;
            while d < ev_end {
                // SAFETY: d < n.
                let id = unsafe { module.add(d as usize).read() };
                if id != INVALID_MODULE && id != mid {
                    // SAFETY: header word.
                    unsafe { i::atomic_min_u32(hdr, d) };
                    break;
                }
                d += bd;
            }
            i::sync_threads();
            // SAFETY: header word.
            let msize = unsafe { hdr.read() };
            if tid == 0 {
                // SAFETY: k < n.
                unsafe { slot_end.add(k as usize).write(msize) };
            }
            let valid = |d: u32| -> Option<(u32, u32)> {
                // SAFETY: d < msize <= n.
                unsafe {
                    let xv = x.add(d as usize).read() as u32;
                    let yv = y.add(d as usize).read() as u32;
                    (module.add(d as usize).read() == mid && xv < rows && yv < cols)
                        .then_some((xv, yv))
                }
            };
            // Duplicate removal (status words), then the histogram count.
            let mut d = first + tid;
            while d < msize {
                if let Some((xv, yv)) = valid(d) {
                    // SAFETY: pixel inside the module.
                    unsafe { promote_pixel(status, rows, xv, yv) };
                }
                d += bd;
            }
            i::sync_threads();
            let is_kept = |d: u32| -> Option<(u32, u32)> {
                valid(d).filter(|&(xv, yv)| {
                    let (w, sh) = status_position(rows, xv, yv);
                    // SAFETY: w < nwords.
                    (unsafe { read_volatile(status.add(w as usize)) } >> sh) & 3 != STATUS_DUPLICATE
                })
            };
            let mut d = first + tid;
            while d < msize {
                // SAFETY: d < n.
                unsafe { labels.add(d as usize).write(d as i32) };
                if let Some((_, yv)) = is_kept(d) {
                    // SAFETY: yv < cols.
                    unsafe { i::red_shared_add_u32(off_saddr + yv * 4, 1) };
                }
                d += bd;
            }
            i::sync_threads();
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
            let hsize = carry;
            let too_big = hsize > SEED_MAX_PIX_IN_MODULE || hsize > SEED_MAX_ITER * bd;
            if !too_big {
                let mut d = first + tid;
                while d < msize {
                    if let Some((_, yv)) = is_kept(d) {
                        // SAFETY: positions < hsize <= SEED_MAX_PIX_IN_MODULE.
                        unsafe {
                            let pos = i::atom_shared_add_u32(off_saddr + yv * 4, u32::MAX) - 1;
                            hist.add(pos as usize).write(d - first);
                        }
                    }
                    d += bd;
                }
            }
            i::sync_threads();
            // Clear the status words (all reads are done).
            let mut d = first + tid;
            while d < msize {
                if let Some((xv, yv)) = valid(d) {
                    let (w, _) = status_position(rows, xv, yv);
                    // SAFETY: w < nwords.
                    unsafe { write_volatile(status.add(w as usize), STATUS_EMPTY) };
                }
                d += bd;
            }
            // Nearest neighbours, per thread (the seed's nn / nnn).
            let mut nn = [[0u16; SEED_MAX_NEIGHBOURS as usize]; SEED_MAX_ITER as usize];
            let mut nnn = [0u8; SEED_MAX_ITER as usize];
            let mut overflow = too_big;
            if !too_big {
                let mut j = tid;
                let mut kk = 0usize;
                while j < hsize && kk < SEED_MAX_ITER as usize {
                    // SAFETY: j < hsize; entries are module-local indices of kept digis.
                    unsafe {
                        let di = first + hist.add(j as usize).read();
                        let xi = x.add(di as usize).read() as u32;
                        let yi = y.add(di as usize).read() as u32;
                        let end = off.add((yi + 2).min(cols) as usize).read();
                        let mut p = j + 1;
                        while p < end {
                            let l = hist.add(p as usize).read();
                            let xm = x.add((first + l) as usize).read() as u32;
                            if xm.abs_diff(xi) <= 1 {
                                let c = *nnn.get_unchecked(kk) as usize;
                                if c < SEED_MAX_NEIGHBOURS as usize {
                                    *nn.get_unchecked_mut(kk).get_unchecked_mut(c) = l as u16;
                                    *nnn.get_unchecked_mut(kk) += 1;
                                } else {
                                    overflow = true;
                                }
                            }
                            p += 1;
                        }
                    }
                    j += bd;
                    kk += 1;
                }
            }
            if i::sync_threads_or(overflow) {
                if tid == 0 {
                    // SAFETY: at most n slots are listed.
                    unsafe {
                        let c = i::atomic_add_u32(fallback, 1);
                        fallback.add(1 + c as usize).write(k);
                    }
                }
                i::sync_threads();
                k += i::grid_dim_x();
                continue;
            }
            // The seed's labelling loop.
            let lab = |d: u32| {
                // SAFETY: d < n.
                unsafe { labels.add(d as usize) }
            };
            let mut more = true;
            let mut nloops = 0u32;
            while i::sync_threads_or(more) {
                let mut j = tid;
                let mut kk = 0usize;
                if nloops % 2 == 1 {
                    while j < hsize {
                        // SAFETY: j < hsize; labels are digi indices of the module.
                        unsafe {
                            let di = first + hist.add(j as usize).read();
                            let mut m = read_volatile(lab(di));
                            while m != read_volatile(lab(m as u32)) {
                                m = read_volatile(lab(m as u32));
                            }
                            write_volatile(lab(di), m);
                        }
                        j += bd;
                    }
                } else {
                    more = false;
                    while j < hsize {
                        // SAFETY: kk < SEED_MAX_ITER (checked when filling); indices valid.
                        unsafe {
                            let di = first + hist.add(j as usize).read();
                            let cnt = *nnn.get_unchecked(kk) as usize;
                            let mut q = 0;
                            while q < cnt {
                                let m = first + *nn.get_unchecked(kk).get_unchecked(q) as u32;
                                let ci = read_volatile(lab(di));
                                let old = i::atomic_min_i32(lab(m), ci);
                                if old != ci {
                                    more = true;
                                }
                                i::atomic_min_i32(lab(di), old);
                                q += 1;
                            }
                        }
                        j += bd;
                        kk += 1;
                    }
                }
                nloops += 1;
            }
            // Numbering by atomicInc on the roots.
            let mut j = tid;
            while j < hsize {
                // SAFETY: j < hsize.
                unsafe {
                    let di = first + hist.add(j as usize).read();
                    if read_volatile(lab(di)) == di as i32 {
                        let old = i::atomic_add_u32(hdr.add(1), 1);
                        write_volatile(lab(di), -(old as i32) - 1);
                    }
                }
                j += bd;
            }
            i::sync_threads();
            let mut j = tid;
            while j < hsize {
                // SAFETY: j < hsize.
                unsafe {
                    let di = first + hist.add(j as usize).read();
                    let r = read_volatile(lab(di));
                    if r >= 0 {
                        write_volatile(lab(di), read_volatile(lab(r as u32)));
                    }
                }
                j += bd;
            }
            i::sync_threads();
            let mut d = first + tid;
            while d < msize {
                // SAFETY: d < n.
                unsafe {
                    let v = if is_kept(d).is_some() {
                        -read_volatile(lab(d)) - 1
                    } else {
                        NOT_CLUSTERED
                    };
                    write_volatile(lab(d), v);
                }
                d += bd;
            }
            if tid == 0 {
                let slot = (ev * nmodules + mid as u32) as usize;
                // SAFETY: ev < nevents, mid < nmodules; header word.
                unsafe {
                    clus_in_module.add(slot).write(hdr.add(1).read());
                    module_first.add(slot).write(first);
                }
            }
            i::sync_threads();
            k += i::grid_dim_x();
        }
    }

    /// The same result as [`clustering_find_clus`] for the modules it listed in `fallback`,
    /// of any size: duplicate detection and neighbour lookup on a dense pixel grid (one per
    /// block, `rows * cols` words in global memory, [`GRID_EMPTY`] between modules),
    /// union-find on `clus` itself.
    ///
    /// Barriers: after the grid insertion, after the duplicate check, after the unions,
    /// after the compression, between numbering chunks, after the copy from the roots,
    /// and at the end of a module (grid clean before the next).
    ///
    /// # Safety
    /// Launched after `clustering_find_clus` on the same arrays; `grid` valid for
    /// `gridDim.x * rows * cols` words all [`GRID_EMPTY`]; dynamic shared memory
    /// [`scan_only_smem_bytes`]; `blockDim.x` a multiple of 32.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn clustering_find_clus_fallback(
        p: ClusteringFindClusFallbackParams,
    ) {
        let (
            module,
            x,
            y,
            event_offsets,
            nevents,
            nmodules,
            rows,
            cols,
            module_start,
            slot_end,
            clus,
            clus_in_module,
            module_first,
            fallback,
            grid,
        ) = (
            p.module.ptr(),
            p.x.ptr(),
            p.y.ptr(),
            p.event_offsets.ptr(),
            p.nevents,
            p.nmodules,
            p.rows,
            p.cols,
            p.module_start.ptr(),
            p.slot_end.ptr(),
            p.clus.ptr_mut(),
            p.clus_in_module.ptr_mut(),
            p.module_first.ptr_mut(),
            p.fallback.ptr(),
            p.grid.ptr_mut(),
        );
        let tid = i::thread_idx_x();
        let bd = i::block_dim_x();
        let smem = i::dynamic_shared_ptr() as *mut u32;
        // SAFETY: scan storage in the dynamic shared memory.
        let bs = unsafe { BlockScan::<u32>::new(smem) };
        let parent = clus as *mut u32;
        // SAFETY: one grid per block (launch contract).
        let grid = unsafe { grid.add(i::block_idx_x() as usize * (rows * cols) as usize) };
        // SAFETY: written by find_clus.
        let nfb = unsafe { fallback.read() };
        let mut f = i::block_idx_x();
        while f < nfb {
            // SAFETY: f < nfb; the listed slot and its bounds are valid.
            let (first, msize, mid) = unsafe {
                let k = fallback.add(1 + f as usize).read() as usize;
                let first = module_start.add(1 + k).read();
                (
                    first,
                    slot_end.add(k).read(),
                    module.add(first as usize).read(),
                )
            };
            // SAFETY: offsets cover first.
            let (ev, _, _) = unsafe { event_bounds(event_offsets, nevents, first) };
            // Pixel of digi d if it is a valid digi of this module.
            let pixel = |d: u32| -> Option<(u32, u32)> {
                // SAFETY: d < msize <= n.
                unsafe {
                    let id = module.add(d as usize).read();
                    let xv = x.add(d as usize).read() as u32;
                    let yv = y.add(d as usize).read() as u32;
                    (id == mid && xv < rows && yv < cols).then_some((xv, yv))
                }
            };
            // 1. Insert into the grid; parent = self for valid digis.
            let mut d = first + tid;
            while d < msize {
                // SAFETY: d < n; the cell is inside this block's grid.
                unsafe {
                    if let Some((xv, yv)) = pixel(d) {
                        write_volatile(parent.add(d as usize), d);
                        let cell = grid.add((yv * rows + xv) as usize);
                        let mut old = read_volatile(cell);
                        loop {
                            if old == GRID_DUPLICATE {
                                break;
                            }
                            let new = if old == GRID_EMPTY { d } else { GRID_DUPLICATE };
                            let seen = i::atomic_cas_u32(cell, old, new);
                            if seen == old {
                                break;
                            }
                            old = seen;
                        }
                    } else {
                        write_volatile(parent.add(d as usize), u32::MAX);
                    }
                }
                d += bd;
            }
            i::sync_threads();
            // 2. Every copy of a duplicated pixel leaves.
            let mut d = first + tid;
            while d < msize {
                if let Some((xv, yv)) = pixel(d) {
                    // SAFETY: cell inside the grid; d < n.
                    unsafe {
                        if read_volatile(grid.add((yv * rows + xv) as usize)) != d {
                            write_volatile(parent.add(d as usize), u32::MAX);
                        }
                    }
                }
                d += bd;
            }
            i::sync_threads();
            // 3. Union with the forward neighbours (x+1,y), (x-1,y+1), (x,y+1), (x+1,y+1).
            let mut d = first + tid;
            while d < msize {
                // SAFETY: d < n; cells inside the grid; grid entries are digis of the module.
                unsafe {
                    if read_volatile(parent.add(d as usize)) != u32::MAX {
                        if let Some((xv, yv)) = pixel(d) {
                            let look = |nx: u32, ny: u32| {
                                if nx < rows && ny < cols {
                                    let c = read_volatile(grid.add((ny * rows + nx) as usize));
                                    if c < GRID_DUPLICATE {
                                        union(parent, d, c);
                                    }
                                }
                            };
                            look(xv + 1, yv);
                            look(xv.wrapping_sub(1), yv + 1);
                            look(xv, yv + 1);
                            look(xv + 1, yv + 1);
                        }
                    }
                }
                d += bd;
            }
            i::sync_threads();
            // 4. Compress: every valid digi points at its root. `find_root` does not write
            // (path halving here could store a non-root over a root written by another
            // thread), so the only stores are roots.
            let mut d = first + tid;
            while d < msize {
                // SAFETY: d < n.
                unsafe {
                    if read_volatile(parent.add(d as usize)) != u32::MAX {
                        let r = find_root(parent, d);
                        write_volatile(parent.add(d as usize), r);
                    }
                }
                d += bd;
            }
            i::sync_threads();
            // 5. Number the roots in digi order: clus[root] = -(number) - 2.
            let mut base = 0u32;
            let mut c = first;
            while c < msize {
                let d = c + tid;
                // SAFETY: d < msize.
                let root = d < msize && unsafe { read_volatile(parent.add(d as usize)) == d };
                let (e, tot) = bs.exclusive_sum(root as u32);
                if root {
                    // SAFETY: d < n.
                    unsafe { write_volatile(clus.add(d as usize), -((base + e) as i32) - 2) };
                }
                base += tot;
                i::sync_threads();
                c += bd;
            }
            // 6. The other digis take their root's number.
            let mut d = first + tid;
            while d < msize {
                // SAFETY: d < n; a non-negative entry is the index of the root.
                unsafe {
                    let r = read_volatile(clus.add(d as usize));
                    if r >= 0 {
                        let code = read_volatile(clus.add(r as usize));
                        write_volatile(clus.add(d as usize), -code - 2);
                    }
                }
                d += bd;
            }
            i::sync_threads();
            // 7. Decode the roots; clean the grid.
            let mut d = first + tid;
            while d < msize {
                // SAFETY: d < n; cells inside the grid.
                unsafe {
                    let v = read_volatile(clus.add(d as usize));
                    if v <= -2 {
                        write_volatile(clus.add(d as usize), -v - 2);
                    }
                    if let Some((xv, yv)) = pixel(d) {
                        write_volatile(grid.add((yv * rows + xv) as usize), GRID_EMPTY);
                    }
                }
                d += bd;
            }
            if tid == 0 {
                let slot = (ev * nmodules + mid as u32) as usize;
                // SAFETY: ev < nevents, mid < nmodules.
                unsafe {
                    clus_in_module.add(slot).write(base);
                    module_first.add(slot).write(first);
                }
            }
            i::sync_threads();
            f += i::grid_dim_x();
        }
    }

    /// Removes clusters whose charge is below the module's threshold (`threshold_layer1` for
    /// module ids `< layer1_modules`, else `threshold_other`) and renumbers the survivors in
    /// order. `scratch[first + c]` holds cluster `c`'s charge, then its new number.
    ///
    /// Barriers: after zeroing the charges, after summing them, between numbering chunks,
    /// and at the end of a module.
    ///
    /// # Safety
    /// Launched after the clustering kernels on the same arrays; `adc` valid for `n`;
    /// `scratch` for `n` u64; `slots` null (every module slot) or a slot list (`slots[0]` =
    /// count); dynamic shared memory [`scan_only_smem_bytes`];
    /// `blockDim.x` a multiple of 32.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn clustering_cluster_charge_cut(
        p: ClusteringClusterChargeCutParams,
    ) {
        let (
            module,
            adc,
            event_offsets,
            nevents,
            nmodules,
            layer1_modules,
            threshold_layer1,
            threshold_other,
            module_start,
            slot_end,
            clus,
            clus_in_module,
            scratch,
            slots,
        ) = (
            p.module.ptr(),
            p.adc.ptr(),
            p.event_offsets.ptr(),
            p.nevents,
            p.nmodules,
            p.layer1_modules,
            p.threshold_layer1,
            p.threshold_other,
            p.module_start.ptr(),
            p.slot_end.ptr(),
            p.clus.ptr_mut(),
            p.clus_in_module.ptr_mut(),
            p.scratch.ptr_mut(),
            p.slots.ptr(),
        );
        let tid = i::thread_idx_x();
        let bd = i::block_dim_x();
        let smem = i::dynamic_shared_ptr() as *mut u32;
        // SAFETY: scan storage in the dynamic shared memory.
        let bs = unsafe { BlockScan::<u32>::new(smem) };
        // SAFETY: a slot list, or all slots (count written by count_modules).
        let nslots = unsafe {
            if slots.is_null() {
                module_start.read()
            } else {
                slots.read()
            }
        };
        let mut idx = i::block_idx_x();
        while idx < nslots {
            // SAFETY: idx < nslots; slot bounds written by the clustering kernels.
            let (first, msize, mid) = unsafe {
                let k = if slots.is_null() {
                    idx
                } else {
                    slots.add(1 + idx as usize).read()
                } as usize;
                let first = module_start.add(1 + k).read();
                (
                    first,
                    slot_end.add(k).read(),
                    module.add(first as usize).read() as u32,
                )
            };
            // SAFETY: offsets cover first.
            let (ev, _, _) = unsafe { event_bounds(event_offsets, nevents, first) };
            let slot = (ev * nmodules + mid) as usize;
            // SAFETY: ev < nevents, mid < nmodules.
            let nclus = unsafe { clus_in_module.add(slot).read() };
            let threshold = if mid < layer1_modules {
                threshold_layer1
            } else {
                threshold_other
            };
            if nclus == 0 || threshold == 0 {
                idx += i::grid_dim_x();
                continue;
            }
            let charge = |c: u32| {
                // SAFETY: c < nclus <= msize - first, inside scratch.
                unsafe { scratch.add((first + c) as usize) }
            };
            let mut c = tid;
            while c < nclus {
                // SAFETY: see `charge`.
                unsafe { charge(c).write(0) };
                c += bd;
            }
            i::sync_threads();
            let mut d = first + tid;
            while d < msize {
                // SAFETY: d < n.
                unsafe {
                    let cl = clus.add(d as usize).read();
                    if cl >= 0 {
                        i::atomic_add_u64(charge(cl as u32), adc.add(d as usize).read() as u64);
                    }
                }
                d += bd;
            }
            i::sync_threads();
            let mut base = 0u32;
            let mut c0 = 0u32;
            while c0 < nclus {
                let c = c0 + tid;
                // SAFETY: see `charge`.
                let keep = c < nclus && unsafe { charge(c).read() } >= threshold as u64;
                let (e, tot) = bs.exclusive_sum(keep as u32);
                if c < nclus {
                    let v = if keep { (base + e) as u64 } else { u64::MAX };
                    // SAFETY: see `charge`.
                    unsafe { charge(c).write(v) };
                }
                base += tot;
                i::sync_threads();
                c0 += bd;
            }
            if base != nclus {
                let mut d = first + tid;
                while d < msize {
                    // SAFETY: d < n.
                    unsafe {
                        let cl = clus.add(d as usize).read();
                        if cl >= 0 {
                            let v = charge(cl as u32).read();
                            let new = if v == u64::MAX {
                                NOT_CLUSTERED
                            } else {
                                v as i32
                            };
                            clus.add(d as usize).write(new);
                        }
                    }
                    d += bd;
                }
                if tid == 0 {
                    // SAFETY: as above.
                    unsafe { clus_in_module.add(slot).write(base) };
                }
            }
            i::sync_threads();
            idx += i::grid_dim_x();
        }
    }
}
