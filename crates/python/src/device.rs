//! Device arrays from Python (issue 27): arrays of any producer of DLPack or the CUDA array
//! interface (v3) in, `detkit.DeviceArray` (exporting both) out.
//!
//! [`import_array`] reads one argument: a CPU DLPack tensor (numpy >= 1.22, a CPU torch
//! tensor, ...) becomes a numpy view of the producer's memory (no copy), which then takes the
//! numpy path; a CUDA tensor on the backend's device is ordered after the producer's work
//! (DLPack: `__dlpack__(stream=<detkit's stream>)`, the producer's wait; the CUDA array
//! interface: an event recorded on its `stream` and waited on by detkit's stream) and read
//! into host memory for the library's host entry points, the call's results going back into
//! `DeviceArray`s on the same stream. No device-wide synchronisation: only detkit's stream
//! is waited on. A CUDA array on another device, or any CUDA array given to the CPU backend,
//! is an `InvalidInputError` naming both devices.
//!
//! Contexts: `cudarc::CudaContext::new` retains the device's **primary** context
//! (`cuDevicePrimaryCtxRetain`), the one the CUDA runtime (CuPy, PyTorch, Numba, JAX,
//! `cuda.core`) uses, so device pointers of those libraries are valid in detkit's context
//! and detkit's in theirs; [`primary_context`] reports it for the tests.

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaSlice, CudaStream, DevicePtr};
use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use crate::dlpack::{self, DLDevice, Desc, HostView, Imported};
use crate::errors::{CudaError, InvalidInputError};
use crate::Backend;

fn cuda(what: &str, e: impl std::fmt::Display) -> PyErr {
    CudaError::new_err(format!("CUDA driver error while {what}: {e}"))
}

/// The CUDA device ordinal of a device pointer (the driver's pointer attribute).
fn pointer_device(ptr: usize) -> Result<i32, sys::CUresult> {
    let mut ordinal: i32 = -1;
    // SAFETY: the attribute DEVICE_ORDINAL writes one `int` into `ordinal`; the driver checks
    // `ptr` (an unknown pointer is an error code, not UB).
    let r = unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr as sys::CUdeviceptr,
        )
    };
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(ordinal)
    } else {
        Err(r)
    }
}

/// A stream handle from Python: `None`, an int, or an object with `__cuda_stream__()`
/// (`(version, handle)`, `cuda.core`), `cuda_stream` (PyTorch) or `ptr` (CuPy).
pub fn stream_handle(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<usize>> {
    let Some(s) = obj else { return Ok(None) };
    if s.is_none() {
        return Ok(None);
    }
    if let Ok(h) = s.extract::<usize>() {
        return Ok(Some(h));
    }
    if s.hasattr("__cuda_stream__")? {
        let t = s.call_method0("__cuda_stream__")?;
        let (_, h): (i64, usize) = t.extract()?;
        return Ok(Some(h));
    }
    for attr in ["cuda_stream", "ptr"] {
        if let Ok(v) = s.getattr(attr) {
            if let Ok(h) = v.extract::<usize>() {
                return Ok(Some(h));
            }
        }
    }
    Err(PyTypeError::new_err(format!(
        "stream: expected an int handle or an object with __cuda_stream__ / cuda_stream, got {}",
        s.get_type().name()?
    )))
}

/// The foreign streams a call's inputs were made on (the CUDA array interface's `stream`,
/// the caller's `stream=`): collected while the arguments are opened, then waited for once
/// each ([`Waits::apply`]) however many arguments name the same stream.
#[derive(Default)]
pub struct Waits(Vec<usize>);

impl Waits {
    /// Adds a stream handle (once).
    pub fn add(&mut self, foreign: usize) {
        if !self.0.contains(&foreign) {
            self.0.push(foreign);
        }
    }

    /// detkit's stream waits for the work issued so far on each stream added (one event,
    /// recorded there and waited on here: no host or device-wide synchronisation; nothing for
    /// a stream with no work left); the list is cleared.
    pub fn apply(&mut self, g: &detkit::GpuContext) -> PyResult<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        g.context()
            .bind_to_thread()
            .map_err(|e| cuda("binding the context", e))?;
        let mut ev = None;
        for foreign in self.0.drain(..) {
            // SAFETY: a stream handle the producer gave; the query only reads its state.
            match unsafe { sys::cuStreamQuery(foreign as sys::CUstream) } {
                // No work left on it: nothing to wait for (one driver call instead of three).
                sys::CUresult::CUDA_SUCCESS => continue,
                sys::CUresult::CUDA_ERROR_NOT_READY => {}
                e => return Err(cuda("querying the producer's stream", format!("{e:?}"))),
            }
            let ev = match &ev {
                Some(ev) => ev,
                None => ev.insert(
                    g.context()
                        .new_event(None)
                        .map_err(|e| cuda("creating an event", e))?,
                ),
            };
            // SAFETY: `ev` is a live event of detkit's context (the primary context, shared
            // with the producer), `foreign` a stream handle the producer gave for its
            // pending work. Re-recording `ev` is allowed: a wait takes the event's state at
            // the time it is issued.
            unsafe { result::event::record(ev.cu_event(), foreign as sys::CUstream) }
                .map_err(|e| cuda("recording an event on the producer's stream", e))?;
            g.stream()
                .wait(ev)
                .map_err(|e| cuda("waiting for the producer's stream", e))?;
        }
        Ok(())
    }
}

