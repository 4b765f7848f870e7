//! The algorithm calls that stay on the device from Python: clustering (and seeding) of CUDA
//! arrays through the library's device-view entry points
//! ([`detkit::Backend::cluster_events_device`]): the producer's memory is read in place (by
//! the clustering kernels themselves, one graph launch per call), and the results are new
//! device buffers returned as `DeviceArray`s. Nothing crosses PCIe but the event offsets and three
//! status words. Any input that is not a 1-D C-contiguous CUDA array of the exact dtype
//! returns `None`, and the Python layer takes the general (staged) path, which converts and
//! checks it.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use detkit::clustering::{DigisDev, Geometry, OffsetsDev};
use detkit::pet::FramesDev;
use detkit::seeding::SpacePointsDev;
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::device::{DeviceArray, Hold};
use crate::device_ops::DevCall;
use crate::errors::{err, InvalidInputError};
use crate::scanner::Scanner;
use crate::settings::Settings;
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
    charge_cut: Option<Bound<'_, PyAny>>,
    event_offsets: Option<Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<(DeviceArray, DeviceArray)>> {
    let Some(mut call) = DevCall::start(backend, stream)? else {
        return Ok(None);
    };
    let geo = Geometry::by_name(geometry).map_err(err)?;
    let cut = crate::args::charge_cut(charge_cut.as_ref(), geo.default_cut)?;
    let mut addr = [0u64; 4];
    let mut lens = [0usize; 4];
    for (i, (obj, name)) in [(module, "module"), (x, "x"), (y, "y"), (adc, "adc")]
        .into_iter()
        .enumerate()
    {
        let Some(input) = call.open(py, obj, name, &["<u2"])? else {
            return Ok(None);
        };
        addr[i] = input.addr;
        lens[i] = input.len;
    }
    // The event offsets: a numpy `uint32` array (the Python layer's conversion), or a CUDA
    // `uint32` array opened with the digis (one ordering for all five), read on the device.
    let host_offsets = match &event_offsets {
        Some(o) => match o.extract::<PyReadonlyArray1<'_, u32>>() {
            Ok(a) => Some(a),
            Err(_) => {
                let Some(input) = call.open(py, o, "event_offsets", &["<u4"])? else {
                    return Ok(None);
                };
                call.order()?;
                return run_cluster(
                    py,
                    backend,
                    call,
                    addr,
                    lens,
                    Offs::Device(&input),
                    geo,
                    cut,
                );
            }
        },
        None => None,
    };
    call.order()?;
    let whole = [0, lens[0] as u32];
    let offsets = match &host_offsets {
        Some(o) => o.as_slice()?,
        None => &whole[..],
    };
    run_cluster(py, backend, call, addr, lens, Offs::Host(offsets), geo, cut)
}

