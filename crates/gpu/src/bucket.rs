//! Bucket container in the style of CMS `HistoContainer` / `OneToManyAssoc`.
//!
//! Items (element indices `i` with a key `keys[i] < nbins`) are grouped by key:
//! 1. **count** the items per bin,
//! 2. **finalize**: exclusive scan of the counts gives `offsets` (`nbins + 1` entries),
//! 3. **fill**: each item is written to `content[offsets[key] ..offsets[key + 1]]`.
//!
//! Afterwards the items of bin `b` are `content[offsets[b]..offsets[b + 1]]`.
//!
//! **Order inside a bin.** The plain fill takes positions with an `atomicAdd` on a per-bin
//! cursor (as CMS does), so the order of items inside a bin depends on thread timing and is
//! *not* deterministic; only the set of items per bin is. The **stable** variants put the
//! items of each bin in increasing index order, identical on every run and equal to the CPU
//! oracle element for element, at some extra cost.
//!
//! Two scopes:
//! - **device-wide** (the seeding spacepoint grid): count with the histogram kernel, finalize
//!   with the device scan, fill with [`KERNEL_BUCKET_FILL`]. The stable device-wide variant
//!   splits the input into `tiles` contiguous tiles, one warp each; it counts per (bin, tile)
//!   into a bin-major matrix, scans the whole matrix (which yields, for each bin and tile, the
//!   position of the tile's first item of that bin), and fills each tile in order, ranking
//!   equal keys inside a warp with `match.any`. The matrix holds `nbins * tiles` words.
//! - **block-level** (findClus, per module): one block per segment of consecutive items; counts,
//!   offsets and (up to `capacity` items) content live in shared memory. A segment larger than
//!   `capacity` falls back to building its content directly in global memory (the result is
//!   the same; the launcher reports how many segments took the fallback).
//!
//! # Worked example
//! keys `[2, 0, 2, 1, 0]`, `nbins = 3`: counts `[2, 1, 2]`, offsets `[0, 2, 3, 5]`;
//! stable content `[1, 4, 3, 0, 2]` (bin 0: items 1, 4; bin 1: item 3; bin 2: items 0, 2).

use crate::params::DevPtr;

/// Kernel: device-wide fill (non-deterministic order inside a bin).
pub const KERNEL_BUCKET_FILL: &str = "bucket_fill";
/// Kernel: device-wide stable count into the (bin, tile) matrix.
pub const KERNEL_BUCKET_COUNT_STABLE: &str = "bucket_count_stable";
/// Kernel: per-bin offsets from the scanned (bin, tile) matrix.
pub const KERNEL_BUCKET_STABLE_OFFSETS: &str = "bucket_stable_offsets";
/// Kernel: device-wide stable fill.
pub const KERNEL_BUCKET_FILL_STABLE: &str = "bucket_fill_stable";
/// Kernel: block-level container, one block per segment.
pub const KERNEL_BUCKET_BLOCK_FILL: &str = "bucket_block_fill";

/// Threads per block of the device-wide bucket kernels.
pub const BUCKET_THREADS: u32 = 256;
/// Largest (bin, tile) matrix of the stable device-wide variant, in words (64 MiB).
pub const BUCKET_STABLE_MATRIX_MAX: u64 = 1 << 24;

/// Tiling of the stable device-wide variant: `(tiles, items_per_tile)`. Aims at 256 items
/// per warp-tile, fewer tiles when the matrix would exceed [`BUCKET_STABLE_MATRIX_MAX`].
/// `items_per_tile` is a multiple of 32 and `tiles * items_per_tile >= n`.
pub const fn bucket_stable_tiling(n: u64, nbins: u32) -> (u32, u32) {
    let want = n.div_ceil(256);
    let cap = BUCKET_STABLE_MATRIX_MAX / if nbins == 0 { 1 } else { nbins as u64 };
    let mut tiles = if want < cap { want } else { cap };
    if tiles == 0 {
        tiles = 1;
    }
    let per = n.div_ceil(tiles).div_ceil(32) * 32;
    let per = if per == 0 { 32 } else { per };
    let t = n.div_ceil(per);
    (if t == 0 { 1 } else { t as u32 }, per as u32)
}

/// Shared-memory words of the block-level container before the content area:
/// `offsets[nbins + 1]`, `cursor[nbins]`, block-scan storage (33 words), padded to 4 words.
pub const fn block_bucket_header_words(nbins: u32) -> u32 {
    (2 * nbins + 1 + 33).div_ceil(4) * 4
}

/// Shared-memory bytes of the block-level container with room for `capacity` items.
pub const fn block_bucket_smem_bytes(nbins: u32, capacity: u32) -> usize {
    (block_bucket_header_words(nbins) + capacity) as usize * 4
}

