//! DLPack (the unversioned 0.x ABI every producer exports by default: numpy >= 1.22, CuPy,
//! PyTorch, JAX, Numba, `cuda.core`): the C structs, reading a consumed `dltensor` capsule,
//! and writing one for `detkit.DeviceArray.__dlpack__`.
//!
//! Protocol (<https://dmlc.github.io/dlpack/latest/python_spec.html>): the consumer calls
//! `__dlpack__(stream=...)` and gets a `PyCapsule` named `"dltensor"` holding a
//! `DLManagedTensor*`; it renames the capsule `"used_dltensor"` (so the capsule's destructor
//! no longer frees it) and calls the tensor's `deleter` when it no longer needs the memory.
//! A capsule that is never consumed frees the tensor in its destructor.

use std::ffi::{c_void, CStr};

use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::InvalidInputError;

pub const DL_CPU: i32 = 1;
pub const DL_CUDA: i32 = 2;
pub const DL_CUDA_HOST: i32 = 3;
pub const DL_CUDA_MANAGED: i32 = 13;

const NAME: &CStr = c"dltensor";
const USED: &CStr = c"used_dltensor";

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// The name of a device type (for errors).
pub fn device_name(device_type: i32, id: i32) -> String {
    match device_type {
        DL_CPU => "the CPU".to_string(),
        DL_CUDA => format!("CUDA device {id}"),
        DL_CUDA_HOST => "CUDA pinned host memory".to_string(),
        DL_CUDA_MANAGED => format!("CUDA managed memory (device {id})"),
        t => format!("DLPack device type {t} (device {id})"),
    }
}

/// An array description read from either protocol: where the data is, its element type as
/// a numpy type string (`<u2`), shape, and strides in bytes (`None`: C-contiguous).
#[derive(Clone, Debug)]
pub struct Desc {
    pub ptr: usize,
    pub typestr: String,
    pub itemsize: usize,
    pub shape: Vec<usize>,
    pub strides: Option<Vec<isize>>,
}

impl Desc {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the elements are C-contiguous (also when strides are given but compact).
    pub fn contiguous(&self) -> bool {
        let Some(st) = &self.strides else {
            return true;
        };
        let mut want = self.itemsize as isize;
        for (d, s) in self.shape.iter().zip(st).rev() {
            if *d > 1 && *s != want {
                return false;
            }
            want *= *d as isize;
        }
        true
    }
}

/// A consumed DLPack tensor: the memory stays valid until this is dropped (which calls the
/// producer's deleter).
pub struct Imported {
    tensor: *mut DLManagedTensor,
}

impl Imported {
    /// Takes the tensor out of a `"dltensor"` capsule (renaming it `"used_dltensor"`).
    pub fn from_capsule(capsule: &Bound<'_, PyAny>, name: &str) -> PyResult<Self> {
        // SAFETY: `capsule` is a live Python object (borrowed for this call, GIL held);
        // `PyCapsule_IsValid` accepts any object and only reads it.
        let valid = unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), NAME.as_ptr()) } == 1;
        if !valid {
            return Err(InvalidInputError::new_err(format!(
                "{name}: __dlpack__() did not return an unconsumed \"dltensor\" capsule \
                 (a versioned DLPack 1.x capsule is not read: call it without max_version)"
            )));
        }
        // SAFETY: the capsule is valid with this name (checked above), so `GetPointer`
        // returns its non-null pointer; renaming it marks it consumed, as the protocol asks.
        let tensor = unsafe {
            let p = ffi::PyCapsule_GetPointer(capsule.as_ptr(), NAME.as_ptr());
            if ffi::PyCapsule_SetName(capsule.as_ptr(), USED.as_ptr()) != 0 {
                return Err(PyErr::fetch(capsule.py()));
            }
            p.cast::<DLManagedTensor>()
        };
        if tensor.is_null() {
            return Err(InvalidInputError::new_err(format!(
                "{name}: a null DLPack tensor"
            )));
        }
        Ok(Self { tensor })
    }

    fn t(&self) -> &DLTensor {
        // SAFETY: `tensor` is the producer's live, non-null `DLManagedTensor` (checked at
        // import); it stays valid until `drop` calls its deleter.
        unsafe { &(*self.tensor).dl_tensor }
    }

    pub fn device(&self) -> DLDevice {
        self.t().device
    }

    /// The array description, with its dtype, shape and strides checked.
    pub fn desc(&self, name: &str) -> PyResult<Desc> {
        let t = self.t();
        let dt = t.dtype;
        let kind = match dt.code {
            0 => 'i',
            1 => 'u',
            2 => 'f',
            6 => 'b',
            c => {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "{name}: DLPack dtype code {c} ({} bits) is not an integer, float or bool type",
                    dt.bits
                )))
            }
        };
        if dt.lanes != 1 || dt.bits == 0 || !dt.bits.is_multiple_of(8) {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "{name}: DLPack dtype of {} bits x {} lanes is not a plain scalar type",
                dt.bits, dt.lanes
            )));
        }
        let itemsize = dt.bits as usize / 8;
        let ndim = usize::try_from(t.ndim).map_err(|_| {
            InvalidInputError::new_err(format!("{name}: DLPack ndim {} is negative", t.ndim))
        })?;
        let read = |p: *mut i64| -> Vec<i64> {
            if p.is_null() || ndim == 0 {
                return Vec::new();
            }
            // SAFETY: DLPack's shape (and non-null strides) hold `ndim` int64 values, alive
            // as long as the tensor.
            unsafe { std::slice::from_raw_parts(p, ndim) }.to_vec()
        };
        let shape = read(t.shape);
        if shape.len() != ndim || shape.iter().any(|&d| d < 0) {
            return Err(InvalidInputError::new_err(format!(
                "{name}: DLPack shape {shape:?} is not {ndim} non-negative sizes"
            )));
        }
        let strides = (!t.strides.is_null() && ndim > 0).then(|| {
            read(t.strides)
                .into_iter()
                .map(|s| s as isize * itemsize as isize)
                .collect()
        });
        Ok(Desc {
            ptr: t.data as usize + t.byte_offset as usize,
            typestr: format!(
                "{}{}{itemsize}",
                if itemsize == 1 { '|' } else { '<' },
                kind
            ),
            itemsize,
            shape: shape.into_iter().map(|d| d as usize).collect(),
            strides,
        })
    }
}