/// The event offsets of [`run_cluster`]: host words, or an opened CUDA `uint32` array (read
/// on the device by the library's graph).
enum Offs<'a> {
    Host(&'a [u32]),
    Device(&'a crate::device_ops::Input),
}

/// The rest of [`device_cluster`] once the inputs are opened and ordered.
#[allow(clippy::too_many_arguments)]
fn run_cluster(
    py: Python<'_>,
    backend: &Backend,
    call: DevCall<'_>,
    addr: [u64; 4],
    lens: [usize; 4],
    offsets: Offs<'_>,
    geo: Geometry,
    cut: Option<detkit::clustering::ChargeCut>,
) -> PyResult<Option<(DeviceArray, DeviceArray)>> {
    let g = call.g;
    // SAFETY: each address is a CUDA array on the backend's device (`open_arg` checked the
    // device; the context is the device's primary one, shared with the producer), 1-D,
    // C-contiguous, of `lens[i]` `uint16` values (`DevCall::open` checked dtype, shape and
    // strides). The memory stays allocated until the call below returns: `call` (finished
    // after it) holds each DLPack tensor, and the caller holds the Python objects for the
    // duration of this function. The producer's pending writes are ordered before the
    // backend's stream (`DevCall::order`), which the call orders its copies after; writes
    // the caller issues on another stream while the call runs are the caller's race, as for
    // numpy inputs.
    let view = unsafe { DigisDev::from_raw(addr, lens) };
    let r = match offsets {
        Offs::Host(o) => py.detach(|| backend.inner().cluster_events_device(view, o, &geo, cut)),
        Offs::Device(input) => {
            // SAFETY: as for the digis above: a CUDA `uint32` array of `input.len` values
            // (`DevCall::open` checked it), held by `call` or the caller, ordered.
            let o = unsafe { OffsetsDev::from_raw(input.addr, input.len) };
            py.detach(|| {
                backend
                    .inner()
                    .cluster_events_device_offsets(view, o, &geo, cut)
            })
        }
    };
    crate::device_prof::step("library call");
    let c = r.map_err(err)?;
    let (n, slots) = (c.digis, c.slots);
    let clus = DeviceArray::from_buffer(g, Box::new(c.clus), n * 4, "<i4", vec![n]);
    let per_module =
        DeviceArray::from_buffer(g, Box::new(c.clus_in_module), slots * 4, "<u4", vec![slots]);
    crate::device_prof::step("results as DeviceArrays");
    call.finish()?;
    Ok(Some((clus, per_module)))
}

/// The views of seeding records `first..first + n` of a batch's device buffers, no copy: the
/// index rows, weights and z vertices strided views of the `Seed` records (20 bytes: bottom,
/// middle, top, weight, z_vertex), the parameters a contiguous stretch of the `BoundParams`
/// records. The buffers live as long as any view of them.
fn seed_views(
    g: &detkit::GpuContext,
    seeds: &Arc<dyn Hold>,
    params: &Arc<dyn Hold>,
    first: usize,
    n: usize,
) -> (DeviceArray, DeviceArray, DeviceArray, DeviceArray) {
    const REC: usize = std::mem::size_of::<detkit_gpu::seeding::Seed>();
    const PAR: usize = std::mem::size_of::<detkit_gpu::seeding::BoundParams>();
    let part = |base: &Arc<dyn Hold>, offset: usize, nbytes: usize, typestr: &str, shape| {
        DeviceArray::from_buffer(
            g,
            Box::new(Part {
                base: base.clone(),
                offset,
            }),
            nbytes,
            typestr,
            shape,
        )
    };
    // Bytes from the first element of a strided view to the end of its last one.
    let span = |tail: usize| if n == 0 { 0 } else { (n - 1) * REC + tail };
    let (a, rec) = (REC * first, REC as isize);
    (
        part(seeds, a, span(12), "<u4", vec![n, 3]).with_strides(vec![rec, 4]),
        part(seeds, a + 12, span(4), "<f4", vec![n]).with_strides(vec![rec]),
        part(seeds, a + 16, span(4), "<f4", vec![n]).with_strides(vec![rec]),
        part(params, PAR * first, PAR * n, "<f4", vec![n, 5]),
    )
}

/// A stretch of another device buffer (one event's seeds in the batch's arrays): the buffer
/// stays alive as long as any stretch of it.
struct Part {
    base: Arc<dyn Hold>,
    offset: usize,
}

impl Hold for Part {
    fn address(&self, stream: &Arc<CudaStream>) -> usize {
        self.base.address(stream) + self.offset
    }
}

/// One event's seeding results on the device: seeds `(n, 3)` `uint32`, weight and z_vertex
/// `(n,)` `float32` (these three strided views of the batch's 20-byte seed records), params
/// `(n, 5)` `float32` (contiguous).
type SeedDev = (DeviceArray, DeviceArray, DeviceArray, DeviceArray);

/// `Backend.seed` / `Backend.seed_events` of CUDA `float32` columns: `events` is a list of
/// five-entry lists (x, y, z, var_r, var_z; a variance `None` is zero). One
/// `(seeds, weight, z_vertex, params)` of `DeviceArray`s per event; `None`: not all such
/// arrays. `batch`: the Python layer's `seed_events` (length errors name the event).
#[pyfunction]
#[pyo3(signature = (backend, events, settings, batch, stream = None))]
pub fn device_seed_events(
    py: Python<'_>,
    backend: &Backend,
    events: Vec<Vec<Option<Bound<'_, PyAny>>>>,
    settings: Settings,
    batch: bool,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Vec<SeedDev>>> {
    let Some(mut call) = DevCall::start(backend, stream)? else {
        return Ok(None);
    };
    const NAMES: [&str; 5] = ["x", "y", "z", "var_r", "var_z"];
    // Every column opened (each holds its producer's memory for the call, see
    // `device_cluster`); the addresses and lengths of each event, `None` for a zero variance.
    let mut cols: Vec<[Option<(u64, usize)>; 5]> = Vec::with_capacity(events.len());
    for (e, ev) in events.iter().enumerate() {
        if ev.len() != 5 || ev[0].is_none() || ev[1].is_none() || ev[2].is_none() {
            return Ok(None);
        }
        let mut c = [None; 5];
        for (i, obj) in ev.iter().enumerate() {
            let Some(obj) = obj else { continue };
            let Some(input) = call.open(py, obj, NAMES[i], &["<f4"])? else {
                return Ok(None);
            };
            c[i] = Some((input.addr, input.len));
        }
        // The Python layer's length check and message.
        let n = c[0].map_or(0, |(_, l)| l);
        for i in 1..5 {
            if let Some((_, l)) = c[i] {
                if l != n {
                    let m = format!("{} has {l} values, x has {n}", NAMES[i]);
                    return Err(InvalidInputError::new_err(if batch {
                        format!("event {e}: {m}")
                    } else {
                        m
                    }));
                }
            }
        }
        cols.push(c);
    }
    call.order()?;
    let g = call.g;
    // A zero column for the variances not given.
    let longest = cols
        .iter()
        .map(|c| c[0].map_or(0, |(_, l)| l))
        .max()
        .unwrap_or(0);
    let zeros = if cols.iter().any(|c| c[3].is_none() || c[4].is_none()) {
        Some(g.zeros::<f32>(longest.max(1)).map_err(err)?)
    } else {
        None
    };
    let zero_addr = zeros.as_ref().map_or(0, |z| g.ptr(z).addr());
    let views: Vec<SpacePointsDev> = cols
        .iter()
        .map(|c| {
            let n = c[0].map_or(0, |(_, l)| l);
            let addr = c.map(|x| x.map_or(zero_addr, |(a, _)| a));
            // SAFETY: each address is a 1-D C-contiguous CUDA `float32` array of `n` values
            // on the backend's device (checked by `open_arg` and `exact`; lengths checked
            // above) or the zero column of `longest >= n` values; all stay allocated until
            // the call returns (`call` and `zeros` are dropped after it; the caller holds
            // the Python objects); the producers' pending writes are ordered before the
            // backend's stream (`DevCall::order`).
            unsafe { SpacePointsDev::from_raw(addr, [n; 5]) }
        })
        .collect();
    let r = py.detach(|| backend.inner().seed_events_device(&views, &settings.0));
    crate::device_prof::step("library call");
    drop(zeros);
    let s = r.map_err(err)?;
    // Each event's arrays are views of its stretch of the batch's records, no copy.
    let seeds: Arc<dyn Hold> = Arc::new(s.seeds);
    let params: Arc<dyn Hold> = Arc::new(s.params);
    let out = s
        .event_seeds
        .iter()
        .map(|r| seed_views(g, &seeds, &params, r.start, r.len()))
        .collect();
    crate::device_prof::step("results as DeviceArrays");
    call.finish()?;
    Ok(Some(out))
}

/// `Backend.convert` of raw frames in a CUDA `uint8` array (16 bytes a frame): the accepted
/// singles as a `DeviceArray` of `uint8` rows of 16 bytes (`get()` views them as
/// `descr`, the `SINGLE_DTYPE`), and the statistics; `None`: not such an array.
#[pyfunction]
#[pyo3(signature = (backend, frames, scanner, descr, stream = None))]
pub fn device_pet_convert<'py>(
    py: Python<'py>,
    backend: &Backend,
    frames: &Bound<'py, PyAny>,
    scanner: &Bound<'py, PyAny>,
    descr: Py<PyAny>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyResult<Option<(DeviceArray, Bound<'py, PyDict>)>> {
    let Some(mut call) = DevCall::start(backend, stream)? else {
        return Ok(None);
    };
    let Some(input) = call.open(py, frames, "frames", &["|u1", "<u1"])? else {
        return Ok(None);
    };
    let owned;
    let s = match scanner.cast::<Scanner>() {
        Ok(s) => s.get(),
        Err(_) => {
            let path: std::path::PathBuf = scanner.extract()?;
            owned = Scanner::new(py, path)?;
            &owned
        }
    };
    call.order()?;
    let g = call.g;
    // SAFETY: a 1-D C-contiguous CUDA `uint8` array of `len` bytes on the backend's device
    // (`DevCall::open`), kept allocated until the call returns (`call` holds a DLPack
    // tensor, the caller the Python object) and ordered before the backend's stream.
    let view = unsafe { FramesDev::from_raw(input.addr, input.len) };
    let b = backend.inner();
    let r = py.detach(|| match s.handle(b)? {
        Some(h) => b.pet_convert_frames_device(view, &*h),
        None => b.pet_convert_frames_device(view, &s.inner),
    });
    let (singles, st) = r.map_err(err)?;
    let m = singles.len;
    let out = DeviceArray::from_buffer(g, Box::new(singles.singles), 16 * m, "|u1", vec![m, 16])
        .with_descr(descr);
    let d = PyDict::new(py);
    d.set_item("frames", st.frames)?;
    d.set_item("accepted", st.accepted)?;
    d.set_item("rejected_energy", st.rejected_energy)?;
    d.set_item("clamped", st.clamped)?;
    d.set_item("bad_address", st.bad_address)?;
    d.set_item("first_bad_address", st.first_bad_address)?;
    call.finish()?;
    Ok(Some((out, d)))
}

/// `Backend.seed_flat` of five CUDA `float32` columns holding every event's spacepoints
/// back to back (x, y, z, var_r, var_z; a variance `None` is zero) and the host event
/// offsets `[0, …, n]`: the batch's results as flat `DeviceArray`s, `(seeds (N, 3), weight,
/// z_vertex, params (N, 5))`, and the `int64` offsets of each event's rows (numpy), as
/// `seed_events_flat` returns them. Five arrays opened per call instead of five per event.
/// `None`: not all such arrays (the Python layer splits the columns into events instead).
#[pyfunction]
#[pyo3(signature = (backend, columns, event_offsets, settings, stream = None))]
#[allow(clippy::type_complexity)]
pub fn device_seed_flat<'py>(
    py: Python<'py>,
    backend: &Backend,
    columns: Vec<Option<Bound<'py, PyAny>>>,
    event_offsets: PyReadonlyArray1<'py, i64>,
    settings: Settings,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyResult<
    Option<(
        DeviceArray,
        DeviceArray,
        DeviceArray,
        DeviceArray,
        Bound<'py, numpy::PyArray1<i64>>,
    )>,
> {
    use numpy::IntoPyArray;
    const NAMES: [&str; 5] = ["x", "y", "z", "var_r", "var_z"];
    if columns.len() != 5 || columns[..3].iter().any(|c| c.is_none()) {
        return Ok(None);
    }
    let Some(mut call) = DevCall::start(backend, stream)? else {
        return Ok(None);
    };
    let mut cols: [Option<(u64, usize)>; 5] = [None; 5];
    for (i, obj) in columns.iter().enumerate() {
        let Some(obj) = obj else { continue };
        let Some(input) = call.open(py, obj, NAMES[i], &["<f4"])? else {
            return Ok(None);
        };
        cols[i] = Some((input.addr, input.len));
    }
    let n = cols[0].map_or(0, |(_, l)| l);
    for i in 1..5 {
        if let Some((_, l)) = cols[i] {
            if l != n {
                return Err(InvalidInputError::new_err(format!(
                    "{} has {l} values, x has {n}",
                    NAMES[i]
                )));
            }
        }
    }
    let offs = event_offsets.as_slice()?;
    let bad = |m: String| Err(InvalidInputError::new_err(format!("event_offsets: {m}")));
    match (offs.first(), offs.last()) {
        (Some(&0), Some(&last)) if last == n as i64 => {}
        _ => {
            return bad(format!(
                "expected [0, ..., {n}] (the spacepoint count), got {} entries from {:?} to {:?}",
                offs.len(),
                offs.first(),
                offs.last()
            ))
        }
    }
    if let Some(k) = offs.windows(2).position(|w| w[1] < w[0]) {
        return bad(format!(
            "decreasing at entry {}: {} after {}",
            k + 1,
            offs[k + 1],
            offs[k]
        ));
    }
    call.order()?;
    let g = call.g;
    let zeros = if cols[3].is_none() || cols[4].is_none() {
        Some(g.zeros::<f32>(n.max(1)).map_err(err)?)
    } else {
        None
    };
    let zero_addr = zeros.as_ref().map_or(0, |z| g.ptr(z).addr());
    let base = cols.map(|c| c.map_or(zero_addr, |(a, _)| a));
    let views: Vec<SpacePointsDev> = offs
        .windows(2)
        .map(|w| {
            let (lo, len) = (w[0] as usize, (w[1] - w[0]) as usize);
            // SAFETY: each column is a 1-D C-contiguous CUDA `float32` array of `n` values on
            // the backend's device (`DevCall::open`; lengths checked above) or the zero
            // column of `n` values; `lo + len <= n` (offsets checked: from 0 to `n`,
            // non-decreasing), so the event's stretch lies inside each column. All stay
            // allocated until the call returns (`call` and `zeros` are dropped after it; the
            // caller holds the Python objects); the producers' pending writes are ordered
            // before the backend's stream (`DevCall::order`).
            unsafe { SpacePointsDev::from_raw(base.map(|a| a + 4 * lo as u64), [len; 5]) }
        })
        .collect();
    let r = py.detach(|| backend.inner().seed_events_device(&views, &settings.0));
    crate::device_prof::step("library call");
    drop(zeros);
    let s = r.map_err(err)?;
    let total = s.total();
    let mut out_offs = Vec::with_capacity(s.event_seeds.len() + 1);
    out_offs.push(0i64);
    out_offs.extend(s.event_seeds.iter().map(|r| r.end as i64));
    let seeds: Arc<dyn Hold> = Arc::new(s.seeds);
    let params: Arc<dyn Hold> = Arc::new(s.params);
    let (idx, weight, zv, par) = seed_views(g, &seeds, &params, 0, total);
    let out = (idx, weight, zv, par, out_offs.into_pyarray(py));
    crate::device_prof::step("results as DeviceArrays");
    call.finish()?;
    Ok(Some(out))
}
