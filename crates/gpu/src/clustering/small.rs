//! Stage 2: the small-module pass (warp groups or blocks per module, hash table in shared memory).

#[allow(unused_imports)]
use super::kernels::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::{warp_inclusive_sum, BlockScan};

/// Clustering of small modules with a hash table of the module's pixels in shared memory
/// (open addressing, CAS insert): no status words and no column buckets, so a module needs
/// a few KiB and the work is O(digis). A pixel inserted twice is marked duplicated and
/// every copy of it removed (the rule of the status words); each remaining digi joins the
/// digis at its forward neighbour pixels (x+1,y), (x-1,y+1), (x,y+1), (x+1,y+1) by the
/// same union-find, and roots are numbered by a scan in digi order: the output equals
/// [`clustering_find_clus`]'s. With a non-zero threshold the charge cut is applied here too
/// (the rule of [`clustering_cluster_charge_cut`]: charges summed in shared memory,
/// survivors renumbered in order), which saves a pass over these modules.
///
/// Work is done by *groups*: in the warp pass ([`clustering_find_clus_small_warp`]) each
/// warp is a group and clusters its own modules (warp barriers and warp scans only, so the warps of a block never wait for
/// each other and many modules are in flight per SM); otherwise the whole block is one
/// group. Modules come from `slots` (a slot list, `slots[0]` = count, sorted by size by the
/// sort phase of `clustering_count_modules`, which also wrote each slot's end to
/// `slot_end`), so the passes of different sizes are independent and can run concurrently.
/// A listed module of more than `capacity` digis (none when the list was sorted with this
/// capacity) is appended to `larger[1..]` (`larger[0]` counts them) when `larger` is not
/// null, else left unclustered.
///
/// Barriers (group-wide): after the per-module reset (table empty), after loading and
/// inserting (table final), after the unions, between numbering chunks, around the charge
/// cut, and at the end of a module.
///
/// # Safety
/// Launched after both phases of `clustering_count_modules`; `module`, `x`, `y`, `adc`,
/// `clus` valid for `n`; `slots` a slot list of that sort phase and `slot_end` its ends;
/// `clus_in_module`, `module_first` for `nevents * nmodules`; `larger` null or valid for
/// `n + 1` words with `larger[0] == 0`; no other kernel running concurrently clusters the
/// same slots; dynamic shared memory
/// [`find_clus_small_smem_bytes_slots`]`(capacity, groups per block, table_slots)` with
/// `table_slots` a power of two of at least [`small_table_size`]`(capacity)` and at most
/// [`MAX_TABLE_SLOTS`]; `blockDim.x` a multiple of 32.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_find_clus_small(p: ClusteringFindClusSmallParams) {
    // SAFETY: forwarded launch contract (block mode).
    unsafe { small_body::<false>(p) }
}

/// The warp pass of [`clustering_find_clus_small`]: each warp is a group with its own
/// modules (warp barriers and warp scans only). The same body as the block pass,
/// instantiated with the mode known at compile time (no run-time branches on it, a smaller
/// kernel).
///
/// # Safety
/// As [`clustering_find_clus_small`], with shared memory for `blockDim.x / 32` groups.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_find_clus_small_warp(
    p: ClusteringFindClusSmallParams,
) {
    if p.capacity <= 32 {
        // SAFETY: forwarded launch contract (modules of at most 32 digis).
        unsafe { warp_shuffle_body(p) }
    } else {
        // SAFETY: forwarded launch contract (warp mode).
        unsafe { small_body::<true>(p) }
    }
}

