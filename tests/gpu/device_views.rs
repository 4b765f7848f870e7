//! The device-view entry points (issue 27): digis already on the device in, device buffers
//! out, compared bit for bit with the host path of the same backend on the same data, and
//! the same typed error for a bad digi in the middle event of a batch.

use detkit::clustering::{self as cl, ChargeCut, Digis, DigisDev, DigisRef, Geometry, OffsetsDev};
use detkit::pet::cpu::CoincideConfig;
use detkit::pet::{gen as pgen, FramesDev, Policy, Single, SinglesView};
use detkit::seeding::{
    gen as sgen, SeedingConfig, SeedingOutput, SeedingSettings, SpacePoint, SpacePointsDev,
    SpacePointsRef,
};
use detkit::{Backend, GpuContext, Record};
use detkit_gpu::clustering::INVALID_MODULE;
use detkit_tests::{ensure, exact, exact_clusters, run3_batch, sp_columns, sp_columns_ref};

use super::{e, Ctx, Test, R};

pub(crate) const TESTS: &[Test] = &[
    ("device_views_cluster", test_cluster),
    ("device_views_cluster_errors", test_cluster_errors),
    ("device_views_cluster_paths", test_cluster_paths),
    ("device_views_seed", test_seed),
    ("device_views_seed_errors", test_seed_errors),
    ("device_views_pet_convert", test_pet_convert),
    ("device_views_pet_sort_coincide", test_pet_sort_coincide),
    (
        "device_views_outputs_outlive_backend",
        test_outputs_outlive_backend,
    ),
];

/// The four arrays on the device (at least one element each: a zero-length upload).
fn upload(g: &GpuContext, d: &Digis) -> Result<[detkit::DeviceBuffer<u16>; 4], String> {
    let up = |v: &[u16]| {
        if v.is_empty() {
            g.zeros::<u16>(1)
        } else {
            g.upload(v)
        }
    };
    Ok([
        up(&d.module).map_err(e)?,
        up(&d.x).map_err(e)?,
        up(&d.y).map_err(e)?,
        up(&d.adc).map_err(e)?,
    ])
}

/// Clusters `d` through the device view (`n` digis of the uploaded buffers).
fn cluster_dev(
    b: &Backend,
    d: &Digis,
    o: &[u32],
    g: &Geometry,
    cut: Option<ChargeCut>,
) -> Result<Result<cl::Clusters, String>, String> {
    let gpu = b.gpu().expect("cuda backend");
    let bufs = upload(gpu, d)?;
    let n = d.len();
    let addr = [0, 1, 2, 3].map(|i| gpu.ptr(&bufs[i]).addr());
    // SAFETY: four buffers of this backend's context, each of at least `n` values, borrowed
    // (not written, not freed) until the call below has returned; uploaded on the backend's
    // stream, which the call is ordered after.
    let view = unsafe { DigisDev::from_raw(addr, [n; 4]) };
    Ok(match b.cluster_events_device(view, o, g, cut) {
        Ok(c) => Ok(c.to_host(gpu).map_err(e)?),
        Err(err) => Err(e(err)),
    })
}

