//! Seeding launchers on [`GpuContext`]: the stage chain on device-resident spacepoints, for
//! one event or a batch of events per launch, with no host synchronisation between stages.
//!
//! Every buffer lives in a [`SeedingWorkspace`] that is reused from call to call (grown, never
//! shrunk). Per-spacepoint buffers are sized from the input (exact upper bounds); the doublet
//! and triplet buffers have capacities proportional to the number of spacepoints. The kernels
//! reserve space with device atomics and never write past a capacity; the totals they need
//! are read once, at the end of the chain, together with the per-event counts. When a total
//! exceeded its capacity, the call is repeated with the capacity raised to the total plus a
//! margin (a rare retry: the workspace keeps the larger factor), so nothing is ever lost.

use crate::phases::{self, Phase};
use std::ops::Range;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, DeviceRepr};
use detkit_gpu::seeding::{self as k, EventCounts, SeedingTotals};
use detkit_gpu::DevPtr;

use super::*;
use crate::bucket::cuda::bin_bits;
use crate::cuda::{cfg as launch_cfg, DeviceBuffer, DeviceVec, GpuContext, Record};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::ScanKind;

/// Seeds and parameters left on the device by [`GpuContext::seed_device`].
pub struct DeviceSeeds {
    /// The seeds (`stats.seeds` records; at least one element).
    pub seeds: DeviceVec<Seed>,
    /// Their bound parameters.
    pub params: DeviceVec<BoundParams>,
    /// Stage counts.
    pub stats: SeedingStats,
}

/// Per-stage GPU times (ms, from CUDA events around each stage's launches) and the host wall
/// time of the call.
#[derive(Clone, Debug, Default)]
pub struct StageTimes {
    /// `(stage, ms)` in pipeline order (of the last attempt).
    pub stages: Vec<(&'static str, f64)>,
    /// GPU time from the first launch to the last of the last attempt, ms.
    pub chain_ms: f64,
    /// Wall time of the whole call, ms, including the final read of the counts.
    pub wall_ms: f64,
    /// Attempts (1 unless a capacity overflowed and the chain was repeated).
    pub attempts: u32,
}

/// Largest capacity of a doublet or triplet buffer (entries; offsets are `u32`).
const MAX_CAP: u64 = u32::MAX as u64 - 2;

/// Device buffers of the seeding chain, reused from call to call (grown on demand, never
/// shrunk), and the capacity factors of the doublet and triplet buffers.
///
/// A workspace belongs to one [`GpuContext`]. [`GpuContext::seed_batch_device`] leaves the
/// results of its last call here: [`Self::seeds`], [`Self::params`] and
/// [`Self::event_seeds`].
pub struct SeedingWorkspace {
    /// The launch plan ([`SeedingWorkspace::tuned`]).
    plan: SeedPlan,
    /// Capacity factors (entries per spacepoint): middle–bottom, middle–top, triplets.
    factors: [f64; 3],
    poison: bool,
    retries: u64,
    cfg_host: Option<SeedingConfig>,
    ev_off_host: Vec<u32>,
    pub(crate) b: ChainBuffers,
    /// Pinned host memory the chain's counts are read back into (one small DMA).
    summary_pin: crate::staging::Pinned<u32>,
    event_seeds: Vec<Range<usize>>,
    n_seeds: usize,
    /// The counting binning's counts and ticket are known to be zero (they are left zero by
    /// every chain; cleared again after an allocation or a chain that stopped between its
    /// launches).
    counts_zero: bool,
    radix_binnings: u64,
    /// Seeds per spacepoint of the last call: what the next call's speculative copy of the
    /// seeds reaches for ([`SeedPrefetch`]).
    seeds_per_sp: f64,
    /// The event a polled wait for the counts records (made once).
    done: Option<CudaEvent>,
}

/// One buffer of a [`SeedingWorkspace`], of elements `T` (`u32` words, or a typed device
/// vector of `detkit-gpu` records: [`Record`]): allocated on first need, grown on demand,
/// never shrunk.
pub(crate) struct Buf<T>(Option<DeviceBuffer<T>>);

impl<T> Default for Buf<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<T: DeviceRepr> Buf<T> {
    /// The buffer ([`Buf::ensure`] allocates it before any use).
    pub(crate) fn get(&self) -> &DeviceBuffer<T> {
        self.0
            .as_ref()
            .expect("workspace buffer allocated by `ensure` before use")
    }

    /// The buffer, to write.
    pub(crate) fn get_mut(&mut self) -> &mut DeviceBuffer<T> {
        self.0
            .as_mut()
            .expect("workspace buffer allocated by `ensure` before use")
    }

    /// The buffer, if allocated.
    pub(crate) fn opt(&self) -> Option<&DeviceBuffer<T>> {
        self.0.as_ref()
    }

    /// Makes the buffer hold at least `n` elements (at least one); a new allocation is
    /// filled with [`POISON`] words. Whether it allocated.
    pub(crate) fn ensure(&mut self, gpu: &GpuContext, n: usize) -> Result<bool> {
        let n = n.max(1);
        if self.0.as_ref().is_none_or(|x| x.len() < n) {
            self.0 = None; // free before allocating the larger one
            self.0 = Some(gpu.filled_words(n, POISON)?);
            return Ok(true);
        }
        Ok(false)
    }

    /// Fills the first `n` elements (at least one) with [`POISON`] words.
    fn poison(&mut self, gpu: &GpuContext, n: usize) -> Result<()> {
        gpu.fill_words(self.get_mut(), n.max(1), POISON)
    }

    /// The buffer's device address as a kernel parameter of element type `U` (its record
    /// type, or words).
    fn dev<U>(&self, gpu: &GpuContext) -> detkit_gpu::DevPtr<U> {
        gpu.ptr(self.get()).cast()
    }
}

/// The buffers of the seeding chain, by name and element type.
#[derive(Default)]
pub(crate) struct ChainBuffers {
    /// The configuration (one record; uploaded when it changed).
    cfg: Buf<Record<SeedingConfig>>,
    /// The events' offsets into the spacepoints (`n_events + 1`; uploaded when changed).
    ev_off: Buf<u32>,
    /// The spacepoints of the host and device-view calls (the caller's buffer otherwise).
    pub(crate) input: Buf<Record<SpacePoint>>,
    /// Batch grid key of every spacepoint.
    keys: Buf<u32>,
    /// The radix sort's sorted keys, or the counting binning's slots.
    sorted: Buf<u32>,
    /// Spacepoint indices grouped by grid key.
    content: Buf<u32>,
    /// The bucket container's out-of-range flag.
    bad: Buf<u32>,
    /// The counting binning's per-key counts (zero between calls).
    counts: Buf<u32>,
    /// The counting binning's ticket (zero between calls).
    ticket: Buf<u32>,
    /// First position of every grid key (`nkeys_total + 1`).
    grid: Buf<u32>,
    /// Spacepoints in grid order.
    binned: Buf<Record<k::BinnedSp>>,
    /// Their `(r, z)`.
    rz: Buf<Record<[f32; 2]>>,
    /// Per middle: its bottom doublets' count.
    n_bot: Buf<u32>,
    /// Per middle: its top doublets' count.
    n_top: Buf<u32>,
    /// Per middle: its first bottom doublet.
    bot_start: Buf<u32>,
    /// Per middle: its first top doublet.
    top_start: Buf<u32>,
    /// Per middle: the range of its top doublets' curvatures.
    top_bounds: Buf<Record<k::TopBounds>>,
    /// Middle–bottom doublets (capacity `cap_mb`).
    bot: Buf<Record<k::Doublet>>,
    /// Their line-circle transforms.
    lc_bot: Buf<Record<k::LinCircle>>,
    /// Middle–top doublets (capacity `cap_mt`).
    top: Buf<Record<k::Doublet>>,
    /// Their line-circle transforms.
    lc_top: Buf<Record<k::LinCircle>>,
    /// Per middle–bottom doublet: its triplets' count.
    tri_cnt: Buf<u32>,
    /// Per middle–bottom doublet: its first triplet.
    tri_start: Buf<u32>,
    /// Triplets (capacity `cap_tri`).
    tri: Buf<Record<k::Triplet>>,
    /// Per middle, its best seeds in fixed slots (`max_seeds_per_spm` each).
    slots: Buf<Record<Seed>>,
    /// Per middle, its seeds' count (`n + 1`).
    s_cnt: Buf<u32>,
    /// Their exclusive scan.
    s_off: Buf<u32>,
    /// The seeds of every event, event after event.
    seeds: Buf<Record<Seed>>,
    /// Their bound parameters.
    params: Buf<Record<BoundParams>>,
    /// What the host reads back: the `SeedingTotals` (8 words), then one `EventCounts` (8
    /// words) per event.
    summary: Buf<u32>,
}

impl Default for SeedingWorkspace {
    fn default() -> Self {
        Self::new()
    }
}

impl SeedingWorkspace {
    /// An empty workspace with the default tuning (buffers are allocated by the first
    /// call); [`SeedingWorkspace::tuned`] takes another.
    pub fn new() -> Self {
        Self::with_plan(SeedPlan::default())
    }

