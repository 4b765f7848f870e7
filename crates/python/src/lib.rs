//! `detkit._detkit`: the Python extension behind the `detkit` package (PyO3 + numpy).
//!
//! The Python package (`python/detkit/__init__.py`) normalises arguments (dtype, contiguity,
//! structured dtypes of the PET records) and calls these functions, which take contiguous
//! numpy arrays without copying them, release the GIL around every kernel or oracle call, and
//! turn the library's typed errors into Python exceptions with the same messages:
//! `InvalidInputError` (a `ValueError`) for bad input, `CapacityError` (a `ValueError`) for a
//! fixed capacity the input exceeds, `CudaError` (a `RuntimeError`) for the driver,
//! `MemoryError` for a size that needs more memory than there is (checked before allocating).

mod args;
mod files;

use std::path::PathBuf;

use detkit::clustering::{Digis, Geometry};
use detkit::pet::cpu::CoincideConfig;
use detkit::pet::{Coincidence, DataFrameV2, Scanner, Single};
use detkit::seeding::{SeedingConfig, SeedingOutput, SeedingSettings, SpacePoint};
use detkit::sort::SortOptions;
use detkit::{Backend as Inner, BackendKind, ScanKind};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1};
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(
    _detkit,
    InvalidInputError,
    PyValueError,
    "The input breaks a documented precondition (the message names the element)."
);
create_exception!(
    _detkit,
    CapacityError,
    PyValueError,
    "The input exceeds a fixed capacity (the message gives what is needed and what there is)."
);
create_exception!(
    _detkit,
    CudaError,
    PyRuntimeError,
    "The CUDA driver failed, or CUDA was asked for and is not available."
);

fn err(e: detkit::Error) -> PyErr {
    use detkit::Error as E;
    let msg = e.to_string();
    match e {
        E::Driver { .. } | E::NoCuda(_) | E::MissingKernel(_) => CudaError::new_err(msg),
        E::CapacityExceeded { .. } => CapacityError::new_err(msg),
        E::OutOfMemory { .. } => pyo3::exceptions::PyMemoryError::new_err(msg),
        _ => InvalidInputError::new_err(msg),
    }
}

/// The backend every call runs on: CUDA or the CPU references, with the same results.
#[pyclass(module = "detkit._detkit", frozen)]
struct Backend {
    inner: Inner,
}