/// Batches of 0, 1, 5 and 64 events (an empty event among them), with and without the cut,
/// repeated and interleaved in size (the workspace's clusterers reused and grown): the
/// device view's results equal the host path's, with the same module counts.
fn test_cluster(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let b = &c.backend;
    let mut cases = vec![
        (Digis::default(), vec![0u32, 0]),
        run3_batch(c.seed, 1, c.big(usize::MAX, 6000)),
        run3_batch(c.seed ^ 1, 1, 31),
        run3_batch(c.seed ^ 2, 5, c.big(20_000, 2000)),
        // The sanitizer mode: 8 events of 1,500 digis (64 whole events under racecheck
        // did not finish in 350 s).
        run3_batch(c.seed ^ 3, c.big(64, 8), c.big(usize::MAX, 1500)),
    ];
    // An empty event in the middle of a batch.
    let (mut d, mut o) = run3_batch(c.seed ^ 4, 3, c.big(5_000, 1000));
    o.insert(2, o[1]);
    d.extend(&Digis::default());
    cases.push((d, o));
    for round in 0..2 {
        for (i, (d, o)) in cases.iter().enumerate() {
            for cut in [None, Some(g.default_cut)] {
                let what = format!("round {round}, case {i} ({} digis), cut {cut:?}", d.len());
                let want = b.cluster_events(d, o, &g, cut).map_err(e)?;
                let got = cluster_dev(b, d, o, &g, cut)?.map_err(|m| format!("{what}: {m}"))?;
                exact_clusters(&what, &got, &want)?;
                ensure(
                    (got.medium_modules, got.fallback_modules)
                        == (want.medium_modules, want.fallback_modules),
                    || {
                        format!(
                            "{what}: module counts {:?} != {:?}",
                            (got.medium_modules, got.fallback_modules),
                            (want.medium_modules, want.fallback_modules)
                        )
                    },
                )?;
            }
        }
    }
    // On the CPU backend: a typed error, not a crash.
    let cpu = Backend::cpu();
    // SAFETY: a zero-length view; no address is read.
    let none = unsafe { DigisDev::from_raw([0; 4], [0; 4]) };
    ensure(
        cpu.cluster_events_device(none, &[0, 0], &g, None).is_err(),
        || "the CPU backend accepted device digis".into(),
    )
}

/// The graph on the caller's memory, with host and with device offsets: two batches in
/// buffers of their own, called A, B, A, B, A with
/// every call's outputs kept (so that each call writes new output buffers and the graph's
/// kernel nodes are pointed at new addresses, and back at old input addresses), then the
/// same after the outputs are dropped (addresses reused from the pool): every result equal
/// to the oracle's, bit for bit.
fn test_cluster_paths(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let b = &c.backend;
    let gpu = b.gpu().expect("cuda backend");
    let cut = Some(g.default_cut);
    let batches = [
        run3_batch(c.seed ^ 0x9a, 1, usize::MAX),
        run3_batch(c.seed ^ 0x9b, 1, 40_000),
    ];
    let bufs = [upload(gpu, &batches[0].0)?, upload(gpu, &batches[1].0)?];
    let want = batches
        .iter()
        .map(|(d, o)| cl::cpu::cluster(d, o, &g, cut))
        .collect::<Vec<_>>();
    let offs = [
        gpu.upload(&batches[0].1).map_err(e)?,
        gpu.upload(&batches[1].1).map_err(e)?,
    ];
    let on_device = std::cell::Cell::new(false);
    let run = |k: usize| -> Result<cl::ClustersDev, String> {
        let n = batches[k].0.len();
        let addr = [0, 1, 2, 3].map(|i| gpu.ptr(&bufs[k][i]).addr());
        // SAFETY: four buffers of this backend's context of `n` values each, borrowed (not
        // written, not freed) until the test ends; uploaded on the backend's stream.
        let view = unsafe { DigisDev::from_raw(addr, [n; 4]) };
        if on_device.get() {
            let o = OffsetsDev::from_buffer(gpu, &offs[k]);
            return b.cluster_events_device_offsets(view, o, &g, cut).map_err(e);
        }
        b.cluster_events_device(view, &batches[k].1, &g, cut)
            .map_err(e)
    };
    let r = (|| -> R {
        // Host offsets, then device offsets (read on the device by the graph), and again.
        for dev_offsets in [false, true, false, true] {
            on_device.set(dev_offsets);
            let offsets = if dev_offsets { "device" } else { "host" };
            let mut kept = Vec::new();
            for (call, k) in [0usize, 1, 0, 1, 0].into_iter().enumerate() {
                let got = run(k)?;
                let what = format!("{offsets} offsets, call {call}, batch {k}");
                exact_clusters(&what, &got.to_host(gpu).map_err(e)?, &want[k])?;
                kept.push(got);
            }
            // Every kept output still holds its call's results.
            for (call, (got, k)) in kept.iter().zip([0usize, 1, 0, 1, 0]).enumerate() {
                let what = format!("{offsets} offsets, kept output of call {call}");
                exact_clusters(&what, &got.to_host(gpu).map_err(e)?, &want[k])?;
            }
            drop(kept);
            for (call, k) in [1usize, 0, 1].into_iter().enumerate() {
                let got = run(k)?;
                let what = format!("{offsets} offsets, after the drop, call {call}");
                exact_clusters(&what, &got.to_host(gpu).map_err(e)?, &want[k])?;
            }
        }
        // The call takes the graph (no copies out, so no `unpack` phase): it does not
        // quietly fall back to the copying path.
        on_device.set(false);
        detkit::phases::enable(true, false);
        detkit::phases::take();
        let got = run(0);
        let unpack = detkit::phases::take()[detkit::phases::Phase::Unpack as usize];
        detkit::phases::enable(false, false);
        got?;
        ensure(unpack.is_zero(), || {
            format!("unpack phase {unpack:?}: the copying path ran, not the graph")
        })?;
        Ok(())
    })();
    detkit::phases::enable(false, false);
    r
}

