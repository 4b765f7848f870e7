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
//! 1. [`KERNEL_COUNT_MODULES`], launched twice. Count phase, one thread per digi:
//!    initialises `clus`, `clus_in_module` and `module_first` and zeroes the later kernels'
//!    list counters (so one run is one memset and the kernels, and a captured CUDA graph
//!    replays it), finds module starts (the first valid digi whose previous valid digi in the
//!    event belongs to another module) and appends them to the slot list `module_start[1..]`
//!    (`module_start[0]` = count), as the seed does with `atomicInc`, each with its slot
//!    record `module id | event << 16` (the later kernels read a module's event there, no
//!    binary search), and records every module's end by event and module id (the thread of
//!    its last non-invalid digi sees the next module's first digi or the event's end). The
//!    batch's sizes are read on the device. Digis with a module id or coordinates out of
//!    range are reported through `bad` (the smallest such index) and treated as invalid.
//!    Sort phase, one thread per module slot: the slot's end to `slot_end`, and the slot to
//!    the list of the pass its size belongs to (warp-aggregated appends): the three
//!    small-module passes, the shared-memory kernel, the fallback.
//! 2. [`KERNEL_FIND_CLUS_SMALL_WARP`] and [`KERNEL_FIND_CLUS_SMALL`] (once or twice), side by
//!    side on forked streams: one warp per module (up to 128 digis, or 32 for a few events
//!    per launch), one block per module (up to 1024 digis; for a few events a middle pass
//!    of 128-thread blocks up to 128 digis too): duplicates and neighbours through a pixel
//!    hash table in shared memory, union-find, numbering, and the charge cut in place.
//!    (`docs/clustering.md` has the whole chain.) The shared-memory kernel and the fallback
//!    run beside them on their own stream.
//! 3. [`KERNEL_FIND_CLUS`], one block per listed module (grid-stride; blocks with no module
//!    leave at once): duplicate detection with 2-bit status words (CMSSW "Alternative 2":
//!    every copy of a pixel that occurs twice or more is invalidated), a bucket container by
//!    column in shared memory (count, block scan, fill), then 8-connected labelling by
//!    lock-free union-find with path halving in shared memory, the neighbours of a pixel
//!    being found, as in the seed, among the later entries of its column and the whole next
//!    column. Hooking always puts the larger root under the smaller, so the final root of every
//!    cluster is its smallest digi index whatever the thread interleaving. Roots are numbered
//!    by a block-wide exclusive scan in digi order: **cluster `c` of a module is the one whose
//!    smallest digi index is the `c`-th smallest**, identical run to run and to the CPU oracle.
//!    A module with more than `capacity` digis (none: the sort listed those for the
//!    fallback) is appended to the fallback list instead.
//! 4. [`KERNEL_FIND_CLUS_FALLBACK`], one block per module of the fallback list (side by
//!    side with the shared-memory kernel since issue 13's session 5): the same
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
/// Kernel: the check that one module's digis are consecutive within an event, for digis the
/// host cannot read (device views): every run start of a module counted per event and module,
/// a second run flagged.
pub const KERNEL_CHECK_RUNS: &str = "clustering_check_runs";
/// Kernel: after [`KERNEL_CHECK_RUNS`], a batch that failed the check is made empty for the
/// kernels after it (no host wait between the check and the chain).
pub const KERNEL_GATE_RUNS: &str = "clustering_gate_runs";
/// Kernel: clustering of small modules by pairwise comparisons in shared memory.
pub const KERNEL_FIND_CLUS_SMALL: &str = "clustering_find_clus_small";
/// Kernel: the warp pass of the small-module clustering (one warp per module).
pub const KERNEL_FIND_CLUS_SMALL_WARP: &str = "clustering_find_clus_small_warp";
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
/// Threads per block of the charge-cut kernel.
pub const CUT_THREADS: u32 = 256;
/// Default threads per block of the seed's `findClus` baseline (`KERNEL_FIND_CLUS_SEED`): the
/// 256 that CMSSW launches it with for Phase-1 (any multiple of 32 up to 1024).
pub const SEED_THREADS: u32 = 256;
/// Default threads per block of the fallback kernel (256 before issue 13's third step: on
/// dense events 1024 measured 2.5 times faster, the kernel waiting on scattered global
/// memory with a quarter of the SM's threads resident; `docs/benchmarks.md`).
pub const FALLBACK_THREADS: u32 = 1024;
/// Default threads per block of the shared-memory kernel `find_clus` (the geometry's
/// threads, 256 for Phase-1, before issue 13's third step: on dense events 512 measured
/// 1.6 times faster at 8 events per launch; `docs/benchmarks.md`).
pub const SHARED_THREADS: u32 = 512;
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

