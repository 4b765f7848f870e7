//! Issue 31, "Nothing lost, nothing silently wrong": one test per finding, as a user and a
//! hostile tester run the command (CPU backend only). Allocation cases run under a memory
//! limit (`ulimit -v`), so a size that would abort in the allocator fails the test.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

mod common;
use common::{bin, detkit, names_in, s, Dir};

/// `detkit ARGS` under `sh -c` with `prelude` first (`umask 027`, `ulimit -v N`).
fn detkit_sh(prelude: &str, args: &[&str]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("{prelude} && exec \"$0\" \"$@\""))
        .arg(bin())
        .args(args);
    c.env_remove("RUST_BACKTRACE");
    c
}

/// A small PET acquisition: DIR/scanner.toml, tables, DIR/frames.bin.
fn pet_dir(d: &Dir) -> PathBuf {
    common::pet_dir(d, 3000)
}

/// Singles CSV made by `pet convert` from a small acquisition.
fn singles_csv(d: &Dir) -> PathBuf {
    let acq = pet_dir(d);
    let out = d.path("singles.csv");
    detkit()
        .args(["-q", "pet", "convert", "--backend", "cpu", "--scanner"])
        .arg(acq.join("scanner.toml"))
        .arg("--input")
        .arg(acq.join("frames.bin"))
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    out
}

fn mkfifo(p: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo");
}

