//! Device intrinsics: the one place where detkit touches PTX directly.
//!
//! Each function names the CUDA C++ intrinsic it stands for. All of them are thin
//! `asm!` wrappers (or `core::arch::nvptx` calls) and compile to a single PTX
//! instruction or a short fixed sequence. Kernels and device functions call these,
//! never `asm!` themselves.
//!
//! Warp-synchronous functions (`shfl_*`, `ballot`, `match_any`, ...) take the full-warp
//! mask `FULL_MASK`: detkit kernels are launched with block sizes that are multiples of
//! 32 and keep whole warps converged around these calls.
//!
//! The kernels are built twice (`cargo xtask build-ptx`): for `sm_70` (the PTX fallback) and
//! for `sm_80` (the source of every cubin). Where sm_80 has a better instruction, the
//! function of the section "Architecture-specific paths" below has two bodies, selected by
//! `cfg(target_feature = "sm_80")` (set by `-C target-cpu=sm_80`), with the same contract and
//! the same results; nothing else in the crate looks at the architecture. The host can force
//! the sm_70 image (`DETKIT_IMAGE=ptx70`) to compare the two on one card.
#![allow(clippy::missing_safety_doc)]

use core::arch::{asm, global_asm, nvptx};

/// All 32 lanes.
pub const FULL_MASK: u32 = 0xffff_ffff;

// ---------------------------------------------------------------------------------------
// Thread, block and grid indices
// ---------------------------------------------------------------------------------------

/// `threadIdx.x`
#[inline(always)]
pub fn thread_idx_x() -> u32 {
    // SAFETY: reads a special register; no preconditions.
    unsafe { nvptx::_thread_idx_x() as u32 }
}
/// `blockIdx.x`
#[inline(always)]
pub fn block_idx_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_x() as u32 }
}
/// `blockDim.x`
#[inline(always)]
pub fn block_dim_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_dim_x() as u32 }
}
/// `gridDim.x`
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_grid_dim_x() as u32 }
}
/// `threadIdx.x % 32` (`%laneid`)
#[inline(always)]
pub fn lane_id() -> u32 {
    let r: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {r}, %laneid;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}
/// `threadIdx.x / 32`: warp index within the block (1-D blocks).
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_idx_x() / 32
}
/// Number of warps in the block (1-D blocks whose size is a multiple of 32).
#[inline(always)]
pub fn warps_per_block() -> u32 {
    block_dim_x() / 32
}
/// Global thread index `blockIdx.x * blockDim.x + threadIdx.x`, 64-bit.
#[inline(always)]
pub fn global_thread_idx() -> u64 {
    block_idx_x() as u64 * block_dim_x() as u64 + thread_idx_x() as u64
}
/// Total threads of the grid `gridDim.x * blockDim.x`, 64-bit.
#[inline(always)]
pub fn grid_threads() -> u64 {
    grid_dim_x() as u64 * block_dim_x() as u64
}
/// `%lanemask_lt`: bits of the lanes below this one.
#[inline(always)]
pub fn lanemask_lt() -> u32 {
    let r: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {r}, %lanemask_lt;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}

// ---------------------------------------------------------------------------------------
// Barriers and votes
// ---------------------------------------------------------------------------------------

/// `__syncthreads()`
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: every thread of the block must reach this barrier: callers keep it in
    // block-uniform control flow.
    unsafe { nvptx::_syncthreads() }
}
/// `__syncthreads_or(p)`: barrier, then true when `p` is true in any thread (`bar.red.or`).
#[inline(always)]
pub fn sync_threads_or(p: bool) -> bool {
    let r: u32;
    // SAFETY: block-wide barrier; callers keep it in block-uniform control flow.
    unsafe {
        asm!(
            "{{ .reg .pred p, q; setp.ne.u32 p, {x}, 0; bar.red.or.pred q, 0, p; selp.u32 {r}, 1, 0, q; }}",
            x = in(reg32) p as u32, r = out(reg32) r, options(nostack)
        )
    };
    r != 0
}
/// `__syncthreads_and(p)` (`bar.red.and`).
#[inline(always)]
pub fn sync_threads_and(p: bool) -> bool {
    let r: u32;
    // SAFETY: block-wide barrier; callers keep it in block-uniform control flow.
    unsafe {
        asm!(
            "{{ .reg .pred p, q; setp.ne.u32 p, {x}, 0; bar.red.and.pred q, 0, p; selp.u32 {r}, 1, 0, q; }}",
            x = in(reg32) p as u32, r = out(reg32) r, options(nostack)
        )
    };
    r != 0
}
/// `__syncthreads_count(p)` (`bar.red.popc`).
#[inline(always)]
pub fn sync_threads_count(p: bool) -> u32 {
    let r: u32;
    // SAFETY: block-wide barrier; callers keep it in block-uniform control flow.
    unsafe {
        asm!(
            "{{ .reg .pred p; setp.ne.u32 p, {x}, 0; bar.red.popc.u32 {r}, 0, p; }}",
            x = in(reg32) p as u32, r = out(reg32) r, options(nostack)
        )
    };
    r
}
/// `__syncwarp()`
#[inline(always)]
pub fn sync_warp() {
    // SAFETY: all lanes of the warp reach it (full mask).
    unsafe { asm!("bar.warp.sync -1;", options(nostack)) };
}
/// `__ballot_sync(FULL_MASK, p)`
#[inline(always)]
pub fn ballot(p: bool) -> u32 {
    let r: u32;
    // SAFETY: warp-synchronous; all lanes converged (module contract).
    unsafe {
        asm!(
            "{{ .reg .pred p; setp.ne.u32 p, {x}, 0; vote.sync.ballot.b32 {r}, p, -1; }}",
            x = in(reg32) p as u32, r = out(reg32) r, options(nostack)
        )
    };
    r
}
/// `__any_sync(FULL_MASK, p)`
#[inline(always)]
pub fn any(p: bool) -> bool {
    ballot(p) != 0
}
/// `__all_sync(FULL_MASK, p)`
#[inline(always)]
pub fn all(p: bool) -> bool {
    ballot(p) == FULL_MASK
}
/// `__activemask()`
#[inline(always)]
pub fn activemask() -> u32 {
    let r: u32;
    // SAFETY: reads the active-lane mask; no preconditions.
    unsafe { asm!("activemask.b32 {r};", r = out(reg32) r, options(nostack)) };
    r
}
/// `__match_any_sync(FULL_MASK, v)`: lanes holding the same value as this one.
#[inline(always)]
pub fn match_any(v: u32) -> u32 {
    let r: u32;
    // SAFETY: warp-synchronous; all lanes converged (module contract).
    unsafe {
        asm!("match.any.sync.b32 {r}, {v}, -1;", v = in(reg32) v, r = out(reg32) r, options(nostack))
    };
    r
}
/// `__popc(x)`
#[inline(always)]
pub fn popc(x: u32) -> u32 {
    x.count_ones()
}
/// `__ffs(x) - 1`: index of the lowest set bit (`x != 0`).
#[inline(always)]
pub fn lowest_bit(x: u32) -> u32 {
    x.trailing_zeros()
}