    /// An empty workspace launching with `plan`.
    pub(crate) fn with_plan(plan: SeedPlan) -> Self {
        Self {
            plan,
            factors: plan.tuning().capacity_factors,
            poison: false,
            retries: 0,
            cfg_host: None,
            ev_off_host: Vec::new(),
            b: ChainBuffers::default(),
            summary_pin: crate::staging::Pinned::new(false),
            event_seeds: Vec::new(),
            n_seeds: 0,
            counts_zero: false,
            radix_binnings: 0,
            seeds_per_sp: 0.0,
            done: None,
        }
    }

    /// The launch plan.
    pub fn plan(&self) -> &SeedPlan {
        &self.plan
    }

    /// Fill every buffer the kernels write with [`POISON`] before each call (tests: an element
    /// a kernel failed to write shows up as a mismatch).
    pub fn set_poison(&mut self, on: bool) {
        self.poison = on;
    }

    /// Number of repeated chains so far (a capacity overflowed and was raised).
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// Number of chains repeated with the radix-sort binning so far (a grid key held more
    /// than [`k::BIN_RANK_MAX`] spacepoints).
    pub fn radix_binnings(&self) -> u64 {
        self.radix_binnings
    }

    /// The current capacity factors (entries per spacepoint).
    pub fn capacity_factors(&self) -> [f64; 3] {
        self.factors
    }

    /// Seeds of the last call (the first [`Self::total_seeds`] records are valid).
    pub fn seeds(&self) -> Option<&DeviceVec<Seed>> {
        self.b.seeds.opt()
    }

    /// Bound parameters of the last call (one per seed).
    pub fn params(&self) -> Option<&DeviceVec<BoundParams>> {
        self.b.params.opt()
    }

    /// The seed range of every event of the last call, in [`Self::seeds`] (in seeds).
    pub fn event_seeds(&self) -> &[Range<usize>] {
        &self.event_seeds
    }

    /// Seeds of the last call, all events.
    pub fn total_seeds(&self) -> usize {
        self.n_seeds
    }

    /// Capacity `factor * n` (at least 64), or a typed error above `MAX_CAP`.
    fn cap(&self, which: usize, n: usize) -> Result<u32> {
        let c = (self.factors[which] * n as f64).ceil().max(64.0);
        if c > MAX_CAP as f64 {
            return Err(Error::CapacityExceeded {
                what: ["middle-bottom doublets", "middle-top doublets", "triplets"][which],
                needed: c as u64,
                capacity: MAX_CAP,
            });
        }
        Ok(c as u32)
    }

    /// Raises capacity factor `which` so that `needed` entries fit for `n` spacepoints, with
    /// a 25 % margin; a typed error when `needed` itself is above `MAX_CAP`.
    fn grow(&mut self, which: usize, needed: u64, n: usize) -> Result<()> {
        if needed > MAX_CAP {
            return Err(Error::CapacityExceeded {
                what: ["middle-bottom doublets", "middle-top doublets", "triplets"][which],
                needed,
                capacity: MAX_CAP,
            });
        }
        let f = needed as f64 * 1.25 / n.max(1) as f64;
        self.factors[which] = self.factors[which].max(f);
        // The margin must not push a fitting total over MAX_CAP.
        if self.factors[which] * n as f64 > MAX_CAP as f64 {
            self.factors[which] = MAX_CAP as f64 / n.max(1) as f64;
        }
        Ok(())
    }
}

struct Timer<'a> {
    gpu: &'a GpuContext,
    on: bool,
    marks: Vec<(&'static str, CudaEvent, CudaEvent)>,
    open: Option<(&'static str, CudaEvent)>,
}

impl Timer<'_> {
    fn start(&mut self, name: &'static str) -> Result<()> {
        if self.on {
            let e = self
                .gpu
                .stream()
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .ctx("recording an event")?;
            self.open = Some((name, e));
        }
        Ok(())
    }
    fn stop(&mut self) -> Result<()> {
        if let Some((name, a)) = self.open.take() {
            let b = self
                .gpu
                .stream()
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .ctx("recording an event")?;
            self.marks.push((name, a, b));
        }
        Ok(())
    }
    fn stage(&mut self, name: &'static str, f: impl FnOnce() -> Result<()>) -> Result<()> {
        self.start(name)?;
        f()?;
        self.stop()
    }
}

impl GpuContext {
    /// The whole seeding chain on the device for `n` spacepoints in `sps` (`SpacePoint`
    /// words), one event. Results are copied out of the context's workspace into new buffers;
    /// [`GpuContext::seed_batch_device`] leaves them in a caller's workspace instead. With
    /// `times`, per-stage GPU times are recorded.
    pub fn seed_device<S: DeviceSpacePoints + ?Sized>(
        &self,
        cfg: &SeedingConfig,
        sps: &S,
        n: usize,
        times: Option<&mut StageTimes>,
    ) -> Result<DeviceSeeds> {
        let mut ws = self
            .with_scratch(|s: &mut Option<SeedingWorkspace>| s.take())
            .unwrap_or_default();
        let r = self.seed_device_in(&mut ws, cfg, sps, n, times);
        self.with_scratch(|s: &mut Option<SeedingWorkspace>| *s = Some(ws));
        r
    }

