//! Triplets, their weight update and the seed selection, per middle spacepoint. The doublet
//! and triplet totals live on the device ([`SeedingTotals`]); every kernel here reads them and
//! does nothing when an earlier stage overflowed its capacity (the host then repeats the call
//! with larger buffers).

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// The number of middle–bottom doublets when both doublet totals fit their capacities,
/// else 0.
///
/// # Safety
/// `totals` one record written by earlier launches.
#[inline(always)]
pub(crate) unsafe fn doublets_fit(totals: *const SeedingTotals, cap_mb: u32, cap_mt: u32) -> u64 {
    // SAFETY: caller's contract; the fields read are not written by the running kernel.
    let (mb, mt) = unsafe { ((*totals).mid_bot, (*totals).mid_top) };
    if mb <= cap_mb as u64 && mt <= cap_mt as u64 {
        mb
    } else {
        0
    }
}

/// The number of spilled triplets when every total fits its capacity, else 0.
///
/// # Safety
/// As [`doublets_fit`].
#[inline(always)]
pub(crate) unsafe fn triplets_fit(
    totals: *const SeedingTotals,
    cap_mb: u32,
    cap_mt: u32,
    cap_tri: u32,
) -> u64 {
    // SAFETY: caller's contract.
    unsafe {
        let nt = (*totals).triplets;
        if doublets_fit(totals, cap_mb, cap_mt) == 0 || nt > cap_tri as u64 {
            0
        } else {
            nt
        }
    }
}

/// The updated weight of triplet `k` of `tri[..len]`, whose triplets of one middle–bottom
/// doublet (equal `mb`) are contiguous and in top order: its group is the run of equal `mb`
/// around `k`.
///
/// # Safety
/// `tri` valid for `len > k` triplets.
#[inline(always)]
pub(crate) unsafe fn triplet_weight(
    c: &SeedingConfig,
    tri: *const Triplet,
    len: u32,
    k: u32,
) -> f32 {
    // SAFETY: every index read is below `len`.
    unsafe {
        let t = &*tri.add(k as usize);
        let mut lo = k;
        while lo > 0 && (*tri.add(lo as usize - 1)).mb == t.mb {
            lo -= 1;
        }
        let mut hi = k + 1;
        while hi < len && (*tri.add(hi as usize)).mb == t.mb {
            hi += 1;
        }
        let group = tri.add(lo as usize);
        updated_weight(c, k - lo, hi - lo, t.weight, |j| {
            let o = &*group.add(j as usize);
            (o.curvature, o.r_top)
        })
    }
}

