//! Seeding of spacepoints that are already on the device as five `f32` columns per event
//! (CuPy or PyTorch arrays, another library's output): borrowed device views in, device
//! buffers out, no host round trip. What the Python layer calls for CUDA arrays.
//!
//! One kernel (`seeding_interleave_columns`) reads every event's five columns through a
//! table of their addresses and writes the batch's [`SpacePoint`] records into the
//! workspace's input buffer, checking each with [`k::spacepoint_ok`] (finite coordinates,
//! finite non-negative variances) and recording the smallest bad index in a status word.
//! The status word is read before the chain runs (one small wait): on a bad spacepoint the
//! record is read back and named by the host's own check, so the error is exactly the host
//! path's (the same typed error, index within its event, column and message). Then the
//! chain runs on the device ([`GpuContext::seed_batch_device`]) and the seeds and
//! parameters are copied device-to-device into new buffers of exactly their size (from
//! detkit's output pool, [`crate::outputs`]).

use std::marker::PhantomData;
use std::ops::Range;

use detkit_gpu::histogram::decode_first_index;
use detkit_gpu::seeding::{self as k, BoundParams, Seed, SpacePoint};

use super::cuda::SeedingWorkspace;
use super::door::SeedWorkspace;
use super::{check_config, check_one, SeedingConfig, SeedingOutput, SeedingStats};
use crate::cuda::{DeviceBuffer, DeviceVec, GpuContext, Record};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::phases::{self, Phase};
use crate::staging::{upload_into, Pinned};
use crate::Backend;

/// One event's spacepoints on the device as five borrowed `f32` columns (x, y, z, var_r,
/// var_z, in that order): device addresses in the backend's context (the device's primary
/// context) and their lengths. What [`Backend::seed_events_device`] takes. The lifetime `'a`
/// is the borrow of the memory: nobody may write or free it while a call that takes this
/// view runs.
#[derive(Clone, Copy, Debug)]
pub struct SpacePointsDev<'a> {
    addr: [u64; 5],
    lens: [usize; 5],
    _memory: PhantomData<&'a [f32]>,
}

impl<'a> SpacePointsDev<'a> {
    /// A view of five device columns given by address and length (x, y, z, var_r, var_z).
    ///
    /// # Safety
    /// For each column, `addr` is a device address in the context of the backend this view
    /// is given to, aligned to 4 bytes and valid for reads of `len` `f32` values (any
    /// address when `len` is 0); the memory stays allocated and is not written by anyone
    /// from the moment the view is given to a call until that call returns. Work producing
    /// it on another stream is ordered before the backend's stream.
    pub unsafe fn from_raw(addr: [u64; 5], lens: [usize; 5]) -> Self {
        Self {
            addr,
            lens,
            _memory: PhantomData,
        }
    }

    /// A view of five device buffers of this process (x, y, z, var_r, var_z), all their
    /// elements. Safe: the buffers are borrowed for `'a`.
    pub fn from_buffers(gpu: &GpuContext, columns: [&'a DeviceBuffer<f32>; 5]) -> Self {
        Self {
            addr: columns.map(|b| gpu.ptr(b).addr()),
            lens: columns.map(|b| b.len()),
            _memory: PhantomData,
        }
    }

    /// Number of spacepoints (of `x`; the call checks that the other columns agree).
    pub fn len(&self) -> usize {
        self.lens[0]
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.lens[0] == 0
    }

    /// The host path's check of the column lengths (the same message).
    fn check_lengths(&self) -> Result<()> {
        let (n, l) = (self.lens[0], &self.lens[1..]);
        if l.iter().any(|&x| x != n) {
            return Err(invalid(
                "spacepoints",
                format!(
                    "columns of different lengths: x {n}, y {}, z {}, var_r {}, var_z {}",
                    l[0], l[1], l[2], l[3]
                ),
            ));
        }
        if n as u64 >= 1 << 31 {
            return Err(invalid(
                "spacepoints",
                format!("{n} spacepoints; at most 2^31 - 1 are supported"),
            ));
        }
        Ok(())
    }
}

/// Seeds of a batch on the device: new buffers owned by the caller. Event `e`'s seeds are
/// the records `event_seeds[e]` of `seeds` (`Seed`: bottom, middle, top, weight, z_vertex;
/// 20 bytes) and of `params` (`BoundParams`: 5 `f32`); each buffer holds at least one record.
pub struct SeedsDev {
    /// The `Seed` records (a typed device vector).
    pub seeds: DeviceVec<Seed>,
    /// The `BoundParams` records.
    pub params: DeviceVec<BoundParams>,
    /// Per event, its range of records.
    pub event_seeds: Vec<Range<usize>>,
    /// Per event, its stage counts.
    pub stats: Vec<SeedingStats>,
}

impl SeedsDev {
    /// Number of seeds of the batch.
    pub fn total(&self) -> usize {
        self.event_seeds.last().map_or(0, |r| r.end)
    }