/// The module id of the batch's first valid digi (that of the first event's first module).
fn first_valid(d: &Digis) -> u16 {
    d.module
        .iter()
        .copied()
        .find(|&m| m != INVALID_MODULE)
        .unwrap_or(0)
}

/// A batch of five events whose third event has a digi out of range (module id, x, y) or a
/// module whose digis are not consecutive: the device view's error is the host path's (the same digi index, column and message); arrays
/// of different lengths and bad event offsets as well. The workspace works after.
fn test_cluster_errors(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let b = &c.backend;
    let (d, o) = run3_batch(c.seed ^ 0xbad, 5, c.big(30_000, 3000));
    // A valid digi in the middle of the third event (a fault on an invalid digi, which the
    // clustering skips, would be no fault).
    let mid = (o[2] + (o[3] - o[2]) / 2) as usize;
    let mid = (mid..o[3] as usize - 8)
        .find(|&i| d.module[i] != INVALID_MODULE)
        .ok_or("no valid digi in the third event")?;
    type Fault = fn(&mut Digis, usize);
    let faults: [(&str, Fault); 6] = [
        ("module out of range", |d, i| d.module[i] = 5000),
        ("x out of range", |d, i| d.x[i] = 160),
        ("y out of range", |d, i| d.y[i] = 416),
        ("two faults, the first wins", |d, i| {
            d.y[i] = 416;
            d.module[i + 7] = 6000;
        }),
        ("module not consecutive", |d, i| {
            d.module[i] = first_valid(d)
        }),
        ("not consecutive before out of range", |d, i| {
            d.module[i] = first_valid(d);
            d.x[i + 5] = 160;
        }),
    ];
    // Each fault followed by a good batch (the gate and the check's words reset for the
    // next call), twice over.
    let good = cl::cpu::cluster(&d, &o, &g, None);
    let r = (|| -> R {
        for round in 0..2 {
            for (what, f) in faults {
                let mut bad = d.clone();
                f(&mut bad, mid);
                let want = b.cluster_events(&bad, &o, &g, None).map(|_| ()).map_err(e);
                let got = cluster_dev(b, &bad, &o, &g, None)?.map(|_| ());
                ensure(want.is_err(), || {
                    format!("{what}: the host path accepted it")
                })?;
                ensure(got == want, || {
                    format!("round {round}, {what}: device view {got:?}, host {want:?}")
                })?;
                let after = cluster_dev(b, &d, &o, &g, None)?
                    .map_err(|m| format!("round {round}, after {what}: {m}"))?;
                exact("after a fault: clus", &after.clus, &good.clus)?;
            }
        }
        Ok(())
    })();
    r?;
    // Lengths and offsets, checked before anything runs.
    let gpu = b.gpu().expect("cuda backend");
    let bufs = upload(gpu, &d)?;
    let n = d.len();
    let addr = [0, 1, 2, 3].map(|i| gpu.ptr(&bufs[i]).addr());
    let host = b.cluster_events(
        DigisRef {
            x: &d.x[..n - 1],
            ..DigisRef::from(&d)
        },
        &o,
        &g,
        None,
    );
    // SAFETY: buffers of this context valid for `n` values (the view claims fewer for x),
    // borrowed until the call returns.
    let view = unsafe { DigisDev::from_raw(addr, [n, n - 1, n, n]) };
    let dev = b.cluster_events_device(view, &o, &g, None);
    ensure(
        host.is_err()
            && host.as_ref().err().map(|x| x.to_string())
                == dev.as_ref().err().map(|x| x.to_string()),
        || {
            format!(
                "lengths: device view {:?}, host {:?}",
                dev.err(),
                host.err()
            )
        },
    )?;
    let mut bad_o = o.clone();
    bad_o[3] = bad_o[2] - 1;
    // SAFETY: as above, all four of `n` values.
    let view = unsafe { DigisDev::from_raw(addr, [n; 4]) };
    let host = b
        .cluster_events(&d, &bad_o, &g, None)
        .map(|_| ())
        .map_err(e);
    let dev = b
        .cluster_events_device(view, &bad_o, &g, None)
        .map(|_| ())
        .map_err(e);
    ensure(host.is_err() && host == dev, || {
        format!("offsets: device view {dev:?}, host {host:?}")
    })?;
    // The same offsets on the device (checked by the graph's begin kernel), and other bad
    // lists: the host path's error each time, and a
    // good call after each.
    let mut first_not_0 = o.clone();
    first_not_0[0] = 1;
    let mut last_not_n = o.clone();
    *last_not_n.last_mut().expect("offsets") = n as u32 - 1;
    let lists: [(&str, Vec<u32>); 5] = [
        ("decreasing", bad_o.clone()),
        ("first not 0", first_not_0),
        ("last not n", last_not_n),
        ("one offset", vec![0]),
        ("no offset", vec![]),
    ];
    let r = (|| -> R {
        for round in 0..2 {
            for (what, list) in &lists {
                let host = b.cluster_events(&d, list, &g, None).map(|_| ()).map_err(e);
                let dbuf = gpu
                    .upload(if list.is_empty() { &[7u32][..] } else { list })
                    .map_err(e)?;
                // SAFETY: `dbuf` holds at least `list.len()` values of this context, borrowed
                // until the call returns.
                let dev_o = unsafe { OffsetsDev::from_raw(gpu.ptr(&dbuf).addr(), list.len()) };
                // SAFETY: as above, all four of `n` values.
                let view = unsafe { DigisDev::from_raw(addr, [n; 4]) };
                let dev = b
                    .cluster_events_device_offsets(view, dev_o, &g, None)
                    .map(|_| ())
                    .map_err(e);
                ensure(host.is_err() && host == dev, || {
                    format!("round {round}, device offsets {what}: device {dev:?}, host {host:?}")
                })?;
                let good = gpu.upload(&o).map_err(e)?;
                // SAFETY: as above, all four of `n` values.
                let view = unsafe { DigisDev::from_raw(addr, [n; 4]) };
                let got = b
                    .cluster_events_device_offsets(
                        view,
                        OffsetsDev::from_buffer(gpu, &good),
                        &g,
                        None,
                    )
                    .map_err(e)?
                    .to_host(gpu)
                    .map_err(e)?;
                let want = cl::cpu::cluster(&d, &o, &g, None);
                exact("after bad device offsets: clus", &got.clus, &want.clus)?;
            }
        }
        Ok(())
    })();
    r?;
    let want = cl::cpu::cluster(&d, &o, &g, None);
    let got = cluster_dev(b, &d, &o, &g, None)?.map_err(|m| format!("after the errors: {m}"))?;
    exact("after the errors: clus", &got.clus, &want.clus)?;
    exact(
        "after the errors: clus_in_module",
        &got.clus_in_module,
        &want.clus_in_module,
    )
}

