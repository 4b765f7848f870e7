//! Prefix sums: warp scan, block scan, and the single-pass device-wide scan.
//!
//! Arithmetic is modular (wrapping), as in CUB: a sum that overflows `u32` wraps.
//!
//! # Layers (CUB's `WarpScan` → `BlockScan` → `DeviceScan`)
//! - [`device::warp_inclusive_sum`], [`device::warp_exclusive_sum`], [`device::warp_reduce_sum`]:
//!   five shuffle steps (Hillis–Steele in registers), no shared memory, no barrier.
//! - [`device::BlockScan`]: any block size that is a multiple of 32 up to 1024. Each warp
//!   scans in registers; lane 31 of each warp writes its warp total to shared memory
//!   (`nwarps` words, no tile of `2 * blockDim` as the seed's `intraBlockScan` uses, and no
//!   bank conflicts: one word per warp); warp 0 scans the warp totals; every thread adds its
//!   warp's prefix. Two barriers.
//! - Device scan, single pass with decoupled look-back (Merrill & Garland 2016): block `b`
//!   scans tile `b` (blocks start in index order, as CUB relies on), loads `ITEMS` values per
//!   thread with coalesced 16-byte loads, scans the tile, publishes its aggregate (flag `A`), looks back over the
//!   predecessors' published values with one warp, 32 at a time, until it meets an inclusive
//!   prefix (flag `P`), publishes its own inclusive prefix and writes its output. Input is read
//!   once and output written once: `2n` words of traffic, the copy's.
//!
//! # Worked example
//! input `[3, 1, 4, 1, 5]`: exclusive sum `[0, 3, 4, 8, 9]`, inclusive sum `[3, 4, 8, 9, 14]`.
//!
//! # Tile status protocol
//! For 4-byte values (CUB's choice) flag and value share one 64-bit word per tile, written and
//! read with single 64-bit relaxed device-scope accesses: no fence on the critical path.
//! For 8-byte values:
//! per tile `t`: `flags[t]` (0 = not ready, 1 = aggregate, 2 = inclusive prefix),
//! `aggregates[t]`, `inclusive[t]`. A value is written (relaxed, device scope) before its flag
//! is released (`st.release.gpu`); a reader acquires the flag (`ld.acquire.gpu`) before it
//! reads the value (relaxed, device scope), so it sees the value that the flag announces.
//! Aggregate and inclusive values have separate slots, so a reader that saw flag 1 never reads
//! an inclusive value by mistake. The host zeroes `flags` (2 words per tile) before a launch.

use crate::params::DevPtr;

/// Kernel: block-wide scan of each block's `blockDim` elements (test and building block).
pub const KERNEL_BLOCK_SCAN_U32: &str = "scan_block_u32";
/// Kernel: device-wide inclusive/exclusive sum of `u32`.
pub const KERNEL_DEVICE_SCAN_U32: &str = "scan_device_u32";
/// Kernel: device-wide inclusive/exclusive sum of `u64`.
pub const KERNEL_DEVICE_SCAN_U64: &str = "scan_device_u64";

/// Threads per block of the device scan.
pub const DEVICE_SCAN_THREADS: u32 = 256;
/// Items per thread of the device scan, `u32` (64 bytes per thread).
pub const DEVICE_SCAN_ITEMS_U32: u32 = 16;
/// Items per thread of the device scan, `u64` (64 bytes per thread).
pub const DEVICE_SCAN_ITEMS_U64: u32 = 8;

/// Tile status flag: not yet published.
pub const STATUS_INVALID: u32 = 0;
/// Tile status flag: the tile's own aggregate is published.
pub const STATUS_AGGREGATE: u32 = 1;
/// Tile status flag: the inclusive prefix up to and including the tile is published.
pub const STATUS_PREFIX: u32 = 2;

/// Largest block size of [`device::BlockScan`].
pub const MAX_BLOCK_THREADS: u32 = 1024;

