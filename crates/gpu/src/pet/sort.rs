//! Stable merge sort of singles by time (block sort + merge-path passes), the seed algorithm.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// Stable sort of each tile of `SORT_TILE` singles by time, in shared memory, by rank
/// merging: runs of 1, 2, 4, ... 512 are merged in place pairwise; each element's new
/// position is its position in its run plus its rank in the partner run (lower bound
/// from the left run, upper bound from the right run: stable). The last tile may be short.
///
/// # Safety
/// `blockDim.x == SORT_THREADS`, `gridDim.x == ceil(n / SORT_TILE)`, `sort_smem_bytes()`
/// of shared memory; `input`, `output` valid for `n` singles, not overlapping.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_merge_sort_block(p: PetMergeSortBlockParams) {
    let (input, output, n) = (p.input.ptr(), p.output.ptr_mut(), p.n);
    let base = i::block_idx_x() as u64 * SORT_TILE as u64;
    let m = if n - base < SORT_TILE as u64 {
        (n - base) as u32
    } else {
        SORT_TILE
    };
    let smem = i::dynamic_shared_ptr() as *mut Single;
    let mut src = smem;
    // SAFETY: two tiles of shared memory.
    let mut dst = unsafe { smem.add(SORT_TILE as usize) };
    let t = i::thread_idx_x();
    let mut k = t;
    while k < m {
        // SAFETY: base + k < n; k < SORT_TILE.
        unsafe {
            src.add(k as usize)
                .write(input.add((base + k as u64) as usize).read())
        };
        k += SORT_THREADS;
    }
    i::sync_threads();
    let mut width = 1u32;
    while width < m {
        let mut k = t;
        while k < m {
            // SAFETY: k < m <= SORT_TILE.
            let x = unsafe { src.add(k as usize).read() };
            let run = k / width;
            let start = run * width;
            let pair_start = (run & !1) * width;
            let partner = start ^ width;
            let (plen, left) = if run & 1 == 0 {
                let len = if partner >= m {
                    0
                } else if m - partner < width {
                    m - partner
                } else {
                    width
                };
                (len, true)
            } else {
                (width, false)
            };
            let key = x.time;
            // SAFETY: partner + q < m for q < plen.
            let r = rank_in(plen, key, left, |q| unsafe {
                src.add((partner + q) as usize).read().time
            });
            let pos = pair_start + (k - start) + r;
            // SAFETY: pos < m (a permutation of the pair's range).
            unsafe { dst.add(pos as usize).write(x) };
            k += SORT_THREADS;
        }
        i::sync_threads();
        core::mem::swap(&mut src, &mut dst);
        width *= 2;
    }
    let mut k = t;
    while k < m {
        // SAFETY: k < m; base + k < n.
        unsafe {
            output
                .add((base + k as u64) as usize)
                .write(src.add(k as usize).read())
        };
        k += SORT_THREADS;
    }
}

