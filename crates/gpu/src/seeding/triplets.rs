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
    // SAFETY: caller's contract.
    unsafe { find_triplets(&p, false) }
}

/// [`seeding_find_triplets`] where the counting walk visits only the tops that can pass the
/// first cut ([`triplet_cot_cut`]): the middle's tops sorted by cot θ (`sorted`, from
/// [`seeding_sort_tops`]), the window `cot_b ± W` of [`top_window`] found by binary search,
/// and, when the middle's `var_r` is not 0, every top whose cot θ has the other sign than the
/// bottom's (those can pass through a negative `error2`). Every visited top goes through the
/// whole [`triplet_compatible`]; count, first and last compatible top are those of the full
/// walk (the others are rejected by the first cut), so the outputs are the same. A middle
/// with a non-finite window is walked in full.
///
/// # Safety
/// As [`seeding_find_triplets`]; `sorted` and `bounds` written by [`seeding_sort_tops`] for
/// the same doublets.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_find_triplets_sorted(p: SeedingTripletsParams) {
    // SAFETY: caller's contract.
    unsafe { find_triplets(&p, true) }
}

/// First position `j` in `[lo, hi)` of the sorted tops where `before(cot θ)` is false
/// (`before` true on a prefix), `hi` if none.
///
/// # Safety
/// `sorted` valid for `[lo, hi)`.
#[inline(always)]
unsafe fn partition_point(
    sorted: *const SortedTop,
    mut lo: u32,
    mut hi: u32,
    before: impl Fn(f32) -> bool,
) -> u32 {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        // SAFETY: lo <= mid < hi.
        if before(unsafe { (*sorted.add(mid as usize)).cot_theta }) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The body of the triplet kernels; `window`: the sorted variant.
///
/// # Safety
/// As [`seeding_find_triplets_sorted`] (as [`seeding_find_triplets`] without `window`).
#[inline(always)]
unsafe fn find_triplets(p: &SeedingTripletsParams, window: bool) {
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
        let sorted = p.sorted.ptr();
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
            let mut visit = |t: u32| {
                let lt = lc_top.add(t as usize).read();
                if triplet_compatible(c, m, &lb, &lt, isin, scat).is_some() {
                    if t < first {
                        first = t;
                    }
                    if t > last {
                        last = t;
                    }
                    cnt += 1;
                }
            };
            let mut w = f32::INFINITY;
            if window && lo < hi {
                let b = p.bounds.ptr().add(db.middle as usize).read();
                let ct_min = (*sorted.add(lo as usize)).cot_theta.abs();
                let ct_max = (*sorted.add(hi as usize - 1)).cot_theta.abs();
                let max_abs = if ct_max > ct_min { ct_max } else { ct_min };
                w = top_window(m, &lb, &b, max_abs, scat);
            }
            if w < f32::INFINITY {
                let cb = lb.cot_theta;
                let (below, above) = (cb - w, cb + w);
                let w0 = partition_point(sorted, lo, hi, |x| x < below);
                let w1 = partition_point(sorted, w0, hi, |x| x <= above);
                let mut j = w0;
                while j < w1 {
                    visit((*sorted.add(j as usize)).top);
                    j += 1;
                }
                // Tops of the other sign (a prefix or a suffix), outside the window.
                let (mut s0, mut s1) = (lo, lo);
                if m.var_r != 0.0 {
                    if cb > 0.0 {
                        s1 = partition_point(sorted, lo, hi, |x| x < 0.0);
                    } else if cb < 0.0 {
                        s0 = partition_point(sorted, lo, hi, |x| x <= 0.0);
                        s1 = hi;
                    }
                }
                let mut j = s0;
                while j < s1 {
                    if j < w0 || j >= w1 {
                        visit((*sorted.add(j as usize)).top);
                    }
                    j += 1;
                }
            } else {
                let mut t = lo;
                while t < hi {
                    visit(t);
                    t += 1;
                }
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

/// The number of middle–top doublets when both doublet totals fit their capacities, else 0.
///
/// # Safety
/// As [`doublets_fit`].
#[inline(always)]
unsafe fn tops_fit(totals: *const SeedingTotals, cap_mb: u32, cap_mt: u32) -> u64 {
    // SAFETY: caller's contract.
    unsafe {
        if doublets_fit(totals, cap_mb, cap_mt) == 0 {
            0
        } else {
            (*totals).mid_top
        }
    }
}

/// Per middle–top doublet `t` (grid-stride, below the total): its rank among its middle's tops
/// by ([`cot_key`] of cot θ, position), and `sorted[top_start + rank] = (cot θ, t)`; the
/// middle's first top also writes the middle's [`TopBounds`].
///
/// # Safety
/// `top`, `lc_top`, `sorted` valid for `cap_mt`; `n_top`, `top_start`, `bounds` for the
/// middles; `totals` as written by the doublet kernel.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_sort_tops(p: SeedingSortTopsParams) {
    // SAFETY: launch contract: every range read is a middle's own range of tops.
    unsafe {
        let n_mt = tops_fit(p.totals.ptr(), p.cap_mb, p.cap_mt);
        let (top, lc_top) = (p.top.ptr(), p.lc_top.ptr());
        let mut t = index();
        while t < n_mt {
            let t32 = t as u32;
            let mid = top.add(t as usize).read().middle as usize;
            let lo = p.top_start.ptr().add(mid).read();
            let hi = lo + p.n_top.ptr().add(mid).read();
            let ct = (*lc_top.add(t as usize)).cot_theta;
            let k = cot_key(ct);
            let mut rank = 0u32;
            let mut j = lo;
            while j < hi {
                let kj = cot_key((*lc_top.add(j as usize)).cot_theta);
                rank += (kj < k || (kj == k && j < t32)) as u32;
                j += 1;
            }
            p.sorted
                .ptr_mut()
                .add((lo + rank) as usize)
                .write(SortedTop {
                    cot_theta: ct,
                    top: t32,
                });
            if t32 == lo {
                let (mut me, mut mi, mut finite) = (0.0f32, 0.0f32, true);
                let mut j = lo;
                while j < hi {
                    let l = lc_top.add(j as usize).read();
                    finite &=
                        l.cot_theta.is_finite() && l.er.is_finite() && l.i_delta_r.is_finite();
                    if l.er > me {
                        me = l.er;
                    }
                    if l.i_delta_r > mi {
                        mi = l.i_delta_r;
                    }
                    j += 1;
                }
                p.bounds.ptr_mut().add(mid).write(TopBounds {
                    max_er: me,
                    max_i_delta_r: if finite { mi } else { f32::INFINITY },
                });
            }
            t += stride();
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