    fn seed_device_in<S: DeviceSpacePoints + ?Sized>(
        &self,
        ws: &mut SeedingWorkspace,
        cfg: &SeedingConfig,
        sps: &S,
        n: usize,
        times: Option<&mut StageTimes>,
    ) -> Result<DeviceSeeds> {
        let stats = self.seed_batch_device(ws, cfg, sps, &[0, n], times)?[0];
        let ns = ws.total_seeds();
        let mut seeds = self.zeros::<Record<Seed>>(ns.max(1))?;
        let mut params = self.zeros::<Record<BoundParams>>(ns.max(1))?;
        if ns > 0 {
            self.stream()
                .memcpy_dtod(&ws.b.seeds.get().slice(..ns), &mut seeds.slice_mut(..ns))
                .ctx("copying seeds")?;
            self.stream()
                .memcpy_dtod(&ws.b.params.get().slice(..ns), &mut params.slice_mut(..ns))
                .ctx("copying parameters")?;
        }
        Ok(DeviceSeeds {
            seeds,
            params,
            stats,
        })
    }

    /// Seeds every event of a batch in one chain of launches: the events are the
    /// consecutive runs `offsets[e]..offsets[e + 1]` of `sps` (device-resident spacepoints:
    /// a [`DeviceVec<SpacePoint>`] or their words), each seeded exactly as on its own (the
    /// same seeds, parameters and counts, in the same order). The results stay in `ws`
    /// ([`SeedingWorkspace::seeds`], [`SeedingWorkspace::params`],
    /// [`SeedingWorkspace::event_seeds`]); the counts of each event are returned. One host
    /// synchronisation at the end (the counts), none between stages; a capacity overflow
    /// repeats the chain with larger buffers. The caller validated the spacepoints
    /// ([`check_spacepoints`]).
    pub fn seed_batch_device<S: DeviceSpacePoints + ?Sized>(
        &self,
        ws: &mut SeedingWorkspace,
        cfg: &SeedingConfig,
        sps: &S,
        offsets: &[usize],
        times: Option<&mut StageTimes>,
    ) -> Result<Vec<SeedingStats>> {
        self.seed_batch_in(ws, cfg, sps, offsets, times, None)
    }

    /// [`GpuContext::seed_batch_device`], with the door's speculative copy of the seeds
    /// into pinned memory issued together with the counts' read-back when `prefetch` is
    /// given ([`SeedPrefetch`]).
    pub(crate) fn seed_batch_in<S: DeviceSpacePoints + ?Sized>(
        &self,
        ws: &mut SeedingWorkspace,
        cfg: &SeedingConfig,
        sps: &S,
        offsets: &[usize],
        times: Option<&mut StageTimes>,
        mut prefetch: Option<&mut SeedPrefetch<'_>>,
    ) -> Result<Vec<SeedingStats>> {
        check_config(cfg)?;
        let wall = Instant::now();
        let n_events = offsets.len().saturating_sub(1);
        if n_events == 0 {
            return Err(invalid(
                "batch offsets",
                "need at least two offsets (one event)",
            ));
        }
        if offsets[0] != 0 || offsets.windows(2).any(|w| w[1] < w[0]) {
            return Err(invalid("batch offsets", "must start at 0 and not decrease"));
        }
        let n = offsets[n_events];
        if sps.spacepoints() < n || n as u64 >= 1 << 31 {
            return Err(invalid(
                "spacepoint buffer",
                format!("{} spacepoints for {n}", sps.spacepoints()),
            ));
        }
        let nkeys = cfg.nkeys() as u64;
        if (n_events as u64 + 1) * nkeys >= u32::MAX as u64 {
            return Err(invalid(
                "batch",
                format!("{n_events} events of {nkeys} grid keys exceed 2^32 keys; split the batch"),
            ));
        }
        let ev_off: Vec<u32> = offsets.iter().map(|&o| o as u32).collect();
        let mut stats: Vec<SeedingStats> = offsets
            .windows(2)
            .map(|w| SeedingStats {
                spacepoints: (w[1] - w[0]) as u64,
                ..Default::default()
            })
            .collect();
        ws.event_seeds = vec![0..0; n_events];
        ws.n_seeds = 0;
        let mut tm = Timer {
            gpu: self,
            on: times.is_some(),
            marks: Vec::new(),
            open: None,
        };
        let mut attempts = 0u32;
        if n > 0 {
            // Configuration and event offsets: uploaded only when they changed.
            ws.b.cfg.ensure(self, 1)?;
            if ws.cfg_host != Some(*cfg) {
                self.stream()
                    .memcpy_htod(&[Record(*cfg)], &mut ws.b.cfg.get_mut().slice_mut(..1))
                    .ctx("uploading the seeding configuration")?;
                ws.cfg_host = Some(*cfg);
            }
            ws.b.ev_off.ensure(self, ev_off.len())?;
            if ws.ev_off_host != ev_off {
                self.stream()
                    .memcpy_htod(
                        &ev_off,
                        &mut ws.b.ev_off.get_mut().slice_mut(..ev_off.len()),
                    )
                    .ctx("uploading event offsets")?;
                ws.ev_off_host = ev_off.clone();
            }
            let mut radix = false;
            loop {
                attempts += 1;
                tm.marks.clear();
                let counts = self.seed_chain(
                    ws,
                    cfg,
                    sps.addr(self),
                    n,
                    n_events,
                    radix,
                    &mut tm,
                    prefetch.as_deref_mut(),
                )?;
                let (totals, events) = counts;
                let caps = [ws.cap(0, n)?, ws.cap(1, n)?, ws.cap(2, n)?];
                let over = [
                    totals.mid_bot > caps[0] as u64,
                    totals.mid_top > caps[1] as u64,
                    !(totals.mid_bot > caps[0] as u64 || totals.mid_top > caps[1] as u64)
                        && totals.triplets > caps[2] as u64,
                ];
                // A grid key of more than BIN_RANK_MAX spacepoints was not put in input
                // order: repeat with the radix-sort binning (the doublet and triplet totals
                // do not depend on that order, so a capacity can grow in the same step).
                let unranked = totals.unranked != 0 && !radix;
                if unranked {
                    radix = true;
                    ws.radix_binnings += 1;
                }
                if !over.iter().any(|&o| o) && !unranked {
                    for (s, ev) in stats.iter_mut().zip(&events) {
                        s.valid = ev.valid as u64;
                        s.invalid = s.spacepoints - s.valid;
                        s.mid_bot = ev.mid_bot as u64;
                        s.mid_top = ev.mid_top as u64;
                        s.triplets = ev.triplets as u64;
                        s.seeds = ev.seeds as u64;
                    }
                    ws.event_seeds = events
                        .iter()
                        .map(|ev| ev.seed_start as usize..(ev.seed_start + ev.seeds) as usize)
                        .collect();
                    ws.n_seeds = events.iter().map(|ev| ev.seeds as usize).sum();
                    ws.seeds_per_sp = ws.n_seeds as f64 / n as f64;
                    break;
                }
                let needed = [totals.mid_bot, totals.mid_top, totals.triplets];
                for w in 0..3 {
                    if over[w] {
                        ws.grow(w, needed[w], n)?;
                    }
                }
                ws.retries += 1;
                if attempts >= 5 {
                    // Each attempt computes one more stage exactly, and the radix binning
                    // is taken at most once: cannot happen.
                    return Err(Error::CapacityExceeded {
                        what: "seeding retries",
                        needed: attempts as u64,
                        capacity: 4,
                    });
                }
            }
        }
        if let Some(t) = times {
            self.synchronize()?;
            t.stages.clear();
            for (name, a, b) in &tm.marks {
                t.stages
                    .push((name, a.elapsed_ms(b).ctx("reading an event")? as f64));
            }
            t.chain_ms = match (tm.marks.first(), tm.marks.last()) {
                (Some(f), Some(l)) => f.1.elapsed_ms(&l.2).ctx("reading an event")? as f64,
                _ => 0.0,
            };
            t.attempts = attempts;
            t.wall_ms = wall.elapsed().as_secs_f64() * 1e3;
        }
        Ok(stats)
    }

