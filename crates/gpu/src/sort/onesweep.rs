//! The onesweep pass kernels (one launch per digit pass), the key and value accesses the sort
//! kernels share, and the warp ranking.
//!
//! One block sorts one tile of `ONESWEEP_THREADS × ITEMS` keys by one digit and scatters it to
//! its final place for this pass; see the module docs of `super` for the steps and barriers.

use super::*;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;

/// A sort key as the kernels see it: `u32`, or `u64` (8 bytes, little-endian words).
pub trait Key: Copy {
    /// Bytes per key.
    const BYTES: u32;
    /// The zero key (padding).
    const ZERO: Self;
    /// Most digit passes (`bits / 8`).
    const MAX_PASSES: usize;
    /// Keys per 16-byte vector.
    const VEC: u32;
    /// `keys[idx]` through the read-only path.
    ///
    /// # Safety
    /// `keys` holds more than `idx` keys, not written during the kernel.
    unsafe fn ldg(keys: *const u32, idx: u32) -> Self;
    /// The `VEC` keys of vector `v` (16 bytes), in the first `VEC` slots.
    ///
    /// # Safety
    /// `keys` is 16-byte aligned and holds `(v + 1) × VEC` keys, not written during the kernel.
    unsafe fn ldg_vec(keys: *const u32, v: u32) -> [Self; 4];
    /// `keys[idx] = v`.
    ///
    /// # Safety
    /// `keys` holds more than `idx` keys.
    unsafe fn stg(keys: *mut u32, idx: u32, v: Self);
    /// The key at a shared-window address.
    ///
    /// # Safety
    /// `saddr` aligned to `BYTES`, inside the block's shared memory.
    unsafe fn lds(saddr: u32) -> Self;
    /// Stores the key at a shared-window address.
    ///
    /// # Safety
    /// As [`Key::lds`].
    unsafe fn sts(saddr: u32, v: Self);
    /// The low 32 bits of the key shifted right by `shift` (less than the key's bits).
    fn shr(self, shift: u32) -> u32;
    /// `((key >> shift) & mask) ^ flip` (`shift` less than the key's bits), computed again
    /// at every use (see `intrinsics::digit_u32`).
    fn digit(self, shift: u32, mask: u32, flip: u32) -> u32;
    /// Bits `shift .. shift + bits` of the key (`bits <= 8`) by `bfe`: fewer live registers
    /// than [`Key::digit`] where the digits of all passes are extracted at once (the upfront
    /// histogram), more instructions.
    fn field(self, shift: u32, bits: u32) -> u32;
}

impl Key for u32 {
    const BYTES: u32 = 4;
    const ZERO: Self = 0;
    const MAX_PASSES: usize = 4;
    const VEC: u32 = 4;
    #[inline(always)]
    unsafe fn ldg(keys: *const u32, idx: u32) -> Self {
        // SAFETY: caller contract.
        unsafe { i::ldg_u32(keys.add(idx as usize)) }
    }
    #[inline(always)]
    unsafe fn ldg_vec(keys: *const u32, v: u32) -> [Self; 4] {
        // SAFETY: caller contract (16-byte aligned, in bounds).
        unsafe { i::ldg_v4_u32(keys.add(v as usize * 4)) }
    }
    #[inline(always)]
    unsafe fn stg(keys: *mut u32, idx: u32, v: Self) {
        // SAFETY: caller contract.
        unsafe { i::st_global_u32(keys.add(idx as usize), v) }
    }
    #[inline(always)]
    unsafe fn lds(saddr: u32) -> Self {
        // SAFETY: caller contract.
        unsafe { i::ld_shared_u32(saddr) }
    }
    #[inline(always)]
    unsafe fn sts(saddr: u32, v: Self) {
        // SAFETY: caller contract.
        unsafe { i::st_shared_u32(saddr, v) }
    }
    #[inline(always)]
    fn shr(self, shift: u32) -> u32 {
        self.wrapping_shr(shift)
    }
    #[inline(always)]
    fn digit(self, shift: u32, mask: u32, flip: u32) -> u32 {
        i::digit_u32(self, shift, mask, flip)
    }
    #[inline(always)]
    fn field(self, shift: u32, bits: u32) -> u32 {
        i::bfe_u32(self, shift, bits)
    }
}