// ---------------------------------------------------------------------------------------
// Warp shuffles
// ---------------------------------------------------------------------------------------

/// `__shfl_up_sync(FULL_MASK, v, delta)`
#[inline(always)]
pub fn shfl_up(v: u32, delta: u32) -> u32 {
    let r: u32;
    // SAFETY: warp-synchronous; all lanes converged (module contract).
    unsafe {
        asm!("shfl.sync.up.b32 {r}, {v}, {d}, 0, -1;", v = in(reg32) v, d = in(reg32) delta, r = out(reg32) r, options(nostack))
    };
    r
}
/// `__shfl_down_sync(FULL_MASK, v, delta)`
#[inline(always)]
pub fn shfl_down(v: u32, delta: u32) -> u32 {
    let r: u32;
    // SAFETY: warp-synchronous; all lanes converged (module contract).
    unsafe {
        asm!("shfl.sync.down.b32 {r}, {v}, {d}, 31, -1;", v = in(reg32) v, d = in(reg32) delta, r = out(reg32) r, options(nostack))
    };
    r
}
/// `__shfl_xor_sync(FULL_MASK, v, mask)`
#[inline(always)]
pub fn shfl_xor(v: u32, lane_mask: u32) -> u32 {
    let r: u32;
    // SAFETY: warp-synchronous; all lanes converged (module contract).
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {v}, {d}, 31, -1;", v = in(reg32) v, d = in(reg32) lane_mask, r = out(reg32) r, options(nostack))
    };
    r
}
/// `__shfl_sync(FULL_MASK, v, src_lane)`
#[inline(always)]
pub fn shfl_idx(v: u32, src_lane: u32) -> u32 {
    let r: u32;
    // SAFETY: warp-synchronous; all lanes converged (module contract).
    unsafe {
        asm!("shfl.sync.idx.b32 {r}, {v}, {d}, 31, -1;", v = in(reg32) v, d = in(reg32) src_lane, r = out(reg32) r, options(nostack))
    };
    r
}

/// A 64-bit value through a 32-bit shuffle `f` (its two halves; `f` is the same shuffle for
/// both, so every lane must call it, as any shuffle).
#[inline(always)]
fn shfl_halves(v: u64, f: impl Fn(u32) -> u32) -> u64 {
    f(v as u32) as u64 | (f((v >> 32) as u32) as u64) << 32
}
/// [`shfl_idx`] of a 64-bit value.
#[inline(always)]
pub fn shfl_idx_u64(v: u64, src_lane: u32) -> u64 {
    shfl_halves(v, |h| shfl_idx(h, src_lane))
}
/// [`shfl_up`] of a 64-bit value.
#[inline(always)]
pub fn shfl_up_u64(v: u64, delta: u32) -> u64 {
    shfl_halves(v, |h| shfl_up(h, delta))
}
/// [`shfl_down`] of a 64-bit value.
#[inline(always)]
pub fn shfl_down_u64(v: u64, delta: u32) -> u64 {
    shfl_halves(v, |h| shfl_down(h, delta))
}
/// [`shfl_xor`] of a 64-bit value.
#[inline(always)]
pub fn shfl_xor_u64(v: u64, lane_mask: u32) -> u64 {
    shfl_halves(v, |h| shfl_xor(h, lane_mask))
}

// ---------------------------------------------------------------------------------------
// Architecture-specific paths: one function each, an sm_80 body and its sm_70 twin
// ---------------------------------------------------------------------------------------

/// Whether this build of the kernels uses the sm_80 paths below.
pub const SM80_PATHS: bool = cfg!(target_feature = "sm_80");

/// `__reduce_add_sync(FULL_MASK, v)`: the warp's sum (wrapping) in every lane.
/// sm_80: one `redux.sync.add.u32`; sm_70: a five-step shuffle butterfly.
#[inline(always)]
pub fn warp_sum_u32(v: u32) -> u32 {
    #[cfg(target_feature = "sm_80")]
    {
        let r: u32;
        // SAFETY: warp-synchronous; all lanes converged (module contract).
        unsafe {
            asm!("redux.sync.add.u32 {r}, {v}, -1;", v = in(reg32) v, r = out(reg32) r, options(nostack))
        };
        r
    }
    #[cfg(not(target_feature = "sm_80"))]
    {
        let mut v = v;
        let mut m = 16;
        while m > 0 {
            v = v.wrapping_add(shfl_xor(v, m));
            m >>= 1;
        }
        v
    }
}

/// `__reduce_max_sync(FULL_MASK, v)`: the warp's maximum in every lane.
/// sm_80: one `redux.sync.max.u32`; sm_70: a five-step shuffle butterfly.
#[inline(always)]
pub fn warp_max_u32(v: u32) -> u32 {
    #[cfg(target_feature = "sm_80")]
    {
        let r: u32;
        // SAFETY: warp-synchronous; all lanes converged (module contract).
        unsafe {
            asm!("redux.sync.max.u32 {r}, {v}, -1;", v = in(reg32) v, r = out(reg32) r, options(nostack))
        };
        r
    }
    #[cfg(not(target_feature = "sm_80"))]
    {
        let mut v = v;
        let mut m = 16;
        while m > 0 {
            v = v.max(shfl_xor(v, m));
            m >>= 1;
        }
        v
    }
}

