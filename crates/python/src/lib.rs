//! `detkit._detkit`: the Python extension behind the `detkit` package (PyO3 + numpy).
//!
//! The Python package (`python/detkit/__init__.py`) normalises arguments (dtype, contiguity,
//! structured dtypes of the PET records) and calls these functions, which borrow contiguous
//! numpy arrays without copying them, release the GIL around every kernel or oracle call, and
//! turn the library's typed errors into Python exceptions with the same messages (see
//! [`errors`]). Modules: [`io`] (`detkit.io`, the library's file readers), [`pool`]
//! (`DevicePool`), [`scanner`] (`detkit.Scanner`), [`settings`] (seeding keyword arguments),
//! [`args`] (argument checks with the command line's ranges; sizes checked against the memory
//! there is, a `MemoryError` when they cannot fit), [`files`] (the PET singles and pairs
//! writers), [`outputs`] (result memory a backend reuses once Python drops it), [`clusters`]
//! and [`seeds`] (the clustering and seeding results into it), [`timers`] (where a call's
//! host time goes, for `bench_host.py --phases`).

mod args;
mod clusters;
mod device;
mod device_calls;
mod device_ops;
mod device_pet;
mod device_prof;
mod dlpack;
mod errors;
mod files;
mod io;
mod outputs;
mod pinned;
mod pool;
mod scanner;
mod seeds;
mod settings;
mod timers;

use std::path::PathBuf;

use detkit::clustering::{Digis, DigisRef, Geometry};
use detkit::pet::cpu::CoincideConfig;
use detkit::pet::{Coincidence, DataFrameV2, Single};
use detkit::seeding::{SeedingOutput, SpacePoint};
use detkit::sort::SortOptions;
use detkit::{Backend as Inner, BackendKind, ScanKind};
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use errors::{err, CapacityError, CudaError, InvalidInputError};
use scanner::Scanner;
use seeds::SeedArrays;
use settings::Settings;

/// The backend every call runs on: CUDA or the CPU references, with the same results.
#[pyclass(module = "detkit._detkit", frozen)]
pub struct Backend {
    owner: Owner,
    /// The memory of this backend's recent results, reused once Python drops them.
    outputs: outputs::Outputs,
    /// Pinned memory of clustering results on a CUDA backend, recycled (`pinned`).
    results_pinned: pinned::ResultPools,
    /// The seeding door's per-event outputs, reused (a second thread at once gets its own).
    seed_scratch: std::sync::Mutex<Vec<SeedingOutput>>,
    /// `cluster_files`' batch of the files' digis, reused.
    files_scratch: std::sync::Mutex<Digis>,
    /// `cluster_files`' buffers of the files' bytes, reused.
    files_bytes: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// Where a backend lives: its own, or one device of a `DevicePool` (kept alive by the handle).
enum Owner {
    Own(Box<Inner>),
    Pool(Py<pool::DevicePool>, usize),
}

impl Backend {
    fn inner(&self) -> &Inner {
        match &self.owner {
            Owner::Own(b) => b,
            Owner::Pool(p, i) => &p.get().inner.backends()[*i],
        }
    }

