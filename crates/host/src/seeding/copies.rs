//! The seeding door's host copies on a [`Crew`]: the events' spacepoints into pinned memory
//! (checked on the way, each piece's DMA issued as soon as its parts are in), and the seeds
//! and parameters out of pinned memory into the callers' vectors.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::crew::{Crew, CrewStats, Segments};
use super::SeedingOutput;
use super::{
    check_len, check_piece, check_spacepoints, BoundParams, Seed, SpacePoint, SpacePointsRef,
};
use crate::cuda::GpuContext;
use crate::error::{DriverContext, Error, Result};
use std::ops::Range;

/// Bytes per part of a copy: small enough that helpers arriving late still find parts left
/// in a copy of one event (~0.8 MB), large enough that handing one out costs little.
const PART_BYTES: usize = 32 << 10;

/// Bytes per DMA of the upload for an input of `total` bytes: a few DMAs for one event, so
/// the copy engine starts while later parts are copied: a quarter of the input, at least
/// 256 KiB, at most 2 MiB.
fn piece_bytes(total: usize) -> usize {
    (total / 4).clamp(256 << 10, 2 << 20).div_ceil(PART_BYTES) * PART_BYTES
}

/// Copies the events `srcs` (side by side) into pinned `pin` and on to the device at `base`
/// (a buffer of at least their total), on `crew`: parts of [`PART_BYTES`] over the
/// concatenated events, each tested right after its copy (the test of [`check_spacepoints`];
/// not rows checked already), the DMA of each piece issued by the thread that completes it.
/// A bad part stops the copy; the DMAs issued are waited for and the error is the first
/// event's [`check_spacepoints`] error in event order, as a check before the copy gives.
pub(crate) fn upload_events(
    gpu: &GpuContext,
    srcs: Sources<'_>,
    pin: &mut [crate::cuda::Record<SpacePoint>],
    base: u64,
    crew: Crew,
) -> Result<CrewStats> {
    let what = "uploading spacepoints";
    // Lengths first (a copy must not read past a column); on a fault, every event's whole
    // check in order, so the error is the one a check before the copy gives.
    if (0..srcs.count()).any(|e| srcs.check_shape(e).is_err()) {
        srcs.first_error()?;
    }
    let count = srcs.count();
    let mut offsets = Vec::with_capacity(count + 1);
    offsets.push(0usize);
    for e in 0..count {
        offsets.push(offsets[e] + srcs.len(e));
    }
    let n = offsets[count];
    if pin.len() < n {
        return Err(crate::error::invalid(
            "upload",
            format!("{n} spacepoints through a stage of {}", pin.len()),
        ));
    }
    if n == 0 {
        return Ok(CrewStats::default());
    }
    let size = std::mem::size_of::<SpacePoint>();
    let part = (PART_BYTES / size).max(1);
    let per_piece = (piece_bytes(n * size) / PART_BYTES).max(1);
    let n_parts = n.div_ceil(part);
    let left: Vec<AtomicUsize> = (0..n_parts.div_ceil(per_piece))
        .map(|j| AtomicUsize::new(((j + 1) * per_piece).min(n_parts) - j * per_piece))
        .collect();
    let pin_ptr = pin.as_mut_ptr() as usize;
    let found = AtomicBool::new(false);
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    let s = gpu.stream();
    gpu.context().bind_to_thread().ctx(what)?;
    let stats = crew.run(n_parts, &|k| {
        let (lo, hi) = (k * part, ((k + 1) * part).min(n));
        let mut e = offsets.partition_point(|&o| o <= lo) - 1;
        let mut at = lo;
        while at < hi {
            let end = offsets[e + 1].min(hi);
            if end > at {
                // SAFETY: `at..end` lies inside the stage (`n` elements from `pin_ptr`), part
                // `k` is handed to this thread only, and its piece's DMA reads it only after
                // this copy (ordered by the piece's counter below).
                let dst = unsafe {
                    std::slice::from_raw_parts_mut((pin_ptr as *mut SpacePoint).add(at), end - at)
                };
                if srcs.copy(e, at - offsets[e], dst) {
                    found.store(true, Ordering::Relaxed);
                    return false;
                }
                at = end;
            }
            e += 1;
        }
        let j = k / per_piece;
        if left[j].fetch_sub(1, Ordering::AcqRel) == 1 {
            // The piece's last part: every part of it is in the stage (the other threads'
            // copies happen before their decrements, acquired above).
            let (plo, phi) = (j * per_piece * part, ((j + 1) * per_piece * part).min(n));
            let r = gpu.context().bind_to_thread().ctx(what).and_then(|()| {
                // SAFETY: `plo..phi` lies inside the stage and was written (see above); no
                // thread writes it again during this call.
                let host = unsafe {
                    std::slice::from_raw_parts(
                        (pin_ptr as *const crate::cuda::Record<SpacePoint>).add(plo),
                        phi - plo,
                    )
                };
                // SAFETY: the device buffer at `base` holds at least `n` spacepoints, so
                // `plo..phi` lies inside it; the pinned piece is not written again until the
                // stream has finished this copy (the door waits before reusing its stage).
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(
                        base + (plo * size) as u64,
                        host,
                        s.cu_stream(),
                    )
                }
                .ctx(what)
            });
            if let Err(e) = r {
                failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
                return false;
            }
        }
        true
    });
    let failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    if failed.is_some() || found.load(Ordering::Relaxed) {
        // The DMAs issued read the stage: wait for them before it can be reused.
        let _ = s.synchronize();
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if found.load(Ordering::Relaxed) {
        srcs.first_error()?;
        return Err(crate::error::invalid(
            "spacepoints",
            "a part failed its check",
        ));
    }
    Ok(stats)
}

