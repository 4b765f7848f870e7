//! The kernel images built from the `detkit-gpu` sources by `cargo xtask build-ptx`, and
//! the choice of the one a device loads.
//!
//! They are committed (`crates/host/ptx/`) so that `detkit` builds on any toolchain with no
//! CUDA toolkit and no nvptx target; CI rebuilds them and fails when a committed file differs
//! from what the current `gpu` sources and the pinned `ptxas` produce (`cargo xtask build-ptx
//! --check`). The build script embeds them zlib-compressed; the chosen one is inflated when
//! a [`crate::GpuContext`] is created.
//!
//! | file | what | used on |
//! |---|---|---|
//! | `detkit-sm_XY.cubin` | machine code (SASS) for `sm_XY`, from the sm_80 build | compute capability X.Y, or X.Z with Z > Y |
//! | `detkit-sm_80.ptx` | the kernels built for `sm_80` (PTX ISA 7.8; `cp.async`, `redux.sync` paths) | CC ≥ 8.0 with no cubin: JIT-compiled at load |
//! | `detkit.ptx` | the kernels built for `sm_70` (PTX ISA 7.0) | CC 7.x, or forced: JIT-compiled at load |
//!
//! [`candidates`] gives the order in which [`crate::GpuContext::new`] tries them: the cubin
//! of the device's exact architecture, else the cubin of the same major version with the
//! highest lower minor (binary compatible: an `sm_86` cubin runs on an 8.7 or 8.9 device),
//! else the sm_80 PTX when the device is 8.0 or newer, else the sm_70 PTX. A load the driver
//! refuses (an old driver, an unknown architecture) moves on to the next. The environment
//! variable [`IMAGE_ENV`] (`DETKIT_IMAGE`) forces one: `ptx70` (`sm70`), `ptx80`, or a cubin
//! (`sm_90`, `sm90`); `auto` or empty is the default choice.

use std::fmt;

use crate::error::{invalid, Result};

/// The environment variable that forces an image (see the module doc).
pub const IMAGE_ENV: &str = "DETKIT_IMAGE";

/// The text of the sm_70 PTX (`crates/host/ptx/detkit.ptx`), for tests that inspect the
/// generated code. A `const`: it is in a binary only where it is used.
pub const PTX: &str = include_str!("../ptx/detkit.ptx");

/// The text of the sm_80 PTX, the source of every cubin.
pub const PTX_SM80: &str = include_str!("../ptx/detkit-sm_80.ptx");

/// The architecture of [`PTX`].
pub const PTX_ARCH: &str = "sm_70";

/// A compute capability / GPU architecture, `sm_{major}{minor}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Arch {
    /// The major version (9 for an H100).
    pub major: u32,
    /// The minor version.
    pub minor: u32,
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.major, self.minor)
    }
}

/// What an image holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// Machine code for one architecture: loads with no compilation.
    Cubin,
    /// PTX: the driver compiles it at load (cached in `~/.nv/ComputeCache` unless
    /// `CUDA_CACHE_DISABLE=1`).
    Ptx,
}

/// One embedded kernel image.
#[derive(Debug)]
pub struct Image {
    file: &'static str,
    kind: ImageKind,
    arch: Arch,
    len: usize,
    zlib: &'static [u8],
}

impl Image {
    /// The committed file it was built from (`detkit-sm_90.cubin`).
    pub fn file(&self) -> &'static str {
        self.file
    }

    /// Cubin or PTX.
    pub fn kind(&self) -> ImageKind {
        self.kind
    }

    /// The architecture it targets (a PTX's `.target`).
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Its size in bytes, uncompressed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never, for a built image).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its size in bytes as embedded (zlib-compressed).
    pub fn embedded_len(&self) -> usize {
        self.zlib.len()
    }

    /// A short name: `sm_90` for a cubin, `ptx80` / `ptx70` for a PTX (what [`IMAGE_ENV`]
    /// accepts).
    pub fn name(&self) -> String {
        match self.kind {
            ImageKind::Cubin => self.arch.to_string(),
            ImageKind::Ptx => format!("ptx{}{}", self.arch.major, self.arch.minor),
        }
    }

    /// The image's bytes, inflated (a PTX with a terminating NUL, as `cuModuleLoadData`
    /// reads it).
    pub fn bytes(&self) -> Result<Vec<u8>> {
        let mut v = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(self.zlib, self.len)
            .map_err(|e| {
                invalid(
                    "kernel image",
                    format!("{} does not inflate: {e:?}", self.file),
                )
            })?;
        if v.len() != self.len {
            return Err(invalid(
                "kernel image",
                format!(
                    "{} inflates to {} bytes, expected {}",
                    self.file,
                    v.len(),
                    self.len
                ),
            ));
        }
        if self.kind == ImageKind::Ptx {
            v.push(0);
        }
        Ok(v)
    }
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ImageKind::Cubin => write!(f, "cubin {}", self.arch),
            ImageKind::Ptx => write!(f, "PTX {} (JIT)", self.arch),
        }
    }
}