    /// `door` (without the GIL) into a vector of records this backend reuses (see
    /// [`outputs`]), returned as a view of its `u64` words (the records are 8-byte aligned,
    /// a whole number of words) beside what `door` returns.
    fn records_out<'py, T, R>(
        &self,
        py: Python<'py>,
        key: &'static str,
        door: impl FnOnce(&mut Vec<T>) -> detkit::Result<R> + Send,
    ) -> PyResult<(Bound<'py, PyArray1<u64>>, R)>
    where
        T: bytemuck::Pod + Send,
        R: Send,
    {
        let h = self.outputs.take::<T>(py, key)?;
        let r = py
            .detach(|| timers::time(timers::Part::Door, || h.get().with(door)))
            .map_err(err);
        let _views = timers::Guard::start();
        let out = r.and_then(|r| {
            let bh = h.bind(py);
            // SAFETY: the holder is this call's alone (`take`), last changed by `door`; the
            // view is made after it.
            let a = bh.get().with(|v: &mut Vec<T>| unsafe {
                outputs::view1(bh, bytemuck::cast_slice::<T, u64>(v))
            })?;
            Ok((a, r))
        });
        self.outputs.put(key, h);
        out
    }

    fn pool_member(pool: Py<pool::DevicePool>, index: usize) -> Self {
        Self::of(Owner::Pool(pool, index))
    }

    fn of(owner: Owner) -> Self {
        Self {
            owner,
            outputs: outputs::Outputs::default(),
            results_pinned: pinned::ResultPools::default(),
            seed_scratch: std::sync::Mutex::new(Vec::new()),
            files_scratch: std::sync::Mutex::new(Digis::default()),
            files_bytes: std::sync::Mutex::new(Vec::new()),
        }
    }
}

#[pymethods]
impl Backend {
    /// `kind`: "auto" (CUDA when a driver and a device are present, else the CPU), "cpu" or
    /// "cuda"; `device`: the CUDA device ordinal; `threads`: CPU threads of this backend (its
    /// own pool; `None`: `RAYON_NUM_THREADS`, else one per core).
    #[new]
    #[pyo3(signature = (kind = "auto", device = 0, threads = None))]
    fn new(kind: &str, device: usize, threads: Option<usize>) -> PyResult<Self> {
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
        let inner = match threads {
            Some(0) => return Err(PyValueError::new_err("threads must be at least 1")),
            Some(n) => inner.with_threads(n).map_err(err)?,
            None => inner,
        };
        Ok(Self::of(Owner::Own(Box::new(inner))))
    }

    /// Drops the memory of earlier results kept for reuse (results still held in Python
    /// stay valid: their memory goes when they go).
    fn release_results(&self) {
        self.outputs.clear();
        self.results_pinned.clear();
        *self.seed_scratch.lock().unwrap_or_else(|p| p.into_inner()) = Vec::new();
        *self.files_scratch.lock().unwrap_or_else(|p| p.into_inner()) = Digis::default();
        *self.files_bytes.lock().unwrap_or_else(|p| p.into_inner()) = Vec::new();
    }

    /// A numpy array of `shape` and `dtype` (zeroed) in page-locked host memory that
    /// detkit allocated, as `cupyx.empty_pinned`: the clustering door copies digis from and
    /// cluster indices into such arrays by DMA, with no staging copy. On the CPU backend an
    /// ordinary `numpy.zeros` array.
    #[pyo3(signature = (shape, dtype = None))]
    fn pinned_empty<'py>(
        &self,
        py: Python<'py>,
        shape: Bound<'py, PyAny>,
        dtype: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let dtype = match dtype {
            Some(d) => d,
            None => py.import("numpy")?.getattr("float64")?,
        };
        pinned::empty(py, self.inner(), &shape, &dtype)
    }

    /// CPU threads the backend's CPU work runs on.
    #[getter]
    fn threads(&self) -> usize {
        self.inner().threads()
    }

