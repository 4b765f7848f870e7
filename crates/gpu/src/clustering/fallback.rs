//! Stage 4: the global-memory fallback for modules too large for shared memory.

#[allow(unused_imports)]
use super::kernels::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;
use core::ptr::{read_volatile, write_volatile};

/// The same result as [`clustering_find_clus`] for the modules it listed in `fallback`,
/// of any size: duplicate detection with the 2-bit status words of the shared-memory
/// kernel (in shared memory when they fit, [`STATUS_SMEM_MAX_WORDS`], else a slab of global
/// memory per block), neighbour lookup through the status words first and a dense pixel
/// grid (one per block, `rows * cols` words in global memory) only for neighbours that are
/// there: a pixel seen exactly once has its digi written to its grid cell, and the grid is
/// read only at cells whose status says so, so stale cells of earlier modules are never
/// read and the grid is never cleaned (issue 13, session 5: the grid used to take a CAS per
/// digi, four scattered reads and a clean-up store). Union-find on `clus` itself.
///
/// Barriers: after the status promotion, after the duplicate check (grid written), after
/// the unions, after the compression, between numbering chunks, after the copy from the
/// roots, and at the end of a module (status words clean before the next).
///
/// # Safety
/// Launched after `clustering_find_clus` on the same arrays; `grid` valid for
/// `gridDim.x * rows * cols` words (any content); `status_global` null or valid for
/// `gridDim.x * status_words(rows, cols)` words, all zero; dynamic shared memory
/// [`fallback_smem_bytes`]`(rows, cols, status_global.is_null())`; `blockDim.x` a multiple
/// of 32.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_find_clus_fallback(
    p: ClusteringFindClusFallbackParams,
) {
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
        fallback,
        grid,
    ) = (
        p.module.ptr(),
        p.x.ptr(),
        p.y.ptr(),
        p.nmodules,
        p.rows,
        p.cols,
        p.module_start.ptr(),
        p.slot_info.ptr(),
        p.slot_end.ptr(),
        p.clus.ptr_mut(),
        p.clus_in_module.ptr_mut(),
        p.module_first.ptr_mut(),
        p.fallback.ptr(),
        p.grid.ptr_mut(),
    );
    let status_global = p.status_global.ptr_mut();
    let tid = i::thread_idx_x();
    let bd = i::block_dim_x();
    let smem = i::dynamic_shared_ptr() as *mut u32;
    // SAFETY: scan storage in the dynamic shared memory.
    let bs = unsafe { BlockScan::<u32>::new(smem) };
    let parent = clus as *mut u32;
    // SAFETY: one grid per block (launch contract).
    let grid = unsafe { grid.add(i::block_idx_x() as usize * (rows * cols) as usize) };
    let nwords = status_words(rows, cols);
    // SAFETY: the status words follow the scan storage (launch contract).
    let status =
        unsafe { status_area(smem.add(scan_only_smem_bytes() / 4), status_global, nwords) };
    // State of pixel (x, y) (x < rows, y < cols).
    let state = |xv: u32, yv: u32| -> u32 {
        let (w, sh) = status_position(rows, xv, yv);
        // SAFETY: w < nwords.
        (unsafe { read_volatile(status.add(w as usize)) } >> sh) & 3
    };
    i::sync_threads();
    // SAFETY: written by find_clus.
    let nfb = unsafe { fallback.read() };
    let mut f = i::block_idx_x();
    while f < nfb {
        // SAFETY: f < nfb; the listed slot, its bounds and its record are valid.
        let (first, msize, mid, ev) = unsafe {
            let k = fallback.add(1 + f as usize).read() as usize;
            let info = slot_info.add(k).read();
            (
                module_start.add(1 + k).read(),
                slot_end.add(k).read(),
                (info & 0xffff) as u16,
                info >> 16,
            )
        };
        // Pixel of digi d if it is a valid digi of this module.
        let pixel = |d: u32| -> Option<(u32, u32)> {
            // SAFETY: d < msize <= n.
            unsafe {
                let id = module.add(d as usize).read();
                let xv = x.add(d as usize).read() as u32;
                let yv = y.add(d as usize).read() as u32;
                (id == mid && xv < rows && yv < cols).then_some((xv, yv))
            }
        };
        // 1. Promote every valid pixel's status; parent = self for valid digis.
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n; the status word is inside this block's status words.
            unsafe {
                if let Some((xv, yv)) = pixel(d) {
                    write_volatile(parent.add(d as usize), d);
                    promote_pixel(status, rows, xv, yv);
                } else {
                    write_volatile(parent.add(d as usize), u32::MAX);
                }
            }
            d += bd;
        }
        i::sync_threads();
        // 2. Every copy of a duplicated pixel leaves; a pixel seen once writes its digi
        // into its grid cell.
        let mut d = first + tid;
        while d < msize {
            if let Some((xv, yv)) = pixel(d) {
                // SAFETY: cell inside the grid; d < n.
                unsafe {
                    if state(xv, yv) == STATUS_DUPLICATE {
                        write_volatile(parent.add(d as usize), u32::MAX);
                    } else {
                        write_volatile(grid.add((yv * rows + xv) as usize), d);
                    }
                }
            }
            d += bd;
        }
        i::sync_threads();
        // 3. Union with the forward neighbours (x+1,y), (x-1,y+1), (x,y+1), (x+1,y+1) that
        // were seen exactly once (their cells were written in step 2 of this module).
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n; cells inside the grid; cells of found pixels hold digis of
            // the module.
            unsafe {
                if read_volatile(parent.add(d as usize)) != u32::MAX {
                    if let Some((xv, yv)) = pixel(d) {
                        let look = |nx: u32, ny: u32| {
                            if nx < rows && ny < cols && state(nx, ny) == STATUS_FOUND {
                                let c = read_volatile(grid.add((ny * rows + nx) as usize));
                                union(parent, d, c);
                            }
                        };
                        look(xv + 1, yv);
                        look(xv.wrapping_sub(1), yv + 1);
                        look(xv, yv + 1);
                        look(xv + 1, yv + 1);
                    }
                }
            }
            d += bd;
        }
        i::sync_threads();
        // 4. Compress: every valid digi points at its root. `find_root` does not write
        // (path halving here could store a non-root over a root written by another
        // thread), so the only stores are roots.
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n.
            unsafe {
                if read_volatile(parent.add(d as usize)) != u32::MAX {
                    let r = find_root(parent, d);
                    write_volatile(parent.add(d as usize), r);
                }
            }
            d += bd;
        }
        i::sync_threads();
        // 5. Number the roots in digi order: clus[root] = -(number) - 2.
        let mut base = 0u32;
        let mut c = first;
        while c < msize {
            let d = c + tid;
            // SAFETY: d < msize.
            let root = d < msize && unsafe { read_volatile(parent.add(d as usize)) == d };
            let (e, tot) = bs.exclusive_sum(root as u32);
            if root {
                // SAFETY: d < n.
                unsafe { write_volatile(clus.add(d as usize), -((base + e) as i32) - 2) };
            }
            base += tot;
            i::sync_threads();
            c += bd;
        }
        // 6. The other digis take their root's number.
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n; a non-negative entry is the index of the root.
            unsafe {
                let r = read_volatile(clus.add(d as usize));
                if r >= 0 {
                    let code = read_volatile(clus.add(r as usize));
                    write_volatile(clus.add(d as usize), -code - 2);
                }
            }
            d += bd;
        }
        i::sync_threads();
        // 7. Decode the roots; clear the status words (no status is read after step 3;
        // every pixel of a word being cleared belongs to this module).
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n; status words inside this block's.
            unsafe {
                let v = read_volatile(clus.add(d as usize));
                if v <= -2 {
                    write_volatile(clus.add(d as usize), -v - 2);
                }
                if let Some((xv, yv)) = pixel(d) {
                    let (w, _) = status_position(rows, xv, yv);
                    write_volatile(status.add(w as usize), STATUS_EMPTY);
                }
            }
            d += bd;
        }
        if tid == 0 {
            let slot = (ev * nmodules + mid as u32) as usize;
            // SAFETY: ev < nevents, mid < nmodules.
            unsafe {
                clus_in_module.add(slot).write(base);
                module_first.add(slot).write(first);
            }
        }
        i::sync_threads();
        f += i::grid_dim_x();
    }
}