/// Waits (at most 60 s) until a file whose name satisfies `pred` appears in `dir`.
fn wait_for(dir: &Path, pred: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        if let Some(n) = names_in(dir).into_iter().find(|n| pred(n)) {
            return n;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "nothing appeared in {dir:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(pid: u32, sig: &str) {
    let st = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(st.success());
}

// ---------------------------------------------------------------------------------------
// Data lost (findings 1-5)
// ---------------------------------------------------------------------------------------

/// Finding 1: the tables a scanner description names are inputs of `pet convert` and
/// `pet run`; an output with their name is refused and the table is untouched.
#[test]
fn f01_scanner_tables_are_inputs_of_convert_and_run() {
    let d = Dir::new();
    let acq = pet_dir(&d);
    for table in ["scanner.energy.bin", "scanner.position.bin"] {
        let t = acq.join(table);
        let before = std::fs::read(&t).unwrap();
        for cmd in ["convert", "run"] {
            detkit()
                .args(["pet", cmd, "--backend", "cpu", "--scanner"])
                .arg(acq.join("scanner.toml"))
                .arg("--input")
                .arg(acq.join("frames.bin"))
                .arg("--output")
                .arg(&t)
                .assert()
                .code(1)
                .stderr(contains("refusing to overwrite an input").and(contains(table)));
            assert_eq!(
                std::fs::read(&t).unwrap(),
                before,
                "{table} changed by {cmd}"
            );
        }
    }
}

/// Finding 2: outputs that are not regular files are written directly (a FIFO, a character
/// device, `-` for standard output), and a symbolic link writes its target.
#[test]
fn f02_non_regular_outputs_are_written_not_replaced() {
    let d = Dir::new();
    let input = singles_csv(&d);
    let want_path = d.path("want.csv");
    detkit()
        .args(["-q", "pet", "sort", "--backend", "cpu", "--input"])
        .arg(&input)
        .arg("--output")
        .arg(&want_path)
        .assert()
        .success();
    let want = std::fs::read(&want_path).unwrap();
    let sort_to = |out: &Path| {
        detkit()
            .args(["-q", "pet", "sort", "--backend", "cpu", "--input"])
            .arg(&input)
            .arg("--output")
            .arg(out)
            .assert()
    };

    // A FIFO: a reader gets the output, the FIFO stays a FIFO.
    let fifo = d.path("out.fifo");
    mkfifo(&fifo);
    let reader = {
        let f = fifo.clone();
        std::thread::spawn(move || std::fs::read(f).unwrap())
    };
    // (A timeout: a build that opens the FIFO to compare it with the inputs blocks.)
    detkit()
        .args(["-q", "pet", "sort", "--backend", "cpu", "--input"])
        .arg(&input)
        .arg("--output")
        .arg(&fifo)
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    // (Checked before joining: a FIFO replaced by a file would leave the reader waiting.)
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(reader.join().unwrap(), want);

    // `-`: standard output; no file named `-`.
    let out = detkit()
        .args(["-q", "pet", "sort", "--backend", "cpu", "--input"])
        .arg(&input)
        .args(["--output", "-"])
        .current_dir(d.0.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, want);
    assert!(!d.path("-").exists());

    // A symbolic link to a regular file in another directory: the target gets the output,
    // the link stays a link, no temporary is left in either directory.
    std::fs::create_dir(d.path("real")).unwrap();
    let target = d.write("real/target.csv", "old");
    let link = d.path("link.csv");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    sort_to(&link).success();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), want);
    assert_eq!(names_in(&d.path("real")), ["target.csv"]);

    // A character device (a null device made here when we may): stays a device.
    let null = d.path("null");
    let made = std::process::Command::new("mknod")
        .arg(&null)
        .args(["c", "1", "3"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if made {
        sort_to(&null).success();
        assert!(std::fs::metadata(&null)
            .unwrap()
            .file_type()
            .is_char_device());
    }
    // /dev/null itself, as anyone pipes output away (written, never replaced).
    sort_to(Path::new("/dev/null")).success();
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
}

/// Finding 3: `pet generate --dir EXISTING` replaces all of its files or none: a name that
/// cannot be replaced leaves the old files as they were and adds nothing.
#[test]
fn f03_pet_generate_into_an_existing_directory_is_all_or_nothing() {
    let d = Dir::new();
    let acq = d.path("acq");
    std::fs::create_dir(&acq).unwrap();
    for name in ["scanner.toml", "scanner.position.bin", "scanner.energy.bin"] {
        std::fs::write(acq.join(name), "old").unwrap();
    }
    // frames.bin is a non-empty directory: it cannot be replaced by a file.
    std::fs::create_dir(acq.join("frames.bin")).unwrap();
    std::fs::write(acq.join("frames.bin").join("keep"), "keep").unwrap();
    detkit()
        .args([
            "-q",
            "pet",
            "generate",
            "--scanner",
            "tiny",
            "--singles",
            "500",
        ])
        .arg("--dir")
        .arg(&acq)
        .assert()
        .code(1)
        .stderr(contains("frames.bin"));
    for name in ["scanner.toml", "scanner.position.bin", "scanner.energy.bin"] {
        assert!(
            std::fs::read(acq.join(name)).unwrap() == b"old",
            "{name} was replaced"
        );
    }
    assert_eq!(
        names_in(&acq),
        [
            "frames.bin",
            "scanner.energy.bin",
            "scanner.position.bin",
            "scanner.toml"
        ]
    );
    assert_eq!(d.files(), ["acq"]);
    // And a directory that can take them gets all four.
    std::fs::remove_dir_all(acq.join("frames.bin")).unwrap();
    detkit()
        .args([
            "-q",
            "pet",
            "generate",
            "--scanner",
            "tiny",
            "--singles",
            "500",
        ])
        .arg("--dir")
        .arg(&acq)
        .assert()
        .success();
    assert_ne!(std::fs::read(acq.join("scanner.toml")).unwrap(), b"old");
    assert!(acq.join("frames.bin").is_file());
}

/// Finding 4: a new output gets `0666 & !umask`, a replaced one keeps its mode.
#[test]
fn f04_new_outputs_follow_the_umask_and_replaced_ones_keep_their_mode() {
    let d = Dir::new();
    let input = d.write("d.csv", "module,x,y,adc\n0,1,1,5000\n");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let new = d.path("new.csv");
    detkit_sh(
        "umask 027",
        &[
            "-q",
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&input),
            "--output",
            s(&new),
        ],
    )
    .assert()
    .success();
    assert_eq!(mode(&new), 0o640);
    let old = d.write("old.csv", "old");
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
    detkit_sh(
        "umask 077",
        &[
            "-q",
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&input),
            "--output",
            s(&old),
        ],
    )
    .assert()
    .success();
    assert_eq!(mode(&old), 0o644);
    assert!(std::fs::read_to_string(&old)
        .unwrap()
        .starts_with("module,x,y,adc,cluster"));
    // A generated directory and its files, as mkdir and a plain write make them.
    let acq = d.path("acq");
    detkit_sh(
        "umask 027",
        &[
            "-q",
            "pet",
            "generate",
            "--scanner",
            "tiny",
            "--singles",
            "100",
            "--dir",
            s(&acq),
        ],
    )
    .assert()
    .success();
    assert_eq!(mode(&acq), 0o750);
    assert_eq!(mode(&acq.join("frames.bin")), 0o640);
    assert_eq!(mode(&acq.join("scanner.toml")), 0o640);
}

