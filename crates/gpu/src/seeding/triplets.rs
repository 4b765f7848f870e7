//! Triplets: count, find and the weight update. The doublet and triplet totals live on the
//! device ([`SeedingTotals`]); every kernel here reads them and does nothing when an earlier
//! stage overflowed its capacity (the host then repeats the call with larger buffers).

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

/// Per middle–bottom doublet `d` (grid-stride, below the doublet total), in one pass: the
/// compatible tops of its middle are counted (`tri_cnt[d]`, summed into `totals.triplets`
/// and the event's count), space for them is reserved with one 64-bit atomic
/// (`tri_start[d]`; each doublet's triplets are contiguous, in top order, doublets in any
/// order), and, when the reservation fits `cap_tri`, a second walk over the tops between the
/// first and the last compatible one writes them. Triplets are rare (about one per 16
/// doublets at ⟨μ⟩ = 200), so the second walk is short and seldom taken.
///
/// # Safety
/// `bot`, `lc_bot` valid for `cap_mb`, `top_start`/`n_top` give each middle's tops in
/// `top`, `lc_top` (`cap_mt`); `tri_cnt`, `tri_start` for `cap_mb`; `out` for `cap_tri`;
/// `totals` and `events` as written by the doublet kernel.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_find_triplets(p: SeedingTripletsParams) {
    // SAFETY: launch contract.
    unsafe {
        let c = &*p.cfg.ptr();
        let (sps, bot, lc_bot, lc_top, top) = (
            p.sps.ptr(),
            p.bot.ptr(),
            p.lc_bot.ptr(),
            p.lc_top.ptr(),
            p.top.ptr(),
        );
        let n_mb = doublets_fit(p.totals.ptr(), p.cap_mb, p.cap_mt);
        let out = p.out.ptr_mut();
        let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
        let mut d = index();
        while d < n_mb {
            let db = bot.add(d as usize).read();
            let m = &*sps.add(db.middle as usize);
            let lb = lc_bot.add(d as usize).read();
            let (isin, scat) = bottom_scattering(c, &lb);
            let lo = p.top_start.ptr().add(db.middle as usize).read();
            let hi = lo + p.n_top.ptr().add(db.middle as usize).read();
            let mut cnt = 0u32;
            let (mut first, mut last) = (hi, lo);
            let mut t = lo;
            while t < hi {
                let lt = lc_top.add(t as usize).read();
                if triplet_compatible(c, m, &lb, &lt, isin, scat).is_some() {
                    if cnt == 0 {
                        first = t;
                    }
                    last = t;
                    cnt += 1;
                }
                t += 1;
            }
            p.tri_cnt.ptr_mut().add(d as usize).write(cnt);
            if cnt != 0 {
                let tot = p.totals.ptr_mut();
                let start = i::atomic_add_u64(core::ptr::addr_of_mut!((*tot).triplets), cnt as u64);
                let ev = p.events.ptr_mut().add((m.bin / nbins) as usize);
                i::atomic_add_u32(core::ptr::addr_of_mut!((*ev).triplets), cnt);
                p.tri_start.ptr_mut().add(d as usize).write(start as u32);
                if start + cnt as u64 <= p.cap_tri as u64 {
                    let mut w = start as usize;
                    let mut t = first;
                    while t <= last {
                        let lt = lc_top.add(t as usize).read();
                        if let Some((curv, impact)) = triplet_compatible(c, m, &lb, &lt, isin, scat)
                        {
                            let dt = top.add(t as usize).read();
                            out.add(w).write(Triplet {
                                bottom: db.other,
                                middle: db.middle,
                                top: dt.other,
                                mb: d as u32,
                                curvature: curv,
                                weight: impact_weight(c, impact),
                                z_vertex: lb.zo,
                                r_top: (*sps.add(dt.other as usize)).r,
                            });
                            w += 1;
                        }
                        t += 1;
                    }
                }
            }
            d += stride();
        }
    }
}