#[pymethods]
impl Backend {
    /// `kind`: "auto" (CUDA when a driver and a device are present, else the CPU), "cpu" or
    /// "cuda"; `device`: the CUDA device ordinal.
    #[new]
    #[pyo3(signature = (kind = "auto", device = 0))]
    fn new(kind: &str, device: usize) -> PyResult<Self> {
        let inner = match kind {
            "auto" if device == 0 => Inner::auto(),
            "auto" => Inner::cuda(device).unwrap_or_else(|_| Inner::cpu()),
            "cpu" => Inner::cpu(),
            "cuda" => Inner::cuda(device).map_err(err)?,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown backend kind `{other}` (auto, cpu or cuda)"
                )))
            }
        };
        Ok(Self { inner })
    }

    /// "cpu" or "cuda".
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner.kind() {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        }
    }

    /// Which backend runs and why.
    #[getter]
    fn description(&self) -> String {
        self.inner.description().to_string()
    }

    fn __repr__(&self) -> String {
        format!("Backend({:?})", self.kind())
    }

    fn scan_u32<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, u32>,
        inclusive: bool,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let v = values.as_slice()?;
        let kind = scan_kind(inclusive);
        let out = py.detach(|| self.inner.scan_u32(v, kind)).map_err(err)?;
        Ok(out.into_pyarray(py))
    }

    fn scan_u64<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, u64>,
        inclusive: bool,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let v = values.as_slice()?;
        let kind = scan_kind(inclusive);
        let out = py.detach(|| self.inner.scan_u64(v, kind)).map_err(err)?;
        Ok(out.into_pyarray(py))
    }

    /// Radix sort of `u32` keys; with `values_raw` (`itemsize` bytes per key: 4, 8, 12 or 16)
    /// the values follow their keys. Returns the sorted keys and the sorted raw values.
    #[pyo3(signature = (keys, values_raw, itemsize, begin_bit, end_bit, descending))]
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn radix_sort_u32<'py>(
        &self,
        py: Python<'py>,
        keys: PyReadonlyArray1<'py, u32>,
        values_raw: Option<PyReadonlyArray1<'py, u8>>,
        itemsize: usize,
        begin_bit: u32,
        end_bit: Option<u32>,
        descending: bool,
    ) -> PyResult<(Bound<'py, PyArray1<u32>>, Option<Bound<'py, PyArray1<u8>>>)> {
        let opts = SortOptions {
            begin_bit,
            end_bit,
            descending,
        };
        radix_sort(&self.inner, py, keys, values_raw, itemsize, opts)
    }

    /// As `radix_sort_u32` for `u64` keys.
    #[pyo3(signature = (keys, values_raw, itemsize, begin_bit, end_bit, descending))]
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn radix_sort_u64<'py>(
        &self,
        py: Python<'py>,
        keys: PyReadonlyArray1<'py, u64>,
        values_raw: Option<PyReadonlyArray1<'py, u8>>,
        itemsize: usize,
        begin_bit: u32,
        end_bit: Option<u32>,
        descending: bool,
    ) -> PyResult<(Bound<'py, PyArray1<u64>>, Option<Bound<'py, PyArray1<u8>>>)> {
        let opts = SortOptions {
            begin_bit,
            end_bit,
            descending,
        };
        radix_sort(&self.inner, py, keys, values_raw, itemsize, opts)
    }

    fn select_in_range<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, u32>,
        lo: u32,
        hi: u32,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let v = values.as_slice()?;
        let out = py
            .detach(|| self.inner.select_in_range_u32(v, lo, hi))
            .map_err(err)?;
        Ok(out.into_pyarray(py))
    }

    /// Returns `(counts, out_of_range, first_out_of_range or None)`.
    #[allow(clippy::type_complexity)]
    fn histogram<'py>(
        &self,
        py: Python<'py>,
        keys: PyReadonlyArray1<'py, u32>,
        nbins: u32,
    ) -> PyResult<(Bound<'py, PyArray1<u32>>, u32, Option<usize>)> {
        let k = keys.as_slice()?;
        args::check_bins(nbins).map_err(err)?;
        let h = py.detach(|| self.inner.histogram(k, nbins)).map_err(err)?;
        Ok((
            h.counts.into_pyarray(py),
            h.out_of_range,
            h.first_out_of_range,
        ))
    }

    /// Returns `(clus, clus_in_module)`: the cluster of every digi (-1: invalid, duplicate or
    /// cut) and the number of clusters of every (event, module).
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    #[pyo3(signature = (module, x, y, adc, geometry, charge_cut, event_offsets))]
    fn cluster<'py>(
        &self,
        py: Python<'py>,
        module: PyReadonlyArray1<'py, u16>,
        x: PyReadonlyArray1<'py, u16>,
        y: PyReadonlyArray1<'py, u16>,
        adc: PyReadonlyArray1<'py, u16>,
        geometry: &str,
        charge_cut: Option<Bound<'py, PyAny>>,
        event_offsets: Option<PyReadonlyArray1<'py, u32>>,
    ) -> PyResult<(Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<u32>>)> {
        let g = Geometry::by_name(geometry).map_err(err)?;
        // A cut given: one threshold for every module; None: the geometry's CMS defaults;
        // False: no cut (args::charge_cut).
        let cut = args::charge_cut(charge_cut.as_ref(), g.default_cut)?;
        let digis = Digis {
            module: module.as_slice()?.to_vec(),
            x: x.as_slice()?.to_vec(),
            y: y.as_slice()?.to_vec(),
            adc: adc.as_slice()?.to_vec(),
        };
        let offsets: Vec<u32> = match &event_offsets {
            Some(o) => o.as_slice()?.to_vec(),
            None => vec![0, digis.len() as u32],
        };
        let c = py
            .detach(|| self.inner.cluster_events(&digis, &offsets, &g, cut))
            .map_err(err)?;
        Ok((c.clus.into_pyarray(py), c.clus_in_module.into_pyarray(py)))
    }

    /// Raw 16-byte frames (a `uint8` array) to singles (16-byte records, as `uint8`) and the
    /// conversion statistics.
    fn pet_convert<'py>(
        &self,
        py: Python<'py>,
        frames: PyReadonlyArray1<'py, u8>,
        scanner: PathBuf,
    ) -> PyResult<(Bound<'py, PyArray1<u8>>, Bound<'py, PyDict>)> {
        let bytes = frames.as_slice()?;
        let frames = detkit::pet::frames_from_bytes(bytes).map_err(err)?;
        let (singles, st) = py
            .detach(|| -> detkit::Result<_> {
                let s = Scanner::from_toml_file(&scanner)?;
                self.inner.pet_convert(&frames, &s)
            })
            .map_err(err)?;
        let d = PyDict::new(py);
        d.set_item("frames", st.frames)?;
        d.set_item("accepted", st.accepted)?;
        d.set_item("rejected_energy", st.rejected_energy)?;
        d.set_item("clamped", st.clamped)?;
        d.set_item("bad_address", st.bad_address)?;
        d.set_item("first_bad_address", st.first_bad_address)?;
        Ok((bytes_of(singles).into_pyarray(py), d))
    }

    /// Singles (16-byte records as `uint8`) stably sorted by time.
    fn pet_sort<'py>(
        &self,
        py: Python<'py>,
        singles: PyReadonlyArray1<'py, u8>,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let s: Vec<Single> = records(singles.as_slice()?, "singles")?;
        let out = py.detach(|| self.inner.pet_sort(&s)).map_err(err)?;
        Ok(bytes_of(out).into_pyarray(py))
    }

    /// Time-sorted singles to coincidence pairs (32-byte records as `uint8`).
    #[pyo3(signature = (singles, window, delay, policy))]
    fn pet_coincide<'py>(
        &self,
        py: Python<'py>,
        singles: PyReadonlyArray1<'py, u8>,
        window: f64,
        delay: Option<f64>,
        policy: &str,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let s: Vec<Single> = records(singles.as_slice()?, "singles")?;
        let c = CoincideConfig {
            window,
            delay,
            policy: detkit::pet::policy_from_name(policy).map_err(err)?,
        };
        let out: Vec<Coincidence> = py.detach(|| self.inner.pet_coincide(&s, &c)).map_err(err)?;
        Ok(bytes_of(out).into_pyarray(py))
    }

    /// Seeds `(n, 3)` uint32 (bottom, middle, top: input indices), their weights and z
    /// vertices, and the track parameters `(n, 5)` float32 (loc0, loc1, phi, theta, qop).
    #[allow(clippy::too_many_arguments)]
    fn seed<'py>(
        &self,
        py: Python<'py>,
        x: PyReadonlyArray1<'py, f32>,
        y: PyReadonlyArray1<'py, f32>,
        z: PyReadonlyArray1<'py, f32>,
        var_r: PyReadonlyArray1<'py, f32>,
        var_z: PyReadonlyArray1<'py, f32>,
        settings_toml: &str,
    ) -> PyResult<SeedArrays<'py>> {
        let cfg = seeding_config(settings_toml)?;
        let sps = spacepoints(&[x, y, z, var_r, var_z])?;
        let out = if sps.is_empty() {
            None
        } else {
            Some(py.detach(|| self.inner.seed(&sps, &cfg)).map_err(err)?)
        };
        seed_arrays(py, out)
    }

    /// Several events in one call (`Backend::seed_events`: on CUDA the events go through the
    /// device chain together, without a host synchronisation per event): one
    /// `(x, y, z, var_r, var_z)` tuple of float32 arrays per event in, one `seed` result per
    /// event out, in the same order.
    fn seed_events<'py>(
        &self,
        py: Python<'py>,
        events: Vec<[PyReadonlyArray1<'py, f32>; 5]>,
        settings_toml: &str,
    ) -> PyResult<Vec<SeedArrays<'py>>> {
        let cfg = seeding_config(settings_toml)?;
        let sps: Vec<Vec<SpacePoint>> = events
            .iter()
            .map(|e| spacepoints(e))
            .collect::<PyResult<_>>()?;
        let refs: Vec<&[SpacePoint]> = sps.iter().map(Vec::as_slice).collect();
        let outs = py
            .detach(|| self.inner.seed_events(&refs, &cfg))
            .map_err(err)?;
        outs.into_iter().map(|o| seed_arrays(py, Some(o))).collect()
    }
}