/// Shared-memory bytes of a [`device::BlockScan`] over values of `value_bytes` bytes:
/// 32 warp prefixes plus the block total.
pub const fn block_scan_smem_bytes(value_bytes: usize) -> usize {
    33 * value_bytes
}

/// Shared-memory bytes of the device scan kernel over values of `value_bytes` bytes.
/// Block-scan storage and the tile's exclusive prefix, padded to 16 bytes.
pub const fn device_scan_smem_bytes(value_bytes: usize) -> usize {
    let b = block_scan_smem_bytes(value_bytes) + value_bytes;
    b.div_ceil(16) * 16
}

/// Elements per tile of the device scan for a value type of `value_bytes` bytes.
pub const fn device_scan_tile(value_bytes: usize) -> u64 {
    let items = if value_bytes == 8 {
        DEVICE_SCAN_ITEMS_U64
    } else {
        DEVICE_SCAN_ITEMS_U32
    };
    (DEVICE_SCAN_THREADS * items) as u64
}

/// Number of tiles (blocks) the device scan launches for `n` elements.
pub const fn device_scan_tiles(n: u64, value_bytes: usize) -> u64 {
    n.div_ceil(device_scan_tile(value_bytes))
}

/// Scan direction flag passed to the device scan kernels.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanKind {
    /// `out[i] = in[0] + ... + in[i-1]`, `out[0] = 0`.
    Exclusive = 0,
    /// `out[i] = in[0] + ... + in[i]`.
    Inclusive = 1,
}

/// Device code: warp and block collectives and the device scan kernels.
/// Parameters of the `scan_device_u32` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ScanDeviceU32Params {
    pub input: DevPtr<u32>,
    pub output: DevPtr<u32>,
    pub n: u64,
    pub flags: DevPtr<u32>,
    pub aggregates: DevPtr<u32>,
    pub inclusive: DevPtr<u32>,
    pub kind: u32,
    pub _pad0: u32,
}
crate::kernel_params!(ScanDeviceU32Params, 56, ["scan_device_u32"]);

/// Parameters of the `scan_device_u64` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ScanDeviceU64Params {
    pub input: DevPtr<u64>,
    pub output: DevPtr<u64>,
    pub n: u64,
    pub flags: DevPtr<u32>,
    pub aggregates: DevPtr<u64>,
    pub inclusive: DevPtr<u64>,
    pub kind: u32,
    pub _pad0: u32,
}
crate::kernel_params!(ScanDeviceU64Params, 56, ["scan_device_u64"]);

/// Parameters of the `scan_block_u32` kernel (one `#[repr(C)]` struct, see `crate::params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ScanBlockU32Params {
    pub input: DevPtr<u32>,
    pub output: DevPtr<u32>,
    pub totals: DevPtr<u32>,
    pub n: u64,
    pub kind: u32,
    pub _pad0: u32,
}
crate::kernel_params!(ScanBlockU32Params, 40, ["scan_block_u32"]);

#[cfg(target_arch = "nvptx64")]
pub mod device {
    use super::*;
    use crate::intrinsics as i;

    /// A value that can be summed and moved across lanes: `u32` and `u64`.
    pub trait ScanValue: Copy + Default {
        /// Whether the look-back packs flag and value into one 64-bit status word.
        const PACKED: bool;
        /// The value's bits when it is packable (4 bytes).
        fn packable(self) -> Option<u32>;
        /// The value from packed bits.
        fn from_packed(bits: u32) -> Self;
        /// Wrapping addition.
        fn wadd(self, o: Self) -> Self;
        /// `__shfl_up_sync`.
        fn shfl_up(self, d: u32) -> Self;
        /// `__shfl_xor_sync`.
        fn shfl_xor(self, m: u32) -> Self;
        /// `__shfl_sync`.
        fn shfl_idx(self, l: u32) -> Self;
        /// Relaxed device-scope load.
        ///
        /// # Safety
        /// `p` valid and aligned, in global memory.
        unsafe fn load_relaxed(p: *const Self) -> Self;
        /// Relaxed device-scope store.
        ///
        /// # Safety
        /// `p` valid and aligned, in global memory.
        unsafe fn store_relaxed(p: *mut Self, v: Self);
    }

