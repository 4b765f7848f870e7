//! Multiway merge of presorted runs (issue 12): samples, splits, one shared-memory merge per
//! segment. The host (`detkit::pet::merge`) sorts the samples by running the same three
//! kernels on them (recursively, until one tile holds them) and describes the layout.

use super::*;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;
use crate::sort::onesweep::{block_sort_pass, BlockSortSmem, DigitFn, Key};
use crate::sort::{pass_bits, passes, RADIX};

/// Sample records: sample `j` of run `r` is single `j * step` of run `r`, written as
/// `{crystal: r, energy: f32::from_bits(j * step), time}`. The samples of a run are in the
/// run's order, runs back to back: the same kind of input (presorted runs) one level down.
///
/// # Safety
/// `blockDim.x == MW_SAMPLE_THREADS`, any grid; `starts` and `sstarts` hold `nruns + 1`
/// non-decreasing words with `sstarts[r + 1] - sstarts[r] = ceil((starts[r + 1] -
/// starts[r]) / step)`, `sstarts[nruns] == nsamples`; `input` valid for `starts[nruns]`
/// singles, `samples` for `nsamples`; `1 <= nruns <= MW_MAX_RUNS`, `step >= 1`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_multiway_sample(p: PetMwSampleParams) {
    let (input, samples, starts, sstarts) = (
        p.input.ptr() as *const u64,
        p.samples.ptr_mut() as *mut u64,
        p.starts.ptr(),
        p.sstarts.ptr(),
    );
    let stride = i::grid_dim_x() as u64 * MW_SAMPLE_THREADS as u64;
    let mut q = i::block_idx_x() as u64 * MW_SAMPLE_THREADS as u64 + i::thread_idx_x() as u64;
    while q < p.nsamples {
        // The run of sample q: the last r with sstarts[r] <= q (q < sstarts[nruns]).
        let (mut lo, mut hi) = (0u32, p.nruns);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            // SAFETY: mid < nruns.
            if unsafe { i::ldg_u32(sstarts.add(mid as usize)) } as u64 <= q {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        // SAFETY: lo < nruns.
        let (s0, r0) = unsafe {
            (
                i::ldg_u32(sstarts.add(lo as usize)),
                i::ldg_u32(starts.add(lo as usize)),
            )
        };
        let pos = (q as u32 - s0) * p.step;
        // SAFETY: pos < run length (ceil(len / step) samples), so r0 + pos < starts[nruns];
        // the time is the second word of the 16-byte single.
        let time = unsafe { i::ldg_u64(input.add(2 * (r0 + pos) as usize + 1)) };
        let w0 = lo as u64 | (pos as u64) << 32;
        // SAFETY: q < nsamples; 16-byte aligned records.
        unsafe { i::st_v2_u64(samples.add(2 * q as usize), [w0, time]) };
        q += stride;
    }
}

/// Split rows: block `k` of `nsplit + 2` writes row `k` (`nruns` words): row 0 zeros, row
/// `nsplit + 1` the run lengths, row `k` in between every run's [`mw_split`] at splitter
/// `k` (sorted sample `k * every`), found through the run's samples
/// ([`mw_split_sampled`]). Rows never decrease when the runs are sorted.
///
/// # Safety
/// `blockDim.x == MW_SPLIT_THREADS`, `gridDim.x == nsplit + 2`; `starts` `nruns + 1`
/// non-decreasing words, `input` valid for `starts[nruns]` singles; `sorted` for
/// `nsplit * every + 1` records of `pet_multiway_sample` (their run below `nruns`);
/// `rows` for `(nsplit + 2) * nruns` words; `1 <= nruns <= MW_MAX_RUNS`; when `nsplit >
/// 0`: `step >= 1`, `sstarts` `nruns + 1` words with `sstarts[r + 1] - sstarts[r] =
/// ceil(len_r / step)` and `samples` the level's sample records in run order (as
/// `pet_multiway_sample` wrote them).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_multiway_split(p: PetMwSplitParams) {
    let (input, starts, sorted, rows) = (
        p.input.ptr() as *const u64,
        p.starts.ptr(),
        p.sorted.ptr() as *const u64,
        p.rows.ptr_mut(),
    );
    let k = i::block_idx_x();
    let run = i::thread_idx_x();
    if run >= p.nruns {
        return;
    }
    // SAFETY: run + 1 <= nruns.
    let (a, b) = unsafe {
        (
            i::ldg_u32(starts.add(run as usize)),
            i::ldg_u32(starts.add(run as usize + 1)),
        )
    };
    let len = b - a;
    let v = if k == 0 {
        0
    } else if k > p.nsplit {
        len
    } else {
        // SAFETY: k * every < nsplit * every + 1 records.
        let w = unsafe { i::ldg_v2_u64(sorted.add(2 * (k * p.every) as usize)) };
        let (srun, pos) = (w[0] as u32, (w[0] >> 32) as u32);
        let key = time_key(f64::from_bits(w[1]));
        // SAFETY: run + 1 <= nruns.
        let s0 = unsafe { i::ldg_u32(p.sstarts.ptr().add(run as usize)) };
        let samples = p.samples.ptr() as *const u64;
        // SAFETY (closures): j < ceil(len / step), the run's samples; q < len, so
        // a + q < starts[nruns].
        mw_split_sampled(
            run,
            len,
            srun,
            pos,
            key,
            p.step,
            |j| f64::from_bits(unsafe { i::ldg_u64(samples.add(2 * (s0 + j) as usize + 1)) }),
            |q| f64::from_bits(unsafe { i::ldg_u64(input.add(2 * (a + q) as usize + 1)) }),
        )
    };
    // SAFETY: k <= nsplit + 1, run < nruns.
    unsafe { rows.add((k * p.nruns + run) as usize).write(v) };
}

