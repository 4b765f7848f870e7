//! Seeding results as numpy arrays: the library's per-event outputs (seeds and parameters
//! as records) laid out once into flat columns that a backend reuses ([`crate::outputs`]):
//! `seeds (N, 3)` uint32, `weight (N)`, `z_vertex (N)` float32, `params (N, 5)` float32 and
//! `offsets (E + 1)` int64, event `e` being rows `offsets[e] .. offsets[e + 1]`:
//! `Backend.seed_events_flat` returns these columns.
//!
//! The per-event results of `Backend.seed` / `seed_events` are views of the library's own
//! records instead ([`Backend::seed_event_views`]): the door writes each event's `Seed` and
//! `BoundParams` records into vectors a holder of this backend keeps, and the arrays are
//! views of them, with no copy after the door's: the index rows `(n, 3)` `uint32`, the
//! weights and z vertices strided views of the 20-byte `Seed` records (as the device-array
//! results are), the parameters `(n, 5)` the `BoundParams` records themselves. Laying the
//! records out into columns took a pass over all the seeds (~0.9 MB an event at ⟨μ⟩ = 200)
//! after the door (see docs/benchmarks.md, "seed (session 11)").

use detkit::seeding::{SeedingConfig, SeedingOutput, SpacePoint, SpacePointsRef};
use numpy::ndarray::{ArrayView, Dimension, ShapeBuilder, StrideShape};
use numpy::{Element, PyArray, PyArray1, PyArray2};
use pyo3::prelude::*;
use rayon::prelude::*;

use crate::errors::err;
use crate::outputs::{self, first_n, Held};
use crate::timers::{self, Part};
use crate::Backend;

/// What `seed` returns for one event: seeds `(n, 3)`, weights, z vertices, parameters
/// `(n, 5)`.
pub type SeedArrays<'py> = (
    Bound<'py, PyArray2<u32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray2<f32>>,
);

/// `seed_events_flat`'s result: [`SeedArrays`] of every event together and the offsets.
pub type FlatSeeds<'py> = (
    Bound<'py, PyArray2<u32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray1<i64>>,
);

/// The output names of the five columns in the backend's pool.
const KEYS: [&str; 5] = [
    "seed.seeds",
    "seed.weight",
    "seed.z_vertex",
    "seed.params",
    "seed.offsets",
];

/// The events of one call: five borrowed columns each (numpy's memory), or rows (read from
/// files).
pub enum Events<'a> {
    Columns(&'a [[&'a [f32]; 5]]),
    Rows(&'a [&'a [SpacePoint]]),
}

impl Events<'_> {
    fn len(&self) -> usize {
        match self {
            Events::Columns(c) => c.len(),
            Events::Rows(r) => r.len(),
        }
    }

    /// Whether event `e` has spacepoints (an event without has no seeds and is not given
    /// to the library).
    fn nonempty(&self, e: usize) -> bool {
        match self {
            Events::Columns(c) => !c[e][0].is_empty(),
            Events::Rows(r) => !r[e].is_empty(),
        }
    }

    /// The library's call over the non-empty events, into `out` (one output per such event).
    fn run(
        &self,
        b: &detkit::Backend,
        cfg: &SeedingConfig,
        out: &mut Vec<SeedingOutput>,
    ) -> detkit::Result<()> {
        match self {
            Events::Columns(c) => {
                let refs: Vec<SpacePointsRef<'_>> = c
                    .iter()
                    .filter(|e| !e[0].is_empty())
                    .map(|&[x, y, z, var_r, var_z]| SpacePointsRef {
                        x,
                        y,
                        z,
                        var_r,
                        var_z,
                    })
                    .collect();
                b.seed_columns_into(&refs, cfg, out)
            }
            Events::Rows(r) => {
                let refs: Vec<&[SpacePoint]> =
                    r.iter().copied().filter(|e| !e.is_empty()).collect();
                b.seed_events_into(&refs, cfg, out)
            }
        }
    }
}

/// The holder of the per-event records behind `seed` / `seed_events`' views.
const RECORDS: &str = "seed.records";

/// Selects a measuring variant of the library's doors and of this layer
/// ([`detkit::phases::set_variant`], for `bench_host.py --variants`/`--dev-variants`): a hook
/// for A/B runs; no variant is defined now, every value runs the default path. Not API.
#[pyfunction]
pub fn _set_variant(v: u32) {
    detkit::phases::set_variant(v);
}

/// The variant set by [`_set_variant`].
#[pyfunction]
pub fn _variant() -> u32 {
    detkit::phases::variant()
}

