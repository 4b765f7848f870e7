//! The stable container: per-tile counts, bin offsets, stable fill.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::histogram::encode_first_index;
use crate::intrinsics as i;

/// Walks warp-tile `tile` (items `tile * per .. min((tile + 1) * per, n)`) 32 items at a
/// time in index order; `f(key, valid, in_range, index, match_mask)` is called by all lanes.
#[inline(always)]
pub(crate) unsafe fn walk_tile<F: FnMut(u32, bool, bool, u64, u32)>(
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
