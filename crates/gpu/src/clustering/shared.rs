//! Stage 3: the shared-memory `find_clus` kernel for the modules the small pass passed on.

#[allow(unused_imports)]
use super::kernels::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;
use core::ptr::{read_volatile, write_volatile};

/// Per-module clustering in shared memory with status words and a column bucket container
/// (see the module docs), for the module slots of `slots` (those the small-module kernel
/// passed on). Modules of more than `capacity` digis go to `fallback[1..]`
/// (`fallback[0]` counts them); the sort phase of `clustering_count_modules` lists those
/// for the fallback already (with this kernel's capacity as its `caps[3]`), so that the
/// fallback runs beside this kernel and this branch appends nothing.
///
/// Barriers: after the per-module reset (offsets zero, `msize` set), after the module-end
/// search, after loading and promoting (all promotions before any status read), after the
/// duplicate check and column count, inside and between the scan chunks, after the fill
/// (bucket complete before the neighbour search), after the union phase (forest final),
/// between numbering chunks, and at the end of a module (shared memory reused).
///
/// # Safety
/// Launched after `clustering_count_modules` on the same arrays; `module`, `x`, `y`,
/// `clus` valid for `n`; `module_start` and `slot_info` as written by it; `slot_end` for `n` words, set
/// for the listed slots; `slots` a slot list (`slots[0]` = count) from
/// `clustering_find_clus_small`;
/// `clus_in_module` and `module_first` for `nevents * nmodules`; `fallback` for `n + 1`
/// words with `fallback[0] == 0`; `rows`, `cols` ≤ [`MAX_MODULE_SIDE`]; dynamic shared
/// memory `find_clus_smem_bytes(rows, cols, capacity, status_global.is_null())`;
/// `status_global` null or valid for `gridDim.x * status_words(rows, cols)` zeroed words;
/// `blockDim.x` a multiple of 32 up to 1024.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_find_clus(p: ClusteringFindClusParams) {
    let (
        module,
        x,
        y,
        nmodules,
        rows,
        cols,
        module_start,
        slot_info,
        slot_end,
        clus,
        clus_in_module,
        module_first,
        capacity,
        status_global,
        slots,
        fallback,
    ) = (
        p.module.ptr(),
        p.x.ptr(),
        p.y.ptr(),
        p.nmodules,
        p.rows,
        p.cols,
        p.module_start.ptr(),
        p.slot_info.ptr(),
        p.slot_end.ptr_mut(),
        p.clus.ptr_mut(),
        p.clus_in_module.ptr_mut(),
        p.module_first.ptr_mut(),
        p.capacity,
        p.status_global.ptr_mut(),
        p.slots.ptr(),
        p.fallback.ptr_mut(),
    );
    // SAFETY: the slot list written by the small-module kernel. A block with no module
    // leaves at once (before clearing its status words): with an empty list the launch
    // costs only its block dispatch.
    let nslots = unsafe { slots.read() };
    if i::block_idx_x() >= nslots {
        return;
    }
    let tid = i::thread_idx_x();
    let bd = i::block_dim_x();
    let smem = i::dynamic_shared_ptr() as *mut u32;
    let sbase = i::shared_base();
    let off_word = 4 + 36;
    let before_status = find_clus_words_before_status(cols, capacity);
    // The areas inside the launch's dynamic shared memory, addressed in the shared state
    // space (32-bit addresses; issue 13, session 5).
    let off = SharedWords(sbase).offset(off_word);
    let xy = off.offset((cols + 1).div_ceil(4) * 4);
    let (parent, content) = (xy.offset(capacity), xy.offset(2 * capacity));
    let off_saddr = off.0;
    // SAFETY: 36 words of scan storage after the header.
    let bs = unsafe { BlockScan::<u32>::new(smem.add(4)) };
    let nwords = status_words(rows, cols);
    // SAFETY: the status words follow the other areas (launch contract).
    let status = unsafe { status_area(smem.add(before_status as usize), status_global, nwords) };
    i::sync_threads();
    let mut idx = i::block_idx_x();
    while idx < nslots {
        // SAFETY: idx < nslots; listed slots are valid; first < n.
        let (k, first, msize, mid, ev) = unsafe {
            let k = slots.add(1 + idx as usize).read();
            let info = slot_info.add(k as usize).read();
            (
                k,
                module_start.add(1 + k as usize).read(),
                slot_end.add(k as usize).read(),
                (info & 0xffff) as u16,
                info >> 16,
            )
        };
        let mut b = tid;
        while b <= cols {
            // SAFETY: b <= cols.
            unsafe { off.st(b, 0) };
            b += bd;
        }
        let size = msize - first;
        if size > capacity {
            if tid == 0 {
                // SAFETY: at most n slots are listed.
                unsafe {
                    let c = i::atomic_add_u32(fallback, 1);
                    fallback.add(1 + c as usize).write(k);
                }
            }
            idx += i::grid_dim_x();
            continue;
        }
        // Load the module and promote every valid pixel's status.
        let mut j = tid;
        while j < size {
            let d = (first + j) as usize;
            // SAFETY: d < msize <= n; j < size <= capacity.
            unsafe {
                let id = module.add(d).read();
                let xv = x.add(d).read() as u32;
                let yv = y.add(d).read() as u32;
                let v = if id == mid && xv < rows && yv < cols {
                    promote_pixel(status, rows, xv, yv);
                    pack_xy(xv, yv)
                } else {
                    INVALID_XY
                };
                xy.st(j, v);
                parent.st(j, j);
            }
            j += bd;
        }
        i::sync_threads();
        // Duplicates (every copy) leave; the others are counted by column.
        let mut j = tid;
        while j < size {
            // SAFETY: j < size <= capacity; the status word index is in range.
            unsafe {
                let v = xy.ld(j);
                if v != INVALID_XY {
                    let (xv, yv) = (v & 0xffff, v >> 16);
                    let (w, sh) = status_position(rows, xv, yv);
                    let st = (read_volatile(status.add(w as usize)) >> sh) & 3;
                    if st == STATUS_DUPLICATE {
                        xy.st(j, v | DUPLICATE_BIT);
                    } else {
                        i::red_shared_add_u32(off_saddr + yv * 4, 1);
                    }
                }
            }
            j += bd;
        }
        i::sync_threads();
        // Inclusive scan of the column counts: off[b] = end of column b.
        // SAFETY: cols + 1 shared words, final after the barrier above.
        let total = unsafe { column_scan(&bs, smem.add(off_word as usize), cols) };
        // Fill the buckets (off[b] becomes the start of column b) and clear the status.
        let mut j = tid;
        while j < size {
            // SAFETY: j < size; positions stay below total <= size <= capacity.
            unsafe {
                let v = xy.ld(j);
                if v != INVALID_XY {
                    let (xv, yv) = (v & 0xffff, (v >> 16) & 0x7fff);
                    let (w, _) = status_position(rows, xv, yv);
                    write_volatile(status.add(w as usize), STATUS_EMPTY);
                    if v & DUPLICATE_BIT == 0 {
                        let pos = i::atom_shared_add_u32(off_saddr + yv * 4, u32::MAX) - 1;
                        content.st(pos, j);
                    }
                }
            }
            j += bd;
        }
        i::sync_threads();
        // Union every pixel with its later neighbours in its column and the next one.
        let mut p = tid;
        while p < total {
            // SAFETY: p < total; bucket entries are module-local indices < size.
            unsafe {
                let jj = content.ld(p);
                let v = xy.ld(jj);
                let (xv, yv) = (v & 0xffff, v >> 16);
                let end = off.ld((yv + 2).min(cols));
                let mut q = p + 1;
                while q < end {
                    let m = content.ld(q);
                    let xm = xy.ld(m) & 0xffff;
                    if xm.abs_diff(xv) <= 1 {
                        union(parent, jj, m);
                    }
                    q += 1;
                }
            }
            p += bd;
        }
        i::sync_threads();
        // Number the roots in digi order; numbers go to content[root].
        let mut base = 0u32;
        let mut c = 0u32;
        while c < size {
            let j = c + tid;
            // SAFETY: j < size.
            let root = j < size && unsafe { xy.ld(j) & DUPLICATE_BIT == 0 && parent.ld(j) == j };
            let (e, tot) = bs.exclusive_sum(root as u32);
            if root {
                // SAFETY: j < size.
                unsafe { content.st(j, base + e) };
            }
            base += tot;
            i::sync_threads();
            c += bd;
        }
        // Write the cluster index of every digi of the module.
        let mut j = tid;
        while j < size {
            // SAFETY: j < size; first + j < n.
            unsafe {
                let v = xy.ld(j);
                let cl = if v & DUPLICATE_BIT == 0 {
                    let r = find(parent, j);
                    content.ld(r) as i32
                } else {
                    NOT_CLUSTERED
                };
                clus.add((first + j) as usize).write(cl);
            }
            j += bd;
        }
        if tid == 0 {
            let slot = (ev * nmodules + mid as u32) as usize;
            // SAFETY: ev < nevents and mid < nmodules.
            unsafe {
                clus_in_module.add(slot).write(base);
                module_first.add(slot).write(first);
            }
        }
        i::sync_threads();
        idx += i::grid_dim_x();
    }
}
