//! Track parameters of the seeds.

#[allow(unused_imports)]
use super::device::*;
use super::*;

/// Per seed `s < n_seeds`: its bound parameters from the input spacepoints.
///
/// # Safety
/// `seeds` valid for `n_seeds` with indices into `sps`; `out` for `n_seeds`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn seeding_estimate_params(p: SeedingEstimateParamsParams) {
    let (cfg, sps, seeds, n_seeds, out) = (
        p.cfg.ptr(),
        p.sps.ptr(),
        p.seeds.ptr(),
        p.n_seeds,
        p.out.ptr_mut(),
    );
    let s = index();
    if s >= n_seeds {
        return;
    }
    // SAFETY: launch contract.
    unsafe {
        let c = &*cfg;
        let sd = seeds.add(s as usize).read();
        let pos = |k: u32| {
            let p = &*sps.add(k as usize);
            [p.x, p.y, p.z]
        };
        out.add(s as usize).write(estimate_params(
            c.bfield,
            pos(sd.bottom),
            pos(sd.middle),
            pos(sd.top),
        ));
    }
}
