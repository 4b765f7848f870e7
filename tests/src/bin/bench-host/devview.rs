//! `bench-host --only devview` (issue 27): the device-view entry points on the batches that
//! `crates/python/bench_host.py` uses for its `*-dev` rows (clustering: `cluster_event(seed=s)`,
//! s = 1..=64; seeding: `seeding_event(seed=s, mu=200)`, s = 1..=64), each beside the
//! device-resident time of the same batch. The other rows of bench-host use other events
//! (clustering 16 distinct events from seed 100, seeding 8 from seed 300), so a Python row's
//! ratio to them mixes two batches; these rows are the same bytes.
//!
//! Rows: `devview cluster_events_device, N ev (py batch)`: wall ms per call, results dropped
//! after each call, device-resident (`run_graph`, CUDA events) of the same batch; with
//! `--phases` the library's phases. `devview seed_events_device, 64 ev (py batch)`: the same for seeding (device-resident: `seed_batch_device`).

use anyhow::Result;
use detkit::clustering::{self as cl, gen as cgen, Clusterer, DeviceDigis, Digis};
use detkit::seeding::{as_words, gen as sgen, SeedingSettings, SeedingWorkspace, SpacePointsDev};
use detkit::{Backend, GpuContext};
use detkit_tests::{check, median_ms};

use super::{print_phases, print_row, wall_ms, Opts, Row};

pub(super) fn rows(
    g: &std::sync::Arc<GpuContext>,
    b: &Backend,
    o: &Opts,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let geo = cl::Geometry::phase1();
    let cut = Some(geo.default_cut);
    for per_call in [1usize, 64] {
        let mut d = Digis::default();
        let mut offs = vec![0u32];
        for s in 1..=per_call as u64 {
            d.extend(&cgen::run3_event(s));
            offs.push(d.len() as u32);
        }
        let want = cl::cpu::cluster(&d, &offs, &geo, cut);
        let dd = DeviceDigis::upload(g, &d, &offs)?;
        let mut c = Clusterer::new(g, &geo, d.len(), per_call)?;
        c.run_graph(&dd, cut)?;
        check("devview device-resident", &c.results(&dd)?.clus, &want.clus)?;
        let device = median_ms(g, o.warmup, o.reps, || c.run_graph(&dd, cut))?;
        let view = cl::DigisDev::from_buffers(g, [&dd.module, &dd.x, &dd.y, &dd.adc]);
        let got = b
            .cluster_events_device(view, &offs, &geo, cut)?
            .to_host(g)?;
        detkit_tests::exact_clusters("devview", &got, &want).map_err(anyhow::Error::msg)?;
        let call = || -> Result<()> {
            drop(b.cluster_events_device(view, &offs, &geo, cut)?);
            Ok(())
        };
        let view_ms = wall_ms(o.warmup, o.reps, call)?;
        if o.phases {
            print_phases(o, call)?;
        }
        let r = Row {
            what: format!("devview cluster_events_device, {per_call} ev (py batch)"),
            items: per_call,
            pinned_ms: view_ms,
            pageable_ms: f64::NAN,
            device_ms: Some(device),
            copy_pinned_ms: f64::NAN,
            copy_pageable_ms: f64::NAN,
            ..Default::default()
        };
        print_row(&r);
        rows.push(r);
    }
    // Seeding, 64 events of Python's batch.
    let cfg = SeedingSettings::default().to_config()?;
    let events: Vec<_> = (1..=64u64)
        .map(|s| sgen::generate(s, 200.0, true).spacepoints)
        .collect();
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
    let device = median_ms(g, o.warmup, o.reps, || {
        g.seed_batch_device(&mut ws, &cfg, &d_sps, &offsets, None)
            .map(|_| ())
    })?;
    let cols = events
        .iter()
        .map(|e| {
            let col = |f: fn(&detkit::seeding::SpacePoint) -> f32| {
                g.upload(&e.iter().map(f).collect::<Vec<f32>>())
            };
            Ok([
                col(|s| s.x)?,
                col(|s| s.y)?,
                col(|s| s.z)?,
                col(|s| s.var_r)?,
                col(|s| s.var_z)?,
            ])
        })
        .collect::<detkit::Result<Vec<_>>>()?;
    let views: Vec<SpacePointsDev> = cols
        .iter()
        .map(|c| SpacePointsDev::from_buffers(g, [&c[0], &c[1], &c[2], &c[3], &c[4]]))
        .collect();
    let got = b.seed_events_device(&views, &cfg)?.to_host(g)?;
    for (k, (out, (s, p))) in got.iter().zip(&resident).enumerate() {
        check(&format!("devview seed event {k} seeds"), &out.seeds, s)?;
        check(&format!("devview seed event {k} params"), &out.params, p)?;
    }
    let call = || -> Result<()> {
        drop(b.seed_events_device(&views, &cfg)?);
        Ok(())
    };
    let view_ms = wall_ms(o.warmup, o.reps, call)?;
    if o.phases {
        print_phases(o, call)?;
    }
    let r = Row {
        what: "devview seed_events_device, 64 ev (py batch)".into(),
        items: 64,
        pinned_ms: view_ms,
        pageable_ms: f64::NAN,
        device_ms: Some(device),
        copy_pinned_ms: f64::NAN,
        copy_pageable_ms: f64::NAN,
        ..Default::default()
    };
    print_row(&r);
    rows.push(r);
    Ok(())
}