/// `__reduce_or_sync(FULL_MASK, v)`: the warp's bitwise or in every lane.
/// sm_80: one `redux.sync.or.b32`; sm_70: a five-step shuffle butterfly.
#[inline(always)]
pub fn warp_or_u32(v: u32) -> u32 {
    #[cfg(target_feature = "sm_80")]
    {
        let r: u32;
        // SAFETY: warp-synchronous; all lanes converged (module contract).
        unsafe {
            asm!("redux.sync.or.b32 {r}, {v}, -1;", v = in(reg32) v, r = out(reg32) r, options(nostack))
        };
        r
    }
    #[cfg(not(target_feature = "sm_80"))]
    {
        let mut v = v;
        let mut m = 16;
        while m > 0 {
            v |= shfl_xor(v, m);
            m >>= 1;
        }
        v
    }
}

/// Copies `N` 16-byte items of global memory that is read once into this thread's slots of
/// shared memory: item `j` from `src[j]` (null: the slot is zeroed instead) to the
/// shared-window address `dst[j]`. When it returns, this thread can read its slots; another
/// thread's slots need a barrier first, as after any shared store.
///
/// sm_80: `cp.async.cg` with an L2 evict-first policy for each item (the data goes to shared
/// memory without passing through registers, all `N` in flight at once), then
/// `cp.async.wait_all`. sm_70: `N` streaming loads (`ld.global.cs.nc.v4`, all issued before
/// the first store) into registers, then `N` shared stores.
///
/// # Safety
/// Each non-null `src[j]` is 16-byte aligned and points to 16 bytes of global memory that no
/// thread writes during the kernel; each `dst[j]` is a 16-byte aligned address inside this
/// block's shared memory that no other thread accesses until the next barrier.
#[inline(always)]
pub unsafe fn stage_streaming_v4_u32<const N: usize>(dst: [u32; N], src: [*const u32; N]) {
    #[cfg(target_feature = "sm_80")]
    {
        // SAFETY: the policy register is local to the asm block; no memory is touched.
        let policy: u64 = unsafe {
            let p: u64;
            asm!("createpolicy.fractional.L2::evict_first.b64 {p}, 1.0;", p = out(reg64) p, options(pure, nomem, nostack));
            p
        };
        for j in 0..N {
            if src[j].is_null() {
                // SAFETY: caller's contract on dst.
                unsafe { st_shared_v4_u32(dst[j], [0; 4]) };
            } else {
                // SAFETY: caller's contract on src and dst.
                unsafe {
                    asm!(
                        "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; cp.async.cg.shared.global.L2::cache_hint [{s}], [g], 16, {pol}; }}",
                        s = in(reg32) dst[j], p = in(reg64) src[j], pol = in(reg64) policy,
                        options(nostack)
                    )
                };
            }
        }
        // SAFETY: waits for this thread's copies above; no memory is accessed.
        unsafe { asm!("cp.async.wait_all;", options(nostack)) };
    }
    #[cfg(not(target_feature = "sm_80"))]
    {
        let mut f = [[0u32; 4]; N];
        for j in 0..N {
            if !src[j].is_null() {
                // SAFETY: caller's contract on src.
                f[j] = unsafe { ldg_cs_v4_u32(src[j]) };
            }
        }
        for j in 0..N {
            // SAFETY: caller's contract on dst.
            unsafe { st_shared_v4_u32(dst[j], f[j]) };
        }
    }
}

/// Starts copying `N` words of global memory that no thread writes during the kernel into
/// this thread's shared-memory slots: word `src[j]` to the shared-window address `dst[j]`.
/// The slots may be read only after [`stage_u32_wait`] (this thread's slots; another
/// thread's need a barrier after that, as after any shared store).
///
/// sm_80: one `cp.async.ca` of 4 bytes per word: the words go to shared memory without
/// passing through registers, all `N` in flight, and the thread goes on at once. sm_70: `N`
/// read-only loads (all issued before the first store) into registers, then `N` shared
/// stores.
///
/// # Safety
/// Each `src[j]` is 4-byte aligned and points to a word of global memory that no thread
/// writes during the kernel; each `dst[j]` is a 4-byte aligned address inside this block's
/// shared memory that no thread accesses until this thread's [`stage_u32_wait`].
#[inline(always)]
pub unsafe fn stage_u32<const N: usize>(dst: [u32; N], src: [*const u32; N]) {
    #[cfg(target_feature = "sm_80")]
    {
        for j in 0..N {
            // SAFETY: caller's contract on src and dst.
            unsafe {
                asm!(
                    "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; cp.async.ca.shared.global [{s}], [g], 4; }}",
                    s = in(reg32) dst[j], p = in(reg64) src[j],
                    options(nostack)
                )
            };
        }
    }
    #[cfg(not(target_feature = "sm_80"))]
    {
        let mut f = [0u32; N];
        for j in 0..N {
            // SAFETY: caller's contract on src.
            f[j] = unsafe { ldg_u32(src[j]) };
        }
        for j in 0..N {
            // SAFETY: caller's contract on dst.
            unsafe { st_shared_u32(dst[j], f[j]) };
        }
    }
}

/// Waits until this thread's [`stage_u32`] copies have landed in shared memory. sm_80:
/// `cp.async.wait_all`; sm_70: nothing (its copies were plain stores).
#[inline(always)]
pub fn stage_u32_wait() {
    #[cfg(target_feature = "sm_80")]
    // SAFETY: waits for this thread's asynchronous copies; no memory is accessed.
    unsafe {
        asm!("cp.async.wait_all;", options(nostack))
    };
}

// ---------------------------------------------------------------------------------------
// Memory fences and ordered accesses
// ---------------------------------------------------------------------------------------

/// `__threadfence_block()`
#[inline(always)]
pub fn threadfence_block() {
    // SAFETY: a fence has no preconditions.
    unsafe { asm!("membar.cta;", options(nostack)) };
}
/// `__threadfence()`
#[inline(always)]
pub fn threadfence() {
    // SAFETY: a fence has no preconditions.
    unsafe { asm!("membar.gl;", options(nostack)) };
}
/// `__threadfence_system()`
#[inline(always)]
pub fn threadfence_system() {
    // SAFETY: a fence has no preconditions.
    unsafe { asm!("membar.sys;", options(nostack)) };
}