fn seed_cfg() -> SeedingConfig {
    SeedingSettings::default()
        .to_config()
        .expect("default config")
}

/// Seeds `events` (five host columns each) through device views of uploaded copies.
fn seed_dev(
    b: &Backend,
    events: &[[Vec<f32>; 5]],
    cfg: &SeedingConfig,
) -> Result<Result<Vec<SeedingOutput>, String>, String> {
    let gpu = b.gpu().expect("cuda backend");
    let up = |v: &[f32]| {
        if v.is_empty() {
            gpu.zeros::<f32>(1)
        } else {
            gpu.upload(v)
        }
    };
    let bufs: Vec<Vec<detkit::DeviceBuffer<f32>>> = events
        .iter()
        .map(|ev| ev.iter().map(|c| up(c)).collect::<Result<Vec<_>, _>>())
        .collect::<Result<_, _>>()
        .map_err(e)?;
    let views: Vec<SpacePointsDev> = bufs
        .iter()
        .zip(events)
        .map(|(b, ev)| {
            let addr = [0, 1, 2, 3, 4].map(|i| gpu.ptr(&b[i]).addr());
            let lens = [0, 1, 2, 3, 4].map(|i| ev[i].len());
            // SAFETY: buffers of this backend's context, each of at least `lens[i]`
            // values, borrowed until the call below has returned; uploaded on the
            // backend's stream.
            unsafe { SpacePointsDev::from_raw(addr, lens) }
        })
        .collect();
    Ok(match b.seed_events_device(&views, cfg) {
        Ok(s) => Ok(s.to_host(gpu).map_err(e)?),
        Err(err) => Err(e(err)),
    })
}

