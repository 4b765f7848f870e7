//! Clustering of digis that are already on the device (a CuPy or PyTorch array, another
//! detkit call's output, the caller's own `cudaMalloc`): borrowed device views in, device
//! buffers out, no host round trip. What the Python layer calls for CUDA arrays.
//!
//! The call runs as one CUDA graph launch on the caller's memory ([`super::dev_graph`]):
//! the kernels read the four digi arrays in place and write three new output buffers of
//! exactly their size (they outlive the workspace's next call; from detkit's output pool,
//! [`crate::outputs`]); the graph also uploads the batch's sizes and event offsets (host
//! memory: `events + 1` words, through pinned words), runs the device checks below, and
//! copies four status words back. Per call on the host: the ordering after the caller's
//! stream (nothing when it is idle), three output allocations, the update of the kernel
//! nodes whose addresses changed, one graph launch and one wait. Where that graph cannot be
//! made (a kernel's parameters that cannot be relocated), the digis are copied device-to-device into
//! the workspace's [`DeviceDigis`], the cached chain graph is replayed, and the outputs are
//! copied out.
//!
//! Validation on the device: the array lengths and the event offsets are checked on the
//! host as for host digis. The per-digi range checks (module id, pixel inside the module)
//! are made by `clustering_count_modules` on the device, which records the smallest bad digi
//! index; when it reports one, the digis are copied back and [`super::validate`] runs on
//! them, so the error is exactly the host path's (the same typed error, message and index)
//! and costs a copy only on that path. That one module's digis are consecutive within an
//! event is checked by `clustering_check_runs` (every run start of a module counted per
//! event and module, a second run flagged), read back with the status words and named the
//! same way; a batch it flags is made empty on the device (`clustering_gate_runs`) before
//! the clustering kernels run, since they assume consecutive digis.

use std::marker::PhantomData;

use cudarc::driver::result;
use detkit_gpu::histogram::decode_first_index;

use super::dev_graph::{DevGraph, SLOTS};
use super::door::ClusterWorkspace;
use super::{validate, validate_lengths, ChargeCut, Digis, Geometry, MAX_EVENTS_PER_LAUNCH};
use crate::cuda::{DeviceBuffer, GpuContext};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::phases::{self, Phase};
use crate::staging::upload_into;
use crate::Backend;

/// Digis on the device as four borrowed arrays of `u16` (module, x, y, adc): device
/// addresses in the backend's context (the device's primary context, which CuPy, PyTorch,
/// Numba and `cuda.core` share) and their lengths. What
/// [`Backend::cluster_events_device`] takes. The lifetime `'a` is the borrow of the memory:
/// nobody may write or free it while a call that takes this view runs.
#[derive(Clone, Copy, Debug)]
pub struct DigisDev<'a> {
    addr: [u64; 4],
    lens: [usize; 4],
    _memory: PhantomData<&'a [u16]>,
}

impl<'a> DigisDev<'a> {
    /// A view of four device arrays given by address and length (module, x, y, adc).
    ///
    /// # Safety
    /// For each array, `addr` is a device address in the context of the backend this view
    /// is given to (the device's primary context), aligned to 2 bytes and valid for reads of
    /// `len` `u16` values (any address when `len` is 0); the memory stays allocated and is
    /// not written by anyone (host, kernel or copy on any stream) from the moment the view
    /// is given to a call until that call returns (`'a` covers at least that). Work that
    /// produces the memory on another stream must be ordered before the backend's stream
    /// (an event the backend's stream waits for), since the call reads it in the order of
    /// the backend's stream.
    pub unsafe fn from_raw(addr: [u64; 4], lens: [usize; 4]) -> Self {
        Self {
            addr,
            lens,
            _memory: PhantomData,
        }
    }