/// The warp pass for modules of at most 32 digis, one digi per lane, in registers: no
/// shared memory and no hash table. Each lane compares its pixel with every other lane's
/// (shuffles, warp-uniform loops bounded by the module size): equal pixels are duplicates
/// (every copy removed), touching ones set a bit of the lane's adjacency mask. The
/// connected components are the closure of the adjacency masks, computed by squaring
/// (`reach |= reach[k]` for every `k` in `reach`, until no mask changes: about log2 of the
/// cluster's diameter rounds). A component's root is its lowest lane, that is its smallest
/// digi index, and roots are ranked by lane: the numbering of [`small_body`]. The charge cut
/// sums each component's charges over its mask; survivors are renumbered in order.
///
/// # Safety
/// As [`clustering_find_clus_small`], with `capacity <= 32`; `blockDim.x` a multiple of 32.
#[inline(always)]
unsafe fn warp_shuffle_body(p: ClusteringFindClusSmallParams) {
    let (module, x, y, adc, module_start, slot_info, slot_end, slots) = (
        p.module.ptr(),
        p.x.ptr(),
        p.y.ptr(),
        p.adc.ptr(),
        p.module_start.ptr(),
        p.slot_info.ptr(),
        p.slot_end.ptr(),
        p.slots.ptr(),
    );
    let (clus, clus_in_module, module_first, larger) = (
        p.clus.ptr_mut(),
        p.clus_in_module.ptr_mut(),
        p.module_first.ptr_mut(),
        p.larger.ptr_mut(),
    );
    let lt = i::lane_id();
    let me = 1u32 << lt;
    // SAFETY: the slot count, written by the sort phase of count_modules.
    let nslots = unsafe { slots.read() };
    let mut idx = i::block_idx_x() * i::warps_per_block() + i::warp_id();
    let step = i::grid_dim_x() * i::warps_per_block();
    while idx < nslots {
        // SAFETY: idx < nslots; slot k < n; first < msize <= n.
        let (k, first, mid, ev, msize) = unsafe {
            let k = slots.add(1 + idx as usize).read() as usize;
            let info = slot_info.add(k).read();
            (
                k,
                module_start.add(1 + k).read(),
                (info & 0xffff) as u16,
                info >> 16,
                slot_end.add(k).read(),
            )
        };
        idx += step;
        let size = msize - first;
        if size > p.capacity || size > 32 {
            // Warp-uniform; none when the list was sorted with this capacity.
            if lt == 0 && !larger.is_null() {
                // SAFETY: at most n slots are listed.
                unsafe {
                    let c = i::atomic_add_u32(larger, 1);
                    larger.add(1 + c as usize).write(k as u32);
                }
            }
            continue;
        }
        let (v, q) = if lt < size {
            let d = (first + lt) as usize;
            // SAFETY: d < msize <= n.
            unsafe {
                let xv = x.add(d).read() as u32;
                let yv = y.add(d).read() as u32;
                let ok = module.add(d).read() == mid && xv < p.rows && yv < p.cols;
                (
                    if ok { pack_xy(xv, yv) } else { INVALID_XY },
                    adc.add(d).read() as u32,
                )
            }
        } else {
            (INVALID_XY, 0)
        };
        let valid = v != INVALID_XY;
        let (xv, yv) = (v & 0xffff, v >> 16);
        // Adjacency and duplicates (every lane runs every step: the shuffles need the warp).
        let mut adj = 0u32;
        let mut dup = false;
        let mut o = 0u32;
        while o < size {
            let w = i::shfl_idx(v, o);
            if valid && w != INVALID_XY && o != lt {
                if w == v {
                    dup = true;
                } else if touching(xv, yv, w & 0xffff, w >> 16) {
                    adj |= 1 << o;
                }
            }
            o += 1;
        }
        let good = valid && !dup;
        let goodmask = i::ballot(good);
        let mut reach = if good { (adj & goodmask) | me } else { 0 };
        // Closure by squaring.
        loop {
            let mut next = reach;
            let mut o = 0u32;
            while o < size {
                let r = i::shfl_idx(reach, o);
                if reach & (1 << o) != 0 {
                    next |= r;
                }
                o += 1;
            }
            let changed = i::any(next != reach);
            reach = next;
            if !changed {
                break;
            }
        }
        // Root: the component's lowest lane; number: roots below it.
        let root_lane = if good { i::lowest_bit(reach) } else { 0 };
        let roots = i::ballot(good && root_lane == lt);
        let mut nclus = i::popc(roots);
        let mut c = if good {
            i::popc(roots & ((1u32 << root_lane) - 1)) as i32
        } else {
            NOT_CLUSTERED
        };
        let threshold = if (mid as u32) < p.layer1_modules {
            p.threshold_layer1
        } else {
            p.threshold_other
        };
        if threshold > 0 && nclus > 0 {
            // The component's charge (at most 32 × 65535, no overflow).
            let mut charge = 0u32;
            let mut o = 0u32;
            while o < size {
                let qo = i::shfl_idx(q, o);
                if reach & (1 << o) != 0 {
                    charge += qo;
                }
                o += 1;
            }
            let keep = good && charge >= threshold;
            let kept = i::ballot(keep && root_lane == lt);
            nclus = i::popc(kept);
            c = if keep {
                i::popc(kept & ((1u32 << root_lane) - 1)) as i32
            } else {
                NOT_CLUSTERED
            };
        }
        if lt < size {
            // SAFETY: first + lt < msize <= n.
            unsafe { clus.add((first + lt) as usize).write(c) };
        }
        if lt == 0 {
            let slot = (ev * p.nmodules + mid as u32) as usize;
            // SAFETY: ev < nevents and mid < nmodules.
            unsafe {
                clus_in_module.add(slot).write(nclus);
                module_first.add(slot).write(first);
            }
        }
    }
}