impl Key for u64 {
    const BYTES: u32 = 8;
    const ZERO: Self = 0;
    const MAX_PASSES: usize = 8;
    const VEC: u32 = 2;
    #[inline(always)]
    unsafe fn ldg(keys: *const u32, idx: u32) -> Self {
        // SAFETY: caller contract; u64 keys are 8-byte aligned (allocation).
        unsafe { i::ldg_u64((keys as *const u64).add(idx as usize)) }
    }
    #[inline(always)]
    unsafe fn ldg_vec(keys: *const u32, v: u32) -> [Self; 4] {
        // SAFETY: caller contract (16-byte aligned, in bounds).
        let x = unsafe { i::ldg_v2_u64((keys as *const u64).add(v as usize * 2)) };
        [x[0], x[1], 0, 0]
    }
    #[inline(always)]
    unsafe fn stg(keys: *mut u32, idx: u32, v: Self) {
        // SAFETY: caller contract.
        unsafe { i::st_global_u64((keys as *mut u64).add(idx as usize), v) }
    }
    #[inline(always)]
    unsafe fn lds(saddr: u32) -> Self {
        // SAFETY: caller contract.
        unsafe { i::ld_shared_u64(saddr) }
    }
    #[inline(always)]
    unsafe fn sts(saddr: u32, v: Self) {
        // SAFETY: caller contract.
        unsafe { i::st_shared_u64(saddr, v) }
    }
    #[inline(always)]
    fn shr(self, shift: u32) -> u32 {
        self.wrapping_shr(shift) as u32
    }
    #[inline(always)]
    fn digit(self, shift: u32, mask: u32, flip: u32) -> u32 {
        i::digit_u64(self, shift, mask, flip)
    }
    #[inline(always)]
    fn field(self, shift: u32, bits: u32) -> u32 {
        i::bfe_u64(self, shift, bits)
    }
}

/// The digit parameters of one pass: `digit = ((key >> shift) & mask) ^ flip`.
#[derive(Clone, Copy)]
pub struct DigitFn {
    /// First bit of the digit.
    pub shift: u32,
    /// Bits of the digit.
    pub bits: u32,
    /// `(1 << bits) - 1`.
    pub mask: u32,
    /// `mask` when descending, else 0.
    pub flip: u32,
}

impl DigitFn {
    /// The digit function of `bits` bits at `shift`.
    #[inline(always)]
    pub fn new(shift: u32, bits: u32, descending: bool) -> Self {
        let mask = (1u32 << bits) - 1;
        Self {
            shift,
            bits,
            mask,
            flip: if descending { mask } else { 0 },
        }
    }
    /// The digit of `key` by `bfe` (see [`Key::field`]).
    #[inline(always)]
    pub fn of_bfe<K: Key>(self, key: K) -> u32 {
        key.field(self.shift, self.bits) ^ self.flip
    }
    /// The digit of `key`.
    #[inline(always)]
    pub fn of<K: Key>(self, key: K) -> u32 {
        key.digit(self.shift, self.mask, self.flip)
    }
    /// The digit of the item at tile position `local`: padding past `valid` sorts last.
    /// Without `CHECK` (a full tile) every item is a key.
    #[inline(always)]
    pub fn of_item<K: Key, const CHECK: bool>(self, key: K, local: u32, valid: u32) -> u32 {
        if !CHECK || local < valid {
            self.of(key)
        } else {
            RADIX - 1
        }
    }
}

/// `W` words of a value (the first `W` of the array), read through the read-only path.
///
/// # Safety
/// `values` holds more than `idx` values of `W` words, aligned to `4 × W` bytes for
/// `W` = 2 or 4, not written during the kernel.
#[inline(always)]
pub unsafe fn value_ldg<const W: usize>(values: *const u32, idx: u32) -> [u32; 4] {
    // SAFETY: caller contract; the vector forms need 8- and 16-byte alignment, given by
    // `idx × 8` and `idx × 16` from an aligned base.
    unsafe {
        let p = values.add(idx as usize * W);
        match W {
            1 => [i::ldg_u32(p), 0, 0, 0],
            2 => {
                let v = i::ldg_v2_u32(p);
                [v[0], v[1], 0, 0]
            }
            3 => [i::ldg_u32(p), i::ldg_u32(p.add(1)), i::ldg_u32(p.add(2)), 0],
            4 => i::ldg_v4_u32(p),
            _ => [0; 4],
        }
    }
}

/// Stores value `idx` (`W` words).
///
/// # Safety
/// `values` holds more than `idx` values of `W` words, aligned as for [`value_ldg`].
#[inline(always)]
pub unsafe fn value_stg<const W: usize>(values: *mut u32, idx: u32, v: [u32; 4]) {
    // SAFETY: caller contract.
    unsafe {
        let p = values.add(idx as usize * W);
        match W {
            1 => i::st_global_u32(p, v[0]),
            2 => i::st_global_v2_u32(p, [v[0], v[1]]),
            3 => {
                i::st_global_u32(p, v[0]);
                i::st_global_u32(p.add(1), v[1]);
                i::st_global_u32(p.add(2), v[2]);
            }
            4 => i::st_v4_u32(p, v),
            _ => {}
        }
    }
}

