//! Binning: grid keys of the spacepoints and the gather into bins.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

#[inline(always)]
pub(crate) fn index() -> u64 {
    i::global_thread_idx()
}

/// Grid key (or `nkeys` when invalid) of every spacepoint.
///
/// # Safety
/// `cfg` one config; `sps` valid for `n`; `keys` for `n`. `SEEDING_THREADS` threads,
/// `ceil(n / SEEDING_THREADS)` blocks.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_bin_spacepoints(p: SeedingBinSpacepointsParams) {
    let (cfg, sps, n, keys) = (p.cfg.ptr(), p.sps.ptr(), p.n, p.keys.ptr_mut());
    let g = index();
    if g >= n {
        return;
    }
    // SAFETY: launch contract: g < n.
    unsafe {
        let c = &*cfg;
        let sp = &*sps.add(g as usize);
        keys.add(g as usize).write(grid_key(c, sp.x, sp.y, sp.z));
    }
}

/// `binned[p] = binned(sps[i], i, keys[i] / n_r)` with `i = content[p]`, `p < n_valid`.
///
/// # Safety
/// `content` valid for `n_valid` indices `< len(sps) = len(keys)`; `binned` for `n_valid`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_gather_spacepoints(p: SeedingGatherSpacepointsParams) {
    let (cfg, sps, keys, content, n_valid, out) = (
        p.cfg.ptr(),
        p.sps.ptr(),
        p.keys.ptr(),
        p.content.ptr(),
        p.n_valid,
        p.out.ptr_mut(),
    );
    let p = index();
    if p >= n_valid {
        return;
    }
    // SAFETY: launch contract.
    unsafe {
        let idx = content.add(p as usize).read();
        let sp = &*sps.add(idx as usize);
        let n_r = (*cfg).n_r;
        let bin = keys.add(idx as usize).read() / if n_r == 0 { 1 } else { n_r };
        out.add(p as usize).write(binned(sp, idx, bin));
    }
}