/// Device code.
/// Parameters of the `bucket_fill` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketFillParams {
    pub keys: DevPtr<u32>,
    pub n: u64,
    pub cursor: DevPtr<u32>,
    pub content: DevPtr<u32>,
    pub nbins: u32,
    pub _pad0: u32,
}
crate::kernel_params!(BucketFillParams, 40, ["bucket_fill"]);

/// Parameters of the `bucket_count_stable` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketCountStableParams {
    pub keys: DevPtr<u32>,
    pub n: u64,
    pub matrix: DevPtr<u32>,
    pub out_of_range: DevPtr<u32>,
    pub first_out_of_range: DevPtr<u32>,
    pub nbins: u32,
    pub tiles: u32,
    pub per: u32,
    pub _pad0: u32,
}
crate::kernel_params!(BucketCountStableParams, 56, ["bucket_count_stable"]);

/// Parameters of the `bucket_stable_offsets` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketStableOffsetsParams {
    pub scanned: DevPtr<u32>,
    pub offsets: DevPtr<u32>,
    pub tiles: u32,
    pub nbins: u32,
    pub total: u32,
    pub _pad0: u32,
}
crate::kernel_params!(BucketStableOffsetsParams, 32, ["bucket_stable_offsets"]);

/// Parameters of the `bucket_fill_stable` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketFillStableParams {
    pub keys: DevPtr<u32>,
    pub n: u64,
    pub matrix: DevPtr<u32>,
    pub content: DevPtr<u32>,
    pub nbins: u32,
    pub tiles: u32,
    pub per: u32,
    pub _pad0: u32,
}
crate::kernel_params!(BucketFillStableParams, 48, ["bucket_fill_stable"]);

/// Parameters of the `bucket_block_fill` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BucketBlockFillParams {
    pub keys: DevPtr<u32>,
    pub seg_offsets: DevPtr<u32>,
    pub out_offsets: DevPtr<u32>,
    pub out_content: DevPtr<u32>,
    pub fallbacks: DevPtr<u32>,
    pub first_out_of_range: DevPtr<u32>,
    pub nsegs: u32,
    pub nbins: u32,
    pub capacity: u32,
    pub stable: u32,
}
crate::kernel_params!(BucketBlockFillParams, 64, ["bucket_block_fill"]);

#[cfg(target_arch = "nvptx64")]
pub mod device {
    use super::*;
    use crate::histogram::encode_first_index;
    use crate::histogram::fill::for_each_key_warp_uniform;
    use crate::intrinsics as i;
    use crate::scan::device::BlockScan;