    /// One attempt of the chain for `n >= 1` spacepoints of `n_events` events, binned by
    /// counting (or, with `radix`, by the radix sort); returns the totals and per-event counts
    /// (the one read-back).
    #[allow(clippy::too_many_arguments)]
    fn seed_chain(
        &self,
        ws: &mut SeedingWorkspace,
        cfg: &SeedingConfig,
        sps_ptr: DevPtr<SpacePoint>,
        n: usize,
        n_events: usize,
        radix: bool,
        tm: &mut Timer,
        prefetch: Option<&mut SeedPrefetch<'_>>,
    ) -> Result<(SeedingTotals, Vec<EventCounts>)> {
        let plan = ws.plan;
        let (cap_mb, cap_mt, cap_tri) = (ws.cap(0, n)?, ws.cap(1, n)?, ws.cap(2, n)?);
        let (cmb, cmt, ctri) = (cap_mb as usize, cap_mt as usize, cap_tri as usize);
        let msp = cfg.max_seeds_per_spm as usize;
        let nkeys_total = n_events as u64 * cfg.nkeys() as u64 + 1;
        let nk = nkeys_total as usize + 1;
        let sw = 8 * (n_events + 1);
        // Every buffer of the chain with its length in elements (of its type), for this call.
        macro_rules! each_buffer {
            ($m:ident) => {
                $m!(
                    keys: n, sorted: n, content: n, bad: 1, counts: nk, ticket: 1, grid: nk,
                    binned: n, rz: n, n_bot: n, n_top: n, bot_start: n, top_start: n,
                    top_bounds: n, bot: cmb, lc_bot: cmb, top: cmt, lc_top: cmt,
                    tri_cnt: cmb, tri_start: cmb, tri: ctri, slots: n * msp, s_cnt: n + 1,
                    s_off: n + 1, seeds: n * msp, params: n * msp, summary: sw
                )
            };
        }
        macro_rules! ensure {
            ($($f:ident: $len:expr),*) => {
                $(
                    // A new counts or ticket buffer is poisoned, not zero.
                    if ws.b.$f.ensure(self, $len)? && matches!(stringify!($f), "counts" | "ticket") {
                        ws.counts_zero = false;
                    }
                )*
            };
        }
        each_buffer!(ensure);
        if ws.poison {
            macro_rules! poison {
                ($($f:ident: $len:expr),*) => {
                    $(
                        if !matches!(stringify!($f), "summary" | "counts" | "ticket") {
                            ws.b.$f.poison(self, $len)?;
                        }
                    )*
                };
            }
            each_buffer!(poison);
        }
        if !ws.counts_zero {
            self.memset_zero(ws.b.counts.get_mut())?;
            self.memset_zero(ws.b.ticket.get_mut())?;
            ws.counts_zero = true;
        }
        if radix {
            // The counting binning's first kernel zeroes the summary itself.
            self.fill_u32(ws.b.summary.get_mut(), sw, 0)?;
        }
        let n64 = n as u64;
        let ne = n_events as u32;
        // Addresses (the buffers stay put during the chain).
        macro_rules! p {
            ($f:ident) => {
                ws.b.$f.dev(self)
            };
        }
        let summary = self.ptr(ws.b.summary.get());
        let totals: detkit_gpu::DevPtr<SeedingTotals> = summary.cast();
        // SAFETY (address arithmetic only): the summary holds 8 words of totals, then
        // n_events records of 8 words.
        let events: detkit_gpu::DevPtr<EventCounts> =
            detkit_gpu::DevPtr::<u32>::from_addr(summary.addr() + 32).cast();
        let d_cfg: detkit_gpu::DevPtr<SeedingConfig> = p!(cfg);
        let ev_off: detkit_gpu::DevPtr<u32> = p!(ev_off);

        // 1. binning: batch grid key per spacepoint, grouped by key (the last key holds the
        //    invalid ones), binned records in grid order, ascending input index inside a key.
        //    By counting (count + scan in one launch when the keys fit one tile, place,
        //    gather with the rank inside the key), or by the radix sort (fallback).
        let grid: detkit_gpu::DevPtr<u32> = p!(grid);
        let binned: detkit_gpu::DevPtr<k::BinnedSp> = p!(binned);
        let rz: detkit_gpu::DevPtr<[f32; 2]> = p!(rz);
        tm.start("bin_spacepoints")?;
        let inputs = BinInputs {
            cfg: d_cfg,
            cfg_val: *cfg,
            sps: sps_ptr,
            ev_off,
            n,
            n_events: ne,
            nkeys_total,
        };
        if radix {
            self.bin_radix(ws, inputs)?;
        } else {
            self.bin_counting(ws, inputs)?;
        }
        {
            let params = k::SeedingGatherSpacepointsParams {
                sps: sps_ptr,
                ev_off,
                keys: p!(keys),
                content: p!(content),
                grid,
                n: n64,
                out: binned,
                rz,
                totals,
                n_events: ne,
                rank: (!radix) as u32,
                _pad0: 0,
                cfg: *cfg,
            };
            // SAFETY: content and grid group the n keys (stable with the radix sort; any
            // order inside a key by counting, rank = 1); binned and rz hold n records; totals
            // the summary's record.
            unsafe { self.launch(k::KERNEL_GATHER_SPACEPOINTS, plan.items(n64), &params)? };
        }
        tm.stop()?;

        // 2. doublets: one pass, space reserved per middle.
        let (n_bot, n_top, bot_start, top_start): (
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<u32>,
        ) = (p!(n_bot), p!(n_top), p!(bot_start), p!(top_start));
        let top_bounds: detkit_gpu::DevPtr<k::TopBounds> = p!(top_bounds);
        let (bot, lc_bot, top, lc_top): (
            detkit_gpu::DevPtr<k::Doublet>,
            detkit_gpu::DevPtr<k::LinCircle>,
            detkit_gpu::DevPtr<k::Doublet>,
            detkit_gpu::DevPtr<k::LinCircle>,
        ) = (p!(bot), p!(lc_bot), p!(top), p!(lc_top));
        tm.stage("find_doublets", || {
            let params = k::SeedingFindDoubletsParams {
                grid,
                sps: binned,
                rz,
                n: n64,
                n_bot,
                n_top,
                bot_start,
                top_start,
                top_bounds,
                bot,
                lc_bot,
                top,
                lc_top,
                totals,
                events,
                n_events: ne,
                cap_mb,
                cap_mt,
                cfg: *cfg,
            };
            let lc = plan.doublets(n64);
            // SAFETY: grid and binned from the binning; per-middle arrays n words; doublet
            // arrays of cap_mb / cap_mt entries (never written past: reservations checked in
            // the kernel); totals and events in the zeroed summary; one warp per middle,
            // blocks of the plan's doublet_threads (a multiple of 32 up to the launch bound
            // SEEDING_THREADS) with DOUBLET_WARP_WORDS of shared memory per warp.
            unsafe { self.launch(k::KERNEL_FIND_DOUBLETS, lc, &params) }
        })?;

        // 3. triplets: one pass per middle–bottom doublet (grid-stride below the total).
        let (tri_cnt, tri_start, tri): (
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<k::Triplet>,
        ) = (p!(tri_cnt), p!(tri_start), p!(tri));
        tm.stage("find_triplets", || {
            let params = k::SeedingTripletsParams {
                sps: binned,
                bot,
                lc_bot,
                n_top,
                top_start,
                top_bounds,
                top,
                lc_top,
                tri_cnt,
                tri_start,
                out: tri,
                totals,
                events,
                cap_mb,
                cap_mt,
                cap_tri,
                cfg: *cfg,
            };
            let blocks = plan.stride_blocks(self.sm_count(), cmb as u64);
            // SAFETY: doublet arrays of the capacities, read only below the totals (checked
            // in the kernel against the capacities); tri_cnt, tri_start cap_mb words; tri
            // cap_tri triplets, written only inside a reservation that fits.
            unsafe {
                self.launch(
                    k::KERNEL_FIND_TRIPLETS,
                    launch_cfg(blocks, plan.tuning().threads, 0),
                    &params,
                )
            }
        })?;

        // 4. seed selection: per middle the weight update of its triplets and the best seeds
        //    into fixed slots, scan, gather with parameters and per-event counts.
        let (slots, s_cnt, s_off): (
            detkit_gpu::DevPtr<Seed>,
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<u32>,
        ) = (p!(slots), p!(s_cnt), p!(s_off));
        tm.start("select_seeds")?;
        {
            let params = k::SeedingSelectSeedsParams {
                grid,
                n: n64,
                n_bot,
                bot_start,
                tri_cnt,
                tri_start,
                tri,
                slots,
                counts: s_cnt,
                totals,
                n_events: ne,
                cap_mb,
                cap_mt,
                cap_tri,
                cfg: *cfg,
                _pad0: 0,
            };
            // SAFETY: per-middle arrays from the doublet kernel; triplet arrays as above;
            // slots n * max_seeds_per_spm seeds (<= 16 per middle, checked); counts n + 1;
            // one warp per middle (32 (n + 1) threads, blocks of the plan's select_threads, a
            // multiple of 32).
            unsafe {
                self.launch(
                    k::KERNEL_SELECT_SEEDS,
                    launch_cfg(
                        (32 * (n64 + 1)).div_ceil(plan.tuning().select_threads as u64),
                        plan.tuning().select_threads,
                        0,
                    ),
                    &params,
                )?
            };
        }
        {
            let b = &mut ws.b;
            self.scan_device(b.s_cnt.get(), b.s_off.get_mut(), n + 1, ScanKind::Exclusive)?;
        }
        tm.stop()?;
        tm.stage("gather_seeds", || {
            let params = k::SeedingGatherSeedsParams {
                grid,
                binned,
                sps: sps_ptr,
                ev_off,
                slots,
                counts: s_cnt,
                off: s_off,
                n: n64,
                out: p!(seeds),
                params: p!(params),
                events,
                n_events: ne,
                cfg: *cfg,
            };
            let slots_n = n64 * cfg.max_seeds_per_spm as u64;
            // SAFETY: counts <= max_seeds_per_spm per middle; s_off their exclusive scan
            // (total <= n * max_seeds_per_spm = the output sizes); the seeds' indices are
            // inside their events of sps; events n_events records of the summary; one thread
            // per seed slot (n * max_seeds_per_spm) and per event.
            unsafe {
                self.launch(
                    k::KERNEL_GATHER_SEEDS,
                    plan.items(slots_n.max(n_events as u64)),
                    &params,
                )
            }
        })?;

        // The one read-back: totals and per-event counts.
        let what = "reading the seeding counts";
        // Into pinned memory (one DMA, no allocation), with the door's speculative copy of
        // the seeds queued behind it: one wait for both.
        let pin = ws.summary_pin.get(self, sw)?;
        self.stream()
            .memcpy_dtoh(&ws.b.summary.get().slice(..sw), &mut pin[..sw])
            .ctx(what)?;
        if let Some(pf) = prefetch {
            phases::stamp("launched", pf.part);
            let guess = prefetch_guess(
                n,
                ws.seeds_per_sp,
                plan.tuning().prefetch_margin,
                n * msp,
                pf.stage.seeds.capacity().min(pf.stage.params.capacity()),
            );
            pf.copied = 0;
            if guess > 0 {
                let what = "copying seeds";
                let s = pf.stage.seeds.get(self, guess)?;
                self.stream()
                    .memcpy_dtoh(&ws.b.seeds.get().slice(..guess), &mut s[..guess])
                    .ctx(what)?;
                let p = pf.stage.params.get(self, guess)?;
                self.stream()
                    .memcpy_dtoh(&ws.b.params.get().slice(..guess), &mut p[..guess])
                    .ctx(what)?;
                pf.copied = guess;
            }
            if pf.poll {
                self.wait_polling(ws, pf)?;
                phases::stamp("landed", pf.part);
                return Ok(split_summary(&ws.summary_pin.get(self, sw)?[..sw]));
            }
        }
        self.synchronize()?;
        Ok(split_summary(&ws.summary_pin.get(self, sw)?[..sw]))
    }