    impl ScanValue for u32 {
        const PACKED: bool = true;
        #[inline(always)]
        fn packable(self) -> Option<u32> {
            Some(self)
        }
        #[inline(always)]
        fn from_packed(bits: u32) -> Self {
            bits
        }
        #[inline(always)]
        fn wadd(self, o: Self) -> Self {
            self.wrapping_add(o)
        }
        #[inline(always)]
        fn shfl_up(self, d: u32) -> Self {
            i::shfl_up(self, d)
        }
        #[inline(always)]
        fn shfl_xor(self, m: u32) -> Self {
            i::shfl_xor(self, m)
        }
        #[inline(always)]
        fn shfl_idx(self, l: u32) -> Self {
            i::shfl_idx(self, l)
        }
        #[inline(always)]
        unsafe fn load_relaxed(p: *const Self) -> Self {
            // SAFETY: forwarded contract.
            unsafe { i::load_relaxed_u32(p) }
        }
        #[inline(always)]
        unsafe fn store_relaxed(p: *mut Self, v: Self) {
            // SAFETY: forwarded contract.
            unsafe { i::store_relaxed_u32(p, v) }
        }
    }

    impl ScanValue for u64 {
        const PACKED: bool = false;
        #[inline(always)]
        fn packable(self) -> Option<u32> {
            None
        }
        #[inline(always)]
        fn from_packed(bits: u32) -> Self {
            bits as u64
        }
        #[inline(always)]
        fn wadd(self, o: Self) -> Self {
            self.wrapping_add(o)
        }
        #[inline(always)]
        fn shfl_up(self, d: u32) -> Self {
            let lo = i::shfl_up(self as u32, d);
            let hi = i::shfl_up((self >> 32) as u32, d);
            (hi as u64) << 32 | lo as u64
        }
        #[inline(always)]
        fn shfl_xor(self, m: u32) -> Self {
            let lo = i::shfl_xor(self as u32, m);
            let hi = i::shfl_xor((self >> 32) as u32, m);
            (hi as u64) << 32 | lo as u64
        }
        #[inline(always)]
        fn shfl_idx(self, l: u32) -> Self {
            let lo = i::shfl_idx(self as u32, l);
            let hi = i::shfl_idx((self >> 32) as u32, l);
            (hi as u64) << 32 | lo as u64
        }
        #[inline(always)]
        unsafe fn load_relaxed(p: *const Self) -> Self {
            // SAFETY: forwarded contract.
            unsafe { i::load_relaxed_u64(p) }
        }
        #[inline(always)]
        unsafe fn store_relaxed(p: *mut Self, v: Self) {
            // SAFETY: forwarded contract.
            unsafe { i::store_relaxed_u64(p, v) }
        }
    }

    /// Warp inclusive sum (all 32 lanes participate).
    #[inline(always)]
    pub fn warp_inclusive_sum<T: ScanValue>(x: T) -> T {
        let lane = i::lane_id();
        let mut v = x;
        let mut d = 1;
        while d < 32 {
            let y = v.shfl_up(d);
            if lane >= d {
                v = v.wadd(y);
            }
            d <<= 1;
        }
        v
    }

    /// Warp exclusive sum (all 32 lanes participate); lane 0 gets zero.
    #[inline(always)]
    pub fn warp_exclusive_sum<T: ScanValue>(x: T) -> T {
        let incl = warp_inclusive_sum(x);
        let e = incl.shfl_up(1);
        if i::lane_id() == 0 {
            T::default()
        } else {
            e
        }
    }

