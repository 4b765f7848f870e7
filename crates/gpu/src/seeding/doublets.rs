//! Doublets: the middle-bottom and middle-top pairs of every middle, in one pass.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// The candidates of one middle's radial window, spread over the warp: lane `j` below the
/// number of neighbour bins holds bin `j`'s run of binned spacepoints in the window's
/// radius slices (`delta_j = lo_j - start_j`, where `start_j` is the run's position in the
/// joined sequence of all runs, scan order), every lane the starts of runs 1..8 and the
/// total. Position `v` of the joined sequence is binned index `v + delta_k`, `k` the last
/// run with `start_k <= v`.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    delta: u32,
    starts: [u32; 8],
    total: u32,
    /// More than three runs (a grid with more than one z bin): the walk then compares a
    /// candidate's position with all eight run starts, else with the two that exist (the
    /// default grid has one z bin, so three neighbour bins).
    many: bool,
}

/// This lane's neighbour bin of middle `m` (batch bin `m.bin`): `(number of neighbour bins,
/// the bin's first grid key)`; the key is meaningless on lanes past the number. Computed
/// once per middle (it takes integer divisions) for the four [`window_runs`].
#[inline(always)]
pub(crate) fn lane_bin(c: &SeedingConfig, m: &BinnedSp) -> (u32, usize) {
    let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
    let event_bin = m.bin / nbins * nbins;
    let (nb_len, nb_bin) = neighbour_bin(c, m.bin - event_bin, i::lane_id());
    (
        nb_len,
        event_bin.wrapping_add(nb_bin) as usize * c.n_r as usize,
    )
}

/// The [`Window`] of a middle for `window`, `lanes` its [`lane_bin`]: each lane reads one
/// neighbour bin's two grid offsets (in parallel), then a warp scan joins the runs.
///
/// # Safety
/// All 32 lanes, the same middle and `window`; `grid` holds the batch's offsets
/// (`n_events * nkeys + 2`), `lanes` from [`lane_bin`] of a middle of the batch.
#[inline(always)]
pub(crate) unsafe fn window_runs(
    c: &SeedingConfig,
    lanes: (u32, usize),
    window: (f32, f32),
    grid: *const u32,
) -> Window {
    let lane = i::lane_id();
    let (nb_len, key) = lanes;
    let (s0, s1) = slice_range(c, window.0, window.1);
    let (mut lo, mut len) = (0u32, 0u32);
    if s0 < s1 && lane < nb_len {
        // SAFETY: key + s1 <= the event's last key + 1; grid holds every offset.
        let hi = unsafe {
            lo = grid.add(key + s0 as usize).read();
            grid.add(key + s1 as usize).read()
        };
        len = hi.saturating_sub(lo);
    }
    let incl = crate::scan::device::warp_inclusive_sum(len);
    let start = incl - len;
    let mut w = Window {
        delta: lo.wrapping_sub(start),
        starts: [u32::MAX; 8],
        total: i::shfl_idx(incl, 31),
        many: nb_len > 3,
    };
    let mut j = 1;
    while j < 9 {
        let sj = i::shfl_idx(start, j);
        if j < nb_len {
            w.starts[(j - 1) as usize] = sj;
        }
        j += 1;
    }
    w
}

/// `*p` as two 16-byte read-only loads (the generic read of a 4-aligned record is eight
/// 32-bit loads).
///
/// # Safety
/// `p` valid and 16-byte aligned (a device allocation of 32-byte records), not written
/// during the kernel.
#[inline(always)]
pub(crate) unsafe fn read_binned(p: *const BinnedSp) -> BinnedSp {
    let w = p as *const u32;
    // SAFETY: caller's contract: the record's two aligned halves.
    let (a, b) = unsafe { (i::ldg_v4_u32(w), i::ldg_v4_u32(w.add(4))) };
    BinnedSp {
        x: f32::from_bits(a[0]),
        y: f32::from_bits(a[1]),
        z: f32::from_bits(a[2]),
        r: f32::from_bits(a[3]),
        var_z: f32::from_bits(b[0]),
        var_r: f32::from_bits(b[1]),
        index: b[2],
        bin: b[3],
    }
}