/// Finding 5: SIGTERM and SIGINT remove the temporaries (an output's `.NAME.*.partial`, an
/// interrupted `pet generate`'s directory) and exit with 143 / 130.
#[test]
fn f05_signals_remove_temporaries() {
    let d = Dir::new();
    let acq = pet_dir(&d);
    // `pet run` blocked on a FIFO nobody writes: its output's temporary exists.
    let fifo = d.path("frames.fifo");
    mkfifo(&fifo);
    let mut child = std::process::Command::new(bin())
        .args(["-q", "pet", "run", "--backend", "cpu", "--scanner"])
        .arg(acq.join("scanner.toml"))
        .arg("--input")
        .arg(&fifo)
        .arg("--output")
        .arg(d.path("pairs.csv"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(d.0.path(), |n| n.ends_with(".partial"));
    kill(child.id(), "TERM");
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(143), "{st:?}");
    assert!(
        !d.files().iter().any(|n| n.contains("pairs.csv")),
        "{:?}",
        d.files()
    );

    // An interrupted `pet generate`: its temporary directory goes too.
    let gen = d.path("gen");
    std::fs::create_dir(&gen).unwrap();
    let mut child = std::process::Command::new(bin())
        .args(["-q", "pet", "generate", "--singles", "30000000", "--dir"])
        .arg(gen.join("acq"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&gen, |n| n.starts_with(".detkit-pet-generate."));
    kill(child.id(), "INT");
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130), "{st:?}");
    assert!(names_in(&gen).is_empty(), "{:?}", names_in(&gen));
}

// ---------------------------------------------------------------------------------------
// Crashes instead of errors (findings 6-8; 8 is Python: crates/python/tests)
// ---------------------------------------------------------------------------------------

/// Finding 6: a `DKDIGI01` header claiming 2^32 - 1 digis in a 14-byte file is refused from
/// the file's length, before allocating (under a 1 GB address-space limit).
#[test]
fn f06_a_digi_count_beyond_the_file_is_refused_before_allocating() {
    let d = Dir::new();
    let mut b = b"DKDIGI01".to_vec();
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    b.extend_from_slice(&[0, 0]);
    let input = d.write("huge.bin", &b);
    let out = d.path("out.csv");
    detkit_sh(
        "ulimit -v 1000000",
        &[
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&input),
            "--output",
            s(&out),
        ],
    )
    .assert()
    .code(1)
    .stderr(
        contains("huge.bin")
            .and(contains("34359738372 bytes"))
            .and(contains("has 14")),
    );
    assert!(!out.exists());
}

/// Finding 7: sizes a user asks for are checked against a memory estimate first: the error
/// says how much is needed (under an address-space limit, so an allocation would abort).
#[test]
fn f07_requested_sizes_beyond_memory_are_refused_with_the_need() {
    let d = Dir::new();
    detkit_sh(
        "ulimit -v 4000000",
        &[
            "pet",
            "generate",
            "--singles",
            "4294967295",
            "--dir",
            s(&d.path("acq")),
        ],
    )
    .assert()
    .code(1)
    .stderr(contains("not enough memory for --singles 4294967295").and(contains("GB available")));
    assert!(d.files().is_empty(), "{:?}", d.files());
    // `pet run --chunk`: the chunk buffers (16 GB at the largest chunk).
    let acq = pet_dir(&d);
    detkit_sh(
        "ulimit -v 4000000",
        &[
            "pet",
            "run",
            "--backend",
            "cpu",
            "--chunk",
            "1073741824",
            "--scanner",
            s(&acq.join("scanner.toml")),
            "--input",
            s(&acq.join("frames.bin")),
            "--output",
            s(&d.path("p.csv")),
        ],
    )
    .assert()
    .code(1)
    .stderr(contains("not enough memory for --chunk 1073741824"));
    assert!(!d.path("p.csv").exists());
    detkit_sh(
        "ulimit -v 4000000",
        &["demo", "--backend", "cpu", "--size", "268435456"],
    )
    .assert()
    .code(1)
    .stderr(contains(
        "not enough memory for demo --size 268435456: it needs about 27.4 GB",
    ));
}