    /// "cpu" or "cuda".
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner().kind() {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        }
    }

    /// Which backend runs and why.
    #[getter]
    fn description(&self) -> String {
        self.inner().description().to_string()
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
        let out = py.detach(|| self.inner().scan_u32(v, kind)).map_err(err)?;
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
        let out = py.detach(|| self.inner().scan_u64(v, kind)).map_err(err)?;
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
        radix_sort(self.inner(), py, keys, values_raw, itemsize, opts)
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
        radix_sort(self.inner(), py, keys, values_raw, itemsize, opts)
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
            .detach(|| self.inner().select_in_range_u32(v, lo, hi))
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
        let h = py
            .detach(|| self.inner().histogram(k, nbins))
            .map_err(err)?;
        Ok((
            h.counts.into_pyarray(py),
            h.out_of_range,
            h.first_out_of_range,
        ))
    }

    /// Returns `(clus, clus_in_module)`: the cluster of every digi (-1: invalid, duplicate or
    /// cut) and the number of clusters of every (event, module).
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    #[pyo3(signature = (module, x, y, adc, geometry, charge_cut, event_offsets, out = None))]
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
        out: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<u32>>)> {
        let g = Geometry::by_name(geometry).map_err(err)?;
        // None: the geometry's CMS defaults; False: no cut; else electrons (args::charge_cut).
        let cut = args::charge_cut(charge_cut.as_ref(), g.default_cut)?;
        let (m, xs, ys, a) = (
            module.as_slice()?,
            x.as_slice()?,
            y.as_slice()?,
            adc.as_slice()?,
        );
        let whole = [0, m.len() as u32];
        let offsets = match &event_offsets {
            Some(o) => o.as_slice()?,
            None => &whole[..],
        };
        // numpy's memory goes to the library as borrowed slices (no copy), and the library
        // writes the results straight into the arrays returned: the caller's (`out`) or
        // memory this backend reuses (`outputs`).
        let digis = DigisRef {
            module: m,
            x: xs,
            y: ys,
            adc: a,
        };
        let events = offsets.len().saturating_sub(1);
        let slots = events.saturating_mul(g.modules as usize);
        // The per-module counts and first digis grow with the number of events: a size
        // asked for by the caller, checked before anything is allocated.
        args::check_bytes(
            || format!("event_offsets of {events} events ({slots} module slots)"),
            (slots as u64).saturating_mul(8),
        )?;
        let n = m.len();
        if let Some(out) = out {
            // The caller's arrays (checked: exact dtype, length, C order, writeable).
            let (clus, per_module) = args::cluster_out(&out, n, slots)?;
            {
                let mut c = clus.try_readwrite().map_err(args::out_borrow)?;
                let mut p = per_module.try_readwrite().map_err(args::out_borrow)?;
                let (c, p) = (c.as_slice_mut()?, p.as_slice_mut()?);
                let b = self.inner();
                py.detach(|| {
                    timers::time(timers::Part::Door, || {
                        clusters::run(b, digis, offsets, &g, cut, c, p)
                    })
                })
                .map_err(err)?;
            }
            return Ok((clus, per_module));
        }
        // Memory of earlier results that Python has dropped, else new (see `outputs`).
        let mut v = self.cluster_pooled(py, digis, offsets, &g, cut, &[(0..n, 0..slots)])?;
        Ok(v.pop().expect("one part asked for"))
    }

    /// Clusters the digis files `paths` (`detkit.io.read_digis`) as one batch of events (one
    /// library call; a batch that fails is run again file by file to name the failed file).
    /// Returns one entry per path, in order: `(clus, clus_in_module)`, or the file's exception
    /// object (not raised).
    #[pyo3(signature = (paths, geometry, charge_cut))]
    fn cluster_files<'py>(
        &self,
        py: Python<'py>,
        paths: Vec<PathBuf>,
        geometry: &str,
        charge_cut: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let g = Geometry::by_name(geometry).map_err(err)?;
        let cut = args::charge_cut(charge_cut.as_ref(), g.default_cut)?;
        let modules = g.modules as usize;
        // The files read side by side into memory this backend keeps (`clusters::read_files`)
        // and clustered as one batch; each file's results are views of the batch's.
        let mut bufs = self
            .files_bytes
            .try_lock()
            .map(|mut g| std::mem::take(&mut *g))
            .unwrap_or_default();
        let mut all = self
            .files_scratch
            .try_lock()
            .map(|mut g| std::mem::take(&mut *g))
            .unwrap_or_default();
        let read = py.detach(|| clusters::read_files(&paths, &mut bufs, &mut all));
        if let Ok(mut g) = self.files_bytes.try_lock() {
            *g = bufs;
        }
        let good: Vec<&std::ops::Range<usize>> =
            read.iter().filter_map(|r| r.as_ref().ok()).collect();
        let mut offsets = vec![0u32];
        // Past u32 the door refuses the batch (its offsets no longer match the digis) and
        // the files run one by one.
        offsets.extend(
            good.iter()
                .map(|r| u32::try_from(r.end).unwrap_or(u32::MAX)),
        );
        let parts: Vec<_> = good
            .iter()
            .enumerate()
            .map(|(e, r)| ((*r).clone(), e * modules..(e + 1) * modules))
            .collect();
        let batch = self
            .cluster_pooled(py, (&all).into(), &offsets, &g, cut, &parts)
            .ok();
        let list = PyList::empty(py);
        let mut batch = batch.map(Vec::into_iter);
        for r in read {
            let entry: PyResult<Py<PyAny>> = r.and_then(|range| {
                let pair = match batch.as_mut() {
                    Some(it) => it.next().expect("one batch result per file read"),
                    None => {
                        // The batch failed: this file alone, to name the file that fails.
                        let d = DigisRef {
                            module: &all.module[range.clone()],
                            x: &all.x[range.clone()],
                            y: &all.y[range.clone()],
                            adc: &all.adc[range.clone()],
                        };
                        let n = range.len();
                        let offs = [0, n as u32];
                        self.cluster_pooled(py, d, &offs, &g, cut, &[(0..n, 0..modules)])?
                            .pop()
                            .expect("one part asked for")
                    }
                };
                Ok(pair.into_pyobject(py)?.into_any().unbind())
            });
            list.append(entry.unwrap_or_else(|e| e.into_value(py).into_any()))?;
        }
        if let Ok(mut g) = self.files_scratch.try_lock() {
            *g = all;
        }
        Ok(list)
    }

    /// Raw 16-byte frames (a `uint8` array, borrowed) to singles (`uint64` words, two per
    /// single) and the conversion statistics. `scanner`: a `Scanner` (tables read once) or
    /// the path of its TOML file (read on this call).
    fn pet_convert<'py>(
        &self,
        py: Python<'py>,
        frames: PyReadonlyArray1<'py, u8>,
        scanner: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyArray1<u64>>, Bound<'py, PyDict>)> {
        let frames = frames.as_slice()?;
        let owned;
        let s = match scanner.cast::<Scanner>() {
            Ok(s) => s.get(),
            Err(_) => {
                let path: PathBuf = scanner.extract()?;
                owned = Scanner::new(py, path)?;
                &owned
            }
        };
        let b = self.inner();
        let (singles, st) = self.records_out(py, "pet.convert", |out: &mut Vec<Single>| {
            match s.handle(b)? {
                // The tables loaded on this backend's device once, for every call.
                Some(h) => b.pet_convert_into(frames, &*h, out),
                None => b.pet_convert_into(frames, &s.inner, out),
            }
        })?;
        let d = PyDict::new(py);
        d.set_item("frames", st.frames)?;
        d.set_item("accepted", st.accepted)?;
        d.set_item("rejected_energy", st.rejected_energy)?;
        d.set_item("clamped", st.clamped)?;
        d.set_item("bad_address", st.bad_address)?;
        d.set_item("first_bad_address", st.first_bad_address)?;
        Ok((singles, d))
    }

    /// Singles (16-byte records as `uint8`, borrowed when 8-byte aligned) stably sorted by
    /// time, as `uint64` words.
    fn pet_sort<'py>(
        &self,
        py: Python<'py>,
        singles: PyReadonlyArray1<'py, u8>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let s = records::<Single>(singles.as_slice()?, "singles")?;
        let b = self.inner();
        let (out, ()) = self.records_out(py, "pet.sort", |out: &mut Vec<Single>| {
            b.pet_sort_into(&s, out)
        })?;
        Ok(out)
    }

    /// Time-sorted singles to coincidence pairs (`uint64` words, four per pair).
    #[pyo3(signature = (singles, window, delay, policy))]
    fn pet_coincide<'py>(
        &self,
        py: Python<'py>,
        singles: PyReadonlyArray1<'py, u8>,
        window: f64,
        delay: Option<f64>,
        policy: &str,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let s = records::<Single>(singles.as_slice()?, "singles")?;
        let c = CoincideConfig {
            window,
            delay,
            policy: detkit::pet::policy_from_name(policy).map_err(err)?,
        };
        let b = self.inner();
        let (out, ()) = self.records_out(py, "pet.coincide", |out: &mut Vec<Coincidence>| {
            b.pet_coincide_into(&s, &c, out)
        })?;
        Ok(out)
    }

    /// Seeds `(n, 3)` uint32 (bottom, middle, top: input indices), their weights and z
    /// vertices, and the track parameters `(n, 5)` float32 (loc0, loc1, phi, theta, qop).
    /// `settings`: a dict of traccc's configuration fields (`None`: the defaults).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (x, y, z, var_r, var_z, settings))]
    fn seed<'py>(
        &self,
        py: Python<'py>,
        x: PyReadonlyArray1<'py, f32>,
        y: PyReadonlyArray1<'py, f32>,
        z: PyReadonlyArray1<'py, f32>,
        var_r: PyReadonlyArray1<'py, f32>,
        var_z: PyReadonlyArray1<'py, f32>,
        settings: Settings,
    ) -> PyResult<SeedArrays<'py>> {
        let cols = [
            x.as_slice()?,
            y.as_slice()?,
            z.as_slice()?,
            var_r.as_slice()?,
            var_z.as_slice()?,
        ];
        Ok(self
            .seed_event_views(py, seeds::Events::Columns(&[cols]), &settings.0)?
            .pop()
            .expect("one result per event"))
    }

    /// Several events in one call (`Backend::seed_events`: on CUDA the events go through the
    /// device chain together, without a host synchronisation per event): one
    /// `(x, y, z, var_r, var_z)` tuple of float32 arrays per event in, one `seed` result per
    /// event out, in the same order.
    #[pyo3(signature = (events, settings))]
    fn seed_events<'py>(
        &self,
        py: Python<'py>,
        events: Vec<[PyReadonlyArray1<'py, f32>; 5]>,
        settings: Settings,
    ) -> PyResult<Vec<SeedArrays<'py>>> {
        let cols = event_columns(&events)?;
        self.seed_event_views(py, seeds::Events::Columns(&cols), &settings.0)
    }

    /// `seed_events` when every event is a tuple of five exact columns (`float32`, 1-D,
    /// C-contiguous numpy arrays): `None` for any other input, which the Python layer then
    /// converts and checks column by column (its errors name the event and column). The
    /// library checks the lengths and values as for `seed_events`.
    #[pyo3(signature = (events, settings))]
    fn seed_events_exact<'py>(
        &self,
        py: Python<'py>,
        events: &Bound<'py, PyList>,
        settings: Settings,
    ) -> PyResult<Option<Vec<SeedArrays<'py>>>> {
        let Some(held) = seeds::exact_columns(events) else {
            return Ok(None);
        };
        let cols = seeds::column_slices(&held)?;
        self.seed_event_views(py, seeds::Events::Columns(&cols), &settings.0)
            .map(Some)
    }

    /// `seed_events` with the results of all events together: `(seeds (N, 3), weight,
    /// z_vertex, params (N, 5), offsets (E + 1) int64)`, event `e`'s seeds being rows
    /// `offsets[e] .. offsets[e + 1]` (no array per event).
    #[pyo3(signature = (events, settings))]
    fn seed_events_flat<'py>(
        &self,
        py: Python<'py>,
        events: Vec<[PyReadonlyArray1<'py, f32>; 5]>,
        settings: Settings,
    ) -> PyResult<seeds::FlatSeeds<'py>> {
        let cols = event_columns(&events)?;
        let c = self.seed_columns(py, seeds::Events::Columns(&cols), &settings.0)?;
        self.flat_seeds(py, c)
    }

    /// Seeds the spacepoint CSV files `paths` (`detkit.io.read_spacepoints`) as one batch of
    /// events (one library call; a batch that fails is run again file by file to name the
    /// failed file). One entry per path, in order: what `seed` returns, or the file's
    /// exception object (not raised).
    #[pyo3(signature = (paths, settings))]
    fn seed_files<'py>(
        &self,
        py: Python<'py>,
        paths: Vec<PathBuf>,
        settings: Settings,
    ) -> PyResult<Bound<'py, PyList>> {
        let cfg = &settings.0;
        // The files' bytes into buffers this backend keeps, parsed in parallel.
        let mut bufs = self
            .files_bytes
            .try_lock()
            .map(|mut g| std::mem::take(&mut *g))
            .unwrap_or_default();
        let read: Vec<PyResult<Vec<SpacePoint>>> = py.detach(|| {
            io::read_kept(&paths, &mut bufs, |p, bytes| {
                detkit::seeding::read_csv(bytes, &p.display().to_string()).map_err(err)
            })
        });
        if let Ok(mut g) = self.files_bytes.try_lock() {
            *g = bufs;
        }
        let good: Vec<&[SpacePoint]> = read
            .iter()
            .filter_map(|r| r.as_ref().ok().map(Vec::as_slice))
            .collect();
        let batch = self
            .seed_event_views(py, seeds::Events::Rows(&good), cfg)
            .ok();
        drop(good);
        let mut batch = batch.map(Vec::into_iter);
        let list = PyList::empty(py);
        for r in read {
            let entry: PyResult<Py<PyAny>> = r.and_then(|sps| {
                let out = match batch.as_mut() {
                    Some(it) => it.next().expect("one batch result per file read"),
                    None => self
                        .seed_event_views(py, seeds::Events::Rows(&[sps.as_slice()]), cfg)?
                        .pop()
                        .expect("one result per event"),
                };
                Ok(out.into_pyobject(py)?.into_any().unbind())
            });
            list.append(entry.unwrap_or_else(|e| e.into_value(py).into_any()))?;
        }
        Ok(list)
    }
}