/// Seed selection of one middle (one warp, all 32 lanes): its `cnt` triplets `tri[..cnt]` in
/// the oracle's order (bottoms in scan order, each bottom's tops in order), `weight(k)` the
/// updated weight of triplet `k`. The lanes compute 32 triplets' seed weights and cuts at
/// once; lane 0 offers them to its best-N keeper one by one, in order, and writes the kept
/// seeds (per-middle cut) to `slot[..]` and their number to `count`.
///
/// # Safety
/// All 32 lanes with the same arguments; `tri` valid for `cnt`; `sps` for every binned index
/// in them; `slot` for `max_seeds_per_spm` seeds; `count` one word.
#[inline(always)]
pub(crate) unsafe fn select_middle(
    c: &SeedingConfig,
    sps: *const BinnedSp,
    tri: *const Triplet,
    cnt: u32,
    weight: impl Fn(u32) -> f32,
    slot: *mut Seed,
    count: *mut u32,
) {
    let lane = i::lane_id();
    let mut best = SeedKeeper::new(c.max_seeds_per_spm);
    let mut c0 = 0u32;
    // Warp-uniform loops: every lane reaches every ballot and shuffle.
    while c0 < cnt {
        let mut cand = Candidate::default();
        let mut pass = false;
        if c0 + lane < cnt {
            let k = c0 + lane;
            // SAFETY: k < cnt; the triplet's binned indices are valid.
            unsafe {
                let t = &*tri.add(k as usize);
                let sb = &*sps.add(t.bottom as usize);
                let w = seed_weight(c, weight(k), sb.r, t.r_top);
                if single_seed_cut(c, w, sb.r) {
                    pass = true;
                    cand = Candidate {
                        weight: w,
                        key: [
                            sb.index,
                            (*sps.add(t.middle as usize)).index,
                            (*sps.add(t.top as usize)).index,
                        ],
                        r_bottom: sb.r,
                        z_vertex: t.z_vertex,
                    };
                }
            }
        }
        let passing = i::ballot(pass);
        let here = if cnt - c0 < 32 { cnt - c0 } else { 32 };
        let mut q = 0u32;
        while q < here {
            let got = Candidate {
                weight: f32::from_bits(i::shfl_idx(cand.weight.to_bits(), q)),
                key: [
                    i::shfl_idx(cand.key[0], q),
                    i::shfl_idx(cand.key[1], q),
                    i::shfl_idx(cand.key[2], q),
                ],
                r_bottom: f32::from_bits(i::shfl_idx(cand.r_bottom.to_bits(), q)),
                z_vertex: f32::from_bits(i::shfl_idx(cand.z_vertex.to_bits(), q)),
            };
            if lane == 0 && (passing >> q) & 1 != 0 {
                best.offer(got);
            }
            q += 1;
        }
        c0 += 32;
    }
    if lane == 0 {
        let mut out = 0usize;
        let mut j = 0u32;
        while let Some(s) = best.get(j) {
            if j == 0 || cut_per_middle_sp(c, s.weight, s.r_bottom) {
                // SAFETY: out <= j < best.len() <= max_seeds_per_spm.
                unsafe {
                    slot.add(out).write(Seed {
                        bottom: s.key[0],
                        middle: s.key[1],
                        top: s.key[2],
                        weight: s.weight,
                        z_vertex: s.z_vertex,
                    })
                };
                out += 1;
            }
            j += 1;
        }
        // SAFETY: caller's contract.
        unsafe { count.write(out as u32) };
    }
}

/// The bottom × top pairs of one middle (`nb` bottoms at `bs`, `nt >= 1` tops at `ts`), in
/// the oracle's order (bottom-major), 32 consecutive pairs at a time over the warp; `emit`
/// gets each triplet's rank (its position among the middle's triplets) and the triplet.
/// Returns the middle's number of triplets.
///
/// # Safety
/// All 32 lanes with the same arguments; the doublet arrays valid at `bs..bs + nb` and
/// `ts..ts + nt`; `sps` for every binned index in them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn middle_pairs(
    c: &SeedingConfig,
    p: &SeedingTripletsParams,
    g: u32,
    m: &BinnedSp,
    nb: u32,
    bs: u32,
    nt: u32,
    ts: u32,
    mut emit: impl FnMut(u64, Triplet),
) -> u64 {
    let lane = i::lane_id();
    let (sps, bot, lc_bot, top, lc_top) = (
        p.sps.ptr(),
        p.bot.ptr(),
        p.lc_bot.ptr(),
        p.top.ptr(),
        p.lc_top.ptr(),
    );
    // Lane `j`'s pair is `(b, t)` = `(j / nt, j % nt)`, advanced by 32 pairs per step.
    let (q, r) = (32 / nt, 32 % nt);
    let (mut b, mut t) = (lane / nt, lane % nt);
    let steps = (nb as u64 * nt as u64).div_ceil(32);
    let mut cnt = 0u64;
    let mut s = 0u64;
    while s < steps {
        let mut hit = None;
        if b < nb {
            let d = bs + b;
            // SAFETY: d < bs + nb, ts + t < ts + nt.
            unsafe {
                let lb = lc_bot.add(d as usize).read();
                let lt = lc_top.add((ts + t) as usize).read();
                let (isin, scat) = bottom_scattering(c, &lb);
                if let Some((curvature, impact)) = triplet_compatible(c, m, &lb, &lt, isin, scat) {
                    let other = top.add((ts + t) as usize).read().other;
                    hit = Some(Triplet {
                        bottom: bot.add(d as usize).read().other,
                        middle: g,
                        top: other,
                        mb: d,
                        curvature,
                        weight: impact_weight(c, impact),
                        z_vertex: lb.zo,
                        r_top: (*sps.add(other as usize)).r,
                    });
                }
            }
        }
        let mask = i::ballot(hit.is_some());
        if let Some(tr) = hit {
            emit(cnt + i::popc(mask & i::lanemask_lt()) as u64, tr);
        }
        cnt += i::popc(mask) as u64;
        b += q;
        t += r;
        if t >= nt {
            t -= nt;
            b += 1;
        }
        s += 1;
    }
    cnt
}

