//! Safe outputs: checked before the work starts, written to a temporary file beside the
//! target and renamed into place only when the whole command succeeded.
//!
//! - [`check_outputs`] refuses, before anything is opened for writing, an output that is the
//!   same file as an input (same device and inode, or the same canonical path when the output
//!   does not exist yet), an output that is a directory, an output whose directory is missing,
//!   and two outputs naming the same file.
//! - [`AtomicFile`] is a temporary file in the target's directory (`tempfile`); dropping it
//!   without [`AtomicFile::commit`] removes it, so a failed run leaves nothing behind and an
//!   existing file of that name is untouched until the rename.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The directory a file named `path` would be created in.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Where `path` points once created: the canonical parent joined with the file name.
fn canonical_target(path: &Path) -> Result<PathBuf> {
    if let Ok(c) = path.canonicalize() {
        return Ok(c);
    }
    let dir = parent_dir(path);
    let dir = dir.canonicalize().with_context(|| {
        format!(
            "output `{}`: directory `{}` does not exist",
            path.display(),
            dir.display()
        )
    })?;
    match path.file_name() {
        Some(name) => Ok(dir.join(name)),
        None => bail!("output `{}` names no file", path.display()),
    }
}

/// Checks every output against every input and against each other (see the module docs).
pub fn check_outputs(outputs: &[&Path], inputs: &[&Path]) -> Result<()> {
    let mut seen: Vec<PathBuf> = Vec::new();
    for &out in outputs {
        let dir = parent_dir(out);
        if !dir.is_dir() {
            bail!(
                "output `{}`: directory `{}` does not exist",
                out.display(),
                dir.display()
            );
        }
        if out.is_dir() {
            bail!("output `{}` is a directory", out.display());
        }
        let target = canonical_target(out)?;
        for &inp in inputs {
            let same_inode = out.exists() && same_file::is_same_file(out, inp).unwrap_or(false);
            let same_path = inp.canonicalize().is_ok_and(|c| c == target);
            if same_inode || same_path {
                bail!(
                    "output `{}` is the input `{}`: refusing to overwrite an input",
                    out.display(),
                    inp.display()
                );
            }
        }
        if seen.contains(&target) {
            bail!("output `{}` is given twice", out.display());
        }
        seen.push(target);
    }
    Ok(())
}

/// An output file under construction (see the module docs).
pub struct AtomicFile {
    target: PathBuf,
    writer: BufWriter<tempfile::NamedTempFile>,
}

impl AtomicFile {
    /// A temporary file beside `target` (same directory, so the final rename is atomic).
    pub fn create(target: &Path) -> Result<Self> {
        let dir = parent_dir(target);
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".partial")
            .tempfile_in(dir)
            .with_context(|| format!("cannot create a file in `{}`", dir.display()))?;
        Ok(Self {
            target: target.to_path_buf(),
            writer: BufWriter::with_capacity(1 << 20, tmp),
        })
    }

    /// The buffered writer.
    pub fn writer(&mut self) -> &mut BufWriter<tempfile::NamedTempFile> {
        &mut self.writer
    }

    /// Flushes and renames the file into place.
    pub fn commit(self) -> Result<()> {
        let target = self.target;
        let tmp = self
            .writer
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("writing `{}`", target.display()))?;
        tmp.as_file()
            .sync_all()
            .with_context(|| format!("writing `{}`", target.display()))?;
        tmp.persist(&target)
            .map_err(|e| e.error)
            .with_context(|| format!("cannot create `{}`", target.display()))?;
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.writer.flush()
    }
}

/// Several outputs committed together: all are renamed into place only after every one was
/// written (a failure while writing the second leaves neither).
#[derive(Default)]
pub struct OutputSet {
    files: Vec<AtomicFile>,
}

impl OutputSet {
    /// Adds a file; returns its index for [`OutputSet::get`].
    pub fn add(&mut self, target: &Path) -> Result<usize> {
        self.files.push(AtomicFile::create(target)?);
        Ok(self.files.len() - 1)
    }

    /// Adds a file already written (committed with the others).
    pub fn push(&mut self, file: AtomicFile) {
        self.files.push(file);
    }

    /// File `i`.
    pub fn get(&mut self, i: usize) -> &mut AtomicFile {
        &mut self.files[i]
    }

    /// Commits every file.
    pub fn commit(self) -> Result<()> {
        for f in self.files {
            f.commit()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_an_input_as_output_and_missing_directories() {
        let d = tempfile::tempdir().unwrap();
        let inp = d.path().join("in.csv");
        std::fs::write(&inp, "a\n").unwrap();
        assert!(check_outputs(&[&inp], &[&inp]).is_err());
        // Another spelling of the same path.
        let other = d.path().join(".").join("in.csv");
        assert!(check_outputs(&[&other], &[&inp]).is_err());
        let missing = d.path().join("nope").join("out.csv");
        let e = check_outputs(&[&missing], &[&inp]).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        assert!(check_outputs(&[d.path()], &[&inp]).is_err());
        let out = d.path().join("out.csv");
        assert!(check_outputs(&[&out], &[&inp]).is_ok());
        assert!(check_outputs(&[&out, &out], &[&inp]).is_err());
        #[cfg(unix)]
        {
            let link = d.path().join("link.csv");
            std::fs::hard_link(&inp, &link).unwrap();
            assert!(check_outputs(&[&link], &[&inp]).is_err());
        }
    }

    #[test]
    fn atomic_file_appears_only_on_commit() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out.csv");
        std::fs::write(&out, "old").unwrap();
        {
            let mut f = AtomicFile::create(&out).unwrap();
            f.write_all(b"new").unwrap();
            // dropped without commit
        }
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        let mut f = AtomicFile::create(&out).unwrap();
        f.write_all(b"new").unwrap();
        f.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }
}
