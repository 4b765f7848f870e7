//! Argument checks of the Python layer: the same ranges and types as the command line, bools
//! refused where numbers are meant (`True` is not 1 electron), and the memory a requested
//! size needs checked before it is allocated (a [`detkit::Error::OutOfMemory`] becomes
//! `MemoryError`). The seeding settings get the same number checks in their conversion
//! ([`crate::settings`]).

use detkit::clustering::ChargeCut;
use numpy::{Element, PyArray1, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBool;

use crate::errors::err;

/// Whether `obj` is a Python or numpy bool.
pub fn is_bool(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyBool>()
        || obj
            .get_type()
            .name()
            .is_ok_and(|n| n == "bool" || n == "bool_")
}

/// An integer argument (a Python or numpy integer; bools and floats refused).
pub fn integer(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<i128> {
    if is_bool(obj) {
        return Err(PyTypeError::new_err(format!(
            "{name}={}: a bool is not a number",
            obj.repr()?
        )));
    }
    // Integers (Python's and numpy's) have `__index__`; floats do not.
    if !obj.hasattr("__index__")? {
        return Err(PyTypeError::new_err(format!(
            "{name}={}: expected an integer",
            obj.repr()?
        )));
    }
    obj.call_method0("__index__")?
        .extract::<i128>()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{name}={}: expected an integer",
                obj.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })
}

/// A real-number argument (Python or numpy integer or float; bools refused).
pub fn real(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    if is_bool(obj) {
        return Err(PyTypeError::new_err(format!(
            "{name}={}: a bool is not a number",
            obj.repr()?
        )));
    }
    obj.extract::<f64>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name}={}: expected a number",
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

/// `charge_cut` of `Backend.cluster`: `None` (the geometry's CMS cut), `False` (no cut) or
/// a whole number of electrons in `0..=2^32-1` (`detkit cluster --charge-cut`'s range).
pub fn charge_cut(
    obj: Option<&Bound<'_, PyAny>>,
    default: ChargeCut,
) -> PyResult<Option<ChargeCut>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(Some(default));
    };
    if is_bool(obj) {
        if obj.is_truthy()? {
            return Err(PyTypeError::new_err(
                "charge_cut=True: give a charge in electrons, None for the geometry's cut, or \
                 False for no cut",
            ));
        }
        return Ok(None);
    }
    let c = integer("charge_cut", obj)?;
    match u32::try_from(c) {
        Ok(c) => Ok(Some(ChargeCut::uniform(c))),
        Err(_) => Err(PyValueError::new_err(format!(
            "charge_cut={c}: a charge in electrons is 0 to 4294967295 (False: no cut)"
        ))),
    }
}

/// The pile-up `mu` of `generate.seeding_event`: finite, 0 to 10000 (as `detkit seed
/// generate --mu`).
pub fn pileup(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    let mu = real("mu", obj)?;
    if !(mu.is_finite() && (0.0..=10_000.0).contains(&mu)) {
        return Err(PyValueError::new_err(format!(
            "mu={mu}: not a pile-up between 0 and 10000"
        )));
    }
    Ok(mu)
}

/// Checks that the memory of a generated PET acquisition of `singles` singles (and the tiny
/// scanner's tables) fits, before generating it.
pub fn check_acquisition(singles: usize) -> detkit::Result<()> {
    detkit::mem::check_estimate(
        format!("singles={singles}"),
        detkit::pet::gen::acquisition_bytes(singles),
    )
}

/// Checks that a histogram of `nbins` bins (4-byte counts) fits before it is allocated.
pub fn check_bins(nbins: u32) -> detkit::Result<()> {
    detkit::mem::check_estimate(format!("nbins={nbins}"), 4 * nbins as u64)
}

/// Requests of fewer bytes are not checked against the memory there is ([`check_bytes`]).
pub const CHECKED_BYTES: u64 = 64 << 20;

/// Checks that `bytes` (for `what`, naming the size that asked for them) fit in the memory
/// there is: a `MemoryError` saying how much it needs when not.
pub fn check_bytes(what: impl FnOnce() -> String, bytes: u64) -> PyResult<()> {
    // The estimate reads three /proc files (about 0.1 ms in all, as long as a small call's
    // whole overhead): sizes below this always fit, and the allocator's refusal of one is
    // a `MemoryError` too.
    if bytes < CHECKED_BYTES {
        return Ok(());
    }
    detkit::mem::check_estimate("", bytes)
        .map_err(|e| match e {
            detkit::Error::OutOfMemory {
                needed, available, ..
            } => detkit::Error::OutOfMemory {
                what: what(),
                needed,
                available,
            },
            other => other,
        })
        .map_err(err)
}

/// A vector of `n` zero bytes for a copy whose size comes from the caller, or a
/// `MemoryError` (checked first, then the allocator's own refusal).
pub fn host_bytes(n: usize, what: impl Fn() -> String) -> PyResult<Vec<u8>> {
    check_bytes(&what, n as u64)?;
    let mut v = detkit::mem::try_vec::<u8>(n, &what()).map_err(err)?;
    v.resize(n, 0);
    Ok(v)
}

/// `out=` of `Backend.cluster`: the pair `(clus, clus_in_module)` the results go into, each
/// checked by [`out_array`].
#[allow(clippy::type_complexity)]
pub fn cluster_out<'py>(
    out: &Bound<'py, PyAny>,
    digis: usize,
    slots: usize,
) -> PyResult<(Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<u32>>)> {
    let (c, p): (Bound<'py, PyAny>, Bound<'py, PyAny>) = out.extract().map_err(|_| {
        PyTypeError::new_err("out: expected a pair of numpy arrays (clus, clus_in_module)")
    })?;
    Ok((
        out_array::<i32>(&c, "out[0] (clus)", digis, "the digi count")?,
        out_array::<u32>(&p, "out[1] (clus_in_module)", slots, "events × modules")?,
    ))
}

/// A caller's output array: a numpy array of exactly `T` (native byte order), one
/// dimension, C-contiguous (a `TypeError` otherwise), of exactly `n` elements (an
/// `InvalidInputError` otherwise). Whether it is writeable and not also an input of the same
/// call is checked when it is borrowed ([`out_borrow`]).
pub fn out_array<'py, T: Element>(
    a: &Bound<'py, PyAny>,
    name: &str,
    n: usize,
    size: &str,
) -> PyResult<Bound<'py, PyArray1<T>>> {
    let py = a.py();
    let want = T::get_dtype(py);
    let arr = a.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name}: expected a numpy array of {want}, got {}",
            a.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    if !arr.dtype().is_equiv_to(&want) {
        return Err(PyTypeError::new_err(format!(
            "{name}: dtype {} (expected {want})",
            arr.dtype()
        )));
    }
    if arr.ndim() != 1 {
        return Err(PyTypeError::new_err(format!(
            "{name}: expected a 1-D array, got shape {:?}",
            arr.shape()
        )));
    }
    if !arr.is_c_contiguous() {
        return Err(PyTypeError::new_err(format!(
            "{name}: not contiguous (a strided view); pass a contiguous array"
        )));
    }
    if arr.len() != n {
        return Err(crate::errors::InvalidInputError::new_err(format!(
            "{name}: {} elements, expected {n} ({size})",
            arr.len()
        )));
    }
    Ok(arr.clone().into_any().cast_into::<PyArray1<T>>()?)
}

/// An output array that cannot be written: read-only, or also an input of the same call.
pub fn out_borrow(e: numpy::BorrowError) -> PyErr {
    PyValueError::new_err(format!(
        "out: {e} (an output array must be writeable and not an input of the same call)"
    ))
}
