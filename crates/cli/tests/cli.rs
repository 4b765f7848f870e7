//! The `detkit` command as a user runs it: flags, exit codes, messages with positions, and
//! that no command destroys its input or leaves a file behind after a failure. CPU backend
//! only: these run in CI without a GPU.

use std::path::{Path, PathBuf};

use predicates::prelude::*;
use predicates::str::contains;

mod common;
use common::{detkit, s, Dir};

/// A small PET acquisition: DIR/scanner.toml, tables, DIR/frames.bin.
fn pet_dir(d: &Dir) -> PathBuf {
    common::pet_dir(d, 2000)
}

const DIGIS: &str = "module,x,y,adc\n0,1,1,5000\n0,1,2,5000\n0,50,50,9000\n3,7,7,8000\n";

// ---------------------------------------------------------------------------------------
// Data loss: an output that is an input is refused, the input untouched.
// ---------------------------------------------------------------------------------------

fn assert_refused_and_intact(args: &[&str], input: &Path) {
    let before = std::fs::read(input).unwrap();
    detkit()
        .args(args)
        .assert()
        .code(1)
        .stderr(contains("refusing to overwrite an input"));
    assert_eq!(std::fs::read(input).unwrap(), before, "input changed");
}

#[test]
fn no_command_overwrites_its_input() {
    let d = Dir::new();
    let acq = pet_dir(&d);
    let frames = acq.join("frames.bin");
    let scanner = acq.join("scanner.toml");
    assert_refused_and_intact(
        &[
            "pet",
            "run",
            "--backend",
            "cpu",
            "--scanner",
            s(&scanner),
            "--input",
            s(&frames),
            "--output",
            s(&frames),
        ],
        &frames,
    );
    // Another spelling of the same path.
    let other = acq.join(".").join("frames.bin");
    assert_refused_and_intact(
        &[
            "pet",
            "convert",
            "--backend",
            "cpu",
            "--scanner",
            s(&scanner),
            "--input",
            s(&frames),
            "--output",
            s(&other),
        ],
        &frames,
    );
    assert_refused_and_intact(
        &[
            "pet",
            "run",
            "--backend",
            "cpu",
            "--scanner",
            s(&scanner),
            "--input",
            s(&frames),
            "--output",
            s(&scanner),
        ],
        &scanner,
    );
    let singles = d.write("singles.csv", "crystal,energy,time\n1,511,10\n2,511,12\n");
    assert_refused_and_intact(
        &[
            "pet",
            "sort",
            "--backend",
            "cpu",
            "--input",
            s(&singles),
            "--output",
            s(&singles),
        ],
        &singles,
    );
    assert_refused_and_intact(
        &[
            "pet",
            "coincide",
            "--backend",
            "cpu",
            "--window",
            "5",
            "--input",
            s(&singles),
            "--output",
            s(&singles),
        ],
        &singles,
    );
    let digis = d.write("digis.csv", DIGIS);
    assert_refused_and_intact(
        &[
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&digis),
            "--output",
            s(&digis),
        ],
        &digis,
    );
    let sp = d.write("sp.csv", "x,y,z\n30,1,2\n");
    assert_refused_and_intact(
        &[
            "seed",
            "--backend",
            "cpu",
            "--input",
            s(&sp),
            "--output",
            s(&sp),
        ],
        &sp,
    );
    let out = d.path("seeds.csv");
    assert_refused_and_intact(
        &[
            "seed",
            "--backend",
            "cpu",
            "--input",
            s(&sp),
            "--output",
            s(&out),
            "--params",
            s(&sp),
        ],
        &sp,
    );
    assert!(!out.exists());
    #[cfg(unix)]
    {
        let link = d.path("link.csv");
        std::fs::hard_link(&digis, &link).unwrap();
        assert_refused_and_intact(
            &[
                "cluster",
                "--backend",
                "cpu",
                "--input",
                s(&digis),
                "--output",
                s(&link),
            ],
            &digis,
        );
    }
}

// ---------------------------------------------------------------------------------------
// Failures leave nothing behind.
// ---------------------------------------------------------------------------------------

