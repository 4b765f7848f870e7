//! The streamed chain's order check on the device: every BDM's frames must come in time
//! order. `pet_order_blocks` summarises each block's frames per BDM (first and last time, in
//! frame order) and flags a disorder inside the block; `pet_order_join` walks the summaries
//! in order from the BDMs' latest times before the chunk, flags a disorder across blocks or
//! chunks, keeps the latest times for the next chunk and writes the watermark words.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

const WARPS: u32 = ORDER_THREADS / 32;
const BDMS: u32 = ORDER_BDMS as u32;
/// One warp's table: first times, last times (`u64` each), seen bytes.
const T_FIRST: u32 = 0;
const T_LAST: u32 = 8 * BDMS;
const T_SEEN: u32 = 16 * BDMS;
const _: () = assert!(
    ORDER_THREADS == BDMS,
    "the block join has one thread per BDM"
);
const _: () = assert!(ORDER_WARP_TABLE_BYTES == 17 * BDMS);
const _: () = assert!(ORDER_WARP_FRAMES % (32 * ORDER_BATCH as u64) == 0);

/// Per block of [`ORDER_BLOCK_FRAMES`] frames: for every BDM, its first and last time in
/// the block and whether it has any frame (a bit of `seen`); a time below the same BDM's
/// previous time inside the block sets [`STAT_ORDER_DISORDER`] in `stats[STAT_ORDER]`.
/// Frames whose BDM byte is `>= bdms` are skipped (the conversion counts them).
///
/// Each warp walks its [`ORDER_WARP_FRAMES`] frames 32 at a time: the lanes holding one BDM
/// (`match.any`) compare with the next lower such lane, the lowest with the warp's table
/// (the BDM's last time so far), and the highest writes the table. The block then joins its
/// warps' tables in warp order, one thread per BDM.
///
/// # Safety
/// `blockDim.x == ORDER_THREADS`, `gridDim.x == ceil(n / ORDER_BLOCK_FRAMES)`,
/// `order_smem_bytes()` of dynamic shared memory; `frames` valid for `n` frames, 16-byte
/// aligned; `first` and `last` hold `ORDER_BDMS` words per block, `seen`
/// `ORDER_SEEN_WORDS` per block; `stats` `STAT_WORDS` words.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_order_blocks(p: PetOrderBlocksParams) {
    let (frames, n, bdms) = (p.frames.ptr(), p.n, p.bdms);
    let lane = i::lane_id();
    let warp = i::warp_id();
    let blk = i::block_idx_x() as u64;
    let table = i::shared_base() + warp * ORDER_WARP_TABLE_BYTES;
    // SAFETY: this warp's table: 8 seen bytes per lane.
    unsafe {
        i::st_shared_u32(table + T_SEEN + 8 * lane, 0);
        i::st_shared_u32(table + T_SEEN + 8 * lane + 4, 0);
    }
    i::sync_warp();
    let below = i::lanemask_lt();
    let above = !(below | 1 << lane);
    let start = blk * ORDER_BLOCK_FRAMES + warp as u64 * ORDER_WARP_FRAMES;
    let end = (start + ORDER_WARP_FRAMES).min(n);
    let mut bad = false;
    let mut base = start;
    // Warp-uniform: `base` and `end` are the same in every lane.
    while base < end {
        // ORDER_BATCH frames per lane loaded before any is used (loads in flight).
        let mut keys = [0u32; ORDER_BATCH as usize];
        let mut times = [0u64; ORDER_BATCH as usize];
        for j in 0..ORDER_BATCH as usize {
            let idx = base + (32 * j) as u64 + lane as u64;
            // An invalid frame gets a key no other lane holds.
            keys[j] = BDMS + lane;
            if idx < end {
                // SAFETY: idx < n (16-byte aligned frames, read-only here).
                let w = unsafe { i::ldg_v4_u32(frames.add(idx as usize * 4)) };
                let bdm = w[0] >> 8 & 0xff;
                if bdm < bdms {
                    keys[j] = bdm;
                    times[j] = words_time(&w);
                }
            }
        }
        for j in 0..ORDER_BATCH as usize {
            let (key, t) = (keys[j], times[j]);
            let valid = key < BDMS;
            let peers = i::match_any(key);
            let lower = peers & below;
            let src = if lower != 0 {
                31 - lower.leading_zeros()
            } else {
                lane
            };
            let prev = i::shfl_idx_u64(t, src);
            if valid {
                if lower != 0 {
                    bad |= t < prev;
                } else {
                    // SAFETY: key < ORDER_BDMS: inside this warp's table.
                    unsafe {
                        if i::ld_shared_u8(table + T_SEEN + key) != 0 {
                            bad |= t < i::ld_shared_u64(table + T_LAST + 8 * key);
                        } else {
                            i::st_shared_u64(table + T_FIRST + 8 * key, t);
                            i::st_shared_u8(table + T_SEEN + key, 1);
                        }
                    }
                }
            }
            // The lowest lane of a BDM read its last time before the highest writes it.
            i::sync_warp();
            if valid && peers & above == 0 {
                // SAFETY: as above.
                unsafe { i::st_shared_u64(table + T_LAST + 8 * key, t) };
            }
            i::sync_warp();
        }
        base += 32 * ORDER_BATCH as u64;
    }
    i::sync_threads();
    // The block's join, thread b = BDM b, warps in frame order.
    let b = i::thread_idx_x();
    let (mut seen, mut first, mut last) = (false, 0u64, 0u64);
    for w in 0..WARPS {
        let t = i::shared_base() + w * ORDER_WARP_TABLE_BYTES;
        // SAFETY: b < ORDER_BDMS, inside warp w's table.
        unsafe {
            if i::ld_shared_u8(t + T_SEEN + b) != 0 {
                let f = i::ld_shared_u64(t + T_FIRST + 8 * b);
                if seen {
                    bad |= f < last;
                } else {
                    first = f;
                    seen = true;
                }
                last = i::ld_shared_u64(t + T_LAST + 8 * b);
            }
        }
    }
    let o = blk as usize * ORDER_BDMS + b as usize;
    // SAFETY: ORDER_BDMS words per block.
    unsafe {
        p.first.ptr_mut().add(o).write(first);
        p.last.ptr_mut().add(o).write(last);
    }
    let bits = i::ballot(seen);
    if lane == 0 {
        // SAFETY: ORDER_SEEN_WORDS words per block, one per warp.
        unsafe {
            p.seen
                .ptr_mut()
                .add(blk as usize * ORDER_SEEN_WORDS + warp as usize)
                .write(bits)
        };
    }
    if i::sync_threads_or(bad) && b == 0 {
        // SAFETY: stats holds STAT_WORDS words.
        unsafe { i::atomic_or_u32(p.stats.ptr_mut().add(STAT_ORDER), STAT_ORDER_DISORDER) };
    }
}