// ---------------------------------------------------------------------------------------
// Silently wrong (findings 9-11; 12 is Python)
// ---------------------------------------------------------------------------------------

/// Finding 9: `pet run` reads a pipe (standard input, `-` or `/dev/stdin`) and a FIFO to the
/// end of the stream: the same pairs as from the file.
#[test]
fn f09_pet_run_reads_pipes_and_fifos_to_their_end() {
    let d = Dir::new();
    let acq = pet_dir(&d);
    let frames = std::fs::read(acq.join("frames.bin")).unwrap();
    let run = |input: &str, out: &Path| {
        let mut c = detkit();
        c.args([
            "-q",
            "pet",
            "run",
            "--backend",
            "cpu",
            "--chunk",
            "1000",
            "--scanner",
        ])
        .arg(acq.join("scanner.toml"))
        .args(["--input", input, "--output"])
        .arg(out);
        c
    };
    let want = d.path("want.csv");
    run(s(&acq.join("frames.bin")), &want).assert().success();
    let want = std::fs::read_to_string(&want).unwrap();
    assert!(want.lines().count() > 100, "{want}");
    for input in ["-", "/dev/stdin"] {
        let out = d.path("pipe.csv");
        run(input, &out)
            .write_stdin(frames.clone())
            .assert()
            .success();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), want, "{input}");
    }
    let fifo = d.path("frames.fifo");
    mkfifo(&fifo);
    let writer = {
        let (f, b) = (fifo.clone(), frames.clone());
        std::thread::spawn(move || std::fs::write(f, b).unwrap())
    };
    // (An existing output: comparing it with the FIFO input must not open the FIFO.)
    let out = d.write("fifo.csv", "old");
    run(s(&fifo), &out)
        .timeout(Duration::from_secs(120))
        .assert()
        .success();
    writer.join().unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), want);
}

/// `pet run` writes its pairs behind the computation (a writer thread): to standard output
/// and a FIFO, from a file or a pipe, with the same bytes as a regular output; a `.bin`
/// output gets its header's count.
#[test]
fn f09_pet_run_writes_behind_to_non_regular_outputs() {
    let d = Dir::new();
    let acq = pet_dir(&d);
    let frames = std::fs::read(acq.join("frames.bin")).unwrap();
    let run = |input: &str, out: &str| {
        let mut c = detkit();
        c.args([
            "-q",
            "pet",
            "run",
            "--backend",
            "cpu",
            "--chunk",
            "1000",
            "--scanner",
        ])
        .arg(acq.join("scanner.toml"))
        .args(["--input", input, "--output", out])
        .current_dir(d.0.path());
        c
    };
    let frames_path = acq.join("frames.bin");
    let want = d.path("want.csv");
    run(s(&frames_path), s(&want)).assert().success();
    let want = std::fs::read(&want).unwrap();
    assert!(want.len() > 1000);
    // Standard output, from a file and from standard input.
    let out = run(s(&frames_path), "-").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, want);
    let out = run("-", "-").write_stdin(frames.clone()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, want);
    assert!(!d.path("-").exists());
    // A FIFO output stays a FIFO; its reader gets every pair.
    let fifo = d.path("pairs.fifo");
    mkfifo(&fifo);
    let reader = {
        let f = fifo.clone();
        std::thread::spawn(move || std::fs::read(f).unwrap())
    };
    run(s(&frames_path), s(&fifo))
        .timeout(Duration::from_secs(120))
        .assert()
        .success();
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(reader.join().unwrap(), want);
    // Binary pairs through the writer thread: the header's count patched in at the end.
    let bin = d.path("pairs.bin");
    run(s(&frames_path), s(&bin)).assert().success();
    let bin = std::fs::read(&bin).unwrap();
    assert_eq!(&bin[..8], b"DKPAIR01");
    let count = u64::from_le_bytes(bin[8..16].try_into().unwrap());
    assert_eq!(bin.len() as u64, 16 + 32 * count);
    assert_eq!(
        count as usize,
        want.iter().filter(|&&c| c == b'\n').count() - 1
    );
}