/// Warp-cooperative walk over the candidates of one middle `m` (the same for all 32
/// lanes): every spacepoint of the window's runs `w` (from [`window_runs`]) in scan order (bins, then slices, then
/// index), the runs joined so that the 32 lanes always test 32 consecutive candidates.
/// A candidate is tested first with [`doublet_rz_compatible`] from the compact `rz` array;
/// those that pass go, in scan order, into a ring of 64 binned indices in the warp's shared
/// memory (`queue`), and whenever it holds 32 (and at the end) all 32 lanes test 32 of them
/// with [`doublet_helix_compatible`] on their full records (together exactly
/// [`doublet_compatible`]), so the expensive cut runs on full warps. For each candidate that
/// passes, `emit(rank, q, &sp)` runs on the lane holding it, with `rank` its position among
/// the passing candidates in scan order. Returns the number that passed (the same on every
/// lane).
///
/// # Safety
/// Called by all 32 lanes of a warp with the same `m` and `w` (the window's runs in the
/// batch's grid); `rz` and `sps` hold the same binned records; `queue` is this warp's
/// `DOUBLET_QUEUE` words of shared memory. `c` should be a local copy of the config (the
/// warp votes and shuffles are `asm!` that may touch memory, so fields read through a
/// pointer to global memory are loaded again after each of them).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn warp_candidates(
    c: &SeedingConfig,
    m: &BinnedSp,
    w: &Window,
    bottom: bool,
    rz: *const [f32; 2],
    sps: *const BinnedSp,
    queue: u32,
    mut emit: impl FnMut(u32, u32, &BinnedSp),
) -> u32 {
    let lane = i::lane_id();
    let below = i::lanemask_lt();
    let mut passed = 0u32;
    let mut base = 0u32;
    // The ring holds the rz-passing candidates [head, head + queued) (mod DOUBLET_QUEUE).
    let mut head = 0u32;
    let mut queued = 0u32;
    // Warp-uniform loops: every lane reaches every shuffle, ballot and warp barrier.
    // Position `base + lane`'s binned index and `(r, z)` (the pair is loaded only inside
    // the window). The next step's are loaded before this step is tested, so the load's
    // latency overlaps the step (the `(r, z)` test waited on it in 13 % of the stall
    // samples, Nsight Compute). Every lane calls it (it shuffles).
    let fetch = |base: u32| -> (u32, u64) {
        let v = base + lane;
        // The run holding position v: the number of run starts (after the first) at or
        // below it. Starts past the last run are u32::MAX; with at most three runs only
        // two can be below v (warp-uniform branch).
        let mut k = (v >= w.starts[0]) as u32 + (v >= w.starts[1]) as u32;
        if w.many {
            let mut j = 2;
            while j < 8 {
                k += (v >= w.starts[j]) as u32;
                j += 1;
            }
        }
        let q = v.wrapping_add(i::shfl_idx(w.delta, k));
        let mut rz2 = 0u64;
        if v < w.total {
            // SAFETY: q < grid[last key of the batch] = number of binned records; the
            // array is 8-byte aligned (device allocation), so the pair is one 64-bit load.
            rz2 = unsafe { (rz as *const u64).add(q as usize).read() };
        }
        (q, rz2)
    };
    let (mut q, mut rz2) = fetch(0);
    while base < w.total {
        let v = base + lane;
        let (q_next, rz_next) = fetch(base + 32);
        let mut ok = false;
        if v < w.total {
            let r = f32::from_bits(rz2 as u32);
            let z = f32::from_bits((rz2 >> 32) as u32);
            ok = doublet_rz_compatible(c, m, r, z, bottom);
        }
        let mask = i::ballot(ok);
        if ok {
            let at = (head + queued + i::popc(mask & below)) % DOUBLET_QUEUE;
            // SAFETY: at < DOUBLET_QUEUE: inside this warp's ring; the slot is free
            // (queued < 32 before this chunk, so at most 63 entries are live).
            unsafe { i::st_shared_u32(queue + at * 4, q) };
        }
        queued += i::popc(mask);
        base += 32;
        (q, rz2) = (q_next, rz_next);
        while queued >= 32 || (base >= w.total && queued > 0) {
            // The ring entries written above are read by other lanes below.
            i::sync_warp();
            let take = if queued < 32 { queued } else { 32 };
            let mut o = BinnedSp::default();
            let mut q2 = 0;
            let mut ok2 = false;
            if lane < take {
                // SAFETY: a live ring entry, holding a binned index.
                unsafe {
                    q2 = i::ld_shared_u32(queue + ((head + lane) % DOUBLET_QUEUE) * 4);
                    o = read_binned(sps.add(q2 as usize));
                }
                ok2 = doublet_helix_compatible(c, m, &o);
            }
            let mask2 = i::ballot(ok2);
            if ok2 {
                emit(passed + i::popc(mask2 & below), q2, &o);
            }
            passed += i::popc(mask2);
            head = (head + take) % DOUBLET_QUEUE;
            queued -= take;
            // The slots just read may be written again by the next chunk.
            i::sync_warp();
        }
    }
    passed
}