/// A segment's sort key: `(key - min) >> shift` in a `u32` (spans of at most 32 bits) or a
/// `u64`.
trait SegKey: Key {
    fn of_u64(v: u64) -> Self;
}
impl SegKey for u32 {
    #[inline(always)]
    fn of_u64(v: u64) -> Self {
        v as u32
    }
}
impl SegKey for u64 {
    #[inline(always)]
    fn of_u64(v: u64) -> Self {
        v
    }
}

/// The radix path of a merge block: a stable LSD sort, in shared memory, of the segment's
/// `l` keys (loaded in run order in the first key array) as `(key - min) >> shift` over
/// their low `bits` bits, as the sort primitives' one-tile sort does it (`sort::single`):
/// per pass, per-warp digit counts, the block's digit starts, `match`-based stable ranking,
/// keys and local indices scattered to their sorted positions and reloaded. Items are
/// warp-striped (item `j` of lane `ln` of warp `w` at position `32 (w MW_VT + j) + ln`);
/// positions past `l` are padding that sorts last. Returns the local index at each item's
/// sorted position. The first key array is overwritten (keys, then `u32` local indices in
/// the index arrays); the counters and scan words lie at `hist` and `scan` bytes into the
/// second key array.
///
/// # Safety
/// All `NT` threads call it, after a barrier that follows the keys' writes; `mw_smem_bytes
/// (TILE)` of shared memory at `sb`; `l <= TILE = NT * MW_VT`; every key `>= min`, with
/// `(key - min) >> shift < 2^bits`, `bits <= 8 * K::BYTES`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn segment_radix<K: SegKey, const NT: u32, const TILE: u32>(
    sb: u32,
    hist: u32,
    scan: u32,
    l: u32,
    min: u64,
    shift: u32,
    bits: u32,
) -> [u32; MW_VT as usize] {
    const VT: usize = MW_VT as usize;
    let t = i::thread_idx_x();
    let (lane, warp) = (t & 31, t >> 5);
    let keys_sa = sb;
    let idx_sa = sb + 16 * TILE;
    let hist = sb + 8 * TILE + hist;
    let hist_w = hist + warp * RADIX * 4;
    // SAFETY: the scan words inside the second key array (caller contract).
    let scan = unsafe { i::dynamic_shared_ptr().add((8 * TILE + scan) as usize) } as *mut u32;
    let local0 = warp * 32 * MW_VT + lane;
    // Warps holding padding only keep to the barriers but neither count nor rank.
    let active = warp * 32 * MW_VT < l;
    let mut keys = [K::ZERO; VT];
    let mut idx = [0u32; VT];
    let mut j = 0;
    while j < VT {
        let q = local0 + 32 * j as u32;
        idx[j] = q;
        if q < l {
            // SAFETY: q < l: a key written before the caller's barrier.
            keys[j] = K::of_u64((unsafe { i::ld_shared_u64(keys_sa + 8 * q) } - min) >> shift);
        }
        j += 1;
    }
    let sm = BlockSortSmem {
        hist,
        hist_w,
        scan,
        warps: NT / 32,
        keys: keys_sa,
        values: idx_sa,
    };
    let np = passes(0, bits);
    let mut pass = 0;
    while pass < np {
        let (s, b) = pass_bits(0, bits, pass);
        // SAFETY: the layout above (keys and indices for TILE = NT * VT positions); all
        // threads call it with the same pass.
        unsafe {
            block_sort_pass(
                &mut keys,
                &mut idx,
                DigitFn::new(s, b, false),
                &sm,
                local0,
                l,
                active,
            )
        };
        pass += 1;
    }
    idx
}