/// Loads the value at slot `slot` of a shared array of `W`-word values.
///
/// # Safety
/// `base + slot × 4W` is inside shared memory, `base` 16-byte aligned.
#[inline(always)]
pub unsafe fn value_lds<const W: usize>(base: u32, slot: u32) -> [u32; 4] {
    let a = base + slot * 4 * W as u32;
    // SAFETY: caller contract; alignment as in `value_ldg`.
    unsafe {
        match W {
            1 => [i::ld_shared_u32(a), 0, 0, 0],
            2 => {
                let v = i::ld_shared_v2_u32(a);
                [v[0], v[1], 0, 0]
            }
            3 => [
                i::ld_shared_u32(a),
                i::ld_shared_u32(a + 4),
                i::ld_shared_u32(a + 8),
                0,
            ],
            4 => i::ld_shared_v4_u32(a),
            _ => [0; 4],
        }
    }
}

/// Stores a value at slot `slot` of a shared array of `W`-word values.
///
/// # Safety
/// As [`value_lds`].
#[inline(always)]
pub unsafe fn value_sts<const W: usize>(base: u32, slot: u32, v: [u32; 4]) {
    let a = base + slot * 4 * W as u32;
    // SAFETY: caller contract.
    unsafe {
        match W {
            1 => i::st_shared_u32(a, v[0]),
            2 => i::st_shared_v2_u32(a, [v[0], v[1]]),
            3 => {
                i::st_shared_u32(a, v[0]);
                i::st_shared_u32(a + 4, v[1]);
                i::st_shared_u32(a + 8, v[2]);
            }
            4 => i::st_shared_v4_u32(a, v),
            _ => {}
        }
    }
}

/// Counts this thread's item digits into its warp's shared counters (`hist_w`, 256 words),
/// adding runs of equal digits at once (a warp whose keys share a digit, e.g. the top bits
/// of timestamps, then makes one atomic per lane rather than one per item).
///
/// # Safety
/// `hist_w` addresses 256 words of shared memory.
#[inline(always)]
pub unsafe fn count_digits<K: Key, const ITEMS: usize, const CHECK: bool>(
    keys: &[K; ITEMS],
    hist_w: u32,
    f: DigitFn,
    local0: u32,
    valid: u32,
) {
    let mut cur = f.of_item::<K, CHECK>(keys[0], local0, valid);
    let mut cnt = 0u32;
    let mut k = 0;
    while k < ITEMS {
        let d = f.of_item::<K, CHECK>(keys[k], local0 + 32 * k as u32, valid);
        if d != cur {
            // SAFETY: cur < 256.
            unsafe { i::red_shared_add_u32(hist_w + cur * 4, cnt) };
            cur = d;
            cnt = 0;
        }
        cnt += 1;
        k += 1;
    }
    // SAFETY: cur < 256.
    unsafe { i::red_shared_add_u32(hist_w + cur * 4, cnt) };
}

/// Stable warp ranking: for each item (in data order: item `k` of lane `l` is the warp's
/// `32k + l`-th), the lanes holding the same digit are found with `match.any`; the highest
/// of them adds their number to the warp's running counter of that digit (`hist_w`, which
/// holds the tile position of the warp's next key of each digit) and the old value is
/// broadcast (`intrinsics::match_fetch_add_shared`). Calls `place(k, position)` with each
/// item's tile-sorted position as soon as it is known (so that positions need not stay live).
/// All 32 lanes call it.
///
/// # Safety
/// `hist_w` addresses this warp's 256 counters in shared memory, used by no other warp.
#[inline(always)]
pub unsafe fn rank_items<K: Key, const ITEMS: usize, const CHECK: bool, F: FnMut(usize, u32)>(
    keys: &[K; ITEMS],
    hist_w: u32,
    f: DigitFn,
    local0: u32,
    valid: u32,
    mut place: F,
) {
    // Unrolled by hand: with the caller's `place` inlined the body is too large for the
    // compiler's unroll threshold, and a rolled loop would index `keys` at run time (a stack
    // frame in local memory).
    let mut step = |k: usize| {
        if k < ITEMS {
            let d = f.of_item::<K, CHECK>(keys[k], local0 + 32 * k as u32, valid);
            // SAFETY: d < 256: inside this warp's counters; all lanes call this.
            let rank = unsafe { i::match_fetch_add_shared(d, hist_w + d * 4) };
            place(k, rank);
        }
    };
    const { assert!(ITEMS <= 24) };
    step(0);
    step(1);
    step(2);
    step(3);
    step(4);
    step(5);
    step(6);
    step(7);
    step(8);
    step(9);
    step(10);
    step(11);
    step(12);
    step(13);
    step(14);
    step(15);
    step(16);
    step(17);
    step(18);
    step(19);
    step(20);
    step(21);
    step(22);
    step(23);
}

