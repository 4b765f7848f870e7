//! Stage 5: the cluster charge cut of the larger modules.

#[allow(unused_imports)]
use super::kernels::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;

/// Removes clusters whose charge is below the module's threshold (`threshold_layer1` for
/// module ids `< layer1_modules`, else `threshold_other`) and renumbers the survivors in
/// order. `scratch[first + c]` holds cluster `c`'s charge, then its new number.
///
/// Barriers: after zeroing the charges, after summing them, between numbering chunks,
/// and at the end of a module.
///
/// # Safety
/// Launched after the clustering kernels on the same arrays; `adc` valid for `n`;
/// `scratch` for `n` u64; `slots` null (every module slot) or a slot list (`slots[0]` =
/// count); dynamic shared memory [`scan_only_smem_bytes`];
/// `blockDim.x` a multiple of 32.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_cluster_charge_cut(
    p: ClusteringClusterChargeCutParams,
) {
    let (
        adc,
        nmodules,
        layer1_modules,
        threshold_layer1,
        threshold_other,
        module_start,
        slot_info,
        slot_end,
        clus,
        clus_in_module,
        scratch,
        slots,
    ) = (
        p.adc.ptr(),
        p.nmodules,
        p.layer1_modules,
        p.threshold_layer1,
        p.threshold_other,
        p.module_start.ptr(),
        p.slot_info.ptr(),
        p.slot_end.ptr(),
        p.clus.ptr_mut(),
        p.clus_in_module.ptr_mut(),
        p.scratch.ptr_mut(),
        p.slots.ptr(),
    );
    let tid = i::thread_idx_x();
    let bd = i::block_dim_x();
    let smem = i::dynamic_shared_ptr() as *mut u32;
    // SAFETY: scan storage in the dynamic shared memory.
    let bs = unsafe { BlockScan::<u32>::new(smem) };
    // SAFETY: a slot list, or all slots (count written by count_modules).
    let nslots = unsafe {
        if slots.is_null() {
            module_start.read()
        } else {
            slots.read()
        }
    };
    let mut idx = i::block_idx_x();
    while idx < nslots {
        // SAFETY: idx < nslots; slot bounds and records written by the clustering kernels.
        let (first, msize, mid, ev) = unsafe {
            let k = if slots.is_null() {
                idx
            } else {
                slots.add(1 + idx as usize).read()
            } as usize;
            let info = slot_info.add(k).read();
            (
                module_start.add(1 + k).read(),
                slot_end.add(k).read(),
                info & 0xffff,
                info >> 16,
            )
        };
        let slot = (ev * nmodules + mid) as usize;
        // SAFETY: ev < nevents, mid < nmodules.
        let nclus = unsafe { clus_in_module.add(slot).read() };
        let threshold = if mid < layer1_modules {
            threshold_layer1
        } else {
            threshold_other
        };
        if nclus == 0 || threshold == 0 {
            idx += i::grid_dim_x();
            continue;
        }
        let charge = |c: u32| {
            // SAFETY: c < nclus <= msize - first, inside scratch.
            unsafe { scratch.add((first + c) as usize) }
        };
        let mut c = tid;
        while c < nclus {
            // SAFETY: see `charge`.
            unsafe { charge(c).write(0) };
            c += bd;
        }
        i::sync_threads();
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n.
            unsafe {
                let cl = clus.add(d as usize).read();
                if cl >= 0 {
                    i::atomic_add_u64(charge(cl as u32), adc.add(d as usize).read() as u64);
                }
            }
            d += bd;
        }
        i::sync_threads();
        let mut base = 0u32;
        let mut c0 = 0u32;
        while c0 < nclus {
            let c = c0 + tid;
            // SAFETY: see `charge`.
            let keep = c < nclus && unsafe { charge(c).read() } >= threshold as u64;
            let (e, tot) = bs.exclusive_sum(keep as u32);
            if c < nclus {
                let v = if keep { (base + e) as u64 } else { u64::MAX };
                // SAFETY: see `charge`.
                unsafe { charge(c).write(v) };
            }
            base += tot;
            i::sync_threads();
            c0 += bd;
        }
        if base != nclus {
            let mut d = first + tid;
            while d < msize {
                // SAFETY: d < n.
                unsafe {
                    let cl = clus.add(d as usize).read();
                    if cl >= 0 {
                        let v = charge(cl as u32).read();
                        let new = if v == u64::MAX {
                            NOT_CLUSTERED
                        } else {
                            v as i32
                        };
                        clus.add(d as usize).write(new);
                    }
                }
                d += bd;
            }
            if tid == 0 {
                // SAFETY: as above.
                unsafe { clus_in_module.add(slot).write(base) };
            }
        }
        i::sync_threads();
        idx += i::grid_dim_x();
    }
}
