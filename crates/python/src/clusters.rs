//! Clustering results into memory a backend reuses ([`crate::outputs`]): the library's
//! slice door (`cluster_events_into_slices`) writes into the pooled vectors with the GIL
//! released, and the results are numpy views of them: the whole batch (`Backend.cluster`) or
//! one pair per event (`Backend.cluster_files`).

use std::ops::Range;

use detkit::clustering::{ChargeCut, ClustersMut, Digis, DigisRef, Geometry};
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::errors::err;
use crate::outputs::{self, first_n};
use crate::timers::{self, Part};
use crate::Backend;

/// `(clus, clus_in_module)` of a call or of one of its events.
pub type ClusterArrays<'py> = (Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<u32>>);

const CLUS: &str = "cluster.clus";
const PER_MODULE: &str = "cluster.clus_in_module";

thread_local! {
    /// The door's `module_first` output, which Python does not return: one buffer per
    /// calling thread, reused.
    static MODULE_FIRST: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The library's clustering of a batch into `clus` (the digi count) and `per_module`
/// (events × modules), without the GIL.
pub fn run(
    b: &detkit::Backend,
    digis: DigisRef<'_>,
    offsets: &[u32],
    g: &Geometry,
    cut: Option<ChargeCut>,
    clus: &mut [i32],
    per_module: &mut [u32],
) -> detkit::Result<()> {
    let slots = per_module.len();
    MODULE_FIRST.with(|first| {
        let mut first = first.borrow_mut();
        let first = first_n(&mut first, slots, &|| format!("{slots} module slots"))?;
        let out = ClustersMut {
            clus,
            clus_in_module: per_module,
            module_first: first,
        };
        b.cluster_events_into_slices(digis, offsets, g, cut, out)
            .map(drop)
    })
}

impl Backend {
    /// Clusters the batch into this backend's reused memory and returns views of it: one
    /// pair per entry of `parts` (ranges of digis and of module slots).
    pub fn cluster_pooled<'py>(
        &self,
        py: Python<'py>,
        digis: DigisRef<'_>,
        offsets: &[u32],
        g: &Geometry,
        cut: Option<ChargeCut>,
        parts: &[(Range<usize>, Range<usize>)],
    ) -> PyResult<Vec<ClusterArrays<'py>>> {
        let n = digis.len();
        let events = offsets.len().saturating_sub(1);
        let slots = events.saturating_mul(g.modules as usize);
        let hc = self.outputs.take::<i32>(py, CLUS)?;
        let hp = self.outputs.take::<u32>(py, PER_MODULE)?;
        let b = self.inner();
        let r = py.detach(|| {
            hc.get().with(|c: &mut Vec<i32>| {
                hp.get().with(|p: &mut Vec<u32>| {
                    let c = first_n(c, n, &|| format!("{n} digis"))?;
                    let p = first_n(p, slots, &|| format!("{events} events"))?;
                    timers::time(Part::Door, || run(b, digis, offsets, g, cut, c, p))
                })
            })
        });
        let _views = timers::Guard::start();
        let views = r.map_err(err).and_then(|()| {
            let (bc, bp) = (hc.bind(py), hp.bind(py));
            bc.get().with(|c: &mut Vec<i32>| {
                bp.get().with(|p: &mut Vec<u32>| {
                    parts
                        .iter()
                        .map(|(dr, sr)| {
                            // SAFETY: the holders are this call's alone (`take`), last
                            // changed by the door above; the views are made after it.
                            unsafe {
                                Ok((
                                    outputs::view1(bc, &c[dr.clone()])?,
                                    outputs::view1(bp, &p[sr.clone()])?,
                                ))
                            }
                        })
                        .collect::<PyResult<Vec<_>>>()
                })
            })
        });
        self.outputs.put(CLUS, hc);
        self.outputs.put(PER_MODULE, hp);
        views
    }
}

/// The digis of several files side by side in `all` (its vectors reused: resized to the
/// total, every element then overwritten), the files copied in parallel; returns the event
/// offsets.
pub fn concat(files: &[&Digis], all: &mut Digis) -> Vec<u32> {
    use rayon::prelude::*;
    let mut offsets = Vec::with_capacity(files.len() + 1);
    offsets.push(0u32);
    let mut total = 0usize;
    for d in files {
        total += d.len();
        // Past u32 the door refuses the batch (its offsets no longer match the digis).
        offsets.push(u32::try_from(total).unwrap_or(u32::MAX));
    }
    let cols = [&mut all.module, &mut all.x, &mut all.y, &mut all.adc];
    let mut parts: Vec<(&Digis, usize, &mut [u16])> = Vec::with_capacity(4 * files.len());
    for (c, col) in cols.into_iter().enumerate() {
        col.resize(total, 0);
        let mut rest = &mut col[..];
        for d in files {
            let (mine, more) = std::mem::take(&mut rest).split_at_mut(d.len());
            rest = more;
            parts.push((d, c, mine));
        }
    }
    parts.into_par_iter().for_each(|(d, c, dst)| {
        let src = match c {
            0 => &d.module,
            1 => &d.x,
            2 => &d.y,
            _ => &d.adc,
        };
        dst.copy_from_slice(src);
    });
    offsets
}