    /// Warp sum, broadcast to all 32 lanes (butterfly).
    #[inline(always)]
    pub fn warp_reduce_sum<T: ScanValue>(x: T) -> T {
        let mut v = x;
        let mut m = 16;
        while m > 0 {
            v = v.wadd(v.shfl_xor(m));
            m >>= 1;
        }
        v
    }

    /// Block-wide scan over one value per thread, for any `blockDim.x` that is a multiple of
    /// 32 and at most 1024. `storage` points to [`block_scan_smem_bytes`] bytes of shared
    /// memory. The caller puts a barrier between two uses of the same storage.
    pub struct BlockScan<T: ScanValue> {
        storage: *mut T,
    }

    impl<T: ScanValue> BlockScan<T> {
        /// # Safety
        /// `storage` is a generic pointer to at least 33 `T` of this block's shared memory,
        /// aligned for `T`, used by nothing else during the scan.
        #[inline(always)]
        pub unsafe fn new(storage: *mut T) -> Self {
            Self { storage }
        }

        /// Exclusive sum across the block; returns `(exclusive prefix, block total)`.
        /// Every thread of the block must call it (two barriers inside).
        #[inline(always)]
        pub fn exclusive_sum(&self, x: T) -> (T, T) {
            let lane = i::lane_id();
            let warp = i::warp_id();
            let nwarps = i::warps_per_block();
            let incl = warp_inclusive_sum(x);
            if lane == 31 {
                // SAFETY: warp < 32, inside the 33-element storage.
                unsafe { self.storage.add(warp as usize).write(incl) };
            }
            i::sync_threads();
            if warp == 0 {
                let t = if lane < nwarps {
                    // SAFETY: lane < nwarps <= 32.
                    unsafe { self.storage.add(lane as usize).read() }
                } else {
                    T::default()
                };
                let t_incl = warp_inclusive_sum(t);
                let t_excl = t_incl.shfl_up(1);
                let t_excl = if lane == 0 { T::default() } else { t_excl };
                if lane < nwarps {
                    // SAFETY: as above.
                    unsafe { self.storage.add(lane as usize).write(t_excl) };
                }
                if lane == 31 {
                    // SAFETY: slot 32 holds the block total.
                    unsafe { self.storage.add(32).write(t_incl) };
                }
            }
            i::sync_threads();
            // SAFETY: warp < 32 and slot 32 were written before the barrier.
            let (warp_prefix, total) = unsafe {
                (
                    self.storage.add(warp as usize).read(),
                    self.storage.add(32).read(),
                )
            };
            // incl - x + warp_prefix, without subtraction: exclusive = shfl_up(incl).
            let e = incl.shfl_up(1);
            let e = if lane == 0 { T::default() } else { e };
            (warp_prefix.wadd(e), total)
        }

        /// Inclusive sum across the block; returns `(inclusive prefix, block total)`.
        #[inline(always)]
        pub fn inclusive_sum(&self, x: T) -> (T, T) {
            let (e, t) = self.exclusive_sum(x);
            (e.wadd(x), t)
        }
    }

    /// Per-tile status of the decoupled look-back, shared by the scan and compaction kernels.
    pub struct TileStatus<T: ScanValue> {
        /// 0 / `STATUS_AGGREGATE` / `STATUS_PREFIX` per tile.
        pub flags: *mut u32,
        /// The tile's own sum.
        pub aggregates: *mut T,
        /// The sum of all tiles up to and including this one.
        pub inclusive: *mut T,
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
                        packed = unsafe {
                            i::load_relaxed_u64((self.flags as *const u64).add(p as usize))
                        };
                        (packed >> 32) as u32
                    } else {
                        // SAFETY: 0 <= p < tile.
                        unsafe { i::load_acquire_u32(self.flags.add(p as usize)) }
                    };
                    if !i::any(flag == STATUS_INVALID) {
                        break;
                    }
                    i::nanosleep(32);
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