/// Exclusive prefix of digit `d` over the tiles before `tile` (decoupled look-back, one
/// thread per digit): reads the status words of tiles `tile - 1, tile - 2, ...`, waiting for
/// each to carry this pass's epoch, adding aggregates until it meets an inclusive prefix.
///
/// # Safety
/// `tile > 0`; `status` holds `tile × RADIX` words; every earlier tile is held by a running
/// block that publishes (the atomic tile counter), and tile 0 publishes a prefix.
#[inline(always)]
pub unsafe fn lookback(status: *const u64, tile: u32, d: u32, epoch: u32) -> u32 {
    let mut prefix = 0u32;
    let mut t = tile;
    loop {
        t -= 1;
        // SAFETY: t < tile; the word of (t, d).
        let p = unsafe { status.add(t as usize * RADIX as usize + d as usize) };
        // SAFETY: as above.
        let mut w = unsafe { i::load_relaxed_u64(p) };
        while (w >> STATUS_EPOCH_SHIFT) as u32 != epoch {
            // SAFETY: as above.
            w = unsafe { i::load_relaxed_u64(p) };
        }
        prefix = prefix.wrapping_add(w as u32);
        if w & STATUS_PREFIX_BIT != 0 {
            return prefix;
        }
    }
}

/// As [`lookback`], reading [`LOOKBACK_BATCH`] predecessors per step: the status words of
/// tiles `t - 1 .. t - LOOKBACK_BATCH` are loaded together (independent loads in flight),
/// then added in order, waiting only on a word not yet published, until one is an inclusive
/// prefix. A chain of `c` predecessors costs about `c / LOOKBACK_BATCH` dependent L2 round
/// trips instead of `c`; words past the prefix are read and discarded.
///
/// # Safety
/// As [`lookback`].
#[inline(always)]
pub unsafe fn lookback_batched(status: *const u64, tile: u32, d: u32, epoch: u32) -> u32 {
    const B: usize = LOOKBACK_BATCH as usize;
    let mut prefix = 0u32;
    // Tiles t - 1, t - 2, ... are read; t > 0 while no prefix has been met (tile 0
    // publishes a prefix).
    let mut t = tile;
    loop {
        let mut w = [0u64; B];
        let mut j = 0;
        while j < B {
            if t > j as u32 {
                // SAFETY: t - 1 - j < tile; the word of (t - 1 - j, d).
                w[j] = unsafe {
                    i::load_relaxed_u64(
                        status.add((t - 1 - j as u32) as usize * RADIX as usize + d as usize),
                    )
                };
            }
            j += 1;
        }
        let mut j = 0;
        while j < B {
            // Reached only while no prefix was met: tile t - 1 - j exists (tile 0 returns).
            let mut x = w[j];
            while (x >> STATUS_EPOCH_SHIFT) as u32 != epoch {
                // SAFETY: as above (t > j here: tiles down to 0 are reached in order, and
                // tile 0's word is a prefix).
                x = unsafe {
                    i::load_relaxed_u64(
                        status.add((t - 1 - j as u32) as usize * RADIX as usize + d as usize),
                    )
                };
            }
            prefix = prefix.wrapping_add(x as u32);
            if x & STATUS_PREFIX_BIT != 0 {
                return prefix;
            }
            j += 1;
        }
        t -= B as u32;
    }
}

/// Shared memory of a block-wide radix sort pass ([`block_sort_pass`]): the warps' digit
/// counters, the block-scan words and the sorted keys and values (shared-state-space
/// addresses, except `scan`).
#[derive(Clone, Copy)]
pub struct BlockSortSmem {
    /// `warps * RADIX` counters, warp-major.
    pub hist: u32,
    /// This warp's `RADIX` counters.
    pub hist_w: u32,
    /// The 33 words of [`digit_starts`].
    pub scan: *mut u32,
    /// Warps of the block.
    pub warps: u32,
    /// The keys in sorted order (`K::BYTES` each).
    pub keys: u32,
    /// The values in sorted order (`u32` each).
    pub values: u32,
}