/// What `seed` returns: seeds `(n, 3)`, weights, z vertices, parameters `(n, 5)`.
type SeedArrays<'py> = (
    Bound<'py, PyArray2<u32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray2<f32>>,
);

/// The seeding configuration from the settings TOML the Python layer writes.
fn seeding_config(settings_toml: &str) -> PyResult<SeedingConfig> {
    let settings = SeedingSettings::from_toml(settings_toml).map_err(err)?;
    settings.to_config().map_err(err)
}

/// Spacepoints from the columns x, y, z, var_r, var_z (equal lengths: the Python layer
/// checks them and names the column).
fn spacepoints(cols: &[PyReadonlyArray1<'_, f32>; 5]) -> PyResult<Vec<SpacePoint>> {
    let [x, y, z, vr, vz] = [
        cols[0].as_slice()?,
        cols[1].as_slice()?,
        cols[2].as_slice()?,
        cols[3].as_slice()?,
        cols[4].as_slice()?,
    ];
    Ok((0..x.len())
        .map(|i| SpacePoint {
            x: x[i],
            y: y[i],
            z: z[i],
            var_z: vz[i],
            var_r: vr[i],
        })
        .collect())
}

/// One event's seeding output as numpy arrays (`None`: no spacepoints, no seeds).
fn seed_arrays<'py>(py: Python<'py>, out: Option<SeedingOutput>) -> PyResult<SeedArrays<'py>> {
    let (seeds, params) = out.map_or((vec![], vec![]), |o| (o.seeds, o.params));
    let idx: Vec<u32> = seeds
        .iter()
        .flat_map(|s| [s.bottom, s.middle, s.top])
        .collect();
    let weight: Vec<f32> = seeds.iter().map(|s| s.weight).collect();
    let zv: Vec<f32> = seeds.iter().map(|s| s.z_vertex).collect();
    let p: Vec<f32> = params
        .iter()
        .flat_map(|p| [p.loc0, p.loc1, p.phi, p.theta, p.qop])
        .collect();
    let n = seeds.len();
    Ok((
        idx.into_pyarray(py).reshape([n, 3])?,
        weight.into_pyarray(py),
        zv.into_pyarray(py),
        p.into_pyarray(py).reshape([n, 5])?,
    ))
}