    /// The results copied to the host (synchronises), one output per event.
    pub fn to_host(&self, gpu: &GpuContext) -> Result<Vec<SeedingOutput>> {
        let s = gpu.download(&self.seeds)?;
        let p = gpu.download(&self.params)?;
        let ns = self.total();
        let (all_s, all_p): (&[Seed], &[BoundParams]) = if ns == 0 {
            (&[], &[])
        } else {
            (
                Record::unwrap_slice(&s[..ns]),
                Record::unwrap_slice(&p[..ns]),
            )
        };
        Ok(self
            .event_seeds
            .iter()
            .zip(&self.stats)
            .map(|(r, st)| SeedingOutput {
                seeds: all_s[r.clone()].to_vec(),
                params: all_p[r.clone()].to_vec(),
                stats: *st,
            })
            .collect())
    }
}

/// The buffers of the device-view calls in a seeding workspace: the column table (device
/// and pinned), `[bad, event offsets…]` (device and pinned), the status word read back.
pub(crate) struct ViewBuffers {
    table: Option<DeviceBuffer<u64>>,
    words: Option<DeviceBuffer<u32>>,
    table_pin: Pinned<u64>,
    words_pin: Pinned<u32>,
    status: Pinned<u32>,
}

impl Default for ViewBuffers {
    fn default() -> Self {
        Self {
            table: None,
            words: None,
            table_pin: Pinned::new(true),
            words_pin: Pinned::new(true),
            status: Pinned::new(false),
        }
    }
}

/// `slot` holding at least `n` elements (grown by half again, never shrunk).
fn grown<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    g: &GpuContext,
    slot: &mut Option<DeviceBuffer<T>>,
    n: usize,
) -> Result<()> {
    let have = slot.as_ref().map_or(0, |b| b.len());
    if have < n {
        *slot = None;
        *slot = Some(g.zeros::<T>(n.max(have + have / 2))?);
    }
    Ok(())
}

