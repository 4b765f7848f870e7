//! `Backend.pinned_empty`: numpy arrays whose memory is page-locked host memory that detkit
//! allocated (`detkit::HostBuf`), as `cupyx.empty_pinned` makes them. The clustering door
//! DMAs straight from such arrays (digis) and into them (`out=`'s cluster indices), with no
//! staging copy. The array's base is a [`PinnedBuffer`] that owns the allocation, so the
//! memory lives as long as any array or view of it. Without a GPU (the CPU backend) the
//! array is an ordinary `numpy.zeros` one.

use std::any::Any;

use detkit::{HostBuf, HostPool, PooledBuf};
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

/// Free pinned buffers kept per output of a clustering call (one result the caller keeps
/// while the next call runs, one to write into).
const KEEP: usize = 2;

/// Pinned results a caller may hold at once; calls past them return ordinary memory.
const MAX_HELD: usize = 8;

/// The pinned result memory of a CUDA backend's clustering calls (`Backend.cluster`,
/// `cluster_files`): [`detkit::HostPool`]s of cluster indices and per-module counts, made on
/// first use. The door DMAs the cluster indices straight into them (no staging copy out).
#[derive(Default)]
pub struct ResultPools {
    pools: std::sync::OnceLock<(HostPool<i32>, HostPool<u32>)>,
}

impl ResultPools {
    /// The pools, when this call's results go to pinned memory: a CUDA backend and fewer
    /// than [`MAX_HELD`] pinned results alive, whatever the inputs (pageable ones too, see
    /// docs/benchmarks.md, "pinned", round 2).
    pub fn for_call(&self, b: &detkit::Backend) -> Option<&(HostPool<i32>, HostPool<u32>)> {
        b.gpu()?;
        let pools = self
            .pools
            .get_or_init(|| (HostPool::new(b, KEEP), HostPool::new(b, KEEP)));
        // A caller keeping many results (a list of every event's) gets ordinary memory past
        // MAX_HELD pinned ones: page-locked memory stays bounded, and no call pays for a
        // pinned allocation that would not be reused.
        (pools.0.in_use() < MAX_HELD).then_some(pools)
    }

    /// Frees the kept buffers (results held in Python stay valid).
    pub fn clear(&self) {
        if let Some((c, p)) = self.pools.get() {
            c.clear();
            p.clear();
        }
    }
}

/// The base of result arrays in pinned memory: owns a [`PooledBuf`], which goes back to its
/// backend's pool when the last array (or view) of it is gone. Private.
#[pyclass(module = "detkit._detkit", frozen, name = "PinnedResultMemory")]
pub struct PinnedResult {
    buf: Box<dyn Any + Send + Sync>,
}

#[pymethods]
impl PinnedResult {
    fn __repr__(&self) -> String {
        "detkit._detkit.PinnedResultMemory(<page-locked memory of detkit results>)".to_string()
    }
}

impl PinnedResult {
    /// An owner of `buf`.
    pub fn new<T: Send + Sync + 'static>(
        py: Python<'_>,
        buf: PooledBuf<T>,
    ) -> PyResult<Bound<'_, Self>> {
        Bound::new(py, Self { buf: Box::new(buf) })
    }

    /// The owned buffer's elements.
    fn data<T: 'static>(&self) -> &[T] {
        self.buf
            .downcast_ref::<PooledBuf<T>>()
            .expect("a pinned result of this type")
    }
}

/// A 1-D numpy view of elements `range` of `owner`'s buffer (of `T`s), `owner` its base.
pub fn view<'py, T: numpy::Element + 'static>(
    owner: &Bound<'py, PinnedResult>,
    range: std::ops::Range<usize>,
) -> PyResult<Bound<'py, numpy::PyArray1<T>>> {
    let data = &owner.get().data::<T>()[range];
    let a = numpy::ndarray::ArrayView1::from(data);
    // SAFETY: `owner` (the view's base) owns the memory and keeps it alive while the view
    // exists; nothing else writes it meanwhile: the buffer is out of its pool until `owner`
    // is dropped, which happens only after the last view of it is gone.
    Ok(unsafe { numpy::PyArray1::borrow_from_array(&a, owner.clone().into_any()) })
}