/// Per middle `g <= n` (one warp each, persistent warps taking middles from `work`): its triplets (every bottom × top pair of its doublets,
/// bottom-major, [`triplet_compatible`]), counted into the event's count. A middle with at
/// most `stage` (`<= TRIPLET_STAGE`) triplets keeps them in the warp's shared memory, in
/// order, and finishes here: weight update ([`triplet_weight`]) and seed selection
/// ([`select_middle`]) into `slots[g * cap ..]`, `counts[g]`. A middle with more is spilled:
/// one 64-bit reservation of `cnt` entries of `out` (`totals.triplets`), its count and start
/// in `tri_cnt[g]`, `tri_start[g]`, `g` appended to the `spill` list (`totals.spilled`), and
/// a second walk writes its triplets, in order, when the reservation fits `cap_tri`; its
/// count is written by [`seeding_select_seeds`]. `counts[g]` is 0 for `g` past the valid
/// middles (so that `n + 1` counts can be scanned), for a middle without triplets, and for
/// every middle when a doublet total overflowed.
///
/// # Safety
/// `grid` the batch's offsets; `sps` valid for `n`; `n_bot`, `bot_start`, `n_top`,
/// `top_start` give each valid middle's doublets in `bot`, `lc_bot` (`cap_mb`) and `top`,
/// `lc_top` (`cap_mt`); `tri_cnt`, `tri_start`, `spill` valid for `n`; `out` for `cap_tri`;
/// `slots` for `n * max_seeds_per_spm`; `counts` for `n + 1`; `totals` and `events` as
/// written by the doublet kernel; `work` one zeroed word. `SEEDING_THREADS` threads per
/// block, any number of blocks (each warp takes middles from `work`), `triplet_smem_bytes()`
/// of dynamic shared memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_find_triplets(p: SeedingTripletsParams) {
    // SAFETY: the warp's own TRIPLET_STAGE triplets of the block's dynamic shared memory.
    let stage = unsafe {
        (i::dynamic_shared_ptr() as *mut Triplet).add((i::warp_id() * TRIPLET_STAGE) as usize)
    };
    // Persistent warps: each takes the next middle from `work` until none is left, so a
    // long middle holds only its own warp (not a block's worth of finished ones).
    loop {
        let mut g = 0u32;
        if i::lane_id() == 0 {
            // SAFETY: `work` one zeroed word of this launch.
            g = unsafe { i::atomic_add_u32(p.work.ptr_mut(), 1) };
        }
        let g = i::shfl_idx(g, 0) as u64;
        if g > p.n {
            return; // warp-uniform
        }
        // SAFETY: launch contract, g <= n.
        unsafe { triplets_of_middle(&p, g, stage) };
        // The stage is reused by the warp's next middle.
        i::sync_warp();
    }
}