/// One merge pass: merges runs `2r` and `2r + 1` (boundaries from [`run_bound`]) of
/// `input` into `output`. Block `b` writes outputs `b * SORT_TILE ..`; for each pair of
/// runs its tile overlaps it finds the merge-path splits of its output range, loads the
/// two input pieces into shared memory, ranks each element in the other piece (stable) and
/// writes the merged piece with coalesced stores.
///
/// # Safety
/// `blockDim.x == SORT_THREADS`, `gridDim.x == ceil(n / SORT_TILE)`, `sort_smem_bytes()`
/// of shared memory; `input`, `output` valid for `n`, not overlapping; with `width == 0`,
/// `runs` holds `nruns + 1` non-decreasing boundaries.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_merge_sort_pass(p: PetMergeSortPassParams) {
    let (input, output, n, width, runs, nruns) = (
        p.input.ptr(),
        p.output.ptr_mut(),
        p.n,
        p.width,
        p.runs.ptr(),
        p.nruns,
    );
    let smem = i::dynamic_shared_ptr() as *mut Single;
    // SAFETY: inside sort_smem_bytes.
    let tile_out = unsafe { smem.add(SORT_TILE as usize) };
    // SAFETY: the 32 bytes after the two tiles.
    let splits = unsafe { smem.add(2 * SORT_TILE as usize) as *mut u64 };
    let t = i::thread_idx_x();
    let p0 = i::block_idx_x() as u64 * SORT_TILE as u64;
    let p1 = if n - p0 < SORT_TILE as u64 {
        n
    } else {
        p0 + SORT_TILE as u64
    };
    // SAFETY: with width == 0, k <= nruns (run_bound checks).
    let bound = |k: u64| {
        run_bound(
            k,
            width,
            nruns,
            n,
            |q| unsafe { runs.add(q as usize).read() } as u64,
        )
    };
    let nr = run_count(width, nruns, n);
    let npairs = nr.div_ceil(2);
    // First pair whose end is past p0: binary search over pair ends.
    let (mut lo, mut hi) = (0u64, npairs);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if bound(2 * mid + 2) <= p0 {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let mut pair = lo;
    while pair < npairs {
        let a0 = bound(2 * pair);
        if a0 >= p1 {
            break;
        }
        let b0 = bound(2 * pair + 1);
        let b1 = bound(2 * pair + 2);
        let (la, lb) = (b0 - a0, b1 - b0);
        let s0 = if p0 > a0 { p0 } else { a0 };
        let s1 = if p1 < b1 { p1 } else { b1 };
        let (d0, d1) = (s0 - a0, s1 - a0);
        if t == 0 || t == 32 {
            let d = if t == 0 { d0 } else { d1 };
            // SAFETY: merge_path reads a[q], q < la, and b[q], q < lb.
            let ia = merge_path(
                d,
                la,
                lb,
                |q| unsafe { input.add((a0 + q) as usize).read().time },
                |q| unsafe { input.add((b0 + q) as usize).read().time },
            );
            // SAFETY: two split slots.
            unsafe { splits.add((t / 32) as usize).write(ia) };
        }
        i::sync_threads();
        // SAFETY: written before the barrier.
        let (i0, i1) = unsafe { (splits.read(), splits.add(1).read()) };
        let (j0, j1) = (d0 - i0, d1 - i1);
        let na = (i1 - i0) as u32;
        let nb = (j1 - j0) as u32;
        let total = na + nb;
        let mut k = t;
        while k < total {
            let g = if k < na {
                a0 + i0 + k as u64
            } else {
                b0 + j0 + (k - na) as u64
            };
            // SAFETY: g < n; k < total <= SORT_TILE.
            unsafe { smem.add(k as usize).write(input.add(g as usize).read()) };
            k += SORT_THREADS;
        }
        i::sync_threads();
        let mut k = t;
        while k < total {
            // SAFETY: k < total.
            let x = unsafe { smem.add(k as usize).read() };
            let pos = if k < na {
                // SAFETY: na + q < total.
                k + rank_in(nb, x.time, true, |q| unsafe {
                    smem.add((na + q) as usize).read().time
                })
            } else {
                // SAFETY: q < na.
                (k - na)
                    + rank_in(na, x.time, false, |q| unsafe {
                        smem.add(q as usize).read().time
                    })
            };
            // SAFETY: pos < total (a permutation).
            unsafe { tile_out.add(pos as usize).write(x) };
            k += SORT_THREADS;
        }
        i::sync_threads();
        let mut k = t;
        while k < total {
            // SAFETY: s0 + k < s1 <= n.
            unsafe {
                output
                    .add((s0 + k as u64) as usize)
                    .write(tile_out.add(k as usize).read())
            };
            k += SORT_THREADS;
        }
        i::sync_threads();
        pair += 1;
    }
}