fn scan_kind(inclusive: bool) -> ScanKind {
    if inclusive {
        ScanKind::Inclusive
    } else {
        ScanKind::Exclusive
    }
}

/// Records of `T` from bytes (a copy: numpy's buffer need not be aligned for `T`).
fn records<T: bytemuck::Pod>(bytes: &[u8], what: &str) -> PyResult<Vec<T>> {
    let size = std::mem::size_of::<T>();
    if !bytes.len().is_multiple_of(size) {
        return Err(InvalidInputError::new_err(format!(
            "{what}: {} bytes is not a whole number of {size}-byte records",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(size)
        .map(bytemuck::pod_read_unaligned)
        .collect())
}

fn bytes_of<T: bytemuck::Pod>(v: Vec<T>) -> Vec<u8> {
    bytemuck::cast_slice(&v).to_vec()
}

/// A generated Run-3-like CMS Phase-1 event: `(module, x, y, adc)` uint16 arrays.
#[allow(clippy::type_complexity)]
#[pyfunction]
fn generate_cluster_event<'py>(
    py: Python<'py>,
    seed: u64,
    dense: bool,
) -> (
    Bound<'py, PyArray1<u16>>,
    Bound<'py, PyArray1<u16>>,
    Bound<'py, PyArray1<u16>>,
    Bound<'py, PyArray1<u16>>,
) {
    use detkit::clustering::gen;
    let config = if dense {
        gen::EventConfig::dense()
    } else {
        gen::EventConfig::run3()
    };
    let d = py.detach(|| gen::event(&Geometry::phase1(), &config, seed));
    (
        d.module.into_pyarray(py),
        d.x.into_pyarray(py),
        d.y.into_pyarray(py),
        d.adc.into_pyarray(py),
    )
}

/// A generated seeding event at pile-up `mu`: `(x, y, z, var_r, var_z, particle)`.
#[allow(clippy::type_complexity)]
#[pyfunction]
fn generate_seeding_event<'py>(
    py: Python<'py>,
    seed: u64,
    mu: Bound<'py, PyAny>,
) -> PyResult<(
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<u32>>,
)> {
    let mu = args::pileup(&mu)?;
    let ev = py.detach(|| detkit::seeding::gen::generate(seed, mu, true));
    let col = |f: fn(&SpacePoint) -> f32| -> Vec<f32> { ev.spacepoints.iter().map(f).collect() };
    Ok((
        col(|s| s.x).into_pyarray(py),
        col(|s| s.y).into_pyarray(py),
        col(|s| s.z).into_pyarray(py),
        col(|s| s.var_r).into_pyarray(py),
        col(|s| s.var_z).into_pyarray(py),
        ev.truth.clone().into_pyarray(py),
    ))
}

/// Writes a generated PET acquisition into `dir` (`scanner.toml`, its tables, `frames.bin`);
/// returns the number of frames.
#[pyfunction]
fn generate_pet_acquisition(
    py: Python<'_>,
    dir: PathBuf,
    singles: usize,
    seed: u64,
) -> PyResult<usize> {
    use detkit::pet::gen;
    py.detach(|| -> detkit::Result<usize> {
        args::check_acquisition(singles)?;
        let scanner = gen::tiny_scanner(seed);
        scanner.write_files(&dir, "scanner")?;
        let acq = gen::acquisition(
            &scanner,
            &gen::AcquisitionConfig {
                seed,
                singles,
                ..Default::default()
            },
        );
        std::fs::write(dir.join("frames.bin"), gen::frame_bytes(&acq.frames)).map_err(|e| {
            detkit::Error::Io {
                file: dir.join("frames.bin").display().to_string(),
                source: e,
            }
        })?;
        Ok(acq.frames.len())
    })
    .map_err(err)
}

/// The body of `Backend.radix_sort_u32/_u64`: keys alone, or with raw values.
#[allow(clippy::type_complexity)]
fn radix_sort<'py, K: detkit::sort::SortKey + numpy::Element>(
    inner: &Inner,
    py: Python<'py>,
    keys: PyReadonlyArray1<'py, K>,
    values_raw: Option<PyReadonlyArray1<'py, u8>>,
    itemsize: usize,
    opts: SortOptions,
) -> PyResult<(Bound<'py, PyArray1<K>>, Option<Bound<'py, PyArray1<u8>>>)> {
    let k = keys.as_slice()?;
    let (ks, vs) = match values_raw {
        None => (py.detach(|| inner.sort_keys(k, opts)).map_err(err)?, None),
        Some(v) => {
            let v = v.as_slice()?;
            let (ks, vs) = py
                .detach(|| sort_pairs_raw(inner, k, v, itemsize, opts))
                .map_err(err)?;
            (ks, Some(vs))
        }
    };
    Ok((ks.into_pyarray(py), vs.map(|v| v.into_pyarray(py))))
}

