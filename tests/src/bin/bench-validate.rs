//! The host validation of clustering input on the CPU alone (no GPU): the fused check and
//! copy of the pinned-staging calls (`validate_staged`, into a pageable buffer here), the
//! check alone (`validate`), and a plain parallel copy of the same bytes, by rayon threads.
//! Ratios are what matter (the pinned path adds only the DMA issue).
//!
//! Usage: `bench-validate [--events 64] [--reps 20] [--threads N] [--variants 0]`
//! (`--threads`: rayon's global pool, default one per core; the calls come from the main
//! thread, outside the pool, as a caller's do; `--variants`: the measuring variants of
//! `detkit::phases::set_variant`, none defined now: every value runs the default path).

use std::time::Instant;

use anyhow::{Context, Result};
use detkit::clustering::{self as cl, gen as cgen, Digis, DigisRef};
use rayon::prelude::*;

/// The fastest rep: the least disturbed by other work on a shared machine.
fn best(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[0]
}

fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    best(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    )
}

fn main() -> Result<()> {
    let (mut events, mut reps) = (64usize, 20usize);
    let mut threads = 0usize;
    let mut variants = vec![0u32];
    let mut args = std::env::args().skip(1);
    let list = |s: String| -> Result<Vec<usize>> {
        s.split(',')
            .map(|x| x.parse().context("a number"))
            .collect()
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--events" => events = args.next().context("--events N")?.parse()?,
            "--reps" => reps = args.next().context("--reps N")?.parse()?,
            "--threads" => threads = args.next().context("--threads N")?.parse()?,
            "--variants" => {
                variants = list(args.next().context("--variants list")?)?
                    .into_iter()
                    .map(|v| v as u32)
                    .collect()
            }
            _ => anyhow::bail!(
                "usage: bench-validate [--events 64] [--reps 20] [--threads N] [--variants 0]"
            ),
        }
    }
    let geo = cl::Geometry::phase1();
    let distinct: Vec<Digis> = (0..16).map(|s| cgen::run3_event(100 + s)).collect();
    let mut d = Digis::default();
    let mut offs = vec![0u32];
    for k in 0..events {
        d.extend(&distinct[k % distinct.len()]);
        offs.push(d.len() as u32);
    }
    let n = d.len();
    let bytes = (8 * n) as f64;
    println!(
        "{events} events, {n} digis, {:.1} MB; GB/s of input bytes per thread (ratios matter)",
        bytes / 1e6
    );
    println!("threads variant  copy_ms  check_ms  staged_ms  copy/thr  staged/thr  staged÷copy");
    let mut stage = vec![0u16; 4 * n];
    if threads > 0 {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()?;
    }
    let t = rayon::current_num_threads();
    let r: DigisRef = (&d).into();
    for &v in &variants {
        // The copy again beside each variant: on a shared machine the ratio of the two,
        // measured together, is what holds.
        let copy = time(reps, || {
            let srcs = [&d.module, &d.x, &d.y, &d.adc];
            stage.par_chunks_mut(n).zip(srcs).for_each(|(dst, src)| {
                dst.par_chunks_mut(1 << 15)
                    .zip(src.par_chunks(1 << 15))
                    .for_each(|(a, b)| a.copy_from_slice(b))
            });
        });
        detkit::phases::set_variant(v);
        let check = time(reps, || cl::validate(r, &offs, &geo).unwrap());
        let staged = time(reps, || {
            cl::validate_staged(r, &offs, &geo, &mut stage).unwrap()
        });
        detkit::phases::set_variant(0);
        assert!(stage[..n] == d.module[..] && stage[3 * n..] == d.adc[..]);
        let gbs = |ms: f64| bytes / ms / 1e6 / t as f64;
        println!(
            "{t:>7} {v:>7} {copy:>8.3} {check:>9.3} {staged:>10.3} {:>9.2} {:>11.2} {:>12.2}",
            gbs(copy),
            gbs(staged),
            staged / copy
        );
    }
    detkit::phases::set_variant(0);
    Ok(())
}
