//! The PTX module built from the `detkit-gpu` sources by `cargo xtask build-ptx`.
//!
//! It is committed (`crates/host/ptx/detkit.ptx`) so that `detkit` builds on any toolchain
//! with no CUDA toolkit and no nvptx target; CI rebuilds it and fails when the committed
//! file differs from what the current `gpu` sources produce (`cargo xtask build-ptx --check`).

/// The PTX text, compiled for `sm_70` (PTX ISA 7.0); the driver JIT-compiles it for the
/// device at module load.
pub const PTX: &str = include_str!("../ptx/detkit.ptx");

/// The architecture the embedded PTX targets.
pub const PTX_ARCH: &str = "sm_70";