/// One event's five borrowed columns per tuple of numpy arrays (no copy).
fn event_columns<'a>(
    events: &'a [[PyReadonlyArray1<'_, f32>; 5]],
) -> PyResult<Vec<[&'a [f32]; 5]>> {
    events
        .iter()
        .map(|e| -> PyResult<[&[f32]; 5]> {
            Ok([
                e[0].as_slice()?,
                e[1].as_slice()?,
                e[2].as_slice()?,
                e[3].as_slice()?,
                e[4].as_slice()?,
            ])
        })
        .collect()
}

fn scan_kind(inclusive: bool) -> ScanKind {
    if inclusive {
        ScanKind::Inclusive
    } else {
        ScanKind::Exclusive
    }
}

/// Frames borrowed from raw bytes (a frame is 16 bytes of alignment 1: any whole number of
/// frames casts); a length that is not a multiple of 16 is the library's error.
fn frames_of(bytes: &[u8]) -> detkit::Result<&[DataFrameV2]> {
    if !bytes
        .len()
        .is_multiple_of(std::mem::size_of::<DataFrameV2>())
    {
        // The library's check and message (it fails before it copies anything).
        return detkit::pet::frames_from_bytes(bytes).map(|_| &[][..]);
    }
    Ok(bytemuck::cast_slice(bytes))
}

