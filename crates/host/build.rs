//! Embeds the committed kernel images (`ptx/`: the PTX and cubins `cargo xtask build-ptx`
//! writes) compressed: each is zlib-compressed into `OUT_DIR`, and `OUT_DIR/images.rs`, the
//! table `src/ptx.rs` includes, lists them with their architecture. Compressed, the images
//! add about 3 MiB to a binary instead of 15; the one loaded is inflated at start-up.
//!
//! Needs nothing of CUDA: the images are plain files of the repository.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let dir = manifest.join("ptx");
    println!("cargo::rerun-if-changed=ptx");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ptx") || n.ends_with(".cubin"))
        .collect();
    names.sort();
    let mut table = String::from("&[\n");
    for name in &names {
        let path = dir.join(name);
        println!("cargo::rerun-if-changed=ptx/{name}");
        let data = fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let (kind, arch) = if name.ends_with(".ptx") {
            ("Ptx", ptx_target(&path, &data))
        } else {
            ("Cubin", cubin_arch(name))
        };
        let (major, minor) = parse_sm(&arch)
            .unwrap_or_else(|| panic!("{}: architecture `{arch}` is not sm_XY", path.display()));
        // Level 6: 9 of 10 of level 9's ratio in a third of its time (the build script
        // runs unoptimised).
        let z = miniz_oxide::deflate::compress_to_vec_zlib(&data, 6);
        let zname = format!("{name}.z");
        fs::write(out.join(&zname), &z).expect("writing to OUT_DIR");
        let _ = writeln!(
            table,
            "    Image {{ file: {name:?}, kind: ImageKind::{kind}, arch: Arch {{ major: {major}, \
             minor: {minor} }}, len: {}, zlib: include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{zname}\")) }},",
            data.len()
        );
    }
    table.push(']');
    fs::write(out.join("images.rs"), table).expect("writing to OUT_DIR");
}

/// The `.target sm_XY` of a PTX module.
fn ptx_target(path: &Path, data: &[u8]) -> String {
    let text = std::str::from_utf8(data)
        .unwrap_or_else(|_| panic!("{} is not UTF-8 text", path.display()));
    text.lines()
        .find_map(|l| l.trim().strip_prefix(".target "))
        .map(|t| t.split([',', ' ']).next().unwrap_or("").to_string())
        .unwrap_or_else(|| panic!("{} has no `.target` line", path.display()))
}

/// `detkit-sm_90.cubin` -> `sm_90`.
fn cubin_arch(name: &str) -> String {
    name.trim_end_matches(".cubin")
        .rsplit('-')
        .next()
        .unwrap_or("")
        .to_string()
}

/// `sm_86` -> (8, 6); `sm_120` -> (12, 0).
fn parse_sm(arch: &str) -> Option<(u32, u32)> {
    let digits = arch.strip_prefix("sm_")?;
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (major, minor) = digits.split_at(digits.len() - 1);
    Some((major.parse().ok()?, minor.parse().ok()?))
}