    /// Waits for everything issued on the stream by polling an event of the workspace, and
    /// calls the copy-out's helpers ([`SeedPrefetch::crew`]) [`PREWAKE_LEAD`] before the
    /// wait is due to end by the last call's (at once on a first call: they give up after
    /// [`PREWAKE_WAIT`]). An error of the stream's work is returned as a synchronisation
    /// returns it.
    fn wait_polling(&self, ws: &mut SeedingWorkspace, pf: &mut SeedPrefetch<'_>) -> Result<()> {
        let what = "waiting for the seeding chain";
        if ws.done.is_none() {
            ws.done = Some(
                self.context()
                    .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
                    .ctx(what)?,
            );
        }
        let ev = ws.done.as_ref().expect("created above");
        ev.record(self.stream()).ctx(what)?;
        let t0 = Instant::now();
        let wake_at = pf.stage.last_wait.saturating_sub(PREWAKE_LEAD);
        let mut crew =
            super::crew::Crew::new(super::crew::max_helpers(), "out: helper in", pf.part);
        let mut woken = false;
        loop {
            if ev.try_is_complete().ctx(what)? {
                break;
            }
            if !woken && t0.elapsed() >= wake_at {
                crew.wake(PREWAKE_WAIT);
                woken = true;
                phases::stamp("out: helpers called", pf.part);
            }
            for _ in 0..16 {
                std::hint::spin_loop();
            }
        }
        pf.stage.last_wait = t0.elapsed();
        pf.crew = Some(crew);
        Ok(())
    }