/// Every event's five columns, read-only borrowed, when each event is a tuple of five
/// `float32` 1-D C-contiguous numpy arrays of one length; `None` at the first that is not
/// (the caller takes the checked path, whose errors name the event and column). About 0.1 µs a column, against several µs for the Python layer's
/// per-column checks (320 columns in a 64-event call).
pub fn exact_columns<'py>(
    events: &Bound<'py, pyo3::types::PyList>,
) -> Option<Vec<numpy::PyReadonlyArray1<'py, f32>>> {
    use numpy::{PyArrayMethods, PyUntypedArrayMethods};
    use pyo3::types::PyTuple;
    let mut held = Vec::with_capacity(5 * events.len());
    for ev in events.iter() {
        let t = ev.cast::<PyTuple>().ok()?;
        if t.len() != 5 {
            return None;
        }
        let mut len = None;
        for c in t.iter() {
            let a = c.cast::<PyArray1<f32>>().ok()?;
            // Columns of different lengths too: the checked path names the column.
            if !a.is_c_contiguous() || *len.get_or_insert(a.len()) != a.len() {
                return None;
            }
            held.push(a.try_readonly().ok()?);
        }
    }
    Some(held)
}

/// The columns of [`exact_columns`] as five slices per event.
pub fn column_slices<'a>(
    held: &'a [numpy::PyReadonlyArray1<'_, f32>],
) -> PyResult<Vec<[&'a [f32]; 5]>> {
    held.chunks(5)
        .map(|c| -> PyResult<[&[f32]; 5]> {
            Ok([
                c[0].as_slice()?,
                c[1].as_slice()?,
                c[2].as_slice()?,
                c[3].as_slice()?,
                c[4].as_slice()?,
            ])
        })
        .collect()
}

/// A strided numpy view of `data` (memory of vectors owned by `owner`'s vector of
/// [`SeedingOutput`]).
///
/// # Safety
/// As [`outputs::view`]: `data` lies in memory `owner` keeps alive and unchanged while any
/// view exists, and `shape` stays inside `data`.
unsafe fn view_strided<'py, E: Element, D: Dimension>(
    owner: &Bound<'py, outputs::Held>,
    data: &[E],
    shape: StrideShape<D>,
) -> PyResult<Bound<'py, PyArray<E, D>>> {
    let a = ArrayView::from_shape(shape, data)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    // SAFETY: this function's contract: `owner` (the base) keeps the memory alive and
    // unchanged while the view exists.
    Ok(unsafe { PyArray::borrow_from_array(&a, owner.clone().into_any()) })
}

/// The four arrays of one event's records (`Seed`: bottom, middle, top, weight, z_vertex;
/// `BoundParams`: five `f32`), views of `o`'s vectors.
///
/// # Safety
/// `o` lies in the vector of `owner`, which is not changed while any view exists (the pool
/// gives the holder out again only when no view refers to it).
unsafe fn record_views<'py>(
    owner: &Bound<'py, outputs::Held>,
    o: Option<&SeedingOutput>,
) -> PyResult<SeedArrays<'py>> {
    const W: usize = std::mem::size_of::<detkit::seeding::Seed>() / 4;
    let (seeds, params): (&[detkit::seeding::Seed], &[detkit::seeding::BoundParams]) =
        o.map_or((&[], &[]), |o| (&o.seeds, &o.params));
    let n = seeds.len();
    let words: &[u32] = bytemuck::cast_slice(seeds);
    let floats: &[f32] = bytemuck::cast_slice(seeds);
    let p: &[f32] = bytemuck::cast_slice(params);
    // The weights and z vertices start 3 and 4 words into the records.
    let (w, z): (&[f32], &[f32]) = if n == 0 {
        (&[], &[])
    } else {
        (&floats[3..], &floats[4..])
    };
    if n == 0 {
        // Empty arrays of the same shapes (strided empty views are refused by ndarray: their
        // last column lies past an empty slice).
        // SAFETY: the caller's contract; empty views read nothing.
        return unsafe {
            Ok((
                outputs::view(owner, &words[..0], [0, 3])?,
                outputs::view1(owner, &w[..0])?,
                outputs::view1(owner, &z[..0])?,
                outputs::view(owner, &p[..0], [0, 5])?,
            ))
        };
    }
    // SAFETY: the caller's contract; each shape stays inside its slice ((n - 1) strides of
    // W words and the row's last element inside the n records).
    unsafe {
        Ok((
            view_strided(owner, words, (n, 3).strides((W, 1)))?,
            view_strided(owner, w, (n,).strides((W,)))?,
            view_strided(owner, z, (n,).strides((W,)))?,
            view_strided(owner, p, (n, 5).strides((5, 1)))?,
        ))
    }
}