    /// A view of four device buffers of this process (module, x, y, adc), all their
    /// elements. Safe: the buffers are borrowed for `'a`, so nobody writes or frees them
    /// while the view lives, and cudarc orders the call after their pending writes.
    pub fn from_buffers(gpu: &GpuContext, arrays: [&'a DeviceBuffer<u16>; 4]) -> Self {
        let addr = arrays.map(|b| gpu.ptr(b).addr());
        Self {
            addr,
            lens: arrays.map(|b| b.len()),
            _memory: PhantomData,
        }
    }

    /// Number of digis (of `module`; the call checks that the other arrays agree).
    pub fn len(&self) -> usize {
        self.lens[0]
    }

    /// Whether there is no digi.
    pub fn is_empty(&self) -> bool {
        self.lens[0] == 0
    }
}

/// Event offsets on the device: a borrowed array of `u32` (`events + 1` boundaries, as for
/// [`Backend::cluster_events`]). What [`Backend::cluster_events_device_offsets`] takes: the
/// device-view graph reads them in place and checks them on the device (a bad list is read
/// back only to name the error), so the call needs no copy of them to the host.
#[derive(Clone, Copy, Debug)]
pub struct OffsetsDev<'a> {
    addr: u64,
    len: usize,
    _memory: PhantomData<&'a [u32]>,
}

impl<'a> OffsetsDev<'a> {
    /// A view of a device array of `len` `u32` values.
    ///
    /// # Safety
    /// As [`DigisDev::from_raw`], for one array of `u32` (4-byte aligned).
    pub unsafe fn from_raw(addr: u64, len: usize) -> Self {
        Self {
            addr,
            len,
            _memory: PhantomData,
        }
    }

    /// A view of a device buffer of this process, all its elements.
    pub fn from_buffer(gpu: &GpuContext, buffer: &'a DeviceBuffer<u32>) -> Self {
        Self {
            addr: gpu.ptr(buffer).addr(),
            len: buffer.len(),
            _memory: PhantomData,
        }
    }

    /// The offsets copied to the host on `g`'s stream (synchronously).
    fn to_host(self, g: &GpuContext) -> Result<Vec<u32>> {
        let what = "reading device event offsets";
        let mut words = vec![0u32; self.len];
        if self.len == 0 {
            return Ok(words);
        }
        let s = g.stream();
        g.context().bind_to_thread().ctx(what)?;
        // SAFETY: `addr` holds `len` values (`from_raw`'s contract), not written during the
        // call; `words` holds as many and outlives the copy (waited for below).
        unsafe { result::memcpy_dtoh_async(&mut words[..], self.addr, s.cu_stream()) }.ctx(what)?;
        s.synchronize().ctx(what)?;
        Ok(words)
    }
}

/// A call's event offsets: host memory, or a device array ([`OffsetsDev`]).
#[derive(Clone, Copy)]
pub(crate) enum Offsets<'a> {
    Host(&'a [u32]),
    Device(OffsetsDev<'a>),
}

impl Offsets<'_> {
    /// The offsets in host memory (a device array read back on `caller`'s stream).
    fn host(&self, caller: &GpuContext) -> Result<std::borrow::Cow<'_, [u32]>> {
        Ok(match self {
            Self::Host(o) => std::borrow::Cow::Borrowed(o),
            Self::Device(o) => std::borrow::Cow::Owned(o.to_host(caller)?),
        })
    }
}

/// Clustering results on the device: new buffers, owned by the caller (a Python
/// `DeviceArray` holds them). Each buffer holds at least one element; the first `digis`
/// (for `clus`) or `slots` (the other two) are the results, as in [`super::Clusters`].
pub struct ClustersDev {
    /// Per digi: cluster index within its module, or -1.
    pub clus: DeviceBuffer<i32>,
    /// Per event and module id (`e * modules + m`): number of clusters.
    pub clus_in_module: DeviceBuffer<u32>,
    /// Per event and module id: first digi index, or `u32::MAX` for an absent module.
    pub module_first: DeviceBuffer<u32>,
    /// Number of digis.
    pub digis: usize,
    /// `events × modules`.
    pub slots: usize,
    /// Module ids per event (the geometry's).
    pub modules: usize,
    /// As [`super::Clusters::medium_modules`].
    pub medium_modules: u32,
    /// As [`super::Clusters::fallback_modules`].
    pub fallback_modules: u32,
}