/// Writes the doublet `(middle, other)` and its `LinCircle` with 64-bit stores (a 4-aligned
/// record is written as 32-bit stores otherwise): one for the doublet, three for `l`.
///
/// # Safety
/// `d` and `lc` valid for writing and 8-byte aligned (device allocations of 8- and 24-byte
/// records).
#[inline(always)]
unsafe fn write_doublet(
    d: *mut Doublet,
    lc: *mut LinCircle,
    middle: u32,
    other: u32,
    l: &LinCircle,
) {
    let w = |lo: f32, hi: f32| lo.to_bits() as u64 | (hi.to_bits() as u64) << 32;
    let q = lc as *mut u64;
    // SAFETY: caller's contract.
    unsafe {
        (d as *mut u64).write(middle as u64 | (other as u64) << 32);
        q.write(w(l.cot_theta, l.zo));
        q.add(1).write(w(l.u, l.v));
        q.add(2).write(w(l.er, l.i_delta_r));
    }
}

/// Writes the doublets of one side of middle `pm`: ranks below `DOUBLET_STAGE` from the
/// warp's shared-memory stage, the rest (when more passed) from a second walk. For the tops
/// (`!bottom`) also the middle's [`TopBounds`] (a warp reduction, lane 0 writes `*bounds`).
///
/// # Safety
/// All 32 lanes; `stage` holds the first `min(count, DOUBLET_STAGE)` candidates of the
/// first walk (visible after `sync_warp`); `out`, `lc` valid for `at + count`; for the
/// tops `bounds` valid for one 16-byte aligned record (unused for the bottoms).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn write_side(
    c: &SeedingConfig,
    m: &BinnedSp,
    pm: u32,
    window: (f32, f32),
    bottom: bool,
    grid: *const u32,
    rz: *const [f32; 2],
    sps: *const BinnedSp,
    stage: u32,
    queue: u32,
    count: u32,
    at: usize,
    out: *mut Doublet,
    lc: *mut LinCircle,
    bounds: *mut TopBounds,
) {
    // The tops' bounds for the triplet kernel's test without `er` (`triplet_reject_bound`).
    let mut tb = TopBounds::EMPTY;
    let staged = if count < DOUBLET_STAGE {
        count
    } else {
        DOUBLET_STAGE
    };
    let mut r = i::lane_id();
    // SAFETY: caller's contract: r < staged entries of the stage; at + r < capacity.
    unsafe {
        while r < staged {
            let q = i::ld_shared_u32(stage + r * 4);
            let o = read_binned(sps.add(q as usize));
            let l = transform_coordinates(m, &o, bottom);
            if !bottom {
                tb = tb.with_top(&l);
            }
            write_doublet(out.add(at + r as usize), lc.add(at + r as usize), pm, q, &l);
            r += 32;
        }
        if count > DOUBLET_STAGE {
            let w = window_runs(c, lane_bin(c, m), window, grid);
            warp_candidates(c, m, &w, bottom, rz, sps, queue, |rank, q, o| {
                if rank >= DOUBLET_STAGE {
                    let l = transform_coordinates(m, o, bottom);
                    if !bottom {
                        tb = tb.with_top(&l);
                    }
                    write_doublet(
                        out.add(at + rank as usize),
                        lc.add(at + rank as usize),
                        pm,
                        q,
                        &l,
                    );
                }
            });
        }
        if !bottom {
            let mut d = 16;
            while d > 0 {
                let x = |v: f32| f32::from_bits(i::shfl_xor(v.to_bits(), d));
                let o = TopBounds {
                    max_er: x(tb.max_er),
                    max_i_delta_r: x(tb.max_i_delta_r),
                    max_abs_cot: x(tb.max_abs_cot),
                    min_er_idr: x(tb.min_er_idr),
                };
                tb = tb.join(&o);
                d /= 2;
            }
            if i::lane_id() == 0 {
                // SAFETY: caller's contract: bounds valid for the middle's record.
                let w = bounds as *mut u32;
                i::st_v4_u32(
                    w,
                    [
                        tb.max_er.to_bits(),
                        tb.max_i_delta_r.to_bits(),
                        tb.max_abs_cot.to_bits(),
                        tb.min_er_idr.to_bits(),
                    ],
                );
            }
        }
    }
}