/// The foreign stream `foreign` waits for the work issued so far on `stream`.
pub fn foreign_waits(stream: &Arc<CudaStream>, foreign: usize) -> PyResult<()> {
    let ev = stream
        .record_event(None)
        .map_err(|e| cuda("recording an event", e))?;
    // SAFETY: `ev` lives until after the call (the driver keeps what it needs of a waited-on
    // event); `foreign` is the consumer's stream handle.
    unsafe {
        result::stream::wait_event(
            foreign as sys::CUstream,
            ev.cu_event(),
            sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
        )
    }
    .map_err(|e| cuda("making the consumer's stream wait", e))
}

/// Reads a device array (1-D strided or C-contiguous N-D) into host bytes, in issue order on
/// detkit's stream, and waits for that stream only.
fn read_device(g: &detkit::GpuContext, d: &Desc, name: &str) -> PyResult<Vec<u8>> {
    let n = d.len();
    let mut out = crate::args::host_bytes(n.saturating_mul(d.itemsize), || {
        format!("a host copy of `{name}` ({n} elements)")
    })?;
    if n == 0 {
        return Ok(out);
    }
    let stream = g.stream();
    g.context()
        .bind_to_thread()
        .map_err(|e| cuda("binding the context", e))?;
    if d.contiguous() {
        // SAFETY: `ptr` is a device allocation of at least `n * itemsize` bytes (the
        // producer's array, kept alive by the caller until this returns); `out` is that
        // size and outlives the copy (the stream is synchronised below).
        unsafe {
            result::memcpy_dtoh_async(&mut out[..], d.ptr as sys::CUdeviceptr, stream.cu_stream())
        }
        .map_err(|e| cuda("copying a device array", e))?;
    } else {
        let stride = match (d.shape.len(), d.strides.as_deref()) {
            (1, Some(&[s])) if s >= d.itemsize as isize => s as usize,
            _ => {
                return Err(InvalidInputError::new_err(format!(
                    "{name}: a non-contiguous device array of shape {:?} and strides {:?} \
                     (only 1-D arrays with positive strides are gathered)",
                    d.shape, d.strides
                )))
            }
        };
        let copy = sys::CUDA_MEMCPY2D_st {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: d.ptr as sys::CUdeviceptr,
            srcArray: std::ptr::null_mut(),
            srcPitch: stride,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
            dstHost: out.as_mut_ptr().cast(),
            dstDevice: 0,
            dstArray: std::ptr::null_mut(),
            dstPitch: d.itemsize,
            WidthInBytes: d.itemsize,
            Height: n,
        };
        // SAFETY: a 2-D copy of `n` rows of `itemsize` bytes at `stride` bytes apart from
        // the producer's allocation (all inside it: that is the array's extent) into `out`
        // (`n * itemsize` bytes, alive until the synchronisation below).
        unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream.cu_stream()) }
            .result()
            .map_err(|e| cuda("gathering a strided device array", e))?;
    }
    stream
        .synchronize()
        .map_err(|e| cuda("waiting for a device array copy", e))?;
    Ok(out)
}

