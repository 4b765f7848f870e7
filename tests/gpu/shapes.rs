//! Every kernel shape of `detkit::tuning` (issue 28: the scan, select and histogram shapes
//! `detkit-bench --variants` times) against the oracle, at the sizes that end tiles early.

use crate::{e, Ctx, Test, R};
use detkit::bucket::POISON;
use detkit::compact::Selection;
use detkit::histogram::HistogramStrategy;
use detkit::tuning::Tuned;
use detkit::ScanKind;
use detkit_tests::{ensure, exact, sizes};

pub(crate) const TESTS: &[Test] = &[
    ("scan_shapes", test_scan_shapes),
    ("select_shapes", test_select_shapes),
    ("histogram_shapes", test_histogram_shapes),
];

/// Runs `f` with each shape of `t` chosen, the default restored afterwards (also on error).
fn each_shape(t: Tuned, mut f: impl FnMut(usize, u32, u32) -> R) -> R {
    let mut r = Ok(());
    for (v, &(_, a, b)) in t.shapes().iter().enumerate() {
        t.choose(v).map_err(e)?;
        r = f(v, a, b);
        if r.is_err() {
            break;
        }
    }
    t.choose(0).map_err(e)?;
    r
}

fn test_scan_shapes(c: &Ctx) -> R {
    let g = c.gpu();
    each_shape(Tuned::ScanU32, |v, threads, items| {
        let (block, tile) = (threads as usize, (threads * items) as usize);
        for n in sizes(block, tile, true) {
            for (label, input) in [
                ("random", c.rand_u32(40 + v as u64, n)),
                ("all-max", vec![u32::MAX; n]),
            ] {
                let d_in = if n == 0 {
                    g.zeros(1).map_err(e)?
                } else {
                    g.upload(&input).map_err(e)?
                };
                for kind in [ScanKind::Exclusive, ScanKind::Inclusive] {
                    let mut d_out = g.poisoned(n + 1, POISON).map_err(e)?;
                    g.scan_device(&d_in, &mut d_out, n, kind).map_err(e)?;
                    let mut want = detkit::scan::cpu::scan(&input, kind);
                    want.push(POISON);
                    exact(
                        &format!("scan_u32 shape {v} {kind:?} {label} n={n}"),
                        &g.download(&d_out).map_err(e)?,
                        &want,
                    )?;
                }
            }
        }
        Ok(())
    })
}

fn test_select_shapes(c: &Ctx) -> R {
    let g = c.gpu();
    each_shape(Tuned::SelectRange, |v, threads, items| {
        let (block, tile) = (threads as usize, (threads * items) as usize);
        for n in sizes(block, tile, true) {
            let input = c.rand_u32(50 + v as u64, n);
            let d_in = if n == 0 {
                g.zeros(1).map_err(e)?
            } else {
                g.upload(&input).map_err(e)?
            };
            for (label, lo, hi) in [
                ("half", 0, 1u32 << 31),
                ("none", 5, 5),
                ("all", 0, u32::MAX),
            ] {
                let mut d_out = g.poisoned(n.max(1), POISON).map_err(e)?;
                let mut d_n = g.poisoned(1, POISON).map_err(e)?;
                g.select_u32(&d_in, n, Selection::Range { lo, hi }, &mut d_out, &mut d_n)
                    .map_err(e)?;
                let count = g.download(&d_n).map_err(e)?[0] as usize;
                let want = detkit::compact::cpu::select(&input, |_, x| lo <= x && x < hi);
                ensure(count == want.len(), || {
                    format!("select shape {v} {label} n={n}: count {count}")
                })?;
                let got = g.download(&d_out).map_err(e)?;
                exact(
                    &format!("select shape {v} {label} n={n}"),
                    &got[..count],
                    &want,
                )?;
                ensure(got[count..n].iter().all(|&x| x == POISON), || {
                    format!("select shape {v} {label} n={n}: wrote past the count")
                })?;
            }
        }
        Ok(())
    })
}

fn test_histogram_shapes(c: &Ctx) -> R {
    let g = c.gpu();
    each_shape(Tuned::HistogramShared, |v, _, _| {
        for n in sizes(512, 2048, true).into_iter().chain([(1 << 22) + 3]) {
            for nbins in [7u32, 256] {
                let keys = c.rand(60 + v as u64, n, nbins + 3);
                let want = detkit::histogram::cpu::histogram(&keys, nbins);
                let d = if n == 0 {
                    g.zeros(1).map_err(e)?
                } else {
                    g.upload(&keys).map_err(e)?
                };
                let mut out = g.histogram_outputs(nbins).map_err(e)?;
                g.histogram_device(&d, n, nbins, HistogramStrategy::Shared, false, &mut out)
                    .map_err(e)?;
                let got = g.download_histogram(&out).map_err(e)?;
                let what = format!("histogram shape {v} nbins={nbins} n={n}");
                exact(&what, &got.counts, &want.counts)?;
                ensure(
                    got.out_of_range == want.out_of_range
                        && got.first_out_of_range == want.first_out_of_range,
                    || format!("{what}: out-of-range count or first index"),
                )?;
            }
        }
        Ok(())
    })
}
