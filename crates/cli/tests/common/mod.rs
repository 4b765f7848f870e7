//! Helpers shared by the CLI integration tests (each test file is its own crate and uses a
//! part of them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// The binary under test (`DETKIT_TEST_BIN` runs the tests against another build, e.g. to
/// see them fail on one from before a fix).
pub fn bin() -> PathBuf {
    std::env::var_os("DETKIT_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| assert_cmd::cargo::cargo_bin("detkit"))
}

/// `detkit` with no inherited `RUST_BACKTRACE` (messages as a user sees them).
pub fn detkit() -> Command {
    let mut c = Command::new(bin());
    c.env_remove("RUST_BACKTRACE");
    c
}

/// A temporary directory, removed when dropped.
pub struct Dir(pub tempfile::TempDir);

impl Dir {
    pub fn new() -> Self {
        Dir(tempfile::tempdir().expect("a temporary directory"))
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
    pub fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
    /// File names in the directory (hidden ones too), sorted.
    pub fn files(&self) -> Vec<String> {
        names_in(self.0.path())
    }
}

/// File names in `dir` (hidden ones too), sorted.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small PET acquisition of `singles` singles: DIR/scanner.toml, tables, DIR/frames.bin.
pub fn pet_dir(d: &Dir, singles: u32) -> PathBuf {
    let dir = d.path("acq");
    detkit()
        .args(["-q", "pet", "generate", "--scanner", "tiny", "--singles"])
        .arg(singles.to_string())
        .arg("--dir")
        .arg(&dir)
        .assert()
        .success();
    dir
}