/// The CUDA array interface dict (version 2 or 3) as a description and its `stream`.
fn cai_desc<'py>(cai: &Bound<'py, PyAny>, name: &str) -> PyResult<(Desc, Option<usize>)> {
    let py = cai.py();
    let d = cai.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!("{name}: __cuda_array_interface__ is not a dict"))
    })?;
    let get = |k: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyAny>> {
        d.get_item(k)?.ok_or_else(|| {
            InvalidInputError::new_err(format!("{name}: __cuda_array_interface__ has no `{k}`"))
        })
    };
    if let Some(m) = d.get_item(intern!(py, "mask"))? {
        if !m.is_none() {
            return Err(InvalidInputError::new_err(format!(
                "{name}: masked CUDA arrays are not supported"
            )));
        }
    }
    let shape: Vec<usize> = get(intern!(py, "shape"))?.extract()?;
    let typestr: String = get(intern!(py, "typestr"))?.extract()?;
    let (ptr, _readonly): (usize, bool) = get(intern!(py, "data"))?.extract()?;
    let itemsize: usize = typestr
        .get(2..)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| PyTypeError::new_err(format!("{name}: typestr `{typestr}`")))?;
    if typestr.starts_with('>') && itemsize > 1 {
        return Err(PyTypeError::new_err(format!(
            "{name}: big-endian device array `{typestr}`"
        )));
    }
    let strides = match d.get_item(intern!(py, "strides"))? {
        Some(s) if !s.is_none() => Some(s.extract::<Vec<isize>>()?),
        _ => None,
    };
    let stream = match d.get_item(intern!(py, "stream"))? {
        Some(s) if !s.is_none() => {
            let h: usize = s.extract()?;
            if h == 0 {
                return Err(InvalidInputError::new_err(format!(
                    "{name}: __cuda_array_interface__ stream 0 is disallowed by the protocol \
                     (1: legacy default stream, 2: per-thread default stream)"
                )));
            }
            Some(h)
        }
        _ => None,
    };
    Ok((
        Desc {
            ptr,
            typestr,
            itemsize,
            shape,
            strides,
        },
        stream,
    ))
}

/// Checks that a CUDA array on `ordinal` can be read by `backend`.
fn check_device(backend: &Backend, ordinal: Option<i32>, name: &str) -> PyResult<()> {
    let on = ordinal.map_or("a CUDA device".to_string(), |o| format!("CUDA device {o}"));
    match backend.inner().gpu() {
        None => Err(InvalidInputError::new_err(format!(
            "{name}: the array is on {on}, the backend on the CPU (use Backend(\"cuda\") for \
             device arrays)"
        ))),
        Some(g) => {
            let mine = g.context().ordinal() as i32;
            match ordinal {
                Some(o) if o != mine => Err(InvalidInputError::new_err(format!(
                    "{name}: the array is on CUDA device {o}, the backend on CUDA device {mine}"
                ))),
                _ => Ok(()),
            }
        }
    }
}

/// A CUDA array argument, checked to be on the backend's device, with detkit's stream
/// ordered after its producer's pending work; a consumed DLPack tensor is kept (and so the
/// producer's memory) until this is dropped.
pub struct DeviceInput {
    pub desc: Desc,
    _tensor: Option<Imported>,
}