/// `cuda::atomic_ref<u32, thread_scope_device>::load(memory_order_acquire)` (`ld.acquire.gpu`).
///
/// # Safety
/// `p` points to a valid, 4-byte aligned `u32` in global memory.
#[inline(always)]
pub unsafe fn load_acquire_u32(p: *const u32) -> u32 {
    let r: u32;
    // SAFETY: caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("ld.acquire.gpu.u32 {r}, [{p}];", p = in(reg64) p, r = out(reg32) r, options(nostack))
    };
    r
}
/// `atomic_ref<u32>::store(v, memory_order_release)` at device scope (`st.release.gpu`).
///
/// # Safety
/// `p` points to a valid, 4-byte aligned `u32` in global memory.
#[inline(always)]
pub unsafe fn store_release_u32(p: *mut u32, v: u32) {
    // SAFETY: caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("st.release.gpu.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack))
    };
}
/// Relaxed device-scope load (`ld.relaxed.gpu.u32`), coherent at L2.
///
/// # Safety
/// `p` points to a valid, aligned `u32` in global memory.
#[inline(always)]
pub unsafe fn load_relaxed_u32(p: *const u32) -> u32 {
    let r: u32;
    // SAFETY: caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("ld.relaxed.gpu.u32 {r}, [{p}];", p = in(reg64) p, r = out(reg32) r, options(nostack))
    };
    r
}
/// Relaxed device-scope store (`st.relaxed.gpu.u32`).
///
/// # Safety
/// `p` points to a valid, aligned `u32` in global memory.
#[inline(always)]
pub unsafe fn store_relaxed_u32(p: *mut u32, v: u32) {
    // SAFETY: caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("st.relaxed.gpu.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack))
    };
}
/// Relaxed device-scope load of a `u64` (`ld.relaxed.gpu.u64`).
///
/// # Safety
/// `p` points to a valid, 8-byte aligned `u64` in global memory.
#[inline(always)]
pub unsafe fn load_relaxed_u64(p: *const u64) -> u64 {
    let r: u64;
    // SAFETY: caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("ld.relaxed.gpu.u64 {r}, [{p}];", p = in(reg64) p, r = out(reg64) r, options(nostack))
    };
    r
}
/// Relaxed device-scope store of a `u64` (`st.relaxed.gpu.u64`).
///
/// # Safety
/// `p` points to a valid, 8-byte aligned `u64` in global memory.
#[inline(always)]
pub unsafe fn store_relaxed_u64(p: *mut u64, v: u64) {
    // SAFETY: caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("st.relaxed.gpu.u64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v, options(nostack))
    };
}

/// `__ldg` of four consecutive `u32` (`ld.global.nc.v4.u32`): one 16-byte read-only load.
///
/// # Safety
/// `p` is 16-byte aligned, points to 4 valid `u32` of global memory that no thread writes
/// during the kernel.
#[inline(always)]
pub unsafe fn ldg_v4_u32(p: *const u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: caller guarantees alignment, validity and read-only use.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ld.global.nc.v4.u32 {{{a}, {b}, {c}, {d}}}, [g]; }}",
            p = in(reg64) p, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            options(pure, readonly, nostack)
        )
    };
    [a, b, c, d]
}
/// As [`ldg_v4_u32`], marked streaming (`ld.global.cs.nc.v4.u32`: read once, its lines
/// allocated evict-first in L1 and L2, so that a stream does not push out a table that other
/// reads keep hitting).
///
/// # Safety
/// As [`ldg_v4_u32`].
#[inline(always)]
pub unsafe fn ldg_cs_v4_u32(p: *const u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: caller guarantees alignment, validity and read-only use.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ld.global.cs.nc.v4.u32 {{{a}, {b}, {c}, {d}}}, [g]; }}",
            p = in(reg64) p, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            options(pure, readonly, nostack)
        )
    };
    [a, b, c, d]
}
/// Two consecutive `u64` through the read-only path (`ld.global.nc.v2.u64`).
///
/// # Safety
/// As [`ldg_v4_u32`], for two 8-byte words at a 16-byte aligned `p`.
#[inline(always)]
pub unsafe fn ldg_v2_u64(p: *const u64) -> [u64; 2] {
    let (a, b): (u64, u64);
    // SAFETY: caller guarantees alignment, validity and read-only use.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ld.global.nc.v2.u64 {{{a}, {b}}}, [g]; }}",
            p = in(reg64) p, a = out(reg64) a, b = out(reg64) b,
            options(pure, readonly, nostack)
        )
    };
    [a, b]
}
/// 16-byte store of four `u32` (`st.global.v4.u32`).
///
/// # Safety
/// `p` is 16-byte aligned and points to 4 writable `u32` of global memory.
#[inline(always)]
pub unsafe fn st_v4_u32(p: *mut u32, v: [u32; 4]) {
    // SAFETY: caller guarantees alignment and validity.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; st.global.v4.u32 [g], {{{a}, {b}, {c}, {d}}}; }}",
            p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
            options(nostack)
        )
    };
}
/// As [`st_v4_u32`], marked streaming (`st.global.cs.v4.u32`: written once, not read again
/// soon; evict-first in L2).
///
/// # Safety
/// As [`st_v4_u32`].
#[inline(always)]
pub unsafe fn st_cs_v4_u32(p: *mut u32, v: [u32; 4]) {
    // SAFETY: caller guarantees alignment and validity.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; st.global.cs.v4.u32 [g], {{{a}, {b}, {c}, {d}}}; }}",
            p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
            options(nostack)
        )
    };
}
/// 16-byte store of two `u64` (`st.global.v2.u64`).
///
/// # Safety
/// `p` is 16-byte aligned and points to 2 writable `u64` of global memory.
#[inline(always)]
pub unsafe fn st_v2_u64(p: *mut u64, v: [u64; 2]) {
    // SAFETY: caller guarantees alignment and validity.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; st.global.v2.u64 [g], {{{a}, {b}}}; }}",
            p = in(reg64) p, a = in(reg64) v[0], b = in(reg64) v[1],
            options(nostack)
        )
    };
}

// ---------------------------------------------------------------------------------------
// Atomics (generic addressing: valid for global and shared memory)
// ---------------------------------------------------------------------------------------

macro_rules! atomic_fn {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $reg:ident, $op:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `p` is a valid, naturally aligned address in global or shared memory.
        #[inline(always)]
        pub unsafe fn $name(p: *mut $ty, v: $ty) -> $ty {
            let r: $ty;
            // SAFETY: caller guarantees `p` is valid and aligned.
            unsafe {
                asm!(concat!($op, " {r}, [{p}], {v};"), p = in(reg64) p, v = in($reg) v, r = out($reg) r, options(nostack))
            };
            r
        }
    };
}

