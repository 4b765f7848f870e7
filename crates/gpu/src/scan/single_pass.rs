//! The single-pass device-wide scan (striped tiles) and the scan kernels.

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::intrinsics as i;

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
        sleep_ns: p.lookback_ns,
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
        sleep_ns: p.lookback_ns,
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