/// The smallest and largest [`time_key`] of the singles' times, and whether every time is an
/// integer of magnitude at most 2^53 ([`time_integer`]) with the smallest and largest of those
/// integers: [`RANGE_WORDS`] words (a warp reduction, then one atomic per warp and word).
/// Grid-stride.
///
/// # Safety
/// `singles` valid for `n` elements; `range` for [`RANGE_WORDS`] words initialised to
/// [`RANGE_INIT`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_time_range(p: PetTimeRangeParams) {
    let (singles, range, n) = (p.singles.ptr(), p.range.ptr_mut(), p.n);
    let stride = i::grid_dim_x() as u64 * KEYS_THREADS as u64;
    let mut j = i::block_idx_x() as u64 * KEYS_THREADS as u64 + i::thread_idx_x() as u64;
    // (min key, max key, min integer, max integer) as order-preserving u64s; not-integral flag.
    let (mut lo, mut hi, mut ilo, mut ihi) = (u64::MAX, 0u64, u64::MAX, 0u64);
    let mut fractional = 0u32;
    let mut take = |t: f64| {
        let k = time_key(t);
        lo = lo.min(k);
        hi = hi.max(k);
        match time_integer(t) {
            Some(v) => {
                let u = int_key(v);
                ilo = ilo.min(u);
                ihi = ihi.max(u);
            }
            None => fractional = 1,
        }
    };
    let time = |j: u64| {
        // SAFETY: j < n (callers); the time is the second word of the 16-byte single.
        f64::from_bits(unsafe { i::ldg_u64((singles as *const u64).add(2 * j as usize + 1)) })
    };
    // Four loads in flight per thread while they fit, then one at a time.
    while j + 3 * stride < n {
        let (t0, t1, t2, t3) = (
            time(j),
            time(j + stride),
            time(j + 2 * stride),
            time(j + 3 * stride),
        );
        take(t0);
        take(t1);
        take(t2);
        take(t3);
        j += 4 * stride;
    }
    while j < n {
        take(time(j));
        j += stride;
    }
    let mut d = 16;
    while d > 0 {
        let sh = |v: u64| {
            (i::shfl_xor((v >> 32) as u32, d) as u64) << 32 | i::shfl_xor(v as u32, d) as u64
        };
        lo = lo.min(sh(lo));
        hi = hi.max(sh(hi));
        ilo = ilo.min(sh(ilo));
        ihi = ihi.max(sh(ihi));
        d /= 2;
    }
    let fractional = i::warp_or_u32(fractional);
    if i::lane_id() == 0 && lo <= hi {
        // SAFETY: RANGE_WORDS words.
        unsafe {
            i::atomic_min_u64(range, lo);
            i::atomic_max_u64(range.add(1), hi);
            if ilo <= ihi {
                i::atomic_min_u64(range.add(2), ilo);
                i::atomic_max_u64(range.add(3), ihi);
            }
            if fractional != 0 {
                i::atomic_max_u64(range.add(4), 1);
            }
        }
    }
}

/// Writes the sort key of every single's time: `mode` [`KEYS_FLOAT`] writes [`time_key`]
/// (`u64`), [`KEYS_INT64`] the `u64` `time_integer(t) - base`, [`KEYS_INT32`] the same as a
/// `u32` (the host picks the mode from [`pet_time_range`]'s words, so that the integer modes
/// only meet integral times whose offsets fit). Grid-stride.
///
/// # Safety
/// `singles` valid for `n` elements, `keys` for `n` keys of the mode's width.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_time_keys(p: PetTimeKeysParams) {
    let (singles, keys, n, mode, base) = (p.singles.ptr(), p.keys.ptr_mut(), p.n, p.mode, p.base);
    let stride = i::grid_dim_x() as u64 * KEYS_THREADS as u64;
    let mut j = i::block_idx_x() as u64 * KEYS_THREADS as u64 + i::thread_idx_x() as u64;
    while j < n {
        // SAFETY: j < n; the time is the second word of the 16-byte single.
        let t =
            f64::from_bits(unsafe { i::ldg_u64((singles as *const u64).add(2 * j as usize + 1)) });
        let int = (t as i64).wrapping_sub(base as i64) as u64;
        // SAFETY: j < n keys of the mode's width.
        unsafe {
            match mode {
                KEYS_INT32 => (keys as *mut u32).add(j as usize).write(int as u32),
                KEYS_INT64 => keys.add(j as usize).write(int),
                _ => keys.add(j as usize).write(time_key(t)),
            }
        }
        j += stride;
    }
}

/// `output[i] = input[index[i]]` for `i < n`, 16-byte singles. Grid-stride.
///
/// # Safety
/// `input`, `output` valid for `n` singles, not overlapping; `index` for `n` words, each
/// below `n`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_gather_singles(p: PetGatherSinglesParams) {
    let (input, index, output, n) = (p.input.ptr(), p.index.ptr(), p.output.ptr_mut(), p.n);
    let stride = i::grid_dim_x() as u64 * KEYS_THREADS as u64;
    let mut j = i::block_idx_x() as u64 * KEYS_THREADS as u64 + i::thread_idx_x() as u64;
    while j < n {
        // SAFETY: j < n; index[j] < n (contract); singles are 16 bytes at 16-byte aligned
        // addresses (allocation alignment), read and written as one vector each.
        unsafe {
            let src = i::ldg_u32(index.add(j as usize)) as usize;
            let v = i::ldg_v2_u64((input as *const u64).add(2 * src));
            i::st_v2_u64((output as *mut u64).add(2 * j as usize), v);
        }
        j += stride;
    }
}
