//! Kernel parameters: every kernel takes one `#[repr(C)]` struct by value.
//!
//! The pinned nightly lowers a struct parameter of an `extern "ptx-kernel"` fn to one
//! `.param .align 8 .b8 p[N]`; the host builds the same struct (this crate is the single
//! definition) and passes its bytes as the kernel's one argument, so host and kernel cannot
//! disagree on the order of the fields (CUB passes an agent's parameters, traccc a kernel's
//! payload, the same way).
//!
//! Device addresses are [`DevPtr`]s: a `u64` on both sides (the host cannot hold a device
//! pointer as a Rust pointer, and `bytemuck::Pod` excludes raw pointers), turned into a raw
//! pointer by the kernel. Each parameter struct implements [`KernelParams`], which lists the
//! kernels that take it, so the host's launch helper refuses a struct passed to the wrong
//! kernel.

use core::marker::PhantomData;

/// A device address of `T`s, as a kernel parameter field (8 bytes, 8-aligned).
#[repr(transparent)]
pub struct DevPtr<T> {
    addr: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for DevPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DevPtr<T> {}

impl<T> core::fmt::Debug for DevPtr<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "DevPtr({:#x})", self.addr)
    }
}

// SAFETY: `DevPtr` is a transparent `u64` (the PhantomData is zero-sized and has no
// invariant); every bit pattern, zero included, is a valid value.
unsafe impl<T: 'static> bytemuck::Zeroable for DevPtr<T> {}
// SAFETY: as above: a plain `u64` with no padding.
unsafe impl<T: 'static> bytemuck::Pod for DevPtr<T> {}

impl<T> DevPtr<T> {
    /// The null address (for parameters a launch does not use).
    pub const NULL: Self = Self::from_addr(0);

    /// A device address (on the host: from the driver's allocation).
    pub const fn from_addr(addr: u64) -> Self {
        Self {
            addr,
            _t: PhantomData,
        }
    }

    /// The address.
    pub const fn addr(self) -> u64 {
        self.addr
    }

    /// The address `n` elements further on (host-side address arithmetic; no access).
    pub const fn offset(self, n: u64) -> Self {
        Self::from_addr(self.addr + n * core::mem::size_of::<T>() as u64)
    }

    /// The same address as a pointer to `U` (for a buffer allocated with another element
    /// type of the same layout, e.g. `u64` words holding 16-byte records).
    pub const fn cast<U>(self) -> DevPtr<U> {
        DevPtr::from_addr(self.addr)
    }

    /// The address as a read-only pointer.
    #[inline(always)]
    pub fn ptr(self) -> *const T {
        self.addr as usize as *const T
    }

    /// The address as a mutable pointer.
    #[inline(always)]
    pub fn ptr_mut(self) -> *mut T {
        self.addr as usize as *mut T
    }
}

/// A kernel parameter struct: plain bytes, and the kernels that take it.
pub trait KernelParams: bytemuck::Pod {
    /// The names of the kernels whose one parameter is this struct.
    const KERNELS: &'static [&'static str];
}

/// Implements [`KernelParams`] for a struct and checks its size at compile time.
#[macro_export]
macro_rules! kernel_params {
    ($ty:ty, $bytes:expr, [$($k:expr),+ $(,)?]) => {
        const _: () = assert!(core::mem::size_of::<$ty>() == $bytes);
        impl $crate::params::KernelParams for $ty {
            const KERNELS: &'static [&'static str] = &[$($k),+];
        }
    };
}

/// Kernel: writes every field of its [`ParamsProbeParams`] back to memory, so that a GPU test
/// can check that host and device agree on the layout of a parameter struct of mixed field
/// types (pointers, `u64`, `u32`, `i32`, `f32`, `u16`, `u8`).
pub const KERNEL_PARAMS_PROBE: &str = "params_probe";

/// Parameters of [`KERNEL_PARAMS_PROBE`]: one field of every kind a detkit kernel takes.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ParamsProbeParams {
    /// Where the fields go: [`PARAMS_PROBE_WORDS`] words.
    pub out: DevPtr<u32>,
    /// A 64-bit integer (written as two words, low first).
    pub wide: u64,
    /// A second pointer (written as two words, low first).
    pub other: DevPtr<u8>,
    /// A 32-bit integer.
    pub count: u32,
    /// A signed integer.
    pub signed: i32,
    /// A float (written as its bits).
    pub real: f32,
    /// A 16-bit integer.
    pub short: u16,
    /// A byte.
    pub byte: u8,
    /// Padding (zero).
    pub _pad: u8,
}
kernel_params!(ParamsProbeParams, 40, [KERNEL_PARAMS_PROBE]);

/// Words [`KERNEL_PARAMS_PROBE`] writes.
pub const PARAMS_PROBE_WORDS: usize = 9;

/// The words [`KERNEL_PARAMS_PROBE`] writes for `p` (the host-side expectation).
pub const fn params_probe_words(p: &ParamsProbeParams) -> [u32; PARAMS_PROBE_WORDS] {
    [
        p.wide as u32,
        (p.wide >> 32) as u32,
        p.other.addr() as u32,
        (p.other.addr() >> 32) as u32,
        p.count,
        p.signed as u32,
        p.real.to_bits(),
        p.short as u32,
        p.byte as u32,
    ]
}

/// Device code of the probe.
#[cfg(target_arch = "nvptx64")]
pub mod probe {
    use super::*;

    /// Writes [`params_probe_words`] of `p` to `p.out`.
    ///
    /// # Safety
    /// One thread; `p.out` valid for [`PARAMS_PROBE_WORDS`] words.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn params_probe(p: ParamsProbeParams) {
        let w = params_probe_words(&p);
        let out = p.out.ptr_mut();
        let mut k = 0;
        while k < PARAMS_PROBE_WORDS {
            // SAFETY: launch contract: `out` holds PARAMS_PROBE_WORDS words.
            unsafe { out.add(k).write(w[k]) };
            k += 1;
        }
    }
}
