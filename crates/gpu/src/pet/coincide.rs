//! Coincidence windows: next, walk, count and fill (policies).

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// Time of single `k`.
///
/// # Safety
/// `k` inside the array.
#[inline(always)]
pub(crate) unsafe fn time_at(s: *const Single, k: u64) -> f64 {
    // SAFETY: caller contract.
    unsafe { (*s.add(k as usize)).time }
}

/// Per single `i`: `next[i]` = first `j > i` with `t_j - t_i > reach` (`n` if none);
/// with `delayed != 0`, `lo[i]` = first `j > i` with `t_j - t_i >= delay`. Records the
/// first index that breaks the order (`!(t_i >= t_{i-1})`, NaN included) in
/// `status[CO_FIRST_UNSORTED]` (atomic min).
///
/// # Safety
/// `blockDim.x == COINCIDE_THREADS`, `gridDim.x == ceil(n / COINCIDE_THREADS)`;
/// `singles` valid for `n`, `next` and (if delayed) `lo` for `n` words; `status`
/// `CO_WORDS` words.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_coincide_next(p: PetCoincideNextParams) {
    let (singles, n, reach, delay, delayed, next, lo, status) = (
        p.singles.ptr(),
        p.n,
        p.reach,
        p.delay,
        p.delayed,
        p.next.ptr_mut(),
        p.lo.ptr_mut(),
        p.status.ptr_mut(),
    );
    let idx = i::global_thread_idx();
    if idx >= n {
        return;
    }
    // SAFETY: idx < n.
    let t = unsafe { time_at(singles, idx) };
    if t.is_nan() || (idx > 0 && !(t >= unsafe { time_at(singles, idx - 1) })) {
        // SAFETY: status holds CO_WORDS words.
        unsafe { i::atomic_min_u32(status.add(CO_FIRST_UNSORTED), idx as u32) };
    }
    let rest = (n - idx - 1) as u32;
    // SAFETY: idx + 1 + q < n.
    let e = gallop_rank(
        rest,
        reach,
        false,
        |q| unsafe { time_at(singles, idx + 1 + q as u64) } - t,
    );
    // SAFETY: idx < n.
    unsafe { next.add(idx as usize).write((idx + 1) as u32 + e) };
    if delayed != 0 {
        // SAFETY: as above.
        let s = gallop_rank(
            rest,
            delay,
            true,
            |q| unsafe { time_at(singles, idx + 1 + q as u64) } - t,
        );
        // SAFETY: idx < n.
        unsafe { lo.add(idx as usize).write((idx + 1) as u32 + s) };
    }
}

/// Marks the openers of the non-sliding window chain: single 0 and every single more than
/// `window` after its predecessor start a segment that no earlier window reaches; one
/// thread per segment start walks `o = next[o]` until the next segment start.
///
/// # Safety
/// As [`pet_coincide_next`]; `next` computed by it; `opener` valid for `n` bytes, zeroed.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_coincide_walk(p: PetCoincideWalkParams) {
    let (singles, n, window, next, opener) = (
        p.singles.ptr(),
        p.n,
        p.window,
        p.next.ptr(),
        p.opener.ptr_mut(),
    );
    let idx = i::global_thread_idx();
    if idx >= n {
        return;
    }
    // SAFETY: idx < n and idx - 1 < n.
    let starts = idx == 0 || unsafe { time_at(singles, idx) - time_at(singles, idx - 1) } > window;
    if !starts {
        return;
    }
    let mut o = idx;
    loop {
        // SAFETY: o < n.
        unsafe { opener.add(o as usize).write(1) };
        // SAFETY: o < n.
        let nx = unsafe { next.add(o as usize).read() } as u64;
        if nx <= o || nx >= n {
            break;
        }
        // SAFETY: nx < n, nx - 1 < n.
        let gap = unsafe { time_at(singles, nx) - time_at(singles, nx - 1) };
        if gap > window {
            break;
        }
        o = nx;
    }
}

/// The window of opener `o`: its length and its member accessor base. Prompt: singles
/// `o .. next[o]`; delayed: `o`, then `lo[o] .. next[o]`.
///
/// # Safety
/// `o < n`; arrays as in [`pet_coincide_next`].
#[inline(always)]
pub(crate) unsafe fn window_of(
    o: u64,
    delayed: bool,
    next: *const u32,
    lo: *const u32,
) -> (u32, u64) {
    // SAFETY: o < n.
    let e = unsafe { next.add(o as usize).read() } as u64;
    if delayed {
        // SAFETY: o < n.
        let s = unsafe { lo.add(o as usize).read() } as u64;
        let members = if e > s { e - s } else { 0 };
        (1 + members as u32, s)
    } else {
        ((e - o) as u32, o + 1)
    }
}

