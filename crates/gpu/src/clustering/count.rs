//! Stage 1: `count_modules` (module starts, slot lists, digi checks, output resets).

#[allow(unused_imports)]
use super::kernels::*;
use super::*;
use crate::intrinsics as i;

/// Initialises `clus` to [`NOT_CLUSTERED`], `clus_in_module` to zero and `module_first` to
/// [`NO_MODULE_START`], zeroes the later kernels' list counters, and appends every module
/// start to `module_start[1..]` (`module_start[0]` counts them) with its slot record
/// (`module id | event << 16`). Out-of-range module ids and coordinates: the smallest such
/// index is recorded in `bad` ([`crate::histogram::encode_first_index`], zero = none); the
/// digi is treated as invalid. The sizes `n` and `nevents` are read from `dims` on the
/// device, so one captured launch serves any input up to the buffers' capacities.
///
/// These resets used to be six memsets and a fill on the stream; doing them here leaves one
/// memset (`module_start[0]` and `bad`, the two words this kernel counts into) per run.
///
/// # Safety
/// `dims = [n, nevents]`; `module`, `x`, `y`, `clus` valid for `n`; `module_start` for
/// `n + 1` words with `module_start[0] == 0`; `slot_info` for `n` words; `event_offsets` for
/// `nevents + 1` non-decreasing entries from 0 to `n`; `bad` a valid word, zero;
/// `clus_in_module` and `module_first` for `nevents * nmodules` words; each of `counters`
/// null or a valid word that no other kernel uses during this launch.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_count_modules(p: ClusteringCountModulesParams) {
    let (module, x, y, event_offsets, nmodules, rows, cols) = (
        p.module.ptr(),
        p.x.ptr(),
        p.y.ptr(),
        p.event_offsets.ptr(),
        p.nmodules,
        p.rows,
        p.cols,
    );
    let (clus, module_start, slot_info, bad, clus_in_module, module_first) = (
        p.clus.ptr_mut(),
        p.module_start.ptr_mut(),
        p.slot_info.ptr_mut(),
        p.bad.ptr_mut(),
        p.clus_in_module.ptr_mut(),
        p.module_first.ptr_mut(),
    );
    // SAFETY: two words (launch contract).
    let (n, nevents) = unsafe { (p.dims.ptr().read(), p.dims.ptr().add(1).read()) };
    let first = i::global_thread_idx();
    if first == 0 {
        for c in p.counters {
            if c.addr() != 0 {
                // SAFETY: a valid word nobody else uses during this launch (contract).
                unsafe { c.ptr_mut().write(0) };
            }
        }
    }
    let stride = i::grid_threads();
    let nslots = nevents as u64 * nmodules as u64;
    let mut idx = first;
    while idx < nslots {
        // SAFETY: idx < nevents * nmodules.
        unsafe {
            clus_in_module.add(idx as usize).write(0);
            module_first.add(idx as usize).write(NO_MODULE_START);
        }
        idx += stride;
    }
    let mut idx = first;
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
