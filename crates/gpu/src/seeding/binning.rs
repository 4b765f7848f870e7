//! Binning: grid keys of the spacepoints of a batch and the gather into bins.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;

#[inline(always)]
pub(crate) fn index() -> u64 {
    i::global_thread_idx()
}

/// First item of a grid-stride loop and its stride (one thread per item).
#[inline(always)]
pub(crate) fn stride() -> u64 {
    i::grid_threads()
}

/// Number of valid spacepoints of the batch: `grid[n_events * nkeys]`.
///
/// # Safety
/// `grid` holds `n_events * nkeys + 2` offsets.
#[inline(always)]
pub(crate) unsafe fn n_valid(c: &SeedingConfig, grid: *const u32, n_events: u32) -> u64 {
    // SAFETY: caller's contract.
    unsafe { grid.add(n_events as usize * c.nkeys() as usize).read() as u64 }
}

/// Grid key of every spacepoint of a batch: `e * nkeys + grid_key` for a valid spacepoint of
/// event `e`, `n_events * nkeys` (the one extra key, after every event) when it is not valid.
///
/// # Safety
/// `cfg` one config; `sps` valid for `n`; `ev_off` for `n_events + 1` non-decreasing
/// offsets ending at `n`, `n_events >= 1`; `keys` for `n`; `(n_events + 1) * nkeys < 2^32`.
/// `SEEDING_THREADS` threads, `ceil(n / SEEDING_THREADS)` blocks.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_bin_spacepoints(p: SeedingBinSpacepointsParams) {
    let (cfg, sps, ev_off, n, keys, n_events) = (
        p.cfg.ptr(),
        p.sps.ptr(),
        p.ev_off.ptr(),
        p.n,
        p.keys.ptr_mut(),
        p.n_events,
    );
    let g = index();
    if g >= n {
        return;
    }
    // SAFETY: launch contract: g < n.
    unsafe {
        let c = &*cfg;
        let sp = &*sps.add(g as usize);
        let local = grid_key(c, sp.x, sp.y, sp.z);
        let key = if local < c.nkeys() {
            event_of(ev_off, n_events, g as u32) * c.nkeys() + local
        } else {
            n_events * c.nkeys()
        };
        keys.add(g as usize).write(key);
    }
}