/// Default capacity of [`KERNEL_FIND_CLUS_SMALL`] (digis per module): 960 since issue 13,
/// session 5 (1,024 before), so that the last pass's 256-thread blocks (three words per
/// digi and a 2,048-slot table: 27.4 KiB) fit eight per SM instead of seven. Run-3-like
/// modules stay far below it; dense modules of 961 to 1,024 digis take the shared-memory
/// kernel instead.
pub const SMALL_CAPACITY: u32 = 960;
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

/// Words of one group of [`KERNEL_FIND_CLUS_SMALL`]: header (4), the pixel table (keys and
/// values, [`small_table_size`] u32 each; after the unions its first words hold the
/// cluster charges of the cut: a module of at most [`MAX_SMALL_CAPACITY`] digis of at most
/// 65535 e⁻ sums below 2^32), then `xy`, `parent` (the roots' numbers after the
/// numbering) and `cl` (`capacity` u32 each), rounded up to a multiple of 4 words so that
/// every group's table is 16-byte aligned (cleared by 16-byte stores).
pub const fn small_group_words(capacity: u32) -> u32 {
    small_group_words_slots(capacity, small_table_size(capacity))
}

/// As [`small_group_words`] with a table of `slots` slots.
pub const fn small_group_words_slots(capacity: u32, slots: u32) -> u32 {
    (4 + 3 * capacity + 2 * slots).next_multiple_of(4)
}

/// Table slots of a block pass of `capacity` with table scale `scale`: [`small_table_size`]
/// times `2^scale` (load factor at most `1 / 2^(scale + 1)`). Larger tables probe less
/// (measured in issue 13: tables of the module's size instead of the pass's capacity, load
/// factor up to 1/2 for every module, made the passes 18 % slower).
pub const fn small_table_slots(capacity: u32, scale: u32) -> u32 {
    small_table_size(capacity) << scale
}

/// Most slots of one pixel table of [`KERNEL_FIND_CLUS_SMALL`] (a digi keeps its slot in
/// 15 bits; the shared memory of a block holds at most 2^14 slots anyway).
pub const MAX_TABLE_SLOTS: u32 = 1 << 15;

/// Largest table scale of the block passes.
pub const MAX_TABLE_SCALE: u32 = 3;
/// Default table scale of the middle block pass (4 times [`small_table_size`]: issue 13,
/// step 3, measured on an H200 against scale 0 and 1, `docs/benchmarks.md`).
pub const MID_TABLE_SCALE: u32 = 2;
/// Default table scale of the last block pass beyond [`FEW_EVENTS_PER_LAUNCH`] events per
/// launch (its 256-thread blocks would lose half their residency to a larger table).
pub const LAST_TABLE_SCALE: u32 = 0;
/// Default table scale of the last block pass up to [`FEW_EVENTS_PER_LAUNCH`] events per
/// launch (its 512-thread blocks keep four per SM with the larger table).
pub const LATENCY_LAST_TABLE_SCALE: u32 = 1;

/// Largest capacity of [`KERNEL_FIND_CLUS_SMALL`] (32-bit charge sums cannot overflow).
pub const MAX_SMALL_CAPACITY: u32 = 65536;

/// Shared-memory bytes of [`KERNEL_FIND_CLUS_SMALL`] with `groups` groups per block: the
/// block-scan storage (36 words) and the groups' areas.
pub const fn find_clus_small_smem_bytes(capacity: u32, groups: u32) -> usize {
    find_clus_small_smem_bytes_slots(capacity, groups, small_table_size(capacity))
}

/// As [`find_clus_small_smem_bytes`] with tables of `slots` slots.
pub const fn find_clus_small_smem_bytes_slots(capacity: u32, groups: u32, slots: u32) -> usize {
    (36 + groups * small_group_words_slots(capacity, slots)) as usize * 4
}