static IMAGES: &[Image] = include!(concat!(env!("OUT_DIR"), "/images.rs"));

/// Every embedded image: the cubins by ascending architecture, then the PTX, newest first.
pub fn images() -> impl Iterator<Item = &'static Image> {
    let mut v: Vec<&'static Image> = IMAGES.iter().collect();
    v.sort_by_key(|i| match i.kind {
        ImageKind::Cubin => (0, i.arch.major, i.arch.minor),
        ImageKind::Ptx => (1, u32::MAX - i.arch.major, u32::MAX - i.arch.minor),
    });
    v.into_iter()
}

/// The architectures of the embedded cubins, ascending.
pub fn cubin_arches() -> Vec<Arch> {
    let mut v: Vec<Arch> = images()
        .filter(|i| i.kind == ImageKind::Cubin)
        .map(|i| i.arch)
        .collect();
    v.sort();
    v
}

/// Which image a device of compute capability `cc` loads, in the order to try them, given the
/// value of [`IMAGE_ENV`] (`None`, empty or `auto`: the default choice). A forced image
/// is the only candidate; it must exist and be loadable on `cc` (a cubin of the same major,
/// minor not above the device's; a PTX not newer than the device).
pub fn candidates(cc: Arch, forced: Option<&str>) -> Result<Vec<&'static Image>> {
    candidates_in(IMAGES, cc, forced)
}

fn candidates_in(
    all: &'static [Image],
    cc: Arch,
    forced: Option<&str>,
) -> Result<Vec<&'static Image>> {
    let runs_on = |i: &Image| match i.kind {
        ImageKind::Cubin => i.arch.major == cc.major && i.arch.minor <= cc.minor,
        ImageKind::Ptx => i.arch <= cc,
    };
    match forced
        .map(str::trim)
        .filter(|f| !f.is_empty() && *f != "auto")
    {
        Some(f) => {
            let want = normalise(f);
            let img = all
                .iter()
                .find(|i| normalise(&i.name()) == want)
                .ok_or_else(|| {
                    invalid(
                        IMAGE_ENV,
                        format!(
                            "`{f}` names no embedded image (embedded: {}; or `auto`)",
                            all.iter().map(Image::name).collect::<Vec<_>>().join(", ")
                        ),
                    )
                })?;
            if !runs_on(img) {
                return Err(invalid(
                    IMAGE_ENV,
                    format!("`{f}`: the {img} image cannot run on a {cc} device"),
                ));
            }
            Ok(vec![img])
        }
        None => {
            let mut cubins: Vec<&Image> = all
                .iter()
                .filter(|i| i.kind == ImageKind::Cubin && runs_on(i))
                .collect();
            cubins.sort_by_key(|i| std::cmp::Reverse(i.arch));
            let mut ptx: Vec<&Image> = all
                .iter()
                .filter(|i| i.kind == ImageKind::Ptx && runs_on(i))
                .collect();
            ptx.sort_by_key(|i| std::cmp::Reverse(i.arch));
            Ok(cubins.into_iter().chain(ptx).collect())
        }
    }
}