fn compare_outputs(what: &str, got: &[SeedingOutput], want: &[SeedingOutput]) -> R {
    ensure(got.len() == want.len(), || {
        format!("{what}: {} outputs for {} events", got.len(), want.len())
    })?;
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        ensure(g.stats == w.stats, || {
            format!("{what} event {j}: stats {:?} != {:?}", g.stats, w.stats)
        })?;
        exact(&format!("{what} event {j}: seeds"), &g.seeds, &w.seeds)?;
        exact(&format!("{what} event {j}: params"), &g.params, &w.params)?;
    }
    Ok(())
}

/// Batches of 1, 4 (one empty) and 64 events at ⟨μ⟩ = 10 … 200, repeated: the device
/// views' seeds, parameters and counts equal the host columns path's (same backend), bit
/// for bit.
fn test_seed(c: &Ctx) -> R {
    let cfg = seed_cfg();
    let b = &c.backend;
    let gen = |i: u64, mu: f64| sgen::generate(c.seed ^ (i + 1) << 32, mu, true).spacepoints;
    let mut four: Vec<Vec<SpacePoint>> = vec![gen(1, 50.0), gen(2, 200.0), vec![], gen(3, 10.0)];
    four[3].truncate(33);
    let batches: Vec<Vec<Vec<SpacePoint>>> = vec![
        vec![gen(9, 200.0)],
        four,
        (0..if c.quick { 8 } else { 64 })
            .map(|i| gen(100 + i, 200.0))
            .collect(),
    ];
    for round in 0..2 {
        for (k, evs) in batches.iter().enumerate() {
            let what = format!("round {round} batch {k} ({} events)", evs.len());
            let cols: Vec<[Vec<f32>; 5]> = evs.iter().map(|e| sp_columns(e)).collect();
            let refs: Vec<SpacePointsRef> = cols.iter().map(sp_columns_ref).collect();
            let mut want = Vec::new();
            b.seed_columns_into(&refs, &cfg, &mut want).map_err(e)?;
            let got = seed_dev(b, &cols, &cfg)?.map_err(|m| format!("{what}: {m}"))?;
            compare_outputs(&what, &got, &want)?;
        }
    }
    Ok(())
}