/// Per middle `p < n_valid` (one warp each), in one pass: the compatible bottoms and tops
/// (both 0 when either is 0; the side with fewer candidates in its window is walked first and
/// the other only when the first found some), their counts `n_bot[p]`, `n_top[p]`, space reserved with
/// one 64-bit atomic per side on `totals` (so each middle's doublets are contiguous, in
/// scan order; middles may come in any order), the starts `bot_start[p]`, `top_start[p]`,
/// the doublets with their `LinCircle`s, and the [`TopBounds`] of the tops in
/// `top_bounds[p]` (for the triplet kernel). Per-event counts go to `events`. When a
/// reservation does not fit the capacity nothing is written for that middle (the totals
/// then exceed the capacity and the host repeats the call with larger buffers).
///
/// # Safety
/// `grid` holds the batch's `n_events * nkeys + 2` offsets into `sps` (`n` records at most);
/// `n_bot`, `n_top`, `bot_start`, `top_start` valid for `n`, `top_bounds` for `n` 16-byte
/// aligned records; `bot`, `lc_bot` for `cap_mb`,
/// `top`, `lc_top` for `cap_mt`; `totals` one zeroed record, `events` `n_events` records.
/// `SEEDING_THREADS` threads per block, `ceil(32 n / SEEDING_THREADS)` blocks,
/// `doublet_smem_bytes()` of dynamic shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_find_doublets(p: SeedingFindDoubletsParams) {
    let (grid, rz, sps, n, n_events) = (p.grid.ptr(), p.rz.ptr(), p.sps.ptr(), p.n, p.n_events);
    let warp = index() / 32;
    if warp >= n {
        return; // warp-uniform
    }
    // SAFETY: launch contract; ranks stay below the reserved counts.
    unsafe {
        let c = &p.cfg;
        if warp >= n_valid(c, grid, n_events) {
            return; // warp-uniform
        }
        let pm = warp as u32;
        let m = read_binned(sps.add(pm as usize));
        let lane = i::lane_id();
        let stage_b = i::shared_base() + i::warp_id() * DOUBLET_WARP_WORDS * 4;
        let stage_t = stage_b + DOUBLET_STAGE * 4;
        let queue = stage_t + DOUBLET_STAGE * 4;
        let [wb, wt] = radial_windows(c, m.r);
        let stage = |at: u32| {
            move |rank: u32, q: u32, _: &BinnedSp| {
                if rank < DOUBLET_STAGE {
                    i::st_shared_u32(at + rank * 4, q);
                }
            }
        };
        // The side whose window holds fewer candidates is walked first, the other only when
        // the first found a doublet (a middle with no bottom or no top keeps none): middles
        // with an empty side (the outermost layer has no tops) skip the full walk of the
        // other. Warp-uniform: every lane holds the same totals.
        // The runs are computed again for the walks (holding both windows' runs across
        // the walks costs registers: 72 → 83 per thread, ptxas sm_90).
        let lanes = lane_bin(c, &m);
        let tb = window_runs(c, lanes, wb, grid).total;
        let tt = window_runs(c, lanes, wt, grid).total;
        let first_bottom = tb <= tt;
        let walk = tb != 0 && tt != 0;
        let (w1, s1, w2, s2) = if first_bottom {
            (wb, stage_b, wt, stage_t)
        } else {
            (wt, stage_t, wb, stage_b)
        };
        let (mut n1, mut n2) = (0, 0);
        if walk {
            let runs = window_runs(c, lanes, w1, grid);
            n1 = warp_candidates(c, &m, &runs, first_bottom, rz, sps, queue, stage(s1));
            if n1 != 0 {
                let runs = window_runs(c, lanes, w2, grid);
                n2 = warp_candidates(c, &m, &runs, !first_bottom, rz, sps, queue, stage(s2));
            }
        }
        let (mut nb, mut nt) = if first_bottom { (n1, n2) } else { (n2, n1) };
        if nb == 0 || nt == 0 {
            nb = 0;
            nt = 0;
        }
        let (mut ob, mut ot) = (0u64, 0u64);
        if lane == 0 {
            p.n_bot.ptr_mut().add(pm as usize).write(nb);
            p.n_top.ptr_mut().add(pm as usize).write(nt);
            if nb != 0 {
                let t = p.totals.ptr_mut();
                ob = i::atomic_add_u64(core::ptr::addr_of_mut!((*t).mid_bot), nb as u64);
                ot = i::atomic_add_u64(core::ptr::addr_of_mut!((*t).mid_top), nt as u64);
                let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
                let ev = p.events.ptr_mut().add((m.bin / nbins) as usize);
                i::atomic_add_u32(core::ptr::addr_of_mut!((*ev).mid_bot), nb);
                i::atomic_add_u32(core::ptr::addr_of_mut!((*ev).mid_top), nt);
                p.bot_start.ptr_mut().add(pm as usize).write(ob as u32);
                p.top_start.ptr_mut().add(pm as usize).write(ot as u32);
            }
        }
        if nb == 0 {
            return; // warp-uniform
        }
        let ob =
            (i::shfl_idx(ob as u32, 0) as u64) | ((i::shfl_idx((ob >> 32) as u32, 0) as u64) << 32);
        let ot =
            (i::shfl_idx(ot as u32, 0) as u64) | ((i::shfl_idx((ot >> 32) as u32, 0) as u64) << 32);
        // The stage written by every lane above is read by others below.
        i::sync_warp();
        if ob + nb as u64 > p.cap_mb as u64 || ot + nt as u64 > p.cap_mt as u64 {
            return; // warp-uniform: overflow, the host repeats with larger buffers
        }
        write_side(
            c,
            &m,
            pm,
            wb,
            true,
            grid,
            rz,
            sps,
            stage_b,
            queue,
            nb,
            ob as usize,
            p.bot.ptr_mut(),
            p.lc_bot.ptr_mut(),
            core::ptr::null_mut(),
        );
        write_side(
            c,
            &m,
            pm,
            wt,
            false,
            grid,
            rz,
            sps,
            stage_t,
            queue,
            nt,
            ot as usize,
            p.top.ptr_mut(),
            p.lc_top.ptr_mut(),
            p.top_bounds.ptr_mut().add(pm as usize),
        );
    }
}