/// One pass of a block-wide stable radix sort: each thread holds `ITEMS` keys and `u32`
/// values at the warp-striped positions `local0 + 32 j` (positions `>= n` are padding, which
/// sorts last); zeroes this warp's counters, counts the digits of `f`, finds the digit
/// starts, scatters keys and values into shared memory in sorted order and reloads each
/// thread's positions. Warps that hold padding only (`active == false`) keep to the barriers
/// but neither count nor rank. Four barriers inside (two in [`digit_starts`]); the next
/// pass's scatter comes after its count barrier, which every thread reaches after its reload.
///
/// # Safety
/// Every thread of the block calls it with the same `f`, `n` and `sm`; `sm` as its fields
/// say, with room for `warps * 32 * ITEMS` keys and values; `blockDim.x >= RADIX`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn block_sort_pass<K: Key, const ITEMS: usize>(
    keys: &mut [K; ITEMS],
    values: &mut [u32; ITEMS],
    f: DigitFn,
    sm: &BlockSortSmem,
    local0: u32,
    n: u32,
    active: bool,
) {
    let (lane, t) = (i::lane_id(), i::thread_idx_x());
    let mut q = lane;
    while q < RADIX {
        // SAFETY: this warp's counters.
        unsafe { i::st_shared_u32(sm.hist_w + q * 4, 0) };
        q += 32;
    }
    i::sync_warp();
    if active {
        // SAFETY: this warp's counters; padding (position >= n) sorts last.
        unsafe { count_digits::<K, ITEMS, true>(keys, sm.hist_w, f, local0, n) };
    }
    // Every warp's counts before the digit starts.
    i::sync_threads();
    // SAFETY: threads below RADIX own one digit each; the scan words are the block's.
    unsafe { digit_starts(sm.hist, sm.warps, sm.scan, t, t < RADIX) };
    i::sync_threads();
    if active {
        // SAFETY: this warp's counters; ranks < warps * 32 * ITEMS (caller contract).
        unsafe {
            rank_items::<K, ITEMS, true, _>(keys, sm.hist_w, f, local0, n, |k, r| {
                K::sts(sm.keys + r * K::BYTES, keys[k]);
                i::st_shared_u32(sm.values + r * 4, values[k]);
            })
        };
    }
    // The scatter before the reload.
    i::sync_threads();
    if active {
        let mut j = 0;
        while j < ITEMS {
            let q = local0 + 32 * j as u32;
            // SAFETY: q < warps * 32 * ITEMS.
            unsafe {
                keys[j] = K::lds(sm.keys + q * K::BYTES);
                values[j] = i::ld_shared_u32(sm.values + q * 4);
            }
            j += 1;
        }
    }
}

/// The block's digit bookkeeping after counting (thread `d` = digit `d`): turns the warp
/// counters of digit `d` into the tile position of each warp's first key of that digit and
/// returns `(tile count of d, tile start of d)`. Contains the block scan's two barriers; the
/// caller has synchronised after counting and synchronises before the warps rank.
///
/// # Safety
/// `blockDim.x == 256` (one thread per digit) or `hist` rows `nwarps`; `scan` 33 words of
/// shared memory used by nothing else.
#[inline(always)]
pub unsafe fn digit_starts(
    hist: u32,
    nwarps: u32,
    scan: *mut u32,
    d: u32,
    active: bool,
) -> (u32, u32) {
    let mut run = 0u32;
    if active {
        let mut w = 0;
        while w < nwarps {
            let a = hist + (w * RADIX + d) * 4;
            // SAFETY: inside the warp counters.
            let c = unsafe { i::ld_shared_u32(a) };
            // SAFETY: as above.
            unsafe { i::st_shared_u32(a, run) };
            run += c;
            w += 1;
        }
    }
    // SAFETY: `scan` is ours (caller contract).
    let bs = unsafe { BlockScan::<u32>::new(scan) };
    let (start, _) = bs.exclusive_sum(run);
    if active {
        let mut w = 0;
        while w < nwarps {
            let a = hist + (w * RADIX + d) * 4;
            // SAFETY: inside the warp counters.
            unsafe { i::st_shared_u32(a, i::ld_shared_u32(a) + start) };
            w += 1;
        }
    }
    (run, start)
}

/// Items per chunk of the scatter loop (loads of a chunk in flight together).
const SCATTER_CHUNK: usize = 4;