/// The events of an upload: spacepoint slices (`true`: checked already) or five columns.
#[derive(Clone, Copy)]
pub(crate) enum Sources<'a> {
    Rows(&'a [&'a [SpacePoint]], bool),
    Columns(&'a [SpacePointsRef<'a>]),
}

impl Sources<'_> {
    fn count(&self) -> usize {
        match self {
            Sources::Rows(v, _) => v.len(),
            Sources::Columns(v) => v.len(),
        }
    }

    fn len(&self, e: usize) -> usize {
        match self {
            Sources::Rows(v, _) => v[e].len(),
            Sources::Columns(v) => v[e].len(),
        }
    }

    /// Event `e`'s checks that come before its values: the length limit, equal columns.
    fn check_shape(&self, e: usize) -> Result<()> {
        match self {
            Sources::Rows(v, _) => check_len(v[e]),
            Sources::Columns(v) => {
                v[e].check_lengths()?;
                check_len_n(v[e].len())
            }
        }
    }

    /// The first event's error, checking every event in order as the door's check of one
    /// event does ([`check_spacepoints`], [`SpacePointsRef::check_lengths`] first for
    /// columns); `Ok` if there is none.
    fn first_error(&self) -> Result<()> {
        match self {
            Sources::Rows(v, true) => v.iter().try_for_each(|e| check_len(e)),
            Sources::Rows(v, false) => v.iter().try_for_each(|e| check_spacepoints(e)),
            Sources::Columns(v) => v.iter().try_for_each(|c| {
                c.check_lengths()?;
                check_spacepoints(&c.to_vec())
            }),
        }
    }

    /// Copies event `e`'s spacepoints `at..at + dst.len()` into `dst` (its shape checked);
    /// whether one of them is bad (never for rows checked already).
    fn copy(&self, e: usize, at: usize, dst: &mut [SpacePoint]) -> bool {
        let r = at..at + dst.len();
        match self {
            Sources::Rows(v, checked) => {
                let src = &v[e][r];
                dst.copy_from_slice(src);
                !checked && check_piece(src, at).is_err()
            }
            Sources::Columns(v) => {
                let c = &v[e];
                let (x, y, z) = (&c.x[r.clone()], &c.y[r.clone()], &c.z[r.clone()]);
                let (var_r, var_z) = (&c.var_r[r.clone()], &c.var_z[r]);
                let mut bad = false;
                let cols = x.iter().zip(y).zip(z).zip(var_r).zip(var_z);
                for (slot, ((((&x, &y), &z), &var_r), &var_z)) in dst.iter_mut().zip(cols) {
                    bad |= !(x.is_finite()
                        & y.is_finite()
                        & z.is_finite()
                        & var_r.is_finite()
                        & var_z.is_finite()
                        & (var_r >= 0.0)
                        & (var_z >= 0.0));
                    *slot = SpacePoint {
                        x,
                        y,
                        z,
                        var_z,
                        var_r,
                    };
                }
                bad
            }
        }
    }
}