    /// Counting binning: keys, counts and slots (one launch, which also scans the counts
    /// into the grid offsets when they fit one tile; else the Foundation's device scan), then
    /// each spacepoint's index into its key's range (the counts cleared for the next call).
    fn bin_counting(&self, ws: &mut SeedingWorkspace, inputs: BinInputs) -> Result<()> {
        let BinInputs {
            cfg: _,
            cfg_val,
            sps: sps_ptr,
            ev_off,
            n,
            n_events: ne,
            nkeys_total,
        } = inputs;
        let n64 = n as u64;
        let plan = ws.plan;
        let scan_keys = nkeys_total + 1;
        let fused = scan_keys <= plan.bin_scan_tile;
        macro_rules! p {
            ($f:ident) => {
                ws.b.$f.dev(self)
            };
        }
        // Until the place kernel is launched the counts may be left non-zero.
        ws.counts_zero = false;
        let params = k::SeedingBinCountParams {
            sps: sps_ptr,
            ev_off,
            n: n64,
            keys: p!(keys),
            slot: p!(sorted),
            counts: p!(counts),
            grid: p!(grid),
            ticket: p!(ticket),
            summary: p!(summary),
            n_events: ne,
            scan_keys: if fused { scan_keys as u32 } else { 0 },
            summary_words: 8 * (ne + 1),
            cfg: cfg_val,
        };
        // SAFETY: config one SeedingConfig; sps n SpacePoints (checked by the caller); ev_off
        // n_events + 1 offsets ending at n; keys and slots n words; counts nkeys_total + 1
        // words and the ticket, zero (cleared when not known to be zero); grid nkeys_total + 1
        // words (a cudarc allocation: aligned); the summary 8 (n_events + 1) words;
        // (n_events + 1) * nkeys < 2^32 (caller); the plan's bin_count_threads (a multiple of
        // 32 up to the launch bound, 1024; the fused scan only below its bin_scan_tile), one
        // per spacepoint, bin_count_smem_bytes().
        unsafe {
            self.launch(
                k::KERNEL_BIN_COUNT,
                launch_cfg(
                    n64.div_ceil(plan.tuning().bin_count_threads as u64),
                    plan.tuning().bin_count_threads,
                    k::bin_count_smem_bytes(),
                ),
                &params,
            )?
        };
        if !fused {
            let b = &mut ws.b;
            self.scan_device(
                b.counts.get(),
                b.grid.get_mut(),
                scan_keys as usize,
                ScanKind::Exclusive,
            )?;
        }
        let params = k::SeedingBinPlaceParams {
            keys: p!(keys),
            slot: p!(sorted),
            grid: p!(grid),
            content: p!(content),
            counts: p!(counts),
            n: n64,
            n_counts: nkeys_total,
        };
        // SAFETY: keys, slots and grid from the launches above (slot < its key's count, so
        // every position is inside content's n words); counts nkeys_total + 1 words; one
        // thread per spacepoint and per count.
        unsafe {
            self.launch(
                k::KERNEL_BIN_PLACE,
                plan.items(n64.max(nkeys_total)),
                &params,
            )?
        };
        ws.counts_zero = true;
        Ok(())
    }

    /// Radix-sort binning (the fallback when a grid key holds more than
    /// [`k::BIN_RANK_MAX`] spacepoints): keys, then the stable bucket container.
    fn bin_radix(&self, ws: &mut SeedingWorkspace, inputs: BinInputs) -> Result<()> {
        let BinInputs {
            cfg: d_cfg,
            cfg_val: _,
            sps: sps_ptr,
            ev_off,
            n,
            n_events: ne,
            nkeys_total,
        } = inputs;
        let n64 = n as u64;
        let params = k::SeedingBinSpacepointsParams {
            cfg: d_cfg,
            sps: sps_ptr,
            ev_off,
            n: n64,
            keys: ws.b.keys.dev(self),
            n_events: ne,
            _pad0: 0,
        };
        // SAFETY: config one SeedingConfig; sps n SpacePoints (checked by the caller);
        // ev_off n_events + 1 offsets ending at n; keys n words; (n_events + 1) * nkeys
        // < 2^32 (checked by the caller).
        unsafe { self.launch(k::KERNEL_BIN, ws.plan.items(n64), &params)? };
        let b = &mut ws.b;
        self.bucket_launch(
            b.keys.get(),
            n,
            nkeys_total as u32,
            bin_bits(nkeys_total as u32),
            b.sorted.get_mut(),
            b.bad.get_mut(),
            b.grid.get_mut(),
            b.content.get_mut(),
        )
    }

    /// Downloads device seeds.
    pub fn download_seeds(&self, d: &DeviceSeeds) -> Result<(Vec<Seed>, Vec<BoundParams>)> {
        let n = d.stats.seeds as usize;
        if n == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut s = self.download_records(&d.seeds)?;
        let mut p = self.download_records(&d.params)?;
        s.truncate(n);
        p.truncate(n);
        Ok((s, p))
    }

    /// Downloads the seeds and parameters of the last call of `ws`, split by event.
    pub fn download_batch(
        &self,
        ws: &SeedingWorkspace,
    ) -> Result<Vec<(Vec<Seed>, Vec<BoundParams>)>> {
        let ns = ws.total_seeds();
        let (all_s, all_p) = if ns == 0 {
            (Vec::new(), Vec::new())
        } else {
            let s = self
                .stream()
                .clone_dtoh(&ws.b.seeds.get().slice(..ns))
                .ctx("copying seeds")?;
            let p = self
                .stream()
                .clone_dtoh(&ws.b.params.get().slice(..ns))
                .ctx("copying parameters")?;
            (Record::unwrap_vec(s), Record::unwrap_vec(p))
        };
        Ok(ws
            .event_seeds()
            .iter()
            .map(|r| (all_s[r.clone()].to_vec(), all_p[r.clone()].to_vec()))
            .collect())
    }

    /// Seeds of events given in host memory, in chunks of whole events (at most
    /// [`SeedTuning::chunk_spacepoints`] spacepoints and as many events as the grid allows per chunk), each
    /// chunk one chain of launches in `ws`, into `out` (one output per event; the vectors of
    /// the outputs already there are reused). Through `stage` when given: the chunk's
    /// spacepoints are gathered into pinned memory and copied in one DMA, the seeds and
    /// parameters come back the same way.
    pub(crate) fn seed_events_host(
        &self,
        ws: &mut SeedingWorkspace,
        events: Events<'_>,
        cfg: &SeedingConfig,
        stage: Option<&mut SeedStaging>,
        out: &mut Vec<SeedingOutput>,
    ) -> Result<()> {
        let n_ev = events.count();
        out.truncate(n_ev);
        out.resize_with(n_ev, SeedingOutput::default);
        self.seed_events_host_part(ws, events, cfg, stage, None, out)
    }