/// Sorts `keys` with values given as raw bytes, `itemsize` per key (4, 8, 12 or 16).
fn sort_pairs_raw<K: detkit::sort::SortKey>(
    b: &Inner,
    keys: &[K],
    raw: &[u8],
    itemsize: usize,
    opts: SortOptions,
) -> detkit::Result<(Vec<K>, Vec<u8>)> {
    fn run<K: detkit::sort::SortKey, V: bytemuck::Pod>(
        b: &Inner,
        keys: &[K],
        raw: &[u8],
        opts: SortOptions,
    ) -> detkit::Result<(Vec<K>, Vec<u8>)> {
        // `[u8; N]` values: alignment 1, so any byte slice of whole values casts.
        let values: &[V] = bytemuck::cast_slice(raw);
        let (k, v) = b.sort_pairs(keys, values, opts)?;
        Ok((k, bytemuck::cast_slice::<V, u8>(&v).to_vec()))
    }
    if itemsize == 0 || raw.len() != keys.len() * itemsize {
        return Err(detkit::Error::InvalidInput {
            what: "sort values",
            detail: format!(
                "{} bytes of values for {} keys of {itemsize} bytes each",
                raw.len(),
                keys.len()
            ),
        });
    }
    match itemsize {
        4 => run::<K, [u8; 4]>(b, keys, raw, opts),
        8 => run::<K, [u8; 8]>(b, keys, raw, opts),
        12 => run::<K, [u8; 12]>(b, keys, raw, opts),
        16 => run::<K, [u8; 16]>(b, keys, raw, opts),
        _ => Err(detkit::Error::InvalidInput {
            what: "sort values",
            detail: format!("values of {itemsize} bytes (4, 8, 12 or 16 are supported: sort an index and gather)"),
        }),
    }
}