/// What one array argument is.
pub enum Arg {
    /// A CUDA array on the backend's device (see [`DeviceInput`]).
    Device(DeviceInput),
    /// A CPU DLPack producer: a producer-memory view for numpy.
    Host(Py<HostView>),
}

/// Reads one DLPack / CUDA-array-interface argument (not consumed when its device is wrong).
/// The producer's stream of a CUDA-array-interface input is added to `waits`, which the
/// caller applies before detkit reads the input; a DLPack producer orders its pending work
/// before detkit's stream itself (`__dlpack__(stream=...)`).
pub fn open_arg(
    py: Python<'_>,
    backend: &Backend,
    obj: &Bound<'_, PyAny>,
    name: &str,
    waits: &mut Waits,
) -> PyResult<Arg> {
    // One look-up of the property (`hasattr` would run a producer's getter a second time).
    let cai = match obj.getattr(intern!(py, "__cuda_array_interface__")) {
        Ok(c) => Some(c),
        Err(e) if e.is_instance_of::<PyAttributeError>(py) => None,
        Err(e) => return Err(e),
    };
    if let Some(cai) = cai {
        let (d, producer_stream) = cai_desc(&cai, name)?;
        // The pointer's device, by the driver (with detkit's context current on this thread);
        // an empty array's pointer may be null, and the CPU backend has no driver to ask.
        let ordinal = match backend.inner().gpu() {
            Some(g) if d.len() > 0 => {
                g.context()
                    .bind_to_thread()
                    .map_err(|e| cuda("binding the context", e))?;
                pointer_device(d.ptr).ok()
            }
            _ => None,
        };
        check_device(backend, ordinal, name)?;
        if let Some(s) = producer_stream {
            waits.add(s);
        }
        return Ok(Arg::Device(DeviceInput {
            desc: d,
            _tensor: None,
        }));
    }
    if !(obj.hasattr("__dlpack__")? && obj.hasattr("__dlpack_device__")?) {
        return Err(PyTypeError::new_err(format!(
            "{name}: {} is neither an array nor a DLPack / CUDA array interface producer",
            obj.get_type().name()?
        )));
    }
    let (dev_type, dev_id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    match dev_type {
        dlpack::DL_CPU | dlpack::DL_CUDA_HOST => {
            let cap = obj.call_method0("__dlpack__")?;
            let t = Imported::from_capsule(&cap, name)?;
            let d = t.desc(name)?;
            Ok(Arg::Host(Py::new(py, HostView::new(t, d, true))?))
        }
        dlpack::DL_CUDA | dlpack::DL_CUDA_MANAGED => {
            check_device(backend, Some(dev_id), name)?;
            let Some(g) = backend.inner().gpu() else {
                unreachable!("check_device refuses the CPU backend")
            };
            // The producer orders its pending work before detkit's stream.
            let kw = PyDict::new(py);
            kw.set_item("stream", g.stream().cu_stream() as usize)?;
            let cap = obj.call_method("__dlpack__", (), Some(&kw))?;
            let t = Imported::from_capsule(&cap, name)?;
            let d = t.desc(name)?;
            Ok(Arg::Device(DeviceInput {
                desc: d,
                _tensor: Some(t),
            }))
        }
        t => Err(InvalidInputError::new_err(format!(
            "{name}: the array is on {}, the backend on {}",
            dlpack::device_name(t, dev_id),
            backend
                .inner()
                .gpu()
                .map_or("the CPU".to_string(), |g| format!(
                    "CUDA device {}",
                    g.context().ordinal()
                ))
        ))),
    }
}

/// One array argument given as a DLPack or CUDA-array-interface object: `(numpy array,
/// came_from_device)`. See the module docs.
#[pyfunction]
#[pyo3(signature = (backend, obj, name, stream = None))]
pub fn import_array<'py>(
    py: Python<'py>,
    backend: &Backend,
    obj: &Bound<'py, PyAny>,
    name: &str,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyAny>, bool)> {
    let mut waits = Waits::default();
    if let Some(s) = stream_handle(stream)? {
        waits.add(s);
    }
    match open_arg(py, backend, obj, name, &mut waits)? {
        Arg::Host(view) => Ok((py.import("numpy")?.call_method1("asarray", (view,))?, false)),
        Arg::Device(input) => {
            let Some(g) = backend.inner().gpu() else {
                unreachable!("open_arg gives device inputs on CUDA backends only")
            };
            waits.apply(g)?;
            let d = input.desc.clone();
            let bytes = py.detach(|| read_device(g, &d, name))?;
            drop(input);
            let arr = bytes
                .into_pyarray(py)
                .into_any()
                .call_method1("view", (d.typestr.as_str(),))?
                .call_method1("reshape", (PyTuple::new(py, &d.shape)?,))?;
            Ok((arr, true))
        }
    }
}

