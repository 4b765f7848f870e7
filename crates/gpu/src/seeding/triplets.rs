//! Triplets: count and find (the weight update is in the selection). The doublet and triplet totals live on the
//! device ([`SeedingTotals`]); every kernel here reads them and does nothing when an earlier
//! stage overflowed its capacity (the host then repeats the call with larger buffers).

#[allow(unused_imports)]
use super::device::*;
use super::doublets::read_binned;
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

/// The largest `v` of the warp (all 32 lanes).
#[inline(always)]
fn warp_max(v: u32) -> u32 {
    let mut m = v;
    let mut k = 16;
    while k > 0 {
        let o = i::shfl_xor(m, k);
        if o > m {
            m = o;
        }
        k /= 2;
    }
    m
}

/// Per middle–bottom doublet `d` (grid-stride, below the doublet total), in one pass: the
/// compatible tops of its middle are counted (`tri_cnt[d]`, summed into `totals.triplets`
/// and the event's count), space for them is reserved with one 64-bit atomic
/// (`tri_start[d]`; each doublet's triplets are contiguous, in top order, doublets in any
/// order), and, when the reservation fits `cap_tri`, a second walk from the last compatible
/// top down writes them, last first, until all `cnt` are written (it stops at the first
/// compatible top). Triplets are rare (about one per 16 doublets at ⟨μ⟩ = 200), so the
/// second walk is short and seldom taken.
///
/// The counting walk runs only [`triplet_cot_cut`] per pair (it rejects about 98.6 % of
/// them). A lane whose pair passes keeps it pending (one per lane) and the rest of
/// [`triplet_compatible`] runs for the pending pairs of all lanes together, when a lane with
/// one pending passes again and at the end: at ⟨μ⟩ = 200, 30 % of the warp steps had a pair
/// that passed, 1.4 lanes on average, each running the helix part (four divisions, two
/// roots) with the other lanes idle; deferred, it runs about 60,000 times instead of 229,000,
/// 5.3 lanes each (CPU count over the oracle's doublets). Each lane's pending pairs are
/// tested in top order, so count and last compatible top are those of the plain walk.
///
/// # Safety
/// `bot`, `lc_bot` valid for `cap_mb`, `top_start`/`n_top` give each middle's tops in
/// `top`, `lc_top` (`cap_mt`); `tri_cnt`, `tri_start` for `cap_mb`; `out` for `cap_tri`;
/// `totals` and `events` as written by the doublet kernel; `sps` the binned records (not
/// written during the kernel).
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
        // Warp-uniform loops: every lane reaches every vote and shuffle (the lanes of the
        // last warp past the total take part with no tops).
        while i::any(d < n_mb) {
            let act = d < n_mb;
            let mut db = Doublet::default();
            let mut m = BinnedSp::default();
            let mut lb = LinCircle::default();
            let (mut lo, mut nt) = (0u32, 0u32);
            if act {
                db = bot.add(d as usize).read();
                // A copy (the votes below are `asm!` that may touch memory: fields read
                // through a pointer would be loaded again after each).
                m = read_binned(sps.add(db.middle as usize));
                lb = read_lin_circle(lc_bot.add(d as usize));
                lo = p.top_start.ptr().add(db.middle as usize).read();
                nt = p.n_top.ptr().add(db.middle as usize).read();
            }
            let (isin, scat) = bottom_scattering(c, &lb);
            let steps = warp_max(nt);
            let mut cnt = 0u32;
            let mut last = lo;
            let (mut pending, mut pt) = (false, 0u32);
            let mut s = 0u32;
            while s < steps {
                let t = lo + s;
                let mut pass = false;
                if s < nt {
                    let lt = read_lin_circle(lc_top.add(t as usize));
                    pass = triplet_cot_cut(&m, &lb, &lt, scat).is_some();
                }
                if i::any(pass & pending) {
                    if pending {
                        let lt = read_lin_circle(lc_top.add(pt as usize));
                        if triplet_compatible(c, &m, &lb, &lt, isin, scat).is_some() {
                            last = pt;
                            cnt += 1;
                        }
                    }
                    pending = false;
                }
                if pass {
                    pending = true;
                    pt = t;
                }
                s += 1;
            }
            if pending {
                let lt = read_lin_circle(lc_top.add(pt as usize));
                if triplet_compatible(c, &m, &lb, &lt, isin, scat).is_some() {
                    last = pt;
                    cnt += 1;
                }
            }
            if act {
                p.tri_cnt.ptr_mut().add(d as usize).write(cnt);
            }
            if act && cnt != 0 {
                let tot = p.totals.ptr_mut();
                let start = i::atomic_add_u64(core::ptr::addr_of_mut!((*tot).triplets), cnt as u64);
                let ev = p.events.ptr_mut().add((m.bin / nbins) as usize);
                i::atomic_add_u32(core::ptr::addr_of_mut!((*ev).triplets), cnt);
                p.tri_start.ptr_mut().add(d as usize).write(start as u32);
                if start + cnt as u64 <= p.cap_tri as u64 {
                    let sb = &*sps.add(db.other as usize);
                    let (b_index, r_bottom) = (sb.index, sb.r);
                    // Positions start + cnt - 1 down to start, tops from `last` down.
                    let mut w = start as usize + cnt as usize;
                    let mut t = last + 1;
                    while w > start as usize && t > lo {
                        t -= 1;
                        let lt = read_lin_circle(lc_top.add(t as usize));
                        if let Some((curv, impact)) =
                            triplet_compatible(c, &m, &lb, &lt, isin, scat)
                        {
                            let st = &*sps.add(top.add(t as usize).read().other as usize);
                            w -= 1;
                            out.add(w).write(Triplet {
                                bottom: b_index,
                                middle: m.index,
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