/// A bad spacepoint (each kind of fault, each column) in the middle event of five: the
/// device views' error is the host path's (index within the event, column, message); column
/// lengths as well; the workspace works after.
fn test_seed_errors(c: &Ctx) -> R {
    let cfg = seed_cfg();
    let b = &c.backend;
    let events: Vec<Vec<SpacePoint>> = (0..5)
        .map(|i| sgen::generate(c.seed ^ i << 8, 10.0, true).spacepoints)
        .collect();
    let cols: Vec<[Vec<f32>; 5]> = events.iter().map(|e| sp_columns(e)).collect();
    let k = events[2].len() / 2;
    let faults: [(usize, f32); 6] = [
        (0, f32::NAN),
        (1, f32::INFINITY),
        (2, f32::NEG_INFINITY),
        (3, -1.0),
        (4, f32::NAN),
        (3, f32::INFINITY),
    ];
    for (col, v) in faults {
        let mut bad = cols.clone();
        bad[2][col][k] = v;
        // A second fault later in the same event: the first one is named.
        bad[2][0][k + 1] = f32::NAN;
        let refs: Vec<SpacePointsRef> = bad.iter().map(sp_columns_ref).collect();
        let mut out = Vec::new();
        let want = b.seed_columns_into(&refs, &cfg, &mut out).map_err(e);
        let got = seed_dev(b, &bad, &cfg)?.map(|_| ());
        ensure(want.is_err(), || {
            format!("column {col} = {v}: host accepted it")
        })?;
        ensure(got == want, || {
            format!("column {col} = {v}: device views {got:?}, host {want:?}")
        })?;
    }
    let mut short = cols.clone();
    short[1][4].pop();
    let got = seed_dev(b, &short, &cfg)?.map(|_| ());
    ensure(
        got.as_ref()
            .is_err_and(|m| m.contains("columns of different lengths")),
        || format!("lengths: {got:?}"),
    )?;
    let refs: Vec<SpacePointsRef> = cols.iter().map(sp_columns_ref).collect();
    let mut want = Vec::new();
    b.seed_columns_into(&refs, &cfg, &mut want).map_err(e)?;
    let got = seed_dev(b, &cols, &cfg)?.map_err(|m| format!("after the errors: {m}"))?;
    compare_outputs("after the errors", &got, &want)
}

/// Frames of runs of 0, 1 and many singles (and a cut frame): converted from a device view,
/// with a plain scanner and with a loaded handle, the singles and statistics equal the host
/// path's, bit for bit; a byte count that is not a whole number of frames is the host path's
/// error.
fn test_pet_convert(c: &Ctx) -> R {
    let b = &c.backend;
    let gpu = b.gpu().expect("cuda backend");
    let scanner = pgen::tiny_scanner(c.seed);
    let handle = b.load_scanner(&scanner).map_err(e)?;
    for (i, singles) in [0usize, 1, 5_000, c.big(200_000, 40_000)]
        .into_iter()
        .enumerate()
    {
        let frames = pgen::acquisition(
            &scanner,
            &pgen::AcquisitionConfig {
                singles,
                seed: c.seed ^ i as u64,
                ..Default::default()
            },
        )
        .frames;
        let bytes = pgen::frame_bytes(&frames);
        let what = format!("{singles} singles ({} frames)", frames.len());
        let (want, want_st) = b.pet_convert_frames(bytes, &handle).map_err(e)?;
        let d = if bytes.is_empty() {
            gpu.zeros::<u8>(1).map_err(e)?
        } else {
            gpu.upload(bytes).map_err(e)?
        };
        // SAFETY: a buffer of this context of at least `bytes.len()` bytes, borrowed until
        // the calls below have returned.
        let view = unsafe { FramesDev::from_raw(gpu.ptr(&d).addr(), bytes.len()) };
        for (arg, (got, st)) in [
            (
                "handle",
                b.pet_convert_frames_device(view, &handle).map_err(e)?,
            ),
            (
                "scanner",
                b.pet_convert_frames_device(view, &scanner).map_err(e)?,
            ),
        ] {
            ensure(st == want_st, || {
                format!("{what} ({arg}): stats {st:?} != {want_st:?}")
            })?;
            exact(
                &format!("{what} ({arg}): singles"),
                &got.to_host(gpu).map_err(e)?,
                &want,
            )?;
        }
        if bytes.len() > 16 {
            // SAFETY: as above, fewer bytes.
            let cut = unsafe { FramesDev::from_raw(gpu.ptr(&d).addr(), bytes.len() - 3) };
            let want = b
                .pet_convert_frames(&bytes[..bytes.len() - 3], &handle)
                .map(|_| ())
                .map_err(e);
            let got = b
                .pet_convert_frames_device(cut, &handle)
                .map(|_| ())
                .map_err(e);
            ensure(want.is_err() && got == want, || {
                format!("{what}: cut frame {got:?}, host {want:?}")
            })?;
        }
    }
    Ok(())
}