/// Whether detkit's context on `backend` is the device's primary context (the one the CUDA
/// runtime and so CuPy, PyTorch, Numba and `cuda.core` use).
#[pyfunction]
pub fn primary_context(backend: &Backend) -> PyResult<bool> {
    let Some(g) = backend.inner().gpu() else {
        return Ok(false);
    };
    let ctx = g.context();
    let mut primary: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: `cuDevicePrimaryCtxRetain` writes the primary context of the device into
    // `primary` and takes a reference, released right after.
    unsafe {
        sys::cuDevicePrimaryCtxRetain(&mut primary, ctx.cu_device())
            .result()
            .map_err(|e| cuda("retaining the primary context", e))?;
        sys::cuDevicePrimaryCtxRelease_v2(ctx.cu_device())
            .result()
            .map_err(|e| cuda("releasing the primary context", e))?;
    }
    Ok(primary == ctx.cu_ctx())
}

/// An array in device memory made by detkit: exports `__cuda_array_interface__` (v3, with
/// detkit's stream) and `__dlpack__` / `__dlpack_device__`; `get()` / `np.asarray` copy it
/// to a numpy array. The memory lives as long as this object or any consumer's view of it
/// (a DLPack export holds a reference), also after the backend that made it is gone.
#[pyclass(module = "detkit._detkit", frozen, name = "DeviceArray")]
pub struct DeviceArray {
    buf: Box<dyn Hold>,
    /// Bytes from the array's address to the end of its last element (what `get()` copies).
    nbytes: usize,
    /// Strides in bytes of a strided view (seeding's index rows, weights and z vertices in
    /// the batch's seed records); `None`: C-contiguous.
    strides: Option<Vec<isize>>,
    stream: Arc<CudaStream>,
    ordinal: usize,
    typestr: String,
    shape: Vec<usize>,
    /// The numpy dtype `get()` views the bytes as (structured PET records); `None`: typestr.
    descr: Option<Py<PyAny>>,
}

/// Device memory a `DeviceArray` owns: a typed cudarc buffer (freed when dropped).
pub trait Hold: Send + Sync {
    /// The buffer's device address.
    fn address(&self, stream: &Arc<CudaStream>) -> usize;
}

impl<T: cudarc::driver::DeviceRepr + Send + Sync> Hold for CudaSlice<T> {
    fn address(&self, stream: &Arc<CudaStream>) -> usize {
        let (p, _sync) = self.device_ptr(stream);
        p as usize
    }
}

impl DeviceArray {
    fn ptr(&self) -> usize {
        if self.nbytes == 0 {
            return 0;
        }
        self.buf.address(&self.stream)
    }