/// One onesweep pass over one tile (see the module docs of `super`). With `STAGED` (the
/// `*_staged` kernels, one-word values) a full tile takes the body without bounds tests whose
/// values are staged in shared memory, the partial last tile the plain body.
///
/// # Safety
/// See [`sort_onesweep_u32`]; with `STAGED`, [`onesweep_staged_smem_bytes`] of shared memory.
#[inline(always)]
pub unsafe fn onesweep_pass<K: Key, const W: usize, const ITEMS: usize, const STAGED: bool>(
    p: &SortOnesweepParams,
) {
    let tid = i::thread_idx_x();
    let lane = i::lane_id();
    let warp = tid / 32;
    let n = p.n as u32;
    let tile_items = ONESWEEP_THREADS * ITEMS as u32;
    let sbase = i::shared_base();
    let hist_w = sbase + layout::WARP_HIST + warp * RADIX * 4;

    // (1) Take a tile; zero this warp's digit counters.
    if tid == 0 {
        // SAFETY: launch contract: the pass's tile counter.
        let t = unsafe { i::atomic_add_u32(p.tile_counter.ptr_mut(), 1) };
        // SAFETY: the tile slot of the layout.
        unsafe { i::st_shared_u32(sbase + layout::TILE_SLOT, t) };
    }
    let mut q = lane;
    while q < RADIX {
        // SAFETY: this warp's counters.
        unsafe { i::st_shared_u32(hist_w + q * 4, 0) };
        q += 32;
    }
    i::sync_threads();
    // SAFETY: written before the barrier.
    let tile = unsafe { i::ld_shared_u32(sbase + layout::TILE_SLOT) };
    let start = tile * tile_items;
    let valid = if n - start < tile_items {
        n - start
    } else {
        tile_items
    };
    // Keys only: full tiles take a copy of the body without bounds tests (about 30 % fewer
    // instructions per tile; 1.12x CUB instead of 0.97x at 2^24-2^26 on an H200). With
    // values held in registers the same split measured 8-13 % slower (the doubled kernel,
    // docs/benchmarks.md; its full-tile body spills 64 bytes on sm_90), so the plain kernels
    // with values keep one body with the tests; the `*_staged` kernels split with the
    // values of full tiles staged in shared memory (no spill).
    if STAGED && valid == tile_items {
        // SAFETY: forwarded; a full tile; the staging area (caller contract).
        unsafe { onesweep_body::<K, W, ITEMS, false, STAGED>(p, tile, start, valid) }
    } else if W == 0 && valid == tile_items {
        // SAFETY: forwarded; a full tile.
        unsafe { onesweep_body::<K, W, ITEMS, false, false>(p, tile, start, valid) }
    } else {
        // SAFETY: forwarded; tested against `valid`.
        unsafe { onesweep_body::<K, W, ITEMS, true, false>(p, tile, start, valid) }
    }
}

/// Steps (2) to (7) of a onesweep pass over tile `tile` (positions `start..start + valid`):
/// without `CHECK` the tile is full and no item is tested against `valid` (compiled without
/// the bounds tests and the branches around them). With `STAGE` (one-word values only) the
/// values are copied asynchronously into the staging area of shared memory
/// ([`onesweep_stage_offset`]) instead of registers, and the ranking moves them from there.
///
/// # Safety
/// See [`sort_onesweep_u32`]; step (1) done; `valid == tile` items unless `CHECK`; with
/// `STAGE`, `onesweep_staged_smem_bytes` of shared memory.
#[inline(always)]
unsafe fn onesweep_body<
    K: Key,
    const W: usize,
    const ITEMS: usize,
    const CHECK: bool,
    const STAGE: bool,