/// The bucket path of a merge block ([`mw_bucket_plan`]): the segment's `l` keys (in run
/// order in the first key array, `x = (key - min) >> shift < 2^(s2 + bucket bits)`) are
/// counted into `NB = 8 NT` buckets (`x >> s2`, [`mw_bucket_item`]; the counters at `cnt`,
/// zeroed before the caller's barrier), each key taking a slot of its bucket by a shared
/// atomic (in no particular order), the counters scanned into bucket starts, and the slot
/// words `x << MW_BUCKET_IDX_BITS | q` scattered to their slots. Then the thread of sorted
/// slot `p` counts the slot words of `p`'s bucket smaller than its own (their low 32 bits
/// when `LOW32`: `s2 + MW_BUCKET_IDX_BITS <= 32`, the bucket fixing the rest): the bucket's
/// start plus that count is the key's position in the order (key, run, position),
/// whatever the slots' order. It gathers the single through the stored global index and
/// stores it at the segment's offset `out0` plus that position. Returns `false`, having
/// written nothing, when a bucket holds more than `bucket_max` keys (the same in every
/// thread): the first key array, the global indices and the radix path's shared memory are
/// then as the caller left them, apart from the counters and scan words.
///
/// # Safety
/// All `NT` threads call it, after a barrier that follows the keys' and global indices'
/// writes and the counters' zeroing; `mw_smem_bytes(TILE)` of shared memory at `sb`; `cnt`
/// (the radix path's counters) `8 NT` words, `scan` 33 words of shared memory, `global_sa`
/// `l` words (global index of each local index); `l <= TILE = NT * MW_VT`; every key `>=
/// min` with `(key - min) >> shift < 2^(s2 + mw_bucket_bits(NT))` and `< 2^50`; `LOW32`
/// only if `s2 + MW_BUCKET_IDX_BITS <= 32`; `input` valid at every global index, `output`
/// for `out0 + l` singles.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn segment_bucket<const NT: u32, const TILE: u32, const LOW32: bool>(
    sb: u32,
    cnt: u32,
    scan: *mut u32,
    global_sa: u32,
    l: u32,
    min: u64,
    shift: u32,
    s2: u32,
    bucket_max: u32,
    input: *const u64,
    output: *mut u64,
    out0: u32,
) -> bool {
    const VT: usize = MW_VT as usize;
    let t = i::thread_idx_x();
    let keys_sa = sb;
    let sh = s2 + MW_BUCKET_IDX_BITS;
    // 1. Slot word and slot in the bucket of each item (q = t + j NT).
    let (mut w, mut off) = ([0u64; VT], [0u32; VT]);
    let mut j = 0;
    while j < VT {
        let q = t + j as u32 * NT;
        if q < l {
            // SAFETY: q < l: a key written before the caller's barrier.
            let x = (unsafe { i::ld_shared_u64(keys_sa + 8 * q) } - min) >> shift;
            let (d, v) = mw_bucket_item(x, s2, q);
            w[j] = v;
            // SAFETY: d < 8 NT: one of the counters.
            off[j] = unsafe { i::atom_shared_add_u32(cnt + 4 * d, 1) };
        }
        j += 1;
    }
    // Every count before the scan.
    i::sync_threads();
    // 2. Bucket starts: thread t scans the counters 8 t .. 8 t + 8 (in place).
    // (The counts are read twice rather than kept: registers are short here.)
    let nb = 8 * NT;
    let mut sum = 0u32;
    let mut over = false;
    let mut b = 0;
    while b < 8 {
        // SAFETY: 8 t + b < 8 NT.
        let c = unsafe { i::ld_shared_u32(cnt + 4 * (8 * t + b)) };
        sum += c;
        over |= c > bucket_max;
        b += 1;
    }
    // SAFETY: the scan words are ours (caller contract).
    let bs = unsafe { BlockScan::<u32>::new(scan) };
    let (mut run, _) = bs.exclusive_sum(sum);
    let mut b = 0;
    while b < 8 {
        // SAFETY: as above; only this thread reads or writes these counters.
        unsafe {
            let a = cnt + 4 * (8 * t + b);
            let c = i::ld_shared_u32(a);
            i::st_shared_u32(a, run);
            run += c;
        }
        b += 1;
    }
    // The starts before the scatter; the same verdict in every thread.
    if i::sync_threads_or(over) {
        return false;
    }
    // 3. Scatter the slot words to their slots, over the first key array (every key was
    //    read before the count barrier).
    let mut j = 0;
    while j < VT {
        if t + j as u32 * NT < l {
            // SAFETY: start of bucket w >> sh plus a slot below its count: a slot below l.
            unsafe {
                let slot = i::ld_shared_u32(cnt + 4 * (w[j] >> sh) as u32) + off[j];
                i::st_shared_u64(keys_sa + 8 * slot, w[j]);
            }
        }
        j += 1;
    }
    i::sync_threads();
    // 4. Rank slot p = t + j NT in its bucket, the global index of its local index.
    let (mut rank, mut g) = ([0u32; VT], [0u32; VT]);
    let mut j = 0;
    while j < VT {
        let p = t + j as u32 * NT;
        if p < l {
            // SAFETY: p < l, written in step 3; its bucket's start and end (the next
            // bucket's start, or l) are counters below nb; the bucket's slots below l.
            unsafe {
                let me = i::ld_shared_u64(keys_sa + 8 * p);
                let bk = (me >> sh) as u32;
                // Slot word x is below mine.
                let below = |x: u32| {
                    if LOW32 {
                        i::ld_shared_u32(keys_sa + 8 * x) < me as u32
                    } else {
                        i::ld_shared_u64(keys_sa + 8 * x) < me
                    }
                };
                let start = i::ld_shared_u32(cnt + 4 * bk);
                let end = if bk + 1 < nb {
                    i::ld_shared_u32(cnt + 4 * bk + 4)
                } else {
                    l
                };
                // The first 4 keys of the bucket without a loop (most buckets hold fewer),
                // then a loop over the rest.
                let len = end - start;
                let mut less = 0u32;
                let mut x = 0u32;
                while x < 4 {
                    if x < len {
                        less += below(start + x) as u32;
                    }
                    x += 1;
                }
                let mut x = start + 4;
                while x < end {
                    less += below(x) as u32;
                    x += 1;
                }
                rank[j] = start + less;
                let q = me as u32 & ((1 << MW_BUCKET_IDX_BITS) - 1);
                g[j] = i::ld_shared_u32(global_sa + 4 * q);
            }
        }
        j += 1;
    }
    // 5. Gather and store (all loads, then all stores).
    let mut v = [[0u64; 2]; VT];
    let mut j = 0;
    while j < VT {
        if t + j as u32 * NT < l {
            // SAFETY: a global index inside the run (caller contract).
            v[j] = unsafe { i::ldg_v2_u64(input.add(2 * g[j] as usize)) };
        }
        j += 1;
    }
    let mut j = 0;
    while j < VT {
        if t + j as u32 * NT < l {
            // SAFETY: rank < l: inside the segment's output range.
            unsafe { i::st_v2_u64(output.add(2 * (out0 + rank[j]) as usize), v[j]) };
        }
        j += 1;
    }
    true
}