    /// Tile loads and stores in the **warp-striped vector** arrangement: a warp owns `32 * N`
    /// consecutive items; in round `j` lane `l` holds the `VEC` items (one 16-byte vector)
    /// starting at `j * 32 * VEC + l * VEC` of the warp's run. Every load and store instruction
    /// of a warp then covers 512 contiguous bytes (fully coalesced), and each thread's items of
    /// one round are consecutive, so scans need one warp scan per round.
    pub trait StripedTile: ScanValue {
        /// Items per 16-byte vector.
        const VEC: usize;
        /// Loads item `k` of this lane (`k = j * VEC + v`), zero past `n`.
        ///
        /// # Safety
        /// `input` valid for `n` elements, 16-byte aligned; `warp_start` a multiple of `32 * VEC`.
        unsafe fn load_striped<const N: usize>(
            input: *const Self,
            warp_start: u64,
            n: u64,
            out: &mut [Self; N],
        );
        /// Stores the items at the same positions (only those below `n`).
        ///
        /// # Safety
        /// `output` valid for `n` elements, 16-byte aligned.
        unsafe fn store_striped<const N: usize>(
            output: *mut Self,
            warp_start: u64,
            n: u64,
            v: &[Self; N],
        );
    }

    /// Global index of item `k` of this lane in the striped arrangement.
    #[inline(always)]
    pub fn striped_index(warp_start: u64, vec: usize, k: usize) -> u64 {
        let (j, v) = (k / vec, k % vec);
        warp_start + (j * 32 * vec) as u64 + (i::lane_id() as usize * vec + v) as u64
    }

    impl StripedTile for u32 {
        const VEC: usize = 4;
        #[inline(always)]
        unsafe fn load_striped<const N: usize>(
            input: *const u32,
            warp_start: u64,
            n: u64,
            out: &mut [u32; N],
        ) {
            let mut j = 0;
            while j < N {
                let first = striped_index(warp_start, 4, j);
                if first + 4 <= n {
                    // SAFETY: in bounds; first is a multiple of 4 → 16-byte aligned.
                    let v = unsafe { i::ldg_v4_u32(input.add(first as usize)) };
                    out[j] = v[0];
                    out[j + 1] = v[1];
                    out[j + 2] = v[2];
                    out[j + 3] = v[3];
                } else {
                    let mut v = 0;
                    while v < 4 {
                        // SAFETY: first + v < n checked.
                        out[j + v] = if first + (v as u64) < n {
                            unsafe { input.add(first as usize + v).read() }
                        } else {
                            0
                        };
                        v += 1;
                    }
                }
                j += 4;
            }
        }
        #[inline(always)]
        unsafe fn store_striped<const N: usize>(
            output: *mut u32,
            warp_start: u64,
            n: u64,
            x: &[u32; N],
        ) {
            let mut j = 0;
            while j < N {
                let first = striped_index(warp_start, 4, j);
                if first + 4 <= n {
                    // SAFETY: in bounds and aligned.
                    unsafe {
                        i::st_v4_u32(
                            output.add(first as usize),
                            [x[j], x[j + 1], x[j + 2], x[j + 3]],
                        )
                    };
                } else {
                    let mut v = 0;
                    while v < 4 {
                        if first + (v as u64) < n {
                            // SAFETY: in bounds.
                            unsafe { output.add(first as usize + v).write(x[j + v]) };
                        }
                        v += 1;
                    }
                }
                j += 4;
            }
        }
    }

