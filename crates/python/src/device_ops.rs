//! Calls that stay on the device from Python end to end: a CUDA array of the exact dtype
//! (contiguous, 1-D, on the backend's device) is copied device-to-device into a buffer of
//! detkit's, the library's device-level launcher runs on it, and its output buffer becomes
//! the `DeviceArray` returned: no host copy. Today: `scan`, `radix_sort` of keys, `argsort`,
//! `histogram` and `select`, over the library's `scan_device`, `sort_keys_device`,
//! `sort_index_device`, `histogram_device` and `select_u32`.
//! Any other input (another dtype, strided, a CPU array) returns `None`, and the Python layer
//! takes the general path (`device::import_array`), which converts and checks it.
//!
//! [`DevCall`] is the preamble every `device_*` function shares (here and in
//! `device_calls`): the CUDA check, the caller's stream, opening each argument with its
//! dtype match, one wait per producer stream, and the caller's stream waiting at the end.

use cudarc::driver::{result, sys, CudaSlice, DevicePtrMut, DeviceRepr, ValidAsZeroBits};
use detkit::outputs::{alloc_output, zeroed_output};
use detkit::sort::{SortKey, SortOptions};
use detkit::ScanKind;
use pyo3::intern;
use pyo3::prelude::*;

use crate::device::{open_arg, stream_handle, Arg, DeviceArray, DeviceInput, Waits};
use crate::errors::{err, CudaError};
use crate::Backend;

fn cuda(what: &str, e: impl std::fmt::Display) -> PyErr {
    CudaError::new_err(format!("CUDA driver error while {what}: {e}"))
}

/// The argument as a device input usable here: a CUDA array, 1-D, C-contiguous, of one of
/// `types` (numpy type strings). `None`: take the general path.
pub(crate) fn exact<'a>(arg: &'a Arg, types: &[&str]) -> Option<&'a DeviceInput> {
    match arg {
        Arg::Device(d)
            if d.desc.shape.len() == 1
                && d.desc.contiguous()
                && types.contains(&d.desc.typestr.as_str()) =>
        {
            Some(d)
        }
        _ => None,
    }
}

/// One opened device input of a [`DevCall`]: its address, length and type string.
#[derive(Clone, Debug)]
pub(crate) struct Input {
    pub addr: u64,
    pub len: usize,
    pub typestr: String,
}

/// A device-array call in progress (see the module doc): the backend's GPU, the caller's
/// stream, the producer streams to wait for and the opened arguments (each holds its
/// producer's memory: a DLPack capsule's tensor until the call is finished; a
/// CUDA-array-interface object through the Python reference the caller holds).
pub(crate) struct DevCall<'b> {
    pub g: &'b detkit::GpuContext,
    backend: &'b Backend,
    user: Option<usize>,
    waits: Waits,
    held: Vec<Arg>,
}

impl<'b> DevCall<'b> {
    /// `None` on a CPU backend (the caller takes the general path).
    pub fn start(
        backend: &'b Backend,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Self>> {
        crate::device_prof::begin();
        let Some(g) = backend.inner().gpu() else {
            return Ok(None);
        };
        let user = stream_handle(stream)?;
        let mut waits = Waits::default();
        if let Some(s) = user {
            waits.add(s);
        }
        Ok(Some(Self {
            g,
            backend,
            user,
            waits,
            held: Vec::new(),
        }))
    }

    /// Opens one argument: `Some` for a 1-D C-contiguous CUDA array of one of `types` on
    /// the backend's device (held until [`DevCall::finish`]); `None`: not such an array (the
    /// general path). A CUDA array on another device is an error.
    pub fn open(
        &mut self,
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
        name: &str,
        types: &[&str],
    ) -> PyResult<Option<Input>> {
        self.open_with(py, obj, name, |arg| exact(arg, types))
    }

    /// [`DevCall::open`] with the layout test `accept` (`exact` for 1-D arrays; PET records
    /// also take `(n, 16)` byte rows).
    pub fn open_with(
        &mut self,
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
        name: &str,
        accept: impl for<'a> Fn(&'a Arg) -> Option<&'a DeviceInput>,
    ) -> PyResult<Option<Input>> {
        // Not a protocol producer at all (a list, a scalar): the general path converts it.
        // The type is asked first, so that a CUDA-array-interface property is not run twice.
        let (cai, dlpack) = (
            intern!(py, "__cuda_array_interface__"),
            intern!(py, "__dlpack__"),
        );
        let t = obj.get_type();
        if !(t.hasattr(cai)? || t.hasattr(dlpack)? || obj.hasattr(cai)? || obj.hasattr(dlpack)?) {
            return Ok(None);
        }
        let arg = open_arg(py, self.backend, obj, name, &mut self.waits)?;
        let Some(d) = accept(&arg) else {
            return Ok(None);
        };
        let input = Input {
            addr: d.desc.ptr as u64,
            len: d.desc.len(),
            typestr: d.desc.typestr.clone(),
        };
        self.held.push(arg);
        Ok(Some(input))
    }

    /// detkit's stream waits for every producer's stream (once each): call before anything
    /// reads the inputs.
    pub fn order(&mut self) -> PyResult<()> {
        let r = self.waits.apply(self.g);
        crate::device_prof::step("open arguments, order streams");
        r
    }

    /// Releases the inputs (the library has finished reading them) and makes the caller's
    /// stream (when given) wait for the results.
    pub fn finish(self) -> PyResult<()> {
        drop(self.held);
        let r = finish(self.g, self.user);
        crate::device_prof::step("finish");
        r
    }
}