#[test]
fn a_failed_command_leaves_no_output() {
    let d = Dir::new();
    let acq = pet_dir(&d);
    // A frames file cut inside a frame: the chain fails at the end of the stream.
    let mut bytes = std::fs::read(acq.join("frames.bin")).unwrap();
    bytes.truncate(bytes.len() - 5);
    let cut = d.path("cut.bin");
    std::fs::write(&cut, bytes).unwrap();
    let pairs = d.path("pairs.csv");
    detkit()
        .args([
            "pet",
            "run",
            "--backend",
            "cpu",
            "--chunk",
            "64",
            "--scanner",
        ])
        .arg(acq.join("scanner.toml"))
        .arg("--input")
        .arg(&cut)
        .arg("--output")
        .arg(&pairs)
        .assert()
        .code(1)
        .stderr(contains("cut.bin"));
    assert!(!pairs.exists());
    // A bad row late in a clustering input.
    let digis = d.write("bad.csv", format!("{DIGIS}1,2,x,4\n"));
    let out = d.path("clusters.csv");
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&digis),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1);
    assert!(!out.exists());
    // The params output in a missing directory: refused before any work, no seeds file.
    let sp = d.write("sp.csv", "x,y,z\n30,1,2\n");
    let seeds = d.path("seeds.csv");
    detkit()
        .args([
            "seed",
            "--backend",
            "cpu",
            "--input",
            s(&sp),
            "--output",
            s(&seeds),
            "--params",
        ])
        .arg(d.path("missing/params.csv"))
        .assert()
        .code(1)
        .stderr(contains("does not exist"));
    assert!(!seeds.exists());
    // pet generate into a missing parent: nothing created.
    detkit()
        .args(["pet", "generate", "--scanner", "tiny", "--dir"])
        .arg(d.path("no/such/dir"))
        .assert()
        .code(1)
        .stderr(contains("does not exist"));
    assert!(!d.path("no").exists());
    // No temporary files anywhere.
    assert!(
        d.files().iter().all(|f| !f.starts_with('.')),
        "{:?}",
        d.files()
    );
}

#[test]
fn an_output_in_a_missing_directory_is_reported_before_the_work() {
    let d = Dir::new();
    let digis = d.write("digis.csv", DIGIS);
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&digis),
            "--output",
        ])
        .arg(d.path("nope/clusters.csv"))
        .assert()
        .code(1)
        .stderr(contains("nope").and(contains("does not exist")));
}

// ---------------------------------------------------------------------------------------
// Flags.
// ---------------------------------------------------------------------------------------

#[test]
fn every_subcommand_has_help() {
    for args in [
        &["--help"][..],
        &["demo", "--help"],
        &["cluster", "--help"],
        &["cluster", "generate", "--help"],
        &["pet", "--help"],
        &["pet", "generate", "--help"],
        &["pet", "convert", "--help"],
        &["pet", "sort", "--help"],
        &["pet", "coincide", "--help"],
        &["pet", "run", "--help"],
        &["seed", "--help"],
        &["seed", "generate", "--help"],
        &["help", "pet", "run"],
    ] {
        detkit()
            .args(args)
            .assert()
            .success()
            .stdout(contains("Usage:"));
    }
    // Units and defaults are in the help.
    detkit()
        .args(["pet", "coincide", "--help"])
        .assert()
        .stdout(contains("ticks").and(contains("killAll")));
    detkit()
        .args(["cluster", "--help"])
        .assert()
        .stdout(contains("electrons").and(contains("[default: phase1]")));
}

#[test]
fn version_equals_syntax_and_usage_errors() {
    detkit()
        .arg("--version")
        .assert()
        .success()
        .stdout(contains(env!("CARGO_PKG_VERSION")));
    let d = Dir::new();
    let digis = d.write("digis.csv", DIGIS);
    let out = d.path("c.csv");
    detkit()
        .arg("cluster")
        .arg(format!("--input={}", s(&digis)))
        .arg(format!("--output={}", s(&out)))
        .arg("--backend=cpu")
        .assert()
        .success();
    assert!(out.exists());
    // Usage errors exit 2: unknown flag, missing value, bad value, unknown subcommand.
    for args in [
        &["cluster", "--nope"][..],
        &["cluster", "--input"],
        &["pet", "sort"],
        &["pet", "coincide", "--input", "a.csv", "--output", "b.csv"],
        &["pet", "frobnicate"],
        &["demo", "--backend", "gpu"],
        &["pet", "generate", "--dir", "x", "--rate", "0"],
        &["pet", "generate", "--dir", "x", "--rate", "NaN"],
        &["pet", "generate", "--dir", "x", "--singles", "0"],
        &["demo", "--size", "17179869184"],
        &["seed", "generate", "--output", "x.csv", "--mu", "-1"],
    ] {
        detkit().args(args).assert().code(2);
    }
    assert!(!Path::new("x").exists());
    // A repeated single-valued flag is an error, not "last one wins"; --input repeats only
    // with as many --output.
    detkit()
        .args(["pet", "sort", "--input", s(&digis), "--input", s(&digis)])
        .args(["--output", s(&out)])
        .assert()
        .code(2)
        .stderr(contains("cannot be used multiple times"));
    detkit()
        .args([
            "cluster",
            "--input",
            s(&digis),
            "--input",
            s(&digis),
            "--output",
            s(&out),
        ])
        .assert()
        .code(2)
        .stderr(contains("2 --input but 1 --output"));
}

