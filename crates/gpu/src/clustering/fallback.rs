//! Stage 4: the global-memory fallback for modules too large for shared memory.

#[allow(unused_imports)]
use super::kernels::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;
use core::ptr::{read_volatile, write_volatile};

/// The same result as [`clustering_find_clus`] for the modules it listed in `fallback`,
/// of any size: duplicate detection and neighbour lookup on a dense pixel grid (one per
/// block, `rows * cols` words in global memory, [`GRID_EMPTY`] between modules),
/// union-find on `clus` itself.
///
/// Barriers: after the grid insertion, after the duplicate check, after the unions,
/// after the compression, between numbering chunks, after the copy from the roots,
/// and at the end of a module (grid clean before the next).
///
/// # Safety
/// Launched after `clustering_find_clus` on the same arrays; `grid` valid for
/// `gridDim.x * rows * cols` words all [`GRID_EMPTY`]; dynamic shared memory
/// [`scan_only_smem_bytes`]; `blockDim.x` a multiple of 32.
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
    let tid = i::thread_idx_x();
    let bd = i::block_dim_x();
    let smem = i::dynamic_shared_ptr() as *mut u32;
    // SAFETY: scan storage in the dynamic shared memory.
    let bs = unsafe { BlockScan::<u32>::new(smem) };
    let parent = clus as *mut u32;
    // SAFETY: one grid per block (launch contract).
    let grid = unsafe { grid.add(i::block_idx_x() as usize * (rows * cols) as usize) };
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
        // 1. Insert into the grid; parent = self for valid digis.
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n; the cell is inside this block's grid.
            unsafe {
                if let Some((xv, yv)) = pixel(d) {
                    write_volatile(parent.add(d as usize), d);
                    let cell = grid.add((yv * rows + xv) as usize);
                    let mut old = read_volatile(cell);
                    loop {
                        if old == GRID_DUPLICATE {
                            break;
                        }
                        let new = if old == GRID_EMPTY { d } else { GRID_DUPLICATE };
                        let seen = i::atomic_cas_u32(cell, old, new);
                        if seen == old {
                            break;
                        }
                        old = seen;
                    }
                } else {
                    write_volatile(parent.add(d as usize), u32::MAX);
                }
            }
            d += bd;
        }
        i::sync_threads();
        // 2. Every copy of a duplicated pixel leaves.
        let mut d = first + tid;
        while d < msize {
            if let Some((xv, yv)) = pixel(d) {
                // SAFETY: cell inside the grid; d < n.
                unsafe {
                    if read_volatile(grid.add((yv * rows + xv) as usize)) != d {
                        write_volatile(parent.add(d as usize), u32::MAX);
                    }
                }
            }
            d += bd;
        }
        i::sync_threads();
        // 3. Union with the forward neighbours (x+1,y), (x-1,y+1), (x,y+1), (x+1,y+1).
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n; cells inside the grid; grid entries are digis of the module.
            unsafe {
                if read_volatile(parent.add(d as usize)) != u32::MAX {
                    if let Some((xv, yv)) = pixel(d) {
                        let look = |nx: u32, ny: u32| {
                            if nx < rows && ny < cols {
                                let c = read_volatile(grid.add((ny * rows + nx) as usize));
                                if c < GRID_DUPLICATE {
                                    union(parent, d, c);
                                }
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
        // 7. Decode the roots; clean the grid.
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n; cells inside the grid.
            unsafe {
                let v = read_volatile(clus.add(d as usize));
                if v <= -2 {
                    write_volatile(clus.add(d as usize), -v - 2);
                }
                if let Some((xv, yv)) = pixel(d) {
                    write_volatile(grid.add((yv * rows + xv) as usize), GRID_EMPTY);
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