impl SeedWorkspace {
    /// Seeds events given as device columns (see the module doc); `caller` is the backend's
    /// context, whose stream the inputs are ordered on.
    pub(crate) fn seed_device_views(
        &mut self,
        caller: &GpuContext,
        events: &[SpacePointsDev<'_>],
        cfg: &SeedingConfig,
    ) -> Result<SeedsDev> {
        phases::begin();
        let g = self.gpu.clone();
        let (ws, v) = (&mut self.ws, &mut self.views);
        let ne = events.len();
        let mut offsets = Vec::with_capacity(ne + 1);
        offsets.push(0usize);
        for e in events {
            offsets.push(offsets[offsets.len() - 1] + e.len());
        }
        let n = offsets[ne];
        if n as u64 >= 1 << 31 {
            return Err(invalid(
                "spacepoints",
                format!("{n} spacepoints in the batch; at most 2^31 - 1 are supported"),
            ));
        }
        let s = g.stream();
        crate::outputs::order_after(s, caller.stream())?;
        ws.b.input.ensure(&g, n)?;
        phases::mark(Phase::Prepare);
        if n > 0 {
            grown(&g, &mut v.table, 5 * ne)?;
            grown(&g, &mut v.words, ne + 2)?;
            let table = v.table_pin.get(&g, 5 * ne)?;
            for (t, e) in table.chunks_mut(5).zip(events) {
                t.copy_from_slice(&e.addr);
            }
            let w = v.words_pin.get(&g, ne + 2)?;
            w[0] = 0;
            for (d, &o) in w[1..].iter_mut().zip(&offsets) {
                *d = o as u32;
            }
            let (dt, dw) = (
                v.table.as_mut().expect("grown"),
                v.words.as_mut().expect("grown"),
            );
            upload_into(&g, &table[..5 * ne], &mut dt.slice_mut(0..5 * ne), None)?;
            upload_into(&g, &w[..ne + 2], &mut dw.slice_mut(0..ne + 2), None)?;
            let params = k::SeedingInterleaveColumnsParams {
                columns: g.ptr(&*dt),
                ev_off: g.ptr(&dw.slice(1..ne + 2)),
                n: n as u64,
                sps: g.ptr(ws.b.input.get()).cast(),
                bad: g.ptr_mut(&mut dw.slice_mut(0..1)),
                n_events: ne as u32,
                _pad0: 0,
            };
            // SAFETY: the table holds `5 ne` addresses, event `e`'s five valid for its
            // `lens[0]` values (`SpacePointsDev::from_raw`'s contract; lengths checked by
            // the caller); `ev_off` `ne + 1` offsets from 0 to `n < 2^31`; the input buffer
            // holds `n` records (ensured above) and is the workspace's own, not a column;
            // `bad` one word, zeroed by the upload above; one thread per spacepoint.
            unsafe {
                g.launch(
                    k::KERNEL_INTERLEAVE_COLUMNS,
                    ws.plan().items(n as u64),
                    &params,
                )?
            };
            let status = v.status.get(&g, 1)?;
            s.memcpy_dtoh(&dw.slice(0..1), &mut status[..1])
                .ctx("reading the spacepoint check")?;
            phases::mark(Phase::Stage);
            g.synchronize()?;
            phases::mark(Phase::Wait);
            if let Some(bad) = decode_first_index(status[0]) {
                return Err(name_bad(&g, ws, &offsets, bad as usize));
            }
        }
        let stats = {
            let input = std::mem::take(&mut ws.b.input);
            let r = g.seed_batch_device(ws, cfg, input.get(), &offsets, None);
            ws.b.input = input;
            r?
        };
        phases::mark(Phase::Kernels);
        let ns = ws.total_seeds();
        // SAFETY: the first `ns` records (all that are read: `event_seeds` covers them) are
        // written by the copies below, before this returns; with no seed the one record of
        // each is never read.
        let (mut seeds, mut params) = unsafe {
            (
                crate::outputs::alloc_output::<Record<Seed>>(&g, ns)?,
                crate::outputs::alloc_output::<Record<BoundParams>>(&g, ns)?,
            )
        };
        if ns > 0 {
            let (a, b) = (
                ws.seeds().expect("seeds of the chain"),
                ws.params().expect("parameters of the chain"),
            );
            s.memcpy_dtod(&a.slice(..ns), &mut seeds.slice_mut(..ns))
                .ctx("copying seeds")?;
            s.memcpy_dtod(&b.slice(..ns), &mut params.slice_mut(..ns))
                .ctx("copying parameters")?;
            g.synchronize()?;
        }
        phases::mark(Phase::Unpack);
        Ok(SeedsDev {
            seeds,
            params,
            event_seeds: ws.event_seeds().to_vec(),
            stats,
        })
    }
}

/// The host path's error for the spacepoint at batch index `bad` (its record read back from
/// the input buffer, named by the host's check with its index within its event).
fn name_bad(g: &GpuContext, ws: &SeedingWorkspace, offsets: &[usize], bad: usize) -> Error {
    let e = offsets.partition_point(|&o| o <= bad) - 1;
    let rec = match g
        .stream()
        .clone_dtoh(&ws.b.input.get().slice(bad..bad + 1))
        .ctx("reading a bad spacepoint")
    {
        Ok(r) => r,
        Err(err) => return err,
    };
    let sp: SpacePoint = rec[0].0;
    match check_one(bad - offsets[e], &sp) {
        Err(err) => err,
        Ok(()) => invalid(
            "spacepoints",
            format!(
                "spacepoint {} of event {e} failed the device check",
                bad - offsets[e]
            ),
        ),
    }
}

impl Backend {
    /// Seeds events whose spacepoints are on the device ([`SpacePointsDev`]: five borrowed
    /// device columns per event) into device buffers ([`SeedsDev`]), with no host round trip:
    /// the seeds, parameters and counts of [`Backend::seed_columns_into`] on the same
    /// columns, bit for bit, and the same typed error for a bad spacepoint (non-finite
    /// coordinate, negative or non-finite variance), checked on the device. The inputs are
    /// read in the order of the backend's stream; the results are complete when this
    /// returns. Events may be empty (no seeds). CUDA backends only.
    pub fn seed_events_device(
        &self,
        events: &[SpacePointsDev<'_>],
        cfg: &SeedingConfig,
    ) -> Result<SeedsDev> {
        check_config(cfg)?;
        for e in events {
            e.check_lengths()?;
        }
        let Some(gpu) = self.gpu() else {
            return Err(invalid(
                "spacepoints",
                "device spacepoints need a CUDA backend (this one runs on the CPU)",
            ));
        };
        if events.is_empty() {
            return Ok(SeedsDev {
                seeds: gpu.zeros(1)?,
                params: gpu.zeros(1)?,
                event_seeds: Vec::new(),
                stats: Vec::new(),
            });
        }
        self.ws.seeding.run(
            gpu,
            || SeedWorkspace::new(gpu, &self.seed_plan),
            |w| w.seed_device_views(gpu, events, cfg),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device's predicate ([`k::spacepoint_ok`]) accepts exactly what the host's check
    /// accepts, for every field and every awkward value (NaN, ±inf, ±0, negatives, the
    /// largest and smallest floats).
    #[test]
    fn device_predicate_is_the_host_check() {
        let values = [
            0.0f32,
            -0.0,
            1.5,
            -1.5,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1e-45,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
        ];
        for field in 0..5 {
            for &v in &values {
                let mut f = [1.0f32, 2.0, 3.0, 0.5, 0.25];
                f[field] = v;
                let sp = SpacePoint {
                    x: f[0],
                    y: f[1],
                    z: f[2],
                    var_r: f[3],
                    var_z: f[4],
                };
                assert_eq!(
                    k::spacepoint_ok(&sp),
                    check_one(7, &sp).is_ok(),
                    "field {field}, value {v}"
                );
            }
        }
    }

    /// Column lengths: the host path's message.
    #[test]
    fn lengths_as_the_host_path() {
        // SAFETY: the view is only checked, never read.
        let v = unsafe { SpacePointsDev::from_raw([0; 5], [3, 3, 2, 3, 3]) };
        let (x, y, z, r) = ([0f32; 3], [0f32; 3], [0f32; 2], [0f32; 3]);
        let host = super::super::SpacePointsRef {
            x: &x,
            y: &y,
            z: &z,
            var_r: &r,
            var_z: &r,
        };
        assert_eq!(
            v.check_lengths().map_err(|e| e.to_string()),
            host.check_lengths().map_err(|e| e.to_string())
        );
        assert!(v.check_lengths().is_err());
        assert!(Backend::cpu()
            .seed_events_device(
                &[v],
                &super::super::SeedingSettings::default()
                    .to_config()
                    .unwrap()
            )
            .is_err());
    }
}