impl Drop for Imported {
    fn drop(&mut self) {
        // SAFETY: the tensor was consumed from its capsule (renamed), so its memory is ours
        // to release exactly once, by its own deleter (which may be absent).
        unsafe {
            if let Some(d) = (*self.tensor).deleter {
                d(self.tensor);
            }
        }
    }
}

/// What an exported tensor keeps alive: the owner of the memory and the shape/strides the
/// `DLTensor` points into.
struct ExportCtx {
    _owner: Py<PyAny>,
    shape: Vec<i64>,
    /// Strides in elements; empty: C-contiguous (a null `strides`).
    strides: Vec<i64>,
}

unsafe extern "C" fn export_deleter(t: *mut DLManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: `t` and its `manager_ctx` were made by `Box::into_raw` in `export` and are
    // freed here once (the consumer calls the deleter once, or the capsule destructor does
    // when it was never consumed).
    let ctx = unsafe {
        let ctx = Box::from_raw((*t).manager_ctx.cast::<ExportCtx>());
        drop(Box::from_raw(t));
        ctx
    };
    // The owner is released now, with the GIL taken for it (consumers may call the deleter
    // from any thread, with or without the GIL). When the interpreter cannot be attached
    // (finalizing), the closure is dropped uncalled and the owner with it, pyo3 deferring
    // the reference count.
    let _ = Python::try_attach(move |_py| drop(ctx));
}

unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule; a capsule still named "dltensor" was never
    // consumed, so its tensor is still ours to free. A consumed one ("used_dltensor") is the
    // consumer's, and `IsValid` returns 0 for it without setting an error.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, NAME.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, NAME.as_ptr());
            export_deleter(p.cast());
        }
    }
}