impl Backend {
    /// Seeds `events` (the GIL released for the library call): one [`SeedArrays`] per
    /// event, views of the library's records (see the module doc); an event without
    /// spacepoints gets empty arrays.
    pub fn seed_event_views<'py>(
        &self,
        py: Python<'py>,
        events: Events<'_>,
        cfg: &SeedingConfig,
    ) -> PyResult<Vec<SeedArrays<'py>>> {
        let held = self.outputs.take::<SeedingOutput>(py, RECORDS)?;
        let b = self.inner();
        let r = py.detach(|| {
            held.get().with(|outs: &mut Vec<SeedingOutput>| {
                timers::time(Part::Door, || events.run(b, cfg, outs))
            })
        });
        if let Err(e) = r {
            self.outputs.put(RECORDS, held);
            return Err(err(e));
        }
        let views = {
            let _views = timers::Guard::start();
            let h = held.bind(py);
            h.get().with(|outs: &mut Vec<SeedingOutput>| {
                let mut next = 0;
                (0..events.len())
                    .map(|e| {
                        let o = events.nonempty(e).then(|| {
                            next += 1;
                            &outs[next - 1]
                        });
                        // SAFETY: `outs` is the holder's vector, taken from the pool for this
                        // call alone and last changed by the door above; the pool gives it
                        // out again only when no view refers to it.
                        unsafe { record_views(h, o) }
                    })
                    .collect::<PyResult<Vec<_>>>()
            })
        };
        self.outputs.put(RECORDS, held);
        views
    }
}

/// The five holders of one call's columns, taken from the backend's pool, and the offsets.
pub struct Columns {
    held: [Py<Held>; 5],
    offsets: Vec<usize>,
}

impl Backend {
    /// Seeds `events` into columns this backend reuses (the GIL released from the library
    /// call to the last column written).
    pub fn seed_columns(
        &self,
        py: Python<'_>,
        events: Events<'_>,
        cfg: &SeedingConfig,
    ) -> PyResult<Columns> {
        let held = [
            self.outputs.take::<u32>(py, KEYS[0])?,
            self.outputs.take::<f32>(py, KEYS[1])?,
            self.outputs.take::<f32>(py, KEYS[2])?,
            self.outputs.take::<f32>(py, KEYS[3])?,
            self.outputs.take::<i64>(py, KEYS[4])?,
        ];
        let b = self.inner();
        let r = py.detach(|| -> detkit::Result<Vec<usize>> {
            // The library's outputs reused from call to call (a concurrent call on another
            // thread gets vectors of its own).
            let mut mine = Vec::new();
            let mut shared = self.seed_scratch.try_lock().ok();
            let outs: &mut Vec<SeedingOutput> = shared.as_deref_mut().unwrap_or(&mut mine);
            timers::time(Part::Door, || events.run(b, cfg, outs))?;
            let n_events = events.len();
            // The output of event e (None: no spacepoints) and the offsets.
            let mut which = Vec::with_capacity(n_events);
            let mut offsets = Vec::with_capacity(n_events + 1);
            offsets.push(0usize);
            let mut next = 0;
            for e in 0..n_events {
                let o = if events.nonempty(e) {
                    next += 1;
                    Some(&outs[next - 1])
                } else {
                    None
                };
                offsets.push(offsets[e] + o.map_or(0, |o| o.seeds.len()));
                which.push(o);
            }
            let n = offsets[n_events];
            let what = || format!("{n} seeds");
            held[0].get().with(|idx: &mut Vec<u32>| {
                held[1].get().with(|w: &mut Vec<f32>| {
                    held[2].get().with(|zv: &mut Vec<f32>| {
                        held[3].get().with(|p: &mut Vec<f32>| {
                            held[4].get().with(|off: &mut Vec<i64>| {
                                let off = first_n(off, n_events + 1, &what)?;
                                for (d, &s) in off.iter_mut().zip(&offsets) {
                                    *d = s as i64;
                                }
                                let _fill = timers::Guard::start_as(Part::Fill);
                                fill(
                                    &which,
                                    &offsets,
                                    first_n(idx, 3 * n, &what)?,
                                    first_n(w, n, &what)?,
                                    first_n(zv, n, &what)?,
                                    first_n(p, 5 * n, &what)?,
                                );
                                Ok(())
                            })
                        })
                    })
                })
            })?;
            Ok(offsets)
        });
        match r {
            Ok(offsets) => Ok(Columns { held, offsets }),
            Err(e) => {
                self.put_columns(held);
                Err(err(e))
            }
        }
    }

    fn put_columns(&self, held: [Py<Held>; 5]) {
        for (k, h) in KEYS.iter().zip(held) {
            self.outputs.put(k, h);
        }
    }

