//! Seeding launchers on [`GpuContext`]: the stage chain on device-resident spacepoints.

use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;
use detkit_gpu::seeding as k;

use super::*;
use crate::cuda::{cfg as launch_cfg, DeviceBuffer, GpuContext};
use crate::error::{invalid, DriverContext, Result};
use crate::{BucketOrder, ScanKind};

/// Seeds and parameters left on the device by [`GpuContext::seed_device`].
pub struct DeviceSeeds {
    /// `Seed[n]` as words.
    pub seeds: DeviceBuffer<u32>,
    /// `BoundParams[n]` as words.
    pub params: DeviceBuffer<u32>,
    /// Stage counts.
    pub stats: SeedingStats,
}

/// Per-stage GPU times (ms, from CUDA events around each stage's launches; host
/// synchronisations between stages are not included) and the host wall time of the call.
#[derive(Clone, Debug, Default)]
pub struct StageTimes {
    /// `(stage, ms)` in pipeline order.
    pub stages: Vec<(&'static str, f64)>,
    /// Wall time of the whole call, ms, including the host round trips.
    pub wall_ms: f64,
}

struct Timer<'a> {
    gpu: &'a GpuContext,
    on: bool,
    marks: Vec<(&'static str, CudaEvent, CudaEvent)>,
    open: Option<(&'static str, CudaEvent)>,
}

impl<'a> Timer<'a> {
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
    /// words). The caller validated the inputs (see [`check_spacepoints`], [`check_config`]).
    /// With `times`, per-stage GPU times are recorded.
    pub fn seed_device(
        &self,
        cfg: &SeedingConfig,
        sps: &DeviceBuffer<u32>,
        n: usize,
        times: Option<&mut StageTimes>,
    ) -> Result<DeviceSeeds> {
        check_config(cfg)?;
        if sps.len() < words::<SpacePoint>(n) || n as u64 >= 1 << 31 {
            return Err(invalid(
                "spacepoint buffer",
                format!("{} words for {n} spacepoints", sps.len()),
            ));
        }
        let wall = Instant::now();
        let mut tm = Timer {
            gpu: self,
            on: times.is_some(),
            marks: Vec::new(),
            open: None,
        };
        let mut stats = SeedingStats {
            spacepoints: n as u64,
            ..Default::default()
        };
        let empty = |s: SeedingStats| -> Result<DeviceSeeds> {
            Ok(DeviceSeeds {
                seeds: self.zeros(1)?,
                params: self.zeros(1)?,
                stats: s,
            })
        };
        let finish = |tm: Timer, times: Option<&mut StageTimes>| -> Result<()> {
            if let Some(t) = times {
                self.synchronize()?;
                t.stages.clear();
                for (name, a, b) in &tm.marks {
                    t.stages
                        .push((name, a.elapsed_ms(b).ctx("reading an event")? as f64));
                }
                t.wall_ms = wall.elapsed().as_secs_f64() * 1e3;
            }
            Ok(())
        };
        if n == 0 {
            finish(tm, times)?;
            return empty(stats);
        }
        let n64 = n as u64;
        let d_cfg = self.upload(bytemuck::cast_slice::<SeedingConfig, u32>(&[*cfg]))?;
        let nkeys = cfg.nkeys();

        // 1. binning: grid key per spacepoint, stable bucket (nkeys + 1 bins: the last holds
        //    the invalid ones), binned records in grid order.
        tm.start("bin_spacepoints")?;
        let mut keys = self.filled_u32(n, POISON)?;
        {
            let params = k::SeedingBinSpacepointsParams {
                cfg: self.ptr(&d_cfg).cast(),
                sps: self.ptr(sps).cast(),
                n: n64,
                keys: self.ptr_mut(&mut keys),
            };
            // SAFETY: config is one SeedingConfig; sps holds n SpacePoints (checked); keys n.
            let r = unsafe { self.launch(k::KERNEL_BIN, self.launch_items(n64), &params) };
            r?;
        }
        let (grid, content) = self.bucket_device(&keys, n, nkeys + 1, BucketOrder::Stable)?;
        tm.stop()?;
        let n_valid = self
            .stream()
            .clone_dtoh(&grid.slice(nkeys as usize..nkeys as usize + 1))
            .ctx("copying the valid count")?[0] as usize;
        stats.valid = n_valid as u64;
        stats.invalid = (n - n_valid) as u64;
        if n_valid == 0 {
            finish(tm, times)?;
            return empty(stats);
        }
        let nv = n_valid as u64;
        tm.start("bin_spacepoints")?;
        let mut binned = self.filled_u32(words::<k::BinnedSp>(n_valid), POISON)?;
        {
            let params = k::SeedingGatherSpacepointsParams {
                cfg: self.ptr(&d_cfg).cast(),
                sps: self.ptr(sps).cast(),
                keys: self.ptr(&keys),
                content: self.ptr(&content),
                n_valid: nv,
                out: self.ptr_mut(&mut binned).cast(),
            };
            // SAFETY: content holds n_valid indices < n (stable bucket of n keys); binned
            // holds n_valid records.
            let r = unsafe {
                self.launch(k::KERNEL_GATHER_SPACEPOINTS, self.launch_items(nv), &params)
            };
            r?;
        }
        tm.stop()?;

        // 2. doublets: count → scan → allocate → fill.
        tm.start("count_doublets")?;
        let mut n_bot = self.zeros::<u32>(n_valid + 1)?;
        let mut n_top = self.zeros::<u32>(n_valid + 1)?;
        let mut totals = self.zeros::<u64>(2)?;
        {
            let params = k::SeedingCountDoubletsParams {
                cfg: self.ptr(&d_cfg).cast(),
                grid: self.ptr(&grid),
                sps: self.ptr(&binned).cast(),
                n: nv,
                n_bot: self.ptr_mut(&mut n_bot),
                n_top: self.ptr_mut(&mut n_top),
                totals: self.ptr_mut(&mut totals),
            };
            // SAFETY: grid holds nkeys + 2 offsets, grid[nkeys] = n_valid; binned n_valid
            // records; counts n_valid + 1; totals two zeroed u64; one warp per middle.
            let r = unsafe {
                self.launch(
                    k::KERNEL_COUNT_DOUBLETS,
                    self.launch_items(32 * nv),
                    &params,
                )
            };
            r?;
        }
        tm.stop()?;
        let t = self.download(&totals)?;
        let (n_mb, n_mt) = (
            to_u32("middle-bottom doublets", t[0])?,
            to_u32("middle-top doublets", t[1])?,
        );
        stats.mid_bot = n_mb as u64;
        stats.mid_top = n_mt as u64;
        if n_mb == 0 || n_mt == 0 {
            finish(tm, times)?;
            return empty(stats);
        }
        tm.start("find_doublets")?;
        let mut off_bot = self.zeros::<u32>(n_valid + 1)?;
        let mut off_top = self.zeros::<u32>(n_valid + 1)?;
        self.scan_device(&n_bot, &mut off_bot, n_valid + 1, ScanKind::Exclusive)?;
        self.scan_device(&n_top, &mut off_top, n_valid + 1, ScanKind::Exclusive)?;
        let (nmb, nmt) = (n_mb as usize, n_mt as usize);
        let mut bot = self.filled_u32(words::<k::Doublet>(nmb), POISON)?;
        let mut lc_bot = self.filled_u32(words::<k::LinCircle>(nmb), POISON)?;
        let mut top = self.filled_u32(words::<k::Doublet>(nmt), POISON)?;
        let mut lc_top = self.filled_u32(words::<k::LinCircle>(nmt), POISON)?;
        {
            let params = k::SeedingFindDoubletsParams {
                cfg: self.ptr(&d_cfg).cast(),
                grid: self.ptr(&grid),
                sps: self.ptr(&binned).cast(),
                n: nv,
                n_bot: self.ptr(&n_bot),
                off_bot: self.ptr(&off_bot),
                off_top: self.ptr(&off_top),
                bot: self.ptr_mut(&mut bot).cast(),
                lc_bot: self.ptr_mut(&mut lc_bot).cast(),
                top: self.ptr_mut(&mut top).cast(),
                lc_top: self.ptr_mut(&mut lc_top).cast(),
            };
            // SAFETY: offsets are the exclusive scans of the counts the same predicate
            // produced; the outputs hold the totals; one warp per middle.
            let r = unsafe {
                self.launch(k::KERNEL_FIND_DOUBLETS, self.launch_items(32 * nv), &params)
            };
            r?;
        }
        tm.stop()?;

        // 3. triplets: count → scan → allocate → fill.
        tm.start("count_triplets")?;
        let nmb64 = nmb as u64;
        let mut t_cnt = self.zeros::<u32>(nmb + 1)?;
        let mut t_total = self.zeros::<u64>(1)?;
        {
            let params = k::SeedingCountTripletsParams {
                cfg: self.ptr(&d_cfg).cast(),
                sps: self.ptr(&binned).cast(),
                bot: self.ptr(&bot).cast(),
                lc_bot: self.ptr(&lc_bot).cast(),
                n_mb: nmb64,
                off_top: self.ptr(&off_top),
                lc_top: self.ptr(&lc_top).cast(),
                counts: self.ptr_mut(&mut t_cnt),
                total: self.ptr_mut(&mut t_total),
            };
            // SAFETY: bot/lc_bot hold n_mb entries; off_top n_valid + 1 offsets into lc_top.
            let r =
                unsafe { self.launch(k::KERNEL_COUNT_TRIPLETS, self.launch_items(nmb64), &params) };
            r?;
        }
        tm.stop()?;
        let n_tri = to_u32("triplets", self.download(&t_total)?[0])?;
        stats.triplets = n_tri as u64;
        if n_tri == 0 {
            finish(tm, times)?;
            return empty(stats);
        }
        tm.start("find_triplets")?;
        let mut off_tri = self.zeros::<u32>(nmb + 1)?;
        self.scan_device(&t_cnt, &mut off_tri, nmb + 1, ScanKind::Exclusive)?;
        let ntri = n_tri as usize;
        let mut tri = self.filled_u32(words::<k::Triplet>(ntri), POISON)?;
        {
            let params = k::SeedingFindTripletsParams {
                cfg: self.ptr(&d_cfg).cast(),
                sps: self.ptr(&binned).cast(),
                bot: self.ptr(&bot).cast(),
                lc_bot: self.ptr(&lc_bot).cast(),
                n_mb: nmb64,
                off_top: self.ptr(&off_top),
                top: self.ptr(&top).cast(),
                lc_top: self.ptr(&lc_top).cast(),
                off_tri: self.ptr(&off_tri),
                out: self.ptr_mut(&mut tri).cast(),
            };
            // SAFETY: off_tri is the exclusive scan of the counts; tri holds the total.
            let r =
                unsafe { self.launch(k::KERNEL_FIND_TRIPLETS, self.launch_items(nmb64), &params) };
            r?;
        }
        tm.stop()?;

        // 4. weights.
        tm.start("update_weights")?;
        let ntri64 = ntri as u64;
        let mut weights = self.filled_u32(ntri, POISON)?;
        {
            let params = k::SeedingUpdateWeightsParams {
                cfg: self.ptr(&d_cfg).cast(),
                tri: self.ptr(&tri).cast(),
                n_tri: ntri64,
                off_tri: self.ptr(&off_tri),
                weights: self.ptr_mut(&mut weights).cast(),
            };
            // SAFETY: tri holds n_tri triplets whose `mb` indexes off_tri (n_mb + 1 entries).
            let r = unsafe {
                self.launch(k::KERNEL_UPDATE_WEIGHTS, self.launch_items(ntri64), &params)
            };
            r?;
        }
        tm.stop()?;

        // 5. seed selection: per middle into fixed slots, scan, gather.
        tm.start("select_seeds")?;
        let cap = cfg.max_seeds_per_spm;
        let mut slots = self.filled_u32(words::<Seed>(n_valid * cap as usize), POISON)?;
        let mut s_cnt = self.zeros::<u32>(n_valid + 1)?;
        {
            let params = k::SeedingSelectSeedsParams {
                cfg: self.ptr(&d_cfg).cast(),
                sps: self.ptr(&binned).cast(),
                n: nv,
                off_bot: self.ptr(&off_bot),
                off_tri: self.ptr(&off_tri),
                tri: self.ptr(&tri).cast(),
                weights: self.ptr(&weights).cast(),
                slots: self.ptr_mut(&mut slots).cast(),
                counts: self.ptr_mut(&mut s_cnt),
            };
            // SAFETY: off_bot n_valid + 1 offsets into off_tri (n_mb + 1); slots hold
            // n_valid * max_seeds_per_spm seeds (checked <= 16 per middle).
            let r = unsafe { self.launch(k::KERNEL_SELECT_SEEDS, self.launch_items(nv), &params) };
            r?;
        }
        let mut s_off = self.zeros::<u32>(n_valid + 1)?;
        self.scan_device(&s_cnt, &mut s_off, n_valid + 1, ScanKind::Exclusive)?;
        tm.stop()?;
        let n_seeds = self
            .stream()
            .clone_dtoh(&s_off.slice(n_valid..n_valid + 1))
            .ctx("copying the seed count")?[0] as usize;
        stats.seeds = n_seeds as u64;
        if n_seeds == 0 {
            finish(tm, times)?;
            return empty(stats);
        }
        tm.start("select_seeds")?;
        let mut seeds = self.filled_u32(words::<Seed>(n_seeds), POISON)?;
        {
            let params = k::SeedingGatherSeedsParams {
                slots: self.ptr(&slots).cast(),
                counts: self.ptr(&s_cnt),
                off: self.ptr(&s_off),
                n: nv,
                cap,
                out: self.ptr_mut(&mut seeds).cast(),
                ..bytemuck::Zeroable::zeroed()
            };
            // SAFETY: counts <= cap per middle; s_off is their exclusive scan; seeds hold
            // the total.
            let r = unsafe { self.launch(k::KERNEL_GATHER_SEEDS, self.launch_items(nv), &params) };
            r?;
        }
        tm.stop()?;

        // 6. parameters.
        tm.start("estimate_params")?;
        let ns64 = n_seeds as u64;
        let mut params = self.filled_u32(words::<BoundParams>(n_seeds), POISON)?;
        {
            let params = k::SeedingEstimateParamsParams {
                cfg: self.ptr(&d_cfg).cast(),
                sps: self.ptr(sps).cast(),
                seeds: self.ptr(&seeds).cast(),
                n_seeds: ns64,
                out: self.ptr_mut(&mut params).cast(),
            };
            // SAFETY: seeds hold n_seeds seeds with input indices < n; params n_seeds.
            let r =
                unsafe { self.launch(k::KERNEL_ESTIMATE_PARAMS, self.launch_items(ns64), &params) };
            r?;
        }
        tm.stop()?;
        finish(tm, times)?;
        Ok(DeviceSeeds {
            seeds,
            params,
            stats,
        })
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
}