/// `sm_90`, `SM90`, `sm90` -> `sm90`; `ptx70`, `ptx_70` -> `ptx70`.
fn normalise(s: &str) -> String {
    let s: String = s
        .to_ascii_lowercase()
        .chars()
        .filter(|c| *c != '_')
        .collect();
    // `sm70` / `sm80` name the PTX of that architecture: there is no sm_70 cubin.
    match s.as_str() {
        "sm70" => "ptx70".to_string(),
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&Image]) -> Vec<String> {
        v.iter().map(|i| i.name()).collect()
    }

    const fn a(major: u32, minor: u32) -> Arch {
        Arch { major, minor }
    }

    #[test]
    fn embedded_set() {
        let cubins = cubin_arches();
        for want in [a(8, 0), a(8, 6), a(8, 9), a(9, 0), a(10, 0), a(12, 0)] {
            assert!(cubins.contains(&want), "no {want} cubin in {cubins:?}");
        }
        let mut ptx: Vec<String> = images()
            .filter(|i| i.kind() == ImageKind::Ptx)
            .map(|i| i.name())
            .collect();
        ptx.sort();
        assert_eq!(ptx, ["ptx70", "ptx80"]);
    }

    #[test]
    fn choice_by_compute_capability() {
        let c = |cc| names(&candidates(cc, None).unwrap());
        assert_eq!(c(a(9, 0)), ["sm_90", "ptx80", "ptx70"]);
        assert_eq!(c(a(8, 7)), ["sm_86", "sm_80", "ptx80", "ptx70"]);
        assert_eq!(c(a(8, 9)), ["sm_89", "sm_86", "sm_80", "ptx80", "ptx70"]);
        assert_eq!(c(a(10, 3)), ["sm_100", "ptx80", "ptx70"]);
        assert_eq!(c(a(12, 1)), ["sm_120", "ptx80", "ptx70"]);
        // A major with no cubin: the PTX, newest first.
        assert_eq!(c(a(11, 0)), ["ptx80", "ptx70"]);
        assert_eq!(c(a(7, 5)), ["ptx70"]);
        assert_eq!(c(a(6, 1)), Vec::<String>::new());
    }

    #[test]
    fn forced_image() {
        let f = |cc, s: &str| candidates(cc, Some(s)).map(|v| names(&v));
        assert_eq!(f(a(9, 0), "ptx70").unwrap(), ["ptx70"]);
        assert_eq!(f(a(9, 0), "sm70").unwrap(), ["ptx70"]);
        assert_eq!(f(a(9, 0), "SM_90").unwrap(), ["sm_90"]);
        assert_eq!(f(a(8, 9), "sm86").unwrap(), ["sm_86"]);
        assert_eq!(f(a(9, 0), "ptx80").unwrap(), ["ptx80"]);
        assert_eq!(f(a(9, 0), "auto").unwrap().len(), 3);
        assert_eq!(f(a(9, 0), "").unwrap().len(), 3);
        let e = f(a(9, 0), "sm_80").unwrap_err().to_string();
        assert!(e.contains("cannot run on a sm_90"), "{e}");
        let e = f(a(9, 0), "sm_75").unwrap_err().to_string();
        assert!(e.contains("names no embedded image"), "{e}");
        assert!(f(a(7, 0), "ptx80").is_err());
    }

    /// ptxas (building the cubins) and the driver's JIT fuse a float multiply and add
    /// into an FMA unless the PTX pins their rounding (`.rn`); results equal to the CPU
    /// oracle need every one pinned, in both PTX builds.
    #[test]
    fn float_arithmetic_is_never_contracted() {
        for (name, ptx) in [("sm_70", PTX), ("sm_80", PTX_SM80)] {
            let mut unpinned = Vec::new();
            for (i, line) in ptx.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("").trim();
                let op = code.split_whitespace().next().unwrap_or("");
                let parts: Vec<&str> = op.split('.').collect();
                let float = parts.last().is_some_and(|t| *t == "f32" || *t == "f64");
                let arith = matches!(parts[0], "add" | "sub" | "mul" | "fma" | "mad");
                if float && arith && !parts.contains(&"rn") {
                    unpinned.push(format!("line {}: {code}", i + 1));
                }
            }
            assert!(
                unpinned.is_empty(),
                "{name} PTX: float arithmetic without `.rn`: {:?}",
                &unpinned[..unpinned.len().min(5)]
            );
        }
    }

    #[test]
    fn images_inflate() {
        for i in images() {
            let b = i.bytes().unwrap();
            match i.kind() {
                ImageKind::Ptx => {
                    assert_eq!(b.last(), Some(&0));
                    assert_eq!(b.len(), i.len() + 1);
                    let text = std::str::from_utf8(&b[..b.len() - 1]).unwrap();
                    assert!(text.contains(&format!(".target {}", i.arch())));
                    for k in detkit_gpu::ALL_KERNELS {
                        assert!(
                            text.contains(&format!(".entry {k}(")),
                            "{k} in {}",
                            i.file()
                        );
                    }
                }
                ImageKind::Cubin => {
                    assert_eq!(&b[..4], b"\x7fELF", "{} is not an ELF cubin", i.file());
                    assert_eq!(b.len(), i.len());
                }
            }
            assert!(
                i.embedded_len() < i.len() / 2,
                "{} compresses badly",
                i.file()
            );
        }
        assert_eq!(images().next().map(|i| i.kind()), Some(ImageKind::Cubin));
        let fallback = images().find(|i| i.name() == "ptx70").unwrap();
        assert_eq!(fallback.bytes().unwrap()[..PTX.len()], *PTX.as_bytes());
    }
}