/// Merge of segment `k` = block `k`: run `r`'s slice `rows[k][r] .. rows[k + 1][r]` of every
/// run, `TILE` singles at most. The keys ([`time_key`]), local indices and global indices
/// of the slices are loaded in run order into shared memory, and the keys' min, max, AND
/// and OR reduced over the block (every warp finishes the reduction itself: no second
/// barrier). Then, as [`mw_radix_plan`] says (the same for the whole block):
/// - radix, buckets: when [`mw_bucket_plan`] allows it, [`segment_bucket`] puts the keys in
///   buckets by the top bits of their span and ranks each inside its bucket by counting
///   (no bucket larger than the bound; otherwise the radix passes below);
/// - radix: [`segment_radix`] sorts `(key - min) >> shift` stably, and each thread gathers
///   the singles of its warp-striped sorted positions through their global indices;
/// - merge rounds: neighbouring groups merge pairwise (the groups start as the slices, with
///   their variable lengths; empty ones included): each thread takes `MW_VT` consecutive
///   outputs, finds its pair of groups and its merge-path split there (ties to the left
///   group: earlier run first, the stable order), and merges serially into the other
///   buffer; finally the singles are gathered by local index.
///
/// Both store into `output[sum(rows[k]) ..]` (16-byte loads and stores).
///
/// # Safety
/// `blockDim.x == NT`, `TILE == NT * MW_VT`, `mw_smem_bytes(TILE)` of shared memory;
/// `starts` `nruns + 1` non-decreasing words, `input` valid for `starts[nruns]` singles and
/// `output` for as many, not overlapping; `rows` `gridDim.x + 1` rows of `nruns` words, each
/// word of row `k` at most the run's length; `status` three words; `1 <= nruns <=
/// MW_MAX_RUNS`.
#[inline(always)]
unsafe fn multiway_merge<const NT: u32, const TILE: u32>(p: PetMwMergeParams) {
    let (input, output, starts, rows, nruns) = (
        p.input.ptr() as *const u64,
        p.output.ptr_mut() as *mut u64,
        p.starts.ptr(),
        p.rows.ptr(),
        p.nruns,
    );
    let smem = i::dynamic_shared_ptr();
    let tile = TILE as usize;
    let nr = MW_MAX_RUNS as usize + 1;
    // SAFETY: the layout of `mw_smem_bytes(TILE)` (8-byte arrays first, then 2-byte, then
    // 4-byte ones: every array aligned).
    let (keys0, keys1, idx0, idx1, pre, base, bnd0, bnd1, misc, red) = unsafe {
        let keys0 = smem as *mut u64;
        let keys1 = keys0.add(tile);
        let idx0 = keys1.add(tile) as *mut u16;
        let idx1 = idx0.add(tile);
        let pre = idx1.add(tile) as *mut u32;
        let base = pre.add(nr);
        let bnd0 = base.add(nr);
        let bnd1 = bnd0.add(nr);
        let misc = bnd1.add(nr);
        // 8-byte aligned: it starts 20 tile + 4 (4 nr + 16) bytes in, a multiple of 8.
        let red = misc.add(16) as *mut u64;
        (keys0, keys1, idx0, idx1, pre, base, bnd0, bnd1, misc, red)
    };
    // The radix path's arrays in the second key array (`mw_radix_layout`).
    let (r_hist, r_scan, r_global, _) = mw_radix_layout(NT, TILE);
    let sb = i::shared_base();
    let global_sa = sb + 8 * TILE + r_global;
    let t = i::thread_idx_x();
    let k = i::block_idx_x() as usize;
    let (lane, warp) = (t & 31, t >> 5);
    // 1. Slice lengths, their exclusive prefix (local starts), the output offset.
    let mut len = 0u32;
    let mut lo = 0u32;
    let mut bad = false;
    if t < nruns {
        // SAFETY: rows k and k + 1 exist (gridDim.x + 1 rows); t < nruns.
        let (l, h, s) = unsafe {
            (
                rows.add(k * nruns as usize + t as usize).read(),
                rows.add((k + 1) * nruns as usize + t as usize).read(),
                starts.add(t as usize).read(),
            )
        };
        lo = l;
        if h >= l {
            len = h - l;
        } else {
            bad = true;
        }
        // SAFETY: t < MW_MAX_RUNS.
        unsafe { base.add(t as usize).write(s + l) };
    }
    let mut inc = len;
    let mut d = 1;
    while d < 32 {
        let v = i::shfl_up(inc, d);
        if lane >= d {
            inc = inc.wrapping_add(v);
        }
        d *= 2;
    }
    let sum = i::warp_sum_u32(lo);
    // Runs live in the first MW_MAX_RUNS / 32 = 8 warps.
    if lane == 31 && warp < 8 {
        // SAFETY: misc holds 16 words.
        unsafe {
            misc.add(warp as usize).write(inc);
            misc.add(8 + warp as usize).write(sum);
        }
    }
    let bad = i::sync_threads_or(bad);
    let (mut total, mut out0, mut before) = (0u32, 0u32, 0u32);
    let mut w = 0;
    while w < 8 {
        // SAFETY: 16 words written before the barrier.
        let (c, s) = unsafe { (misc.add(w).read(), misc.add(8 + w).read()) };
        if (w as u32) < warp {
            before = before.wrapping_add(c);
        }
        total = total.wrapping_add(c);
        out0 = out0.wrapping_add(s);
        w += 1;
    }
    if bad || total > TILE {
        if t == 0 {
            // SAFETY: one word.
            unsafe { p.status.ptr_mut().write(1) };
        }
        return;
    }
    let l = total;
    if t <= nruns {
        let excl = if t < nruns { before + inc - len } else { l };
        // SAFETY: t <= MW_MAX_RUNS.
        unsafe {
            pre.add(t as usize).write(excl);
            bnd0.add(t as usize).write(excl);
        }
    }
    i::sync_threads();
    // The slice of local index q: the last s < nruns with pre[s] <= q (q < l = pre[nruns]);
    // binary lifting with a fixed number of steps, so the item loops below unroll.
    let slice_of = |q: u32| {
        let mut a = 0u32;
        let mut step = MW_MAX_RUNS / 2;
        while step > 0 {
            let c = a + step;
            // SAFETY: c < nruns <= MW_MAX_RUNS.
            if c < nruns && unsafe { pre.add(c as usize).read() } <= q {
                a = c;
            }
            step /= 2;
        }
        a
    };
    // The slice of every local index, as bytes in the second index array (unused until the
    // merge rounds): thread t searches the slice of q = MW_VT t once and walks on over its
    // MW_VT consecutive indices (past empty slices), instead of a search per item below.
    let sof_sa = sb + 18 * TILE;
    let q0 = t * MW_VT;
    if q0 < l {
        let mut s = slice_of(q0);
        let mut j = 0;
        while j < MW_VT {
            let q = q0 + j;
            if q < l {
                // SAFETY: s + 1 < nruns: a slice start written before the barrier above.
                while s + 1 < nruns && unsafe { pre.add(s as usize + 1).read() } <= q {
                    s += 1;
                }
                // SAFETY: q < l <= TILE: a byte of the second index array.
                unsafe { i::st_shared_u8(sof_sa + q, s) };
            }
            j += 1;
        }
    }
    // The table before the loads.
    i::sync_threads();
    // 2. Load the keys: item j of thread t is q = t + j NT; all addresses first, then all
    //    loads, then all stores (one memory latency per thread instead of MW_VT). The
    //    global index of every local one is kept for the radix path, and the keys' range
    //    (min, max, AND, OR) reduced per warp.
    let (mut kmin, mut kmax, mut kand, mut kor) = (u64::MAX, 0u64, u64::MAX, 0u64);
    {
        let mut g = [0u32; MW_VT as usize];
        let mut j = 0;
        while j < MW_VT as usize {
            let q = t + j as u32 * NT;
            if q < l {
                // SAFETY: q < l: written above; s < nruns.
                g[j] = unsafe {
                    let s = i::ld_shared_u8(sof_sa + q) as usize;
                    base.add(s).read() + (q - pre.add(s).read())
                };
            }
            j += 1;
        }
        let mut key = [0u64; MW_VT as usize];
        let mut j = 0;
        while j < MW_VT as usize {
            if t + j as u32 * NT < l {
                // SAFETY: the slice's global start plus the local offset is inside the run
                // (rows at most the run's length), so inside `input`.
                key[j] = time_key(f64::from_bits(unsafe {
                    i::ldg_u64(input.add(2 * g[j] as usize + 1))
                }));
            }
            j += 1;
        }
        let mut j = 0;
        while j < MW_VT as usize {
            let q = t + j as u32 * NT;
            if q < l {
                // SAFETY: q < l <= TILE; the global indices end inside the second key
                // array (`mw_radix_layout`).
                unsafe {
                    keys0.add(q as usize).write(key[j]);
                    idx0.add(q as usize).write(q as u16);
                    i::st_shared_u32(global_sa + 4 * q, g[j]);
                }
                let x = key[j];
                kmin = if x < kmin { x } else { kmin };
                kmax = if x > kmax { x } else { kmax };
                kand &= x;
                kor |= x;
            }
            j += 1;
        }
    }
    let reduce = |a: &mut u64, b: &mut u64, c: &mut u64, e: &mut u64| {
        let mut d = 16;
        while d > 0 {
            let (x0, x1, x2, x3) = (
                i::shfl_xor_u64(*a, d),
                i::shfl_xor_u64(*b, d),
                i::shfl_xor_u64(*c, d),
                i::shfl_xor_u64(*e, d),
            );
            *a = if x0 < *a { x0 } else { *a };
            *b = if x1 > *b { x1 } else { *b };
            *c &= x2;
            *e |= x3;
            d /= 2;
        }
    };
    reduce(&mut kmin, &mut kmax, &mut kand, &mut kor);
    // The bucket path's counters, zeroed before the barrier below.
    let mut z = t;
    while z < 8 * NT {
        // SAFETY: counter z < 8 NT: the radix path's counters.
        unsafe { i::st_shared_u32(sb + 8 * TILE + r_hist + 4 * z, 0) };
        z += NT;
    }
    if lane == 0 {
        // SAFETY: warp < 32: inside the 4 * 32 words of `red`.
        unsafe {
            let r = red.add(4 * warp as usize);
            r.write(kmin);
            r.add(1).write(kmax);
            r.add(2).write(kand);
            r.add(3).write(kor);
        }
    }
    i::sync_threads();
    // Every warp reduces the warps' four values itself (no further barrier).
    if lane < NT / 32 {
        // SAFETY: lane < NT / 32 <= 32 warps, written before the barrier.
        unsafe {
            let r = red.add(4 * lane as usize);
            (kmin, kmax, kand, kor) = (r.read(), r.add(1).read(), r.add(2).read(), r.add(3).read());
        }
    } else {
        (kmin, kmax, kand, kor) = (u64::MAX, 0, u64::MAX, 0);
    }
    reduce(&mut kmin, &mut kmax, &mut kand, &mut kor);
    if let Some((shift, bits)) = mw_radix_plan(kmin, kmax, kand, kor, nruns, p.radix_bits) {
        if t == 0 {
            // SAFETY: the status holds three words.
            unsafe { i::atomic_add_u32(p.status.ptr_mut().add(1), 1) };
        }
        if let Some(s2) = mw_bucket_plan(bits, p.bucket_max, mw_bucket_bits(NT)) {
            let cnt = sb + 8 * TILE + r_hist;
            // SAFETY: the radix path's scan words.
            let scan = unsafe { i::dynamic_shared_ptr().add((8 * TILE + r_scan) as usize) };
            // SAFETY: keys, global indices and zeroed counters written before the barrier
            // above; x < 2^bits <= 2^(s2 + bucket bits) and bits <= 50 (the plan); LOW32
            // when s2 + MW_BUCKET_IDX_BITS <= 32.
            let done = unsafe {
                if s2 + MW_BUCKET_IDX_BITS <= 32 {
                    segment_bucket::<NT, TILE, true>(
                        sb,
                        cnt,
                        scan as *mut u32,
                        global_sa,
                        l,
                        kmin,
                        shift,
                        s2,
                        p.bucket_max,
                        input,
                        output,
                        out0,
                    )
                } else {
                    segment_bucket::<NT, TILE, false>(
                        sb,
                        cnt,
                        scan as *mut u32,
                        global_sa,
                        l,
                        kmin,
                        shift,
                        s2,
                        p.bucket_max,
                        input,
                        output,
                        out0,
                    )
                }
            };
            if done {
                if t == 0 {
                    // SAFETY: the status holds three words.
                    unsafe { i::atomic_add_u32(p.status.ptr_mut().add(2), 1) };
                }
                return;
            }
        }
        // SAFETY: the layout above; keys written before the barrier above (and the bucket
        // path, when it gave up, left them there after a barrier).
        let idx = unsafe {
            if bits <= 32 {
                segment_radix::<u32, NT, TILE>(sb, r_hist, r_scan, l, kmin, shift, bits)
            } else {
                segment_radix::<u64, NT, TILE>(sb, r_hist, r_scan, l, kmin, shift, bits)
            }
        };
        // Gather the singles in sorted order (sorted position local0 + 32 j holds local
        // index idx[j]) and store them, warp-striped: each store of a warp covers 32
        // consecutive singles.
        let local0 = warp * 32 * MW_VT + lane;
        let mut g = [0u32; MW_VT as usize];
        let mut j = 0;
        while j < MW_VT as usize {
            if local0 + 32 * (j as u32) < l {
                // SAFETY: idx[j] < l: a local index written in step 2.
                g[j] = unsafe { i::ld_shared_u32(global_sa + 4 * idx[j]) };
            }
            j += 1;
        }
        let mut v = [[0u64; 2]; MW_VT as usize];
        let mut j = 0;
        while j < MW_VT as usize {
            if local0 + 32 * (j as u32) < l {
                // SAFETY: global index inside the run (as in the load).
                v[j] = unsafe { i::ldg_v2_u64(input.add(2 * g[j] as usize)) };
            }
            j += 1;
        }
        let mut j = 0;
        while j < MW_VT as usize {
            let q = local0 + 32 * j as u32;
            if q < l {
                // SAFETY: as in the merge path's store.
                unsafe { i::st_v2_u64(output.add(2 * (out0 + q) as usize), v[j]) };
            }
            j += 1;
        }
        return;
    }
    // 3. Rounds: groups (2g, 2g + 1) merge into group g.
    let (mut ks, mut kd, mut is, mut id, mut bs, mut bd) = (keys0, keys1, idx0, idx1, bnd0, bnd1);
    let mut groups = nruns;
    while groups > 1 {
        let pairs = groups.div_ceil(2);
        // SAFETY (closure): j <= groups <= nruns.
        let bnd = |j: u32| unsafe { bs.add(if j < groups { j } else { groups } as usize).read() };
        // SAFETY (closure): x < l (callers).
        let key = |x: u32| unsafe { ks.add(x as usize).read() };
        let mut o = t * MW_VT;
        if o < l {
            // The last pair starting at or before o (it ends after o), by binary lifting.
            let mut pr = 0u32;
            let mut step = MW_MAX_RUNS / 4;
            while step > 0 {
                let c = pr + step;
                if c < pairs && bnd(2 * c) <= o {
                    pr = c;
                }
                step /= 2;
            }
            let mut a0 = bnd(2 * pr);
            let mut b0 = bnd(2 * pr + 1);
            let mut b1 = bnd(2 * pr + 2);
            let ia = merge_path(
                (o - a0) as u64,
                (b0 - a0) as u64,
                (b1 - b0) as u64,
                |x| key(a0 + x as u32),
                |x| key(b0 + x as u32),
            ) as u32;
            let mut ai = a0 + ia;
            let mut bi = b0 + (o - a0 - ia);
            // The heads of both groups, kept in registers.
            let mut ka = if ai < b0 { key(ai) } else { 0 };
            let mut kb = if bi < b1 { key(bi) } else { 0 };
            let end = if o + MW_VT < l { o + MW_VT } else { l };
            while o < end {
                if o >= b1 {
                    while o >= b1 {
                        pr += 1;
                        a0 = b1;
                        b0 = bnd(2 * pr + 1);
                        b1 = bnd(2 * pr + 2);
                    }
                    ai = a0;
                    bi = b0;
                    ka = if ai < b0 { key(ai) } else { 0 };
                    kb = if bi < b1 { key(bi) } else { 0 };
                }
                let take_a = ai < b0 && (bi >= b1 || ka <= kb);
                // SAFETY: ai < b0 or bi < b1 (o < b1); indices below l.
                unsafe {
                    if take_a {
                        kd.add(o as usize).write(ka);
                        id.add(o as usize).write(is.add(ai as usize).read());
                        ai += 1;
                        if ai < b0 {
                            ka = key(ai);
                        }
                    } else {
                        kd.add(o as usize).write(kb);
                        id.add(o as usize).write(is.add(bi as usize).read());
                        bi += 1;
                        if bi < b1 {
                            kb = key(bi);
                        }
                    }
                }
                o += 1;
            }
        }
        if t <= pairs {
            // SAFETY: t <= pairs <= MW_MAX_RUNS.
            unsafe { bd.add(t as usize).write(bnd(2 * t)) };
        }
        i::sync_threads();
        core::mem::swap(&mut ks, &mut kd);
        core::mem::swap(&mut is, &mut id);
        core::mem::swap(&mut bs, &mut bd);
        groups = pairs;
    }
    // 4. Gather the singles in merged order and store them (addresses first, then the
    //    loads, then the stores).
    let mut g = [0u32; MW_VT as usize];
    let mut j = 0;
    while j < MW_VT as usize {
        let q = t + j as u32 * NT;
        if q < l {
            // SAFETY: q < l; the local index is below l; s < nruns.
            unsafe {
                let li = is.add(q as usize).read() as u32;
                let s = slice_of(li);
                g[j] = base.add(s as usize).read() + (li - pre.add(s as usize).read());
            }
        }
        j += 1;
    }
    let mut v = [[0u64; 2]; MW_VT as usize];
    let mut j = 0;
    while j < MW_VT as usize {
        if t + j as u32 * NT < l {
            // SAFETY: global index inside the run (as in the load).
            v[j] = unsafe { i::ldg_v2_u64(input.add(2 * g[j] as usize)) };
        }
        j += 1;
    }
    let mut j = 0;
    while j < MW_VT as usize {
        let q = t + j as u32 * NT;
        if q < l {
            // SAFETY: the output offset plus q is below the sum of row k + 1, at most
            // starts[nruns].
            unsafe { i::st_v2_u64(output.add(2 * (out0 + q) as usize), v[j]) };
        }
        j += 1;
    }
}