/// Sizes of the PET records, checked by the Python package against its numpy dtypes.
#[pyfunction]
fn record_sizes() -> (usize, usize, usize) {
    (
        std::mem::size_of::<Single>(),
        std::mem::size_of::<Coincidence>(),
        std::mem::size_of::<DataFrameV2>(),
    )
}

/// Number of CUDA devices (0 when no CUDA driver can be loaded).
#[pyfunction]
fn device_count() -> PyResult<usize> {
    if !detkit::driver_present() {
        return Ok(0);
    }
    detkit::cuda::device_count().map_err(err)
}

#[pymodule]
fn _detkit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Backend>()?;
    m.add("InvalidInputError", m.py().get_type::<InvalidInputError>())?;
    m.add("CapacityError", m.py().get_type::<CapacityError>())?;
    m.add("CudaError", m.py().get_type::<CudaError>())?;
    m.add_function(wrap_pyfunction!(generate_cluster_event, m)?)?;
    m.add_function(wrap_pyfunction!(generate_seeding_event, m)?)?;
    m.add_function(wrap_pyfunction!(generate_pet_acquisition, m)?)?;
    m.add_function(wrap_pyfunction!(record_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(args::settings_toml, m)?)?;
    m.add_function(wrap_pyfunction!(files::read_singles_file, m)?)?;
    m.add_function(wrap_pyfunction!(files::read_pairs_file, m)?)?;
    m.add_function(wrap_pyfunction!(files::write_singles_file, m)?)?;
    m.add_function(wrap_pyfunction!(files::write_pairs_file, m)?)?;
    Ok(())
}