/// Default capacity of the warp pass of [`KERNEL_FIND_CLUS_SMALL`]: only the modules of up
/// to 32 digis (one per lane) stay on a warp. A module's time on its group is an
/// instruction chain that grows with the digis per thread, so every module gets about one
/// digi per thread; the warp pass then runs in registers (no hash table). (Until the passes
/// ran side by side, issue 13, batches of more than 8 events took a warp pass of 128 digis
/// and no middle pass: 26.4 µs per event at 128 events against 19.7 µs now, H200,
/// `docs/benchmarks.md`.)
pub const WARP_CAPACITY: u32 = 32;
/// Threads per block of the warp-group pass (4 warps, 4 modules at a time).
pub const WARP_PASS_THREADS: u32 = 128;
/// The middle block pass: modules over [`WARP_CAPACITY`] and up to this many digis...
pub const MID_CAPACITY: u32 = 128;
/// ...on blocks of this many threads.
pub const MID_THREADS: u32 = 128;
/// A `Clusterer` built for at most this many events per launch runs its last block pass
/// (modules over [`MID_CAPACITY`] digis) on [`LATENCY_SMALL_THREADS`]-thread blocks, larger
/// batches on [`SMALL_THREADS`]. Measured with the passes side by side (H200, issue 13,
/// graph µs per event, 512 against 256 threads): one event 59.1 against 81.4 (1024: 44.7,
/// first seen in the last run, not yet the default), two 34.4 against 44.3, eight 22.3
/// against 23.0, 128 events 19.2 against 19.7.
pub const FEW_EVENTS_PER_LAUNCH: u32 = 2;
/// Threads of the last block pass with up to [`FEW_EVENTS_PER_LAUNCH`] events per launch.
pub const LATENCY_SMALL_THREADS: u32 = 512;

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

/// Dynamic shared-memory bytes of the fallback kernel: the block-scan storage, then the
/// status words of a `rows × cols` module when `status_in_smem` (else they are in global
/// memory, `status_global`).
pub const fn fallback_smem_bytes(rows: u32, cols: u32, status_in_smem: bool) -> usize {
    scan_only_smem_bytes()
        + if status_in_smem {
            status_words(rows, cols) as usize * 4
        } else {
            0
        }
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

/// [`ClusteringCountModulesParams::phase`] of the first launch of [`KERNEL_COUNT_MODULES`]:
/// resets, module starts and module ends (one thread per digi).
pub const COUNT_PHASE_COUNT: u32 = 0;
/// [`ClusteringCountModulesParams::phase`] of the second launch: every module slot's end
/// written to `slot_end` and the slot sorted by size into one of the four `lists` (one thread
/// per slot).
pub const COUNT_PHASE_SORT: u32 = 1;

/// Parameters of [`KERNEL_CHECK_RUNS`] (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringCheckRunsParams {
    pub module: DevPtr<u16>,
    /// `nevents + 1` non-decreasing offsets from 0 to `n`.
    pub event_offsets: DevPtr<u32>,
    /// `[n, nevents]`.
    pub dims: DevPtr<u32>,
    /// `nevents * nmodules` run counts, zero on entry.
    pub runs: DevPtr<u32>,
    /// A digi that starts a second run of its module in its event
    /// ([`crate::histogram::encode_first_index`], the smallest; zero on entry = none).
    pub bad: DevPtr<u32>,
    pub nmodules: u32,
    pub _pad0: u32,
}
crate::kernel_params!(ClusteringCheckRunsParams, 48, ["clustering_check_runs"]);

/// Parameters of [`KERNEL_GATE_RUNS`] (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringGateRunsParams {
    /// The check's flag ([`ClusteringCheckRunsParams::bad`]): zero = the batch passed.
    pub bad: DevPtr<u32>,
    /// `[n, nevents]`: `n` set to zero when the batch failed.
    pub dims: DevPtr<u32>,
    /// `nevents + 1` offsets: all set to zero when the batch failed.
    pub event_offsets: DevPtr<u32>,
}
crate::kernel_params!(ClusteringGateRunsParams, 24, ["clustering_gate_runs"]);

/// Whether digi `k` (of a valid module id) starts a run of its module within its event,
/// whose first digi is `start`: the previous digi of the event that is not
/// [`INVALID_MODULE`] has another module id, or there is none. `module(j)` reads digi `j`.
/// The host validation's notion of a run (invalid digis inside a run skipped).
#[inline(always)]
pub fn starts_run(module: impl Fn(u32) -> u16, start: u32, k: u32) -> bool {
    let m = module(k);
    let mut j = k;
    while j > start {
        j -= 1;
        let mj = module(j);
        if mj != INVALID_MODULE {
            return mj != m;
        }
    }
    true
}