/// A `"dltensor"` capsule over memory owned by `owner` (kept alive until the consumer calls
/// the deleter): an array of `shape` at `ptr` on `device`, C-contiguous or with `strides`
/// (in elements, as DLPack counts them).
pub fn export(
    py: Python<'_>,
    owner: Py<PyAny>,
    ptr: usize,
    device: DLDevice,
    dtype: DLDataType,
    shape: &[usize],
    strides: Option<&[isize]>,
) -> PyResult<Py<PyAny>> {
    let mut ctx = Box::new(ExportCtx {
        _owner: owner,
        shape: shape.iter().map(|&d| d as i64).collect(),
        strides: strides.map_or(Vec::new(), |s| s.iter().map(|&d| d as i64).collect()),
    });
    let strides_ptr = if ctx.strides.is_empty() {
        std::ptr::null_mut()
    } else {
        ctx.strides.as_mut_ptr()
    };
    let tensor = Box::new(DLManagedTensor {
        dl_tensor: DLTensor {
            data: ptr as *mut c_void,
            device,
            ndim: shape.len() as i32,
            dtype,
            shape: ctx.shape.as_mut_ptr(),
            strides: strides_ptr,
            byte_offset: 0,
        },
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(export_deleter),
    });
    let tensor = Box::into_raw(tensor);
    // SAFETY: `tensor` is the box just leaked; `ctx` (whose heap shape and strides the
    // tensor points into: moving the Box does not move the Vecs' buffers) is leaked into it and freed by
    // `export_deleter`. The capsule name is a static C string.
    unsafe {
        (*tensor).manager_ctx = Box::into_raw(ctx).cast();
        let cap = ffi::PyCapsule_New(tensor.cast(), NAME.as_ptr(), Some(capsule_destructor));
        if cap.is_null() {
            export_deleter(tensor);
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, cap).unbind())
    }
}

/// The DLPack dtype of a numpy type string (`<u2`, `<f4`, `|u1`, ...).
pub fn dtype_of(typestr: &str) -> PyResult<DLDataType> {
    let b = typestr.as_bytes();
    let bad = || {
        pyo3::exceptions::PyTypeError::new_err(format!("type `{typestr}` has no DLPack equivalent"))
    };
    if b.len() < 3 {
        return Err(bad());
    }
    let code = match b[1] {
        b'i' => 0,
        b'u' => 1,
        b'f' => 2,
        b'b' => 6,
        _ => return Err(bad()),
    };
    let bytes: u8 = typestr[2..].parse().map_err(|_| bad())?;
    Ok(DLDataType {
        code,
        bits: bytes * 8,
        lanes: 1,
    })
}

/// A consumed CPU DLPack tensor seen by numpy through `__array_interface__` (numpy's
/// `np.asarray(view)` keeps this object, and so the producer's memory, alive as the array's
/// base).
#[pyclass(module = "detkit._detkit", unsendable)]
pub struct HostView {
    _tensor: Imported,
    desc: Desc,
    readonly: bool,
}

impl HostView {
    pub fn new(tensor: Imported, desc: Desc, readonly: bool) -> Self {
        Self {
            _tensor: tensor,
            desc,
            readonly,
        }
    }
}

#[pymethods]
impl HostView {
    #[getter]
    fn __array_interface__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("typestr", &self.desc.typestr)?;
        d.set_item("shape", pyo3::types::PyTuple::new(py, &self.desc.shape)?)?;
        // A zero-size array may have a null (or any) pointer: numpy needs a non-null one.
        let ptr = if self.desc.len() == 0 && self.desc.ptr == 0 {
            self.desc.itemsize
        } else {
            self.desc.ptr
        };
        d.set_item("data", (ptr, self.readonly))?;
        match &self.desc.strides {
            Some(s) => d.set_item("strides", pyo3::types::PyTuple::new(py, s)?)?,
            None => d.set_item("strides", py.None())?,
        }
        Ok(d)
    }
}

/// A C-contiguous numpy array exported through [`export`] as a CPU DLPack tensor: the same
/// capsule, deleter and keep-alive code as `DeviceArray.__dlpack__`, so CI (no GPU) runs the
/// export side of the protocol against numpy's `np.from_dlpack`. Private (`_detkit`).
#[pyclass(module = "detkit._detkit", frozen)]
pub struct CpuExport {
    array: Py<PyAny>,
}

#[pymethods]
impl CpuExport {
    #[new]
    fn new(array: Py<PyAny>) -> Self {
        Self { array }
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (DL_CPU, 0)
    }

    #[pyo3(signature = (stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<Py<PyAny>>,
        max_version: Option<Py<PyAny>>,
        dl_device: Option<Py<PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = (stream, max_version, dl_device, copy);
        let a = self.array.bind(py);
        let ai = a.getattr("__array_interface__")?;
        let (ptr, _readonly): (usize, bool) = ai.get_item("data")?.extract()?;
        let typestr: String = ai.get_item("typestr")?.extract()?;
        if !ai.get_item("strides")?.is_none() {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "CpuExport: a C-contiguous array only",
            ));
        }
        let shape: Vec<usize> = ai.get_item("shape")?.extract()?;
        export(
            py,
            self.array.clone_ref(py),
            ptr,
            DLDevice {
                device_type: DL_CPU,
                device_id: 0,
            },
            dtype_of(&typestr)?,
            &shape,
            None,
        )
    }
}