/// Finding 10: a `DKDIGI01` count that disagrees with the length is an error (short or with
/// trailing bytes); singles and pairs `.bin` files carry a magic, so a CSV, a pairs file or
/// a headerless file does not pass as singles, and a binary round trip is exact.
#[test]
fn f10_binary_counts_and_magics_are_checked() {
    let d = Dir::new();
    let digis = |count: u32, n: usize| {
        let mut b = b"DKDIGI01".to_vec();
        b.extend_from_slice(&count.to_le_bytes());
        b.extend(std::iter::repeat_n(1u8, 8 * n));
        b
    };
    let out = d.path("c.csv");
    for (name, count, n, want) in [
        (
            "two.bin",
            2,
            4,
            "take 12 + 8 x 2 = 28 bytes; the file has 44 (trailing bytes)",
        ),
        (
            "six.bin",
            6,
            4,
            "take 12 + 8 x 6 = 60 bytes; the file has 44 (truncated)",
        ),
    ] {
        let input = d.write(name, digis(count, n));
        detkit()
            .args([
                "cluster",
                "--backend",
                "cpu",
                "--input",
                s(&input),
                "--output",
                s(&out),
            ])
            .assert()
            .code(1)
            .stderr(contains(name).and(contains(want)));
    }
    let csv = singles_csv(&d);
    let sbin = d.path("singles.bin");
    detkit()
        .args([
            "-q",
            "pet",
            "sort",
            "--backend",
            "cpu",
            "--input",
            s(&csv),
            "--output",
            s(&sbin),
        ])
        .assert()
        .success();
    let bytes = std::fs::read(&sbin).unwrap();
    assert_eq!(&bytes[..8], b"DKSNGL01");
    let n = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    assert_eq!(bytes.len() as u64, 16 + 16 * n);
    let pbin = d.path("pairs.bin");
    detkit()
        .args([
            "-q",
            "pet",
            "coincide",
            "--backend",
            "cpu",
            "--window",
            "10000",
        ])
        .args(["--input", s(&sbin), "--output", s(&pbin)])
        .assert()
        .success();
    let pb = std::fs::read(&pbin).unwrap();
    assert_eq!(&pb[..8], b"DKPAIR01");
    let np = u64::from_le_bytes(pb[8..16].try_into().unwrap());
    assert!(np > 0);
    assert_eq!(pb.len() as u64, 16 + 32 * np);
    // The sorted binary singles equal the CSV path's.
    let scsv = d.path("sorted.csv");
    detkit()
        .args([
            "-q",
            "pet",
            "sort",
            "--backend",
            "cpu",
            "--input",
            s(&sbin),
            "--output",
            s(&scsv),
        ])
        .assert()
        .success();
    let out = d.path("o.bin");
    let refuse = |input: &Path, what: &str| {
        detkit()
            .args([
                "pet",
                "sort",
                "--backend",
                "cpu",
                "--input",
                s(input),
                "--output",
                s(&out),
            ])
            .assert()
            .code(1)
            .stderr(contains(what));
        assert!(!out.exists());
    };
    // A pairs file named as singles.
    let p_as_s = d.write("p_as_s.bin", &pb);
    refuse(&p_as_s, "this is a binary pairs file (magic DKPAIR01)");
    // A CSV with a .bin name (a whole number of 16-byte records long).
    let mut text = b"crystal,energy,time\n".to_vec();
    while !text.len().is_multiple_of(16) {
        text.push(b'\n');
    }
    let c_as_s = d.write("c_as_s.bin", &text);
    refuse(&c_as_s, "no binary singles header");
    // A headerless singles file of detkit 0.1: refused, with how to convert it.
    let old = d.write("old.bin", &bytes[16..]);
    refuse(
        &old,
        "detkit.write_singles('NEW.bin', np.fromfile('OLD.bin'",
    );
    // A count that disagrees with the length.
    let mut short = bytes.clone();
    short.truncate(bytes.len() - 16);
    let short = d.write("short.bin", &short);
    refuse(
        &short,
        &format!(
            "the header counts {n} records, which take 16 + 16 x {n} = {}",
            16 + 16 * n
        ),
    );
}

/// Finding 11: a rate that makes the acquisition's times saturate is refused, naming the
/// span.
#[test]
fn f11_a_rate_that_saturates_the_times_is_refused() {
    let d = Dir::new();
    for rate in ["1e-300", "1"] {
        detkit()
            .args([
                "pet",
                "generate",
                "--singles",
                "100000",
                "--rate",
                rate,
                "--dir",
            ])
            .arg(d.path("acq"))
            .assert()
            .code(2)
            .stderr(contains("ticks").and(contains("raise --rate")));
    }
    assert!(d.files().is_empty());
}