impl ClustersDev {
    /// The results copied to the host (synchronises), as [`super::Clusters`].
    pub fn to_host(&self, gpu: &GpuContext) -> Result<super::Clusters> {
        let mut clus = gpu.download(&self.clus)?;
        let mut clus_in_module = gpu.download(&self.clus_in_module)?;
        let mut module_first = gpu.download(&self.module_first)?;
        clus.truncate(self.digis);
        clus_in_module.truncate(self.slots);
        module_first.truncate(self.slots);
        Ok(super::Clusters {
            clus,
            clus_in_module,
            module_first,
            modules: self.modules,
            medium_modules: self.medium_modules,
            fallback_modules: self.fallback_modules,
        })
    }
}

/// Threads per block of the consecutive-digis check.
pub(super) const CHECK_THREADS: u32 = 256;

/// A new device buffer of `n` elements (at least one) from the output pool
/// ([`crate::outputs`]), whose first `n` are written by the caller before anyone reads them.
fn output<T: cudarc::driver::DeviceRepr>(g: &GpuContext, n: usize) -> Result<DeviceBuffer<T>> {
    // SAFETY: the elements read later (the first `n`) are written by the device-to-device
    // copies of `ClusterWorkspace::cluster_device` before the call returns; the rest (one
    // element when `n` is 0) is never read.
    unsafe { crate::outputs::alloc_output::<T>(g, n) }
}

/// The end of a device-view call, on either path: the four status words (the chain's
/// `bad`, `medium` and `fallback`, then the consecutive-digis check's) decoded into the
/// result, or into the host path's error for a bad digi (from a host copy of the caller's
/// digis, which stay unwritten until the call returns).
#[allow(clippy::too_many_arguments)]
fn finish(
    c: &super::clusterer::Clusterer,
    (g, caller): (&GpuContext, &GpuContext),
    digis: &DigisDev<'_>,
    event_offsets: Offsets<'_>,
    geometry: &Geometry,
    [bad, medium, fallback, runs, offsets_bad]: [u32; 5],
    n: usize,
    slots: usize,
    (clus, clus_in_module, module_first): (DeviceBuffer<i32>, DeviceBuffer<u32>, DeviceBuffer<u32>),
) -> Result<ClustersDev> {
    if offsets_bad != 0 {
        // Device offsets the begin kernel rejected (the batch ran empty): the host path's
        // error, from a host copy.
        validate_lengths(digis.lens, &event_offsets.host(caller)?, geometry)?;
        return Err(invalid(
            "event_offsets",
            "must start at 0, end at the digi count and never decrease (device check)",
        ));
    }
    if let Some(k) = decode_first_index(runs) {
        validate(
            &host_digis(g, digis)?,
            &event_offsets.host(caller)?,
            geometry,
        )?;
        return Err(invalid(
            "digis",
            format!("digi {k}: a module's digis not consecutive in its event"),
        ));
    }
    let (medium_modules, fallback_modules) = match c.decode_status(bad, medium, fallback) {
        Ok(counts) => counts,
        Err(Error::InvalidInput { what, detail }) => {
            // A digi out of range: the host path's error, from a host copy.
            validate(
                &host_digis(g, digis)?,
                &event_offsets.host(caller)?,
                geometry,
            )?;
            return Err(Error::InvalidInput { what, detail });
        }
        Err(e) => return Err(e),
    };
    Ok(ClustersDev {
        clus,
        clus_in_module,
        module_first,
        digis: n,
        slots,
        modules: geometry.modules as usize,
        medium_modules,
        fallback_modules,
    })
}