// ---------------------------------------------------------------------------------------
// Errors name FILE:LINE and the column; internal types never show.
// ---------------------------------------------------------------------------------------

#[test]
fn reader_errors_name_file_line_and_column() {
    let d = Dir::new();
    let out = d.path("out.csv");
    // Line 4 (a blank line counts) has a bad y.
    let digis = d.write("digis.csv", "module,x,y,adc\n0,1,1,5000\n\n0,1,zz,5000\n");
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&digis),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1)
        .stderr(contains(format!("{}:4: column `y`", s(&digis))));
    let singles = d.write("singles.csv", "crystal,energy,time\n1,511,10\n2,NaN,12\n");
    detkit()
        .args([
            "pet",
            "sort",
            "--backend",
            "cpu",
            "--input",
            s(&singles),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1)
        .stderr(contains(format!("{}:3: column `energy`", s(&singles))));
    let singles = d.write("inf.csv", "crystal,energy,time\n1,inf,10\n");
    detkit()
        .args([
            "pet",
            "sort",
            "--backend",
            "cpu",
            "--input",
            s(&singles),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1)
        .stderr(contains(format!("{}:2: column `energy`", s(&singles))));
    let sp = d.write("sp.csv", "x,y,z\n30,1,2\n31,NaN,2\n");
    detkit()
        .args([
            "seed",
            "--backend",
            "cpu",
            "--input",
            s(&sp),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1)
        .stderr(contains(format!("{}:3: column `y`", s(&sp))).and(contains("SpacePoint").not()));
    let sp = d.write("nohead.csv", "x,q\n1,2\n");
    detkit()
        .args([
            "seed",
            "--backend",
            "cpu",
            "--input",
            s(&sp),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1)
        .stderr(contains(format!("{}:1: column `y`", s(&sp))));
    assert!(!out.exists());
}

#[test]
fn semantic_errors_name_file_line_and_column_too() {
    let d = Dir::new();
    let out = d.path("out.csv");
    // Module 3's digis are not consecutive: the digi on line 5 (a blank line counts).
    let digis = d.write(
        "digis.csv",
        "module,x,y,adc\n3,1,1,5000\n4,1,1,5000\n\n3,2,2,5000\n",
    );
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&digis),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1)
        .stderr(
            contains(format!("{}:5: column `module`", s(&digis))).and(contains("not consecutive")),
        );
    // A pixel outside the module.
    let digis = d.write("big.csv", "module,x,y,adc\n3,1,1,5000\n3,500,1,5000\n");
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&digis),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1)
        .stderr(contains(format!("{}:3: column `x`", s(&digis))));
    assert!(!out.exists());
}

#[test]
fn a_byte_order_mark_is_accepted() {
    let d = Dir::new();
    let digis = d.write("bom.csv", format!("\u{feff}{DIGIS}"));
    let out = d.path("c.csv");
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&digis),
            "--output",
            s(&out),
        ])
        .assert()
        .success();
    let plain = d.write("plain.csv", DIGIS);
    let out2 = d.path("c2.csv");
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&plain),
            "--output",
            s(&out2),
        ])
        .assert()
        .success();
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&out2).unwrap());
}

#[test]
fn pet_generate_on_a_file_says_so() {
    let d = Dir::new();
    let f = d.write("file", "x");
    detkit()
        .args(["pet", "generate", "--dir", s(&f)])
        .assert()
        .code(1)
        .stderr(contains("exists and is not a directory"));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "x");
}

