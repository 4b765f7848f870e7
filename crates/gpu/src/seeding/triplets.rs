//! Triplets: count and find (the weight update is in the selection). The doublet and triplet totals live on the
//! device ([`SeedingTotals`]); every kernel here reads them and does nothing when an earlier
//! stage overflowed its capacity (the host then repeats the call with larger buffers).

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// `*p` as three 64-bit loads (the generic read of a 4-aligned record is six 32-bit loads).
///
/// # Safety
/// `p` valid and 8-byte aligned (a device allocation of `LinCircle`s: 24-byte records from a
/// 256-byte aligned base).
#[inline(always)]
pub(crate) unsafe fn read_lin_circle(p: *const LinCircle) -> LinCircle {
    let q = p as *const u64;
    // SAFETY: caller's contract: three aligned words of the record.
    let (a, b, c) = unsafe { (q.read(), q.add(1).read(), q.add(2).read()) };
    let lo = |w: u64| f32::from_bits(w as u32);
    let hi = |w: u64| f32::from_bits((w >> 32) as u32);
    LinCircle {
        cot_theta: lo(a),
        zo: hi(a),
        u: lo(b),
        v: hi(b),
        er: lo(c),
        i_delta_r: hi(c),
    }
}

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
/// order), and, when the reservation fits `cap_tri`, a second walk from the last compatible
/// top down writes them, last first, until all `cnt` are written (it stops at the first
/// compatible top). Triplets are rare (about one per 16 doublets at ⟨μ⟩ = 200), so the
/// second walk is short and seldom taken. The counting walk keeps only the count and the
/// last compatible top; it takes the tops `TRIPLET_GROUP` at a time and decides most of them
/// from their cot θ and the middle's `top_bounds` ([`triplet_bound_rejects`]).
///
/// # Safety
/// `bot`, `lc_bot` valid for `cap_mb`, `top_start`/`n_top` give each middle's tops in
/// `top`, `lc_top` (`cap_mt`); `tri_cnt`, `tri_start` for `cap_mb`; `out` for `cap_tri`;
/// `totals`, `events` and `top_bounds` (each middle's [`TopBounds`], 16-byte aligned) as
/// written by the doublet kernel.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_find_triplets(p: SeedingTripletsParams) {
    // SAFETY: launch contract.
    unsafe {
        let c = &p.cfg;
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
            let lb = read_lin_circle(lc_bot.add(d as usize));
            let (isin, scat) = bottom_scattering(c, &lb);
            let threshold = triplet_reject_threshold(scat);
            let lo = p.top_start.ptr().add(db.middle as usize).read();
            let hi = lo + p.n_top.ptr().add(db.middle as usize).read();
            let tb = {
                let w = i::ldg_v4_u32(p.top_bounds.ptr().add(db.middle as usize) as *const u32);
                TopBounds {
                    max_er: f32::from_bits(w[0]),
                    max_i_delta_r: f32::from_bits(w[1]),
                    max_abs_cot: f32::from_bits(w[2]),
                    min_er_idr: f32::from_bits(w[3]),
                }
            };
            let c1 = triplet_reject_bound(m, &lb, &tb);
            let mut cnt = 0u32;
            let mut last = lo;
            let mut t = lo;
            // Most pairs are rejected by the first cut: decided from the top's cot θ alone
            // when the middle's bounds prove it (`triplet_bound_rejects`: 94 % of the pairs
            // at ⟨μ⟩ = 200), else without its square root when that is certain
            // (`triplet_surely_rejected`), else by the exact test. `TRIPLET_GROUP` tops at a
            // time: their cot θ loaded together (one load latency per group: with one top
            // per step, the test waited on its load in 20 % of the stall samples, Nsight
            // Compute), then the tops the bounds do not decide, in order.
            // Straight-line code per group: past the last top the loads repeat it (inside
            // the range) and a mask drops their bits.
            while t < hi {
                let left = hi - t;
                let mut cots = [0f32; TRIPLET_GROUP as usize];
                let mut j = 0;
                while j < TRIPLET_GROUP {
                    let u = if j < left { t + j } else { hi - 1 };
                    cots[j as usize] = (lc_top.add(u as usize) as *const f32).read();
                    j += 1;
                }
                let mut need = 0u32;
                let mut j = 0;
                while j < TRIPLET_GROUP {
                    let decided =
                        triplet_bound_rejects(c1, lb.cot_theta, cots[j as usize], threshold);
                    need |= (!decided as u32) << j;
                    j += 1;
                }
                if left < TRIPLET_GROUP {
                    need &= (1 << left) - 1;
                }
                while need != 0 {
                    let u = t + i::lowest_bit(need);
                    need &= need - 1;
                    let lt = read_lin_circle(lc_top.add(u as usize));
                    if !triplet_surely_rejected(m, &lb, &lt, threshold)
                        && triplet_compatible(c, m, &lb, &lt, isin, scat).is_some()
                    {
                        last = u;
                        cnt += 1;
                    }
                }
                if left <= TRIPLET_GROUP {
                    break;
                }
                t += TRIPLET_GROUP;
            }
            p.tri_cnt.ptr_mut().add(d as usize).write(cnt);
            if cnt != 0 {
                let tot = p.totals.ptr_mut();
                let start = i::atomic_add_u64(core::ptr::addr_of_mut!((*tot).triplets), cnt as u64);
                let ev = p.events.ptr_mut().add((m.bin / nbins) as usize);
                i::atomic_add_u32(core::ptr::addr_of_mut!((*ev).triplets), cnt);
                p.tri_start.ptr_mut().add(d as usize).write(start as u32);
                if start + cnt as u64 <= p.cap_tri as u64 {
                    let sb = &*sps.add(db.other as usize);
                    let (b_index, r_bottom, m_index) = (sb.index, sb.r, m.index);
                    // Positions start + cnt - 1 down to start, tops from `last` down.
                    let mut w = start as usize + cnt as usize;
                    let mut t = last + 1;
                    while w > start as usize && t > lo {
                        t -= 1;
                        let lt = read_lin_circle(lc_top.add(t as usize));
                        if let Some((curv, impact)) = triplet_compatible(c, m, &lb, &lt, isin, scat)
                        {
                            let st = &*sps.add(top.add(t as usize).read().other as usize);
                            w -= 1;
                            out.add(w).write(Triplet {
                                bottom: b_index,
                                middle: m_index,
                                top: st.index,
                                r_bottom,
                                curvature: curv,
                                r_top: st.r,
                                weight: impact_weight(c, impact),
                                z_vertex: lb.zo,
                            });
                        }
                    }
                }
            }
            d += stride();
        }
    }
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
