//! Calls that stay on the device from Python end to end: a CUDA array of the exact dtype
//! (contiguous, 1-D, on the backend's device) is copied device-to-device into a buffer of
//! detkit's, the library's device-level launcher runs on it, and its output buffer becomes
//! the `DeviceArray` returned: no host copy. Today: `scan`, `radix_sort` of keys, `argsort`,
//! `histogram` and `select`, over the library's `scan_device`, `sort_keys_device`,
//! `sort_index_device`, `histogram_device` and `select_u32`.
//! Any other input (another dtype, strided, a CPU array) returns `None`, and the Python layer
//! takes the general path (`device::import_array`), which converts and checks it.

use cudarc::driver::{result, sys, CudaSlice, DevicePtrMut, DeviceRepr, ValidAsZeroBits};
use detkit::sort::{SortKey, SortOptions};
use detkit::ScanKind;
use pyo3::prelude::*;

use crate::device::{open_arg, stream_handle, Arg, DeviceArray, DeviceInput};
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

/// A copy of the input's `n` elements in a new buffer of detkit's (on its stream, after the
/// producer's work), finished before this returns, so that the producer may free its memory
/// as soon as the call returns.
fn copy_in<T: DeviceRepr + ValidAsZeroBits>(
    g: &detkit::GpuContext,
    input: &DeviceInput,
    n: usize,
) -> PyResult<CudaSlice<T>> {
    let mut buf = g.zeros::<T>(n.max(1)).map_err(err)?;
    if n == 0 {
        return Ok(buf);
    }
    let stream = g.stream();
    {
        let (dst, _sync) = buf.device_ptr_mut(stream);
        // SAFETY: `dst` is a fresh allocation of `n` values of `T`; the source is the
        // producer's array of `n` values of the same type (dtype checked), alive until this
        // function has waited for the copy below.
        unsafe {
            result::memcpy_dtod_async(
                dst,
                input.desc.ptr as sys::CUdeviceptr,
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
    input: &DeviceInput,
    kind: ScanKind,
) -> PyResult<DeviceArray> {
    let n = input.desc.len();
    let size = std::mem::size_of::<T>();
    let src = copy_in::<T>(g, input, n)?;
    let mut out = g.zeros::<T>(n.max(1)).map_err(err)?;
    g.scan_device(&src, &mut out, n, kind).map_err(err)?;
    Ok(DeviceArray::from_buffer(
        g,
        Box::new(out),
        n * size,
        &input.desc.typestr,
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
    let Some(g) = backend.inner().gpu() else {
        return Ok(None);
    };
    let user = stream_handle(stream)?;
    let arg = open_arg(py, backend, obj, name, user)?;
    let Some(input) = exact(&arg, &["<u4", "<u8"]) else {
        return Ok(None);
    };
    let kind = if inclusive {
        ScanKind::Inclusive
    } else {
        ScanKind::Exclusive
    };
    let out = if input.desc.typestr == "<u4" {
        scan_typed::<u32>(g, input, kind)?
    } else {
        scan_typed::<u64>(g, input, kind)?
    };
    finish(g, user)?;
    Ok(Some(out))
}

fn sort_typed<K: SortKey + ValidAsZeroBits + Send + Sync + 'static>(
    g: &detkit::GpuContext,
    input: &DeviceInput,
    opts: SortOptions,
    argsort: bool,
) -> PyResult<(DeviceArray, Option<DeviceArray>)> {
    let n = input.desc.len();
    let size = std::mem::size_of::<K>();
    let keys = copy_in::<K>(g, input, n)?;
    let mut out = g.zeros::<K>(n.max(1)).map_err(err)?;
    let typestr = &input.desc.typestr;
    if argsort {
        let mut index = g.zeros::<u32>(n.max(1)).map_err(err)?;
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
    let Some(g) = backend.inner().gpu() else {
        return Ok(None);
    };
    let user = stream_handle(stream)?;
    let arg = open_arg(py, backend, obj, name, user)?;
    let Some(input) = exact(&arg, &["<u4", "<u8"]) else {
        return Ok(None);
    };
    let opts = SortOptions {
        begin_bit,
        end_bit,
        descending,
    };
    let out = if input.desc.typestr == "<u4" {
        sort_typed::<u32>(g, input, opts, argsort)?
    } else {
        sort_typed::<u64>(g, input, opts, argsort)?
    };
    finish(g, user)?;
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
    let Some(g) = backend.inner().gpu() else {
        return Ok(None);
    };
    if nbins == 0 {
        // The library's own check and message (it fails before any work).
        return backend.inner().histogram(&[], 0).map(|_| None).map_err(err);
    }
    let user = stream_handle(stream)?;
    let arg = open_arg(py, backend, obj, name, user)?;
    let Some(input) = exact(&arg, &["<u4"]) else {
        return Ok(None);
    };
    let n = input.desc.len();
    let keys = copy_in::<u32>(g, input, n)?;
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
    finish(g, user)?;
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
    let Some(g) = backend.inner().gpu() else {
        return Ok(None);
    };
    let user = stream_handle(stream)?;
    let arg = open_arg(py, backend, obj, name, user)?;
    let Some(input) = exact(&arg, &["<u4"]) else {
        return Ok(None);
    };
    let n = input.desc.len();
    let values = copy_in::<u32>(g, input, n)?;
    let mut out = g.zeros::<u32>(n.max(1)).map_err(err)?;
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
    finish(g, user)?;
    Ok(Some(selected))
}
