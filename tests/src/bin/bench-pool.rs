//! Device-pool scaling (issue 16): events/s of clustering batches and of seeding events on
//! the first device alone and on every device of the pool, end to end from host memory
//! (`Backend::cluster_events` / `Backend::seed` per work item: upload, kernels, download).
//!
//! Usage: `bench-pool [--devices all|0,1] [--reps 3] [--csv FILE]`
//!
//! Results are checked before a time is printed: the pool's results must equal the
//! single-device results item for item (input order), and the first item must equal the
//! CPU oracle.

use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use detkit::clustering::cuda::{Clusterer, DeviceDigis};
use detkit::clustering::{gen as cgen, Clusters, Digis, Geometry};
use detkit::pool::{DevicePool, Devices};
use detkit::seeding::{gen as sgen, SeedingSettings, SpacePoint};
use detkit::{driver_present, Backend};
use detkit_tests::median;

/// Events per clustering work item (one launch sequence each).
const CLUSTER_BATCH: usize = 64;
/// Clustering work items per measurement.
const CLUSTER_ITEMS: usize = 64;
/// Device-resident clustering work items per measurement.
const RESIDENT_ITEMS: usize = 256;
/// Seeding events per measurement (one work item each).
const SEED_ITEMS: usize = 512;

fn main() -> Result<()> {
    let mut devices = Devices::All;
    let mut reps = 3usize;
    let mut csv: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--devices" => devices = args.next().context("--devices needs a value")?.parse()?,
            "--reps" => reps = args.next().context("--reps needs a number")?.parse()?,
            "--csv" => csv = Some(args.next().context("--csv needs a file")?),
            _ => bail!("usage: bench-pool [--devices all|0,1] [--reps 3] [--csv FILE]"),
        }
    }
    if !driver_present() {
        println!("skipped: no CUDA driver");
        return Ok(());
    }
    let all = DevicePool::cuda(&devices)?;
    for b in all.backends() {
        println!("# {}", b.description());
    }
    let first = DevicePool::from_backends(vec![Backend::cuda(0)?])?;
    // Device 0 twice (two contexts, two host threads): how much of the pool's gain is host
    // work overlapping rather than a second GPU.
    let twice = DevicePool::from_backends(vec![Backend::cuda(0)?, Backend::cuda(0)?])?;
    let mut out = String::from("workload,devices,items,events,median_s,events_per_s\n");

    // Clustering: batches of Run-3-like events.
    let geo = Geometry::phase1();
    let cut = Some(geo.default_cut);
    let events: Vec<Digis> = (0..16).map(|s| cgen::run3_event(100 + s)).collect();
    let batches: Vec<(Digis, Vec<u32>)> = (0..CLUSTER_ITEMS)
        .map(|i| {
            let mut d = Digis::default();
            let mut offs = vec![0u32];
            for k in 0..CLUSTER_BATCH {
                d.extend(&events[(i * 7 + k) % events.len()]);
                offs.push(d.len() as u32);
            }
            (d, offs)
        })
        .collect();
    let want0 = detkit::clustering::cpu::cluster(&batches[0].0, &batches[0].1, &geo, cut);
    let run_cluster = |pool: &DevicePool| -> Result<(f64, Vec<Clusters>)> {
        let mut times = Vec::new();
        let mut last = Vec::new();
        for rep in 0..reps + 1 {
            let t = Instant::now();
            let r = pool.map(batches.iter().collect(), |b, (d, offs)| {
                b.cluster_events(d, offs, &geo, cut)
            })?;
            if rep > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
            last = r;
        }
        Ok((median(times), last))
    };
    let (t1, r1) = run_cluster(&first)?;
    let (t2, r2) = run_cluster(&twice)?;
    let (tn, rn) = run_cluster(&all)?;
    if (0..r1.len()).any(|i| r1[i].clus != r2[i].clus) {
        bail!("CHECK FAILED: clustering: device 0 twice differs from one device");
    }
    if r1[0].clus != want0.clus {
        bail!("CHECK FAILED: clustering item 0 differs from the oracle");
    }
    if let Some(i) = (0..r1.len()).find(|&i| r1[i].clus != rn[i].clus) {
        bail!("CHECK FAILED: clustering item {i}: pool result differs from one device");
    }
    let ev = (CLUSTER_ITEMS * CLUSTER_BATCH) as f64;
    println!(
        "clustering, {CLUSTER_ITEMS} batches x {CLUSTER_BATCH} Run-3 events: 1 device {:.0} events/s, {} devices {:.0} events/s, speed-up {:.2}x",
        ev / t1,
        all.len(),
        ev / tn,
        t1 / tn
    );
    println!(
        "  device 0 with two host threads: {:.0} events/s ({:.2}x one thread)",
        ev / t2,
        t1 / t2
    );
    out += &format!("clustering,1,{CLUSTER_ITEMS},{ev},{t1:.6},{:.1}\n", ev / t1);
    out += &format!(
        "clustering,0+0,{CLUSTER_ITEMS},{ev},{t2:.6},{:.1}\n",
        ev / t2
    );
    out += &format!(
        "clustering,{},{CLUSTER_ITEMS},{ev},{tn:.6},{:.1}\n",
        all.len(),
        ev / tn
    );

    // Device-resident clustering: every device holds the 16 distinct batches (uploaded once)
    // and one `Clusterer`; a work item runs one batch's chain and waits for it, the results
    // staying on the device (as a pipeline that keeps events in flight would).
    let resident = |pool: &DevicePool| -> Result<f64> {
        let states = pool
            .backends()
            .iter()
            .map(|b| -> Result<_> {
                let g = b.gpu_shared().context("CUDA backend")?;
                let d: Vec<DeviceDigis> = batches[..16]
                    .iter()
                    .map(|(d, offs)| DeviceDigis::upload(g, d, offs))
                    .collect::<detkit::Result<_>>()?;
                let max = d.iter().map(|x| x.len()).max().unwrap_or(1);
                let c = Clusterer::new(g, &geo, max, CLUSTER_BATCH)?;
                Ok(Mutex::new((d, c)))
            })
            .collect::<Result<Vec<_>>>()?;
        let items: Vec<usize> = (0..RESIDENT_ITEMS).collect();
        let mut times = Vec::new();
        for rep in 0..reps + 1 {
            let t = Instant::now();
            pool.map(items.clone(), |b, i| -> Result<()> {
                let k = pool
                    .backends()
                    .iter()
                    .position(|x| std::ptr::eq(x, b))
                    .expect("a pool member");
                let mut st = states[k].lock().unwrap_or_else(|e| e.into_inner());
                let (d, c) = &mut *st;
                c.run(&d[i % 16], cut)?;
                b.gpu().expect("cuda").synchronize()?;
                Ok(())
            })?;
            if rep > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        // Check: every device's last results equal the end-to-end ones of the same batch.
        for st in &states {
            let mut st = st.lock().unwrap_or_else(|e| e.into_inner());
            let (d, c) = &mut *st;
            let j = (RESIDENT_ITEMS - 1) % 16;
            c.run(&d[j], cut)?;
            if c.results(&d[j])?.clus != r1[j].clus {
                bail!("CHECK FAILED: device-resident clustering of batch {j}");
            }
        }
        Ok(median(times))
    };
    let (d1, dn) = (resident(&first)?, resident(&all)?);
    let ev = (RESIDENT_ITEMS * CLUSTER_BATCH) as f64;
    println!(
        "clustering, device-resident, {RESIDENT_ITEMS} batches x {CLUSTER_BATCH} events: 1 device {:.0} events/s, {} devices {:.0} events/s, speed-up {:.2}x",
        ev / d1,
        all.len(),
        ev / dn,
        d1 / dn
    );
    out += &format!(
        "clustering-resident,1,{RESIDENT_ITEMS},{ev},{d1:.6},{:.1}\n",
        ev / d1
    );
    out += &format!(
        "clustering-resident,{},{RESIDENT_ITEMS},{ev},{dn:.6},{:.1}\n",
        all.len(),
        ev / dn
    );

    // Seeding: one <mu> = 200 event per work item.
    let cfg = SeedingSettings::default().to_config()?;
    let seed_events: Vec<Vec<SpacePoint>> = (0..16)
        .map(|s| sgen::generate(2000 + s, 200.0, true).spacepoints)
        .collect();
    let items: Vec<&Vec<SpacePoint>> = (0..SEED_ITEMS).map(|i| &seed_events[i % 16]).collect();
    let (want_seeds, _) = detkit::seeding::cpu::seeds(&cfg, &seed_events[0]);
    let run_seed = |pool: &DevicePool| -> Result<(f64, Vec<usize>)> {
        let mut times = Vec::new();
        let mut last = Vec::new();
        for rep in 0..reps + 1 {
            let t = Instant::now();
            let r = pool.map(items.clone(), |b, sps| b.seed(sps, &cfg))?;
            if rep > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
            if r[0].seeds != want_seeds {
                bail!("CHECK FAILED: seeding item 0 differs from the oracle");
            }
            last = r.iter().map(|o| o.seeds.len()).collect();
        }
        Ok((median(times), last))
    };
    let (s1, c1) = run_seed(&first)?;
    let (s2, _) = run_seed(&twice)?;
    let (sn, cn) = run_seed(&all)?;
    if c1 != cn {
        bail!("CHECK FAILED: seeding: pool seed counts differ from one device");
    }
    let ev = SEED_ITEMS as f64;
    println!(
        "seeding, {SEED_ITEMS} <mu>=200 events: 1 device {:.0} events/s, {} devices {:.0} events/s, speed-up {:.2}x",
        ev / s1,
        all.len(),
        ev / sn,
        s1 / sn
    );
    println!(
        "  device 0 with two host threads: {:.0} events/s ({:.2}x one thread)",
        ev / s2,
        s1 / s2
    );
    out += &format!("seeding,1,{SEED_ITEMS},{ev},{s1:.6},{:.1}\n", ev / s1);
    out += &format!("seeding,0+0,{SEED_ITEMS},{ev},{s2:.6},{:.1}\n", ev / s2);
    out += &format!(
        "seeding,{},{SEED_ITEMS},{ev},{sn:.6},{:.1}\n",
        all.len(),
        ev / sn
    );
    if let Some(path) = csv {
        std::fs::File::create(&path)?.write_all(out.as_bytes())?;
    }
    Ok(())
}