>(
    p: &SortOnesweepParams,
    tile: u32,
    start: u32,
    valid: u32,
) {
    let tid = i::thread_idx_x();
    let lane = i::lane_id();
    let warp = tid / 32;
    let sbase = i::shared_base();
    let hist = sbase + layout::WARP_HIST;
    let hist_w = hist + warp * RADIX * 4;
    let bin_base = sbase + layout::BIN_BASE;
    let exch = sbase + layout::EXCHANGE;
    let vexch = sbase + onesweep_values_offset(K::BYTES as usize, 4 * W);
    // SAFETY: the block-scan words of the layout.
    let scan = unsafe { i::dynamic_shared_ptr().add(layout::SCAN as usize) } as *mut u32;
    let f = DigitFn::new(p.shift, p.bits, p.descending != 0);
    let local0 = warp * 32 * ITEMS as u32 + lane;

    // (2) Load the keys and the values, warp-striped: item k of this lane is tile position
    // local0 + 32 k. The values stay in registers until the ranking places them, so their
    // loads overlap the counting, the block scan and the ranking (no second pass over the
    // tile after the keys' scatter).
    let keys_in = p.keys_in.ptr();
    let values_in = p.values_in.ptr();
    let index_values = W > 0 && values_in.is_null();
    let mut keys = [K::ZERO; ITEMS];
    let mut vals = [[0u32; 4]; ITEMS];
    // The staged values: tile position l at `vstage + 4 l`.
    let vstage = sbase + onesweep_stage_offset(K::BYTES as usize, 4 * W);
    const { assert!(!STAGE || (W == 1 && !CHECK)) };
    if STAGE && !index_values {
        let mut dst = [0u32; ITEMS];
        let mut src = [values_in; ITEMS];
        let mut k = 0;
        while k < ITEMS {
            let l = local0 + 32 * k as u32;
            dst[k] = vstage + l * 4;
            // SAFETY: start + l < n values (a full tile); only the address is formed.
            src[k] = unsafe { values_in.add((start + l) as usize) };
            k += 1;
        }
        // SAFETY: the values are not written during the kernel; each slot is this thread's
        // (tile position l), read only by it, after `stage_u32_wait`.
        unsafe { i::stage_u32::<ITEMS>(dst, src) };
    }
    let mut k = 0;
    while k < ITEMS {
        let l = local0 + 32 * k as u32;
        if !CHECK || l < valid {
            // SAFETY: start + l < n.
            keys[k] = unsafe { K::ldg(keys_in, start + l) };
            if W > 0 && !STAGE && !index_values {
                // SAFETY: start + l < n values.
                vals[k] = unsafe { value_ldg::<W>(values_in, start + l) };
            }
        }
        k += 1;
    }
    // This thread's digit (tid) start in the pass, from the histogram kernel.
    // SAFETY: `offsets` holds RADIX words; tid < 256.
    let goff = unsafe { i::ldg_u32(p.offsets.ptr().add(tid as usize)) };

    // (3) Count the tile's digits per warp. (Indices are recomputed from an opaque copy in
    // each phase, so that per-item indices do not stay live through the kernel.)
    // SAFETY: this warp's counters.
    unsafe { count_digits::<K, ITEMS, CHECK>(&keys, hist_w, f, i::opaque_u32(local0), valid) };
    i::sync_threads();

    // (4) Tile count and tile start of digit `tid`; publish the count at once.
    let status = p.status.ptr_mut();
    // SAFETY: blockDim == 256: thread tid owns digit tid; scan words are ours.
    let (count, local_start) = unsafe { digit_starts(hist, ONESWEEP_WARPS, scan, tid, true) };
    // SAFETY: status holds tiles × RADIX words; tile < tiles.
    let my_status = unsafe { status.add(tile as usize * RADIX as usize + tid as usize) };
    // SAFETY: as above.
    unsafe { i::store_relaxed_u64(my_status, status_word(p.epoch, tile == 0, count)) };
    i::sync_threads();

    // (5) Rank; write each key (and its value) at its tile-sorted position at once.
    let local0 = i::opaque_u32(local0);
    let vstart = i::opaque_u32(start) + local0;
    if STAGE {
        // This thread's staged values have landed (it reads only its own slots).
        i::stage_u32_wait();
    }
    // SAFETY: this warp's counters; positions < tile_items: inside the exchange areas.
    unsafe {
        rank_items::<K, ITEMS, CHECK, _>(&keys, hist_w, f, local0, valid, |k, r| {
            K::sts(exch + r * K::BYTES, keys[k]);
            if W > 0 {
                // No input values: each key's value is its input index (argsort; `W` is
                // 1 then, launch contract).
                let v = if index_values {
                    [vstart + 32 * k as u32, 0, 0, 0]
                } else if STAGE {
                    // SAFETY: this thread's staged slot of tile position local0 + 32 k.
                    value_lds::<W>(vstage, local0 + 32 * k as u32)
                } else {
                    vals[k]
                };
                value_sts::<W>(vexch, r, v);
            }
        })
    };

    // (6) Look back for digit `tid`, publish the inclusive prefix, set the scatter base.
    let prefix = if tile == 0 {
        0
    } else {
        // SAFETY: tile > 0; earlier tiles are held by running blocks (tile counter).
        let prefix = unsafe {
            if p.lookback_batch > 1 {
                lookback_batched(status, tile, tid, p.epoch)
            } else {
                lookback(status, tile, tid, p.epoch)
            }
        };
        // SAFETY: as in (4).
        unsafe {
            i::store_relaxed_u64(
                my_status,
                status_word(p.epoch, true, prefix.wrapping_add(count)),
            )
        };
        prefix
    };
    // SAFETY: the scatter bases of the layout.
    unsafe {
        i::st_shared_u32(
            bin_base + tid * 4,
            goff.wrapping_add(prefix).wrapping_sub(local_start),
        )
    };
    i::sync_threads();

    // (7) Scatter keys and values: tile-sorted position j goes to base[digit] + j. In chunks
    // of SCATTER_CHUNK items: all loads of a chunk are issued before its stores, and the
    // registers they take stay bounded.
    let keys_out = p.keys_out.ptr_mut();
    let values_out = p.values_out.ptr_mut();
    let tid = i::opaque_u32(tid);
    let mut c = 0;
    while c < ITEMS {
        let mut out = [K::ZERO; SCATTER_CHUNK];
        let mut v = [[0u32; 4]; SCATTER_CHUNK];
        let mut dest = [0u32; SCATTER_CHUNK];
        let mut u = 0;
        while u < SCATTER_CHUNK {
            let j = (c + u) as u32 * ONESWEEP_THREADS + tid;
            if c + u < ITEMS && (!CHECK || j < valid) {
                // SAFETY: j < tile_items; digit < 256.
                unsafe {
                    out[u] = K::lds(exch + j * K::BYTES);
                    dest[u] = i::ld_shared_u32(bin_base + f.of(out[u]) * 4).wrapping_add(j);
                    if W > 0 {
                        v[u] = value_lds::<W>(vexch, j);
                    }
                }
            }
            u += 1;
        }
        let mut u = 0;
        while u < SCATTER_CHUNK {
            let j = (c + u) as u32 * ONESWEEP_THREADS + tid;
            if c + u < ITEMS && (!CHECK || j < valid) {
                // SAFETY: dest < n: a permutation of the pass's positions.
                unsafe {
                    K::stg(keys_out, dest[u], out[u]);
                    if W > 0 {
                        value_stg::<W>(values_out, dest[u], v[u]);
                    }
                }
            }
            u += 1;
        }
        c += SCATTER_CHUNK;
    }
}