/// Singles on the device (sizes 0, 1, 2, tile ± 1, a converted acquisition, random times):
/// sorted and paired from a device view, equal to the host path's bit for bit (sort, then
/// every coincidence policy, prompt and delayed, on the sorted singles); the chain
/// convert → sort → coincide stays on the device (each output the next call's view); bad
/// singles (a NaN or infinite time, an unsorted pair, a fault after another) give the host
/// path's error and index; the caller's buffer is not written.
fn test_pet_sort_coincide(c: &Ctx) -> R {
    let b = &c.backend;
    let gpu = b.gpu().expect("cuda backend");
    let scanner = pgen::tiny_scanner(c.seed);
    let handle = b.load_scanner(&scanner).map_err(e)?;
    let frames = pgen::acquisition(
        &scanner,
        &pgen::AcquisitionConfig {
            singles: 150_000,
            seed: c.seed ^ 0x5057,
            ..Default::default()
        },
    )
    .frames;
    let (converted, _) = b.pet_convert(&frames, &handle).map_err(e)?;
    let rng = detkit::rng::random_below(c.seed ^ 0x77, 70_001, 1 << 20);
    let random = |n: usize| -> Vec<Single> {
        (0..n)
            .map(|i| Single {
                crystal: i as u32,
                energy: 400.0 + (rng[i] % 200) as f32,
                // Ties (times in steps of 4) keep their input order.
                time: (rng[i] >> 2) as f64 * 4.0,
            })
            .collect()
    };
    let up = |v: &[Single]| {
        if v.is_empty() {
            gpu.zeros::<Record<Single>>(1).map_err(e)
        } else {
            gpu.upload_records(v).map_err(e)
        }
    };
    // Windows of about one single on average for the random times (one per 15 ticks), the
    // scanner's for the converted acquisition.
    let configs = |w: f64| {
        [
            CoincideConfig::prompt(w),
            CoincideConfig {
                policy: Policy::TakeAllGoods,
                ..CoincideConfig::prompt(w)
            },
            CoincideConfig {
                policy: Policy::KillAllIfMultipleGoods,
                delay: Some(4.0 * w),
                ..CoincideConfig::prompt(w)
            },
        ]
    };
    let tile = detkit_gpu::pet::COINCIDE_TILE as usize;
    let mut cases: Vec<(String, Vec<Single>)> = [0, 1, 2, tile - 1, tile + 1, 70_001]
        .into_iter()
        .map(|n| (format!("random n={n}"), random(n)))
        .collect();
    cases.push((
        format!("converted n={}", converted.len()),
        converted.clone(),
    ));
    for (what, v) in &cases {
        let w = if what.starts_with("random") {
            20.0
        } else {
            scanner.time_window
        };
        let want = b.pet_sort(v).map_err(e)?;
        let d = up(v)?;
        let view = SinglesView::from_buffer(gpu, &d, v.len());
        let sorted = b.pet_sort_device(view).map_err(e)?;
        exact(
            &format!("{what}: sort"),
            &sorted.to_host(gpu).map_err(e)?,
            &want,
        )?;
        exact(
            &format!("{what}: input untouched"),
            &gpu.download_records(&d).map_err(e)?[..v.len()],
            v,
        )?;
        for cfg in &configs(w) {
            // A window over the policies' limit is the host path's error on both.
            let want_p = b.pet_coincide(&want, cfg).map_err(e);
            let got = b
                .pet_coincide_device(sorted.view(gpu), cfg)
                .and_then(|p| p.to_host(gpu))
                .map_err(e);
            match (got, want_p) {
                (Ok(got), Ok(want_p)) => {
                    exact(&format!("{what}: coincide {cfg:?}"), &got, &want_p)?
                }
                (got, want_p) => ensure(got.is_err() && got == want_p, || {
                    format!("{what}: coincide {cfg:?}: {got:?}, host {want_p:?}")
                })?,
            }
        }
    }
    // The whole chain on the device: frames → singles → sorted → pairs.
    let bytes = pgen::frame_bytes(&frames);
    let d_frames = gpu.upload(bytes).map_err(e)?;
    let (singles, _) = b
        .pet_convert_frames_device(FramesDev::from_buffer(gpu, &d_frames), &handle)
        .map_err(e)?;
    let sorted = b.pet_sort_device(singles.view(gpu)).map_err(e)?;
    let prompt = CoincideConfig::prompt(scanner.time_window);
    let pairs = b
        .pet_coincide_device(sorted.view(gpu), &prompt)
        .map_err(e)?;
    let want = b
        .pet_coincide(&b.pet_sort(&converted).map_err(e)?, &prompt)
        .map_err(e)?;
    ensure(!want.is_empty(), || {
        "the chain's acquisition makes no pair".to_string()
    })?;
    exact(
        "device chain: pairs",
        &pairs.to_host(gpu).map_err(e)?,
        &want,
    )?;
    // Bad singles: the host path's error, index included.
    let base = b.pet_sort(&random(5_000)).map_err(e)?;
    type Fault = fn(&mut Vec<Single>);
    let faults: [(&str, Fault); 6] = [
        ("NaN time", |v| v[1234].time = f64::NAN),
        ("infinite time", |v| v[4999].time = f64::INFINITY),
        ("negative infinity first", |v| v[0].time = f64::NEG_INFINITY),
        ("unsorted pair", |v| v.swap(2000, 2600)),
        ("unsorted, then NaN", |v| {
            v.swap(100, 900);
            v[3000].time = -f64::NAN;
        }),
        ("one NaN single", |v| v.truncate(1)),
    ];
    for (what, fault) in faults {
        let mut v = base.clone();
        fault(&mut v);
        if what == "one NaN single" {
            v[0].time = f64::NAN;
        }
        let d = up(&v)?;
        let view = SinglesView::from_buffer(gpu, &d, v.len());
        let want_s = b.pet_sort(&v).map(|_| ()).map_err(e);
        let got_s = b.pet_sort_device(view).map(|_| ()).map_err(e);
        let sortable = what == "unsorted pair";
        ensure(want_s.is_err() != sortable && got_s == want_s, || {
            format!("{what}: sort {got_s:?}, host {want_s:?}")
        })?;
        let want_c = b.pet_coincide(&v, &prompt).map(|_| ()).map_err(e);
        let got_c = b.pet_coincide_device(view, &prompt).map(|_| ()).map_err(e);
        ensure(want_c.is_err() && got_c == want_c, || {
            format!("{what}: coincide {got_c:?}, host {want_c:?}")
        })?;
    }
    Ok(())
}