    /// The columns as arrays: all events together with the offsets.
    pub fn flat_seeds<'py>(&self, py: Python<'py>, c: Columns) -> PyResult<FlatSeeds<'py>> {
        let _views = timers::Guard::start();
        let r = flat_views(py, &c);
        self.put_columns(c.held);
        r
    }

    /// The columns as one [`SeedArrays`] per event (views of the columns).
    pub fn event_seeds<'py>(&self, py: Python<'py>, c: Columns) -> PyResult<Vec<SeedArrays<'py>>> {
        let _views = timers::Guard::start();
        let r = event_views(py, &c);
        self.put_columns(c.held);
        r
    }
}

/// [`Backend::flat_seeds`]' arrays.
fn flat_views<'py>(py: Python<'py>, c: &Columns) -> PyResult<FlatSeeds<'py>> {
    let n = *c.offsets.last().unwrap_or(&0);
    let e = c.offsets.len();
    let [s, w, z, p, o] = c.held.each_ref().map(|h| h.bind(py));
    // SAFETY: the holders are this call's alone (`Outputs::take` in `seed_columns`), last
    // changed there; the views are made after it, of their first `3n`, `n`, `n`, `5n` and
    // `e` elements, all written there.
    unsafe {
        Ok((
            s.get()
                .with(|v: &mut Vec<u32>| outputs::view(s, &v[..3 * n], [n, 3]))?,
            w.get()
                .with(|v: &mut Vec<f32>| outputs::view1(w, &v[..n]))?,
            z.get()
                .with(|v: &mut Vec<f32>| outputs::view1(z, &v[..n]))?,
            p.get()
                .with(|v: &mut Vec<f32>| outputs::view(p, &v[..5 * n], [n, 5]))?,
            o.get()
                .with(|v: &mut Vec<i64>| outputs::view1(o, &v[..e]))?,
        ))
    }
}

/// [`Backend::event_seeds`]' arrays.
fn event_views<'py>(py: Python<'py>, c: &Columns) -> PyResult<Vec<SeedArrays<'py>>> {
    let [s, w, z, p, _] = c.held.each_ref().map(|h| h.bind(py));
    s.get().with(|sv: &mut Vec<u32>| {
        w.get().with(|wv: &mut Vec<f32>| {
            z.get().with(|zv: &mut Vec<f32>| {
                p.get().with(|pv: &mut Vec<f32>| {
                    c.offsets
                        .windows(2)
                        .map(|r| {
                            let (lo, hi) = (r[0], r[1]);
                            let k = hi - lo;
                            // SAFETY: as in `flat_views`: views made after the last change,
                            // of rows `lo..hi` of the columns, written in `seed_columns`.
                            unsafe {
                                Ok((
                                    outputs::view(s, &sv[3 * lo..3 * hi], [k, 3])?,
                                    outputs::view1(w, &wv[lo..hi])?,
                                    outputs::view1(z, &zv[lo..hi])?,
                                    outputs::view(p, &pv[5 * lo..5 * hi], [k, 5])?,
                                ))
                            }
                        })
                        .collect::<PyResult<Vec<_>>>()
                })
            })
        })
    })
}

/// Lays the per-event outputs out into the columns, events in parallel (each writes its
/// own rows).
fn fill(
    which: &[Option<&SeedingOutput>],
    offsets: &[usize],
    mut idx: &mut [u32],
    mut w: &mut [f32],
    mut zv: &mut [f32],
    mut p: &mut [f32],
) {
    type Rows<'a> = (
        &'a SeedingOutput,
        &'a mut [u32],
        &'a mut [f32],
        &'a mut [f32],
        &'a mut [f32],
    );
    let mut parts: Vec<Rows<'_>> = Vec::with_capacity(which.len());
    for (e, o) in which.iter().enumerate() {
        let k = offsets[e + 1] - offsets[e];
        let (a, rest) = std::mem::take(&mut idx).split_at_mut(3 * k);
        idx = rest;
        let (b, rest) = std::mem::take(&mut w).split_at_mut(k);
        w = rest;
        let (c, rest) = std::mem::take(&mut zv).split_at_mut(k);
        zv = rest;
        let (d, rest) = std::mem::take(&mut p).split_at_mut(5 * k);
        p = rest;
        if let Some(o) = o {
            parts.push((o, a, b, c, d));
        }
    }
    parts.into_par_iter().for_each(|(o, idx, w, zv, p)| {
        for (i, s) in o.seeds.iter().enumerate() {
            idx[3 * i..3 * i + 3].copy_from_slice(&[s.bottom, s.middle, s.top]);
            w[i] = s.weight;
            zv[i] = s.z_vertex;
        }
        for (i, q) in o.params.iter().enumerate() {
            p[5 * i..5 * i + 5].copy_from_slice(&[q.loc0, q.loc1, q.phi, q.theta, q.qop]);
        }
    });
}
