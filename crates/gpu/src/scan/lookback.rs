//! Decoupled look-back: tile status words and the exclusive prefix of a tile.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

/// Per-tile status of the decoupled look-back, shared by the scan and compaction kernels.
pub struct TileStatus<T: ScanValue> {
    /// 0 / `STATUS_AGGREGATE` / `STATUS_PREFIX` per tile.
    pub flags: *mut u32,
    /// The tile's own sum.
    pub aggregates: *mut T,
    /// The sum of all tiles up to and including this one.
    pub inclusive: *mut T,
    /// Nanoseconds to sleep between polls of unpublished predecessors.
    pub sleep_ns: u32,
}

impl<T: ScanValue> TileStatus<T> {
    /// Publish `tile`'s value with `flag` (called by one thread).
    ///
    /// # Safety
    /// `tile` is inside the arrays.
    #[inline(always)]
    pub unsafe fn publish(&self, tile: u32, flag: u32, v: T) {
        if let Some(bits) = v.packable() {
            // 4-byte values: flag and value in one 64-bit word, one single-copy-atomic
            // store, no fence (CUB does the same).
            // SAFETY: `flags` holds 2 words per tile, 8-byte aligned (cudarc allocation).
            unsafe {
                i::store_relaxed_u64(
                    (self.flags as *mut u64).add(tile as usize),
                    (flag as u64) << 32 | bits as u64,
                )
            };
            return;
        }
        let slot = if flag == STATUS_PREFIX {
            self.inclusive
        } else {
            self.aggregates
        };
        // SAFETY: caller guarantees `tile` is in range.
        unsafe {
            T::store_relaxed(slot.add(tile as usize), v);
            i::store_release_u32(self.flags.add(tile as usize), flag);
        }
    }

    /// Called by all 32 lanes of one warp of tile `tile > 0`: publishes the tile's
    /// aggregate, sums the predecessors' values back to the nearest inclusive prefix,
    /// publishes the tile's inclusive prefix and returns the exclusive prefix (all lanes).
    ///
    /// # Safety
    /// `tile` and every index below it are inside the arrays; tiles `< tile` were
    /// started by blocks that will publish (guaranteed by the atomic tile counter).
    #[inline(always)]
    pub unsafe fn lookback(&self, tile: u32, aggregate: T) -> T {
        let lane = i::lane_id();
        if lane == 0 {
            // SAFETY: tile in range.
            unsafe { self.publish(tile, STATUS_AGGREGATE, aggregate) };
        }
        let mut prefix = T::default();
        // Window of predecessors: lane l looks at tile `end - l`.
        let mut end = tile as i64 - 1;
        loop {
            let p = end - lane as i64;
            let mut flag;
            let mut packed = 0u64;
            loop {
                flag = if p < 0 {
                    STATUS_PREFIX
                } else if T::PACKED {
                    // SAFETY: 0 <= p < tile; 2 words per tile.
                    packed =
                        unsafe { i::load_relaxed_u64((self.flags as *const u64).add(p as usize)) };
                    (packed >> 32) as u32
                } else {
                    // SAFETY: 0 <= p < tile.
                    unsafe { i::load_acquire_u32(self.flags.add(p as usize)) }
                };
                if !i::any(flag == STATUS_INVALID) {
                    break;
                }
                i::nanosleep(self.sleep_ns);
            }
            let value = if p < 0 {
                T::default()
            } else if T::PACKED {
                T::from_packed(packed as u32)
            } else if flag == STATUS_PREFIX {
                // SAFETY: flag acquired; 0 <= p < tile.
                unsafe { T::load_relaxed(self.inclusive.add(p as usize)) }
            } else {
                // SAFETY: as above.
                unsafe { T::load_relaxed(self.aggregates.add(p as usize)) }
            };
            let pmask = i::ballot(flag == STATUS_PREFIX);
            if pmask != 0 {
                let first = i::lowest_bit(pmask);
                let v = if lane <= first { value } else { T::default() };
                prefix = prefix.wadd(warp_reduce_sum(v));
                break;
            }
            prefix = prefix.wadd(warp_reduce_sum(value));
            end -= 32;
        }
        if lane == 0 {
            // SAFETY: tile in range.
            unsafe { self.publish(tile, STATUS_PREFIX, prefix.wadd(aggregate)) };
        }
        prefix
    }
}

/// The tile a block works on: `blockIdx.x`, as CUB's single-pass scan does. Blocks of a
/// 1-D grid are dispatched in increasing index order, so every tile a block waits for in
/// its look-back has already been started by a resident block and will publish.
#[inline(always)]
pub fn current_tile() -> u32 {
    i::block_idx_x()
}

/// The tile-prefix step of a single-pass kernel: given this tile's total (known to all
/// threads), returns the sum of all earlier tiles (all threads). Warp 0 publishes and
/// looks back; the result is broadcast through `slot`. One barrier inside.
///
/// # Safety
/// `slot` a shared `T` used by nothing else; `status` arrays hold `tile + 1` entries.
#[inline(always)]
pub unsafe fn tile_exclusive_prefix<T: ScanValue>(
    status: &TileStatus<T>,
    tile: u32,
    tile_total: T,
    slot: *mut T,
) -> T {
    if i::warp_id() == 0 {
        let prefix = if tile == 0 {
            if i::lane_id() == 0 {
                // SAFETY: tile 0 is in range.
                unsafe { status.publish(0, STATUS_PREFIX, tile_total) };
            }
            T::default()
        } else {
            // SAFETY: caller contract.
            unsafe { status.lookback(tile, tile_total) }
        };
        if i::lane_id() == 0 {
            // SAFETY: shared slot.
            unsafe { slot.write(prefix) };
        }
    }
    i::sync_threads();
    // SAFETY: written before the barrier.
    unsafe { slot.read() }
}

/// Shared-memory layout of the device scan and compaction kernels:
/// `[BlockScan storage: 33 T][tile prefix: T]`.
#[inline(always)]
pub fn tile_smem<T>() -> (*mut T, *mut T) {
    let base = i::dynamic_shared_ptr();
    let sz = core::mem::size_of::<T>();
    // SAFETY: offsets inside `device_scan_smem_bytes(size_of::<T>())`.
    unsafe { (base as *mut T, base.add(33 * sz) as *mut T) }
}