macro_rules! onesweep_kernel {
    ($(#[$doc:meta])* $name:ident, $key:ty, $words:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// Launch contract: `blockDim.x == ONESWEEP_THREADS`, `gridDim.x ==
        /// onesweep_tiles(n, key bytes, value bytes)`, `onesweep_smem_bytes(..)` bytes of dynamic
        /// shared memory; `1 <= n < 2^32`; `keys_in` / `keys_out` (and with values
        /// `values_in` / `values_out`) valid for `n` elements, 16-byte aligned, not
        /// overlapping; `offsets` holds this pass's `RADIX` digit starts computed from these
        /// keys with the same digit; `status` holds `gridDim.x × RADIX` words none of which
        /// carries `epoch`; `tile_counter` is zero; `1 <= bits <= 8`, `shift + bits <=` key bits.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: SortOnesweepParams) {
            // SAFETY: forwarded launch contract.
            unsafe {
                onesweep_pass::<$key, $words, { onesweep_items(<$key as Key>::BYTES as usize, 4 * $words) as usize }, false>(&p)
            }
        }
    };
}

macro_rules! onesweep_staged_kernel {
    ($(#[$doc:meta])* $name:ident, $key:ty, $words:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As the plain kernel of the same key and value, with
        /// `onesweep_staged_smem_bytes(..)` bytes of dynamic shared memory.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: SortOnesweepParams) {
            // SAFETY: forwarded launch contract.
            unsafe {
                onesweep_pass::<$key, $words, { onesweep_items(<$key as Key>::BYTES as usize, 4 * $words) as usize }, true>(&p)
            }
        }
    };
}

onesweep_staged_kernel!(
    /// One onesweep pass over `u32` keys with 4-byte values, full tiles without bounds tests
    /// and with their values staged in shared memory.
    sort_onesweep_u32_v4_staged,
    u32,
    1
);
onesweep_staged_kernel!(
    /// One onesweep pass over `u64` keys with 4-byte values, full tiles without bounds tests
    /// and with their values staged in shared memory.
    sort_onesweep_u64_v4_staged,
    u64,
    1
);

onesweep_kernel!(
    /// One onesweep pass over `u32` keys.
    sort_onesweep_u32,
    u32,
    0
);
onesweep_kernel!(
    /// One onesweep pass over `u32` keys with 4-byte values.
    sort_onesweep_u32_v4,
    u32,
    1
);
onesweep_kernel!(
    /// One onesweep pass over `u32` keys with 8-byte values.
    sort_onesweep_u32_v8,
    u32,
    2
);
onesweep_kernel!(
    /// One onesweep pass over `u32` keys with 12-byte values.
    sort_onesweep_u32_v12,
    u32,
    3
);
onesweep_kernel!(
    /// One onesweep pass over `u32` keys with 16-byte values.
    sort_onesweep_u32_v16,
    u32,
    4
);
onesweep_kernel!(
    /// One onesweep pass over `u64` keys.
    sort_onesweep_u64,
    u64,
    0
);
onesweep_kernel!(
    /// One onesweep pass over `u64` keys with 4-byte values.
    sort_onesweep_u64_v4,
    u64,
    1
);
onesweep_kernel!(
    /// One onesweep pass over `u64` keys with 8-byte values.
    sort_onesweep_u64_v8,
    u64,
    2
);
onesweep_kernel!(
    /// One onesweep pass over `u64` keys with 12-byte values.
    sort_onesweep_u64_v12,
    u64,
    3
);
onesweep_kernel!(
    /// One onesweep pass over `u64` keys with 16-byte values.
    sort_onesweep_u64_v16,
    u64,
    4
);