/// [`seeding_find_triplets`] with the first cut on full warps: the same mapping (one thread
/// per middle–bottom doublet, grid-stride) and the same outputs, but each lane first tests only
/// [`triplet_cot_cut`] against its tops (the cheap cut that rejects most pairs); the pairs that
/// pass go, in order, into a ring of `TRIPLET_QUEUE` `(top, lane)` entries in the warp's shared
/// memory, and whenever it holds 32 (and at the end) all 32 lanes run the whole
/// [`triplet_compatible`] on 32 of them, with the owning lane's doublet fetched by shuffles.
/// The owners' counts and first and last compatible tops are kept in shared memory (one lane
/// per owner writes them per round, found with `match.any`), so each doublet's count, first
/// and last equal the thread-per-doublet walk's; the writing walk is the same.
///
/// # Safety
/// As [`seeding_find_triplets`]; `SEEDING_THREADS` threads per block and
/// `triplet_smem_bytes()` of dynamic shared memory.
#[inline(always)]
unsafe fn find_triplets_ring(p: &SeedingTripletsParams) {
    // SAFETY: launch contract.
    unsafe {
        let c = &*p.cfg.ptr();
        let (sps, bot, lc_bot, lc_top, top) = (
            p.sps.ptr(),
            p.bot.ptr(),
            p.lc_bot.ptr(),
            p.lc_top.ptr(),
            p.top.ptr(),
        );
        let n_mb = doublets_fit(p.totals.ptr(), p.cap_mb, p.cap_mt);
        let out = p.out.ptr_mut();
        let nbins = if c.nbins() == 0 { 1 } else { c.nbins() };
        let lane = i::lane_id();
        let below = i::lanemask_lt();
        let ring = i::shared_base() + i::warp_id() * TRIPLET_WARP_WORDS * 4;
        let cnt_s = ring + TRIPLET_QUEUE * 8 + lane * 4;
        let first_s = cnt_s + 32 * 4;
        let last_s = first_s + 32 * 4;
        let f = |x: f32, l: u32| f32::from_bits(i::shfl_idx(x.to_bits(), l));
        let mut d = index();
        // Warp-uniform loops: every lane reaches every shuffle, ballot and warp barrier (the
        // stride is a multiple of 32, so a warp's lanes leave the loop together).
        while i::any(d < n_mb) {
            let active = d < n_mb;
            let mut db = Doublet::default();
            let mut lb = LinCircle::default();
            let mut m = BinnedSp::default();
            let (mut lo, mut hi) = (0u32, 0u32);
            if active {
                db = bot.add(d as usize).read();
                let mp = sps.add(db.middle as usize);
                // The fields the triplet cuts and the event index read.
                m.r = (*mp).r;
                m.var_r = (*mp).var_r;
                m.var_z = (*mp).var_z;
                m.bin = (*mp).bin;
                lb = lc_bot.add(d as usize).read();
                lo = p.top_start.ptr().add(db.middle as usize).read();
                hi = lo + p.n_top.ptr().add(db.middle as usize).read();
            }
            let (isin, scat) = bottom_scattering(c, &lb);
            // Only this lane reads its count; other lanes write it after a warp barrier.
            i::st_shared_u32(cnt_s, 0);
            let (mut head, mut queued) = (0u32, 0u32);
            let mut t = lo;
            loop {
                let has = t < hi;
                let more = i::any(has);
                if more {
                    let mut ok = false;
                    if has {
                        let lt = lc_top.add(t as usize).read();
                        ok = triplet_cot_cut(&m, &lb, &lt, scat).pass;
                    }
                    let mask = i::ballot(ok);
                    if ok {
                        let at = (head + queued + i::popc(mask & below)) % TRIPLET_QUEUE;
                        // SAFETY: at < TRIPLET_QUEUE: inside this warp's ring; the slot is
                        // free (queued < 32 before this step, so at most 63 are live).
                        i::st_shared_v2_u32(ring + at * 8, [t, lane]);
                    }
                    queued += i::popc(mask);
                    t += 1;
                }
                while queued >= 32 || (!more && queued > 0) {
                    // The ring entries written above are read by other lanes below.
                    i::sync_warp();
                    let take = if queued < 32 { queued } else { 32 };
                    let mut e = [0u32, lane];
                    if lane < take {
                        e = i::ld_shared_v2_u32(ring + ((head + lane) % TRIPLET_QUEUE) * 8);
                    }
                    let o = e[1];
                    let om = BinnedSp {
                        r: f(m.r, o),
                        var_r: f(m.var_r, o),
                        var_z: f(m.var_z, o),
                        ..BinnedSp::default()
                    };
                    let olb = LinCircle {
                        cot_theta: f(lb.cot_theta, o),
                        zo: 0.0,
                        u: f(lb.u, o),
                        v: f(lb.v, o),
                        er: f(lb.er, o),
                        i_delta_r: f(lb.i_delta_r, o),
                    };
                    let (oisin, oscat) = (f(isin, o), f(scat, o));
                    let mut ok2 = false;
                    if lane < take {
                        let lt = lc_top.add(e[0] as usize).read();
                        ok2 = triplet_compatible(c, &om, &olb, &lt, oisin, oscat).is_some();
                    }
                    // Lanes of one owner in this round, in ring (= top) order.
                    let grp = i::match_any(if ok2 { o } else { 32 + lane });
                    if ok2 {
                        let (cs, fs, ls) = (
                            cnt_s - lane * 4 + o * 4,
                            first_s - lane * 4 + o * 4,
                            last_s - lane * 4 + o * 4,
                        );
                        if lane == i::lowest_bit(grp) {
                            let old = i::ld_shared_u32(cs);
                            i::st_shared_u32(cs, old + i::popc(grp));
                            if old == 0 {
                                i::st_shared_u32(fs, e[0]);
                            }
                        }
                        if lane == 31 - i::clz(grp) {
                            i::st_shared_u32(ls, e[0]);
                        }
                    }
                    head = (head + take) % TRIPLET_QUEUE;
                    queued -= take;
                    // The slots and counts just written are read again below.
                    i::sync_warp();
                }
                if !more {
                    break;
                }
            }
            if active {
                let cnt = i::ld_shared_u32(cnt_s);
                p.tri_cnt.ptr_mut().add(d as usize).write(cnt);
                if cnt != 0 {
                    let (first, last) = (i::ld_shared_u32(first_s), i::ld_shared_u32(last_s));
                    let tot = p.totals.ptr_mut();
                    let start =
                        i::atomic_add_u64(core::ptr::addr_of_mut!((*tot).triplets), cnt as u64);
                    let ev = p.events.ptr_mut().add((m.bin / nbins) as usize);
                    i::atomic_add_u32(core::ptr::addr_of_mut!((*ev).triplets), cnt);
                    p.tri_start.ptr_mut().add(d as usize).write(start as u32);
                    if start + cnt as u64 <= p.cap_tri as u64 {
                        let mut w = start as usize;
                        let mut t = first;
                        while t <= last {
                            let lt = lc_top.add(t as usize).read();
                            if let Some((curv, impact)) =
                                triplet_compatible(c, &m, &lb, &lt, isin, scat)
                            {
                                let dt = top.add(t as usize).read();
                                out.add(w).write(Triplet {
                                    bottom: db.other,
                                    middle: db.middle,
                                    top: dt.other,
                                    mb: d as u32,
                                    curvature: curv,
                                    weight: impact_weight(c, impact),
                                    z_vertex: lb.zo,
                                    r_top: (*sps.add(dt.other as usize)).r,
                                });
                                w += 1;
                            }
                            t += 1;
                        }
                    }
                }
            }
            d += stride();
        }
    }
}