// ---------------------------------------------------------------------------------------
// One rule for empty inputs: header only = zero items; no header = error.
// ---------------------------------------------------------------------------------------

#[test]
fn header_only_inputs_are_zero_items_and_empty_files_are_errors() {
    let d = Dir::new();
    let cases: [(&str, &str, Vec<&str>, &str); 3] = [
        (
            "digis.csv",
            "module,x,y,adc\n",
            vec!["cluster"],
            "module,x,y,adc,cluster\n",
        ),
        (
            "singles.csv",
            "crystal,energy,time\n",
            vec!["pet", "sort"],
            "crystal,energy,time\n",
        ),
        (
            "sp.csv",
            "x,y,z\n",
            vec!["seed"],
            "bottom,middle,top,weight,z_vertex\n",
        ),
    ];
    for (name, header, cmd, want) in cases {
        let inp = d.write(name, header);
        let out = d.path(&format!("out-{name}"));
        detkit()
            .args(&cmd)
            .args(["--backend", "cpu", "--input", s(&inp), "--output", s(&out)])
            .assert()
            .success();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), want, "{name}");
        let empty = d.write(&format!("empty-{name}"), "");
        let out = d.path(&format!("out-empty-{name}"));
        detkit()
            .args(&cmd)
            .args([
                "--backend",
                "cpu",
                "--input",
                s(&empty),
                "--output",
                s(&out),
            ])
            .assert()
            .code(1)
            .stderr(contains(format!("{}:1: no header", s(&empty))));
        assert!(!out.exists());
    }
}

// ---------------------------------------------------------------------------------------
// Progress and summaries.
// ---------------------------------------------------------------------------------------

#[test]
fn no_progress_bar_when_stderr_is_not_a_terminal_and_a_summary_at_the_end() {
    let d = Dir::new();
    let acq = pet_dir(&d);
    let pairs = d.path("pairs.csv");
    let out = detkit()
        .args([
            "pet",
            "run",
            "--backend",
            "cpu",
            "--chunk",
            "1",
            "--scanner",
        ])
        .arg(acq.join("scanner.toml"))
        .arg("--input")
        .arg(acq.join("frames.bin"))
        .arg("--output")
        .arg(&pairs)
        .assert()
        .success()
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        !err.contains('\r'),
        "progress written to a non-terminal: {err:?}"
    );
    assert!(err.lines().count() < 10, "{err}");
    assert!(
        err.contains("pet run:") && err.contains("frames/s"),
        "{err}"
    );
    // -q: nothing at all on success.
    let pairs2 = d.path("pairs2.csv");
    detkit()
        .args(["-q", "pet", "run", "--backend", "cpu", "--scanner"])
        .arg(acq.join("scanner.toml"))
        .arg("--input")
        .arg(acq.join("frames.bin"))
        .arg("--output")
        .arg(&pairs2)
        .assert()
        .success()
        .stderr(predicate::str::is_empty());
    assert_eq!(
        std::fs::read(&pairs).unwrap(),
        std::fs::read(&pairs2).unwrap()
    );
}

