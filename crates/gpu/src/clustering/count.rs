//! Stage 1: `count_modules` (module starts, slot lists, digi checks, output resets).

#[allow(unused_imports)]
use super::kernels::*;
use super::*;
use crate::intrinsics as i;

/// Phase [`COUNT_PHASE_COUNT`]: initialises `clus` to [`NOT_CLUSTERED`], `clus_in_module` to
/// zero and `module_first` to [`NO_MODULE_START`], zeroes the later kernels' list counters,
/// appends every module start to `module_start[1..]` (`module_start[0]` counts them) with its
/// slot record (`module id | event << 16`), and writes every module's end to `module_end`
/// (by event and module id: the thread of the module's last non-invalid digi knows it, the
/// next non-invalid digi of the event or the event's end). Out-of-range module ids and
/// coordinates: the smallest such index is recorded in `bad`
/// ([`crate::histogram::encode_first_index`], zero = none); the digi starts no module. The
/// sizes `n` and `nevents` are read from `dims` on the device, so one captured launch serves
/// any input up to the buffers' capacities.
///
/// Phase [`COUNT_PHASE_SORT`] (a second launch): per module slot, its end (`module_end`
/// clamped to the slot's event, so that even unvalidated input, whose module ids may repeat
/// within an event, stays in bounds) to `slot_end`, and the slot appended to the first of
/// `lists[0..4]` whose cap holds its size, else to `lists[4]` (warp-aggregated appends).
/// The passes that read the lists are independent and can run concurrently (the fallback
/// beside the shared-memory kernel since issue 13's session 5: before, the shared-memory
/// kernel listed the modules over its capacity for the fallback after it).
///
/// These resets used to be six memsets and a fill on the stream; doing them here leaves one
/// memset (`module_start[0]` and `bad`, the two words this kernel counts into) per run.
///
/// # Safety
/// `dims = [n, nevents]`; `module`, `x`, `y`, `clus` valid for `n`; `module_start` for
/// `n + 1` words with `module_start[0] == 0` (count phase; the count phase's result in the
/// sort phase); `slot_info` and `slot_end` for `n` words; `event_offsets` for `nevents + 1`
/// non-decreasing entries from 0 to `n`; `bad` a valid word, zero; `clus_in_module`,
/// `module_first` and `module_end` for `nevents * nmodules` words; each of `counters` null or
/// a valid word that no other kernel uses during this launch; in the sort phase each of
/// `lists` valid for `n + 1` words with `list[0] == 0`; `blockDim.x` a multiple of 32.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_count_modules(p: ClusteringCountModulesParams) {
    if p.phase == COUNT_PHASE_SORT {
        // SAFETY: forwarded launch contract.
        unsafe { sort_slots(&p) };
        return;
    }
    let (module, x, y, event_offsets, nmodules, rows, cols) = (
        p.module.ptr(),
        p.x.ptr(),
        p.y.ptr(),
        p.event_offsets.ptr(),
        p.nmodules,
        p.rows,
        p.cols,
    );
    let (clus, module_start, slot_info, bad, clus_in_module, module_first, module_end) = (
        p.clus.ptr_mut(),
        p.module_start.ptr_mut(),
        p.slot_info.ptr_mut(),
        p.bad.ptr_mut(),
        p.clus_in_module.ptr_mut(),
        p.module_first.ptr_mut(),
        p.module_end.ptr_mut(),
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
        // SAFETY: k < n for every array; j < ev_end <= n; ev < nevents and m < nmodules.
        unsafe {
            clus.add(k as usize).write(NOT_CLUSTERED);
            let m = module.add(k as usize).read();
            if m != INVALID_MODULE {
                if m as u32 >= nmodules {
                    i::atomic_max_u32(bad, crate::histogram::encode_first_index(k));
                } else {
                    let (ev, start, ev_end) = event_bounds(event_offsets, nevents, k);
                    // The module's end, from its last non-invalid digi (a digi with bad
                    // coordinates too: the later kernels' module end counts it).
                    let mut j = k + 1;
                    while j < ev_end && module.add(j as usize).read() == INVALID_MODULE {
                        j += 1;
                    }
                    if j == ev_end || module.add(j as usize).read() != m {
                        module_end.add((ev * nmodules + m as u32) as usize).write(j);
                    }
                    if x.add(k as usize).read() as u32 >= rows
                        || y.add(k as usize).read() as u32 >= cols
                    {
                        i::atomic_max_u32(bad, crate::histogram::encode_first_index(k));
                    } else {
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
        }
        idx += stride;
    }
}

/// The sort phase of [`clustering_count_modules`]: one thread per module slot, whole warps
/// per loop step (the appends are warp-aggregated: one atomic per warp and list).
///
/// # Safety
/// As [`clustering_count_modules`], sort phase.
#[inline(always)]
unsafe fn sort_slots(p: &ClusteringCountModulesParams) {
    let (module_start, slot_info, event_offsets, module_end, slot_end, nmodules) = (
        p.module_start.ptr(),
        p.slot_info.ptr(),
        p.event_offsets.ptr(),
        p.module_end.ptr(),
        p.slot_end.ptr_mut(),
        p.nmodules,
    );
    // SAFETY: the count phase's slot count (launch contract).
    let nslots = unsafe { module_start.read() };
    let lane = i::lane_id();
    let lt_mask = i::lanemask_lt();
    let stride = i::grid_threads() as u32;
    // Warp-uniform loop: every lane of a warp runs the same iterations (ballots below).
    let mut base = i::global_thread_idx() as u32 - lane;
    while base < nslots {
        let s = base + lane;
        let valid = s < nslots;
        let mut list = 5u32;
        if valid {
            // SAFETY: s < nslots: a slot written by the count phase; its event < nevents and
            // module < nmodules; the event's end <= n.
            unsafe {
                let first = module_start.add(1 + s as usize).read();
                let info = slot_info.add(s as usize).read();
                let (ev, m) = (info >> 16, info & 0xffff);
                let ev_end = event_offsets.add(ev as usize + 1).read();
                let end = module_end
                    .add((ev * nmodules + m) as usize)
                    .read()
                    .max(first + 1)
                    .min(ev_end);
                slot_end.add(s as usize).write(end);
                let size = end - first;
                list = if size <= p.caps[0] {
                    0
                } else if size <= p.caps[1] {
                    1
                } else if size <= p.caps[2] {
                    2
                } else if size <= p.caps[3] {
                    3
                } else {
                    4
                };
            }
        }
        for (l, dst) in p.lists.iter().enumerate() {
            let mask = i::ballot(list == l as u32);
            if mask == 0 {
                continue;
            }
            let leader = i::lowest_bit(mask);
            let mut at = 0u32;
            if lane == leader {
                // SAFETY: a valid list counter (contract).
                at = unsafe { i::atomic_add_u32(dst.ptr_mut(), i::popc(mask)) };
            }
            let at = i::shfl_idx(at, leader);
            if list == l as u32 {
                // SAFETY: at most nslots <= n slots are appended in all.
                unsafe {
                    dst.ptr_mut()
                        .add(1 + (at + i::popc(mask & lt_mask)) as usize)
                        .write(s)
                };
            }
        }
        base += stride;
    }
}

/// One thread per digi (grid-stride): a digi of a valid module id that starts a run of its
/// module in its event ([`starts_run`]) counts the run in `runs[event * nmodules + m]`; the
/// second and later runs record their digi in `bad` (the smallest index, by an atomic max of
/// [`crate::histogram::encode_first_index`]). Digis of out-of-range module ids are left to
/// [`clustering_count_modules`]'s check.
///
/// # Safety
/// `dims = [n, nevents]`, `nevents >= 1`; `module` valid for `n`; `event_offsets` for
/// `nevents + 1` non-decreasing entries from 0 to `n`; `runs` for `nevents * nmodules`
/// words, zero; `bad` one word.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_check_runs(p: ClusteringCheckRunsParams) {
    let (module, event_offsets, runs, bad, nmodules) = (
        p.module.ptr(),
        p.event_offsets.ptr(),
        p.runs.ptr_mut(),
        p.bad.ptr_mut(),
        p.nmodules,
    );
    // SAFETY: two words (launch contract).
    let (n, nevents) = unsafe { (p.dims.ptr().read(), p.dims.ptr().add(1).read()) };
    let stride = i::grid_threads();
    let mut idx = i::global_thread_idx();
    while idx < n as u64 {
        let k = idx as u32;
        // SAFETY: k < n; every index read by `starts_run` lies in `start..=k`; ev < nevents
        // and m < nmodules, so the run counter is in bounds.
        unsafe {
            let m = module.add(k as usize).read();
            if m != INVALID_MODULE && (m as u32) < nmodules {
                let (ev, start, _) = event_bounds(event_offsets, nevents, k);
                if starts_run(|j| module.add(j as usize).read(), start, k) {
                    let old = i::atomic_add_u32(runs.add((ev * nmodules + m as u32) as usize), 1);
                    if old > 0 {
                        i::atomic_max_u32(bad, crate::histogram::encode_first_index(k));
                    }
                }
            }
        }
        idx += stride;
    }
}

/// One small launch after [`clustering_check_runs`] (grid-stride over the event offsets):
/// when the check flagged a digi (`bad` non-zero), the batch the kernels after it read is
/// made empty (`dims[0] = 0`, every event offset 0), so that digis that fail the check never
/// reach them and the host needs no wait between the check and the chain; it reads `bad`
/// with the chain's status words and reports the error. Otherwise nothing is written.
///
/// # Safety
/// `dims = [n, nevents]`; `event_offsets` valid for `nevents + 1` words; `bad` one word,
/// final (the check kernel ran before, in stream order); nothing else reads or writes these
/// words while this runs.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_gate_runs(p: ClusteringGateRunsParams) {
    // SAFETY: one word each (launch contract); `dims[1]` is never written here.
    let (bad, nevents) = unsafe { (p.bad.ptr().read(), p.dims.ptr().add(1).read()) };
    if bad == 0 {
        return;
    }
    let mut idx = i::global_thread_idx();
    if idx == 0 {
        // SAFETY: `dims[0]`, one word (contract); no thread reads it here.
        unsafe { p.dims.ptr_mut().write(0) };
    }
    while idx <= nevents as u64 {
        // SAFETY: idx <= nevents: inside the `nevents + 1` offsets (contract).
        unsafe { p.event_offsets.ptr_mut().add(idx as usize).write(0) };
        idx += i::grid_threads();
    }
}