/// The results of device-view calls are buffers of detkit's output pool (`detkit::outputs`):
/// many calls whose results are dropped at once reuse the pool's memory and stay right, and
/// results still held after their backend (and its workspaces) are dropped read back intact
/// through their own stream.
fn test_outputs_outlive_backend(c: &Ctx) -> R {
    let g = Geometry::phase1();
    let (d, o) = run3_batch(c.seed ^ 0x0071, 3, c.big(20_000, 2000));
    let want = cl::cpu::cluster(&d, &o, &g, None);
    let b = Backend::cuda(0).map_err(e)?;
    let gpu = b.gpu().expect("cuda backend");
    let bufs = upload(gpu, &d)?;
    let n = d.len();
    let addr = [0, 1, 2, 3].map(|i| gpu.ptr(&bufs[i]).addr());
    // SAFETY: four buffers of this backend's context of `n` values each, borrowed (not
    // written, not freed) until the calls below have returned.
    let view = unsafe { DigisDev::from_raw(addr, [n; 4]) };
    let mut kept = Vec::new();
    for i in 0..12 {
        let r = b.cluster_events_device(view, &o, &g, None).map_err(e)?;
        if i % 4 == 3 {
            kept.push(r);
        }
    }
    drop(bufs);
    drop(b);
    for (i, r) in kept.iter().enumerate() {
        let s = r.clus.stream();
        let clus = s.clone_dtoh(&r.clus).map_err(|x| x.to_string())?;
        let per_module = s.clone_dtoh(&r.clus_in_module).map_err(|x| x.to_string())?;
        exact(&format!("kept result {i}: clus"), &clus[..n], &want.clus)?;
        exact(
            &format!("kept result {i}: clus_in_module"),
            &per_module[..r.slots],
            &want.clus_in_module,
        )?;
    }
    Ok(())
}
