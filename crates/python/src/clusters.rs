//! Clustering results into memory a backend reuses ([`crate::outputs`]): the library's
//! slice door (`cluster_events_into_slices`) writes into the pooled vectors with the GIL
//! released, and the results are numpy views of them: the whole batch (`Backend.cluster`) or
//! one pair per event (`Backend.cluster_files`).

use std::ops::Range;

use detkit::clustering::{ChargeCut, ClustersMut, DigisRef, Geometry};
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::errors::err;
use crate::outputs::{self, first_n};
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
                    run(b, digis, offsets, g, cut, c, p)
                })
            })
        });
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
