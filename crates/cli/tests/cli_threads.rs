//! `--backend cpu` writes the oracle's bytes (the results of the sequential references in
//! `<family>/cpu.rs`, through the library's writers) whatever `--threads` says.

use detkit::pet::cpu::{self as poracle, CoincideConfig};

mod common;
use common::{detkit, s};

#[test]
fn cpu_backend_output_is_the_oracles_on_any_thread_count() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n);
    // Inputs.
    detkit()
        .args(["-q", "cluster", "generate", "--seed", "3", "--output"])
        .arg(p("digis.csv"))
        .assert()
        .success();
    detkit()
        .args(["-q", "seed", "generate", "--mu", "10", "--output"])
        .arg(p("sp.csv"))
        .assert()
        .success();
    detkit()
        .args([
            "-q",
            "pet",
            "generate",
            "--scanner",
            "tiny",
            "--singles",
            "3000",
        ])
        .arg("--dir")
        .arg(p("acq"))
        .assert()
        .success();

    // The oracle's bytes.
    let digis =
        detkit::clustering::read_csv(std::fs::File::open(p("digis.csv")).unwrap(), "digis.csv")
            .unwrap();
    let g = detkit::clustering::Geometry::phase1();
    let c =
        detkit::clustering::cpu::cluster(&digis, &[0, digis.len() as u32], &g, Some(g.default_cut));
    let mut want_clusters = Vec::new();
    detkit::clustering::write_csv(&mut want_clusters, &digis, &c.clus).unwrap();
    let sps =
        detkit::seeding::read_csv(std::fs::File::open(p("sp.csv")).unwrap(), "sp.csv").unwrap();
    let cfg = detkit::seeding::SeedingSettings::default()
        .to_config()
        .unwrap();
    let (seeds, _) = detkit::seeding::cpu::seeds(&cfg, &sps);
    let mut want_seeds = Vec::new();
    detkit::seeding::io::write_seeds_csv(&mut want_seeds, &seeds).unwrap();
    let scanner = detkit::pet::Scanner::from_toml_file(&p("acq").join("scanner.toml")).unwrap();
    let frames =
        detkit::pet::frames_from_bytes(&std::fs::read(p("acq").join("frames.bin")).unwrap())
            .unwrap();
    let (singles, _) =
        poracle::convert(&frames, &scanner.params, &scanner.position, &scanner.energy);
    let sorted = poracle::sort(&singles).unwrap();
    let pairs = poracle::coincide(&sorted, &CoincideConfig::prompt(scanner.time_window)).unwrap();
    let mut want_pairs = format!("{}\n", detkit::pet::PAIRS_HEADER).into_bytes();
    detkit::pet::write_pairs_csv(&mut want_pairs, &pairs).unwrap();

    for threads in ["1", "2", "7"] {
        let out = |n: &str| p(&format!("{n}-{threads}"));
        detkit()
            .args([
                "-q",
                "--threads",
                threads,
                "cluster",
                "--backend",
                "cpu",
                "--input",
            ])
            .arg(p("digis.csv"))
            .arg("--output")
            .arg(out("clusters.csv"))
            .assert()
            .success();
        assert!(
            std::fs::read(out("clusters.csv")).unwrap() == want_clusters,
            "clusters, {threads} threads"
        );
        detkit()
            .args([
                "-q",
                "--threads",
                threads,
                "seed",
                "--backend",
                "cpu",
                "--input",
            ])
            .arg(p("sp.csv"))
            .arg("--output")
            .arg(out("seeds.csv"))
            .assert()
            .success();
        assert!(
            std::fs::read(out("seeds.csv")).unwrap() == want_seeds,
            "seeds, {threads} threads"
        );
        detkit()
            .args(["-q", "--threads", threads, "pet", "run", "--backend", "cpu"])
            .args(["--chunk", "500", "--scanner"])
            .arg(p("acq").join("scanner.toml"))
            .arg("--input")
            .arg(p("acq").join("frames.bin"))
            .args(["--output", s(&out("pairs.csv"))])
            .assert()
            .success();
        assert!(
            std::fs::read(out("pairs.csv")).unwrap() == want_pairs,
            "pairs, {threads} threads"
        );
    }
    // `--threads 0` is a usage error.
    detkit()
        .args(["--threads", "0", "cluster", "--backend", "cpu", "--input"])
        .arg(p("digis.csv"))
        .arg("--output")
        .arg(p("never.csv"))
        .assert()
        .code(2);
}