#[test]
fn generate_then_process_every_family() {
    let d = Dir::new();
    // Clustering.
    let digis = d.path("digis.csv");
    detkit()
        .args([
            "-q",
            "cluster",
            "generate",
            "--seed",
            "2",
            "--output",
            s(&digis),
        ])
        .assert()
        .success();
    let clusters = d.path("clusters.csv");
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&digis),
            "--output",
            s(&clusters),
        ])
        .assert()
        .success()
        .stderr(contains("cluster:").and(contains("digis/s")));
    let text = std::fs::read_to_string(&clusters).unwrap();
    assert!(text.starts_with("module,x,y,adc,cluster\n"));
    assert_eq!(
        text.lines().count(),
        std::fs::read_to_string(&digis).unwrap().lines().count()
    );
    // Seeding.
    let sp = d.path("sp.csv");
    let truth = d.path("truth.csv");
    detkit()
        .args([
            "-q",
            "seed",
            "generate",
            "--mu",
            "5",
            "--output",
            s(&sp),
            "--truth",
            s(&truth),
        ])
        .assert()
        .success();
    let seeds = d.path("seeds.csv");
    let params = d.path("params.csv");
    detkit()
        .args([
            "seed",
            "--backend",
            "cpu",
            "--input",
            s(&sp),
            "--output",
            s(&seeds),
            "--params",
            s(&params),
        ])
        .assert()
        .success()
        .stderr(contains("seed:"));
    let n_seeds = std::fs::read_to_string(&seeds).unwrap().lines().count();
    assert!(n_seeds > 1, "no seed found");
    assert_eq!(
        std::fs::read_to_string(&params).unwrap().lines().count(),
        n_seeds
    );
    // PET, step by step and streamed: the same pairs.
    let acq = pet_dir(&d);
    let singles = d.path("singles.bin");
    let sorted = d.path("sorted.csv");
    let pairs = d.path("pairs.csv");
    let streamed = d.path("streamed.csv");
    detkit()
        .args(["-q", "pet", "convert", "--backend", "cpu", "--scanner"])
        .arg(acq.join("scanner.toml"))
        .arg("--input")
        .arg(acq.join("frames.bin"))
        .args(["--output", s(&singles)])
        .assert()
        .success();
    detkit()
        .args([
            "-q",
            "pet",
            "sort",
            "--backend",
            "cpu",
            "--input",
            s(&singles),
            "--output",
            s(&sorted),
        ])
        .assert()
        .success();
    let toml = std::fs::read_to_string(acq.join("scanner.toml")).unwrap();
    let window = toml
        .lines()
        .find_map(|l| {
            l.strip_prefix("time_window")
                .map(|v| v.trim_start_matches([' ', '=']).trim().to_string())
        })
        .expect("time_window in scanner.toml");
    detkit()
        .args([
            "-q",
            "pet",
            "coincide",
            "--backend",
            "cpu",
            "--window",
            &window,
            "--input",
            s(&sorted),
            "--output",
            s(&pairs),
        ])
        .assert()
        .success();
    detkit()
        .args([
            "-q",
            "pet",
            "run",
            "--backend",
            "cpu",
            "--chunk",
            "100",
            "--scanner",
        ])
        .arg(acq.join("scanner.toml"))
        .arg("--input")
        .arg(acq.join("frames.bin"))
        .args(["--output", s(&streamed)])
        .assert()
        .success();
    assert_eq!(
        std::fs::read(&pairs).unwrap(),
        std::fs::read(&streamed).unwrap()
    );
}

#[test]
fn demo_counts_its_rows_and_explains_its_columns() {
    let out = detkit()
        .args(["demo", "--backend", "cpu", "--size", "4096"])
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let steps: Vec<&str> = stderr.lines().filter(|l| l.starts_with('[')).collect();
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" cpu ") && !l.starts_with("backend"))
        .collect();
    assert_eq!(steps.len(), rows.len(), "{stderr}\n{stdout}");
    assert!(steps
        .last()
        .unwrap()
        .contains(&format!("{n}/{n}", n = rows.len())));
    assert!(stdout.contains("legend:"));
    for r in rows {
        assert!(r.contains(" ok "), "{r}");
        assert!(!r.contains(" 0.000 "), "a row without a throughput: {r}");
        assert!(r.contains("/s"), "{r}");
    }
}