/// A copy of the input's `n` elements in a new buffer of detkit's (on its stream, after the
/// producer's work), finished before this returns, so that the producer may free its memory
/// as soon as the call returns.
fn copy_in<T: DeviceRepr + ValidAsZeroBits>(
    g: &detkit::GpuContext,
    input: &Input,
    n: usize,
) -> PyResult<CudaSlice<T>> {
    if n == 0 {
        return zeroed_output::<T>(g, 1).map_err(err);
    }
    // SAFETY: all `n` elements are written by the copy below before anyone reads them.
    let mut buf = unsafe { alloc_output::<T>(g, n) }.map_err(err)?;
    let stream = g.stream();
    {
        let (dst, _sync) = buf.device_ptr_mut(stream);
        // SAFETY: `dst` is a fresh allocation of `n` values of `T`; the source is the
        // producer's array of `n` values of the same type (dtype checked), alive until this
        // function has waited for the copy below.
        unsafe {
            result::memcpy_dtod_async(
                dst,
                input.addr as sys::CUdeviceptr,
                n * std::mem::size_of::<T>(),
                stream.cu_stream(),
            )
        }
        .map_err(|e| cuda("copying a device array", e))?;
    }
    let done = stream
        .record_event(None)
        .map_err(|e| cuda("recording an event", e))?;
    done.synchronize()
        .map_err(|e| cuda("waiting for a device array copy", e))?;
    Ok(buf)
}

fn scan_typed<T: detkit::scan::DeviceScanValue + Send + Sync + 'static>(
    g: &detkit::GpuContext,
    input: &Input,
    kind: ScanKind,
) -> PyResult<DeviceArray> {
    let n = input.len;
    let size = std::mem::size_of::<T>();
    let src = copy_in::<T>(g, input, n)?;
    let mut out = zeroed_output::<T>(g, n).map_err(err)?;
    g.scan_device(&src, &mut out, n, kind).map_err(err)?;
    Ok(DeviceArray::from_buffer(
        g,
        Box::new(out),
        n * size,
        &input.typestr,
        vec![n],
    ))
}

/// `Backend.scan` of a CUDA `uint32` / `uint64` array, on the device; `None`: not such an
/// array (the caller takes the general path).
#[pyfunction]
#[pyo3(signature = (backend, obj, name, inclusive, stream = None))]
pub fn device_scan(
    py: Python<'_>,
    backend: &Backend,
    obj: &Bound<'_, PyAny>,
    name: &str,
    inclusive: bool,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<DeviceArray>> {
    let Some(mut call) = DevCall::start(backend, stream)? else {
        return Ok(None);
    };
    let Some(input) = call.open(py, obj, name, &["<u4", "<u8"])? else {
        return Ok(None);
    };
    call.order()?;
    let g = call.g;
    let kind = if inclusive {
        ScanKind::Inclusive
    } else {
        ScanKind::Exclusive
    };
    let out = if input.typestr == "<u4" {
        scan_typed::<u32>(g, &input, kind)?
    } else {
        scan_typed::<u64>(g, &input, kind)?
    };
    call.finish()?;
    Ok(Some(out))
}

fn sort_typed<K: SortKey + ValidAsZeroBits + Send + Sync + 'static>(
    g: &detkit::GpuContext,
    input: &Input,
    opts: SortOptions,
    argsort: bool,
) -> PyResult<(DeviceArray, Option<DeviceArray>)> {
    let n = input.len;
    let size = std::mem::size_of::<K>();
    let keys = copy_in::<K>(g, input, n)?;
    let mut out = zeroed_output::<K>(g, n).map_err(err)?;
    let typestr = &input.typestr;
    if argsort {
        let mut index = zeroed_output::<u32>(g, n).map_err(err)?;
        g.sort_index_device(&keys, &mut out, &mut index, n, opts)
            .map_err(err)?;
        let k = DeviceArray::from_buffer(g, Box::new(out), n * size, typestr, vec![n]);
        let i = DeviceArray::from_buffer(g, Box::new(index), n * 4, "<u4", vec![n]);
        Ok((k, Some(i)))
    } else {
        g.sort_keys_device(&keys, &mut out, n, opts).map_err(err)?;
        let k = DeviceArray::from_buffer(g, Box::new(out), n * size, typestr, vec![n]);
        Ok((k, None))
    }
}