/// Parameters of [`KERNEL_COUNT_MODULES`], both phases: one `#[repr(C)]` struct passed by
/// value (see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringCountModulesParams {
    /// Module id per digi ([`INVALID_MODULE`] for an invalid digi).
    pub module: DevPtr<u16>,
    /// Row per digi.
    pub x: DevPtr<u16>,
    /// Column per digi.
    pub y: DevPtr<u16>,
    /// `nevents + 1` non-decreasing digi offsets from 0 to `n`: event `e` is
    /// `event_offsets[e] .. event_offsets[e + 1]`.
    pub event_offsets: DevPtr<u32>,
    /// Two words on the device: `n` (digis) and `nevents` (events), so that a captured
    /// launch sequence (a CUDA graph) serves any input up to the buffers' capacities.
    pub dims: DevPtr<u32>,
    /// Per digi: set to [`NOT_CLUSTERED`].
    pub clus: DevPtr<i32>,
    /// Slot list of module starts: `module_start[0]` = count (zero at launch),
    /// `module_start[1 + k]` = first digi of slot `k` (appended).
    pub module_start: DevPtr<u32>,
    /// Per slot `k`: `module id | event << 16`.
    pub slot_info: DevPtr<u32>,
    /// One word: `crate::histogram::encode_first_index` of the first digi with a module id or
    /// coordinates out of range (atomic max; zero at launch; zero = none).
    pub bad: DevPtr<u32>,
    /// Per event and module (`e * nmodules + m`): set to zero.
    pub clus_in_module: DevPtr<u32>,
    /// Per event and module: set to [`NO_MODULE_START`].
    pub module_first: DevPtr<u32>,
    /// Per event and module (`e * nmodules + m`): one past the module's last digi (the
    /// seed's `msize`), written by the count phase for every module that has digis, read
    /// by the sort phase.
    pub module_end: DevPtr<u32>,
    /// Per slot `k`: one past the module's last digi, written by the sort phase.
    pub slot_end: DevPtr<u32>,
    /// Counter words of the later kernels' slot lists (`list[0]`), or null: set to zero by
    /// the count phase (nothing reads them while it runs).
    pub counters: [DevPtr<u32>; 5],
    /// The sort phase's five slot lists (`list[0]` = count, zero at launch; `n + 1` words
    /// each): a module of `size` digis goes to the first list `l < 4` with
    /// `size <= caps[l]`, else to `lists[4]` (the small-module passes, the shared-memory
    /// kernel, the fallback).
    pub lists: [DevPtr<u32>; 5],
    /// Module ids per event (the geometry's).
    pub nmodules: u32,
    /// Rows per module.
    pub rows: u32,
    /// Columns per module.
    pub cols: u32,
    /// [`COUNT_PHASE_COUNT`] or [`COUNT_PHASE_SORT`].
    pub phase: u32,
    /// Size limits of the sort phase's first four lists (non-decreasing; 0 = list unused;
    /// `caps[3]` the shared-memory kernel's capacity, so that the fallback's modules are
    /// listed up front and the fallback runs beside that kernel, not after it).
    pub caps: [u32; 4],
}
crate::kernel_params!(
    ClusteringCountModulesParams,
    216,
    ["clustering_count_modules"]
);