#[test]
fn several_inputs_give_the_outputs_of_single_runs_and_devices_are_checked() {
    let d = Dir::new();
    let a = d.write(
        "a.csv",
        "module,x,y,adc\n5,1,1,5000\n5,1,2,5000\n5,9,9,5000\n",
    );
    let b = d.write("b.csv", "module,x,y,adc\n7,3,3,9000\n7,4,4,9000\n");
    for (inp, out) in [(&a, "a1.csv"), (&b, "b1.csv")] {
        detkit()
            .args([
                "-q",
                "cluster",
                "--backend",
                "cpu",
                "--input",
                s(inp),
                "--output",
            ])
            .arg(d.path(out))
            .assert()
            .success();
    }
    detkit()
        .args(["-q", "cluster", "--backend", "cpu"])
        .args(["--input", s(&a), "--output", s(&d.path("a2.csv"))])
        .args(["--input", s(&b), "--output", s(&d.path("b2.csv"))])
        .assert()
        .success();
    for (one, many) in [("a1.csv", "a2.csv"), ("b1.csv", "b2.csv")] {
        let x = std::fs::read(d.path(one)).unwrap();
        assert!(!x.is_empty());
        assert_eq!(x, std::fs::read(d.path(many)).unwrap(), "{many}");
    }
    // One output too few: refused before any work, nothing written.
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&a),
            "--input",
            s(&b),
        ])
        .args(["--output", s(&d.path("c.csv"))])
        .assert()
        .code(2)
        .stderr(contains("2 --input but 1 --output"));
    assert!(!d.path("c.csv").exists());
    // --devices wants CUDA, and a list of ordinals.
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--devices",
            "all",
            "--input",
            s(&a),
        ])
        .args(["--output", s(&d.path("c.csv"))])
        .assert()
        .code(2)
        .stderr(contains("--devices needs the CUDA backend"));
    detkit()
        .args(["cluster", "--devices", "0,x", "--input", s(&a)])
        .args(["--output", s(&d.path("c.csv"))])
        .assert()
        .failure()
        .stderr(contains("`x` is not a device ordinal"));
    assert!(!d.path("c.csv").exists());
}

#[test]
fn seed_takes_several_inputs_like_single_runs() {
    let d = Dir::new();
    for k in ["1", "2"] {
        detkit()
            .args([
                "-q", "seed", "generate", "--mu", "5", "--seed", k, "--output",
            ])
            .arg(d.path(&format!("sp{k}.csv")))
            .assert()
            .success();
        detkit()
            .args(["-q", "seed", "--backend", "cpu", "--input"])
            .arg(d.path(&format!("sp{k}.csv")))
            .arg("--output")
            .arg(d.path(&format!("one{k}.csv")))
            .assert()
            .success();
    }
    detkit()
        .args(["-q", "seed", "--backend", "cpu"])
        .args([
            "--input",
            s(&d.path("sp1.csv")),
            "--output",
            s(&d.path("many1.csv")),
        ])
        .args([
            "--input",
            s(&d.path("sp2.csv")),
            "--output",
            s(&d.path("many2.csv")),
        ])
        .assert()
        .success();
    for k in ["1", "2"] {
        let one = std::fs::read_to_string(d.path(&format!("one{k}.csv"))).unwrap();
        assert!(one.lines().count() > 1, "event {k} has seeds");
        assert_eq!(
            one,
            std::fs::read_to_string(d.path(&format!("many{k}.csv"))).unwrap()
        );
    }
    detkit()
        .args(["seed", "--backend", "cpu", "--params", s(&d.path("p.csv"))])
        .args([
            "--input",
            s(&d.path("sp1.csv")),
            "--output",
            s(&d.path("x1.csv")),
        ])
        .args([
            "--input",
            s(&d.path("sp2.csv")),
            "--output",
            s(&d.path("x2.csv")),
        ])
        .assert()
        .code(2)
        .stderr(contains("--params needs a single --input"));
    assert!(!d.path("x1.csv").exists() && !d.path("p.csv").exists());
}

/// Issue 14: `detkit seed --config` with an unknown key or a `[section]` (which traccc-style
/// configs have, and which were once ignored silently) fails, names the key and the file, and
/// writes no output; a known key is accepted.
#[test]
fn seed_config_unknown_key_or_section_is_an_error_naming_it() {
    let d = Dir::new();
    let sp = d.write("sp.csv", "x,y,z\n34,0,10\n70,0,20.588\n116,0,34.118\n");
    let out = d.path("seeds.csv");
    let seed_with = |cfg: &Path| {
        detkit()
            .args([
                "seed",
                "--backend",
                "cpu",
                "--input",
                s(&sp),
                "--output",
                s(&out),
                "--config",
                s(cfg),
            ])
            .assert()
    };
    for (name, text, key) in [
        ("unknown.toml", "min_pt = 0.9\nmin_ptt = 1.0\n", "min_ptt"),
        ("section.toml", "[seedfinder]\nmin_pt = 0.9\n", "seedfinder"),
    ] {
        let cfg = d.write(name, text);
        seed_with(&cfg)
            .code(1)
            .stderr(contains(format!("`{key}`")).and(contains(name)));
        assert!(!out.exists(), "{name}: an output was written");
    }
    seed_with(&d.write("good.toml", "min_pt = 0.9\n")).success();
    assert!(out.exists());
}
