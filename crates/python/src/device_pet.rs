//! PET `sort` and `coincide` of singles already on the device (issue 27): a CUDA array of
//! `Single` records (16 bytes each: the `DeviceArray` that `convert` returns for device
//! frames, `uint8` rows `(n, 16)`, or a 1-D `uint8` array of `16 n` bytes) is read by the
//! library's device-view entry points ([`detkit::Backend::pet_sort_device`],
//! [`detkit::Backend::pet_coincide_device`]): copied device-to-device into the backend's
//! workspace, sorted or paired there, and the result returned as a new `DeviceArray` of
//! `uint8` rows (`get()` views them as the record dtype). Nothing crosses PCIe but status
//! words. Any other input returns `None`, and the Python layer takes the general path.

use detkit::pet::cpu::CoincideConfig;
use detkit::pet::SinglesView;
use pyo3::prelude::*;

use crate::device::{Arg, DeviceArray, DeviceInput};
use crate::device_ops::{exact, DevCall};
use crate::errors::err;
use crate::Backend;

const SINGLE: usize = std::mem::size_of::<detkit::pet::Single>();
const PAIR: usize = std::mem::size_of::<detkit::pet::Coincidence>();

/// A CUDA array of `Single` records: 1-D bytes (a whole number of records) or C-contiguous
/// byte rows of one record each.
fn records(arg: &Arg) -> Option<&DeviceInput> {
    if let Some(d) = exact(arg, &["|u1", "<u1"]) {
        return (d.desc.len() % SINGLE == 0).then_some(d);
    }
    match arg {
        Arg::Device(d)
            if d.desc.shape.len() == 2
                && d.desc.shape[1] == SINGLE
                && d.desc.contiguous()
                && matches!(d.desc.typestr.as_str(), "|u1" | "<u1") =>
        {
            Some(d)
        }
        _ => None,
    }
}

/// Opens `singles` as a view of `Single` records (`None`: not such an array).
fn open_singles(
    py: Python<'_>,
    call: &mut DevCall<'_>,
    singles: &Bound<'_, PyAny>,
) -> PyResult<Option<SinglesView<'static>>> {
    let Some(input) = call.open_with(py, singles, "singles", records)? else {
        return Ok(None);
    };
    call.order()?;
    // SAFETY: a C-contiguous CUDA array of `input.len` bytes (a whole number of 16-byte
    // records, `records`) on the backend's device (`open_arg` checked the device; the
    // context is the device's primary one), kept allocated until the call returns (`call`
    // holds a DLPack tensor, the caller the Python object) and ordered before the backend's
    // stream (`DevCall::order`). The view is used only inside the calling function, before
    // `call` is finished.
    Ok(Some(unsafe {
        SinglesView::from_raw(input.addr, input.len / SINGLE)
    }))
}

/// `Backend.sort` of CUDA singles: the sorted singles as a `DeviceArray` of `uint8` rows of
/// 16 bytes (`get()` views them as `descr`); `None`: not such an array.
#[pyfunction]
#[pyo3(signature = (backend, singles, descr, stream = None))]
pub fn device_pet_sort(
    py: Python<'_>,
    backend: &Backend,
    singles: &Bound<'_, PyAny>,
    descr: Py<PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<DeviceArray>> {
    let Some(mut call) = DevCall::start(backend, stream)? else {
        return Ok(None);
    };
    let Some(view) = open_singles(py, &mut call, singles)? else {
        return Ok(None);
    };
    let g = call.g;
    let b = backend.inner();
    let sorted = py.detach(|| b.pet_sort_device(view)).map_err(err)?;
    let m = sorted.len;
    let out = DeviceArray::from_buffer(
        g,
        Box::new(sorted.singles),
        SINGLE * m,
        "|u1",
        vec![m, SINGLE],
    )
    .with_descr(descr);
    call.finish()?;
    Ok(Some(out))
}

/// `Backend.coincide` of CUDA singles sorted by time: the pairs as a `DeviceArray` of
/// `uint8` rows of 32 bytes (`get()` views them as `descr`); `None`: not such an array.
#[pyfunction]
#[pyo3(signature = (backend, singles, window, delay, policy, descr, stream = None))]
#[allow(clippy::too_many_arguments)]
pub fn device_pet_coincide(
    py: Python<'_>,
    backend: &Backend,
    singles: &Bound<'_, PyAny>,
    window: f64,
    delay: Option<f64>,
    policy: &str,
    descr: Py<PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<DeviceArray>> {
    let Some(mut call) = DevCall::start(backend, stream)? else {
        return Ok(None);
    };
    let c = CoincideConfig {
        window,
        delay,
        policy: detkit::pet::policy_from_name(policy).map_err(err)?,
    };
    let Some(view) = open_singles(py, &mut call, singles)? else {
        return Ok(None);
    };
    let g = call.g;
    let b = backend.inner();
    let pairs = py.detach(|| b.pet_coincide_device(view, &c)).map_err(err)?;
    let m = pairs.len;
    let out = DeviceArray::from_buffer(g, Box::new(pairs.pairs), PAIR * m, "|u1", vec![m, PAIR])
        .with_descr(descr);
    call.finish()?;
    Ok(Some(out))
}