// ---------------------------------------------------------------------------------------
// Messages a user can act on (findings 13-15)
// ---------------------------------------------------------------------------------------

/// Finding 13: a wrong magic names the magic expected (not "not valid UTF-8"); a truncated
/// binary gives the expected and actual sizes (not "failed to fill whole buffer").
#[test]
fn f13_binary_errors_name_the_magic_and_the_sizes() {
    let d = Dir::new();
    let out = d.path("c.csv");
    let bad = d.write("in.bin", b"DKDIGI02\x02\0\0\0\xff\xfe\x01\x02");
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&bad),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1)
        .stderr(contains("expected \"DKDIGI01\"").and(contains("UTF-8").not()));
    let binary = d.write("noise.bin", [0xffu8, 0xfe, 0, 1, 2, 3, 0x80, 0x81]);
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&binary),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1)
        .stderr(contains("DKDIGI01").and(contains("UTF-8").not()));
    let cut = d.write("cut.bin", b"DKDIGI01\x03\0\0\0\x01\x02");
    detkit()
        .args([
            "cluster",
            "--backend",
            "cpu",
            "--input",
            s(&cut),
            "--output",
            s(&out),
        ])
        .assert()
        .code(1)
        .stderr(contains("36 bytes; the file has 14").and(contains("fill whole buffer").not()));
    let frames = d.write("frames.bin", [0u8; 40]);
    let acq = pet_dir(&d);
    detkit()
        .args(["pet", "convert", "--backend", "cpu", "--scanner"])
        .arg(acq.join("scanner.toml"))
        .args(["--input", s(&frames), "--output", s(&out)])
        .assert()
        .code(1)
        .stderr(contains("40 bytes").and(contains("expected 32 or 48 bytes")));
    detkit()
        .args(["pet", "run", "--backend", "cpu", "--scanner"])
        .arg(acq.join("scanner.toml"))
        .args(["--input", s(&frames), "--output", s(&out)])
        .assert()
        .code(1)
        .stderr(contains("40 bytes").and(contains("expected 32 or 48 bytes")));
    detkit()
        .args(["pet", "run", "--backend", "cpu", "--scanner"])
        .arg(acq.join("scanner.toml"))
        .args(["--input", "-", "--output", s(&out)])
        .write_stdin(vec![0u8; 40])
        .assert()
        .code(1)
        .stderr(contains("its last 8 bytes are not a whole 16-byte frame"));
}

/// Finding 14: output names up to the 255-byte limit work (the temporary's name is cut).
#[test]
fn f14_long_output_names_work() {
    let d = Dir::new();
    let input = d.write("d.csv", "module,x,y,adc\n0,1,1,5000\n");
    for len in [244, 251, 255] {
        let name = format!("{}.csv", "a".repeat(len - 4));
        let out = d.path(&name);
        detkit()
            .args([
                "-q",
                "cluster",
                "--backend",
                "cpu",
                "--input",
                s(&input),
                "--output",
                s(&out),
            ])
            .assert()
            .success();
        assert!(out.is_file(), "{len}");
        std::fs::remove_file(&out).unwrap();
    }
    assert_eq!(d.files(), ["d.csv"]);
}