/// Parameters of [`KERNEL_FIND_CLUS_SMALL`], both passes: one `#[repr(C)]` struct passed by value
/// (see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringFindClusSmallParams {
    /// Module id per digi ([`INVALID_MODULE`] for an invalid digi).
    pub module: DevPtr<u16>,
    /// Row per digi.
    pub x: DevPtr<u16>,
    /// Column per digi.
    pub y: DevPtr<u16>,
    /// Charge per digi (electrons).
    pub adc: DevPtr<u16>,
    /// `module_start[0]` = number of module slots, `module_start[1 + k]` = first digi of slot `k`
    /// (written by `clustering_count_modules`).
    pub module_start: DevPtr<u32>,
    /// Per slot `k`: `module id | event << 16` (written by `clustering_count_modules`).
    pub slot_info: DevPtr<u32>,
    /// Per slot `k`: one past the module's last digi (`msize`, written by the sort phase of
    /// `clustering_count_modules`).
    pub slot_end: DevPtr<u32>,
    /// Per digi: cluster index within its module, or [`NOT_CLUSTERED`].
    pub clus: DevPtr<i32>,
    /// Per event and module (`e * nmodules + m`): number of clusters.
    pub clus_in_module: DevPtr<u32>,
    /// Per event and module: first digi index, or [`NO_MODULE_START`].
    pub module_first: DevPtr<u32>,
    /// Slot list to cluster (`slots[0]` = count), from the sort phase of
    /// `clustering_count_modules`.
    pub slots: DevPtr<u32>,
    /// Null, or a slot list for listed modules over `capacity` (`larger[0]` = count, zero at
    /// launch; appended). A list sorted with this pass's capacity holds none; a null list
    /// leaves such a module unclustered.
    pub larger: DevPtr<u32>,
    /// Module ids per event (the geometry's).
    pub nmodules: u32,
    /// Rows per module.
    pub rows: u32,
    /// Columns per module.
    pub cols: u32,
    /// Largest module (digis) clustered here; larger ones go to `larger`.
    pub capacity: u32,
    /// Slots of each group's pixel table: a power of two, at least
    /// [`small_table_size`]`(capacity)` ([`small_table_slots`]); the entry point decides
    /// the group (warp or block).
    pub table_slots: u32,
    /// Module ids below this use `threshold_layer1`.
    pub layer1_modules: u32,
    /// Charge threshold (electrons) of the first layer's modules; 0 = no cut.
    pub threshold_layer1: u32,
    /// Charge threshold (electrons) of every other module; 0 = no cut.
    pub threshold_other: u32,
}
crate::kernel_params!(
    ClusteringFindClusSmallParams,
    128,
    [
        "clustering_find_clus_small",
        "clustering_find_clus_small_warp"
    ]
);

/// Parameters of [`KERNEL_FIND_CLUS`]: one `#[repr(C)]` struct passed by value (see
/// `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringFindClusParams {
    /// Module id per digi ([`INVALID_MODULE`] for an invalid digi).
    pub module: DevPtr<u16>,
    /// Row per digi.
    pub x: DevPtr<u16>,
    /// Column per digi.
    pub y: DevPtr<u16>,
    /// `module_start[0]` = number of module slots, `module_start[1 + k]` = first digi of slot `k`
    /// (written by `clustering_count_modules`).
    pub module_start: DevPtr<u32>,
    /// Per slot `k`: `module id | event << 16` (written by `clustering_count_modules`).
    pub slot_info: DevPtr<u32>,
    /// Per slot `k`: one past the module's last digi (`msize`), set for the listed slots.
    pub slot_end: DevPtr<u32>,
    /// Per digi: cluster index within its module, or [`NOT_CLUSTERED`].
    pub clus: DevPtr<i32>,
    /// Per event and module (`e * nmodules + m`): number of clusters.
    pub clus_in_module: DevPtr<u32>,
    /// Per event and module: first digi index, or [`NO_MODULE_START`].
    pub module_first: DevPtr<u32>,
    /// Null (status words in shared memory) or `gridDim.x * status_words(rows, cols)` zeroed words,
    /// one slab per block.
    pub status_global: DevPtr<u32>,
    /// Slot list to cluster (`slots[0]` = count), from `clustering_find_clus_small`.
    pub slots: DevPtr<u32>,
    /// Slot list of the modules over `capacity`: `fallback[0]` = count (zero at launch), then slots
    /// (appended).
    pub fallback: DevPtr<u32>,
    /// Module ids per event (the geometry's).
    pub nmodules: u32,
    /// Rows per module.
    pub rows: u32,
    /// Columns per module.
    pub cols: u32,
    /// Largest module (digis) clustered here; larger ones go to `fallback`.
    pub capacity: u32,
}
crate::kernel_params!(ClusteringFindClusParams, 112, ["clustering_find_clus"]);