atomic_fn!(
    /// `atomicAdd(unsigned*, v)`
    atomic_add_u32,
    u32,
    reg32,
    "atom.add.u32"
);
atomic_fn!(
    /// `atomicAdd(int*, v)`
    atomic_add_i32,
    i32,
    reg32,
    "atom.add.s32"
);
atomic_fn!(
    /// `atomicAdd(unsigned long long*, v)`
    atomic_add_u64,
    u64,
    reg64,
    "atom.add.u64"
);
atomic_fn!(
    /// `atomicMin(unsigned*, v)`
    atomic_min_u32,
    u32,
    reg32,
    "atom.min.u32"
);
atomic_fn!(
    /// `atomicMin(int*, v)`
    atomic_min_i32,
    i32,
    reg32,
    "atom.min.s32"
);
atomic_fn!(
    /// `atomicMin(unsigned long long*, v)`
    atomic_min_u64,
    u64,
    reg64,
    "atom.min.u64"
);
atomic_fn!(
    /// `atomicMax(unsigned*, v)`
    atomic_max_u32,
    u32,
    reg32,
    "atom.max.u32"
);
atomic_fn!(
    /// `atomicMax(int*, v)`
    atomic_max_i32,
    i32,
    reg32,
    "atom.max.s32"
);
atomic_fn!(
    /// `atomicMax(unsigned long long*, v)`
    atomic_max_u64,
    u64,
    reg64,
    "atom.max.u64"
);
atomic_fn!(
    /// `atomicExch(unsigned*, v)`
    atomic_exch_u32,
    u32,
    reg32,
    "atom.exch.b32"
);
atomic_fn!(
    /// `atomicExch(unsigned long long*, v)`
    atomic_exch_u64,
    u64,
    reg64,
    "atom.exch.b64"
);
atomic_fn!(
    /// `atomicOr(unsigned*, v)`
    atomic_or_u32,
    u32,
    reg32,
    "atom.or.b32"
);
atomic_fn!(
    /// `atomicAnd(unsigned*, v)`
    atomic_and_u32,
    u32,
    reg32,
    "atom.and.b32"
);
atomic_fn!(
    /// `atomicInc(unsigned*, limit)`: `old >= limit ? 0 : old + 1`
    atomic_inc_u32,
    u32,
    reg32,
    "atom.inc.u32"
);

/// `atomicAdd(float*, v)`
///
/// # Safety
/// `p` is a valid, aligned `f32` address in global or shared memory.
#[inline(always)]
pub unsafe fn atomic_add_f32(p: *mut f32, v: f32) -> f32 {
    let r: f32;
    // SAFETY: caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("atom.add.f32 {r}, [{p}], {v};", p = in(reg64) p, v = in(reg32) v, r = out(reg32) r, options(nostack))
    };
    r
}

/// `atomicCAS(unsigned*, compare, val)`
///
/// # Safety
/// `p` is a valid, aligned `u32` address in global or shared memory.
#[inline(always)]
pub unsafe fn atomic_cas_u32(p: *mut u32, compare: u32, val: u32) -> u32 {
    let r: u32;
    // SAFETY: caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("atom.cas.b32 {r}, [{p}], {c}, {v};", p = in(reg64) p, c = in(reg32) compare, v = in(reg32) val, r = out(reg32) r, options(nostack))
    };
    r
}
/// `atomicCAS(unsigned long long*, compare, val)`
///
/// # Safety
/// `p` is a valid, aligned `u64` address in global or shared memory.
#[inline(always)]
pub unsafe fn atomic_cas_u64(p: *mut u64, compare: u64, val: u64) -> u64 {
    let r: u64;
    // SAFETY: caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("atom.cas.b64 {r}, [{p}], {c}, {v};", p = in(reg64) p, c = in(reg64) compare, v = in(reg64) val, r = out(reg64) r, options(nostack))
    };
    r
}

/// `atomicAdd` on shared memory whose result is unused (`red.shared.add.u32`), addressed
/// by a 32-bit shared-window address from [`shared_base`].
///
/// # Safety
/// `saddr` is a 4-byte aligned address inside this block's shared memory allocation.
#[inline(always)]
pub unsafe fn red_shared_add_u32(saddr: u32, v: u32) {
    // SAFETY: caller guarantees the address is inside the block's shared memory.
    unsafe {
        asm!("red.shared.add.u32 [{a}], {v};", a = in(reg32) saddr, v = in(reg32) v, options(nostack))
    };
}
/// `atomicAdd` on shared memory returning the old value (`atom.shared.add.u32`).
///
/// # Safety
/// As [`red_shared_add_u32`].
#[inline(always)]
pub unsafe fn atom_shared_add_u32(saddr: u32, v: u32) -> u32 {
    let r: u32;
    // SAFETY: caller guarantees the address is inside the block's shared memory.
    unsafe {
        asm!("atom.shared.add.u32 {r}, [{a}], {v};", a = in(reg32) saddr, v = in(reg32) v, r = out(reg32) r, options(nostack))
    };
    r
}
/// `atomicCAS` on shared memory (`atom.shared.cas.b32`): stores `val` if the word holds
/// `compare`; returns the old word.
///
/// # Safety
/// As [`red_shared_add_u32`].
#[inline(always)]
pub unsafe fn atom_shared_cas_u32(saddr: u32, compare: u32, val: u32) -> u32 {
    let r: u32;
    // SAFETY: caller guarantees the address is inside the block's shared memory.
    unsafe {
        asm!("atom.shared.cas.b32 {r}, [{a}], {c}, {v};", a = in(reg32) saddr, c = in(reg32) compare, v = in(reg32) val, r = out(reg32) r, options(nostack))
    };
    r
}
/// `atomicExch` on shared memory (`atom.shared.exch.b32`); returns the old word.
///
/// # Safety
/// As [`red_shared_add_u32`].
#[inline(always)]
pub unsafe fn atom_shared_exch_u32(saddr: u32, val: u32) -> u32 {
    let r: u32;
    // SAFETY: caller guarantees the address is inside the block's shared memory.
    unsafe {
        asm!("atom.shared.exch.b32 {r}, [{a}], {v};", a = in(reg32) saddr, v = in(reg32) val, r = out(reg32) r, options(nostack))
    };
    r
}
/// `atomicAdd` on global memory whose result is unused (`red.global.add.u32`).
///
/// # Safety
/// `p` is a valid, aligned `u32` in global memory.
#[inline(always)]
pub unsafe fn red_global_add_u32(p: *mut u32, v: u32) {
    // SAFETY: caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("{{ .reg .u64 g; cvta.to.global.u64 g, {p}; red.global.add.u32 [g], {v}; }}", p = in(reg64) p, v = in(reg32) v, options(nostack))
    };
}

