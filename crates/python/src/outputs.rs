//! Result memory a `Backend` reuses from call to call.
//!
//! A result array handed to Python is a numpy view of a vector owned by a [`Held`] (its
//! numpy `base`). Each backend keeps the holders of its last results, a few per output of
//! each call ([`KEEP`]), and gives one to the next call of that output **only when no Python
//! object refers to it any more** (its reference count is the pool's alone: every numpy view
//! of it, and every view of those, holds a reference). So:
//!
//! - a result the caller keeps is never overwritten, whatever is called afterwards;
//! - a result the caller has dropped lends its memory, already touched and mapped, to the
//!   next call, which then writes into it instead of allocating new pages (the first touch of
//!   fresh pages is what cost the Python calls most of their time over the Rust doors, see
//!   docs/benchmarks.md, "pynum").
//!
//! A holder is taken out of the pool for the whole of one call (exclusive: another thread's
//! call gets another one), written with the GIL released, and put back with its views made.
//! `Backend.release_results()` drops the pool (the memory goes once the last view goes).

use std::any::Any;
use std::collections::HashMap;
use std::sync::Mutex;

use numpy::ndarray::{ArrayView, Dimension, IntoDimension, Ix1};
use numpy::{Element, PyArray};
use pyo3::prelude::*;

/// Holders kept per output of a call: the result the caller still holds while the next
/// call runs (`r = b.cluster(...)` in a loop keeps one alive) and one to write into.
pub const KEEP: usize = 2;

/// One vector behind result arrays (the numpy `base` of their views).
#[pyclass(module = "detkit._detkit", frozen, name = "ResultMemory")]
pub struct Held {
    buf: Mutex<Box<dyn Any + Send>>,
}

#[pymethods]
impl Held {
    fn __repr__(&self) -> String {
        "detkit._detkit.ResultMemory(<memory of detkit results>)".to_string()
    }
}

impl Held {
    fn new<T: Send + 'static>() -> Self {
        Self {
            buf: Mutex::new(Box::new(Vec::<T>::new())),
        }
    }

    /// `f` on the vector. Only for a holder taken from [`Outputs::take`] (no view of its
    /// memory exists) to change it, or for reading it while its views are made.
    pub fn with<T: 'static, R>(&self, f: impl FnOnce(&mut Vec<T>) -> R) -> R {
        let mut g = self.buf.lock().unwrap_or_else(|p| p.into_inner());
        let v = g
            .downcast_mut::<Vec<T>>()
            .expect("an output slot holds vectors of one type");
        f(v)
    }
}

/// A backend's pool of result holders, by output name.
#[derive(Default)]
pub struct Outputs {
    slots: Mutex<HashMap<&'static str, Vec<Py<Held>>>>,
}

impl Outputs {
    /// A holder of `Vec<T>` for the output `key`, for this call alone: a kept one that no
    /// Python object refers to any more (its vector's capacity reused), else a new one.
    pub fn take<T: Send + 'static>(&self, py: Python<'_>, key: &'static str) -> PyResult<Py<Held>> {
        {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            let list = slots.entry(key).or_default();
            // Reference count 1: the pool's own reference alone (with the GIL held no other
            // thread can make a view of it meanwhile).
            // SAFETY: `h` is a live object (the pool holds a reference) and the GIL is held
            // (`py`), so reading its reference count is defined.
            let alone = |h: &Py<Held>| unsafe { pyo3::ffi::Py_REFCNT(h.as_ptr()) } == 1;
            if let Some(i) = list.iter().position(alone) {
                return Ok(list.remove(i));
            }
        }
        Py::new(py, Held::new::<T>())
    }

    /// Puts `held` back after its call (the oldest kept holder goes when there are more
    /// than [`KEEP`]; its views, if any, keep it alive until they go).
    pub fn put(&self, key: &'static str, held: Py<Held>) {
        let dropped = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            let list = slots.entry(key).or_default();
            list.push(held);
            let extra = list.len().saturating_sub(KEEP);
            list.drain(..extra).collect::<Vec<_>>()
        };
        drop(dropped);
    }

    /// Forgets every kept holder.
    pub fn clear(&self) {
        let all = std::mem::take(&mut *self.slots.lock().unwrap_or_else(|p| p.into_inner()));
        drop(all);
    }
}

/// A numpy view of `data` (memory of `owner`'s vector) with `shape`, `owner` its base.
///
/// # Safety
/// `data` lies in the vector of `owner`, which is not changed (nor reallocated) while any
/// view of it exists: the caller holds `owner` from [`Outputs::take`] and makes the views
/// after the last change; the pool gives it out again only when no view refers to it.
pub unsafe fn view<'py, E: Element, D: Dimension>(
    owner: &Bound<'py, Held>,
    data: &[E],
    shape: impl IntoDimension<Dim = D>,
) -> PyResult<Bound<'py, PyArray<E, D>>> {
    let a = ArrayView::from_shape(shape.into_dimension(), data)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    // SAFETY: as this function's contract: `owner` (the base) keeps the memory alive and
    // unchanged while the view exists.
    Ok(unsafe { PyArray::borrow_from_array(&a, owner.clone().into_any()) })
}

/// A 1-D view of all of `data` ([`view`]).
///
/// # Safety
/// As [`view`].
pub unsafe fn view1<'py, E: Element>(
    owner: &Bound<'py, Held>,
    data: &[E],
) -> PyResult<Bound<'py, PyArray<E, Ix1>>> {
    // SAFETY: the caller's contract is [`view`]'s.
    unsafe { view(owner, data, data.len()) }
}

/// Grows `v` to at least `n` elements (zeros; an allocation failure is a `MemoryError`
/// naming `what`) and returns its first `n`.
pub fn first_n<'a, T: Clone + Default>(
    v: &'a mut Vec<T>,
    n: usize,
    what: &dyn Fn() -> String,
) -> detkit::Result<&'a mut [T]> {
    if v.len() < n {
        v.try_reserve_exact(n - v.len())
            .map_err(|_| detkit::Error::OutOfMemory {
                what: what(),
                needed: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
                available: None,
            })?;
        v.resize(n, T::default());
    }
    Ok(&mut v[..n])
}