    /// Device-wide fill: `content[cursor[key]++] = index`, warp-aggregated.
    ///
    /// # Safety
    /// `keys` valid for `n < 2^32` elements, 16-byte aligned, every key `< nbins` (the count
    /// pass checked it); `cursor` a copy of `offsets[..nbins]`; `content` valid for `n`.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn bucket_fill(p: BucketFillParams) {
        let (keys, n, nbins, cursor, content) = (
            p.keys.ptr(),
            p.n,
            p.nbins,
            p.cursor.ptr_mut(),
            p.content.ptr_mut(),
        );
        // SAFETY: launch contract.
        unsafe {
            for_each_key_warp_uniform(keys, n, |key, valid, idx| {
                let ok = valid && key < nbins;
                let m = i::match_any(if ok { key } else { u32::MAX });
                let leader = i::lowest_bit(m);
                let base = if ok && i::lane_id() == leader {
                    i::atomic_add_u32(cursor.add(key as usize), i::popc(m))
                } else {
                    0
                };
                let base = i::shfl_idx(base, leader);
                if ok {
                    content
                        .add((base + i::popc(m & i::lanemask_lt())) as usize)
                        .write(idx as u32);
                }
            })
        }
    }

    /// Walks warp-tile `tile` (items `tile * per .. min((tile + 1) * per, n)`) 32 items at a
    /// time in index order; `f(key, valid, in_range, index, match_mask)` is called by all lanes.
    #[inline(always)]
    unsafe fn walk_tile<F: FnMut(u32, bool, bool, u64, u32)>(
        keys: *const u32,
        n: u64,
        nbins: u32,
        tile: u64,
        per: u64,
        mut f: F,
    ) {
        let start = tile * per;
        let end = if start + per < n { start + per } else { n };
        let mut c = start;
        while c < end {
            let idx = c + i::lane_id() as u64;
            let valid = idx < end;
            // SAFETY: idx < end <= n.
            let key = if valid {
                unsafe { keys.add(idx as usize).read() }
            } else {
                u32::MAX
            };
            let ok = valid && key < nbins;
            let m = i::match_any(if ok { key } else { u32::MAX });
            f(key, valid, ok, idx, m);
            i::sync_warp();
            c += 32;
        }
    }

    /// Stable count: `matrix[key * tiles + tile] += 1` for each item of each warp-tile;
    /// out-of-range keys are counted in `out_of_range` / `first_out_of_range`.
    ///
    /// # Safety
    /// `(tiles, per) == bucket_stable_tiling(n, nbins)`; `blockDim.x == BUCKET_THREADS`,
    /// `gridDim.x * BUCKET_THREADS / 32 >= tiles`; `keys` valid for `n < 2^32`; `matrix` valid
    /// for `nbins * tiles` zeroed words; `out_of_range`, `first_out_of_range` zeroed words.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn bucket_count_stable(p: BucketCountStableParams) {
        let (keys, n, nbins, tiles, per, matrix, out_of_range, first_out_of_range) = (
            p.keys.ptr(),
            p.n,
            p.nbins,
            p.tiles,
            p.per,
            p.matrix.ptr_mut(),
            p.out_of_range.ptr_mut(),
            p.first_out_of_range.ptr_mut(),
        );
        let tile = i::global_thread_idx() / 32;
        if tile >= tiles as u64 {
            return;
        }
        let mut bad = 0u32;
        let mut first = 0u32;
        // SAFETY: launch contract; each (key, tile) cell is written only by this warp, and
        // `sync_warp` between rounds orders the lanes' accesses.
        unsafe {
            walk_tile(
                keys,
                n,
                nbins,
                tile,
                per as u64,
                |key, valid, ok, idx, m| {
                    if ok && i::lanemask_lt() & m == 0 {
                        let cell = matrix.add(key as usize * tiles as usize + tile as usize);
                        cell.write(cell.read() + i::popc(m));
                    }
                    if valid && !ok {
                        bad += 1;
                        first = first.max(encode_first_index(idx as u32));
                    }
                },
            )
        };
        if bad > 0 {
            // SAFETY: launch contract.
            unsafe {
                i::atomic_add_u32(out_of_range, bad);
                i::atomic_max_u32(first_out_of_range, first);
            }
        }
    }

    /// `offsets[b] = scanned[b * tiles]` for `b < nbins`, `offsets[nbins] = total`.
    ///
    /// # Safety
    /// `scanned` valid for `nbins * tiles`, `offsets` for `nbins + 1` words.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn bucket_stable_offsets(p: BucketStableOffsetsParams) {
        let (scanned, tiles, nbins, total, offsets) = (
            p.scanned.ptr(),
            p.tiles,
            p.nbins,
            p.total,
            p.offsets.ptr_mut(),
        );
        let b = i::global_thread_idx();
        if b < nbins as u64 {
            // SAFETY: b < nbins.
            unsafe {
                offsets
                    .add(b as usize)
                    .write(scanned.add(b as usize * tiles as usize).read())
            };
        } else if b == nbins as u64 {
            // SAFETY: slot nbins.
            unsafe { offsets.add(b as usize).write(total) };
        }
    }

    /// Stable fill: each warp-tile writes its items in index order, starting for each bin at
    /// the scanned matrix cell, which it advances.
    ///
    /// # Safety
    /// As [`bucket_count_stable`]; `matrix` holds the exclusive scan of the counts; every
    /// key `< nbins`; `content` valid for `n`.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn bucket_fill_stable(p: BucketFillStableParams) {
        let (keys, n, nbins, tiles, per, matrix, content) = (
            p.keys.ptr(),
            p.n,
            p.nbins,
            p.tiles,
            p.per,
            p.matrix.ptr_mut(),
            p.content.ptr_mut(),
        );
        let tile = i::global_thread_idx() / 32;
        if tile >= tiles as u64 {
            return;
        }
        // SAFETY: launch contract; cells are private to this warp (see the count kernel).
        unsafe {
            walk_tile(
                keys,
                n,
                nbins,
                tile,
                per as u64,
                |key, _valid, ok, idx, m| {
                    let leader = i::lowest_bit(m);
                    let is_leader = i::lane_id() == leader;
                    let cell = matrix.add(if ok {
                        key as usize * tiles as usize + tile as usize
                    } else {
                        0
                    });
                    let base = if ok && is_leader { cell.read() } else { 0 };
                    let base = i::shfl_idx(base, leader);
                    if ok {
                        content
                            .add((base + i::popc(m & i::lanemask_lt())) as usize)
                            .write(idx as u32);
                        if is_leader {
                            cell.write(base + i::popc(m));
                        }
                    }
                },
            )
        };
    }

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
}
