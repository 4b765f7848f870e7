//! Seeding results as numpy arrays: the library's per-event outputs (seeds and parameters
//! as records) laid out once into flat columns that a backend reuses ([`crate::outputs`]):
//! `seeds (N, 3)` uint32, `weight (N)`, `z_vertex (N)` float32, `params (N, 5)` float32 and
//! `offsets (E + 1)` int64, event `e` being rows `offsets[e] .. offsets[e + 1]`. The
//! per-event results of `Backend.seed` / `seed_events` are views of these columns (no copy
//! per event); `Backend.seed_events_flat` returns the columns themselves.

use detkit::seeding::{SeedingConfig, SeedingOutput, SpacePoint, SpacePointsRef};
use numpy::{PyArray1, PyArray2};
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