    impl StripedTile for u64 {
        const VEC: usize = 2;
        #[inline(always)]
        unsafe fn load_striped<const N: usize>(
            input: *const u64,
            warp_start: u64,
            n: u64,
            out: &mut [u64; N],
        ) {
            let mut j = 0;
            while j < N {
                let first = striped_index(warp_start, 2, j);
                if first + 2 <= n {
                    // SAFETY: in bounds; first even → 16-byte aligned.
                    let v = unsafe { i::ldg_v2_u64(input.add(first as usize)) };
                    out[j] = v[0];
                    out[j + 1] = v[1];
                } else {
                    // SAFETY: first < n checked.
                    out[j] = if first < n {
                        unsafe { input.add(first as usize).read() }
                    } else {
                        0
                    };
                    out[j + 1] = 0;
                }
                j += 2;
            }
        }
        #[inline(always)]
        unsafe fn store_striped<const N: usize>(
            output: *mut u64,
            warp_start: u64,
            n: u64,
            x: &[u64; N],
        ) {
            let mut j = 0;
            while j < N {
                let first = striped_index(warp_start, 2, j);
                if first + 2 <= n {
                    // SAFETY: in bounds and aligned.
                    unsafe { i::st_v2_u64(output.add(first as usize), [x[j], x[j + 1]]) };
                } else if first < n {
                    // SAFETY: in bounds.
                    unsafe { output.add(first as usize).write(x[j]) };
                }
                j += 2;
            }
        }
    }

    /// Exclusive scan of a warp's striped items: `x[k]` becomes the sum of the warp's items
    /// before it (in data order). Returns the warp total (all lanes).
    #[inline(always)]
    pub fn warp_striped_exclusive<T: StripedTile, const N: usize>(x: &mut [T; N]) -> T {
        let mut carry = T::default();
        let mut j = 0;
        while j < N {
            let mut s = T::default();
            let mut v = 0;
            while v < T::VEC {
                s = s.wadd(x[j + v]);
                v += 1;
            }
            let incl = warp_inclusive_sum(s);
            let e = incl.shfl_up(1);
            let mut run = carry.wadd(if i::lane_id() == 0 { T::default() } else { e });
            let mut v = 0;
            while v < T::VEC {
                let item = x[j + v];
                x[j + v] = run;
                run = run.wadd(item);
                v += 1;
            }
            carry = carry.wadd(incl.shfl_idx(31));
            j += T::VEC;
        }
        carry
    }

    impl<T: ScanValue> BlockScan<T> {
        /// Exclusive scan over the warps of the block: given each warp's total (the same in
        /// all its lanes), returns `(sum of the totals of earlier warps, block total)`.
        #[inline(always)]
        pub fn exclusive_sum_warps(&self, warp_total: T) -> (T, T) {
            let x = if i::lane_id() == 31 {
                warp_total
            } else {
                T::default()
            };
            let (e, t) = self.exclusive_sum(x);
            (e.shfl_idx(0), t)
        }
    }

    /// Device-wide scan body, one tile per block.
    ///
    /// # Safety
    /// See [`scan_device_u32`].
    #[inline(always)]
    pub unsafe fn device_scan<T: StripedTile, const N: usize>(
        input: *const T,
        output: *mut T,
        n: u64,
        kind: u32,
        status: TileStatus<T>,
    ) {
        let (scan_storage, prefix_slot) = tile_smem::<T>();
        let tile = current_tile();
        let tile_items = DEVICE_SCAN_THREADS as u64 * N as u64;
        let warp_start = tile as u64 * tile_items + i::warp_id() as u64 * 32 * N as u64;
        let mut items = [T::default(); N];
        // SAFETY: launch contract (input valid for n, aligned).
        unsafe { T::load_striped(input, warp_start, n, &mut items) };
        let inputs = items;
        let warp_total = warp_striped_exclusive(&mut items);
        // SAFETY: storage is ours; barrier below separates uses.
        let bs = unsafe { BlockScan::new(scan_storage) };
        let (warp_prefix, tile_total) = bs.exclusive_sum_warps(warp_total);
        // SAFETY: status arrays hold one entry per tile; prefix_slot is ours.
        let tile_prefix = unsafe { tile_exclusive_prefix(&status, tile, tile_total, prefix_slot) };
        let base = tile_prefix.wadd(warp_prefix);
        let inclusive = kind == ScanKind::Inclusive as u32;
        let mut k = 0;
        while k < N {
            items[k] = base.wadd(items[k]);
            if inclusive {
                items[k] = items[k].wadd(inputs[k]);
            }
            k += 1;
        }
        // SAFETY: launch contract (output valid for n, aligned).
        unsafe { T::store_striped(output, warp_start, n, &items) };
    }