/// Per single: when it opens a complete window (`window_complete`), the number of pairs
/// the window yields (`counts[i]`, else 0); the first incomplete opener goes to
/// `status[CO_RESUME]` (atomic min), an oversized window to `status[CO_OVERSIZE]`
/// (atomic max), and the total to the 64-bit word at `status[CO_TOTAL_LO]`.
///
/// # Safety
/// As [`pet_coincide_walk`]; `opener` ignored when `delayed != 0` (every single opens);
/// `counts` valid for `n` words.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_coincide_count(p: PetCoincideCountParams) {
    let (singles, n, reach, watermark, delayed, policy, next, lo, opener, counts, status) = (
        p.singles.ptr(),
        p.n,
        p.reach,
        p.watermark,
        p.delayed,
        p.policy,
        p.next.ptr(),
        p.lo.ptr(),
        p.opener.ptr(),
        p.counts.ptr_mut(),
        p.status.ptr_mut(),
    );
    let idx = i::global_thread_idx();
    let mut count = 0u32;
    if idx < n {
        // SAFETY: idx < n.
        let opens = delayed != 0 || unsafe { opener.add(idx as usize).read() } != 0;
        if opens {
            // SAFETY: idx < n.
            let t = unsafe { time_at(singles, idx) };
            if !window_complete(t, watermark, reach) {
                // SAFETY: status words.
                unsafe { i::atomic_min_u32(status.add(CO_RESUME), idx as u32) };
            } else {
                // SAFETY: idx < n.
                let (len, base) = unsafe { window_of(idx, delayed != 0, next, lo) };
                let pol = Policy::from_u32(policy);
                if len > MAX_MULTIPLE && pol != Policy::KillAll {
                    // SAFETY: status words.
                    unsafe { i::atomic_max_u32(status.add(CO_OVERSIZE), len) };
                } else {
                    count = window_pairs(
                        len,
                        delayed != 0,
                        pol,
                        // SAFETY: members are idx or base + k - 1 < next[idx] <= n.
                        |k| unsafe {
                            singles
                                .add(if k == 0 { idx } else { base + k as u64 - 1 } as usize)
                                .read()
                        },
                        |_, _| {},
                    );
                }
            }
        }
        // SAFETY: idx < n.
        unsafe { counts.add(idx as usize).write(count) };
    }
    if policy_bounded(Policy::from_u32(policy)) {
        // The fill kernel writes the total from the scan (one atomic per warp on one word
        // cost 80 us at 4 M singles).
        return;
    }
    let total = crate::scan::device::warp_reduce_sum(count as u64);
    if i::lane_id() == 0 && total != 0 {
        // SAFETY: the u64 at words CO_TOTAL_LO.. is 8-byte aligned (word 4).
        unsafe { i::atomic_add_u64(status.add(CO_TOTAL_LO) as *mut u64, total) };
    }
}

/// Writes the pairs of every complete window at `offsets[i]` (exclusive scan of counts).
///
/// # Safety
/// As [`pet_coincide_count`]; `offsets` its scan; `pairs` valid for the total.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_coincide_fill(p: PetCoincideFillParams) {
    let (singles, n, reach, watermark, delayed, policy, next, lo, opener, offsets, pairs) = (
        p.singles.ptr(),
        p.n,
        p.reach,
        p.watermark,
        p.delayed,
        p.policy,
        p.next.ptr(),
        p.lo.ptr(),
        p.opener.ptr(),
        p.offsets.ptr(),
        p.pairs.ptr_mut(),
    );
    let idx = i::global_thread_idx();
    if idx >= n {
        return;
    }
    if idx == n - 1 && policy_bounded(Policy::from_u32(policy)) {
        // SAFETY: idx < n; the status's u64 at words CO_TOTAL_LO.. is 8-byte aligned.
        unsafe {
            let total = offsets.add(idx as usize).read() as u64
                + p.counts.ptr().add(idx as usize).read() as u64;
            (p.status.ptr_mut().add(CO_TOTAL_LO) as *mut u64).write(total);
        }
    }
    // SAFETY: idx < n.
    let opens = delayed != 0 || unsafe { opener.add(idx as usize).read() } != 0;
    if !opens {
        return;
    }
    // SAFETY: idx < n.
    let t = unsafe { time_at(singles, idx) };
    if !window_complete(t, watermark, reach) {
        return;
    }
    // SAFETY: idx < n.
    let (len, base) = unsafe { window_of(idx, delayed != 0, next, lo) };
    let pol = Policy::from_u32(policy);
    if len > MAX_MULTIPLE && pol != Policy::KillAll {
        return;
    }
    let member = |k: u32| if k == 0 { idx } else { base + k as u64 - 1 };
    // SAFETY: idx < n.
    let mut at = unsafe { offsets.add(idx as usize).read() } as usize;
    window_pairs(
        len,
        delayed != 0,
        pol,
        // SAFETY: members < n.
        |k| unsafe { singles.add(member(k) as usize).read() },
        |a, b| {
            if (at as u64) < p.capacity {
                // SAFETY: members < n; `at` below the capacity.
                unsafe {
                    pairs.add(at).write(Coincidence {
                        a: singles.add(member(a) as usize).read(),
                        b: singles.add(member(b) as usize).read(),
                    })
                };
            }
            at += 1;
        },
    );
}
