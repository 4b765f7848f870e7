//! The algorithm calls that stay on the device from Python: clustering (and seeding) of CUDA
//! arrays through the library's device-view entry points
//! ([`detkit::Backend::cluster_events_device`]): the producer's memory is read in place by
//! a device-to-device copy into the backend's workspace, and the results are new device
//! buffers returned as `DeviceArray`s. Nothing crosses PCIe but the event offsets and three
//! status words. Any input that is not a 1-D C-contiguous CUDA array of the exact dtype
//! returns `None`, and the Python layer takes the general (staged) path, which converts and
//! checks it.

use detkit::clustering::{DigisDev, Geometry};
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use crate::device::{open_arg, stream_handle, Arg, DeviceArray};
use crate::device_ops::{exact, finish};
use crate::errors::err;
use crate::Backend;

/// `Backend.cluster` of four CUDA `uint16` arrays (module, x, y, adc): `(clus,
/// clus_in_module)` as `DeviceArray`s (`int32`, `uint32`); `None`: not such arrays.
#[pyfunction]
#[pyo3(signature = (backend, module, x, y, adc, geometry, charge_cut, event_offsets, stream = None))]
#[allow(clippy::too_many_arguments)]
pub fn device_cluster(
    py: Python<'_>,
    backend: &Backend,
    module: &Bound<'_, PyAny>,
    x: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    adc: &Bound<'_, PyAny>,
    geometry: &str,
    charge_cut: Option<i64>,
    event_offsets: Option<PyReadonlyArray1<'_, u32>>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<(DeviceArray, DeviceArray)>> {
    let Some(g) = backend.inner().gpu() else {
        return Ok(None);
    };
    let geo = Geometry::by_name(geometry).map_err(err)?;
    let cut = crate::cut_of(&geo, charge_cut)?;
    let user = stream_handle(stream)?;
    // Each argument opened holds its producer's memory (a DLPack capsule's tensor until the
    // argument is dropped; a CUDA-array-interface object through the Python reference the
    // caller holds for this call) and orders the backend's stream after the producer's.
    let args: Vec<Arg> = [(module, "module"), (x, "x"), (y, "y"), (adc, "adc")]
        .into_iter()
        .map(|(obj, name)| open_arg(py, backend, obj, name, user))
        .collect::<PyResult<_>>()?;
    let mut addr = [0u64; 4];
    let mut lens = [0usize; 4];
    for (i, arg) in args.iter().enumerate() {
        let Some(input) = exact(arg, &["<u2"]) else {
            return Ok(None);
        };
        addr[i] = input.desc.ptr as u64;
        lens[i] = input.desc.len();
    }
    let whole = [0, lens[0] as u32];
    let offsets = match &event_offsets {
        Some(o) => o.as_slice()?,
        None => &whole[..],
    };
    // SAFETY: each address is a CUDA array on the backend's device (`open_arg` checked the
    // device; the context is the device's primary one, shared with the producer), 1-D,
    // C-contiguous, of `lens[i]` `uint16` values (`exact` checked dtype, shape and
    // strides). The memory stays allocated until the call below returns: `args` (dropped
    // after it) holds each DLPack tensor, and the caller holds the Python objects for the
    // duration of this function. The producer's pending writes are ordered before the
    // backend's stream (`open_arg`), which the call orders its copies after; writes the
    // caller issues on another stream while the call runs are the caller's race, as for
    // numpy inputs.
    let view = unsafe { DigisDev::from_raw(addr, lens) };
    let r = py.detach(|| {
        backend
            .inner()
            .cluster_events_device(view, offsets, &geo, cut)
    });
    drop(args);
    let c = r.map_err(err)?;
    let (n, slots) = (c.digis, c.slots);
    let clus = DeviceArray::from_buffer(g, Box::new(c.clus), n * 4, "<i4", vec![n]);
    let per_module =
        DeviceArray::from_buffer(g, Box::new(c.clus_in_module), slots * 4, "<u4", vec![slots]);
    finish(g, user)?;
    Ok(Some((clus, per_module)))
}