/// [`check_len`] for a count.
fn check_len_n(n: usize) -> Result<()> {
    if n as u64 >= 1 << 31 {
        return Err(crate::error::invalid(
            "spacepoints",
            format!("{n} spacepoints; at most 2^31 - 1 are supported"),
        ));
    }
    Ok(())
}

/// Makes each `outs[e]` hold the seeds and parameters `ranges[e]` of `seeds` / `params`
/// (their vectors' capacity reused, no zeroing), on `crew`: parts of [`PART_BYTES`] over all
/// the arrays, the calling thread starting at once.
pub(crate) fn copy_out(
    outs: &mut [SeedingOutput],
    ranges: &[Range<usize>],
    seeds: &[Seed],
    params: &[BoundParams],
    crew: Crew,
) -> CrewStats {
    let m = outs.len().min(ranges.len());
    let mut dst = Vec::with_capacity(m);
    for (o, r) in outs[..m].iter_mut().zip(ranges) {
        o.seeds.clear();
        o.seeds.reserve(r.len());
        o.params.clear();
        o.params.reserve(r.len());
        dst.push((
            o.seeds.as_mut_ptr() as usize,
            o.params.as_mut_ptr() as usize,
        ));
    }
    let part = (PART_BYTES / std::mem::size_of::<Seed>()).max(1);
    // Segment 2e: event e's seeds, 2e + 1 its parameters.
    let segs = Segments::new(ranges[..m].iter().flat_map(|r| [r.len(), r.len()]), part);
    let stats = crew.run(segs.parts(), &|k| {
        let (s, lo, hi) = segs.part(k);
        let (e, r) = (s / 2, &ranges[s / 2]);
        let (a, b) = (r.start + lo, r.start + hi);
        // SAFETY: each output vector has capacity for its range's length (reserved above),
        // `lo..hi` lies inside it, and part `k` is handed to one thread only; the vectors are
        // not otherwise used until every part is done (`run` returns after).
        unsafe {
            if s % 2 == 0 {
                std::ptr::copy_nonoverlapping(
                    seeds[a..b].as_ptr(),
                    (dst[e].0 as *mut Seed).add(lo),
                    hi - lo,
                )
            } else {
                std::ptr::copy_nonoverlapping(
                    params[a..b].as_ptr(),
                    (dst[e].1 as *mut BoundParams).add(lo),
                    hi - lo,
                )
            }
        };
        true
    });
    for (o, r) in outs[..m].iter_mut().zip(ranges) {
        // SAFETY: every element `0..r.len()` of both vectors was written above (the parts
        // cover every segment and `work` never stops), within their reserved capacity.
        unsafe {
            o.seeds.set_len(r.len());
            o.params.set_len(r.len());
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(i: usize) -> SpacePoint {
        SpacePoint {
            x: i as f32,
            y: -(i as f32),
            z: 0.5 * i as f32,
            var_z: 0.01,
            var_r: 0.02,
        }
    }

    /// Every event's seeds and parameters land in its output (sizes growing and shrinking,
    /// empty events, many parts), woken crews or not, no helper at all.
    #[test]
    fn copy_out_gives_each_event_its_range() {
        let total = 70_001usize;
        let seeds: Vec<Seed> = (0..total as u32)
            .map(|i| Seed {
                bottom: i,
                middle: i ^ 7,
                top: 3 * i,
                weight: i as f32,
                z_vertex: -(i as f32),
            })
            .collect();
        let params: Vec<BoundParams> = (0..total)
            .map(|i| BoundParams {
                loc0: i as f32,
                loc1: 1.0,
                phi: 2.0,
                theta: 3.0,
                qop: -(i as f32),
            })
            .collect();
        let mut outs: Vec<SeedingOutput> = Vec::new();
        for cuts in [
            vec![0usize, total],
            vec![0, 10, 10, 40_000, total],
            vec![0, 5],
            vec![0, 0],
            vec![0, 3_000, 3_277, 6_554, 60_000],
        ] {
            let ranges: Vec<Range<usize>> = cuts.windows(2).map(|w| w[0]..w[1]).collect();
            outs.resize_with(ranges.len(), SeedingOutput::default);
            for helpers in [0, crate::seeding::crew::max_helpers()] {
                let mut crew = Crew::new(helpers, "test", 0);
                if helpers > 0 {
                    crew.wake(std::time::Duration::from_millis(2));
                }
                copy_out(&mut outs, &ranges, &seeds, &params, crew);
                for (o, r) in outs.iter().zip(&ranges) {
                    assert!(o.seeds == seeds[r.clone()], "{cuts:?}");
                    assert!(o.params == params[r.clone()], "{cuts:?}");
                }
            }
        }
    }

    /// The sources copy what they hold and flag a bad part; the first error is the first
    /// event's whole check, for rows and columns alike.
    #[test]
    fn sources_copy_and_name_the_first_fault() {
        let a: Vec<SpacePoint> = (0..5000).map(sp).collect();
        let mut b: Vec<SpacePoint> = (0..3000).map(sp).collect();
        let mut c: Vec<SpacePoint> = (0..100).map(sp).collect();
        b[2500].var_r = -1.0;
        c[7].x = f32::NAN;
        let rows: Vec<&[SpacePoint]> = vec![&a, &b, &c];
        let cols: Vec<[Vec<f32>; 5]> = rows
            .iter()
            .map(|r| {
                [
                    r.iter().map(|s| s.x).collect(),
                    r.iter().map(|s| s.y).collect(),
                    r.iter().map(|s| s.z).collect(),
                    r.iter().map(|s| s.var_r).collect(),
                    r.iter().map(|s| s.var_z).collect(),
                ]
            })
            .collect();
        let refs: Vec<SpacePointsRef> = cols
            .iter()
            .map(|c| SpacePointsRef {
                x: &c[0],
                y: &c[1],
                z: &c[2],
                var_r: &c[3],
                var_z: &c[4],
            })
            .collect();
        let want = check_spacepoints(&b).unwrap_err().to_string();
        for src in [Sources::Rows(&rows, false), Sources::Columns(&refs)] {
            let mut dst = vec![SpacePoint::default(); 600];
            assert!(!src.copy(0, 100, &mut dst));
            assert!(dst == a[100..700]);
            assert!(!src.copy(1, 0, &mut dst));
            assert!(src.copy(1, 2400, &mut dst[..200]));
            assert_eq!(src.first_error().unwrap_err().to_string(), want);
            assert!(src.check_shape(1).is_ok());
        }
        // Rows checked already: no test on the way.
        let mut dst = vec![SpacePoint::default(); 200];
        assert!(!Sources::Rows(&rows, true).copy(1, 2400, &mut dst));
        assert!(Sources::Rows(&rows, true).first_error().is_ok());
        // Columns of different lengths: named before any value.
        let short = SpacePointsRef {
            y: &cols[0][1][..10],
            ..refs[0]
        };
        let bad_cols = [refs[0], short];
        let e = Sources::Columns(&bad_cols)
            .first_error()
            .unwrap_err()
            .to_string();
        assert_eq!(e, short.check_lengths().unwrap_err().to_string());
    }
}