/// Counting binning, first launch: each spacepoint's batch grid key (as
/// [`seeding_bin_spacepoints`]) into `keys`, its count per key (`counts`, one global atomic
/// per group of lanes of a warp with the same key: `match.any`), and its slot in the key
/// (the atomic's old value plus its rank among those lanes; the order of the warps' atomics
/// is arbitrary, so the slots are a permutation of `0..count` in no set order).
///
/// It also zeroes the chain's `summary_words` summary words (grid-stride).
///
/// With `scan_keys != 0` the last block to finish (a ticket: every thread fences its atomics,
/// a barrier, then thread 0 takes the ticket) writes the exclusive scan of the `scan_keys`
/// counts into `grid` and returns the ticket to zero. Barriers: one after the atomics (all of
/// the block's atomics precede the ticket), one to share the last-block flag, two inside the
/// block scan.
///
/// # Safety
/// As [`seeding_bin_spacepoints`]; `slot` for `n`; `counts` for `n_events * nkeys + 2`
/// words, zero; `ticket` one word, zero; with `scan_keys != 0`: `scan_keys == n_events * nkeys
/// + 2 <= BIN_SCAN_TILE`, `grid` for `scan_keys` words, 16-byte aligned; `summary` for
/// `summary_words`. `BIN_COUNT_THREADS`
/// threads, `ceil(n / BIN_COUNT_THREADS)` blocks, `bin_count_smem_bytes()` of shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_bin_count(p: SeedingBinCountParams) {
    let g = index();
    let active = g < p.n;
    // The chain's totals and per-event counts start at zero (no memset launch).
    let mut w = g;
    while w < p.summary_words as u64 {
        // SAFETY: w < summary_words.
        unsafe { p.summary.ptr_mut().add(w as usize).write(0) };
        w += stride();
    }
    let c = &p.cfg;
    let key = if active {
        // SAFETY: g < n.
        unsafe {
            let sp = &*p.sps.ptr().add(g as usize);
            let local = grid_key(c, sp.x, sp.y, sp.z);
            let key = if local < c.nkeys() {
                event_of(p.ev_off.ptr(), p.n_events, g as u32) * c.nkeys() + local
            } else {
                p.n_events * c.nkeys()
            };
            p.keys.ptr_mut().add(g as usize).write(key);
            key
        }
    } else {
        u32::MAX
    };
    // Every lane takes part (inactive ones with a key no spacepoint has).
    let peers = i::match_any(key);
    let leader = i::lowest_bit(peers);
    let mut base = 0u32;
    if active && i::lane_id() == leader {
        // SAFETY: key < n_events * nkeys + 1 <= counts' length.
        base = unsafe { i::atomic_add_u32(p.counts.ptr_mut().add(key as usize), i::popc(peers)) };
    }
    let base = i::shfl_idx(base, leader);
    if active {
        // SAFETY: g < n.
        unsafe {
            p.slot
                .ptr_mut()
                .add(g as usize)
                .write(base + i::popc(peers & i::lanemask_lt()))
        };
    }
    if p.scan_keys == 0 {
        return;
    }
    // The last block to finish scans the counts (threadFenceReduction's pattern).
    let smem = i::dynamic_shared_ptr() as *mut u32;
    i::threadfence();
    i::sync_threads();
    if i::thread_idx_x() == 0 {
        // SAFETY: one ticket word; smem word 33 is this block's flag.
        unsafe {
            let t = i::atomic_add_u32(p.ticket.ptr_mut(), 1);
            let last = t == i::grid_dim_x() - 1;
            if last {
                // Every block has taken its ticket: back to zero for the next call.
                p.ticket.ptr_mut().write(0);
            }
            smem.add(33).write(last as u32);
        }
    }
    i::sync_threads();
    // SAFETY: written before the barrier.
    if unsafe { smem.add(33).read() } == 0 {
        return;
    }
    i::threadfence();
    // SAFETY: the block scan's storage is words 0..33 of the dynamic shared memory.
    let bs = unsafe { BlockScan::<u32>::new(smem) };
    let first = i::thread_idx_x() * BIN_SCAN_ITEMS;
    let nk = p.scan_keys;
    let mut v = [0u32; BIN_SCAN_ITEMS as usize];
    let mut sum = 0u32;
    let mut j = 0;
    while j < BIN_SCAN_ITEMS {
        if first + j < nk {
            // SAFETY: first + j < scan_keys = the counts' length; relaxed device-scope loads
            // see every block's atomics (fenced before their tickets, the ticket fenced here).
            v[j as usize] =
                unsafe { i::load_relaxed_u32(p.counts.ptr().add((first + j) as usize)) };
        }
        sum += v[j as usize];
        j += 1;
    }
    let (mut run, _) = bs.exclusive_sum(sum);
    let out = p.grid.ptr_mut();
    if first + BIN_SCAN_ITEMS <= nk {
        let mut q = 0;
        while q < BIN_SCAN_ITEMS {
            let mut w = [0u32; 4];
            let mut l = 0;
            while l < 4 {
                w[l] = run;
                run += v[(q as usize) + l];
                l += 1;
            }
            // SAFETY: first + q + 4 <= scan_keys; first is a multiple of 16 words and grid
            // 16-byte aligned.
            unsafe { i::st_v4_u32(out.add((first + q) as usize), w) };
            q += 4;
        }
    } else {
        let mut q = 0;
        while q < BIN_SCAN_ITEMS {
            if first + q < nk {
                // SAFETY: first + q < scan_keys.
                unsafe { out.add((first + q) as usize).write(run) };
            }
            run += v[q as usize];
            q += 1;
        }
    }
}

/// Counting binning, second launch: `content[grid[keys[g]] + slot[g]] = g` for every
/// spacepoint (grouped by key, any order inside a key), and `counts[k] = 0` for
/// `k < n_counts` (zero again for the next call).
///
/// # Safety
/// `keys`, `slot` from [`seeding_bin_count`] on `n` spacepoints, `grid` their offsets;
/// `content` for `n`; `counts` for `n_counts`. `max(n, n_counts)` threads.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_bin_place(p: SeedingBinPlaceParams) {
    let g = index();
    if g < p.n {
        // SAFETY: g < n; the position is inside the key's range (slot < count).
        unsafe {
            let key = p.keys.ptr().add(g as usize).read();
            let at = p.grid.ptr().add(key as usize).read() + p.slot.ptr().add(g as usize).read();
            p.content.ptr_mut().add(at as usize).write(g as u32);
        }
    }
    if g < p.n_counts {
        // SAFETY: g < n_counts.
        unsafe { p.counts.ptr_mut().add(g as usize).write(0) };
    }
}