/// Parameters of [`KERNEL_FIND_CLUS_SEED`]: one `#[repr(C)]` struct passed by value (see
/// `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringFindClusSeedParams {
    /// Module id per digi ([`INVALID_MODULE`] for an invalid digi).
    pub module: DevPtr<u16>,
    /// Row per digi.
    pub x: DevPtr<u16>,
    /// Column per digi.
    pub y: DevPtr<u16>,
    /// `nevents + 1` non-decreasing digi offsets from 0 to `n`: event `e` is
    /// `event_offsets[e] .. event_offsets[e + 1]`.
    pub event_offsets: DevPtr<u32>,
    /// `module_start[0]` = number of module slots, `module_start[1 + k]` = first digi of slot `k`
    /// (written by `clustering_count_modules`).
    pub module_start: DevPtr<u32>,
    /// Per slot `k`: `module id | event << 16` (written by `clustering_count_modules`).
    pub slot_info: DevPtr<u32>,
    /// Per slot `k`: one past the module's last digi (`msize`, written here).
    pub slot_end: DevPtr<u32>,
    /// Per digi: cluster index within its module, or [`NOT_CLUSTERED`].
    pub clus: DevPtr<i32>,
    /// Per event and module (`e * nmodules + m`): number of clusters.
    pub clus_in_module: DevPtr<u32>,
    /// Per event and module: first digi index, or [`NO_MODULE_START`].
    pub module_first: DevPtr<u32>,
    /// Slot list of the modules the seed's arrays cannot hold: `fallback[0]` = count (zero at
    /// launch), then slots (appended).
    pub fallback: DevPtr<u32>,
    /// Module ids per event (the geometry's).
    pub nmodules: u32,
    /// Rows per module.
    pub rows: u32,
    /// Columns per module.
    pub cols: u32,
    /// Padding (zero).
    pub _pad0: u32,
}
crate::kernel_params!(
    ClusteringFindClusSeedParams,
    104,
    ["clustering_find_clus_seed"]
);

/// Parameters of [`KERNEL_FIND_CLUS_FALLBACK`]: one `#[repr(C)]` struct passed by value (see
/// `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringFindClusFallbackParams {
    /// Module id per digi ([`INVALID_MODULE`] for an invalid digi).
    pub module: DevPtr<u16>,
    /// Row per digi.
    pub x: DevPtr<u16>,
    /// Column per digi.
    pub y: DevPtr<u16>,
    /// `module_start[0]` = number of module slots, `module_start[1 + k]` = first digi of slot `k`
    /// (written by `clustering_count_modules`).
    pub module_start: DevPtr<u32>,
    /// Per slot `k`: `module id | event << 16` (written by `clustering_count_modules`).
    pub slot_info: DevPtr<u32>,
    /// Per slot `k`: one past the module's last digi (`msize`).
    pub slot_end: DevPtr<u32>,
    /// Per digi: cluster index within its module, or [`NOT_CLUSTERED`].
    pub clus: DevPtr<i32>,
    /// Per event and module (`e * nmodules + m`): number of clusters.
    pub clus_in_module: DevPtr<u32>,
    /// Per event and module: first digi index, or [`NO_MODULE_START`].
    pub module_first: DevPtr<u32>,
    /// Slot list to cluster (`fallback[0]` = count), from `clustering_find_clus` or the seed
    /// kernel.
    pub fallback: DevPtr<u32>,
    /// `gridDim.x * rows * cols` words (any content): one pixel grid per block, read only at
    /// the cells of pixels the status words show were written for the current module.
    pub grid: DevPtr<u32>,
    /// Null (status words in shared memory, [`fallback_smem_bytes`]) or
    /// `gridDim.x * status_words(rows, cols)` zeroed words (left zeroed).
    pub status_global: DevPtr<u32>,
    /// Module ids per event (the geometry's).
    pub nmodules: u32,
    /// Rows per module.
    pub rows: u32,
    /// Columns per module.
    pub cols: u32,
    /// Padding (zero).
    pub _pad0: u32,
}
crate::kernel_params!(
    ClusteringFindClusFallbackParams,
    112,
    ["clustering_find_clus_fallback"]
);