/// Marks a root's entry of `parent` after the numbering: `ROOT_TAG | number` (indices and
/// numbers stay below [`MAX_SMALL_CAPACITY`] < 2^31), so that no separate array of root
/// numbers is needed.
const ROOT_TAG: u32 = 1 << 31;

/// The cluster number of a numbered digi: its root's tagged `parent` entry.
///
/// # Safety
/// `j` a valid, non-duplicated digi of the module, every root of the module tagged (after
/// the numbering and its barrier); the forest is no longer written.
#[inline(always)]
unsafe fn root_number(parent: SharedWords, mut j: u32) -> u32 {
    loop {
        // SAFETY: j is a module-local index (contract).
        let pj = unsafe { parent.ld(j) };
        if pj & ROOT_TAG != 0 {
            return pj & !ROOT_TAG;
        }
        j = pj;
    }
}

/// The body of both small-module entry points; `WARP` selects warp groups.
///
/// Shared memory is addressed in the shared state space (32-bit addresses, `ld.shared`,
/// `atom.shared.cas`), not through generic pointers: fewer address instructions and
/// registers per access (issue 13, session 5). Three words per digi of the capacity
/// (`xy`, `parent`, `cl`) beside the table (issue 13, session 5, second helper: five
/// before): the roots' cluster numbers are kept in `parent` itself ([`ROOT_TAG`]), and the
/// cluster charges of the cut in the table's first words, which are no longer read after
/// the unions; so a group clears its whole table (16-byte stores) before every module.
/// With 3 × 960 words the last pass's 256-thread blocks take 27.4 KiB instead of 36.2 KiB,
/// eight per SM instead of six.
///
/// # Safety
/// As [`clustering_find_clus_small`].
#[inline(always)]
unsafe fn small_body<const WARP: bool>(p: ClusteringFindClusSmallParams) {
    let (module, x, y, adc, module_start, slot_info, slot_end, slots) = (
        p.module.ptr(),
        p.x.ptr(),
        p.y.ptr(),
        p.adc.ptr(),
        p.module_start.ptr(),
        p.slot_info.ptr(),
        p.slot_end.ptr(),
        p.slots.ptr(),
    );
    let (clus, clus_in_module, module_first, larger) = (
        p.clus.ptr_mut(),
        p.clus_in_module.ptr_mut(),
        p.module_first.ptr_mut(),
        p.larger.ptr_mut(),
    );
    let (rows, cols, capacity) = (p.rows, p.cols, p.capacity);
    let warp_mode = WARP;
    let (gsize, group, ngroups, lt) = if warp_mode {
        (32, i::warp_id(), i::warps_per_block(), i::lane_id())
    } else {
        (i::block_dim_x(), 0, 1, i::thread_idx_x())
    };
    let gsync = || {
        if warp_mode {
            i::sync_warp()
        } else {
            i::sync_threads()
        }
    };
    // SAFETY: 36 words of block-scan storage at the start (block mode only).
    let bs = unsafe { BlockScan::<u32>::new(i::dynamic_shared_ptr() as *mut u32) };
    // Exclusive sum over the group, with the group total.
    let gscan = |v: u32| -> (u32, u32) {
        if warp_mode {
            let incl = warp_inclusive_sum(v);
            (incl - v, i::shfl_idx(incl, 31))
        } else {
            bs.exclusive_sum(v)
        }
    };
    let tsize = p.table_slots;
    let tmask = tsize - 1;
    let tshift = tsize.leading_zeros() + 1;
    // This group's area inside the launch's dynamic shared memory (16-byte aligned:
    // `small_group_words_slots` is a multiple of 4 words).
    let keys = SharedWords(i::shared_base())
        .offset(36 + group * small_group_words_slots(capacity, tsize) + 4);
    let vals = keys.offset(tsize);
    let xy = vals.offset(tsize);
    let (parent, cl) = (xy.offset(capacity), xy.offset(2 * capacity));
    // The cluster charges of the cut: the table's first words (tsize >= 2 * capacity),
    // zeroed after the unions.
    let charge = keys;
    // SAFETY: the slot count, written by the sort phase of count_modules.
    let nslots = unsafe { slots.read() };
    let mut idx = i::block_idx_x() * ngroups + group;
    let step = i::grid_dim_x() * ngroups;
    while idx < nslots {
        // SAFETY: idx < nslots; slot k < n; first < msize <= n; ev < nevents.
        let (k, first, mid, ev, msize) = unsafe {
            let k = slots.add(1 + idx as usize).read() as usize;
            let first = module_start.add(1 + k).read();
            let info = slot_info.add(k).read();
            (
                k,
                first,
                (info & 0xffff) as u16,
                info >> 16,
                slot_end.add(k).read(),
            )
        };
        idx += step;
        let size = msize - first;
        if size > capacity {
            // Group-uniform: no shared memory touched, no barrier needed.
            if lt == 0 && !larger.is_null() {
                // SAFETY: at most n slots are listed.
                unsafe {
                    let c = i::atomic_add_u32(larger, 1);
                    larger.add(1 + c as usize).write(k as u32);
                }
            }
            continue;
        }
        // Keys and values are 2 * tsize consecutive words (tsize >= 32, a power of two):
        // tsize / 2 16-byte stores. (The previous module's last reads of the charges, in
        // the table's first words, were before the group barrier that ended it.)
        let mut t = lt;
        while t < tsize / 2 {
            // SAFETY: 16-byte aligned, inside the table.
            unsafe { i::st_shared_v4_u32(keys.addr(4 * t), [TABLE_EMPTY; 4]) };
            t += gsize;
        }
        gsync();
        // Load, and insert every valid pixel; `cl` holds the charge (low half) and the
        // pixel's table slot (high half: slots < 2^15) until it holds the cluster.
        let mut j = lt;
        while j < size {
            let d = (first + j) as usize;
            // SAFETY: d < msize <= n; j < size <= capacity; table slots < tsize.
            unsafe {
                let id = module.add(d).read();
                let xv = x.add(d).read() as u32;
                let yv = y.add(d).read() as u32;
                let q = adc.add(d).read() as u32;
                let v = if id == mid && xv < rows && yv < cols {
                    pack_xy(xv, yv)
                } else {
                    INVALID_XY
                };
                xy.st(j, v);
                parent.st(j, j);
                if v == INVALID_XY {
                    cl.st(j, q);
                } else {
                    let mut h = table_hash(v, tshift);
                    loop {
                        let old = keys.cas(h, TABLE_EMPTY, v);
                        if old == TABLE_EMPTY || old == v {
                            break;
                        }
                        h = (h + 1) & tmask;
                    }
                    if vals.cas(h, TABLE_EMPTY, j) != TABLE_EMPTY {
                        vals.exch(h, TABLE_DUPLICATE);
                    }
                    // The pixel's table slot, so that the union step reads its state
                    // without a second probe.
                    cl.st(j, q | h << 16);
                }
            }
            j += gsize;
        }
        gsync();
        let lookup = |v: u32| -> u32 {
            let mut h = table_hash(v, tshift);
            loop {
                // SAFETY: h < tsize; the table is final after the barrier.
                let key = unsafe { keys.ld(h) };
                if key == v {
                    // SAFETY: as above.
                    return unsafe { vals.ld(h) };
                }
                if key == TABLE_EMPTY {
                    return TABLE_EMPTY;
                }
                h = (h + 1) & tmask;
            }
        };
        let mut j = lt;
        while j < size {
            // SAFETY: j < size <= capacity; cl[j] of a valid pixel holds its table slot
            // (< tsize); table values are module-local indices.
            unsafe {
                let v = xy.ld(j);
                if v != INVALID_XY {
                    // This thread's own slot (written above, by this thread); the value is
                    // final after the barrier.
                    let h = cl.ld(j) >> 16;
                    if vals.ld(h) == TABLE_DUPLICATE {
                        xy.st(j, v | DUPLICATE_BIT);
                    } else {
                        let (xv, yv) = (v & 0xffff, v >> 16);
                        let join = |nx: u32, ny: u32| {
                            if nx < rows && ny < cols {
                                let m = lookup(pack_xy(nx, ny));
                                if m < TABLE_DUPLICATE {
                                    union(parent, j, m);
                                }
                            }
                        };
                        join(xv + 1, yv);
                        join(xv.wrapping_sub(1), yv + 1);
                        join(xv, yv + 1);
                        join(xv + 1, yv + 1);
                    }
                }
            }
            j += gsize;
        }
        gsync();
        // Number the roots in digi order: a root's parent entry becomes its tagged number
        // (each thread reads and writes only its own digis' entries here). The table is no
        // longer read: its first `size` words become the zeroed charges of the cut.
        let mut nclus = 0u32;
        let mut c = 0u32;
        while c < size {
            let j = c + lt;
            // SAFETY: j < size.
            let root = j < size && unsafe { xy.ld(j) & DUPLICATE_BIT == 0 && parent.ld(j) == j };
            let (e, tot) = gscan(root as u32);
            if root {
                // SAFETY: j < size.
                unsafe { parent.st(j, ROOT_TAG | (nclus + e)) };
            }
            if j < size {
                // SAFETY: j < size <= capacity < tsize.
                unsafe { charge.st(j, 0) };
            }
            nclus += tot;
            gsync();
            c += gsize;
        }
        let threshold = if (mid as u32) < p.layer1_modules {
            p.threshold_layer1
        } else {
            p.threshold_other
        };
        let cut = threshold > 0 && nclus > 0;
        // Cluster of each digi; with a cut, the cluster charges.
        let mut j = lt;
        while j < size {
            // SAFETY: j < size; cluster numbers < nclus <= size <= tsize; every root is
            // tagged (barrier above).
            unsafe {
                let v = xy.ld(j);
                let c = if v & DUPLICATE_BIT == 0 {
                    let c = root_number(parent, j);
                    if cut {
                        charge.red_add(c, cl.ld(j) & 0xffff);
                    }
                    c
                } else {
                    u32::MAX
                };
                cl.st(j, c);
            }
            j += gsize;
        }
        if cut {
            gsync();
            // Survivors renumbered in order; charge[c] becomes the new number or MAX.
            let mut kept = 0u32;
            let mut c0 = 0u32;
            while c0 < nclus {
                let c = c0 + lt;
                // SAFETY: c < nclus <= capacity.
                let keep = c < nclus && unsafe { charge.ld(c) } >= threshold;
                let (e, tot) = gscan(keep as u32);
                if c < nclus {
                    let v = if keep { kept + e } else { u32::MAX };
                    // SAFETY: c < nclus.
                    unsafe { charge.st(c, v) };
                }
                kept += tot;
                gsync();
                c0 += gsize;
            }
            nclus = kept;
        }
        let mut j = lt;
        while j < size {
            // SAFETY: j < size; first + j < n; cluster numbers < size.
            unsafe {
                let c = cl.ld(j);
                let out = if c == u32::MAX {
                    NOT_CLUSTERED
                } else if cut {
                    let v = charge.ld(c);
                    if v == u32::MAX {
                        NOT_CLUSTERED
                    } else {
                        v as i32
                    }
                } else {
                    c as i32
                };
                clus.add((first + j) as usize).write(out);
            }
            j += gsize;
        }
        if lt == 0 {
            let m = (ev * p.nmodules + mid as u32) as usize;
            // SAFETY: ev < nevents and mid < nmodules.
            unsafe {
                clus_in_module.add(m).write(nclus);
                module_first.add(m).write(first);
            }
        }
        gsync();
    }
}
