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