/// Records of `T` from bytes: borrowed when numpy's buffer is aligned for `T` (it is for
/// arrays numpy allocates), else one copy.
fn records<'a, T: bytemuck::Pod>(
    bytes: &'a [u8],
    what: &str,
) -> PyResult<std::borrow::Cow<'a, [T]>> {
    let size = std::mem::size_of::<T>();
    if !bytes.len().is_multiple_of(size) {
        return Err(InvalidInputError::new_err(format!(
            "{what}: {} bytes is not a whole number of {size}-byte records",
            bytes.len()
        )));
    }
    Ok(match bytemuck::try_cast_slice(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => std::borrow::Cow::Owned(
            bytes
                .chunks_exact(size)
                .map(bytemuck::pod_read_unaligned)
                .collect(),
        ),
    })
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

/// A generated PET scanner (`"tiny"`, `"small_animal"` or `"bench"`: the benchmarks' scanner,
/// ~110 MB of tables) and `singles` singles of an acquisition on it, in memory: `(scanner,
/// frames as uint8)`.
#[pyfunction]
fn generate_pet_frames<'py>(
    py: Python<'py>,
    scanner: &str,
    singles: usize,
    seed: u64,
) -> PyResult<(Scanner, Bound<'py, PyArray1<u8>>)> {
    use detkit::pet::gen;
    args::check_acquisition(singles).map_err(err)?;
    let s = match scanner {
        "tiny" => gen::tiny_scanner(seed),
        "small_animal" => gen::small_animal_scanner(seed),
        "bench" => gen::bench_scanner(seed),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown scanner `{other}` (tiny, small_animal or bench)"
            )))
        }
    };
    let frames = py.detach(|| {
        let acq = gen::acquisition_par(
            &s,
            &gen::AcquisitionConfig {
                seed,
                singles,
                ..Default::default()
            },
        );
        gen::frame_bytes(&acq.frames).to_vec()
    });
    Ok((Scanner::from_inner(s), frames.into_pyarray(py)))
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
    m.add_class::<pool::DevicePool>()?;
    m.add_class::<Scanner>()?;
    m.add_class::<pinned::PinnedBuffer>()?;
    m.add_class::<device::DeviceArray>()?;
    m.add_class::<dlpack::HostView>()?;
    m.add_class::<dlpack::CpuExport>()?;
    m.add_function(wrap_pyfunction!(device::import_array, m)?)?;
    m.add_function(wrap_pyfunction!(device::primary_context, m)?)?;
    m.add_function(wrap_pyfunction!(device_prof::device_profile, m)?)?;
    m.add_function(wrap_pyfunction!(device_calls::device_cluster, m)?)?;
    m.add_function(wrap_pyfunction!(device_calls::device_pet_convert, m)?)?;
    m.add_function(wrap_pyfunction!(device_calls::device_seed_events, m)?)?;
    m.add_function(wrap_pyfunction!(device_calls::device_seed_flat, m)?)?;
    m.add_function(wrap_pyfunction!(device_pet::device_pet_sort, m)?)?;
    m.add_function(wrap_pyfunction!(device_pet::device_pet_coincide, m)?)?;
    m.add_function(wrap_pyfunction!(device_ops::device_scan, m)?)?;
    m.add_function(wrap_pyfunction!(device_ops::device_select, m)?)?;
    m.add_function(wrap_pyfunction!(device_ops::device_sort, m)?)?;
    m.add_function(wrap_pyfunction!(device_ops::device_histogram, m)?)?;
    m.add("InvalidInputError", m.py().get_type::<InvalidInputError>())?;
    m.add("CapacityError", m.py().get_type::<CapacityError>())?;
    m.add("CudaError", m.py().get_type::<CudaError>())?;
    m.add_function(wrap_pyfunction!(generate_cluster_event, m)?)?;
    m.add_function(wrap_pyfunction!(generate_seeding_event, m)?)?;
    m.add_function(wrap_pyfunction!(generate_pet_acquisition, m)?)?;
    m.add_function(wrap_pyfunction!(generate_pet_frames, m)?)?;
    m.add_function(wrap_pyfunction!(record_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(timers::_timers, m)?)?;
    m.add_function(wrap_pyfunction!(timers::_timers_take, m)?)?;
    m.add_function(wrap_pyfunction!(seeds::_set_variant, m)?)?;
    m.add_function(wrap_pyfunction!(seeds::_variant, m)?)?;
    m.add_function(wrap_pyfunction!(io::read_digis, m)?)?;
    m.add_function(wrap_pyfunction!(io::read_spacepoints, m)?)?;
    m.add_function(wrap_pyfunction!(io::read_frames, m)?)?;
    m.add_function(wrap_pyfunction!(io::read_singles, m)?)?;
    m.add_function(wrap_pyfunction!(io::read_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(files::write_singles_file, m)?)?;
    m.add_function(wrap_pyfunction!(files::write_pairs_file, m)?)?;
    Ok(())
}