impl ClusterWorkspace {
    /// Clusters digis on the device (see the module doc): `caller` is the backend's context,
    /// whose stream the inputs are ordered on; the workspace's stream waits for it.
    pub(crate) fn cluster_device(
        &mut self,
        caller: &GpuContext,
        digis: DigisDev<'_>,
        offsets: Offsets<'_>,
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Result<ClustersDev> {
        phases::begin();
        let event_offsets = match offsets {
            Offsets::Host(o) => o,
            Offsets::Device(o) => {
                if let Some(r) = self.cluster_device_offsets(caller, digis, o, geometry, cut) {
                    return r;
                }
                // Not on the default graph: read back, then as host offsets.
                let host = o.to_host(caller)?;
                return self.cluster_device(caller, digis, Offsets::Host(&host), geometry, cut);
            }
        };
        validate_lengths(digis.lens, event_offsets, geometry)?;
        let (n, ne) = (digis.len(), event_offsets.len() - 1);
        if ne > MAX_EVENTS_PER_LAUNCH {
            return Err(Error::CapacityExceeded {
                what: "events per launch",
                needed: ne as u64,
                capacity: MAX_EVENTS_PER_LAUNCH as u64,
            });
        }
        self.select_clusterer(n, ne, geometry)?;
        if let Some(r) =
            self.cluster_device_graph(caller, digis, Offsets::Host(event_offsets), geometry, cut)
        {
            return r;
        }
        let (c, d, g, stage, check) = self.selected();
        phases::mark(Phase::Prepare);
        let s = g.stream();
        let what = "copying device digis";
        // The inputs were made (or ordered) on the caller's stream.
        crate::outputs::order_after(s, caller.stream())?;
        g.context().bind_to_thread().ctx(what)?;
        for (src, dst) in digis.addr.into_iter().zip(d.arrays_mut()) {
            // SAFETY: `src` is valid for `n` values and not written until this call returns
            // (`DigisDev::from_raw`'s contract, lengths checked above), in this context; the
            // workspace's stream waits at the end of this call.
            unsafe { g.copy_in_raw(src, dst, 2 * n, what) }?;
        }
        // The batch's sizes and event offsets, through the pinned words (the previous call
        // has finished with them: every call waits before it returns).
        let words = stage.words.get(g, ne + 3)?;
        words[0] = n as u32;
        words[1] = ne as u32;
        words[2..].copy_from_slice(event_offsets);
        upload_into(g, &words[..2], &mut d.dims, None)?;
        upload_into(
            g,
            &words[2..],
            &mut d.event_offsets.slice_mut(0..ne + 1),
            None,
        )?;
        d.n = n;
        d.nevents = ne;
        let slots = ne * geometry.modules as usize;
        // The check that each module's digis are consecutive within an event, and the gate
        // that empties a batch failing it on the device before the clustering kernels run
        // (so no wait between the check and the chain); its error is the host path's, from
        // a host copy of the digis, once the call waits.
        super::door::device_check(g, d, check, geometry)?;
        let mut clus = output::<i32>(g, n)?;
        let mut clus_in_module = output::<u32>(g, slots)?;
        let mut module_first = output::<u32>(g, slots)?;
        phases::mark(Phase::Stage);
        c.run_graph(d, cut)?;
        phases::mark(Phase::Kernels);
        let what = "copying the clusters";
        if n > 0 {
            s.memcpy_dtod(&c.clus.slice(0..n), &mut clus.slice_mut(0..n))
                .ctx(what)?;
        }
        s.memcpy_dtod(
            &c.clus_in_module.slice(0..slots),
            &mut clus_in_module.slice_mut(0..slots),
        )
        .ctx(what)?;
        s.memcpy_dtod(
            &c.module_first.slice(0..slots),
            &mut module_first.slice_mut(0..slots),
        )
        .ctx(what)?;
        // The chain's three status words and the check's word, then the call's one wait.
        let status = stage.slots.get(g, 4)?;
        c.enqueue_status(&mut status[..3])?;
        let check = check.as_ref().expect("device_check allocates it");
        s.memcpy_dtoh(&check.slice(0..1), &mut status[3..4])
            .ctx("reading the digi check")?;
        phases::mark(Phase::Unpack);
        g.synchronize()?;
        phases::mark(Phase::Wait);
        let words = [status[0], status[1], status[2], status[3], 0];
        finish(
            c,
            (g, caller),
            &digis,
            Offsets::Host(event_offsets),
            geometry,
            words,
            n,
            slots,
            (clus, clus_in_module, module_first),
        )
    }
}

impl ClusterWorkspace {
    /// [`ClusterWorkspace::cluster_device`] of device offsets on the default graph, which
    /// reads and checks them on the device; `None` where that graph is not used (a graph
    /// that cannot be made; fewer than two offsets or more events than a launch takes, whose
    /// errors the host path names): the caller reads them back.
    fn cluster_device_offsets(
        &mut self,
        caller: &GpuContext,
        digis: DigisDev<'_>,
        offsets: OffsetsDev<'_>,
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Option<Result<ClustersDev>> {
        if offsets.len < 2 || offsets.len - 1 > MAX_EVENTS_PER_LAUNCH {
            return None;
        }
        let n = digis.len();
        // The geometry, the lengths and the digi count, checked as with host offsets (before
        // the offsets there too); the offsets themselves on the device.
        if let Err(e) = validate_lengths(digis.lens, &[0, n as u32], geometry) {
            return Some(Err(e));
        }
        if let Err(e) = self.select_clusterer(n, offsets.len - 1, geometry) {
            return Some(Err(e));
        }
        self.cluster_device_graph(caller, digis, Offsets::Device(offsets), geometry, cut)
    }

    /// [`ClusterWorkspace::cluster_device`] as one launch of the selected clusterer's
    /// device-view graph on the caller's memory (see the module doc); `None` when that
    /// graph cannot be made (its kernel nodes could not be relocated): the caller copies.
    fn cluster_device_graph(
        &mut self,
        caller: &GpuContext,
        digis: DigisDev<'_>,
        event_offsets: Offsets<'_>,
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Option<Result<ClustersDev>> {
        let (c, d, g, _, _) = self.selected();
        let n = digis.len();
        let ne = match event_offsets {
            Offsets::Host(o) => o.len() - 1,
            Offsets::Device(o) => o.len - 1,
        };
        let mut run = || -> Result<Option<ClustersDev>> {
            let Some(dg) = DevGraph::get(c, d, geometry, cut)? else {
                return Ok(None);
            };
            let offsets_addr = match event_offsets {
                Offsets::Device(o) => o.addr,
                Offsets::Host(_) => dg.host_offsets_addr(),
            };
            phases::mark(Phase::Prepare);
            let s = g.stream();
            // The inputs were made (or ordered) on the caller's stream.
            crate::outputs::order_after(s, caller.stream())?;
            let words = dg.words();
            words[0] = n as u32;
            words[1] = ne as u32;
            if let Offsets::Host(o) = event_offsets {
                words[2..ne + 3].copy_from_slice(o);
            }
            d.n = n;
            d.nevents = ne;
            let slots = ne * geometry.modules as usize;
            let clus = output::<i32>(g, n)?;
            let clus_in_module = output::<u32>(g, slots)?;
            let module_first = output::<u32>(g, slots)?;
            let mut addrs = [0u64; SLOTS];
            addrs[..4].copy_from_slice(&digis.addr);
            addrs[4] = g.ptr(&clus).addr();
            addrs[5] = g.ptr(&clus_in_module).addr();
            addrs[6] = g.ptr(&module_first).addr();
            addrs[7] = offsets_addr;
            phases::mark(Phase::Stage);
            // SAFETY: the inputs hold `n` digis each (lengths checked) and device offsets
            // `ne + 1` words, none written until this call returns (`DigisDev::from_raw`'s
            // and `OffsetsDev::from_raw`'s contracts; the call waits below); the outputs
            // hold `n` and `slots` elements (at least one) and live until the wait; the
            // pinned words say `n` and `ne`.
            unsafe { dg.launch(addrs)? };
            phases::mark(Phase::Kernels);
            g.synchronize()?;
            phases::mark(Phase::Wait);
            let words = dg.status();
            let outputs = (clus, clus_in_module, module_first);
            finish(
                c,
                (g, caller),
                &digis,
                event_offsets,
                geometry,
                words,
                n,
                slots,
                outputs,
            )
            .map(Some)
        };
        run().transpose()
    }
}

/// The caller's device digis copied to the host (synchronously; error paths only).
fn host_digis(g: &GpuContext, digis: &DigisDev<'_>) -> Result<Digis> {
    let what = "copying device digis back for the error";
    let n = digis.len();
    let mut arrays: [Vec<u16>; 4] = Default::default();
    g.context().bind_to_thread().ctx(what)?;
    for (a, &addr) in arrays.iter_mut().zip(&digis.addr) {
        *a = vec![0u16; n];
        if n > 0 {
            // SAFETY: `addr` holds `n` values (`DigisDev`'s contract, lengths checked) and is
            // not written during the call; `a` holds `n` values; a synchronous copy.
            unsafe { result::memcpy_dtoh_sync(a.as_mut_slice(), addr) }.ctx(what)?;
        }
    }
    let [module, x, y, adc] = arrays;
    Ok(Digis { module, x, y, adc })
}

impl Backend {
    /// Clusters digis that are on the device ([`DigisDev`]: borrowed device arrays) into
    /// device buffers ([`ClustersDev`]), with no host round trip: the same results as
    /// [`Backend::cluster_events`] on the same digis, bit for bit, and the same typed error
    /// for bad input (module id or pixel out of range, a module's digis not consecutive in
    /// an event; checked on the device, named on the host). `event_offsets` (host memory) as
    /// for [`Backend::cluster_events`]. The inputs are read in the order of the backend's
    /// stream ([`GpuContext::stream`]); the results are complete when this returns. CUDA
    /// backends only (an `InvalidInput` error on the CPU).
    pub fn cluster_events_device(
        &self,
        digis: DigisDev<'_>,
        event_offsets: &[u32],
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Result<ClustersDev> {
        let Some(gpu) = self.gpu() else {
            return Err(invalid(
                "digis",
                "device digis need a CUDA backend (this one runs on the CPU)",
            ));
        };
        self.ws.clustering.run(
            gpu,
            || ClusterWorkspace::new(gpu, &self.cluster_tuning),
            |w| w.cluster_device(gpu, digis, Offsets::Host(event_offsets), geometry, cut),
        )
    }

    /// [`Backend::cluster_events_device`] with the event offsets on the device too
    /// ([`OffsetsDev`]): they are read and checked on the device by the call's graph, not
    /// copied to the host first (a copy and a wait fewer per call); bad offsets give the
    /// host path's typed error (read back only then). The same results and errors as
    /// [`Backend::cluster_events_device`] with the offsets in host memory.
    pub fn cluster_events_device_offsets(
        &self,
        digis: DigisDev<'_>,
        event_offsets: OffsetsDev<'_>,
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Result<ClustersDev> {
        let Some(gpu) = self.gpu() else {
            return Err(invalid(
                "digis",
                "device digis need a CUDA backend (this one runs on the CPU)",
            ));
        };
        self.ws.clustering.run(
            gpu,
            || ClusterWorkspace::new(gpu, &self.cluster_tuning),
            |w| w.cluster_device(gpu, digis, Offsets::Device(event_offsets), geometry, cut),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use detkit_gpu::clustering::{starts_run, INVALID_MODULE};

    /// `clustering_check_runs` run sequentially on the host (the same predicate and
    /// counters): the smallest digi that starts a second run of its module in its event.
    fn check_runs(d: &Digis, offsets: &[u32], modules: u32) -> Option<usize> {
        let ne = offsets.len() - 1;
        let mut runs = vec![0u32; ne * modules as usize];
        let mut bad: Option<usize> = None;
        for e in 0..ne {
            for k in offsets[e]..offsets[e + 1] {
                let m = d.module[k as usize];
                if m != INVALID_MODULE
                    && (m as u32) < modules
                    && starts_run(|j| d.module[j as usize], offsets[e], k)
                {
                    let c = &mut runs[e * modules as usize + m as usize];
                    if *c > 0 {
                        bad = Some(bad.map_or(k as usize, |b| b.min(k as usize)));
                    }
                    *c += 1;
                }
            }
        }
        bad
    }

    /// `clustering_check_runs_gated`'s run cells on the host: the digis visited in the
    /// order `order` (any order a grid may take), each run start exchanging `epoch` into
    /// its cell; whether any exchange found the epoch already there (a second run).
    fn check_runs_tagged(
        d: &Digis,
        offsets: &[u32],
        modules: u32,
        cells: &mut [u32],
        epoch: u32,
        order: &[usize],
    ) -> bool {
        use detkit_gpu::clustering::view::second_run;
        let ne = offsets.len() - 1;
        let mut flagged = false;
        for &k in order {
            let m = d.module[k];
            if m == INVALID_MODULE || m as u32 >= modules {
                continue;
            }
            let e = (0..ne)
                .rev()
                .find(|&e| offsets[e] as usize <= k)
                .expect("offsets start at 0");
            if starts_run(|j| d.module[j as usize], offsets[e], k as u32) {
                let cell = &mut cells[e * modules as usize + m as usize];
                let old = std::mem::replace(cell, epoch);
                flagged |= second_run(old, epoch);
            }
        }
        flagged
    }

    /// The epoch-tagged check over consecutive calls on the same run cells (never reset, as
    /// on the device; digis visited in a shuffled order) flags exactly the batches the host
    /// validation rejects as not consecutive, including right after the epoch wraps (the
    /// begin kernel clears the cells then).
    #[test]
    fn tagged_check_flags_what_the_host_rejects_across_calls() {
        let g = Geometry::phase1();
        let modules = 5u32;
        let mut cells = vec![0u32; 3 * modules as usize];
        let mut epoch = u32::MAX - 200;
        let (mut rejected, mut passed) = (0, 0);
        for case in 0..3000u64 {
            let r = crate::rng::random_below(case ^ 0x5eed, 64, 1 << 20);
            let n = (r[0] % 24) as usize;
            let ne = 1 + (r[1] % 3) as usize;
            let mut offsets = vec![0u32];
            for e in 1..ne {
                offsets.push((r[1 + e] as usize % (n + 1)) as u32);
            }
            offsets.push(n as u32);
            offsets.sort_unstable();
            let module: Vec<u16> = (0..n)
                .map(|i| match r[8 + i] % 5 {
                    4 => INVALID_MODULE,
                    m => m as u16,
                })
                .collect();
            let d = Digis {
                module,
                x: vec![1; n],
                y: vec![2; n],
                adc: vec![100; n],
            };
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                order.swap(i, r[40 + i % 24] as usize % (i + 1));
            }
            // The begin kernel: the next epoch, every cell cleared when it wraps.
            epoch = epoch.wrapping_add(1);
            if epoch == 0 {
                epoch = 1;
                cells.fill(0);
            }
            let host = validate(&d, &offsets, &g);
            let dev = check_runs_tagged(&d, &offsets, modules, &mut cells, epoch, &order);
            match (&host, dev) {
                (Ok(()), false) => passed += 1,
                (Err(Error::InvalidItem { detail, .. }), true) => {
                    assert!(detail.contains("not consecutive"), "case {case}: {detail}");
                    rejected += 1;
                }
                _ => panic!("case {case}: host {host:?}, tagged check {dev}"),
            }
        }
        assert!(
            rejected > 100 && passed > 100,
            "{rejected} rejected, {passed} passed: the test is weak"
        );
    }

    /// On random small batches (few module ids, invalid digis, empty events), the device
    /// check flags exactly the batches the host validation rejects as not consecutive, at
    /// the digi it names.
    #[test]
    fn check_runs_flags_what_the_host_rejects() {
        let g = Geometry::phase1();
        let mut rejected = 0;
        for case in 0..4000u64 {
            let r = crate::rng::random_below(case, 64, 1 << 20);
            let n = (r[0] % 24) as usize;
            let ne = 1 + (r[1] % 3) as usize;
            let mut offsets = vec![0u32];
            for e in 1..ne {
                offsets.push((r[1 + e] as usize % (n + 1)) as u32);
            }
            offsets.push(n as u32);
            offsets.sort_unstable();
            let module: Vec<u16> = (0..n)
                .map(|i| match r[8 + i] % 5 {
                    4 => INVALID_MODULE,
                    m => m as u16,
                })
                .collect();
            let d = Digis {
                module,
                x: vec![1; n],
                y: vec![2; n],
                adc: vec![100; n],
            };
            let host = validate(&d, &offsets, &g);
            let dev = check_runs(&d, &offsets, g.modules);
            match (&host, dev) {
                (Ok(()), None) => {}
                (Err(Error::InvalidItem { index, detail, .. }), Some(k)) => {
                    assert!(detail.contains("not consecutive"), "case {case}: {detail}");
                    assert_eq!(*index, k, "case {case}");
                    rejected += 1;
                }
                _ => panic!("case {case}: host {host:?}, device check {dev:?}"),
            }
        }
        assert!(
            rejected > 100,
            "only {rejected} rejected batches: the test is weak"
        );
    }
}
