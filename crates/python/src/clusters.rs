//! Clustering results into memory a backend reuses ([`crate::outputs`]): the library's
//! slice door (`cluster_events_into_slices`) writes into the pooled vectors with the GIL
//! released, and the results are numpy views of them: the whole batch (`Backend.cluster`) or
//! one pair per event (`Backend.cluster_files`). On a CUDA backend the results are in pinned
//! memory the backend recycles (`pinned::ResultPools`): the door DMAs into it directly.

use std::ops::Range;

use detkit::clustering::{ChargeCut, ClustersMut, Digis, DigisRef, Geometry};
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::errors::err;
use crate::outputs::{self, first_n};
use crate::pinned::{self, PinnedResult};
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
        let b = self.inner();
        if let Some((pc, pp)) = self.results_pinned.for_call(b) {
            // Pinned memory the backend recycles: the door DMAs the cluster indices straight
            // into it; each buffer goes back to the pool when its last view is gone.
            let (c, p) = py
                .detach(|| {
                    let (mut c, mut p) = (pc.take(n)?, pp.take(slots)?);
                    timers::time(Part::Door, || {
                        run(b, digis, offsets, g, cut, &mut c, &mut p)
                    })?;
                    Ok((c, p))
                })
                .map_err(err)?;
            let _views = timers::Guard::start();
            let (oc, op) = (PinnedResult::new(py, c)?, PinnedResult::new(py, p)?);
            return parts
                .iter()
                .map(|(dr, sr)| {
                    Ok((
                        pinned::view(&oc, dr.clone())?,
                        pinned::view(&op, sr.clone())?,
                    ))
                })
                .collect();
        }
        let hc = self.outputs.take::<i32>(py, CLUS)?;
        let hp = self.outputs.take::<u32>(py, PER_MODULE)?;
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

/// A file of a `cluster_files` batch once read: binary (its digi count, decoded later from
/// its bytes) or parsed CSV.
enum Read {
    Binary(usize),
    Csv(Digis),
}

/// Reads the digis files `paths` (`detkit.io.read_digis`'s formats, errors and messages) side
/// by side into `all`: every file's bytes into its buffer of `bufs` (kept by the backend, so
/// a worker's next batch reads into memory already mapped), then every binary file decoded
/// straight into its place in `all` (no vector per file), in parallel. Returns each file's
/// range of digis in `all`, or its error.
pub fn read_files(
    paths: &[std::path::PathBuf],
    bufs: &mut Vec<Vec<u8>>,
    all: &mut Digis,
) -> Vec<PyResult<Range<usize>>> {
    use detkit::clustering as cl;
    use rayon::prelude::*;
    let read: Vec<PyResult<Read>> = crate::io::read_kept(paths, bufs, |p, buf| {
        if buf.starts_with(cl::BINARY_MAGIC) {
            cl::io::binary_count(buf, "binary digis")
                .map(Read::Binary)
                .map_err(|e| crate::errors::format_err(p, e))
        } else {
            cl::read_csv(buf, &p.display().to_string())
                .map(Read::Csv)
                .map_err(err)
        }
    });
    let bufs = &bufs[..paths.len()];
    let mut total = 0;
    let ranges: Vec<Option<Range<usize>>> = read
        .iter()
        .map(|r| {
            r.as_ref().ok().map(|f| {
                let n = match f {
                    Read::Binary(n) => *n,
                    Read::Csv(d) => d.len(),
                };
                total += n;
                total - n..total
            })
        })
        .collect();
    for col in [&mut all.module, &mut all.x, &mut all.y, &mut all.adc] {
        col.resize(total, 0);
    }
    let mut rest = [
        &mut all.module[..],
        &mut all.x[..],
        &mut all.y[..],
        &mut all.adc[..],
    ];
    type Part<'a> = (&'a Read, &'a [u8], [&'a mut [u16]; 4]);
    let mut parts: Vec<Part<'_>> = Vec::with_capacity(paths.len());
    for ((r, buf), range) in read.iter().zip(bufs).zip(&ranges) {
        let (Ok(f), Some(range)) = (r, range) else {
            continue;
        };
        let n = range.len();
        let dst = rest.each_mut().map(|c| {
            let (mine, more) = std::mem::take(c).split_at_mut(n);
            *c = more;
            mine
        });
        parts.push((f, buf, dst));
    }
    parts.into_par_iter().for_each(|(f, buf, dst)| match f {
        // Checked by `binary_count` above: the lengths agree, so this cannot fail.
        Read::Binary(_) => {
            let _ = cl::io::read_binary_bytes_into(buf, "binary digis", dst);
        }
        Read::Csv(d) => {
            for (dst, src) in dst.into_iter().zip([&d.module, &d.x, &d.y, &d.adc]) {
                dst.copy_from_slice(src);
            }
        }
    });
    read.into_iter()
        .zip(ranges)
        .map(|(r, range)| r.map(|_| range.expect("a range per file read")))
        .collect()
}
