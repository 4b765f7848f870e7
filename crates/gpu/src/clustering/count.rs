//! Stage 1: `count_modules` (module starts, slot lists, digi checks).

#[allow(unused_imports)]
use super::kernels::*;
use super::*;
use crate::intrinsics as i;

/// Initialises `clus` to [`NOT_CLUSTERED`] and appends every module start to
/// `module_start[1..]` (`module_start[0]` counts them). Out-of-range module ids and
/// coordinates: the smallest such index is recorded in `bad`
/// ([`crate::histogram::encode_first_index`], zero = none); the digi is treated as invalid.
///
/// # Safety
/// `module`, `x`, `y`, `clus` valid for `n`; `module_start` for `n + 1` words with
/// `module_start[0] == 0`; `event_offsets` for `nevents + 1` non-decreasing entries from 0
/// to `n`; `bad` a valid word.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_count_modules(p: ClusteringCountModulesParams) {
    let (
        module,
        x,
        y,
        n,
        event_offsets,
        nevents,
        nmodules,
        rows,
        cols,
        clus,
        module_start,
        slot_info,
        bad,
    ) = (
        p.module.ptr(),
        p.x.ptr(),
        p.y.ptr(),
        p.n,
        p.event_offsets.ptr(),
        p.nevents,
        p.nmodules,
        p.rows,
        p.cols,
        p.clus.ptr_mut(),
        p.module_start.ptr_mut(),
        p.slot_info.ptr_mut(),
        p.bad.ptr_mut(),
    );
    let mut idx = i::global_thread_idx();
    let stride = i::grid_threads();
    while idx < n as u64 {
        let k = idx as u32;
        // SAFETY: k < n for every array.
        unsafe {
            clus.add(k as usize).write(NOT_CLUSTERED);
            let m = module.add(k as usize).read();
            if m != INVALID_MODULE {
                if m as u32 >= nmodules
                    || x.add(k as usize).read() as u32 >= rows
                    || y.add(k as usize).read() as u32 >= cols
                {
                    i::atomic_max_u32(bad, crate::histogram::encode_first_index(k));
                } else {
                    let (ev, start, _) = event_bounds(event_offsets, nevents, k);
                    let mut j = k;
                    let mut prev = INVALID_MODULE;
                    while j > start {
                        j -= 1;
                        let mj = module.add(j as usize).read();
                        if mj != INVALID_MODULE {
                            prev = mj;
                            break;
                        }
                    }
                    if prev != m {
                        let slot = i::atomic_add_u32(module_start, 1);
                        module_start.add(1 + slot as usize).write(k);
                        slot_info.add(slot as usize).write(m as u32 | (ev << 16));
                    }
                }
            }
        }
        idx += stride;
    }
}