// ---------------------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------------------

// The block's dynamic shared memory (`extern __shared__ char smem[]`). Every kernel carves
// its `TempStorage` out of it; the launcher passes the byte size that the family's
// `const fn ..._smem_bytes` computes.
global_asm!(".extern .shared .align 16 .b8 detkit_dynamic_smem[];");

/// 32-bit shared-window address of the block's dynamic shared memory (for `*.shared.*`).
#[inline(always)]
pub fn shared_base() -> u32 {
    let r: u32;
    // SAFETY: takes the address of the module's dynamic shared-memory symbol.
    unsafe {
        asm!("mov.u32 {r}, detkit_dynamic_smem;", r = out(reg32) r, options(pure, nomem, nostack))
    };
    r
}
/// Generic pointer to the block's dynamic shared memory (`extern __shared__` array),
/// usable with ordinary loads and stores.
#[inline(always)]
pub fn dynamic_shared_ptr() -> *mut u8 {
    let r: u64;
    // SAFETY: converts the shared symbol's address to a generic address.
    unsafe {
        asm!("{{ .reg .u64 s; mov.u64 s, detkit_dynamic_smem; cvta.shared.u64 {r}, s; }}", r = out(reg64) r, options(pure, nomem, nostack))
    };
    r as *mut u8
}

/// `nanosleep(ns)`: back off while spinning on another block's flag.
#[inline(always)]
pub fn nanosleep(ns: u32) {
    // SAFETY: no preconditions.
    unsafe { asm!("nanosleep.u32 {n};", n = in(reg32) ns, options(nostack)) };
}

// ---------------------------------------------------------------------------------------
// Shared-memory and global accesses by state space (the radix sort's hot loops)
// ---------------------------------------------------------------------------------------

/// `ld.shared.u32` at a 32-bit shared-window address (from [`shared_base`]).
///
/// # Safety
/// `saddr` is a 4-byte aligned address inside this block's shared memory allocation.
#[inline(always)]
pub unsafe fn ld_shared_u32(saddr: u32) -> u32 {
    let r: u32;
    // SAFETY: caller guarantees the address is inside the block's shared memory.
    unsafe {
        asm!("ld.shared.u32 {r}, [{a}];", a = in(reg32) saddr, r = out(reg32) r, options(nostack, readonly))
    };
    r
}
/// `st.shared.u32` at a 32-bit shared-window address.
///
/// # Safety
/// As [`ld_shared_u32`].
#[inline(always)]
pub unsafe fn st_shared_u32(saddr: u32, v: u32) {
    // SAFETY: caller guarantees the address is inside the block's shared memory.
    unsafe {
        asm!("st.shared.u32 [{a}], {v};", a = in(reg32) saddr, v = in(reg32) v, options(nostack))
    };
}
/// `ld.shared.u64` at a 32-bit shared-window address.
///
/// # Safety
/// `saddr` is an 8-byte aligned address inside this block's shared memory allocation.
#[inline(always)]
pub unsafe fn ld_shared_u64(saddr: u32) -> u64 {
    let r: u64;
    // SAFETY: caller guarantees the address is inside the block's shared memory.
    unsafe {
        asm!("ld.shared.u64 {r}, [{a}];", a = in(reg32) saddr, r = out(reg64) r, options(nostack, readonly))
    };
    r
}
/// `st.shared.u64` at a 32-bit shared-window address.
///
/// # Safety
/// As [`ld_shared_u64`].
#[inline(always)]
pub unsafe fn st_shared_u64(saddr: u32, v: u64) {
    // SAFETY: caller guarantees the address is inside the block's shared memory.
    unsafe {
        asm!("st.shared.u64 [{a}], {v};", a = in(reg32) saddr, v = in(reg64) v, options(nostack))
    };
}
/// `ld.shared.u8` (zero-extended) at a 32-bit shared-window address.
///
/// # Safety
/// `saddr` is inside this block's shared memory allocation.
#[inline(always)]
pub unsafe fn ld_shared_u8(saddr: u32) -> u32 {
    let r: u32;
    // SAFETY: caller guarantees the address is inside the block's shared memory.
    unsafe {
        asm!("{{ .reg .u16 b; ld.shared.u8 b, [{a}]; cvt.u32.u16 {r}, b; }}", a = in(reg32) saddr, r = out(reg32) r, options(nostack, readonly))
    };
    r
}
/// `st.shared.u8` of the low byte of `v` at a 32-bit shared-window address.
///
/// # Safety
/// As [`ld_shared_u8`].
#[inline(always)]
pub unsafe fn st_shared_u8(saddr: u32, v: u32) {
    // SAFETY: caller guarantees the address is inside the block's shared memory.
    unsafe {
        asm!("{{ .reg .u16 b; cvt.u16.u32 b, {v}; st.shared.u8 [{a}], b; }}", a = in(reg32) saddr, v = in(reg32) v, options(nostack))
    };
}
/// `ld.shared.v4.u32` (16 bytes) at a 32-bit shared-window address.
///
/// # Safety
/// `saddr` is a 16-byte aligned address inside this block's shared memory allocation.
#[inline(always)]
pub unsafe fn ld_shared_v4_u32(saddr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: caller guarantees alignment and that the address is in shared memory.
    unsafe {
        asm!(
            "ld.shared.v4.u32 {{{a}, {b}, {c}, {d}}}, [{s}];",
            s = in(reg32) saddr, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            options(nostack, readonly)
        )
    };
    [a, b, c, d]
}
/// `st.shared.v4.u32` (16 bytes) at a 32-bit shared-window address.
///
/// # Safety
/// As [`ld_shared_v4_u32`].
#[inline(always)]
pub unsafe fn st_shared_v4_u32(saddr: u32, v: [u32; 4]) {
    // SAFETY: caller guarantees alignment and that the address is in shared memory.
    unsafe {
        asm!(
            "st.shared.v4.u32 [{s}], {{{a}, {b}, {c}, {d}}};",
            s = in(reg32) saddr, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
            options(nostack)
        )
    };
}
/// `ld.shared.v2.u32` (8 bytes) at a 32-bit shared-window address.
///
/// # Safety
/// `saddr` is an 8-byte aligned address inside this block's shared memory allocation.
#[inline(always)]
pub unsafe fn ld_shared_v2_u32(saddr: u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    // SAFETY: caller guarantees alignment and that the address is in shared memory.
    unsafe {
        asm!(
            "ld.shared.v2.u32 {{{a}, {b}}}, [{s}];",
            s = in(reg32) saddr, a = out(reg32) a, b = out(reg32) b,
            options(nostack, readonly)
        )
    };
    [a, b]
}
/// `st.shared.v2.u32` (8 bytes) at a 32-bit shared-window address.
///
/// # Safety
/// As [`ld_shared_v2_u32`].
#[inline(always)]
pub unsafe fn st_shared_v2_u32(saddr: u32, v: [u32; 2]) {
    // SAFETY: caller guarantees alignment and that the address is in shared memory.
    unsafe {
        asm!(
            "st.shared.v2.u32 [{s}], {{{a}, {b}}};",
            s = in(reg32) saddr, a = in(reg32) v[0], b = in(reg32) v[1],
            options(nostack)
        )
    };
}