    /// Device-wide inclusive (`kind = 1`) or exclusive (`kind = 0`) sum of `n` `u32`.
    ///
    /// # Safety
    /// Launch contract: `blockDim.x == DEVICE_SCAN_THREADS`, `gridDim.x ==
    /// device_scan_tiles(n, 4)`, `device_scan_smem_bytes(4)` bytes of dynamic shared memory;
    /// `input` and `output` valid for `n` elements, 16-byte aligned, not overlapping;
    /// `flags` valid for `2 * gridDim.x` zeroed words, `aggregates`, `inclusive` for `gridDim.x`
    /// entries.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn scan_device_u32(p: ScanDeviceU32Params) {
        let (input, output, n, kind, flags, aggregates, inclusive) = (
            p.input.ptr(),
            p.output.ptr_mut(),
            p.n,
            p.kind,
            p.flags.ptr_mut(),
            p.aggregates.ptr_mut(),
            p.inclusive.ptr_mut(),
        );
        let status = TileStatus {
            flags,
            aggregates,
            inclusive,
        };
        // SAFETY: forwarded launch contract.
        unsafe {
            device_scan::<u32, { DEVICE_SCAN_ITEMS_U32 as usize }>(input, output, n, kind, status)
        }
    }

    /// Device-wide sum of `n` `u64`; as [`scan_device_u32`] with 8-byte values.
    ///
    /// # Safety
    /// As [`scan_device_u32`], with `device_scan_tiles(n, 8)` blocks and
    /// `device_scan_smem_bytes(8)` bytes of shared memory.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn scan_device_u64(p: ScanDeviceU64Params) {
        let (input, output, n, kind, flags, aggregates, inclusive) = (
            p.input.ptr(),
            p.output.ptr_mut(),
            p.n,
            p.kind,
            p.flags.ptr_mut(),
            p.aggregates.ptr_mut(),
            p.inclusive.ptr_mut(),
        );
        let status = TileStatus {
            flags,
            aggregates,
            inclusive,
        };
        // SAFETY: forwarded launch contract.
        unsafe {
            device_scan::<u64, { DEVICE_SCAN_ITEMS_U64 as usize }>(input, output, n, kind, status)
        }
    }

    /// Block scan test kernel: each block scans its own `blockDim.x` consecutive elements
    /// (zero past `n`); writes the scan to `output` and each block's total to `totals`.
    ///
    /// # Safety
    /// `blockDim.x` a multiple of 32, at most 1024; `block_scan_smem_bytes(4)` bytes of shared
    /// memory; `input`/`output` valid for `n`, `totals` for `gridDim.x` elements.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn scan_block_u32(p: ScanBlockU32Params) {
        let (input, output, totals, n, kind) = (
            p.input.ptr(),
            p.output.ptr_mut(),
            p.totals.ptr_mut(),
            p.n,
            p.kind,
        );
        let idx = i::global_thread_idx();
        // SAFETY: idx < n checked.
        let x = if idx < n {
            unsafe { input.add(idx as usize).read() }
        } else {
            0
        };
        // SAFETY: the dynamic shared memory holds the block-scan storage.
        let bs = unsafe { BlockScan::<u32>::new(i::dynamic_shared_ptr() as *mut u32) };
        let (e, total) = bs.exclusive_sum(x);
        let v = if kind == ScanKind::Inclusive as u32 {
            e.wrapping_add(x)
        } else {
            e
        };
        if idx < n {
            // SAFETY: idx < n.
            unsafe { output.add(idx as usize).write(v) };
        }
        if i::thread_idx_x() == 0 {
            // SAFETY: one total per block.
            unsafe { totals.add(i::block_idx_x() as usize).write(total) };
        }
    }
}