    /// [`GpuContext::seed_events_host`] into `out` (one output per event, of the events'
    /// count), as part `turn.1` of a pipelined call when `turn` is given: its host copies
    /// wait for that part's turn and pass it on when done (see [`super::door::Turn`]).
    pub(crate) fn seed_events_host_part(
        &self,
        ws: &mut SeedingWorkspace,
        events: Events<'_>,
        cfg: &SeedingConfig,
        mut stage: Option<&mut SeedStaging>,
        turn: Option<(&super::door::Turn, usize)>,
        out: &mut [SeedingOutput],
    ) -> Result<()> {
        let n_ev = events.count();
        if out.len() != n_ev {
            return Err(invalid(
                "seeding outputs",
                format!("{} outputs for {n_ev} events", out.len()),
            ));
        }
        let max_events = ((u32::MAX as u64 - 1) / cfg.nkeys().max(1) as u64).saturating_sub(2);
        // Held from the first staging until it is done: the next part's copies wait for it.
        // A pipelined call's part, or 0 for a call of its own (the timeline's stamps).
        let part = turn.map_or(0, |t| t.1);
        let pipelined = turn.is_some();
        let stamp = |label| phases::stamp(label, part);
        stamp("wait turn");
        let mut turn = match turn {
            Some((t, k)) => Some(t.take(k)?),
            None => None,
        };
        stamp("stage");
        let mut first = 0;
        let mut offsets = Vec::new();
        while first < n_ev {
            let mut last = first;
            let mut n = 0usize;
            while last < n_ev
                && ((last - first) as u64) < max_events
                && (last == first || n + events.len(last) <= ws.plan.t.chunk_spacepoints)
            {
                n += events.len(last);
                last += 1;
            }
            offsets.clear();
            offsets.push(0usize);
            for e in first..last {
                offsets.push(offsets[offsets.len() - 1] + events.len(e));
            }
            ws.b.input.ensure(self, n)?;
            phases::mark(Phase::Prepare);
            match stage.as_deref_mut() {
                Some(st) if n > 0 => {
                    // The events' spacepoints into pinned memory on a crew (the calling thread
                    // at once, helpers as they come, nobody waiting for a wake-up), checked
                    // part by part, each piece's DMA issued as soon as it is in.
                    let srcs = match events {
                        Events::Rows(rows, checked) => {
                            super::copies::Sources::Rows(&rows[first..last], checked)
                        }
                        Events::Columns(cols) => {
                            super::copies::Sources::Columns(&cols[first..last])
                        }
                    };
                    let pin = st.input.get(self, n)?;
                    let base = self.ptr(ws.b.input.get()).addr();
                    let crew =
                        super::crew::Crew::new(super::crew::max_helpers(), "up: helper in", part);
                    let cs = super::copies::upload_events(self, srcs, pin, base, crew)?;
                    stamp(super::crew::share_label("up: staged", cs));
                    stamp(super::crew::helpers_label("up", cs));
                }
                _ => {
                    for e in (first..last).filter(|&e| events.len(e) > 0) {
                        let Some(ev) = events.rows(e) else {
                            return Err(invalid(
                                "seeding events",
                                "columns need pinned staging (the backend converts them otherwise)",
                            ));
                        };
                        let at = offsets[e - first];
                        self.stream()
                            .memcpy_htod(
                                Record::slice(ev),
                                &mut ws.b.input.get_mut().slice_mut(at..at + ev.len()),
                            )
                            .ctx("uploading spacepoints")?;
                    }
                }
            }
            phases::mark(Phase::Stage);
            if let Some(t) = turn.take() {
                t.done();
            }
            stamp("chain");
            let input = std::mem::take(&mut ws.b.input);
            // The seeds' speculative copy with the counts (pinned staging).
            let mut pf = stage.as_deref_mut().map(|st| SeedPrefetch {
                stage: st,
                copied: 0,
                // Waiting by polling, the copy-out's crew woken shortly before the chain
                // ends: a call of its own (a pipelined part's wait overlaps the other lane's
                // work, and its length varies with it).
                poll: !pipelined,
                crew: None,
                part,
            });
            let stats = self.seed_batch_in(ws, cfg, input.get(), &offsets, None, pf.as_mut());
            ws.b.input = input;
            let stats = stats?;
            let (copied, crew) = pf.map_or((0, None), |p| (p.copied, p.crew));
            let crew = crew.unwrap_or_else(|| {
                super::crew::Crew::new(super::crew::max_helpers(), "out: helper in", part)
            });
            stamp("counts read");
            phases::mark_gpu(Phase::Kernels, self);
            let outs = &mut out[first..last];
            for (o, s) in outs.iter_mut().zip(stats) {
                o.stats = s;
            }
            self.download_batch_into(ws, stage.as_deref_mut(), copied, crew, outs)?;
            stamp("copied out");
            first = last;
        }
        Ok(())
    }

    /// The seeds and parameters of the last call of `ws`, split by event into `outs` (their
    /// vectors reused), through `stage`'s pinned buffers when given, of which the first
    /// `copied` seeds and parameters are there already (the speculative copy of
    /// [`SeedPrefetch`], waited for with the counts).
    fn download_batch_into(
        &self,
        ws: &SeedingWorkspace,
        stage: Option<&mut SeedStaging>,
        copied: usize,
        crew: super::crew::Crew,
        outs: &mut [SeedingOutput],
    ) -> Result<()> {
        let ns = ws.total_seeds();
        let part = crew.part();
        // Every event's two arrays in parts on the crew (see `copies::copy_out`).
        let fill = |outs: &mut [SeedingOutput], s: &[Seed], p: &[BoundParams]| {
            let cs = super::copies::copy_out(outs, ws.event_seeds(), s, p, crew);
            phases::stamp(super::crew::share_label("out: copied", cs), part);
            phases::stamp(super::crew::helpers_label("out", cs), part);
        };
        if ns == 0 {
            fill(outs, &[], &[]);
            return Ok(());
        }
        match stage {
            Some(st) => {
                let what = "copying seeds";
                // The seeds not copied with the counts (all of them when the pinned buffers
                // had to grow: growing drops what they held).
                let from = if st.seeds.capacity() >= ns && st.params.capacity() >= ns {
                    copied.min(ns)
                } else {
                    0
                };
                if from < ns {
                    let s = st.seeds.get(self, ns)?;
                    self.stream()
                        .memcpy_dtoh(&ws.b.seeds.get().slice(from..ns), &mut s[from..ns])
                        .ctx(what)?;
                    let p = st.params.get(self, ns)?;
                    self.stream()
                        .memcpy_dtoh(&ws.b.params.get().slice(from..ns), &mut p[from..ns])
                        .ctx(what)?;
                    self.synchronize()?;
                }
                phases::mark(Phase::Wait);
                let s = st.seeds.get(self, ns)?;
                let p = &st.params.get(self, ns)?;
                fill(
                    outs,
                    Record::unwrap_slice(&s[..ns]),
                    Record::unwrap_slice(&p[..ns]),
                );
                phases::mark(Phase::CopyOut);
            }
            None => {
                let s = self
                    .stream()
                    .clone_dtoh(&ws.b.seeds.get().slice(..ns))
                    .ctx("copying seeds")?;
                let p = self
                    .stream()
                    .clone_dtoh(&ws.b.params.get().slice(..ns))
                    .ctx("copying parameters")?;
                fill(outs, Record::unwrap_slice(&s), Record::unwrap_slice(&p));
            }
        }
        Ok(())
    }
}

/// The door's speculative copy of the seeds: the chain's counts are read back into pinned
/// memory, and right behind that read-back (before the one wait for it) the first
/// `n × seeds per spacepoint of the last call ×` [`SeedTuning::prefetch_margin`] seeds and
/// parameters are
/// copied into the door's pinned buffers. A call whose seeds fit that guess then waits once
/// (counts and seeds together) instead of twice; one that does not copies the rest after.
pub(crate) struct SeedPrefetch<'a> {
    /// The door's pinned buffers.
    pub(crate) stage: &'a mut SeedStaging,
    /// Seeds (and parameters) copied by the last attempt of the chain.
    pub(crate) copied: usize,
    /// Wait for the counts by polling an event, and call the copy-out's helpers ([`Self::crew`])
    /// [`PREWAKE_LEAD`] before the counts are due by the last call's wait.
    pub(crate) poll: bool,
    /// The copy-out's crew, woken while waiting (with `poll`).
    pub(crate) crew: Option<super::crew::Crew>,
    /// The part of the call (the timeline's stamps).
    pub(crate) part: usize,
}

/// Seeds to copy speculatively for `n` spacepoints: the last call's `seeds_per_sp` with
/// `margin` ([`SeedTuning::prefetch_margin`]), at most the seed buffer's `capacity` (`n × max_seeds_per_spm`) and
/// never more than the pinned buffers hold already (`pinned`): the guess allocates nothing
/// (the copy of the counts' exact need grows them, as without the guess).
fn prefetch_guess(
    n: usize,
    seeds_per_sp: f64,
    margin: f64,
    capacity: usize,
    pinned: usize,
) -> usize {
    ((n as f64 * seeds_per_sp * margin).ceil() as usize)
        .min(capacity)
        .min(pinned)
}

