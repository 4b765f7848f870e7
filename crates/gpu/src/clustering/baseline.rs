//! The seed-faithful `findClus` (CMS pixeltrack-standalone, seed 000), kept as the faithful
//! reference of the seed's algorithm: the GPU tests check its partition against the oracle,
//! and `bench-clustering` times it in the side-by-side row. The chain does not use it.

#[allow(unused_imports)]
use super::kernels::*;
use super::*;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;
use core::ptr::{read_volatile, write_volatile};

/// The seed's `findClus`, kept as the benchmark's baseline (one block per module slot,
/// grid-stride): module end, duplicate removal with status words in shared memory, the
/// column histogram (`count`, block scan, `fill` by atomic decrement), per-thread
/// nearest-neighbour arrays `nn[maxiter][maxNeighbours]`, then the labelling loop of the
/// seed: even passes `atomicMin` labels (global digi indices in `clus`) across each
/// neighbour pair and set `more` on a change, odd passes jump pointers, until
/// `__syncthreads_or(more)` is false; roots numbered by `atomicInc` (order not
/// deterministic). Differences from the seed: modules whose histogram exceeds
/// [`SEED_MAX_PIX_IN_MODULE`], or that need more than [`SEED_MAX_ITER`] iterations or
/// [`SEED_MAX_NEIGHBOURS`] neighbours, are sent to the fallback list (the seed prints
/// "THIS IS NOT SUPPOSED TO HAPPEN" and writes out of bounds); duplicate removal covers
/// the whole module (no `msize − 1` quirk); non-clustered digis get -1 (not -9999).
///
/// # Safety
/// As [`clustering_find_clus`], with dynamic shared memory
/// [`find_clus_seed_smem_bytes`] and `blockDim.x * SEED_MAX_ITER >= 1`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn clustering_find_clus_seed(p: ClusteringFindClusSeedParams) {
    let (
        module,
        x,
        y,
        event_offsets,
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
    ) = (
        p.module.ptr(),
        p.x.ptr(),
        p.y.ptr(),
        p.event_offsets.ptr(),
        p.nmodules,
        p.rows,
        p.cols,
        p.module_start.ptr(),
        p.slot_info.ptr(),
        p.slot_end.ptr_mut(),
        p.clus.ptr_mut(),
        p.clus_in_module.ptr_mut(),
        p.module_first.ptr_mut(),
        p.fallback.ptr_mut(),
    );
    let tid = i::thread_idx_x();
    let bd = i::block_dim_x();
    let smem = i::dynamic_shared_ptr() as *mut u32;
    let sbase = i::shared_base();
    let off_word = 4 + 36;
    let hist_word = off_word + (cols + 1).div_ceil(4) * 4;
    // SAFETY: areas inside the launch's dynamic shared memory.
    let (hdr, off, hist, status) = unsafe {
        (
            smem,
            smem.add(off_word as usize),
            smem.add(hist_word as usize),
            smem.add((hist_word + SEED_MAX_PIX_IN_MODULE) as usize),
        )
    };
    let off_saddr = sbase + off_word * 4;
    // SAFETY: scan storage after the header.
    let bs = unsafe { BlockScan::<u32>::new(smem.add(4)) };
    let nwords = status_words(rows, cols);
    let mut w = tid;
    while w < nwords {
        // SAFETY: w < nwords.
        unsafe { status.add(w as usize).write(STATUS_EMPTY) };
        w += bd;
    }
    let labels = clus;
    // SAFETY: written by count_modules.
    let nslots = unsafe { module_start.read() };
    let mut k = i::block_idx_x();
    while k < nslots {
        // SAFETY: k < nslots; the slot record holds the module id and the event.
        let (first, mid, ev, ev_end) = unsafe {
            let info = slot_info.add(k as usize).read();
            let ev = info >> 16;
            (
                module_start.add(1 + k as usize).read(),
                (info & 0xffff) as u16,
                ev,
                event_offsets.add(ev as usize + 1).read(),
            )
        };
        if tid == 0 {
            // SAFETY: header words: msize, foundClusters.
            unsafe {
                hdr.write(ev_end);
                hdr.add(1).write(0);
            }
        }
        let mut b = tid;
        while b <= cols {
            // SAFETY: b <= cols.
            unsafe { off.add(b as usize).write(0) };
            b += bd;
        }
        i::sync_threads();
        // SAFETY: digis of the event; hdr holds ev_end since the barrier above.
        let msize =
            unsafe { module_end(module, first, ev_end, mid, hdr, tid, bd, i::sync_threads) };
        if tid == 0 {
            // SAFETY: k < n.
            unsafe { slot_end.add(k as usize).write(msize) };
        }
        let valid = |d: u32| -> Option<(u32, u32)> {
            // SAFETY: d < msize <= n.
            unsafe {
                let xv = x.add(d as usize).read() as u32;
                let yv = y.add(d as usize).read() as u32;
                (module.add(d as usize).read() == mid && xv < rows && yv < cols).then_some((xv, yv))
            }
        };
        // Duplicate removal (status words), then the histogram count.
        let mut d = first + tid;
        while d < msize {
            if let Some((xv, yv)) = valid(d) {
                // SAFETY: pixel inside the module.
                unsafe { promote_pixel(status, rows, xv, yv) };
            }
            d += bd;
        }
        i::sync_threads();
        let is_kept = |d: u32| -> Option<(u32, u32)> {
            valid(d).filter(|&(xv, yv)| {
                let (w, sh) = status_position(rows, xv, yv);
                // SAFETY: w < nwords.
                (unsafe { read_volatile(status.add(w as usize)) } >> sh) & 3 != STATUS_DUPLICATE
            })
        };
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n.
            unsafe { labels.add(d as usize).write(d as i32) };
            if let Some((_, yv)) = is_kept(d) {
                // SAFETY: yv < cols.
                unsafe { i::red_shared_add_u32(off_saddr + yv * 4, 1) };
            }
            d += bd;
        }
        i::sync_threads();
        // SAFETY: cols + 1 shared words, final after the barrier above.
        let hsize = unsafe { column_scan(&bs, off, cols) };
        let too_big = hsize > SEED_MAX_PIX_IN_MODULE || hsize > SEED_MAX_ITER * bd;
        if !too_big {
            let mut d = first + tid;
            while d < msize {
                if let Some((_, yv)) = is_kept(d) {
                    // SAFETY: positions < hsize <= SEED_MAX_PIX_IN_MODULE.
                    unsafe {
                        let pos = i::atom_shared_add_u32(off_saddr + yv * 4, u32::MAX) - 1;
                        hist.add(pos as usize).write(d - first);
                    }
                }
                d += bd;
            }
        }
        i::sync_threads();
        // Clear the status words (all reads are done).
        let mut d = first + tid;
        while d < msize {
            if let Some((xv, yv)) = valid(d) {
                let (w, _) = status_position(rows, xv, yv);
                // SAFETY: w < nwords.
                unsafe { write_volatile(status.add(w as usize), STATUS_EMPTY) };
            }
            d += bd;
        }
        // Nearest neighbours, per thread (the seed's nn / nnn).
        let mut nn = [[0u16; SEED_MAX_NEIGHBOURS as usize]; SEED_MAX_ITER as usize];
        let mut nnn = [0u8; SEED_MAX_ITER as usize];
        let mut overflow = too_big;
        if !too_big {
            let mut j = tid;
            let mut kk = 0usize;
            while j < hsize && kk < SEED_MAX_ITER as usize {
                // SAFETY: j < hsize; entries are module-local indices of kept digis.
                unsafe {
                    let di = first + hist.add(j as usize).read();
                    let xi = x.add(di as usize).read() as u32;
                    let yi = y.add(di as usize).read() as u32;
                    let end = off.add((yi + 2).min(cols) as usize).read();
                    let mut p = j + 1;
                    while p < end {
                        let l = hist.add(p as usize).read();
                        let xm = x.add((first + l) as usize).read() as u32;
                        if xm.abs_diff(xi) <= 1 {
                            let c = *nnn.get_unchecked(kk) as usize;
                            if c < SEED_MAX_NEIGHBOURS as usize {
                                *nn.get_unchecked_mut(kk).get_unchecked_mut(c) = l as u16;
                                *nnn.get_unchecked_mut(kk) += 1;
                            } else {
                                overflow = true;
                            }
                        }
                        p += 1;
                    }
                }
                j += bd;
                kk += 1;
            }
        }
        if i::sync_threads_or(overflow) {
            if tid == 0 {
                // SAFETY: at most n slots are listed.
                unsafe {
                    let c = i::atomic_add_u32(fallback, 1);
                    fallback.add(1 + c as usize).write(k);
                }
            }
            i::sync_threads();
            k += i::grid_dim_x();
            continue;
        }
        // The seed's labelling loop.
        let lab = |d: u32| {
            // SAFETY: d < n.
            unsafe { labels.add(d as usize) }
        };
        let mut more = true;
        let mut nloops = 0u32;
        while i::sync_threads_or(more) {
            let mut j = tid;
            let mut kk = 0usize;
            if nloops % 2 == 1 {
                while j < hsize {
                    // SAFETY: j < hsize; labels are digi indices of the module.
                    unsafe {
                        let di = first + hist.add(j as usize).read();
                        let mut m = read_volatile(lab(di));
                        while m != read_volatile(lab(m as u32)) {
                            m = read_volatile(lab(m as u32));
                        }
                        write_volatile(lab(di), m);
                    }
                    j += bd;
                }
            } else {
                more = false;
                while j < hsize {
                    // SAFETY: kk < SEED_MAX_ITER (checked when filling); indices valid.
                    unsafe {
                        let di = first + hist.add(j as usize).read();
                        let cnt = *nnn.get_unchecked(kk) as usize;
                        let mut q = 0;
                        while q < cnt {
                            let m = first + *nn.get_unchecked(kk).get_unchecked(q) as u32;
                            let ci = read_volatile(lab(di));
                            let old = i::atomic_min_i32(lab(m), ci);
                            if old != ci {
                                more = true;
                            }
                            i::atomic_min_i32(lab(di), old);
                            q += 1;
                        }
                    }
                    j += bd;
                    kk += 1;
                }
            }
            nloops += 1;
        }
        // Numbering by atomicInc on the roots.
        let mut j = tid;
        while j < hsize {
            // SAFETY: j < hsize.
            unsafe {
                let di = first + hist.add(j as usize).read();
                if read_volatile(lab(di)) == di as i32 {
                    let old = i::atomic_add_u32(hdr.add(1), 1);
                    write_volatile(lab(di), -(old as i32) - 1);
                }
            }
            j += bd;
        }
        i::sync_threads();
        let mut j = tid;
        while j < hsize {
            // SAFETY: j < hsize.
            unsafe {
                let di = first + hist.add(j as usize).read();
                let r = read_volatile(lab(di));
                if r >= 0 {
                    write_volatile(lab(di), read_volatile(lab(r as u32)));
                }
            }
            j += bd;
        }
        i::sync_threads();
        let mut d = first + tid;
        while d < msize {
            // SAFETY: d < n.
            unsafe {
                let v = if is_kept(d).is_some() {
                    -read_volatile(lab(d)) - 1
                } else {
                    NOT_CLUSTERED
                };
                write_volatile(lab(d), v);
            }
            d += bd;
        }
        if tid == 0 {
            let slot = (ev * nmodules + mid as u32) as usize;
            // SAFETY: ev < nevents, mid < nmodules; header word.
            unsafe {
                clus_in_module.add(slot).write(hdr.add(1).read());
                module_first.add(slot).write(first);
            }
        }
        i::sync_threads();
        k += i::grid_dim_x();
    }
}
