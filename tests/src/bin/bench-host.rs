//! bench-host: the host doors (issue 30) against the kernels and the copies, in one run.
//!
//! For every family and call shape it prints: the public call on host data (`Backend`
//! method, results back in host memory) with pinned staging (the default) and with
//! pageable copies ([`HostCopies::Pageable`]); the same work device-resident (CUDA events
//! around the kernels); and a plain copy of the same bytes (input to the device, output
//! back) from pinned and from pageable memory. Every result is checked (against the CPU
//! oracle, or against the device-resident result where the oracle is too slow) before a
//! time is printed. Host rows are wall times of whole calls (the calls synchronise), median
//! of `--reps` after `--warmup` calls; the allocations the timed calls made are printed too
//! (0 expected: the workspace is warm).
//!
//! Usage: `bench-host [--reps 20] [--warmup 3] [--only cluster|cluster-calls|seed|pet|memcpy]
//! [--pet-run-log 24] [--phases [--timeline]] [--variants 0,..] [--csv FILE]` (`--phases`:
//! where the time of each pinned call goes, by phase, and with `--timeline` the marks of one
//! call in order; `--only cluster-calls`: the 1- and 64-event clustering calls alone;
//! `--variants`: the rows again for each measuring variant of the doors,
//! `detkit::phases::set_variant`, the row names suffixed `[vN]` (none is defined now: every
//! value runs the default path; the hook stays for the next A/B run);
//! `--only memcpy`: the host's own copy bandwidth into and out of pinned memory, by threads;
//! `--only devview`: the device-view entries on the Python benchmark's batches, `devview.rs`)

#[path = "bench-host/devview.rs"]
mod devview;

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use detkit::clustering::{self as cl, gen as cgen, Clusterer, Clusters, DeviceDigis, Digis};
use detkit::error::DriverContext;
use detkit::pet::cpu::{self as oracle, CoincideConfig};
use detkit::pet::{
    gen as pgen, Coincidence, PetLauncher, PetScanner, Single, SinglesView, StreamConfig,
};
use detkit::seeding::{
    as_words, gen as sgen, SeedingConfig, SeedingOutput, SeedingSettings, SeedingWorkspace,
    SpacePoint, SpacePointsRef,
};
use detkit::{Backend, GpuContext, HostCopies, Record};
use detkit_tests::{check, median, median_ms, sp_columns, sp_columns_ref};

struct Opts {
    reps: usize,
    warmup: usize,
    only: Option<String>,
    pet_run_log: u32,
    /// Per-phase host times of the pinned calls (`--phases`).
    phases: bool,
    /// With `--phases`: the timeline of one pinned call per row (`--timeline`).
    timeline: bool,
    /// The measuring variant of the pass running (`--variants`).
    variant: u32,
    /// Only the 1- and 64-event clustering calls (`--only cluster-calls`).
    calls_only: bool,
}

/// One printed row.
#[derive(Default)]
struct Row {
    what: String,
    /// Events (or items) per call.
    items: usize,
    pinned_ms: f64,
    pageable_ms: f64,
    device_ms: Option<f64>,
    copy_pinned_ms: f64,
    copy_pageable_ms: f64,
    bytes: (usize, usize),
    allocations: u64,
}

fn header() {
    println!(
        "{:<44} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>12} {:>6}",
        "call",
        "items",
        "pinned ms",
        "pageable",
        "device ms",
        "copy pin",
        "copy page",
        "x copy",
        "items/s",
        "allocs"
    );
}

fn print_row(r: &Row) {
    let best = r.pinned_ms.min(r.pageable_ms);
    println!(
        "{:<44} {:>6} {:>10.3} {:>10} {:>10} {:>10.3} {:>10.3} {:>8.2} {:>12.0} {:>6}",
        r.what,
        r.items,
        r.pinned_ms,
        if r.pageable_ms.is_nan() {
            "-".to_string()
        } else {
            format!("{:.3}", r.pageable_ms)
        },
        r.device_ms.map_or("-".to_string(), |d| format!("{d:.3}")),
        r.copy_pinned_ms,
        r.copy_pageable_ms,
        r.pinned_ms / r.copy_pinned_ms.min(r.copy_pageable_ms),
        r.items as f64 / best * 1e3,
        r.allocations
    );
    let _ = std::io::stdout().flush();
}

/// Median wall time (ms) of `f` over `reps` calls after `warmup` calls.
fn wall_ms(warmup: usize, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(t))
}

/// The plain copies of a call's bytes: `bytes_in` to the device and `bytes_out` back, from
/// and to pinned memory, then pageable memory; median wall ms of each (with the sync).
fn copies(g: &GpuContext, o: &Opts, bytes_in: usize, bytes_out: usize) -> Result<(f64, f64)> {
    let mut d_in = g.zeros::<u8>(bytes_in.max(1))?;
    let d_out = g.zeros::<u8>(bytes_out.max(1))?;
    let mut p_in = g.pinned::<u8>(bytes_in.max(1), true)?;
    let mut p_out = g.pinned::<u8>(bytes_out.max(1), false)?;
    let pin_in: &mut [u8] = &mut p_in.as_mut_slice()?[..bytes_in];
    let pin_out: &mut [u8] = &mut p_out.as_mut_slice()?[..bytes_out];
    let s = g.stream();
    let pinned = wall_ms(o.warmup, o.reps, || {
        if bytes_in > 0 {
            s.memcpy_htod(&*pin_in, &mut d_in.slice_mut(0..bytes_in))?;
        }
        if bytes_out > 0 {
            s.memcpy_dtoh(&d_out.slice(0..bytes_out), &mut *pin_out)?;
        }
        s.synchronize()?;
        Ok(())
    })?;
    let h_in = vec![1u8; bytes_in];
    let mut h_out = vec![0u8; bytes_out];
    let pageable = wall_ms(o.warmup, o.reps, || {
        if bytes_in > 0 {
            s.memcpy_htod(&h_in[..], &mut d_in.slice_mut(0..bytes_in))?;
        }
        if bytes_out > 0 {
            s.memcpy_dtoh(&d_out.slice(0..bytes_out), &mut h_out[..])?;
        }
        s.synchronize()?;
        Ok(())
    })?;
    Ok((pinned, pageable))
}

/// The two backends (pinned staging, pageable copies) on device 0.
fn backends() -> Result<[Backend; 2]> {
    Ok([
        Backend::cuda(0)?,
        Backend::cuda(0)?.with_host_copies(HostCopies::Pageable),
    ])
}

