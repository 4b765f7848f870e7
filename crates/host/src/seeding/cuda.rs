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
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;
use detkit_gpu::seeding::{self as k, EventCounts, SeedingTotals};

use super::*;
use crate::bucket::cuda::bin_bits;
use crate::cuda::{cfg as launch_cfg, DeviceBuffer, GpuContext};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::ScanKind;

/// Seeds and parameters left on the device by [`GpuContext::seed_device`].
pub struct DeviceSeeds {
    /// `Seed[n]` as words.
    pub seeds: DeviceBuffer<u32>,
    /// `BoundParams[n]` as words.
    pub params: DeviceBuffer<u32>,
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
/// Largest number of spacepoints of one batch chunk of [`Backend::seed_events`].
const CHUNK_SPACEPOINTS: usize = 1 << 22;

/// Device buffers of the seeding chain, reused from call to call (grown on demand, never
/// shrunk), and the capacity factors of the doublet and triplet buffers.
///
/// A workspace belongs to one [`GpuContext`]. [`GpuContext::seed_batch_device`] leaves the
/// results of its last call here: [`Self::seeds`], [`Self::params`] and
/// [`Self::event_seeds`].
pub struct SeedingWorkspace {
    /// Capacity factors (entries per spacepoint): middle–bottom, middle–top, triplets.
    factors: [f64; 3],
    poison: bool,
    retries: u64,
    cfg_host: Option<SeedingConfig>,
    ev_off_host: Vec<u32>,
    bufs: Vec<Option<DeviceBuffer<u32>>>,
    event_seeds: Vec<Range<usize>>,
    n_seeds: usize,
    /// The counting binning's counts and ticket are known to be zero (they are left zero by
    /// every chain; cleared again after an allocation or a chain that stopped between its
    /// launches).
    counts_zero: bool,
    radix_binnings: u64,
}

/// The buffers of a [`SeedingWorkspace`], by index into `bufs`.
#[derive(Clone, Copy)]
pub(crate) enum B {
    Cfg,
    EvOff,
    Input,
    Keys,
    /// The radix sort's sorted keys, or the counting binning's slots.
    Sorted,
    Content,
    Bad,
    Counts,
    Ticket,
    Grid,
    Binned,
    NBot,
    NTop,
    BotStart,
    TopStart,
    TopBounds,
    Bot,
    LcBot,
    Top,
    LcTop,
    Rz,
    TriCnt,
    TriStart,
    Tri,
    Slots,
    SCnt,
    SOff,
    Seeds,
    Params,
    Summary,
}
const NBUF: usize = B::Summary as usize + 1;

/// Initial capacity factors: at ⟨μ⟩ = 200 an event has about 22 middle–bottom and 8
/// middle–top doublets and 1.4 triplets per spacepoint.
const INITIAL_FACTORS: [f64; 3] = [32.0, 12.0, 3.0];

impl Default for SeedingWorkspace {
    fn default() -> Self {
        Self::new()
    }
}

impl SeedingWorkspace {
    /// An empty workspace (buffers are allocated by the first call).
    pub fn new() -> Self {
        Self {
            factors: INITIAL_FACTORS,
            poison: false,
            retries: 0,
            cfg_host: None,
            ev_off_host: Vec::new(),
            bufs: (0..NBUF).map(|_| None).collect(),
            event_seeds: Vec::new(),
            n_seeds: 0,
            counts_zero: false,
            radix_binnings: 0,
        }
    }