    /// A `DeviceArray` owning `buf` (its first `nbytes` bytes hold `shape` of `typestr`,
    /// written on `g`'s stream), made with `g`'s stream and device.
    pub fn from_buffer(
        g: &detkit::GpuContext,
        buf: Box<dyn Hold>,
        nbytes: usize,
        typestr: &str,
        shape: Vec<usize>,
    ) -> Self {
        Self {
            buf,
            nbytes,
            strides: None,
            stream: g.stream().clone(),
            ordinal: g.context().ordinal(),
            typestr: typestr.to_string(),
            shape,
            descr: None,
        }
    }

    /// The same memory as a strided view: `strides` in bytes, one per dimension of the
    /// shape; `nbytes` (given to [`DeviceArray::from_buffer`]) covers up to the end of the
    /// last element.
    /// An empty array stays C-contiguous (strides `None`): its strides say nothing, and
    /// consumers take an empty contiguous array without asking for its (null) memory.
    pub fn with_strides(mut self, strides: Vec<isize>) -> Self {
        if !self.shape.contains(&0) {
            self.strides = Some(strides);
        }
        self
    }

    fn itemsize(&self) -> usize {
        self.typestr
            .get(2..)
            .and_then(|s| s.parse().ok())
            .unwrap_or(1)
    }

    /// The same array, viewed by `get()` as records of the numpy dtype `descr` (PET
    /// singles as `uint8` rows of 16 bytes).
    pub fn with_descr(mut self, descr: Py<PyAny>) -> Self {
        self.descr = Some(descr);
        self
    }
}