/// Joins `blocks` block summaries of [`pet_order_blocks`] in order, starting from
/// `state_in` (each BDM's latest time before the chunk and whether it has one); writes the
/// BDMs' latest times after the chunk to `state_out`, sets [`STAT_ORDER_DISORDER`] if a
/// block's first time of a BDM is below the BDM's latest time before it, and writes the
/// watermark words: [`STAT_ORDER_MISSING`] when a BDM below `bdms` has no time yet, and
/// the smallest of their latest times in `stats[STAT_MARK_LO..STAT_MARK_LO + 2]` (a `u64`,
/// minimum by atomics: `u64::MAX` on entry).
///
/// One block of [`ORDER_JOIN_THREADS`]: thread `(q, b)` walks part `q` of the blocks for BDM
/// `b`; thread `b` of part 0 joins the parts.
///
/// # Safety
/// One block, `blockDim.x == ORDER_JOIN_THREADS`, `order_join_smem_bytes()` of dynamic
/// shared memory; the summaries of `blocks` blocks as written by [`pet_order_blocks`];
/// `state_in` and `state_out` `ORDER_STATE_WORDS` words each (not overlapping); `stats`
/// `STAT_WORDS` words.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn pet_order_join(p: PetOrderJoinParams) {
    const PARTS: u32 = ORDER_JOIN_THREADS / BDMS;
    let tid = i::thread_idx_x();
    let (b, q) = (tid % BDMS, tid / BDMS);
    let blocks = p.blocks;
    let (lo, hi) = (
        (blocks as u64 * q as u64 / PARTS as u64) as u32,
        (blocks as u64 * (q + 1) as u64 / PARTS as u64) as u32,
    );
    let (first_a, last_a, seen_a) = (p.first.ptr(), p.last.ptr(), p.seen.ptr());
    let (mut seen, mut first, mut last, mut bad) = (false, 0u64, 0u64, false);
    let mut r = lo;
    while r < hi {
        // Eight blocks' words loaded before any is used.
        let mut s = [0u32; 8];
        let mut f = [0u64; 8];
        let mut l = [0u64; 8];
        for j in 0..8u32 {
            if r + j < hi {
                let k = (r + j) as usize;
                // SAFETY: block r + j < blocks.
                unsafe {
                    s[j as usize] =
                        seen_a.add(k * ORDER_SEEN_WORDS + b as usize / 32).read() >> (b % 32) & 1;
                    f[j as usize] = first_a.add(k * ORDER_BDMS + b as usize).read();
                    l[j as usize] = last_a.add(k * ORDER_BDMS + b as usize).read();
                }
            }
        }
        for j in 0..8 {
            if s[j] != 0 {
                if seen {
                    bad |= f[j] < last;
                } else {
                    first = f[j];
                    seen = true;
                }
                last = l[j];
            }
        }
        r += 8;
    }
    // Parts to shared memory: first, last, then a flags word (bit 0 seen, bit 1 bad).
    let sm = i::shared_base();
    let slot = q * BDMS + b;
    // SAFETY: order_join_smem_bytes() = ORDER_JOIN_THREADS * 20 bytes.
    unsafe {
        i::st_shared_u64(sm + 8 * slot, first);
        i::st_shared_u64(sm + 8 * (ORDER_JOIN_THREADS + slot), last);
        i::st_shared_u32(
            sm + 16 * ORDER_JOIN_THREADS + 4 * slot,
            seen as u32 | (bad as u32) << 1,
        );
    }
    i::sync_threads();
    if q == 0 {
        let state_in = p.state_in.ptr();
        // SAFETY: ORDER_STATE_WORDS words: the latest times, then the seen bits.
        let (mut had, mut latest) = unsafe {
            (
                (state_in
                    .add(ORDER_BDMS)
                    .cast::<u32>()
                    .add(b as usize / 32)
                    .read()
                    >> (b % 32))
                    & 1
                    != 0,
                state_in.add(b as usize).read(),
            )
        };
        let mut bad = false;
        for part in 0..PARTS {
            let slot = part * BDMS + b;
            // SAFETY: as the stores above.
            let (f, l, flags) = unsafe {
                (
                    i::ld_shared_u64(sm + 8 * slot),
                    i::ld_shared_u64(sm + 8 * (ORDER_JOIN_THREADS + slot)),
                    i::ld_shared_u32(sm + 16 * ORDER_JOIN_THREADS + 4 * slot),
                )
            };
            bad |= flags & 2 != 0;
            if flags & 1 != 0 {
                bad |= had && f < latest;
                had = true;
                latest = l;
            }
        }
        let state_out = p.state_out.ptr_mut();
        // SAFETY: ORDER_STATE_WORDS words.
        unsafe { state_out.add(b as usize).write(latest) };
        let bits = i::ballot(had);
        if b % 32 == 0 {
            // SAFETY: the seen bits follow the ORDER_BDMS times.
            unsafe {
                state_out
                    .add(ORDER_BDMS)
                    .cast::<u32>()
                    .add(b as usize / 32)
                    .write(bits)
            };
        }
        // The watermark over the scanner's BDMs: the smallest latest time, when all have one.
        let counted = b < p.bdms;
        let mut m = if counted { latest } else { u64::MAX };
        let mut k = 16;
        while k > 0 {
            m = m.min(i::shfl_xor_u64(m, k));
            k /= 2;
        }
        let missing = i::ballot(counted && !had) != 0;
        let any_bad = i::ballot(bad) != 0;
        // One atomic per warp of part 0 (8, once per chunk).
        if b % 32 == 0 {
            let stats = p.stats.ptr_mut();
            // SAFETY: stats holds STAT_WORDS words; the mark words (8-byte aligned) hold
            // u64::MAX on entry.
            unsafe {
                let mut flags = 0;
                if any_bad {
                    flags |= STAT_ORDER_DISORDER;
                }
                if missing {
                    flags |= STAT_ORDER_MISSING;
                }
                if flags != 0 {
                    i::atomic_or_u32(stats.add(STAT_ORDER), flags);
                }
                i::atomic_min_u64(stats.add(STAT_MARK_LO).cast::<u64>(), m);
            }
        }
    }
}
