//! detkit GPU kernels and the types the host shares with them.
//!
//! This crate compiles for two targets:
//! - `nvptx64-nvidia-cuda`: the kernels (`extern "ptx-kernel"` entry points), built to PTX
//!   by `cargo xtask build-ptx` and embedded in the `detkit` host crate;
//! - the host: the shared `#[repr(C)]` types, constants (block sizes, temporary-storage
//!   sizes), kernel names and pure per-element helpers, so the host never re-declares them.
//!
//! Layout follows CUB's scopes: [`intrinsics`] (thread level, nvptx only), warp and block
//! collectives in [`scan`], and one module per algorithm family ([`scan`], [`compact`],
//! [`histogram`], [`bucket`]), each mirrored by a module of the same name in the host crate.
#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(abi_ptx, stdarch_nvptx, asm_experimental_arch, core_float_math)
)]
#![deny(unsafe_op_in_unsafe_fn)]

// On the host, `std` provides `f32::sqrt` (IEEE, the same bits as the device's `sqrt.rn.f32`),
// so that the host side of this crate builds without nightly features.
#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

#[cfg(target_arch = "nvptx64")]
pub mod intrinsics;

pub mod bucket;
pub mod clustering;
pub mod compact;
pub mod fastdiv;
pub mod histogram;
pub mod params;
pub mod pet;
pub mod scan;
pub mod seeding;
pub mod sort;

/// Threads per warp on every NVIDIA GPU detkit supports.
pub const WARP_SIZE: u32 = 32;

pub use params::{DevPtr, KernelParams};

/// Every kernel entry point of the PTX module. The host loads all of them at start-up,
/// and `cargo xtask build-ptx` checks that each is an `.entry` of the PTX.
pub const ALL_KERNELS: &[&str] = &[
    params::KERNEL_PARAMS_PROBE,
    scan::KERNEL_BLOCK_SCAN_U32,
    scan::KERNEL_DEVICE_SCAN_U32,
    scan::KERNEL_DEVICE_SCAN_U64,
    compact::KERNEL_SELECT_RANGE_U32,
    compact::KERNEL_SELECT_FLAGGED_U32,
    histogram::KERNEL_HISTOGRAM_SHARED,
    histogram::KERNEL_HISTOGRAM_GLOBAL,
    bucket::KERNEL_BUCKET_OFFSETS_SORTED,
    bucket::KERNEL_BUCKET_BLOCK_FILL,
    clustering::KERNEL_COUNT_MODULES,
    clustering::KERNEL_CHECK_RUNS,
    clustering::KERNEL_GATE_RUNS,
    clustering::KERNEL_VIEW_BEGIN,
    clustering::KERNEL_CHECK_RUNS_GATED,
    clustering::KERNEL_VIEW_END,
    clustering::KERNEL_FIND_CLUS_SMALL,
    clustering::KERNEL_FIND_CLUS_SMALL_WARP,
    clustering::KERNEL_FIND_CLUS,
    clustering::KERNEL_FIND_CLUS_FALLBACK,
    clustering::KERNEL_FIND_CLUS_SEED,
    clustering::KERNEL_CHARGE_CUT,
    pet::KERNEL_CONVERT,
    pet::KERNEL_SORT_BLOCK,
    pet::KERNEL_SORT_PASS,
    pet::KERNEL_TIME_RANGE,
    pet::KERNEL_TIME_KEYS,
    pet::KERNEL_GATHER,
    pet::KERNEL_COINCIDE_TILES,
    pet::KERNEL_COINCIDE_KILLALL,
    pet::KERNEL_MW_SAMPLE,
    pet::KERNEL_MW_SPLIT,
    pet::KERNEL_MW_MERGE,
    pet::KERNEL_MW_MERGE_WIDE,
    pet::KERNEL_DETECT_RUNS,
    pet::KERNEL_ORDER_BLOCKS,
    pet::KERNEL_ORDER_JOIN,
    seeding::KERNEL_BIN,
    seeding::KERNEL_BIN_COUNT,
    seeding::KERNEL_BIN_PLACE,
    seeding::KERNEL_INTERLEAVE_COLUMNS,
    seeding::KERNEL_GATHER_SPACEPOINTS,
    seeding::KERNEL_FIND_DOUBLETS,
    seeding::KERNEL_FIND_TRIPLETS,
    seeding::KERNEL_SELECT_SEEDS,
    seeding::KERNEL_GATHER_SEEDS,
    sort::KERNEL_SORT_HISTOGRAM_U32,
    sort::KERNEL_SORT_HISTOGRAM_U64,
    sort::KERNEL_SORT_ONESWEEP_U32,
    sort::KERNEL_SORT_ONESWEEP_U32_V4,
    sort::KERNEL_SORT_ONESWEEP_U32_V8,
    sort::KERNEL_SORT_ONESWEEP_U32_V12,
    sort::KERNEL_SORT_ONESWEEP_U32_V16,
    sort::KERNEL_SORT_ONESWEEP_U64,
    sort::KERNEL_SORT_ONESWEEP_U64_V4,
    sort::KERNEL_SORT_ONESWEEP_U64_V8,
    sort::KERNEL_SORT_ONESWEEP_U64_V12,
    sort::KERNEL_SORT_ONESWEEP_U64_V16,
    sort::KERNEL_SORT_ONESWEEP_U32_V4_STAGED,
    sort::KERNEL_SORT_ONESWEEP_U64_V4_STAGED,
    sort::KERNEL_SORT_SINGLE_U32,
    sort::KERNEL_SORT_SINGLE_U64,
];