#[pymethods]
impl DeviceArray {
    /// A device copy of the contiguous bytes `raw` (viewed as `typestr` of `shape`), made on
    /// `backend`'s stream; with `stream`, that stream waits for the copy.
    #[staticmethod]
    #[pyo3(signature = (backend, raw, typestr, shape, descr = None, stream = None))]
    fn from_host(
        py: Python<'_>,
        backend: &Backend,
        raw: PyReadonlyArray1<'_, u8>,
        typestr: String,
        shape: Vec<usize>,
        descr: Option<Py<PyAny>>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let user_stream = stream_handle(stream)?;
        let Some(g) = backend.inner().gpu() else {
            return Err(InvalidInputError::new_err(
                "DeviceArray: the backend is the CPU (device arrays need Backend(\"cuda\"))",
            ));
        };
        let bytes = raw.as_slice()?;
        let nbytes = bytes.len();
        let buf = py
            .detach(|| {
                if nbytes == 0 {
                    g.zeros::<u8>(1)
                } else {
                    g.upload(bytes)
                }
            })
            .map_err(crate::errors::err)?;
        if let Some(s) = user_stream {
            foreign_waits(g.stream(), s)?;
        }
        Ok(Self {
            buf: Box::new(buf),
            nbytes,
            strides: None,
            stream: g.stream().clone(),
            ordinal: g.context().ordinal(),
            typestr,
            shape,
            descr,
        })
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// The numpy dtype of `get()`.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.descr {
            Some(d) => Ok(d.bind(py).clone()),
            None => py
                .import("numpy")?
                .call_method1("dtype", (self.typestr.as_str(),)),
        }
    }

    /// Bytes of its elements (numpy's `nbytes`).
    #[getter]
    fn nbytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.itemsize()
    }

    /// The CUDA device ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.ordinal
    }

    fn __len__(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }

    fn __repr__(&self) -> String {
        format!(
            "detkit.DeviceArray(shape={:?}, typestr={:?}, device={})",
            self.shape, self.typestr, self.ordinal
        )
    }

    /// A numpy copy (waits for detkit's stream only).
    fn get<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut bytes = crate::args::host_bytes(self.nbytes, || {
            format!("a host copy of a device array of {} bytes", self.nbytes)
        })?;
        if self.nbytes > 0 {
            let ptr = self.ptr();
            py.detach(|| -> Result<(), cudarc::driver::DriverError> {
                self.stream.context().bind_to_thread()?;
                // SAFETY: `ptr` is this array's own allocation of at least `nbytes` bytes
                // (alive while `self` is), `bytes` is `nbytes` long and outlives the copy:
                // the stream is synchronised before it is read.
                unsafe {
                    result::memcpy_dtoh_async(
                        &mut bytes[..],
                        ptr as sys::CUdeviceptr,
                        self.stream.cu_stream(),
                    )
                }?;
                self.stream.synchronize()
            })
            .map_err(|e| cuda("copying a DeviceArray to the host", e))?;
        }
        let arr = bytes
            .into_pyarray(py)
            .into_any()
            .call_method1("view", (self.typestr.as_str(),))?;
        let arr = match &self.strides {
            None => arr.call_method1("reshape", (PyTuple::new(py, &self.shape)?,))?,
            // The span copied above, seen with the view's strides, then made contiguous.
            Some(st) => {
                let np = py.import("numpy")?;
                let view = py.import("numpy.lib.stride_tricks")?.call_method1(
                    "as_strided",
                    (arr, PyTuple::new(py, &self.shape)?, PyTuple::new(py, st)?),
                )?;
                np.call_method1("ascontiguousarray", (view,))?
            }
        };
        match &self.descr {
            Some(d) => arr
                .call_method1("view", (d.bind(py),))?
                .call_method1("reshape", (-1,)),
            None => Ok(arr),
        }
    }

    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if copy == Some(false) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "a DeviceArray cannot be seen by numpy without a copy",
            ));
        }
        let a = self.get(py)?;
        match dtype {
            Some(d) if !d.is_none() => a.call_method1("astype", (d,)),
            _ => Ok(a),
        }
    }

    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", &self.typestr)?;
        d.set_item("data", (self.ptr(), false))?;
        d.set_item("version", 3)?;
        match &self.strides {
            None => d.set_item("strides", py.None())?,
            Some(st) => d.set_item("strides", PyTuple::new(py, st)?)?,
        }
        // The consumer orders its use after detkit's stream (its pending copy of the data).
        d.set_item("stream", self.stream.cu_stream() as usize)?;
        Ok(d)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (dlpack::DL_CUDA, self.ordinal as i32)
    }

    #[pyo3(signature = (stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = max_version; // an unversioned capsule is what every consumer reads
        let me = slf.get();
        if let Some(dev) = dl_device {
            if dev != (dlpack::DL_CUDA, me.ordinal as i32) {
                return Err(PyBufferError::new_err(format!(
                    "DeviceArray is on CUDA device {}, {} was asked for",
                    me.ordinal,
                    dlpack::device_name(dev.0, dev.1)
                )));
            }
        }
        if copy == Some(true) {
            return Err(PyBufferError::new_err(
                "DeviceArray.__dlpack__(copy=True) is not supported: export without a copy",
            ));
        }
        // DLPack: None is the legacy default stream (1), -1 asks for no synchronisation.
        let s: Option<i64> = match stream {
            None => Some(1),
            Some(s) if s.is_none() => Some(1),
            Some(s) => Some(s.extract::<i64>()?),
        };
        match s {
            Some(-1) => {}
            Some(0) => {
                return Err(PyBufferError::new_err(
                    "stream=0 is ambiguous for CUDA (DLPack): use 1 (legacy default) or 2",
                ))
            }
            Some(h) => foreign_waits(&me.stream, h as usize)?,
            None => {}
        }
        let dtype = dlpack::dtype_of(&me.typestr)?;
        let item = me.itemsize() as isize;
        let elements: Option<Vec<isize>> = me
            .strides
            .as_ref()
            .map(|st| st.iter().map(|&b| b / item).collect());
        dlpack::export(
            slf.py(),
            slf.clone().into_any().unbind(),
            me.ptr(),
            DLDevice {
                device_type: dlpack::DL_CUDA,
                device_id: me.ordinal as i32,
            },
            dtype,
            &me.shape,
            elements.as_deref(),
        )
    }
}