/// [`multiway_merge`] with `MW_THREADS` threads (tile `MW_TILE`).
///
/// # Safety
/// As `multiway_merge` with `NT = MW_THREADS`, `TILE = MW_TILE`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_multiway_merge(p: PetMwMergeParams) {
    // SAFETY: the caller's contract.
    unsafe { multiway_merge::<MW_THREADS, MW_TILE>(p) }
}

/// [`multiway_merge`] with `MW_WIDE_THREADS` threads (tile `MW_WIDE_TILE`).
///
/// # Safety
/// As `multiway_merge` with `NT = MW_WIDE_THREADS`, `TILE = MW_WIDE_TILE`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_multiway_merge_wide(p: PetMwMergeParams) {
    // SAFETY: the caller's contract.
    unsafe { multiway_merge::<MW_WIDE_THREADS, MW_WIDE_TILE>(p) }
}

/// Natural run starts: every `i` in `1..n` with `!(t[i] >= t[i - 1])` (a descent, or a NaN)
/// counts in `out[0]` and, among the first `cap`, is written to `out[1 + c]`. Grid-stride.
///
/// # Safety
/// `blockDim.x == MW_SAMPLE_THREADS`; `singles` valid for `n`; `out` for `1 + cap` words,
/// `out[0] == 0` on entry.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_detect_runs(p: PetDetectRunsParams) {
    let (s, out, n) = (p.singles.ptr() as *const u64, p.out.ptr_mut(), p.n);
    let stride = i::grid_dim_x() as u64 * MW_SAMPLE_THREADS as u64;
    let mut j = i::block_idx_x() as u64 * MW_SAMPLE_THREADS as u64 + i::thread_idx_x() as u64 + 1;
    while j < n {
        // SAFETY: 1 <= j < n.
        let (a, b) = unsafe {
            (
                f64::from_bits(i::ldg_u64(s.add(2 * j as usize - 1))),
                f64::from_bits(i::ldg_u64(s.add(2 * j as usize + 1))),
            )
        };
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        if !(b >= a) {
            // SAFETY: one counter word; c < cap keeps the write inside the 1 + cap words.
            unsafe {
                let c = i::atomic_add_u32(out, 1);
                if c < p.cap {
                    out.add(1 + c as usize).write(j as u32);
                }
            }
        }
        j += stride;
    }
}
