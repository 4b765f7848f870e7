//! `Backend.pinned_empty`: numpy arrays whose memory is page-locked host memory that detkit
//! allocated (`detkit::HostBuf`), as `cupyx.empty_pinned` makes them. The clustering door
//! DMAs straight from such arrays (digis) and into them (`out=`'s cluster indices), with no
//! staging copy. The array's base is a [`PinnedBuffer`] that owns the allocation, so the
//! memory lives as long as any array or view of it. Without a GPU (the CPU backend) the
//! array is an ordinary `numpy.zeros` one.

use detkit::HostBuf;
use pyo3::prelude::*;

use crate::errors::err;

/// Page-locked host memory owned by a numpy array (its `base`): exposes the allocation
/// through `__array_interface__` with the shape and dtype it was made for. Private.
#[pyclass(module = "detkit._detkit", frozen)]
pub struct PinnedBuffer {
    buf: HostBuf<u8>,
    shape: Vec<usize>,
    typestr: String,
}

#[pymethods]
impl PinnedBuffer {
    #[getter]
    fn __array_interface__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("typestr", &self.typestr)?;
        d.set_item("shape", pyo3::types::PyTuple::new(py, &self.shape)?)?;
        // Writeable: the memory is the array's alone.
        d.set_item("data", (self.buf.as_ptr() as usize, false))?;
        d.set_item("strides", py.None())?;
        Ok(d)
    }

    /// Bytes of the allocation.
    #[getter]
    fn nbytes(&self) -> usize {
        self.buf.len()
    }
}

/// `numpy.zeros(shape, dtype)` in page-locked memory of `backend`, or an ordinary
/// `numpy.zeros` array on the CPU backend. Only plain dtypes (no Python objects).
pub fn empty<'py>(
    py: Python<'py>,
    backend: &detkit::Backend,
    shape: &Bound<'py, PyAny>,
    dtype: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    let dt = np.getattr("dtype")?.call1((dtype,))?;
    let Some(g) = backend.gpu() else {
        return np.getattr("zeros")?.call1((shape, dt));
    };
    if dt.getattr("hasobject")?.extract::<bool>()? {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "pinned_empty: dtypes holding Python objects are not supported",
        ));
    }
    let shape: Vec<usize> = match shape.extract::<usize>() {
        Ok(n) => vec![n],
        Err(_) => shape.extract().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(
                "pinned_empty: shape must be an int or a sequence of non-negative ints",
            )
        })?,
    };
    let itemsize: usize = dt.getattr("itemsize")?.extract()?;
    let nbytes = shape
        .iter()
        .try_fold(itemsize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("pinned_empty: size overflows"))?;
    let typestr: String = dt.getattr("str")?.extract()?;
    let buf = py
        .detach(|| HostBuf::<u8>::pinned(g, nbytes))
        .map_err(err)?;
    let owner = Bound::new(
        py,
        PinnedBuffer {
            buf,
            shape,
            typestr,
        },
    )?;
    np.getattr("asarray")?.call1((owner,))
}