/// `__ldg` of one `u32` (`ld.global.nc.u32`).
///
/// # Safety
/// `p` is a 4-byte aligned `u32` of global memory that no thread writes during the kernel.
#[inline(always)]
pub unsafe fn ldg_u32(p: *const u32) -> u32 {
    let r: u32;
    // SAFETY: caller guarantees alignment, validity and read-only use.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ld.global.nc.u32 {r}, [g]; }}",
            p = in(reg64) p, r = out(reg32) r,
            options(pure, readonly, nostack)
        )
    };
    r
}
/// `__ldg` of one byte (`ld.global.nc.u8`), zero-extended.
///
/// # Safety
/// `p` is a byte of global memory that no thread writes during the kernel.
#[inline(always)]
pub unsafe fn ldg_u8(p: *const u8) -> u32 {
    let r: u32;
    // SAFETY: caller guarantees validity and read-only use.
    unsafe {
        asm!(
            "{{ .reg .u64 g; .reg .u16 b; cvta.to.global.u64 g, {p}; ld.global.nc.u8 b, [g]; cvt.u32.u16 {r}, b; }}",
            p = in(reg64) p, r = out(reg32) r,
            options(pure, readonly, nostack)
        )
    };
    r
}
/// `__ldg` of one `f32` (`ld.global.nc.f32`).
///
/// # Safety
/// As [`ldg_u32`].
#[inline(always)]
pub unsafe fn ldg_f32(p: *const f32) -> f32 {
    // SAFETY: as the caller guarantees for `ldg_u32`.
    f32::from_bits(unsafe { ldg_u32(p as *const u32) })
}
/// `__ldg` of one `u64` (`ld.global.nc.u64`).
///
/// # Safety
/// `p` is an 8-byte aligned `u64` of global memory that no thread writes during the kernel.
#[inline(always)]
pub unsafe fn ldg_u64(p: *const u64) -> u64 {
    let r: u64;
    // SAFETY: caller guarantees alignment, validity and read-only use.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ld.global.nc.u64 {r}, [g]; }}",
            p = in(reg64) p, r = out(reg64) r,
            options(pure, readonly, nostack)
        )
    };
    r
}
/// Two consecutive `u32` through the read-only path (`ld.global.nc.v2.u32`).
///
/// # Safety
/// `p` is 8-byte aligned and points to 2 valid `u32` that no thread writes during the kernel.
#[inline(always)]
pub unsafe fn ldg_v2_u32(p: *const u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    // SAFETY: caller guarantees alignment, validity and read-only use.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ld.global.nc.v2.u32 {{{a}, {b}}}, [g]; }}",
            p = in(reg64) p, a = out(reg32) a, b = out(reg32) b,
            options(pure, readonly, nostack)
        )
    };
    [a, b]
}
/// `st.global.u32`.
///
/// # Safety
/// `p` is a 4-byte aligned, writable `u32` of global memory.
#[inline(always)]
pub unsafe fn st_global_u32(p: *mut u32, v: u32) {
    // SAFETY: caller guarantees alignment and validity.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; st.global.u32 [g], {v}; }}",
            p = in(reg64) p, v = in(reg32) v,
            options(nostack)
        )
    };
}
/// `st.global.u64`.
///
/// # Safety
/// `p` is an 8-byte aligned, writable `u64` of global memory.
#[inline(always)]
pub unsafe fn st_global_u64(p: *mut u64, v: u64) {
    // SAFETY: caller guarantees alignment and validity.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; st.global.u64 [g], {v}; }}",
            p = in(reg64) p, v = in(reg64) v,
            options(nostack)
        )
    };
}
/// `st.global.v2.u32` (8 bytes).
///
/// # Safety
/// `p` is 8-byte aligned and points to 2 writable `u32` of global memory.
#[inline(always)]
pub unsafe fn st_global_v2_u32(p: *mut u32, v: [u32; 2]) {
    // SAFETY: caller guarantees alignment and validity.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; st.global.v2.u32 [g], {{{a}, {b}}}; }}",
            p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1],
            options(nostack)
        )
    };
}
/// `__clz(x)`: leading zeros.
#[inline(always)]
pub fn clz(x: u32) -> u32 {
    x.leading_zeros()
}
/// Bit-field extract `(x >> pos) & ((1 << len) - 1)` (`bfe.u32`, `pos + len <= 32`).
///
/// Deliberately not `pure`: the compiler recomputes it at every use instead of keeping the
/// result of an earlier use live (the radix sort extracts the same digit in its counting and
/// its ranking loops, across barriers; keeping 24 digits live costs 24 registers, extracting
/// again costs one instruction each).
#[inline(always)]
pub fn bfe_u32(x: u32, pos: u32, len: u32) -> u32 {
    let r: u32;
    // SAFETY: arithmetic only.
    unsafe {
        asm!("bfe.u32 {r}, {x}, {p}, {l};", x = in(reg32) x, p = in(reg32) pos, l = in(reg32) len, r = out(reg32) r, options(nomem, nostack))
    };
    r
}
/// Bit-field extract of a `u64` into a `u32` (`bfe.u64`, `len <= 32`, `pos < 64`); not
/// `pure`, as [`bfe_u32`].
#[inline(always)]
pub fn bfe_u64(x: u64, pos: u32, len: u32) -> u32 {
    let r: u64;
    // SAFETY: arithmetic only.
    unsafe {
        asm!("bfe.u64 {r}, {x}, {p}, {l};", x = in(reg64) x, p = in(reg32) pos, l = in(reg32) len, r = out(reg64) r, options(nomem, nostack))
    };
    r as u32
}