/// Parameters of [`KERNEL_CHARGE_CUT`]: one `#[repr(C)]` struct passed by value (see
/// `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringClusterChargeCutParams {
    /// Charge per digi (electrons).
    pub adc: DevPtr<u16>,
    /// `module_start[0]` = number of module slots, `module_start[1 + k]` = first digi of slot `k`
    /// (written by `clustering_count_modules`).
    pub module_start: DevPtr<u32>,
    /// Per slot `k`: `module id | event << 16` (written by `clustering_count_modules`).
    pub slot_info: DevPtr<u32>,
    /// Per slot `k`: one past the module's last digi (`msize`).
    pub slot_end: DevPtr<u32>,
    /// Per digi: cluster index within its module, or [`NOT_CLUSTERED`].
    pub clus: DevPtr<i32>,
    /// Per event and module (`e * nmodules + m`): number of clusters.
    pub clus_in_module: DevPtr<u32>,
    /// `n` u64: per cluster of a module, its charge and then its new number.
    pub scratch: DevPtr<u64>,
    /// Slot list to cut (`slots[0]` = count), or null for every module slot.
    pub slots: DevPtr<u32>,
    /// Module ids per event (the geometry's).
    pub nmodules: u32,
    /// Module ids below this use `threshold_layer1`.
    pub layer1_modules: u32,
    /// Charge threshold (electrons) of the first layer's modules; 0 = no cut.
    pub threshold_layer1: u32,
    /// Charge threshold (electrons) of every other module; 0 = no cut.
    pub threshold_other: u32,
}
crate::kernel_params!(
    ClusteringClusterChargeCutParams,
    80,
    ["clustering_cluster_charge_cut"]
);

pub mod view;
pub use view::{
    ClusteringCheckRunsGatedParams, ClusteringViewBeginParams, ClusteringViewEndParams,
    KERNEL_CHECK_RUNS_GATED, KERNEL_VIEW_BEGIN, KERNEL_VIEW_END,
};

#[cfg(target_arch = "nvptx64")]
pub mod baseline;
#[cfg(target_arch = "nvptx64")]
pub mod common;
#[cfg(target_arch = "nvptx64")]
pub mod count;
#[cfg(target_arch = "nvptx64")]
pub mod cut;
#[cfg(target_arch = "nvptx64")]
pub mod fallback;
#[cfg(target_arch = "nvptx64")]
pub mod shared;
#[cfg(target_arch = "nvptx64")]
pub mod small;

/// Device code: every item of the stage files above, under one path.
#[cfg(target_arch = "nvptx64")]
pub mod kernels {
    pub use super::baseline::*;
    pub(crate) use super::common::*;
    pub use super::count::*;
    pub use super::cut::*;
    pub use super::fallback::*;
    pub use super::shared::*;
    pub use super::small::*;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every group of the small-module kernel starts its pixel table on a 16-byte boundary
    /// (the clear uses 16-byte stores), every table holds the cut's charges of a module of
    /// the capacity, and every table a block can hold keeps a digi's slot in the 15 bits
    /// the kernel stores it in.
    #[test]
    fn small_groups_aligned_and_table_slots_bounded() {
        for capacity in 1..=1100u32 {
            for scale in 0..=MAX_TABLE_SCALE {
                let slots = small_table_slots(capacity, scale);
                let words = small_group_words_slots(capacity, slots);
                assert_eq!(words % 4, 0, "capacity {capacity} scale {scale}");
                assert!(words >= 4 + 3 * capacity + 2 * slots);
                // The cut's charges (one per cluster, at most one per digi) go in the
                // table's first words.
                assert!(slots.is_power_of_two() && slots >= 32 && slots >= capacity);
                if find_clus_small_smem_bytes_slots(capacity, 1, slots) <= 228 * 1024 {
                    assert!(
                        slots <= MAX_TABLE_SLOTS,
                        "capacity {capacity} scale {scale}"
                    );
                }
            }
        }
    }

    /// The last block pass at its default capacity, 256 threads and table scale keeps eight
    /// blocks per SM (2,048 threads) within an SM's 228 KiB of shared memory, with the 1 KiB
    /// the driver reserves per block (issue 13, session 5: six at 1,024 digis and five
    /// arrays per digi).
    #[test]
    fn last_pass_eight_blocks_per_sm() {
        let slots = small_table_slots(SMALL_CAPACITY, LAST_TABLE_SCALE);
        let bytes = find_clus_small_smem_bytes_slots(SMALL_CAPACITY, 1, slots);
        assert!(8 * (bytes + 1024) <= 228 * 1024, "{bytes} bytes per block");
        assert_eq!(SMALL_THREADS * 8, 2048);
    }

    /// The sort phase's size limits of the default configuration are non-decreasing, the
    /// shared-memory kernel's capacity last (the fallback takes the modules above it).
    #[test]
    fn default_pass_caps_non_decreasing() {
        let caps = [WARP_CAPACITY, MID_CAPACITY, SMALL_CAPACITY, MEDIUM_CAPACITY];
        assert!(caps.windows(2).all(|w| w[0] <= w[1]), "{caps:?}");
    }
}