/// See [`find_triplets_ring`].
///
/// # Safety
/// As [`find_triplets_ring`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_find_triplets_ring(p: SeedingTripletsParams) {
    // SAFETY: caller's contract.
    unsafe { find_triplets_ring(&p) }
}

/// [`seeding_find_triplets_ring`] under a launch bound (`LAUNCH_BOUNDS`: fewer registers).
///
/// # Safety
/// As [`find_triplets_ring`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_find_triplets_ring_lb(p: SeedingTripletsParams) {
    // SAFETY: caller's contract.
    unsafe { find_triplets_ring(&p) }
}

/// The number of triplets when every total fits its capacity, else 0.
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

/// Per triplet (grid-stride): the compatible-seed weight update into `weights[k]`, over
/// the triplets of its middle–bottom doublet (`tri_start[mb]`, `tri_cnt[mb]`).
///
/// # Safety
/// `tri` valid for `cap_tri`; `tri_cnt`, `tri_start` for `cap_mb`; `weights` for `cap_tri`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_update_weights(p: SeedingUpdateWeightsParams) {
    // SAFETY: launch contract: the group [tri_start[mb], + tri_cnt[mb]) contains k.
    unsafe {
        let c = &*p.cfg.ptr();
        let (tri, weights) = (p.tri.ptr(), p.weights.ptr_mut());
        let n_tri = triplets_fit(p.totals.ptr(), p.cap_mb, p.cap_mt, p.cap_tri);
        let mut k = index();
        while k < n_tri {
            let t = tri.add(k as usize).read();
            let lo = p.tri_start.ptr().add(t.mb as usize).read();
            let len = p.tri_cnt.ptr().add(t.mb as usize).read();
            let group = tri.add(lo as usize);
            let w = updated_weight(c, k as u32 - lo, len, t.weight, |j| {
                let o = &*group.add(j as usize);
                (o.curvature, o.r_top)
            });
            weights.add(k as usize).write(w);
            k += stride();
        }
    }
}
