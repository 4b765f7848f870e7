//! The clustering oracle against independent facts (brute-force connectivity, charge sums),
//! input validation, file formats and the generator.

use detkit::clustering::gen::{self, Adversarial};
use detkit::clustering::{self as cl, ChargeCut, Digis, Geometry};
use detkit::{Backend, Error};
use detkit_gpu::clustering::{INVALID_MODULE, NO_MODULE_START};
use proptest::prelude::*;

fn small() -> Geometry {
    Geometry::custom(4, 12, 10, ChargeCut::uniform(0)).unwrap()
}

/// Brute force: kept digis (valid, pixel not repeated in its run), their transitive
/// 8-connectivity by repeated relaxation over all pairs, clusters numbered by smallest index.
fn brute_force(d: &Digis, geometry: &Geometry) -> (Vec<i32>, Vec<u32>) {
    let n = d.len();
    let mut run = vec![usize::MAX; n];
    let mut r = 0;
    let mut last: Option<u16> = None;
    for i in 0..n {
        if d.module[i] == INVALID_MODULE {
            continue;
        }
        if last != Some(d.module[i]) {
            r += 1;
            last = Some(d.module[i]);
        }
        run[i] = r;
    }
    let kept: Vec<bool> = (0..n)
        .map(|i| {
            run[i] != usize::MAX
                && (0..n)
                    .filter(|&j| run[j] == run[i] && d.x[j] == d.x[i] && d.y[j] == d.y[i])
                    .count()
                    == 1
        })
        .collect();
    let mut label: Vec<usize> = (0..n).collect();
    loop {
        let mut changed = false;
        for i in 0..n {
            for j in 0..n {
                if i != j
                    && kept[i]
                    && kept[j]
                    && run[i] == run[j]
                    && d.x[i].abs_diff(d.x[j]) <= 1
                    && d.y[i].abs_diff(d.y[j]) <= 1
                    && label[j] < label[i]
                {
                    label[i] = label[j];
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut clus = vec![-1; n];
    let mut per_module = vec![0u32; geometry.modules as usize];
    for i in 0..n {
        if kept[i] && label[i] == i {
            let m = d.module[i] as usize;
            clus[i] = per_module[m] as i32;
            per_module[m] += 1;
        }
    }
    for i in 0..n {
        if kept[i] {
            clus[i] = clus[label[i]];
        }
    }
    (clus, per_module)
}

/// Digis of up to 4 modules in consecutive runs, with invalid digis and repeats.
fn digis_strategy() -> impl Strategy<Value = Digis> {
    prop::collection::vec(
        (
            0u16..4,
            1usize..30,
            prop::collection::vec((0u16..12, 0u16..10, 0u16..3000, 0u8..10), 30),
        ),
        0..4,
    )
    .prop_map(|mods| {
        let mut seen = std::collections::HashSet::new();
        let mut d = Digis::default();
        for (m, len, pix) in mods {
            if !seen.insert(m) {
                continue;
            }
            for &(x, y, adc, kind) in &pix[..len] {
                if kind == 0 {
                    d.push(INVALID_MODULE, x, y, adc);
                }
                d.push(m, x, y, adc);
            }
        }
        d
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn oracle_matches_brute_force(d in digis_strategy()) {
        let g = small();
        cl::validate(&d, &[0, d.len() as u32], &g).unwrap();
        let got = detkit::clustering::cpu::find_clusters(&d, &[0, d.len() as u32], &g);
        let (clus, per_module) = brute_force(&d, &g);
        prop_assert_eq!(&got.clus, &clus);
        prop_assert_eq!(&got.clus_in_module, &per_module);
        for m in 0..4u16 {
            let first = d.module.iter().position(|&v| v == m).map_or(NO_MODULE_START, |p| p as u32);
            prop_assert_eq!(got.module_first[m as usize], first);
        }
    }

    #[test]
    fn charge_cut_keeps_heavy_clusters_in_order(d in digis_strategy(), thr in 0u32..8000) {
        let g = small();
        let offs = [0, d.len() as u32];
        let before = detkit::clustering::cpu::find_clusters(&d, &offs, &g);
        let after = detkit::clustering::cpu::cluster(&d, &offs, &g, Some(ChargeCut::uniform(thr)));
        for m in 0..4u16 {
            let n = before.clus_in_module[m as usize] as usize;
            let mut q = vec![0u64; n];
            for i in 0..d.len() {
                if d.module[i] == m && before.clus[i] >= 0 {
                    q[before.clus[i] as usize] += d.adc[i] as u64;
                }
            }
            let kept: Vec<usize> = (0..n).filter(|&c| q[c] >= thr as u64).collect();
            prop_assert_eq!(after.clus_in_module[m as usize] as usize, kept.len());
            for i in 0..d.len() {
                if d.module[i] != m || before.clus[i] < 0 {
                    continue;
                }
                let want = kept.iter().position(|&c| c == before.clus[i] as usize).map_or(-1, |p| p as i32);
                prop_assert_eq!(after.clus[i], want);
            }
        }
    }
}

#[test]
fn seed_example() {
    let d = Digis {
        module: vec![7; 6],
        x: vec![5, 9, 6, 5, 10, 2],
        y: vec![5, 9, 6, 5, 10, 2],
        adc: vec![3000; 6],
    };
    let c = Backend::cpu()
        .cluster(&d, &Geometry::phase1(), None)
        .unwrap();
    assert_eq!(c.clus, [-1, 0, 1, -1, 0, 2]);
    assert_eq!(c.clus_in_module[7], 3);
    assert_eq!(c.module_first[7], 0);
    // Charge cut at 5000: clusters {1,4} (6000) survive, {2} and {5} (3000) go.
    let c = Backend::cpu()
        .cluster(&d, &Geometry::phase1(), Some(ChargeCut::uniform(5000)))
        .unwrap();
    assert_eq!(c.clus, [-1, 0, -1, -1, 0, -1]);
}

fn expect_invalid(r: detkit::Result<detkit::clustering::Clusters>, needle: &str) {
    match r {
        Err(e @ (Error::InvalidInput { .. } | Error::InvalidItem { .. })) => {
            let text = e.to_string();
            assert!(text.contains(needle), "`{text}` lacks `{needle}`")
        }
        other => panic!("expected an input error containing `{needle}`, got {other:?}"),
    }
}

#[test]
fn validation_names_the_first_offending_digi() {
    let g = Geometry::phase1();
    let b = Backend::cpu();
    let mut d = Digis::default();
    d.push(3, 1, 1, 100);
    d.push(1856, 1, 1, 100);
    expect_invalid(b.cluster(&d, &g, None), "digi 1: module id 1856");
    let mut d = Digis::default();
    d.push(3, 160, 1, 100);
    expect_invalid(b.cluster(&d, &g, None), "digi 0: pixel (x 160");
    let mut d = Digis::default();
    d.push(3, 1, 416, 100);
    expect_invalid(b.cluster(&d, &g, None), "digi 0: pixel (x 1, y 416)");
    let mut d = Digis::default();
    d.push(3, 1, 1, 100);
    d.push(INVALID_MODULE, 0, 0, 0);
    d.push(4, 1, 1, 100);
    d.push(3, 2, 2, 100);
    expect_invalid(
        b.cluster(&d, &g, None),
        "digi 3: the digis of module 3 are not consecutive",
    );
    let mut d = Digis::default();
    d.push(3, 1, 1, 100);
    d.x.push(0);
    expect_invalid(b.cluster(&d, &g, None), "different lengths");
    // The same module in two events is fine; split within an event is not.
    let mut d = Digis::default();
    d.push(3, 1, 1, 100);
    d.push(3, 2, 2, 100);
    assert!(b.cluster_events(&d, &[0, 1, 2], &g, None).is_ok());
    expect_invalid(b.cluster_events(&d, &[0, 2, 1, 2], &g, None), "decreasing");
    expect_invalid(
        b.cluster_events(&d, &[0, 1], &g, None),
        "end at the digi count",
    );
}

#[test]
fn geometry_limits() {
    assert!(Geometry::custom(0, 10, 10, ChargeCut::uniform(0)).is_err());
    assert!(Geometry::custom(10, 40_000, 10, ChargeCut::uniform(0)).is_err());
    assert!(Geometry::custom(10, 10, 0, ChargeCut::uniform(0)).is_err());
    assert!(Geometry::by_name("phase3").is_err());
    assert_eq!(Geometry::by_name("phase2").unwrap().modules, 3892);
}

#[test]
fn files_round_trip() {
    let d = gen::run3_event(3);
    let mut bin = Vec::new();
    cl::write_binary(&mut bin, &d).unwrap();
    assert_eq!(cl::read_binary(&bin[..]).unwrap(), d);
    let clus: Vec<i32> = (0..d.len() as i32).map(|i| i % 7 - 1).collect();
    let mut csv = Vec::new();
    cl::write_csv(&mut csv, &d, &clus).unwrap();
    let text = String::from_utf8(csv).unwrap();
    assert!(text.starts_with("module,x,y,adc,cluster\n"));
    // The input format is the output without the last column.
    let input: String = text
        .lines()
        .map(|l| l.rsplit_once(',').unwrap().0.to_string() + "\n")
        .collect();
    assert_eq!(cl::read_csv(input.as_bytes(), "d.csv").unwrap(), d);
    assert!(cl::read_csv("module,x,y\n1,2,3\n".as_bytes(), "d.csv").is_err());
    assert!(cl::read_csv("module,x,y,adc\n1,2,3,70000\n".as_bytes(), "d.csv").is_err());
    assert!(cl::read_binary(&b"NOTDIGIS\0\0\0\0"[..]).is_err());
}

#[test]
fn csv_errors_name_file_line_and_column() {
    // Positions are 1-based lines of the file (the header is line 1, a blank line counts).
    let text = "module,x,y,adc\n1,2,3,4\n\n1,2,3,70000\n";
    let e = cl::read_csv(text.as_bytes(), "d.csv")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("d.csv:4: column `adc`: "), "{e}");
    let e = cl::read_csv("module,x,adc\n1,2,3\n".as_bytes(), "d.csv")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("d.csv:1: column `y`: "), "{e}");
    let e = cl::read_csv("1,2,3,4\n".as_bytes(), "d.csv")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("d.csv:1: "), "{e}");
    // The line of every digi; a header alone is zero digis; a BOM is accepted.
    let (d, lines) =
        cl::read_csv_with_lines("module,x,y,adc\n1,2,3,4\n\n5,6,7,8\n".as_bytes(), "d.csv")
            .unwrap();
    assert_eq!((d.module, lines), (vec![1, 5], vec![2, 4]));
    assert!(cl::read_csv("module,x,y,adc\n".as_bytes(), "d.csv")
        .unwrap()
        .is_empty());
    let bom = "\u{feff}module,x,y,adc\n1,2,3,4\n";
    assert_eq!(cl::read_csv(bom.as_bytes(), "d.csv").unwrap().len(), 1);
}

#[test]
fn generated_events_are_valid_and_sized() {
    let g = Geometry::phase1();
    let d = gen::run3_event(11);
    cl::validate(&d, &[0, d.len() as u32], &g).unwrap();
    assert!((60_000..130_000).contains(&d.len()), "{} digis", d.len());
    let c = detkit::clustering::cpu::cluster(&d, &[0, d.len() as u32], &g, Some(g.default_cut));
    assert!(
        (12_000..24_000).contains(&c.total()),
        "{} clusters",
        c.total()
    );
    let dense = gen::dense_event(11);
    cl::validate(&dense, &[0, dense.len() as u32], &g).unwrap();
    let mut per_module = vec![0usize; 1856];
    for &m in &dense.module {
        if m != INVALID_MODULE {
            per_module[m as usize] += 1;
        }
    }
    assert!(per_module
        .iter()
        .any(|&n| n > cl::DEFAULT_CAPACITY as usize));
}

#[test]
fn adversarial_modules() {
    let g = Geometry::phase1();
    let run = |k| {
        let d = gen::adversarial(k, &g, 5, 1);
        detkit::clustering::cpu::find_clusters(&d, &[0, d.len() as u32], &g)
    };
    assert_eq!(run(Adversarial::Full).clus_in_module[5], 1);
    assert_eq!(run(Adversarial::Lattice).clus_in_module[5], 80 * 208);
    assert_eq!(run(Adversarial::Checkerboard).clus_in_module[5], 1);
    assert_eq!(run(Adversarial::Snake).clus_in_module[5], 1);
    assert_eq!(run(Adversarial::AllDuplicated).clus_in_module[5], 0);
    assert_eq!(run(Adversarial::FullDuplicated).clus_in_module[5], 0);
    assert_eq!(run(Adversarial::One).clus_in_module[5], 1);
}