/// Times `f` on both backends (warm-up first); returns (pinned ms, pageable ms, allocations
/// during the timed pinned calls).
fn both(
    bs: &[Backend; 2],
    o: &Opts,
    mut f: impl FnMut(&Backend) -> Result<()>,
) -> Result<(f64, f64, u64)> {
    for _ in 0..o.warmup {
        f(&bs[0])?;
    }
    let before = bs[0].allocations();
    let p = wall_ms(0, o.reps, || f(&bs[0]))?;
    let allocs = bs[0].allocations() - before;
    let q = wall_ms(o.warmup, o.reps, || f(&bs[1]))?;
    if o.phases {
        print_phases(o, || f(&bs[0]))?;
    }
    Ok((p, q, allocs))
}

/// `--phases`: where the time of the next row's pinned call goes (ms per call, mean of
/// `--reps` calls): as it runs (GPU work overlapping, so the GPU's time shows up in `wait`),
/// then with a wait after each GPU phase (`upload`, `kernels` then hold the DMA's and the
/// kernels' time; `wait` the copy back).
fn print_phases(o: &Opts, mut f: impl FnMut() -> Result<()>) -> Result<()> {
    use detkit::phases;
    for sync in [false, true] {
        let mut wall = 0.0;
        phases::enable(true, sync);
        phases::take();
        for _ in 0..o.reps.max(1) {
            let t0 = Instant::now();
            let r = f();
            wall += t0.elapsed().as_secs_f64();
            if let Err(e) = r {
                phases::enable(false, false);
                return Err(e);
            }
        }
        let t = phases::take();
        if o.timeline {
            // One more call, its marks in order: `phase@start+length` (ms).
            phases::take_trace();
            phases::trace(true);
            phases::take();
            let r = f();
            phases::trace(false);
            phases::take();
            let steps: Vec<String> = phases::take_trace()
                .into_iter()
                .map(|(n, t0, d)| {
                    format!(
                        "{n}@{:.3}+{:.3}",
                        t0.as_secs_f64() * 1e3,
                        d.as_secs_f64() * 1e3
                    )
                })
                .collect();
            r?;
            println!(
                "  timeline{} (one call, ms): {}",
                if sync { ", synchronising" } else { "" },
                steps.join(" ")
            );
        }
        phases::enable(false, false);
        let per = |d: std::time::Duration| d.as_secs_f64() * 1e3 / o.reps.max(1) as f64;
        let parts: Vec<String> = phases::NAMES
            .iter()
            .zip(t)
            .filter(|(_, d)| !d.is_zero())
            .map(|(n, d)| format!("{n} {:.3}", per(d)))
            .collect();
        let sum: f64 = t.iter().map(|d| per(*d)).sum();
        println!(
            "  phases{} (next row, pinned, ms/call; wall {:.3}, marked {:.3}): {}",
            if sync { ", synchronising" } else { "" },
            wall * 1e3 / o.reps.max(1) as f64,
            sum,
            parts.join(", ")
        );
    }
    Ok(())
}

/// The element of `of` that belongs to backend `b` of `bs`.
fn pick<'a, T>(bs: &[Backend; 2], b: &Backend, of: &'a [T; 2]) -> &'a T {
    if std::ptr::eq(b, &bs[0]) {
        &of[0]
    } else {
        &of[1]
    }
}

/// The clustering door on the caller's own pinned memory (`Backend::pinned`): the digis
/// DMAed straight from it (checked on the device), the cluster indices straight into it
/// (`pinned in+out`), or into ordinary vectors (`pinned in`). Checked against the oracle
/// first; the allocations of the timed calls are counted.
#[allow(clippy::too_many_arguments)]
fn pinned_caller_rows(
    bs: &[Backend; 2],
    o: &Opts,
    rows: &mut Vec<Row>,
    (d, offs): (&Digis, &[u32]),
    want: &Clusters,
    device: f64,
    (cp, cq): (f64, f64),
    bytes: (usize, usize),
) -> Result<()> {
    let geo = cl::Geometry::phase1();
    let cut = Some(geo.default_cut);
    let b = &bs[0];
    let per_call = offs.len() - 1;
    let slots = per_call * geo.modules as usize;
    let mut pd = b.pinned_digis(d.len())?;
    pd.copy_from(d.into())?;
    let mut pc = b.pinned::<i32>(d.len())?;
    let mut pcim = b.pinned::<u32>(slots)?;
    let mut pmf = b.pinned::<u32>(slots)?;
    let mut out = Clusters::default();
    let events = if per_call > 1 { "events" } else { "event" };
    for in_out in [true, false] {
        let mut call = || -> Result<()> {
            if in_out {
                let o = cl::ClustersMut {
                    clus: &mut pc,
                    clus_in_module: &mut pcim,
                    module_first: &mut pmf,
                };
                b.cluster_events_into_slices(&pd, offs, &geo, cut, o)?;
            } else {
                b.cluster_events_into(&pd, offs, &geo, cut, &mut out)?;
            }
            Ok(())
        };
        call()?;
        let before = b.allocations();
        let ms = wall_ms(o.warmup, o.reps, &mut call)?;
        let allocations = b.allocations() - before;
        if o.phases {
            print_phases(o, &mut call)?;
        }
        if in_out {
            check("pinned cluster clus", &pc, &want.clus)?;
            check("pinned cluster clus_in_module", &pcim, &want.clus_in_module)?;
            check("pinned cluster module_first", &pmf, &want.module_first)?;
        } else {
            check("pinned-in cluster clus", &out.clus, &want.clus)?;
            check(
                "pinned-in module_first",
                &out.module_first,
                &want.module_first,
            )?;
        }
        let r = Row {
            what: format!(
                "cluster, {per_call} {events}, caller pinned {}",
                if in_out { "in+out" } else { "in" }
            ),
            items: per_call,
            pinned_ms: ms,
            pageable_ms: f64::NAN,
            device_ms: Some(device),
            copy_pinned_ms: cp,
            copy_pageable_ms: cq,
            bytes,
            allocations,
        };
        print_row(&r);
        rows.push(r);
    }
    Ok(())
}