/// How long before the counts are due (by the last call's wait) the copy-out's helpers are
/// called: a helper's wake-up takes ~0.01–0.05 ms (docs/benchmarks.md, section "sdoor").
const PREWAKE_LEAD: Duration = Duration::from_micros(60);

/// How long woken helpers wait for the copy-out before they give up.
const PREWAKE_WAIT: Duration = Duration::from_micros(250);

/// The summary's words: the totals and each event's counts.
fn split_summary(words: &[u32]) -> (SeedingTotals, Vec<EventCounts>) {
    let totals = *bytemuck::from_bytes::<SeedingTotals>(bytemuck::cast_slice(&words[..8]));
    let events = bytemuck::cast_slice::<u32, EventCounts>(&words[8..]).to_vec();
    (totals, events)
}

/// Spacepoints on the device, as [`GpuContext::seed_batch_device`] takes them: a typed
/// vector of records ([`DeviceVec<SpacePoint>`]) or their `u32` words (5 per spacepoint).
pub trait DeviceSpacePoints {
    /// Number of whole spacepoints the buffer holds.
    fn spacepoints(&self) -> usize;
    /// The buffer's device address.
    fn addr(&self, gpu: &GpuContext) -> DevPtr<SpacePoint>;
}

impl DeviceSpacePoints for DeviceVec<SpacePoint> {
    fn spacepoints(&self) -> usize {
        self.len()
    }
    fn addr(&self, gpu: &GpuContext) -> DevPtr<SpacePoint> {
        gpu.ptr(self).cast()
    }
}

impl DeviceSpacePoints for DeviceBuffer<u32> {
    fn spacepoints(&self) -> usize {
        self.len() / (std::mem::size_of::<SpacePoint>() / 4)
    }
    fn addr(&self, gpu: &GpuContext) -> DevPtr<SpacePoint> {
        gpu.ptr(self).cast()
    }
}

/// The events of a host call: slices of spacepoints, or five columns per event.
#[derive(Clone, Copy)]
pub(crate) enum Events<'a> {
    /// Slices of spacepoints; `true`: checked already, else checked as they are copied.
    Rows(&'a [&'a [SpacePoint]], bool),
    Columns(&'a [SpacePointsRef<'a>]),
}

impl<'a> Events<'a> {
    /// The events `..mid` and `mid..`.
    pub(crate) fn split_at(self, mid: usize) -> (Self, Self) {
        match self {
            Events::Rows(v, c) => {
                let (a, b) = v.split_at(mid);
                (Events::Rows(a, c), Events::Rows(b, c))
            }
            Events::Columns(v) => {
                let (a, b) = v.split_at(mid);
                (Events::Columns(a), Events::Columns(b))
            }
        }
    }

    pub(crate) fn count(&self) -> usize {
        match self {
            Events::Rows(e, _) => e.len(),
            Events::Columns(e) => e.len(),
        }
    }
    pub(crate) fn len(&self, e: usize) -> usize {
        match self {
            Events::Rows(v, _) => v[e].len(),
            Events::Columns(v) => v[e].len(),
        }
    }
    fn rows(&self, e: usize) -> Option<&[SpacePoint]> {
        match self {
            Events::Rows(v, _) => Some(v[e]),
            Events::Columns(_) => None,
        }
    }
}

/// Pinned host buffers of the seeding calls: spacepoints in, seeds and parameters out.
pub(crate) struct SeedStaging {
    input: crate::staging::Pinned<Record<SpacePoint>>,
    seeds: crate::staging::Pinned<Record<Seed>>,
    params: crate::staging::Pinned<Record<BoundParams>>,
    /// How long the last polled wait for the counts took ([`SeedPrefetch::poll`]).
    last_wait: Duration,
}

impl Default for SeedStaging {
    fn default() -> Self {
        Self {
            input: crate::staging::Pinned::new(true),
            seeds: crate::staging::Pinned::new(false),
            params: crate::staging::Pinned::new(false),
            last_wait: Duration::ZERO,
        }
    }
}

/// What both binning paths take: the config, the spacepoints and the events' offsets on the
/// device, the spacepoint and event counts, and the batch grid's key count.
#[derive(Clone, Copy)]
struct BinInputs {
    cfg: detkit_gpu::DevPtr<SeedingConfig>,
    /// The same configuration by value (the counting binning's kernels take it so).
    cfg_val: SeedingConfig,
    sps: detkit_gpu::DevPtr<SpacePoint>,
    ev_off: detkit_gpu::DevPtr<u32>,
    n: usize,
    n_events: u32,
    nkeys_total: u64,
}

#[cfg(test)]
mod tests {
    use super::{prefetch_guess, SeedingWorkspace, MAX_CAP};
    use crate::Error;

    /// The speculative copy: nothing on a first call (no ratio, no pinned memory yet), the
    /// last ratio with its margin after, never past the seed buffer or the pinned buffers.
    #[test]
    fn the_seeds_guess_follows_the_last_call_and_allocates_nothing() {
        assert_eq!(prefetch_guess(40_000, 0.0, 1.1, 640_000, 0), 0);
        assert_eq!(prefetch_guess(40_000, 0.5, 1.1, 640_000, 0), 0);
        assert_eq!(prefetch_guess(40_000, 0.5, 1.1, 640_000, 1 << 20), 22_000);
        assert_eq!(prefetch_guess(40_000, 0.5, 1.1, 640_000, 21_000), 21_000);
        assert_eq!(prefetch_guess(10, 100.0, 1.1, 160, 1 << 20), 160);
        assert_eq!(prefetch_guess(0, 0.5, 1.1, 0, 1 << 20), 0);
    }

    #[test]
    fn capacities_scale_with_the_input_and_grow_with_a_margin() {
        let mut ws = SeedingWorkspace::tuned(&super::SeedTuning {
            capacity_factors: [0.01, 2.0, 3.0],
            ..Default::default()
        })
        .unwrap();
        // Floor of 64 entries; proportional above.
        assert_eq!(ws.cap(0, 1000).unwrap(), 64);
        assert_eq!(ws.cap(1, 1000).unwrap(), 2000);
        // Growing to a need gives the need plus 25 %, per spacepoint, and never shrinks.
        ws.grow(0, 10_000, 1000).unwrap();
        assert_eq!(ws.cap(0, 1000).unwrap(), 12_500);
        assert!(ws.cap(0, 1000).unwrap() as u64 >= 10_000);
        ws.grow(0, 5, 1000).unwrap();
        assert_eq!(ws.cap(0, 1000).unwrap(), 12_500);
        assert_eq!(ws.cap(0, 2000).unwrap(), 25_000);
        // A need beyond u32 offsets is a typed error, and a margin never exceeds the limit.
        assert!(matches!(
            ws.grow(2, MAX_CAP + 1, 1000),
            Err(Error::CapacityExceeded {
                what: "triplets",
                ..
            })
        ));
        ws.grow(2, MAX_CAP, 1 << 20).unwrap();
        assert!(ws.cap(2, 1 << 20).unwrap() as u64 <= MAX_CAP);
        assert!(matches!(
            ws.cap(2, 1 << 21),
            Err(Error::CapacityExceeded { .. })
        ));
    }
}