/// `Backend.radix_sort` of CUDA `uint32` / `uint64` keys alone (or their `argsort`: the
/// sorted keys and the `uint32` indices), on the device; `None`: not such an array.
#[pyfunction]
#[pyo3(signature = (backend, obj, name, begin_bit, end_bit, descending, argsort, stream = None))]
#[allow(clippy::too_many_arguments)]
pub fn device_sort(
    py: Python<'_>,
    backend: &Backend,
    obj: &Bound<'_, PyAny>,
    name: &str,
    begin_bit: u32,
    end_bit: Option<u32>,
    descending: bool,
    argsort: bool,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<(DeviceArray, Option<DeviceArray>)>> {
    let Some(mut call) = DevCall::start(backend, stream)? else {
        return Ok(None);
    };
    let Some(input) = call.open(py, obj, name, &["<u4", "<u8"])? else {
        return Ok(None);
    };
    call.order()?;
    let g = call.g;
    let opts = SortOptions {
        begin_bit,
        end_bit,
        descending,
    };
    let out = if input.typestr == "<u4" {
        sort_typed::<u32>(g, &input, opts, argsort)?
    } else {
        sort_typed::<u64>(g, &input, opts, argsort)?
    };
    call.finish()?;
    Ok(Some(out))
}

/// The caller's stream (when given) waits for the results.
pub(crate) fn finish(g: &detkit::GpuContext, user: Option<usize>) -> PyResult<()> {
    match user {
        Some(s) => crate::device::foreign_waits(g.stream(), s),
        None => Ok(()),
    }
}

/// `Backend.histogram` of CUDA `uint32` keys, on the device: `(counts as a DeviceArray,
/// out_of_range, first_out_of_range)` (the two numbers read back: 8 bytes); `None`: not
/// such an array.
#[pyfunction]
#[pyo3(signature = (backend, obj, name, nbins, stream = None))]
#[allow(clippy::type_complexity)]
pub fn device_histogram(
    py: Python<'_>,
    backend: &Backend,
    obj: &Bound<'_, PyAny>,
    name: &str,
    nbins: u32,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<(DeviceArray, u32, Option<usize>)>> {
    let Some(mut call) = DevCall::start(backend, stream)? else {
        return Ok(None);
    };
    if nbins == 0 {
        // The library's own check and message (it fails before any work).
        return backend.inner().histogram(&[], 0).map(|_| None).map_err(err);
    }
    let Some(input) = call.open(py, obj, name, &["<u4"])? else {
        return Ok(None);
    };
    call.order()?;
    let g = call.g;
    let n = input.len;
    let keys = copy_in::<u32>(g, &input, n)?;
    // As `Backend::histogram` on host keys: zeroed outputs, the kernel only for keys.
    let mut out = g.histogram_outputs(nbins).map_err(err)?;
    if n > 0 {
        g.histogram_device(
            &keys,
            n,
            nbins,
            detkit::histogram::HistogramStrategy::Auto,
            false,
            &mut out,
        )
        .map_err(err)?;
    }
    let oor = g.download(&out.out_of_range).map_err(err)?;
    let first = detkit_gpu::histogram::decode_first_index(oor[1]).map(|i| i as usize);
    let counts = DeviceArray::from_buffer(
        g,
        Box::new(out.counts),
        nbins as usize * 4,
        "<u4",
        vec![nbins as usize],
    );
    call.finish()?;
    Ok(Some((counts, oor[0], first)))
}

/// `Backend.select` of a CUDA `uint32` array, on the device: the values `lo <= v < hi` in
/// input order, as a `DeviceArray` (their count read back: 4 bytes); `None`: not such an
/// array.
#[pyfunction]
#[pyo3(signature = (backend, obj, name, lo, hi, stream = None))]
pub fn device_select(
    py: Python<'_>,
    backend: &Backend,
    obj: &Bound<'_, PyAny>,
    name: &str,
    lo: u32,
    hi: u32,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<DeviceArray>> {
    let Some(mut call) = DevCall::start(backend, stream)? else {
        return Ok(None);
    };
    let Some(input) = call.open(py, obj, name, &["<u4"])? else {
        return Ok(None);
    };
    call.order()?;
    let g = call.g;
    let n = input.len;
    let values = copy_in::<u32>(g, &input, n)?;
    let mut out = zeroed_output::<u32>(g, n).map_err(err)?;
    let mut count = g.zeros::<u32>(1).map_err(err)?;
    g.select_u32(
        &values,
        n,
        detkit::compact::Selection::Range { lo, hi },
        &mut out,
        &mut count,
    )
    .map_err(err)?;
    let kept = g.download(&count).map_err(err)?[0] as usize;
    let selected = DeviceArray::from_buffer(g, Box::new(out), kept * 4, "<u4", vec![kept]);
    call.finish()?;
    Ok(Some(selected))
}
