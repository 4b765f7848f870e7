//! The block-level container (one segment per block, shared memory, global fallback).

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::histogram::encode_first_index;
use crate::intrinsics as i;
use crate::scan::device::BlockScan;

/// Block-level container in shared memory, one block per segment `s` of items
/// `seg_offsets[s] .. seg_offsets[s + 1]` (grid-stride over segments). Writes the
/// segment's `nbins + 1` offsets (relative to the segment start) to
/// `out_offsets[s * (nbins + 1) ..]` and its content (global item indices) to
/// `out_content[seg_offsets[s] .. seg_offsets[s + 1]]`. With `stable != 0` the items of a bin
/// are in increasing index order.
///
/// Barriers: after zeroing the counts (all zeros visible before counting), after counting
/// (all counts before the scan), between scan chunks (the scan storage is reused), after the
/// cursor copy (before filling), between warps' turns in the stable fill (to keep warp order),
/// after the fill (before copying out), and after copying out (before the next segment
/// reuses shared memory).
///
/// # Safety
/// `blockDim.x` a multiple of 32 up to 1024; `block_bucket_smem_bytes(nbins, capacity)`
/// bytes of shared memory; `seg_offsets` valid for `nsegs + 1` non-decreasing entries whose
/// last is `<= n`; `keys`, `out_content` valid for `n`; `out_offsets` valid for
/// `nsegs * (nbins + 1)`; `fallbacks`, `first_out_of_range` valid zero-initialised words.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn bucket_block_fill(p: BucketBlockFillParams) {
    let (
        keys,
        seg_offsets,
        nsegs,
        nbins,
        capacity,
        stable,
        out_offsets,
        out_content,
        fallbacks,
        first_out_of_range,
    ) = (
        p.keys.ptr(),
        p.seg_offsets.ptr(),
        p.nsegs,
        p.nbins,
        p.capacity,
        p.stable,
        p.out_offsets.ptr_mut(),
        p.out_content.ptr_mut(),
        p.fallbacks.ptr_mut(),
        p.first_out_of_range.ptr_mut(),
    );
    let tid = i::thread_idx_x();
    let bd = i::block_dim_x();
    let smem = i::dynamic_shared_ptr() as *mut u32;
    let sbase = i::shared_base();
    let offsets = smem;
    // SAFETY: inside the header area.
    let cursor = unsafe { smem.add(nbins as usize + 1) };
    // SAFETY: inside the header area.
    let scan_storage = unsafe { smem.add(2 * nbins as usize + 1) };
    let header = block_bucket_header_words(nbins);
    // SAFETY: the content area follows the header.
    let smem_content = unsafe { smem.add(header as usize) };
    // SAFETY: storage sized by the launch contract.
    let bs = unsafe { BlockScan::<u32>::new(scan_storage) };
    let mut seg = i::block_idx_x();
    while seg < nsegs {
        // SAFETY: seg < nsegs.
        let (start, end) = unsafe {
            (
                seg_offsets.add(seg as usize).read(),
                seg_offsets.add(seg as usize + 1).read(),
            )
        };
        let size = end - start;
        let in_smem = size <= capacity;
        let content = if in_smem {
            smem_content
        } else {
            // SAFETY: out_content valid for n >= end.
            unsafe { out_content.add(start as usize) }
        };
        if !in_smem && tid == 0 {
            // SAFETY: valid word.
            unsafe { i::atomic_add_u32(fallbacks, 1) };
        }
        // 1. zero counts
        let mut j = tid;
        while j <= nbins {
            // SAFETY: j <= nbins.
            unsafe { offsets.add(j as usize).write(0) };
            j += bd;
        }
        i::sync_threads();
        // 2. count
        let mut j = tid;
        while j < size {
            // SAFETY: start + j < end <= n.
            let key = unsafe { keys.add((start + j) as usize).read() };
            if key < nbins {
                // SAFETY: key < nbins inside offsets.
                unsafe { i::red_shared_add_u32(sbase + key * 4, 1) };
            } else {
                // SAFETY: valid word.
                unsafe { i::atomic_max_u32(first_out_of_range, encode_first_index(start + j)) };
            }
            j += bd;
        }
        i::sync_threads();
        // 3. exclusive scan of nbins + 1 counts, chunk by chunk
        let mut carry = 0u32;
        let mut c = 0;
        while c <= nbins {
            let j = c + tid;
            // SAFETY: j <= nbins.
            let x = if j <= nbins {
                unsafe { offsets.add(j as usize).read() }
            } else {
                0
            };
            let (e, tot) = bs.exclusive_sum(x);
            if j <= nbins {
                // SAFETY: j <= nbins.
                unsafe { offsets.add(j as usize).write(carry + e) };
            }
            carry += tot;
            i::sync_threads();
            c += bd;
        }
        // 4. cursor = offsets
        let mut j = tid;
        while j < nbins {
            // SAFETY: j < nbins.
            unsafe { cursor.add(j as usize).write(offsets.add(j as usize).read()) };
            j += bd;
        }
        i::sync_threads();
        // 5. fill
        let cursor_saddr = sbase + (nbins + 1) * 4;
        if stable == 0 {
            let mut j = tid;
            while j < size {
                // SAFETY: start + j < end.
                let key = unsafe { keys.add((start + j) as usize).read() };
                if key < nbins {
                    // SAFETY: key < nbins inside cursor; pos < size <= content room.
                    unsafe {
                        let pos = i::atom_shared_add_u32(cursor_saddr + key * 4, 1);
                        content.add(pos as usize).write(start + j);
                    }
                }
                j += bd;
            }
        } else {
            let nwarps = i::warps_per_block();
            let mut cb = 0;
            while cb < size {
                let j = cb + tid;
                let valid = j < size;
                // SAFETY: start + j < end.
                let key = if valid {
                    unsafe { keys.add((start + j) as usize).read() }
                } else {
                    u32::MAX
                };
                let ok = valid && key < nbins;
                let m = i::match_any(if ok { key } else { u32::MAX });
                let leader = i::lowest_bit(m);
                for w in 0..nwarps {
                    if i::warp_id() == w {
                        let base = if ok && i::lane_id() == leader {
                            // SAFETY: key < nbins inside cursor.
                            unsafe {
                                let b = cursor.add(key as usize).read();
                                cursor.add(key as usize).write(b + i::popc(m));
                                b
                            }
                        } else {
                            0
                        };
                        let base = i::shfl_idx(base, leader);
                        if ok {
                            // SAFETY: position < size <= content room.
                            unsafe {
                                content
                                    .add((base + i::popc(m & i::lanemask_lt())) as usize)
                                    .write(start + j)
                            };
                        }
                    }
                    i::sync_threads();
                }
                cb += bd;
            }
        }
        i::sync_threads();
        // 6. copy out
        let mut j = tid;
        while j <= nbins {
            // SAFETY: j <= nbins; output row of segment seg.
            unsafe {
                out_offsets
                    .add(seg as usize * (nbins as usize + 1) + j as usize)
                    .write(offsets.add(j as usize).read())
            };
            j += bd;
        }
        if in_smem {
            let mut j = tid;
            while j < size {
                // SAFETY: j < size <= capacity.
                unsafe {
                    out_content
                        .add((start + j) as usize)
                        .write(smem_content.add(j as usize).read())
                };
                j += bd;
            }
        }
        i::sync_threads();
        seg += i::grid_dim_x();
    }
}