/// `binned[p] = binned(sps[i], i - ev_off[e], keys[i] / n_r)` for the valid spacepoints in
/// key order, ascending input index inside a key (`p < grid[n_events * nkeys]`); the record's
/// `bin` is the batch bin `e * nbins + bin` and its `index` the input index inside event `e`.
///
/// With `rank == 0`, `content` is the stable bucket (the radix-sort binning) and `i =
/// content[p]`. With `rank != 0`, `content` is grouped by key in any order inside a key
/// ([`seeding_bin_place`]): the thread of `i = content[p]` counts the indices of its key's
/// range `lo..hi` below `i` and writes the record at `lo +` that rank (each position once). A
/// key of more than [`BIN_RANK_MAX`] spacepoints is not ranked (its records stay in
/// `content`'s order) and sets `totals.unranked`: the host repeats the chain.
///
/// # Safety
/// `content` valid for `n` indices `< n` grouped by `keys` (`n` keys) as above, `grid` their
/// offsets (`n_events * nkeys + 2`); `ev_off` as for the binning; `binned` and `rz` for
/// `n`; `totals` one record. One thread per spacepoint.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_gather_spacepoints(p: SeedingGatherSpacepointsParams) {
    let (sps, ev_off, keys, content, grid, n, out, rz, n_events) = (
        p.sps.ptr(),
        p.ev_off.ptr(),
        p.keys.ptr(),
        p.content.ptr(),
        p.grid.ptr(),
        p.n,
        p.out.ptr_mut(),
        p.rz.ptr_mut(),
        p.n_events,
    );
    let q = index();
    if q >= n {
        return;
    }
    // SAFETY: launch contract.
    unsafe {
        let c = &p.cfg;
        // The entry is read with the number of valid spacepoints (one memory round trip,
        // not two in a row): q < n, inside content either way.
        let nv = n_valid(c, grid, n_events);
        let idx = content.add(q as usize).read();
        if q >= nv {
            return;
        }
        let key = keys.add(idx as usize).read();
        let mut at = q;
        if p.rank != 0 {
            let lo = grid.add(key as usize).read();
            let hi = grid.add(key as usize + 1).read();
            if hi - lo > BIN_RANK_MAX {
                if q == lo as u64 {
                    (*p.totals.ptr_mut()).unranked = 1;
                }
            } else {
                let mut r = 0u32;
                let mut j = lo;
                while j < hi {
                    r += (content.add(j as usize).read() < idx) as u32;
                    j += 1;
                }
                at = (lo + r) as u64;
            }
        }
        let sp = &*sps.add(idx as usize);
        let n_r = if c.n_r == 0 { 1 } else { c.n_r };
        let bin = key / n_r;
        let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
        let e = bin / nbins;
        let local = idx - ev_off.add(e as usize).read();
        let rec = binned(sp, local, bin);
        rz.add(at as usize).write([rec.r, rec.z]);
        out.add(at as usize).write(rec);
    }
}

/// Event `e` of a batch: its valid spacepoints (its grid range) and seeds (from the exclusive
/// scan of the per-middle seed counts), into `events[e]`.
///
/// # Safety
/// `grid` holds `n_events * nkeys + 2` offsets, `e < n_events`; `seed_off` the scan of `n + 1`
/// counts with `n >= grid[n_events * nkeys]`; `events` valid for `n_events`.
#[inline(always)]
pub(crate) unsafe fn event_stats(
    c: &SeedingConfig,
    grid: *const u32,
    seed_off: *const u32,
    events: *mut EventCounts,
    e: usize,
) {
    // SAFETY: caller's contract.
    unsafe {
        let nk = c.nkeys() as usize;
        let lo = grid.add(e * nk).read();
        let hi = grid.add((e + 1) * nk).read();
        let s0 = seed_off.add(lo as usize).read();
        let s1 = seed_off.add(hi as usize).read();
        let ev = &mut *events.add(e);
        ev.valid = hi - lo;
        ev.seeds = s1 - s0;
        ev.seed_start = s0;
    }
}

/// The columns of every event of a batch interleaved into records: spacepoint `g` of event
/// `e` (`ev_off[e] <= g < ev_off[e + 1]`) from element `g - ev_off[e]` of event `e`'s five
/// columns. A spacepoint that fails [`spacepoint_ok`] is written too, and its index recorded
/// in `bad` (the smallest, by an atomic max of [`crate::histogram::encode_first_index`]).
///
/// # Safety
/// `columns` valid for `5 * n_events` addresses, those of event `e` each valid for reads of
/// `ev_off[e + 1] - ev_off[e]` `f32` values; `ev_off` for `n_events + 1` non-decreasing
/// offsets from 0 to `n`, `n_events >= 1`, `n < 2^32`; `sps` for `n` records, not
/// overlapping the columns; `bad` one word. `SEEDING_THREADS` threads,
/// `ceil(n / SEEDING_THREADS)` blocks.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_interleave_columns(p: SeedingInterleaveColumnsParams) {
    let g = index();
    if g >= p.n {
        return;
    }
    // SAFETY: launch contract: g < n < 2^32; e < n_events, so its five addresses and its
    // offset are in bounds, and `g - ev_off[e]` is below the event's count.
    unsafe {
        let ev_off = p.ev_off.ptr();
        let e = event_of(ev_off, p.n_events, g as u32) as usize;
        let i = (g as u32 - ev_off.add(e).read()) as usize;
        let cols = p.columns.ptr().add(5 * e);
        let col = |c: usize| (cols.add(c).read() as *const f32).add(i).read();
        let sp = SpacePoint {
            x: col(0),
            y: col(1),
            z: col(2),
            var_z: col(4),
            var_r: col(3),
        };
        p.sps.ptr_mut().add(g as usize).write(sp);
        if !spacepoint_ok(&sp) {
            i::atomic_max_u32(
                p.bad.ptr_mut(),
                crate::histogram::encode_first_index(g as u32),
            );
        }
    }
}