fn cluster_rows(
    g: &std::sync::Arc<GpuContext>,
    bs: &[Backend; 2],
    o: &Opts,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let geo = cl::Geometry::phase1();
    let cut = Some(geo.default_cut);
    let events: Vec<Digis> = (0..16).map(|s| cgen::run3_event(100 + s)).collect();
    for per_call in [1usize, 64] {
        let mut d = Digis::default();
        let mut offs = vec![0u32];
        for k in 0..per_call {
            d.extend(&events[k % events.len()]);
            offs.push(d.len() as u32);
        }
        let want = if per_call == 1 {
            cl::cpu::cluster(&d, &offs, &geo, cut)
        } else {
            // The oracle per distinct event, concatenated.
            let parts: Vec<Clusters> = events
                .iter()
                .map(|e| cl::cpu::cluster(e, &[0, e.len() as u32], &geo, cut))
                .collect();
            let refs: Vec<&Clusters> = (0..per_call).map(|k| &parts[k % parts.len()]).collect();
            detkit_tests::concat_clusters(&refs)
        };
        let mut out = Clusters::default();
        for b in bs.iter() {
            b.cluster_events_into(&d, &offs, &geo, cut, &mut out)?;
            detkit_tests::exact_clusters("cluster", &out, &want).map_err(anyhow::Error::msg)?;
        }
        let (pinned_ms, pageable_ms, allocations) = both(bs, o, |b| {
            b.cluster_events_into(&d, &offs, &geo, cut, &mut out)?;
            Ok(())
        })?;
        // Device-resident: the same batch already on the device, the chain as one graph.
        let dd = DeviceDigis::upload(g, &d, &offs)?;
        let mut c = Clusterer::new(g, &geo, d.len(), per_call)?;
        c.run_graph(&dd, cut)?;
        check("cluster device-resident", &c.results(&dd)?.clus, &want.clus)?;
        let device = median_ms(g, o.warmup, o.reps, || c.run_graph(&dd, cut))?;
        let slots = per_call * geo.modules as usize;
        let bytes = (8 * d.len() + 4 * (per_call + 1), 4 * d.len() + 8 * slots);
        let (cp, cq) = copies(g, o, bytes.0, bytes.1)?;
        let r = Row {
            what: format!(
                "cluster_events_into, {per_call} Run-3 event{}",
                if per_call > 1 { "s" } else { "" }
            ),
            items: per_call,
            pinned_ms,
            pageable_ms,
            device_ms: Some(device),
            copy_pinned_ms: cp,
            copy_pageable_ms: cq,
            bytes,
            allocations,
        };
        print_row(&r);
        rows.push(r);
        pinned_caller_rows(bs, o, rows, (&d, &offs), &want, device, (cp, cq), bytes)?;
        // The device-view entry (`cluster_events_device`, what Python calls for CUDA arrays):
        // the same batch in device buffers the caller owns, results in new device buffers,
        // dropped after each call (as a consumer would).
        let b0 = &bs[0];
        let view = cl::DigisDev::from_buffers(g, [&dd.module, &dd.x, &dd.y, &dd.adc]);
        let got = b0
            .cluster_events_device(view, &offs, &geo, cut)?
            .to_host(g)?;
        detkit_tests::exact_clusters("cluster_events_device", &got, &want)
            .map_err(anyhow::Error::msg)?;
        let dev_call = || -> Result<()> {
            drop(b0.cluster_events_device(view, &offs, &geo, cut)?);
            Ok(())
        };
        let view_ms = wall_ms(o.warmup, o.reps, dev_call)?;
        if o.phases {
            print_phases(o, dev_call)?;
        }
        let r = Row {
            what: format!(
                "cluster_events_device, {per_call} Run-3 event{}",
                if per_call > 1 { "s" } else { "" }
            ),
            items: per_call,
            pinned_ms: view_ms,
            pageable_ms: f64::NAN,
            device_ms: Some(device),
            copy_pinned_ms: f64::NAN,
            copy_pageable_ms: f64::NAN,
            bytes: (0, 0),
            allocations: 0,
        };
        print_row(&r);
        rows.push(r);
    }
    if o.calls_only {
        return Ok(());
    }
    // Several threads on one backend (each call takes a workspace of its own from the pool,
    // with its own stream): 1 event per call from 1, 2 and 4 threads; a row's time is per
    // round of one call per thread.
    let ev = &events[0];
    let want0 = cl::cpu::cluster(ev, &[0, ev.len() as u32], &geo, cut);
    for threads in [1usize, 2, 4] {
        let b = &bs[0];
        let rounds = o.reps.max(1) * 4;
        let run = |rounds: usize| -> Result<f64> {
            let t0 = Instant::now();
            std::thread::scope(|s| -> Result<()> {
                let hs: Vec<_> = (0..threads)
                    .map(|_| {
                        s.spawn(|| -> Result<()> {
                            let mut out = Clusters::default();
                            for _ in 0..rounds {
                                b.cluster_events_into(
                                    ev,
                                    &[0, ev.len() as u32],
                                    &geo,
                                    cut,
                                    &mut out,
                                )?;
                            }
                            if out.clus != want0.clus {
                                bail!("CHECK FAILED cluster from {threads} threads");
                            }
                            Ok(())
                        })
                    })
                    .collect();
                for h in hs {
                    h.join()
                        .map_err(|_| anyhow::anyhow!("a thread panicked"))??;
                }
                Ok(())
            })?;
            Ok(t0.elapsed().as_secs_f64() * 1e3 / rounds as f64)
        };
        run(o.warmup.max(1))?;
        let before = b.allocations();
        let per_round = run(rounds)?;
        let allocations = b.allocations() - before;
        let bytes = (
            threads * 8 * ev.len(),
            threads * (4 * ev.len() + 8 * geo.modules as usize),
        );
        let (cp, cq) = copies(g, o, bytes.0, bytes.1)?;
        let r = Row {
            what: format!("cluster_events_into, 1 event/call, {threads} thread(s)"),
            items: threads,
            pinned_ms: per_round,
            pageable_ms: f64::NAN,
            device_ms: None,
            copy_pinned_ms: cp,
            copy_pageable_ms: cq,
            bytes,
            allocations,
        };
        print_row(&r);
        rows.push(r);
    }
    // Streams of batches through `cluster_batches` (three lanes: upload, run and download of
    // different batches overlap): 64 batches of 1 and of 16 events per call.
    let parts: Vec<Clusters> = events
        .iter()
        .map(|e| cl::cpu::cluster(e, &[0, e.len() as u32], &geo, cut))
        .collect();
    for per_batch in [1usize, 16] {
        let nb = 64;
        let built: Vec<(Digis, Vec<u32>, Clusters)> = (0..nb)
            .map(|i| {
                let mut d = Digis::default();
                let mut offs = vec![0u32];
                let mut want = Vec::new();
                for k in 0..per_batch {
                    let j = (i * per_batch + k) % events.len();
                    d.extend(&events[j]);
                    offs.push(d.len() as u32);
                    want.push(&parts[j]);
                }
                (d, offs, detkit_tests::concat_clusters(&want))
            })
            .collect();
        let batches: Vec<(cl::DigisRef, &[u32])> = built
            .iter()
            .map(|(d, o, _)| (cl::DigisRef::from(d), o.as_slice()))
            .collect();
        let mut bad = None;
        bs[0].cluster_batches(&batches, &geo, cut, |i, c| {
            if c.clus != built[i].2.clus {
                bad = Some(i);
            }
            Ok(())
        })?;
        if let Some(i) = bad {
            bail!("CHECK FAILED cluster_batches batch {i} differs from the oracle");
        }
        for _ in 0..o.warmup {
            bs[0].cluster_batches(&batches, &geo, cut, |_, _| Ok(()))?;
        }
        let before = bs[0].allocations();
        let pinned_ms = wall_ms(0, o.reps, || {
            bs[0].cluster_batches(&batches, &geo, cut, |_, _| Ok(()))?;
            Ok(())
        })?;
        let allocations = bs[0].allocations() - before;
        let n: usize = built.iter().map(|(d, _, _)| d.len()).sum();
        let slots = nb * per_batch * geo.modules as usize;
        let bytes = (8 * n + 4 * (nb * (per_batch + 1)), 4 * n + 8 * slots);
        let (cp, cq) = copies(g, o, bytes.0, bytes.1)?;
        let r = Row {
            what: format!("cluster_batches, {nb} x {per_batch} Run-3 events"),
            items: nb * per_batch,
            pinned_ms,
            pageable_ms: f64::NAN,
            device_ms: None,
            copy_pinned_ms: cp,
            copy_pageable_ms: cq,
            bytes,
            allocations,
        };
        print_row(&r);
        rows.push(r);
    }
    Ok(())
}