/// The body of [`seeding_find_triplets`] for middle `g <= n` (all 32 lanes), `stage` the
/// warp's shared memory.
///
/// # Safety
/// The kernel's launch contract; `stage` valid for `TRIPLET_STAGE` triplets.
#[inline(always)]
unsafe fn triplets_of_middle(p: &SeedingTripletsParams, g: u64, stage: *mut Triplet) {
    let lane = i::lane_id();
    // SAFETY: launch contract; ranks stay below the stage or the reservation.
    unsafe {
        let c = &*p.cfg.ptr();
        let sps = p.sps.ptr();
        let counts = p.counts.ptr_mut();
        let fits = doublets_fit(p.totals.ptr(), p.cap_mb, p.cap_mt) != 0;
        let (mut nb, mut nt) = (0u32, 0u32);
        if g < n_valid(c, p.grid.ptr(), p.n_events) && fits {
            nb = p.n_bot.ptr().add(g as usize).read();
            if nb != 0 {
                nt = p.n_top.ptr().add(g as usize).read();
            }
        }
        if nb == 0 || nt == 0 {
            if lane == 0 {
                counts.add(g as usize).write(0);
            }
            return; // warp-uniform
        }
        let g = g as u32;
        let bs = p.bot_start.ptr().add(g as usize).read();
        let ts = p.top_start.ptr().add(g as usize).read();
        let m = &*sps.add(g as usize);
        let cap_stage = if p.stage < TRIPLET_STAGE {
            p.stage
        } else {
            TRIPLET_STAGE
        } as u64;
        let cnt = middle_pairs(c, p, g, m, nb, bs, nt, ts, |rank, tr| {
            if rank < cap_stage {
                stage.add(rank as usize).write(tr);
            }
        });
        if cnt == 0 {
            if lane == 0 {
                counts.add(g as usize).write(0);
            }
            return; // warp-uniform
        }
        if lane == 0 {
            let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
            let ev = p.events.ptr_mut().add((m.bin / nbins) as usize);
            i::atomic_add_u32(core::ptr::addr_of_mut!((*ev).triplets), cnt as u32);
        }
        let slot = p
            .slots
            .ptr_mut()
            .add(g as usize * c.max_seeds_per_spm as usize);
        if cnt <= cap_stage {
            // The stage written by every lane above is read by others below.
            i::sync_warp();
            let n_tri = cnt as u32;
            select_middle(
                c,
                sps,
                stage,
                n_tri,
                |k| triplet_weight(c, stage, n_tri, k),
                slot,
                counts.add(g as usize),
            );
            return; // warp-uniform
        }
        // Spilled: one contiguous range of the global buffer, finished by the next kernels.
        let mut start = 0u64;
        if lane == 0 {
            let tot = p.totals.ptr_mut();
            start = i::atomic_add_u64(core::ptr::addr_of_mut!((*tot).triplets), cnt);
            let at = i::atomic_add_u64(core::ptr::addr_of_mut!((*tot).spilled), 1);
            p.spill.ptr_mut().add(at as usize).write(g);
            p.tri_start
                .ptr_mut()
                .add(g as usize)
                .write(start.min(u32::MAX as u64) as u32);
            p.tri_cnt
                .ptr_mut()
                .add(g as usize)
                .write(cnt.min(u32::MAX as u64) as u32);
        }
        let start = (i::shfl_idx(start as u32, 0) as u64)
            | ((i::shfl_idx((start >> 32) as u32, 0) as u64) << 32);
        if start + cnt > p.cap_tri as u64 {
            return; // warp-uniform: overflow, the host repeats with larger buffers
        }
        let out = p.out.ptr_mut().add(start as usize);
        middle_pairs(c, p, g, m, nb, bs, nt, ts, |rank, tr| {
            out.add(rank as usize).write(tr);
        });
    }
}

/// Per spilled triplet `k` (grid-stride, below the spilled total): its updated weight into
/// `weights[k]` ([`triplet_weight`] over the spilled buffer: each middle's triplets are one
/// contiguous range, each doublet's a run of equal `mb` inside it).
///
/// # Safety
/// `tri` and `weights` valid for `cap_tri`; `totals` as written by the triplet kernel.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_update_weights(p: SeedingUpdateWeightsParams) {
    // SAFETY: launch contract: every reservation below the total was written.
    unsafe {
        let c = &*p.cfg.ptr();
        let (tri, weights) = (p.tri.ptr(), p.weights.ptr_mut());
        let n_tri = triplets_fit(p.totals.ptr(), p.cap_mb, p.cap_mt, p.cap_tri);
        let mut k = index();
        while k < n_tri {
            weights
                .add(k as usize)
                .write(triplet_weight(c, tri, n_tri as u32, k as u32));
            k += stride();
        }
    }
}
