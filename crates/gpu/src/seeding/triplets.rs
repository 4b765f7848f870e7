//! Triplets: count, find and the weight update.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// Per middle–bottom doublet `d < n_mb`: the number of compatible tops; sum into
/// `total` (u64).
///
/// # Safety
/// `bot`, `lc_bot` valid for `n_mb`; `off_top` holds `n + 1` offsets (exclusive scan
/// with total) into `lc_top`; `counts` for `n_mb`; `total` one zeroed u64.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_count_triplets(p: SeedingCountTripletsParams) {
    let (cfg, sps, bot, lc_bot, n_mb, off_top, lc_top, counts, total) = (
        p.cfg.ptr(),
        p.sps.ptr(),
        p.bot.ptr(),
        p.lc_bot.ptr(),
        p.n_mb,
        p.off_top.ptr(),
        p.lc_top.ptr(),
        p.counts.ptr_mut(),
        p.total.ptr_mut(),
    );
    let d = index();
    if d >= n_mb {
        return;
    }
    // SAFETY: launch contract.
    unsafe {
        let c = &*cfg;
        let db = bot.add(d as usize).read();
        let m = &*sps.add(db.middle as usize);
        let lb = lc_bot.add(d as usize).read();
        let (isin, scat) = bottom_scattering(c, &lb);
        let lo = off_top.add(db.middle as usize).read();
        let hi = off_top.add(db.middle as usize + 1).read();
        let mut cnt = 0u32;
        let mut t = lo;
        while t < hi {
            let lt = lc_top.add(t as usize).read();
            cnt += triplet_compatible(c, m, &lb, &lt, isin, scat).is_some() as u32;
            t += 1;
        }
        counts.add(d as usize).write(cnt);
        if cnt != 0 {
            i::atomic_add_u64(total, cnt as u64);
        }
    }
}

/// Per middle–bottom doublet `d < n_mb`: its triplets at `off_tri[d]..`.
///
/// # Safety
/// As [`seeding_count_triplets`]; `top` valid like `lc_top`; `off_tri` the exclusive
/// scan of its counts; `out` holds the triplet total.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_find_triplets(p: SeedingFindTripletsParams) {
    let (cfg, sps, bot, lc_bot, n_mb, off_top, top, lc_top, off_tri, out) = (
        p.cfg.ptr(),
        p.sps.ptr(),
        p.bot.ptr(),
        p.lc_bot.ptr(),
        p.n_mb,
        p.off_top.ptr(),
        p.top.ptr(),
        p.lc_top.ptr(),
        p.off_tri.ptr(),
        p.out.ptr_mut(),
    );
    let d = index();
    if d >= n_mb {
        return;
    }
    // SAFETY: launch contract.
    unsafe {
        let c = &*cfg;
        let db = bot.add(d as usize).read();
        let m = &*sps.add(db.middle as usize);
        let lb = lc_bot.add(d as usize).read();
        let (isin, scat) = bottom_scattering(c, &lb);
        let lo = off_top.add(db.middle as usize).read();
        let hi = off_top.add(db.middle as usize + 1).read();
        let mut w = off_tri.add(d as usize).read() as usize;
        let mut t = lo;
        while t < hi {
            let lt = lc_top.add(t as usize).read();
            if let Some((curv, impact)) = triplet_compatible(c, m, &lb, &lt, isin, scat) {
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

/// Per triplet `k < n_tri`: the compatible-seed weight update into `weights[k]`.
///
/// # Safety
/// `tri` valid for `n_tri`; `off_tri` holds `n_mb + 1` offsets; `weights` for `n_tri`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_update_weights(p: SeedingUpdateWeightsParams) {
    let (cfg, tri, n_tri, off_tri, weights) = (
        p.cfg.ptr(),
        p.tri.ptr(),
        p.n_tri,
        p.off_tri.ptr(),
        p.weights.ptr_mut(),
    );
    let k = index();
    if k >= n_tri {
        return;
    }
    // SAFETY: launch contract: the group [off_tri[mb], off_tri[mb + 1]) contains k.
    unsafe {
        let c = &*cfg;
        let t = tri.add(k as usize).read();
        let lo = off_tri.add(t.mb as usize).read();
        let hi = off_tri.add(t.mb as usize + 1).read();
        let group = tri.add(lo as usize);
        let w = updated_weight(c, k as u32 - lo, hi - lo, t.weight, |j| {
            let o = &*group.add(j as usize);
            (o.curvature, o.r_top)
        });
        weights.add(k as usize).write(w);
    }
}