/// Finding 15: messages say what to change: the window + delay overflow; `--delay 0` and
/// `--delay -5` are both usage errors; the seeding setting behind NaN bins is named; a
/// directory as input is said once; table errors name the table; the pending-capacity error
/// names `--pending`.
#[test]
fn f15_messages_a_user_can_act_on() {
    let d = Dir::new();
    let singles = singles_csv(&d);
    let out = d.path("o.csv");
    let coincide = |extra: &[&str]| {
        let mut c = detkit();
        c.args([
            "pet",
            "coincide",
            "--backend",
            "cpu",
            "--input",
            s(&singles),
            "--output",
        ])
        .arg(&out)
        .args(extra);
        c
    };
    let a = coincide(&["--window", "1e308", "--delay", "1e308"])
        .assert()
        .code(2);
    let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
    assert!(err.contains("overflows"), "{err}");
    assert!(!err.contains("0000000000"), "a 309-digit number: {err}");
    for delay in ["0", "-5"] {
        coincide(&["--window", "10", "--delay", delay])
            .assert()
            .code(2)
            .stderr(contains("--delay"));
    }
    // Seeding: impact_max above the inner radius gives a NaN phi axis: the key is named.
    let sp = d.path("sp.csv");
    detkit()
        .args(["-q", "seed", "generate", "--mu", "5", "--output", s(&sp)])
        .assert()
        .success();
    let cfg = d.write("s.toml", "impact_max = 1000\n");
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
        .args(["--config", s(&cfg)])
        .assert()
        .code(1)
        .stderr(contains("impact_max").and(contains("NaN").not()));
    // A directory as input: said once.
    for cmd in [&["pet", "sort"][..], &["seed"][..], &["cluster"][..]] {
        let a = detkit()
            .args(cmd)
            .args([
                "--backend",
                "cpu",
                "--input",
                s(d.0.path()),
                "--output",
                s(&out),
            ])
            .assert()
            .code(1);
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        assert_eq!(err.matches("Is a directory").count(), 1, "{cmd:?}: {err}");
    }
    // Table errors name the table file.
    let acq = pet_dir(&d);
    let energy = acq.join("scanner.energy.bin");
    let e = std::fs::read(&energy).unwrap();
    std::fs::write(&energy, &e[..e.len() - 4]).unwrap();
    detkit()
        .args(["pet", "convert", "--backend", "cpu", "--scanner"])
        .arg(acq.join("scanner.toml"))
        .arg("--input")
        .arg(acq.join("frames.bin"))
        .args(["--output", s(&out)])
        .assert()
        .code(1)
        .stderr(contains("scanner.energy.bin").and(contains(format!("{} bytes", e.len() - 4))));
    std::fs::write(&energy, &e).unwrap();
    // The pending capacity names its flag.
    detkit()
        .args([
            "pet",
            "run",
            "--backend",
            "cpu",
            "--chunk",
            "10",
            "--pending",
            "1",
            "--scanner",
        ])
        .arg(acq.join("scanner.toml"))
        .arg("--input")
        .arg(acq.join("frames.bin"))
        .args(["--output", s(&out)])
        .assert()
        .code(1)
        .stderr(contains("raise --pending (now 1)"));
    assert!(!out.exists());
}

// ---------------------------------------------------------------------------------------
// Documentation findings that are behaviour
// ---------------------------------------------------------------------------------------

/// `pet coincide --help`'s usage line names the required `--window`.
#[test]
fn doc_coincide_usage_names_the_required_window() {
    detkit()
        .args(["pet", "coincide", "--help"])
        .assert()
        .success()
        .stdout(contains("Usage: detkit pet coincide").and(contains("--window <TICKS>")));
    detkit()
        .args(["pet", "coincide", "--input", "a.csv", "--output", "b.csv"])
        .assert()
        .code(2)
        .stderr(contains("--window <TICKS>"));
}

/// TOML errors (scanner description, seeding configuration) are one line.
#[test]
fn doc_toml_errors_are_one_line() {
    let d = Dir::new();
    let sp = d.write("sp.csv", "x,y,z\n1,2,3\n");
    let cfg = d.write("s.toml", "min_pt = \n");
    let a = detkit()
        .args([
            "seed",
            "--backend",
            "cpu",
            "--input",
            s(&sp),
            "--output",
            s(&d.path("o.csv")),
        ])
        .args(["--config", s(&cfg)])
        .assert()
        .code(1);
    let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("s.toml") && err.contains("line 1, column 10"),
        "{err}"
    );
    let acq = pet_dir(&d);
    std::fs::write(acq.join("scanner.toml"), "channels = [\n").unwrap();
    let a = detkit()
        .args(["pet", "convert", "--backend", "cpu", "--scanner"])
        .arg(acq.join("scanner.toml"))
        .arg("--input")
        .arg(acq.join("frames.bin"))
        .args(["--output", s(&d.path("o.csv"))])
        .assert()
        .code(1);
    let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("scanner.toml: line 1, column 13: unclosed array"),
        "{err}"
    );
}

/// `demo -q` prints nothing (no table) when every row agrees with its oracle.
#[test]
fn doc_demo_quiet_prints_nothing() {
    detkit()
        .args(["-q", "demo", "--backend", "cpu", "--size", "1000"])
        .assert()
        .success()
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::is_empty());
}
