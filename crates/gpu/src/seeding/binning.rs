//! Binning: grid keys of the spacepoints of a batch and the gather into bins.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

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

/// `binned[p] = binned(sps[i], i - ev_off[e], keys[i] / n_r)` with `i = content[p]`, for the
/// valid spacepoints `p < grid[n_events * nkeys]`; the record's `bin` is the batch bin
/// `e * nbins + bin` and its `index` the input index inside event `e`.
///
/// # Safety
/// `content` valid for `n` indices `< n` (the stable bucket of `keys`, `n` keys), `grid`
/// its offsets (`n_events * nkeys + 2`); `ev_off` as for the binning; `binned` and `rz` for
/// `n`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_gather_spacepoints(p: SeedingGatherSpacepointsParams) {
    let (cfg, sps, ev_off, keys, content, grid, n, out, rz, n_events) = (
        p.cfg.ptr(),
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
    let p = index();
    if p >= n {
        return;
    }
    // SAFETY: launch contract.
    unsafe {
        let c = &*cfg;
        if p >= n_valid(c, grid, n_events) {
            return;
        }
        let idx = content.add(p as usize).read();
        let sp = &*sps.add(idx as usize);
        let n_r = if c.n_r == 0 { 1 } else { c.n_r };
        let bin = keys.add(idx as usize).read() / n_r;
        let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
        let e = bin / nbins;
        let local = idx - ev_off.add(e as usize).read();
        let rec = binned(sp, local, bin);
        rz.add(p as usize).write([rec.r, rec.z]);
        out.add(p as usize).write(rec);
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