/// One event through `seed_into`.
fn b_one(
    b: &Backend,
    sps: &[SpacePoint],
    cfg: &SeedingConfig,
    out: &mut SeedingOutput,
) -> Result<()> {
    b.seed_into(sps, cfg, out)?;
    Ok(())
}

fn seed_rows(g: &GpuContext, bs: &[Backend; 2], o: &Opts, rows: &mut Vec<Row>) -> Result<()> {
    let cfg = SeedingSettings::default().to_config()?;
    let distinct: Vec<Vec<SpacePoint>> = (0..8)
        .map(|s| sgen::generate(300 + s, 200.0, true).spacepoints)
        .collect();
    let (seeds0, _) = detkit::seeding::cpu::seeds(&cfg, &distinct[0]);
    let params0 = detkit::seeding::cpu::params(&cfg, &distinct[0], &seeds0);
    for per_call in [1usize, 64] {
        let events: Vec<&[SpacePoint]> = (0..per_call)
            .map(|k| distinct[k % distinct.len()].as_slice())
            .collect();
        // Device-resident: the events concatenated on the device, one chain per batch.
        let mut all = Vec::new();
        let mut offsets = vec![0usize];
        for e in &events {
            all.extend_from_slice(e);
            offsets.push(all.len());
        }
        let d_sps = g.upload(as_words(&all))?;
        let mut ws = SeedingWorkspace::new();
        g.seed_batch_device(&mut ws, &cfg, &d_sps, &offsets, None)?;
        let resident = g.download_batch(&ws)?;
        check("seed device-resident event 0", &resident[0].0, &seeds0)?;
        let mut out: Vec<SeedingOutput> = Vec::new();
        for b in bs.iter() {
            b.seed_events_into(&events, &cfg, &mut out)?;
            check("seed event 0 seeds", &out[0].seeds, &seeds0)?;
            check("seed event 0 params", &out[0].params, &params0)?;
            for (k, (got, (s, p))) in out.iter().zip(&resident).enumerate() {
                check(&format!("seed event {k} seeds"), &got.seeds, s)?;
                check(&format!("seed event {k} params"), &got.params, p)?;
            }
        }
        let mut one = SeedingOutput::default();
        let (pinned_ms, pageable_ms, allocations) = both(bs, o, |b| {
            if per_call == 1 {
                b.seed_into(events[0], &cfg, &mut one)?;
            } else {
                b.seed_events_into(&events, &cfg, &mut out)?;
            }
            Ok(())
        })?;
        if o.phases && per_call == 1 {
            // Where one event's call goes, stamp by stamp: the median time of each stamp
            // (ms from the call's first) over `--reps` calls, and in how many calls it came.
            detkit::phases::enable(true, false);
            detkit::phases::take_timeline();
            let mut seen: Vec<(&'static str, Vec<f64>)> = Vec::new();
            let mut walls = Vec::new();
            for _ in 0..o.reps.max(1) {
                let t0 = Instant::now();
                b_one(&bs[0], events[0], &cfg, &mut one)?;
                walls.push(t0.elapsed().as_secs_f64() * 1e3);
                for (t, _, label, _) in detkit::phases::take_timeline() {
                    match seen.iter_mut().find(|(l, _)| *l == label) {
                        Some((_, v)) => v.push(t),
                        None => seen.push((label, vec![t])),
                    }
                }
            }
            detkit::phases::enable(false, false);
            detkit::phases::take();
            let mut line: Vec<(f64, String)> = seen
                .into_iter()
                .map(|(label, v)| {
                    let k = v.len();
                    let m = median(v);
                    (m, format!("{label} {m:.3} ({k})"))
                })
                .collect();
            line.sort_by(|a, b| a.0.total_cmp(&b.0));
            let text: Vec<String> = line.into_iter().map(|x| x.1).collect();
            println!(
                "  timeline, one event (median of {} calls, wall {:.3} ms; ms from the first stamp, (calls)): {}",
                o.reps.max(1),
                median(walls),
                text.join("; ")
            );
        }
        if o.phases && per_call > 1 {
            // One pipelined call's parts on their threads (ms from its first stamp).
            detkit::phases::enable(true, false);
            detkit::phases::take_timeline();
            let t0 = Instant::now();
            bs[0].seed_events_into(&events, &cfg, &mut out)?;
            let wall = t0.elapsed().as_secs_f64() * 1e3;
            let tl = detkit::phases::take_timeline();
            detkit::phases::enable(false, false);
            detkit::phases::take();
            let line: Vec<String> = tl
                .iter()
                .map(|(t, th, label, part)| format!("{t:.3} t{th} p{part} {label}"))
                .collect();
            println!(
                "  timeline (one call, wall {wall:.3} ms): {}",
                line.join("; ")
            );
        }
        let device = median_ms(g, o.warmup, o.reps, || {
            g.seed_batch_device(&mut ws, &cfg, &d_sps, &offsets, None)
                .map(|_| ())
        })?;
        if o.phases && per_call > 1 {
            // The device-resident chain of the first k events, for the pipeline's part sizes:
            // what the GPU needs for parts of that size on their own.
            let mut line = Vec::new();
            for k in [2usize, 4, 8, 16, 24, 32, 48] {
                let d_k = g.upload(as_words(&all[..offsets[k]]))?;
                let mut ws_k = SeedingWorkspace::new();
                let ms = median_ms(g, o.warmup, o.reps, || {
                    g.seed_batch_device(&mut ws_k, &cfg, &d_k, &offsets[..=k], None)
                        .map(|_| ())
                })?;
                line.push(format!("{k} ev {ms:.3} ms ({:.4}/ev)", ms / k as f64));
            }
            println!(
                "  device-resident chain of the first k events: {}; {per_call} ev {device:.3} ms ({:.4}/ev)",
                line.join(", "),
                device / per_call as f64
            );
        }
        let nseeds: usize = resident.iter().map(|(s, _)| s.len()).sum();
        let bytes = (
            20 * all.len(),
            nseeds
                * (std::mem::size_of::<detkit::seeding::Seed>()
                    + std::mem::size_of::<detkit::seeding::BoundParams>()),
        );
        let (cp, cq) = copies(g, o, bytes.0, bytes.1)?;
        let r = Row {
            what: if per_call == 1 {
                "seed_into, 1 <mu>=200 event".into()
            } else {
                format!("seed_events_into, {per_call} <mu>=200 events")
            },
            items: per_call,
            pinned_ms,
            pageable_ms,
            device_ms: Some(device),
            copy_pinned_ms: cp,
            copy_pageable_ms: cq,
            bytes,
            allocations,
        };
        print_row(&r);
        rows.push(r);
        // The same events as five columns each (the layout Python holds): interleaved into
        // the pinned upload buffer and checked on the way.
        let cols: Vec<[Vec<f32>; 5]> = events.iter().map(|e| sp_columns(e)).collect();
        let col_refs: Vec<SpacePointsRef> = cols.iter().map(sp_columns_ref).collect();
        bs[0].seed_columns_into(&col_refs, &cfg, &mut out)?;
        for (k, (got, (s, p))) in out.iter().zip(&resident).enumerate() {
            check(&format!("seed columns event {k} seeds"), &got.seeds, s)?;
            check(&format!("seed columns event {k} params"), &got.params, p)?;
        }
        for _ in 0..o.warmup {
            bs[0].seed_columns_into(&col_refs, &cfg, &mut out)?;
        }
        let before = bs[0].allocations();
        let cols_ms = wall_ms(0, o.reps, || {
            bs[0].seed_columns_into(&col_refs, &cfg, &mut out)?;
            Ok(())
        })?;
        let r = Row {
            what: format!("seed_columns_into, {per_call} <mu>=200 event(s)"),
            items: per_call,
            pinned_ms: cols_ms,
            pageable_ms: f64::NAN,
            device_ms: Some(device),
            copy_pinned_ms: cp,
            copy_pageable_ms: cq,
            bytes,
            allocations: bs[0].allocations() - before,
        };
        print_row(&r);
        rows.push(r);
        if per_call == 64 && o.variant == 0 {
            // Python's bench events (`bench_host.py` seed64: seeds 1..=64, all distinct: 51 MB
            // of input where the rows above read 8 events' 6.4 MB), through the same door, so
            // that the two benches' rows compare (in the pass of variant 0 only).
            let py: Vec<Vec<SpacePoint>> = (1..=64u64)
                .map(|s| sgen::generate(s, 200.0, true).spacepoints)
                .collect();
            let py_cols: Vec<[Vec<f32>; 5]> = py.iter().map(|e| sp_columns(e)).collect();
            let py_refs: Vec<SpacePointsRef> = py_cols.iter().map(sp_columns_ref).collect();
            bs[0].seed_columns_into(&py_refs, &cfg, &mut out)?;
            for k in [0usize, 63] {
                let (s, _) = detkit::seeding::cpu::seeds(&cfg, &py[k]);
                let p = detkit::seeding::cpu::params(&cfg, &py[k], &s);
                check(&format!("seed distinct event {k} seeds"), &out[k].seeds, &s)?;
                check(
                    &format!("seed distinct event {k} params"),
                    &out[k].params,
                    &p,
                )?;
            }
            let mut all_py = Vec::new();
            let mut offs_py = vec![0usize];
            for e in &py {
                all_py.extend_from_slice(e);
                offs_py.push(all_py.len());
            }
            let d_py = g.upload(as_words(&all_py))?;
            let mut ws_py = SeedingWorkspace::new();
            let dev_py = median_ms(g, o.warmup, o.reps, || {
                g.seed_batch_device(&mut ws_py, &cfg, &d_py, &offs_py, None)
                    .map(|_| ())
            })?;
            let before = bs[0].allocations();
            let ms = wall_ms(o.warmup, o.reps, || {
                bs[0].seed_columns_into(&py_refs, &cfg, &mut out)?;
                Ok(())
            })?;
            let r = Row {
                what: "seed_columns_into, 64 distinct (Python's)".into(),
                items: per_call,
                pinned_ms: ms,
                pageable_ms: f64::NAN,
                device_ms: Some(dev_py),
                copy_pinned_ms: f64::NAN,
                copy_pageable_ms: f64::NAN,
                bytes: (20 * all_py.len(), 0),
                allocations: bs[0].allocations() - before,
            };
            print_row(&r);
            rows.push(r);
        }
    }
    Ok(())
}

fn pet_rows(g: &GpuContext, bs: &[Backend; 2], o: &Opts, rows: &mut Vec<Row>) -> Result<()> {
    let scanner = pgen::small_animal_scanner(11);
    let n = 1usize << 22;
    eprintln!("pet: generating 2^22 frames");
    let acq = pgen::acquisition_par(
        &scanner,
        &pgen::AcquisitionConfig {
            seed: 5,
            singles: n,
            singles_rate: 2e7,
            slice: u64::MAX,
            ..Default::default()
        },
    );
    let frames = &acq.frames[..n.min(acq.frames.len())];
    let nf = frames.len();
    let bytes = pgen::frame_bytes(frames);
    let (want_s, _) =
        oracle::convert_par(frames, &scanner.params, &scanner.position, &scanner.energy);
    let want_sorted = oracle::sort(&want_s)?;
    let c = CoincideConfig::prompt(scanner.time_window);
    let want_pairs = oracle::coincide(&want_sorted, &c)?;
    let handles = [bs[0].load_scanner(&scanner)?, bs[1].load_scanner(&scanner)?];
    let mut singles: Vec<Single> = Vec::new();
    for (b, h) in bs.iter().zip(&handles) {
        b.pet_convert_into(bytes, h, &mut singles)?;
        check("pet convert", &singles, &want_s)?;
    }
    // convert
    let (pinned_ms, pageable_ms, allocations) = both(bs, o, |b| {
        b.pet_convert_into(bytes, pick(bs, b, &handles), &mut singles)?;
        Ok(())
    })?;
    let pet = PetLauncher::new(g);
    let ds = pet.load_scanner(&scanner)?;
    let d_frames = g.upload(bytes)?;
    let mut d_out = g.zeros::<Record<Single>>(nf)?;
    let mut d_stats = g.zeros::<u32>(detkit_gpu::pet::STAT_WORDS)?;
    let device = median_ms(g, o.warmup, o.reps, || {
        pet.convert(&d_frames, nf, &ds, &mut d_out, 0, &mut d_stats)
    })?;
    let b_out = 16 * want_s.len();
    let (cp, cq) = copies(g, o, bytes.len(), b_out)?;
    let mut push = |r: Row| {
        print_row(&r);
        rows.push(r);
    };
    push(Row {
        what: "pet_convert_into, 2^22 frames, handle".into(),
        items: nf,
        pinned_ms,
        pageable_ms,
        device_ms: Some(device),
        copy_pinned_ms: cp,
        copy_pageable_ms: cq,
        bytes: (bytes.len(), b_out),
        allocations,
    });
    // The same with a plain Scanner (tables compared with the last ones on every call).
    let (pp, pq, pa) = both(bs, o, |b| {
        b.pet_convert(frames, &scanner)?;
        Ok(())
    })?;
    push(Row {
        what: "pet_convert, 2^22 frames, plain Scanner".into(),
        items: nf,
        pinned_ms: pp,
        pageable_ms: pq,
        device_ms: Some(device),
        copy_pinned_ms: cp,
        copy_pageable_ms: cq,
        bytes: (bytes.len(), b_out),
        allocations: pa,
    });
    // sort
    let ns = want_s.len();
    let mut sorted = Vec::new();
    for b in bs.iter() {
        b.pet_sort_into(&want_s, &mut sorted)?;
        check("pet sort", &sorted, &want_sorted)?;
    }
    let (sp, sq, sa) = both(bs, o, |b| {
        b.pet_sort_into(&want_s, &mut sorted)?;
        Ok(())
    })?;
    let pristine = g.upload_records(&want_s)?;
    let mut a = g.zeros::<Record<Single>>(ns.max(1))?;
    let mut bb = g.zeros::<Record<Single>>(ns.max(1))?;
    // Each timed sort starts from the unsorted singles (restored outside the timing).
    let mut times = Vec::new();
    for rep in 0..o.warmup + o.reps {
        g.stream()
            .memcpy_dtod(&pristine, &mut a)
            .ctx("restoring the singles")?;
        let t = median_ms(g, 0, 1, || {
            pet.sort_radix(&mut a, &mut bb, 0, ns).map(|_| ())
        })?;
        if rep >= o.warmup {
            times.push(t);
        }
    }
    let sort_device = median(times);
    let (cp, cq) = copies(g, o, 16 * ns, 16 * ns)?;
    push(Row {
        what: format!("pet_sort_into, {ns} singles"),
        items: ns,
        pinned_ms: sp,
        pageable_ms: sq,
        device_ms: Some(sort_device),
        copy_pinned_ms: cp,
        copy_pageable_ms: cq,
        bytes: (16 * ns, 16 * ns),
        allocations: sa,
    });
    // The device-view door (issue 27): singles already on the device in, a new device
    // buffer out (the input copied device-to-device into the workspace, sorted, copied out).
    let view = SinglesView::from_buffer(g, &pristine, ns);
    check(
        "pet sort device view",
        &bs[0].pet_sort_device(view)?.to_host(g)?,
        &want_sorted,
    )?;
    let sort_view = wall_ms(o.warmup, o.reps, || {
        bs[0].pet_sort_device(view)?;
        Ok(())
    })?;
    push(Row {
        what: format!("pet_sort_device, {ns} singles (view)"),
        items: ns,
        pinned_ms: sort_view,
        pageable_ms: f64::NAN,
        device_ms: Some(sort_device),
        copy_pinned_ms: cp,
        copy_pageable_ms: cq,
        bytes: (16 * ns, 16 * ns),
        allocations: 0,
    });
    // coincide
    let mut pairs: Vec<Coincidence> = Vec::new();
    for b in bs.iter() {
        b.pet_coincide_into(&want_sorted, &c, &mut pairs)?;
        check("pet coincide", &pairs, &want_pairs)?;
    }
    let (qp, qq, qa) = both(bs, o, |b| {
        b.pet_coincide_into(&want_sorted, &c, &mut pairs)?;
        Ok(())
    })?;
    let d_sorted = g.upload_records(&want_sorted)?;
    let mut scratch = detkit::pet::CoincideScratch::default();
    let co_device = median_ms(g, o.warmup, o.reps, || {
        pet.coincide_resident(&mut scratch, &d_sorted, 0, ns, &c, f64::INFINITY)
            .map(|_| ())
    })?;
    let b_pairs = 32 * want_pairs.len();
    let (cp, cq) = copies(g, o, 16 * ns, b_pairs)?;
    push(Row {
        what: format!("pet_coincide_into, {ns} singles"),
        items: ns,
        pinned_ms: qp,
        pageable_ms: qq,
        device_ms: Some(co_device),
        copy_pinned_ms: cp,
        copy_pageable_ms: cq,
        bytes: (16 * ns, b_pairs),
        allocations: qa,
    });
    let view = SinglesView::from_buffer(g, &d_sorted, ns);
    check(
        "pet coincide device view",
        &bs[0].pet_coincide_device(view, &c)?.to_host(g)?,
        &want_pairs,
    )?;
    let co_view = wall_ms(o.warmup, o.reps, || {
        bs[0].pet_coincide_device(view, &c)?;
        Ok(())
    })?;
    push(Row {
        what: format!("pet_coincide_device, {ns} singles (view)"),
        items: ns,
        pinned_ms: co_view,
        pageable_ms: f64::NAN,
        device_ms: Some(co_device),
        copy_pinned_ms: cp,
        copy_pageable_ms: cq,
        bytes: (16 * ns, b_pairs),
        allocations: 0,
    });
    drop(acq);
    // pet run: frames streamed from a file (in the page cache after the first run).
    let log = o.pet_run_log;
    let n = 1usize << log;
    eprintln!("pet run: generating 2^{log} frames");
    let scanner = pgen::bench_scanner(11);
    let sliced = pgen::acquisition_par(
        &scanner,
        &pgen::AcquisitionConfig {
            seed: 6,
            singles: n,
            singles_rate: 2e7,
            slice: 100_000_000,
            ..Default::default()
        },
    );
    let frames = &sliced.frames[..n.min(sliced.frames.len())];
    let bytes = pgen::frame_bytes(frames);
    let (s, _) = oracle::convert_par(frames, &scanner.params, &scanner.position, &scanner.energy);
    let c = CoincideConfig::prompt(scanner.time_window);
    let want = oracle::coincide(&oracle::sort(&s)?, &c)?;
    let tmp = std::env::temp_dir().join(format!("bench-host-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let file = tmp.join("frames.bin");
    std::fs::write(&file, bytes)?;
    let sc = StreamConfig {
        chunk_frames: (frames.len() / 8).max(1 << 16),
        pending_capacity: 1 << 22,
    };
    let handles = [bs[0].load_scanner(&scanner)?, bs[1].load_scanner(&scanner)?];
    for (b, h) in bs.iter().zip(&handles) {
        let mut got = Vec::new();
        b.pet_run_file(
            &file,
            h,
            &c,
            &sc,
            |p| {
                got.extend_from_slice(p);
                Ok(())
            },
            |_| {},
        )?;
        check("pet run", &got, &want)?;
    }
    // The run with its pairs written to a file, and the plain writes of the same bytes (the
    // floor: no detkit call), on each file system: the temporary directory (the device
    // host's /tmp) and /dev/shm (tmpfs: page-cache pages only, no block allocation).
    let b_pairs = 32 * want.len();
    let pair_bytes = vec![0x5au8; b_pairs];
    let mut dirs = vec![("tmp", tmp.clone())];
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        let d = shm.join(format!("bench-host-{}", std::process::id()));
        if std::fs::create_dir_all(&d).is_ok() {
            dirs.push(("shm", d));
        }
    }
    let write_pairs = |b: &Backend, h: &PetScanner, out: &std::path::Path| -> Result<()> {
        let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
        b.pet_run_file(
            &file,
            h,
            &c,
            &sc,
            |p| {
                w.write_all(bytemuck::cast_slice(p))
                    .map_err(|e| detkit::Error::Io {
                        file: "pairs.bin".into(),
                        source: e,
                    })
            },
            |_| {},
        )?;
        w.flush()?;
        Ok(())
    };
    let mut file_rows = Vec::new();
    for (label, dir) in &dirs {
        let out_file = dir.join("pairs.bin");
        let (rp, rq, ra) = both(bs, o, |b| write_pairs(b, pick(bs, b, &handles), &out_file))?;
        // The floor of the row above: the same bytes written to the same file the same way
        // (created, written through a BufWriter, flushed), with no detkit call.
        let write_ms = wall_ms(o.warmup, o.reps, || {
            let mut w = std::io::BufWriter::new(std::fs::File::create(&out_file)?);
            w.write_all(&pair_bytes)?;
            w.flush()?;
            Ok(())
        })?;
        // What the floor is made of: the file's pages kept (opened without truncating, the
        // bytes written over the last run's: no page or block allocation, the copy into the
        // page cache only), and a file truncated and preallocated (`set_len`) first.
        let overwrite_ms = wall_ms(o.warmup, o.reps, || {
            let mut f = std::fs::OpenOptions::new().write(true).open(&out_file)?;
            f.write_all(&pair_bytes)?;
            Ok(())
        })?;
        let prealloc_ms = wall_ms(o.warmup, o.reps, || {
            let mut f = std::fs::File::create(&out_file)?;
            f.set_len(b_pairs as u64)?;
            f.write_all(&pair_bytes)?;
            Ok(())
        })?;
        std::fs::remove_file(&out_file).ok();
        file_rows.push((*label, rp, rq, ra, write_ms, overwrite_ms, prealloc_ms));
    }
    // The same call with the pairs discarded: the library's rate on this data, so the rows
    // above show what writing the pairs file costs beside it.
    let (dp, dq, da) = both(bs, o, |b| {
        let h = pick(bs, b, &handles);
        b.pet_run_file(&file, h, &c, &sc, |_| Ok(()), |_| {})?;
        Ok(())
    })?;
    // The memory floor under every write: the same bytes copied into memory already mapped.
    let mut sink_buf = vec![0u8; b_pairs];
    let memcpy_ms = wall_ms(o.warmup, o.reps, || {
        sink_buf.copy_from_slice(&pair_bytes);
        std::hint::black_box(&sink_buf);
        Ok(())
    })?;
    let (cp, cq) = copies(g, o, bytes.len(), b_pairs)?;
    std::fs::remove_dir_all(&tmp).ok();
    for (_, dir) in &dirs[1..] {
        std::fs::remove_dir_all(dir).ok();
    }
    push(Row {
        what: format!("pet_run_file, 2^{log} frames, pairs discarded"),
        items: frames.len(),
        pinned_ms: dp,
        pageable_ms: dq,
        device_ms: None,
        copy_pinned_ms: cp,
        copy_pageable_ms: cq,
        bytes: (bytes.len(), b_pairs),
        allocations: da,
    });
    let plain = |what: String, ms: f64| Row {
        what,
        items: want.len(),
        pinned_ms: ms,
        pageable_ms: ms,
        device_ms: None,
        copy_pinned_ms: cp,
        copy_pageable_ms: cq,
        bytes: (0, b_pairs),
        allocations: 0,
    };
    push(plain(
        format!("memcpy of the same pairs ({b_pairs} bytes)"),
        memcpy_ms,
    ));
    for (label, rp, rq, ra, write_ms, overwrite_ms, prealloc_ms) in file_rows {
        push(Row {
            what: format!("pet_run_file, 2^{log} frames, pairs to {label}"),
            items: frames.len(),
            pinned_ms: rp,
            pageable_ms: rq,
            device_ms: None,
            copy_pinned_ms: cp,
            copy_pageable_ms: cq,
            bytes: (bytes.len(), b_pairs),
            allocations: ra,
        });
        push(plain(
            format!("plain write of the same pairs to {label}"),
            write_ms,
        ));
        push(plain(
            format!("same, over the file's pages ({label})"),
            overwrite_ms,
        ));
        push(plain(format!("same, set_len first ({label})"), prealloc_ms));
    }
    Ok(())
}

/// `--only memcpy`: the host's copy bandwidth (GB/s of bytes copied) of `MB` megabytes with
/// 1 to 16 threads (rayon pools of that size, parts of 64 KiB): pageable into write-combined
/// pinned memory (the upload staging), into cached pinned memory, into pageable memory, and
/// cached pinned into pageable (the download side); then the upload staging's copy while
/// the DMA engine reads another pinned buffer of the same size (both directions busy, as in
/// a door call). The floor of a door call is its bytes over these rates.
fn memcpy_rows(g: &GpuContext, o: &Opts) -> Result<()> {
    use rayon::prelude::*;
    const MB: usize = 58;
    let n = MB << 20;
    let src: Vec<u8> = (0..n)
        .map(|i| ((i * 2654435761usize) >> 13) as u8)
        .collect();
    let mut page = vec![1u8; n];
    let mut wc = g.pinned::<u8>(n, true)?;
    let mut cached = g.pinned::<u8>(n, false)?;
    let mut other = g.pinned::<u8>(n, false)?;
    let mut d_other = g.zeros::<u8>(n)?;
    let wc = wc.as_mut_slice()?;
    let cached = cached.as_mut_slice()?;
    let other = other.as_mut_slice()?;
    other.fill(3);
    let copy = |dst: &mut [u8], src: &[u8]| {
        dst.par_chunks_mut(64 << 10)
            .zip(src.par_chunks(64 << 10))
            .for_each(|(d, s)| d.copy_from_slice(s));
    };
    println!(
        "# host copies of {MB} MiB, GB/s (median of {} after {}); threads 1 2 4 8 16",
        o.reps, o.warmup
    );
    let threads = [1usize, 2, 4, 8, 16];
    let line = |what: &str, f: &mut (dyn FnMut() -> Result<()> + Send)| -> Result<()> {
        let mut out = Vec::new();
        for &t in &threads {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
            let ms = pool.install(|| wall_ms(o.warmup, o.reps, &mut *f))?;
            out.push(format!("{:>7.1}", n as f64 / ms / 1e6));
        }
        println!("{what:<44} {}", out.join(" "));
        Ok(())
    };
    line("pageable -> pinned write-combined", &mut || {
        copy(&mut *wc, &src);
        Ok(())
    })?;
    line("pageable -> pinned cached", &mut || {
        copy(&mut *cached, &src);
        Ok(())
    })?;
    line("pageable -> pageable", &mut || {
        copy(&mut page, &src);
        Ok(())
    })?;
    line("pinned cached -> pageable", &mut || {
        copy(&mut page, &*cached);
        Ok(())
    })?;
    let s = g.stream();
    line("pageable -> pinned WC, DMA of 58 MiB beside", &mut || {
        s.memcpy_htod(&*other, &mut d_other)?;
        copy(&mut *wc, &src);
        s.synchronize()?;
        Ok(())
    })?;
    let dma = wall_ms(o.warmup, o.reps, || {
        s.memcpy_htod(&*other, &mut d_other)?;
        s.synchronize()?;
        Ok(())
    })?;
    println!(
        "{:<44} {:>7.1}",
        "DMA pinned -> device alone",
        n as f64 / dma / 1e6
    );
    Ok(())
}

fn main() -> Result<()> {
    let mut o = Opts {
        reps: 20,
        warmup: 3,
        only: None,
        pet_run_log: 24,
        phases: false,
        timeline: false,
        variant: 0,
        calls_only: false,
    };
    let mut csv: Option<String> = None;
    let mut args = std::env::args().skip(1);
    let mut variants: Vec<u32> = vec![0];
    let usage = "usage: bench-host [--reps 20] [--warmup 3] [--only cluster|cluster-calls|seed|pet|memcpy|devview] [--pet-run-log 24] [--phases [--timeline]] [--variants 0,..] [--csv FILE]";
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reps" => o.reps = args.next().context("--reps needs a number")?.parse()?,
            "--warmup" => o.warmup = args.next().context("--warmup needs a number")?.parse()?,
            "--only" => o.only = Some(args.next().context("--only needs a family")?),
            "--pet-run-log" => {
                o.pet_run_log = args
                    .next()
                    .context("--pet-run-log needs a number")?
                    .parse()?
            }
            "--phases" => o.phases = true,
            "--timeline" => o.timeline = true,
            "--variants" => {
                variants = args
                    .next()
                    .context("--variants needs a list")?
                    .split(',')
                    .map(|v| v.trim().parse())
                    .collect::<Result<_, _>>()?
            }
            "--csv" => csv = Some(args.next().context("--csv needs a file")?),
            _ => bail!("{usage}"),
        }
    }
    if !detkit::driver_present() {
        println!("skipped: no CUDA driver");
        return Ok(());
    }
    let reference = Backend::cuda(0)?;
    let g = reference.gpu_shared().context("CUDA backend")?;
    println!("# {}", reference.description());
    println!(
        "# host calls: wall ms, median of {} after {} warm-up calls; device: CUDA events; \
         copies: input to the device and output back, wall ms with the sync",
        o.reps, o.warmup
    );
    let bs = backends()?;
    let mut rows = Vec::new();
    if o.only.as_deref() == Some("memcpy") {
        return memcpy_rows(g, &o);
    }
    header();
    if o.only.as_deref() == Some("cluster-calls") {
        o.calls_only = true;
        o.only = Some("cluster".into());
    }
    let want = |f: &str| o.only.as_deref().is_none_or(|x| x == f);
    for &v in &variants {
        detkit::phases::set_variant(v);
        o.variant = v;
        let from = rows.len();
        if want("cluster") {
            cluster_rows(g, &bs, &o, &mut rows)?;
        }
        if want("seed") {
            seed_rows(g, &bs, &o, &mut rows)?;
        }
        if want("pet") {
            pet_rows(g, &bs, &o, &mut rows)?;
        }
        if o.only.as_deref() == Some("devview") {
            devview::rows(g, &bs[0], &o, &mut rows)?;
        }
        if variants.len() > 1 {
            for r in &mut rows[from..] {
                r.what += &format!(" [v{v}]");
            }
        }
    }
    detkit::phases::set_variant(0);
    if variants.len() > 1 {
        println!("# summary, every variant");
        header();
        for r in &rows {
            print_row(r);
        }
    }
    if let Some(path) = csv {
        let mut s = String::from(
            "call,items,pinned_ms,pageable_ms,device_ms,copy_pinned_ms,copy_pageable_ms,bytes_in,bytes_out,allocations\n",
        );
        for r in &rows {
            s += &format!(
                "\"{}\",{},{:.4},{:.4},{},{:.4},{:.4},{},{},{}\n",
                r.what.replace('"', "\"\""),
                r.items,
                r.pinned_ms,
                r.pageable_ms,
                r.device_ms.map_or(String::new(), |d| format!("{d:.4}")),
                r.copy_pinned_ms,
                r.copy_pageable_ms,
                r.bytes.0,
                r.bytes.1,
                r.allocations
            );
        }
        std::fs::write(&path, s).with_context(|| format!("writing {path}"))?;
    }
    Ok(())
}