/// A radix digit: `((x >> shift) & mask) ^ flip` (`shift < 32`), as `shr` and one
/// and-xor (two SASS instructions: `SHF` and a `LOP3`; a `bfe.u32` with a run-time position
/// and length costs six, building its control word with `PRMT`s). Not `pure`, as
/// [`bfe_u32`]: recomputed at every use rather than kept live.
#[inline(always)]
pub fn digit_u32(x: u32, shift: u32, mask: u32, flip: u32) -> u32 {
    let r: u32;
    // SAFETY: arithmetic only.
    unsafe {
        asm!(
            "{{ .reg .b32 t; shr.b32 t, {x}, {s}; and.b32 t, t, {m}; xor.b32 {r}, t, {f}; }}",
            x = in(reg32) x, s = in(reg32) shift, m = in(reg32) mask, f = in(reg32) flip,
            r = out(reg32) r, options(nomem, nostack)
        )
    };
    r
}
/// As [`digit_u32`] for a `u64` key (`shift < 64`).
#[inline(always)]
pub fn digit_u64(x: u64, shift: u32, mask: u32, flip: u32) -> u32 {
    let r: u32;
    // SAFETY: arithmetic only.
    unsafe {
        asm!(
            "{{ .reg .b64 w; .reg .b32 t; shr.b64 w, {x}, {s}; cvt.u32.u64 t, w; and.b32 t, t, {m}; xor.b32 {r}, t, {f}; }}",
            x = in(reg64) x, s = in(reg32) shift, m = in(reg32) mask, f = in(reg32) flip,
            r = out(reg32) r, options(nomem, nostack)
        )
    };
    r
}

/// One stable warp-ranking step (CUB's `BlockRadixRankMatch`): the lanes holding the same
/// `key` (< 256) form a group, found with eight `vote.ballot`s, one per key bit, as CUB's
/// `warp_in_block_matcher_t` does (`match.any.sync` is a slow, variable-latency instruction on
/// sm_90: with it the ranking took 65 % of the onesweep kernel's stall samples, ncu on an
/// H100, `docs/sort.md`); the group's highest lane adds the group's size to the
/// shared counter at `saddr` (`atom.shared.add`; the same address in every lane of a group)
/// and broadcasts the old value; every lane returns that old value plus the number of lanes
/// of its group below it. One `asm` block, so that only the result stays live between steps.
///
/// # Safety
/// All 32 lanes converged (full mask); `key < 256`; `saddr` a 4-byte aligned shared-window
/// address inside the block's shared memory, equal in lanes of equal `key`.
#[inline(always)]
pub unsafe fn match_fetch_add_shared(key: u32, saddr: u32) -> u32 {
    let r: u32;
    // SAFETY: caller contract (converged warp, address inside shared memory).
    unsafe {
        asm!(
            "{{ .reg .b32 peers, lt, below, hi, cnt, old, ln, t, bal; .reg .pred lead, p;",
            "mov.u32 peers, -1;",
            "and.b32 t, {k}, 1; setp.ne.u32 p, t, 0; vote.sync.ballot.b32 bal, p, -1; @!p not.b32 bal, bal; and.b32 peers, peers, bal;",
            "and.b32 t, {k}, 2; setp.ne.u32 p, t, 0; vote.sync.ballot.b32 bal, p, -1; @!p not.b32 bal, bal; and.b32 peers, peers, bal;",
            "and.b32 t, {k}, 4; setp.ne.u32 p, t, 0; vote.sync.ballot.b32 bal, p, -1; @!p not.b32 bal, bal; and.b32 peers, peers, bal;",
            "and.b32 t, {k}, 8; setp.ne.u32 p, t, 0; vote.sync.ballot.b32 bal, p, -1; @!p not.b32 bal, bal; and.b32 peers, peers, bal;",
            "and.b32 t, {k}, 16; setp.ne.u32 p, t, 0; vote.sync.ballot.b32 bal, p, -1; @!p not.b32 bal, bal; and.b32 peers, peers, bal;",
            "and.b32 t, {k}, 32; setp.ne.u32 p, t, 0; vote.sync.ballot.b32 bal, p, -1; @!p not.b32 bal, bal; and.b32 peers, peers, bal;",
            "and.b32 t, {k}, 64; setp.ne.u32 p, t, 0; vote.sync.ballot.b32 bal, p, -1; @!p not.b32 bal, bal; and.b32 peers, peers, bal;",
            "and.b32 t, {k}, 128; setp.ne.u32 p, t, 0; vote.sync.ballot.b32 bal, p, -1; @!p not.b32 bal, bal; and.b32 peers, peers, bal;",
            "mov.u32 lt, %lanemask_lt;",
            "mov.u32 ln, %laneid;",
            "and.b32 below, peers, lt;",
            "popc.b32 below, below;",
            "bfind.u32 hi, peers;",
            "popc.b32 cnt, peers;",
            "mov.u32 old, 0;",
            "setp.eq.u32 lead, hi, ln;",
            "@lead atom.shared.add.u32 old, [{a}], cnt;",
            "shfl.sync.idx.b32 old, old, hi, 31, -1;",
            "add.u32 {r}, old, below; }}",
            k = in(reg32) key, a = in(reg32) saddr, r = out(reg32) r,
            options(nostack)
        )
    };
    r
}

/// `x`, through a `mov` the compiler cannot see through: values computed from the result are
/// recomputed rather than kept live from an earlier computation from `x` (a register-pressure
/// tool for long kernels: cheap index arithmetic is redone in each phase).
#[inline(always)]
pub fn opaque_u32(x: u32) -> u32 {
    let r: u32;
    // SAFETY: a register move.
    unsafe {
        asm!("mov.b32 {r}, {x};", x = in(reg32) x, r = out(reg32) r, options(nomem, nostack))
    };
    r
}