    /// A workspace whose doublet and triplet capacities start at `factors` entries per
    /// spacepoint (middle–bottom, middle–top, triplets) instead of the defaults: tests use tiny
    /// factors to force the overflow-and-retry path.
    pub fn with_capacity_factors(factors: [f64; 3]) -> Self {
        Self {
            factors,
            ..Self::new()
        }
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

    /// Seeds of the last call (`Seed` words; the first `words(total)` are valid).
    pub fn seeds(&self) -> Option<&DeviceBuffer<u32>> {
        self.bufs[B::Seeds as usize].as_ref()
    }

    /// Bound parameters of the last call (`BoundParams` words).
    pub fn params(&self) -> Option<&DeviceBuffer<u32>> {
        self.bufs[B::Params as usize].as_ref()
    }

    /// The seed range of every event of the last call, in [`Self::seeds`] (in seeds).
    pub fn event_seeds(&self) -> &[Range<usize>] {
        &self.event_seeds
    }

    /// Seeds of the last call, all events.
    pub fn total_seeds(&self) -> usize {
        self.n_seeds
    }

    /// The input buffer, taken out for a chain that reads it while the workspace is
    /// borrowed mutably ([`SeedingWorkspace::put_input`] puts it back).
    pub(crate) fn take_input(&mut self) -> Option<DeviceBuffer<u32>> {
        self.bufs[B::Input as usize].take()
    }

    /// Puts back what [`SeedingWorkspace::take_input`] took.
    pub(crate) fn put_input(&mut self, input: Option<DeviceBuffer<u32>>) {
        self.bufs[B::Input as usize] = input;
    }

    pub(crate) fn buf(&self, b: B) -> &DeviceBuffer<u32> {
        self.bufs[b as usize]
            .as_ref()
            .expect("workspace buffer allocated by `ensure` before use")
    }

    pub(crate) fn buf_mut(&mut self, b: B) -> &mut DeviceBuffer<u32> {
        self.bufs[b as usize]
            .as_mut()
            .expect("workspace buffer allocated by `ensure` before use")
    }

    /// Makes buffer `b` hold at least `words` words (new allocations are poisoned; the
    /// counting binning's counts are then no longer known to be zero).
    pub(crate) fn ensure(&mut self, gpu: &GpuContext, b: B, words: usize) -> Result<()> {
        let words = words.max(1);
        let slot = &mut self.bufs[b as usize];
        if slot.as_ref().is_none_or(|x| x.len() < words) {
            *slot = None; // free before allocating the larger one
            *slot = Some(gpu.filled_u32(words, POISON)?);
            if matches!(b, B::Counts | B::Ticket) {
                self.counts_zero = false;
            }
        }
        Ok(())
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

/// Blocks for `n` items (a capacity: the kernel strides over the actual count) at
/// `SEEDING_THREADS` per block: one thread per item, at most 1024 blocks per multiprocessor.
/// (The triplet kernel's former bound, 16 blocks per multiprocessor, had each thread walk
/// about 90 doublets in a batch of 32 ⟨μ⟩ = 200 events: 4,234–4,283 events/s, 4,514 with one
/// thread per doublet of the capacity; 9 per multiprocessor, all resident at once, was slower;
/// H200, issue 14 session 6.)
fn stride_blocks(gpu: &GpuContext, n: u64) -> u64 {
    n.div_ceil(k::SEEDING_THREADS as u64)
        .clamp(1, gpu.sm_count() as u64 * 1024)
}

impl GpuContext {
    fn launch_items(&self, n: u64) -> cudarc::driver::LaunchConfig {
        launch_cfg(
            n.div_ceil(k::SEEDING_THREADS as u64).max(1),
            k::SEEDING_THREADS,
            0,
        )
    }

    /// The whole seeding chain on the device for `n` spacepoints in `sps` (`SpacePoint`
    /// words), one event. Results are copied out of the context's workspace into new buffers;
    /// [`GpuContext::seed_batch_device`] leaves them in a caller's workspace instead. With
    /// `times`, per-stage GPU times are recorded.
    pub fn seed_device(
        &self,
        cfg: &SeedingConfig,
        sps: &DeviceBuffer<u32>,
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

    fn seed_device_in(
        &self,
        ws: &mut SeedingWorkspace,
        cfg: &SeedingConfig,
        sps: &DeviceBuffer<u32>,
        n: usize,
        times: Option<&mut StageTimes>,
    ) -> Result<DeviceSeeds> {
        let stats = self.seed_batch_device(ws, cfg, sps, &[0, n], times)?[0];
        let ns = ws.total_seeds();
        let mut seeds = self.zeros::<u32>(words::<Seed>(ns))?;
        let mut params = self.zeros::<u32>(words::<BoundParams>(ns))?;
        if ns > 0 {
            let (ws_seeds, ws_params) = (ws.buf(B::Seeds), ws.buf(B::Params));
            let (a, b) = (words::<Seed>(ns), words::<BoundParams>(ns));
            self.stream()
                .memcpy_dtod(&ws_seeds.slice(..a), &mut seeds.slice_mut(..a))
                .ctx("copying seeds")?;
            self.stream()
                .memcpy_dtod(&ws_params.slice(..b), &mut params.slice_mut(..b))
                .ctx("copying parameters")?;
        }
        Ok(DeviceSeeds {
            seeds,
            params,
            stats,
        })
    }

    /// Seeds every event of a batch in one chain of launches: the events are the
    /// consecutive runs `offsets[e]..offsets[e + 1]` of `sps` (`SpacePoint` words,
    /// device-resident), each seeded exactly as on its own (the same seeds, parameters and
    /// counts, in the same order). The results stay in `ws` ([`SeedingWorkspace::seeds`],
    /// [`SeedingWorkspace::params`], [`SeedingWorkspace::event_seeds`]); the counts of each
    /// event are returned. One host synchronisation at the end (the counts), none between
    /// stages; a capacity overflow repeats the chain with larger buffers. The caller validated
    /// the spacepoints ([`check_spacepoints`]).
    pub fn seed_batch_device(
        &self,
        ws: &mut SeedingWorkspace,
        cfg: &SeedingConfig,
        sps: &DeviceBuffer<u32>,
        offsets: &[usize],
        times: Option<&mut StageTimes>,
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
        if sps.len() < words::<SpacePoint>(n) || n as u64 >= 1 << 31 {
            return Err(invalid(
                "spacepoint buffer",
                format!("{} words for {n} spacepoints", sps.len()),
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
            ws.ensure(self, B::Cfg, words::<SeedingConfig>(1))?;
            if ws.cfg_host != Some(*cfg) {
                let words = bytemuck::cast_slice::<SeedingConfig, u32>(std::slice::from_ref(cfg));
                self.stream()
                    .memcpy_htod(words, &mut ws.buf_mut(B::Cfg).slice_mut(..words.len()))
                    .ctx("uploading the seeding configuration")?;
                ws.cfg_host = Some(*cfg);
            }
            ws.ensure(self, B::EvOff, ev_off.len())?;
            if ws.ev_off_host != ev_off {
                self.stream()
                    .memcpy_htod(&ev_off, &mut ws.buf_mut(B::EvOff).slice_mut(..ev_off.len()))
                    .ctx("uploading event offsets")?;
                ws.ev_off_host = ev_off.clone();
            }
            let mut radix = false;
            loop {
                attempts += 1;
                tm.marks.clear();
                let counts = self.seed_chain(ws, cfg, sps, n, n_events, radix, &mut tm)?;
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
        sps: &DeviceBuffer<u32>,
        n: usize,
        n_events: usize,
        radix: bool,
        tm: &mut Timer,
    ) -> Result<(SeedingTotals, Vec<EventCounts>)> {
        let (cap_mb, cap_mt, cap_tri) = (ws.cap(0, n)?, ws.cap(1, n)?, ws.cap(2, n)?);
        let (cmb, cmt, ctri) = (cap_mb as usize, cap_mt as usize, cap_tri as usize);
        let msp = cfg.max_seeds_per_spm as usize;
        let nkeys_total = n_events as u64 * cfg.nkeys() as u64 + 1;
        let sizes: [(B, usize); 27] = [
            (B::Keys, n),
            (B::Sorted, n),
            (B::Content, n),
            (B::Bad, 1),
            (B::Counts, nkeys_total as usize + 1),
            (B::Ticket, 1),
            (B::Grid, nkeys_total as usize + 1),
            (B::Binned, words::<k::BinnedSp>(n)),
            (B::Rz, 2 * n),
            (B::NBot, n),
            (B::NTop, n),
            (B::BotStart, n),
            (B::TopStart, n),
            (B::TopBounds, words::<k::TopBounds>(n)),
            (B::Bot, words::<k::Doublet>(cmb)),
            (B::LcBot, words::<k::LinCircle>(cmb)),
            (B::Top, words::<k::Doublet>(cmt)),
            (B::LcTop, words::<k::LinCircle>(cmt)),
            (B::TriCnt, cmb),
            (B::TriStart, cmb),
            (B::Tri, words::<k::Triplet>(ctri)),
            (B::Slots, words::<Seed>(n * msp)),
            (B::SCnt, n + 1),
            (B::SOff, n + 1),
            (B::Seeds, words::<Seed>(n * msp)),
            (B::Params, words::<BoundParams>(n * msp)),
            (B::Summary, 8 * (n_events + 1)),
        ];
        for (b, w) in sizes {
            ws.ensure(self, b, w)?;
        }
        if ws.poison {
            for (b, w) in sizes {
                if !matches!(b, B::Summary | B::Counts | B::Ticket) {
                    self.fill_u32(ws.buf_mut(b), w.max(1), POISON)?;
                }
            }
        }
        if !ws.counts_zero {
            for b in [B::Counts, B::Ticket] {
                self.memset_zero(ws.buf_mut(b))?;
            }
            ws.counts_zero = true;
        }
        if radix {
            // The counting binning's first kernel zeroes the summary itself.
            self.fill_u32(ws.buf_mut(B::Summary), 8 * (n_events + 1), 0)?;
        }
        let n64 = n as u64;
        let ne = n_events as u32;
        // Addresses (the buffers stay put during the chain).
        macro_rules! p {
            ($b:expr) => {
                self.ptr(ws.buf($b)).cast()
            };
        }
        let summary = self.ptr(ws.buf(B::Summary));
        let totals: detkit_gpu::DevPtr<SeedingTotals> = summary.cast();
        // SAFETY (address arithmetic only): the summary holds 8 words of totals, then
        // n_events records of 8 words.
        let events: detkit_gpu::DevPtr<EventCounts> =
            detkit_gpu::DevPtr::<u32>::from_addr(summary.addr() + 32).cast();
        let d_cfg: detkit_gpu::DevPtr<SeedingConfig> = p!(B::Cfg);
        let ev_off: detkit_gpu::DevPtr<u32> = p!(B::EvOff);
        let sps_ptr: detkit_gpu::DevPtr<SpacePoint> = self.ptr(sps).cast();

        // 1. binning: batch grid key per spacepoint, grouped by key (the last key holds the
        //    invalid ones), binned records in grid order, ascending input index inside a key.
        //    By counting (count + scan in one launch when the keys fit one tile, place,
        //    gather with the rank inside the key), or by the radix sort (fallback).
        let grid: detkit_gpu::DevPtr<u32> = p!(B::Grid);
        let binned: detkit_gpu::DevPtr<k::BinnedSp> = p!(B::Binned);
        let rz: detkit_gpu::DevPtr<[f32; 2]> = p!(B::Rz);
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
                keys: p!(B::Keys),
                content: p!(B::Content),
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
            unsafe {
                self.launch(
                    k::KERNEL_GATHER_SPACEPOINTS,
                    self.launch_items(n64),
                    &params,
                )?
            };
        }
        tm.stop()?;

        // 2. doublets: one pass, space reserved per middle.
        let (n_bot, n_top, bot_start, top_start): (
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<u32>,
        ) = (p!(B::NBot), p!(B::NTop), p!(B::BotStart), p!(B::TopStart));
        let top_bounds: detkit_gpu::DevPtr<k::TopBounds> = p!(B::TopBounds);
        let (bot, lc_bot, top, lc_top): (
            detkit_gpu::DevPtr<k::Doublet>,
            detkit_gpu::DevPtr<k::LinCircle>,
            detkit_gpu::DevPtr<k::Doublet>,
            detkit_gpu::DevPtr<k::LinCircle>,
        ) = (p!(B::Bot), p!(B::LcBot), p!(B::Top), p!(B::LcTop));
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
            let mut lc = self.launch_items(32 * n64);
            lc.shared_mem_bytes = k::doublet_smem_bytes() as u32;
            // SAFETY: grid and binned from the binning; per-middle arrays n words; doublet
            // arrays of cap_mb / cap_mt entries (never written past: reservations checked in
            // the kernel); totals and events in the zeroed summary; one warp per middle,
            // SEEDING_THREADS threads and doublet_smem_bytes() of shared memory.
            unsafe { self.launch(k::KERNEL_FIND_DOUBLETS, lc, &params) }
        })?;

        // 3. triplets: one pass per middle–bottom doublet (grid-stride below the total).
        let (tri_cnt, tri_start, tri): (
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<u32>,
            detkit_gpu::DevPtr<k::Triplet>,
        ) = (p!(B::TriCnt), p!(B::TriStart), p!(B::Tri));
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
            let blocks = stride_blocks(self, cmb as u64);
            // SAFETY: doublet arrays of the capacities, read only below the totals (checked
            // in the kernel against the capacities); tri_cnt, tri_start cap_mb words; tri
            // cap_tri triplets, written only inside a reservation that fits.
            unsafe {
                self.launch(
                    k::KERNEL_FIND_TRIPLETS,
                    launch_cfg(blocks, k::SEEDING_THREADS, 0),
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
        ) = (p!(B::Slots), p!(B::SCnt), p!(B::SOff));
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
            // one warp per middle (32 (n + 1) threads, blocks of SELECT_THREADS, a multiple of
            // 32).
            unsafe {
                self.launch(
                    k::KERNEL_SELECT_SEEDS,
                    launch_cfg(
                        (32 * (n64 + 1)).div_ceil(k::SELECT_THREADS as u64),
                        k::SELECT_THREADS,
                        0,
                    ),
                    &params,
                )?
            };
        }
        {
            let mut off = ws.bufs[B::SOff as usize].take();
            let r = match &mut off {
                Some(o) => self.scan_device(ws.buf(B::SCnt), o, n + 1, ScanKind::Exclusive),
                None => Err(invalid("seeding workspace", "scan buffer missing")),
            };
            ws.bufs[B::SOff as usize] = off;
            r?;
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
                out: p!(B::Seeds),
                params: p!(B::Params),
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
                    self.launch_items(slots_n.max(n_events as u64)),
                    &params,
                )
            }
        })?;

        // The one read-back: totals and per-event counts.
        let words = self
            .stream()
            .clone_dtoh(&ws.buf(B::Summary).slice(..8 * (n_events + 1)))
            .ctx("reading the seeding counts")?;
        let totals = *bytemuck::from_bytes::<SeedingTotals>(bytemuck::cast_slice(&words[..8]));
        let events = bytemuck::cast_slice::<u32, EventCounts>(&words[8..]).to_vec();
        Ok((totals, events))
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
        let scan_keys = nkeys_total + 1;
        let fused = scan_keys <= k::BIN_SCAN_TILE;
        macro_rules! p {
            ($b:expr) => {
                self.ptr(ws.buf($b)).cast()
            };
        }
        // Until the place kernel is launched the counts may be left non-zero.
        ws.counts_zero = false;
        let params = k::SeedingBinCountParams {
            sps: sps_ptr,
            ev_off,
            n: n64,
            keys: p!(B::Keys),
            slot: p!(B::Sorted),
            counts: p!(B::Counts),
            grid: p!(B::Grid),
            ticket: p!(B::Ticket),
            summary: p!(B::Summary),
            n_events: ne,
            scan_keys: if fused { scan_keys as u32 } else { 0 },
            summary_words: 8 * (ne + 1),
            cfg: cfg_val,
        };
        // SAFETY: config one SeedingConfig; sps n SpacePoints (checked by the caller); ev_off
        // n_events + 1 offsets ending at n; keys and slots n words; counts nkeys_total + 1
        // words and the ticket, zero (cleared when not known to be zero); grid nkeys_total + 1
        // words (a cudarc allocation: aligned); the summary 8 (n_events + 1) words;
        // (n_events + 1) * nkeys < 2^32 (caller); BIN_COUNT_THREADS threads, one per
        // spacepoint, bin_count_smem_bytes().
        unsafe {
            self.launch(
                k::KERNEL_BIN_COUNT,
                launch_cfg(
                    n64.div_ceil(k::BIN_COUNT_THREADS as u64),
                    k::BIN_COUNT_THREADS,
                    k::bin_count_smem_bytes(),
                ),
                &params,
            )?
        };
        if !fused {
            let mut grid = ws.bufs[B::Grid as usize].take();
            let r = match &mut grid {
                Some(g) => self.scan_device(
                    ws.buf(B::Counts),
                    g,
                    scan_keys as usize,
                    ScanKind::Exclusive,
                ),
                None => Err(invalid("seeding workspace", "grid buffer missing")),
            };
            ws.bufs[B::Grid as usize] = grid;
            r?;
        }
        let params = k::SeedingBinPlaceParams {
            keys: p!(B::Keys),
            slot: p!(B::Sorted),
            grid: p!(B::Grid),
            content: p!(B::Content),
            counts: p!(B::Counts),
            n: n64,
            n_counts: nkeys_total,
        };
        // SAFETY: keys, slots and grid from the launches above (slot < its key's count, so
        // every position is inside content's n words); counts nkeys_total + 1 words; one
        // thread per spacepoint and per count.
        unsafe {
            self.launch(
                k::KERNEL_BIN_PLACE,
                self.launch_items(n64.max(nkeys_total)),
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
            keys: self.ptr(ws.buf(B::Keys)).cast(),
            n_events: ne,
            _pad0: 0,
        };
        // SAFETY: config one SeedingConfig; sps n SpacePoints (checked by the caller);
        // ev_off n_events + 1 offsets ending at n; keys n words; (n_events + 1) * nkeys
        // < 2^32 (checked by the caller).
        unsafe { self.launch(k::KERNEL_BIN, self.launch_items(n64), &params)? };
        let mut keys = ws.bufs[B::Keys as usize].take();
        let mut sorted = ws.bufs[B::Sorted as usize].take();
        let mut content = ws.bufs[B::Content as usize].take();
        let mut bad = ws.bufs[B::Bad as usize].take();
        let mut grid = ws.bufs[B::Grid as usize].take();
        let r = match (&mut keys, &mut sorted, &mut content, &mut bad, &mut grid) {
            (Some(kk), Some(s), Some(c), Some(b), Some(g)) => self.bucket_launch(
                kk,
                n,
                nkeys_total as u32,
                bin_bits(nkeys_total as u32),
                s,
                b,
                g,
                c,
            ),
            _ => Err(invalid("seeding workspace", "bucket buffers missing")),
        };
        ws.bufs[B::Keys as usize] = keys;
        ws.bufs[B::Sorted as usize] = sorted;
        ws.bufs[B::Content as usize] = content;
        ws.bufs[B::Bad as usize] = bad;
        ws.bufs[B::Grid as usize] = grid;
        r
    }

    /// Downloads device seeds.
    pub fn download_seeds(&self, d: &DeviceSeeds) -> Result<(Vec<Seed>, Vec<BoundParams>)> {
        let n = d.stats.seeds as usize;
        if n == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let s = self.download(&d.seeds)?;
        let p = self.download(&d.params)?;
        Ok((
            bytemuck::cast_slice::<u32, Seed>(&s[..words::<Seed>(n)]).to_vec(),
            bytemuck::cast_slice::<u32, BoundParams>(&p[..words::<BoundParams>(n)]).to_vec(),
        ))
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
                .clone_dtoh(&ws.buf(B::Seeds).slice(..words::<Seed>(ns)))
                .ctx("copying seeds")?;
            let p = self
                .stream()
                .clone_dtoh(&ws.buf(B::Params).slice(..words::<BoundParams>(ns)))
                .ctx("copying parameters")?;
            (
                bytemuck::cast_slice::<u32, Seed>(&s).to_vec(),
                bytemuck::cast_slice::<u32, BoundParams>(&p).to_vec(),
            )
        };
        Ok(ws
            .event_seeds()
            .iter()
            .map(|r| (all_s[r.clone()].to_vec(), all_p[r.clone()].to_vec()))
            .collect())
    }

    /// Seeds of events given in host memory, in chunks of whole events (at most
    /// `CHUNK_SPACEPOINTS` spacepoints and as many events as the grid allows per chunk), each
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
        let mut turn = match turn {
            Some((t, k)) => Some(t.take(k)?),
            None => None,
        };
        let mut first = 0;
        let mut offsets = Vec::new();
        while first < n_ev {
            let mut last = first;
            let mut n = 0usize;
            while last < n_ev
                && ((last - first) as u64) < max_events
                && (last == first || n + events.len(last) <= CHUNK_SPACEPOINTS)
            {
                n += events.len(last);
                last += 1;
            }
            offsets.clear();
            offsets.push(0usize);
            for e in first..last {
                offsets.push(offsets[offsets.len() - 1] + events.len(e));
            }
            ws.ensure(self, B::Input, words::<SpacePoint>(n))?;
            phases::mark(Phase::Prepare);
            let sp_words = std::mem::size_of::<SpacePoint>() / 4;
            match stage.as_deref_mut() {
                Some(st) if n > 0 && phases::variant() == 1 => {
                    // The previous session's staging (measured as `--variant 1`): events
                    // gathered one after the other.
                    let pin = st.input.get(self, n * sp_words)?;
                    let input = ws.buf_mut(B::Input);
                    let (mut at, mut sent) = (0usize, 0usize);
                    for e in first..last {
                        let w = events.len(e) * sp_words;
                        events.gather(
                            e,
                            bytemuck::cast_slice_mut::<u32, SpacePoint>(&mut pin[at..at + w]),
                        )?;
                        at += w;
                        if at > sent && (at - sent >= GATHER_WORDS || e + 1 == last) {
                            self.stream()
                                .memcpy_htod(&pin[sent..at], &mut input.slice_mut(sent..at))
                                .ctx("uploading spacepoints")?;
                            sent = at;
                        }
                    }
                }
                Some(st) if n > 0 => {
                    // Events gathered into pinned memory in groups of about 4 MiB, the events
                    // of a group side by side on the pool's threads; each group goes to the
                    // device at once (DMA while the host gathers the next group).
                    let pin = st.input.get(self, n * sp_words)?;
                    let input = ws.buf_mut(B::Input);
                    let (mut e, mut at) = (first, 0usize);
                    while e < last {
                        let (e0, at0) = (e, at);
                        while e < last && (e == e0 || at - at0 < GATHER_WORDS) {
                            at += events.len(e) * sp_words;
                            e += 1;
                        }
                        events.gather_group(
                            e0..e,
                            bytemuck::cast_slice_mut::<u32, SpacePoint>(&mut pin[at0..at]),
                        )?;
                        if at > at0 {
                            self.stream()
                                .memcpy_htod(&pin[at0..at], &mut input.slice_mut(at0..at))
                                .ctx("uploading spacepoints")?;
                        }
                    }
                }
                _ => {
                    for e in (first..last).filter(|&e| events.len(e) > 0) {
                        let Some(ev) = events.rows(e) else {
                            return Err(invalid(
                                "seeding events",
                                "columns need pinned staging (the backend converts them otherwise)",
                            ));
                        };
                        let w = as_words(ev);
                        let at = offsets[e - first] * sp_words;
                        self.stream()
                            .memcpy_htod(w, &mut ws.buf_mut(B::Input).slice_mut(at..at + w.len()))
                            .ctx("uploading spacepoints")?;
                    }
                }
            }
            phases::mark(Phase::Stage);
            if let Some(t) = turn.take() {
                t.done();
            }
            let mut input = ws.bufs[B::Input as usize].take();
            let stats = match &input {
                Some(inp) => self.seed_batch_device(ws, cfg, inp, &offsets, None),
                None => Err(invalid("seeding workspace", "input buffer missing")),
            };
            ws.bufs[B::Input as usize] = input.take();
            let stats = stats?;
            phases::mark_gpu(Phase::Kernels, self);
            let outs = &mut out[first..last];
            for (o, s) in outs.iter_mut().zip(stats) {
                o.stats = s;
            }
            self.download_batch_into(ws, stage.as_deref_mut(), outs)?;
            first = last;
        }
        Ok(())
    }

    /// The seeds and parameters of the last call of `ws`, split by event into `outs` (their
    /// vectors reused), through `stage`'s pinned buffers when given.
    fn download_batch_into(
        &self,
        ws: &SeedingWorkspace,
        stage: Option<&mut SeedStaging>,
        outs: &mut [SeedingOutput],
    ) -> Result<()> {
        let ns = ws.total_seeds();
        let (sw, pw) = (words::<Seed>(ns), words::<BoundParams>(ns));
        let fill = |outs: &mut [SeedingOutput], s: &[u32], p: &[u32]| {
            let (all_s, all_p) = if ns == 0 {
                (&[][..], &[][..])
            } else {
                (
                    bytemuck::cast_slice::<u32, Seed>(&s[..sw]),
                    bytemuck::cast_slice::<u32, BoundParams>(&p[..pw]),
                )
            };
            let one = |(o, r): (&mut SeedingOutput, &Range<usize>)| {
                o.seeds.clear();
                o.seeds.extend_from_slice(&all_s[r.clone()]);
                o.params.clear();
                o.params.extend_from_slice(&all_p[r.clone()]);
            };
            // Events side by side when there are many (one event: one thread, no wake-up).
            if outs.len() > 1 {
                use rayon::prelude::*;
                outs.par_iter_mut().zip(ws.event_seeds()).for_each(one);
            } else {
                outs.iter_mut().zip(ws.event_seeds()).for_each(one);
            }
        };
        if ns == 0 {
            fill(outs, &[], &[]);
            return Ok(());
        }
        match stage {
            Some(st) => {
                let what = "copying seeds";
                let s = st.seeds.get(self, sw)?;
                self.stream()
                    .memcpy_dtoh(&ws.buf(B::Seeds).slice(..sw), s)
                    .ctx(what)?;
                let p = st.params.get(self, pw)?;
                self.stream()
                    .memcpy_dtoh(&ws.buf(B::Params).slice(..pw), p)
                    .ctx(what)?;
                self.synchronize()?;
                phases::mark(Phase::Wait);
                let s = st.seeds.get(self, sw)?;
                let p = &st.params.get(self, pw)?;
                fill(outs, s, p);
                phases::mark(Phase::CopyOut);
            }
            None => {
                let s = self
                    .stream()
                    .clone_dtoh(&ws.buf(B::Seeds).slice(..sw))
                    .ctx("copying seeds")?;
                let p = self
                    .stream()
                    .clone_dtoh(&ws.buf(B::Params).slice(..pw))
                    .ctx("copying parameters")?;
                fill(outs, &s, &p);
            }
        }
        Ok(())
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
    /// The spacepoints of `events` (consecutive) into `dst` (their total length), each
    /// event as [`Events::gather`] does it, the events side by side on the pool's threads;
    /// the error is the first event's (as a loop in order gives).
    fn gather_group(&self, events: Range<usize>, dst: &mut [SpacePoint]) -> Result<()> {
        use rayon::prelude::*;
        if events.len() == 1 {
            return self.gather(events.start, dst);
        }
        let mut parts: Vec<(usize, &mut [SpacePoint])> = Vec::with_capacity(events.len());
        let mut rest = dst;
        for e in events {
            let (d, r) = rest.split_at_mut(self.len(e));
            parts.push((e, d));
            rest = r;
        }
        parts
            .par_iter_mut()
            .map(|(e, d)| self.gather(*e, d))
            .find_first(|r| r.is_err())
            .unwrap_or(Ok(()))
    }

    /// Event `e`'s spacepoints into `dst` (its length), checked on the way: copied
    /// ([`super::copy_checked`]) or gathered from the columns
    /// ([`SpacePointsRef::gather_checked`]).
    fn gather(&self, e: usize, dst: &mut [SpacePoint]) -> Result<()> {
        match self {
            Events::Rows(v, true) => {
                crate::staging::par_copy(dst, v[e]);
                Ok(())
            }
            Events::Rows(v, false) => super::copy_checked(dst, v[e]),
            Events::Columns(v) => v[e].gather_checked(dst),
        }
    }
}

/// Words of spacepoints gathered into pinned memory per DMA (4 MiB): the DMA of one group
/// runs while the host gathers the next.
const GATHER_WORDS: usize = (4 << 20) / 4;

/// Pinned host buffers of the seeding calls: spacepoints in, seeds and parameters out.
pub(crate) struct SeedStaging {
    input: crate::staging::Pinned<u32>,
    seeds: crate::staging::Pinned<u32>,
    params: crate::staging::Pinned<u32>,
}

impl Default for SeedStaging {
    fn default() -> Self {
        Self {
            input: crate::staging::Pinned::new(true),
            seeds: crate::staging::Pinned::new(false),
            params: crate::staging::Pinned::new(false),
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
    use super::{SeedingWorkspace, MAX_CAP};
    use crate::Error;

    #[test]
    fn capacities_scale_with_the_input_and_grow_with_a_margin() {
        let mut ws = SeedingWorkspace::with_capacity_factors([0.01, 2.0, 3.0]);
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
