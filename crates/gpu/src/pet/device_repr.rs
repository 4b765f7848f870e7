//! cudarc's marker traits on the PET records (host builds with the `cudarc` feature only):
//! the host keeps singles and pairs in typed device buffers (`CudaSlice<Single>`,
//! `CudaSlice<Coincidence>`) rather than as `u64` words.

use super::{Coincidence, Single};

// SAFETY: `#[repr(C)]`, `Pod` (no padding, no pointers, every bit pattern valid) and
// `Copy`: the bytes the driver copies are the record, and the kernels read the same layout
// (the same definition).
unsafe impl cudarc::driver::DeviceRepr for Single {}
// SAFETY: as for `Single`; all-zero bytes are a valid single (`Zeroable`).
unsafe impl cudarc::driver::ValidAsZeroBits for Single {}
// SAFETY: two `Single`s, `#[repr(C)]`, `Pod`.
unsafe impl cudarc::driver::DeviceRepr for Coincidence {}
// SAFETY: all-zero bytes are a valid pair (`Zeroable`).
unsafe impl cudarc::driver::ValidAsZeroBits for Coincidence {}