/// Launch bounds `(kernel, threads per block, blocks per multiprocessor)` that `cargo xtask
/// build-ptx` writes into the PTX as `.maxntid THREADS, 1, 1` and `.minnctapersm BLOCKS`
/// before the kernel's body: CUDA C++'s `__launch_bounds__(THREADS, BLOCKS)`, which rustc
/// cannot express. ptxas then keeps the kernel within `65536 / (THREADS × BLOCKS)` registers
/// per thread (spilling if it must: the resource report shows it). Such a kernel must not be
/// launched with more than THREADS threads per block.
pub const LAUNCH_BOUNDS: &[(&str, u32, u32)] = &[
    // The range select: 64 registers, 4 blocks of 256 per multiprocessor (unbounded it took
    // 75: 3 blocks); sm_90 spills 20 bytes. H100, issue 28: 0.78x -> 0.84x CUB at 2^28.
    (compact::KERNEL_SELECT_RANGE_U32, compact::SELECT_THREADS, 4),
    // Seeding doublets: 8 blocks of 128 per multiprocessor (at most 64 registers; sm_90:
    // 64 and 24 bytes of spill stores). ⟨μ⟩ = 200 on an H200: 69 registers unbounded
    // 0.113 ms, 8 blocks 0.108 ms, 9 blocks 0.102 ms (issue 14 session 5); 9 blocks again
    // since, 8 from session 8 (its walk loads the next step ahead: 112 bytes of spill
    // stores at 9 blocks) (docs/benchmarks.md, issue 14).
    (
        seeding::KERNEL_FIND_DOUBLETS,
        seeding::SEEDING_THREADS,
        seeding::DOUBLETS_MIN_BLOCKS,
    ),
    // 32 registers: 2048 threads per SM (issue 13: 8 blocks of the last pass, 16 of the
    // middle one); the kernel runs blocks of up to 1024 threads.
    (clustering::KERNEL_FIND_CLUS_SMALL, 1024, 2),
    // Seeding binning: blocks of 1024 threads (at most 64 registers).
    (seeding::KERNEL_BIN_COUNT, seeding::BIN_COUNT_THREADS, 1),
    (pet::KERNEL_COINCIDE_TILES, pet::COINCIDE_THREADS, 4),
    // The killAll build: 40 registers, 6 blocks per multiprocessor (H200, 2^24 singles:
    // 0.144 ms against 0.155 at 4 blocks and 0.210 at 8, which spill in the loop).
    (pet::KERNEL_COINCIDE_KILLALL, pet::COINCIDE_THREADS, 6),
    // 64 registers: 2 blocks of 512 per multiprocessor, 32 warps as with 4 blocks of 256
    // (unbounded the conversion takes 70, which leaves room for fewer); half the tiles, so half
    // the look-backs (session 8: 1-5 % faster than blocks of 256).
    (pet::KERNEL_CONVERT, pet::CONVERT_THREADS, 2),
    (pet::KERNEL_MW_MERGE, pet::MW_THREADS, 2),
    (pet::KERNEL_MW_MERGE_WIDE, pet::MW_WIDE_THREADS, 1),
    (
        sort::KERNEL_SORT_ONESWEEP_U32,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U32_V4,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS_PAIRS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U32_V8,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS_PAIRS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U32_V12,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS_PAIRS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U32_V16,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS_PAIRS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U64,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U64_V4,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS_PAIRS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U64_V8,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS_PAIRS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U64_V12,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS_PAIRS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U64_V16,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS_PAIRS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U32_V4_STAGED,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS_PAIRS,
    ),
    (
        sort::KERNEL_SORT_ONESWEEP_U64_V4_STAGED,
        sort::ONESWEEP_THREADS,
        sort::ONESWEEP_MIN_BLOCKS_PAIRS,
    ),
];

/// `ceil(a / b)` for launch-size arithmetic, shared by host and device.
#[inline(always)]
pub const fn div_ceil_u64(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Kernels are written so that no panic path survives optimisation (no slice
    // indexing with bounds checks on hot paths, no unwrap). Should one remain, trap:
    // the host sees a launch failure rather than silent corruption.
    // SAFETY: `trap` has no preconditions; it aborts the kernel.
    unsafe { core::arch::nvptx::trap() }
}
