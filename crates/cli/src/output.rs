//! Safe outputs: checked before the work starts, written to a temporary file beside the
//! target and renamed into place only when the whole command succeeded.
//!
//! - [`check_outputs`] refuses, before anything is opened for writing, an output that is the
//!   same file as an input (same device and inode, or the same canonical path when the output
//!   does not exist yet), an output that is a directory, an output whose directory is missing,
//!   and two outputs naming the same file. Callers pass every file the command reads as an
//!   input, the tables named inside a scanner description included.
//! - [`AtomicFile`] writes where the output name leads:
//!   - a regular file (or a name that does not exist yet) is written to a temporary file in
//!     its directory and renamed over it on [`AtomicFile::commit`]; dropping it without a
//!     commit removes the temporary, so a failed run leaves nothing behind and an existing
//!     file of that name is untouched until the rename. A new file gets mode `0666 & !umask`,
//!     a replaced file keeps its mode. The temporary's name (`.NAME.XXXXXX.partial`) is cut
//!     to stay within the 255-byte name limit;
//!   - a symbolic link writes its target (the temporary goes beside the target, the link
//!     stays);
//!   - what is not a regular file (a character device such as `/dev/null`, a FIFO, a pipe or
//!     terminal behind `/dev/stdout`) is written directly, never replaced; `-` is standard
//!     output.
//! - Every live temporary (file or directory) is in a registry; SIGINT and SIGTERM remove
//!   them and exit with 130 / 143 ([`install_signal_cleanup`]).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

/// The temporaries alive now: removed by the SIGINT/SIGTERM handler.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Adds a temporary file or directory to the registry of those removed on SIGINT/SIGTERM.
pub fn register_temporary(path: &Path) {
    live().push(path.to_path_buf());
}

/// Removes a temporary from the registry (it was renamed into place or removed).
pub fn unregister_temporary(path: &Path) {
    let mut l = live();
    if let Some(i) = l.iter().position(|p| p == path) {
        l.swap_remove(i);
    }
}

/// Holds the registry: a SIGINT/SIGTERM arriving meanwhile is handled (temporaries removed,
/// exit) only once the guard is dropped, so a step that must not be cut in the middle (moving
/// several files into place) runs whole. Remove a temporary from the registry through the
/// guard (`retain`) while holding it.
pub fn hold_signals() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    live()
}

/// Removes every registered temporary.
fn remove_temporaries(l: &mut Vec<PathBuf>) {
    for p in l.drain(..) {
        if p.is_dir() {
            let _ = std::fs::remove_dir_all(&p);
        } else {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// On SIGINT or SIGTERM: remove every live temporary, then exit with 128 + the signal
/// number (130, 143), as a shell reports a process killed by it. The registry's lock is held
/// from there on, so no commit renames a file into place after the signal was handled.
pub fn install_signal_cleanup() -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("installing the SIGINT/SIGTERM handler")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let mut l = live();
                remove_temporaries(&mut l);
                std::process::exit(128 + sig);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// The directory a file named `path` would be created in.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Whether an output name means standard output: `-`, `/dev/stdout`, `/dev/fd/1`,
/// `/proc/self/fd/1`.
fn is_stdout(path: &Path) -> bool {
    let s = path.as_os_str();
    s == "-" || s == "/dev/stdout" || s == "/dev/fd/1" || s == "/proc/self/fd/1"
}

/// Where writing `path` lands: the final target of a chain of symbolic links (a dangling
/// link resolved as far as it goes), or `path` itself.
fn resolve_links(path: &Path) -> Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p)
                    .with_context(|| format!("output `{}`: reading the link", path.display()))?;
                p = if to.is_absolute() {
                    to
                } else {
                    parent_dir(&p).join(to)
                };
            }
            _ => return Ok(p),
        }
    }
    bail!(
        "output `{}`: too many levels of symbolic links",
        path.display()
    )
}

/// What an output name leads to.
enum Kind {
    /// Standard output.
    Stdout,
    /// An existing file that is not a regular file (device, FIFO, socket): written directly.
    Direct(PathBuf),
    /// A regular file, existing or not, at this path (links resolved): replaced atomically.
    Regular(PathBuf),
}

fn kind_of(path: &Path) -> Result<Kind> {
    if is_stdout(path) {
        return Ok(Kind::Stdout);
    }
    let target = resolve_links(path)?;
    match std::fs::metadata(&target) {
        Ok(m) if m.is_dir() => bail!("output `{}` is a directory", path.display()),
        Ok(m) if !m.is_file() => Ok(Kind::Direct(target)),
        _ => Ok(Kind::Regular(target)),
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
/// Outputs that are not regular files (standard output, devices, FIFOs) are written
/// directly and replace nothing, so only a repeat of them is refused.
pub fn check_outputs(outputs: &[&Path], inputs: &[&Path]) -> Result<()> {
    let mut seen: Vec<PathBuf> = Vec::new();
    for &out in outputs {
        let target = match kind_of(out)? {
            Kind::Stdout => PathBuf::from("-"),
            Kind::Direct(t) => t.canonicalize().unwrap_or(t),
            Kind::Regular(t) => {
                let dir = parent_dir(&t);
                if !dir.is_dir() {
                    bail!(
                        "output `{}`: directory `{}` does not exist",
                        out.display(),
                        dir.display()
                    );
                }
                let target = canonical_target(&t)?;
                for &inp in inputs {
                    // Only a regular input can be the same file as a regular output (and
                    // opening a FIFO to compare it would block, or take its writer's data).
                    let regular_input = std::fs::metadata(inp).is_ok_and(|m| m.is_file());
                    let same_inode = regular_input
                        && t.exists()
                        && same_file::is_same_file(&t, inp).unwrap_or(false);
                    let same_path = inp.canonicalize().is_ok_and(|c| c == target);
                    if same_inode || same_path {
                        bail!(
                            "output `{}` is the input `{}`: refusing to overwrite an input",
                            out.display(),
                            inp.display()
                        );
                    }
                }
                target
            }
        };
        if seen.contains(&target) {
            bail!("output `{}` is given twice", out.display());
        }
        seen.push(target);
    }
    Ok(())
}

/// The longest file name most file systems take (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// The temporary's prefix for `name`: `.NAME.`, NAME cut (at a character boundary) so that
/// `.NAME.XXXXXX.partial` fits in [`NAME_MAX`] bytes.
fn temp_prefix(name: &str) -> String {
    let room = NAME_MAX - ".".len() - ".".len() - 6 - ".partial".len();
    let mut end = name.len().min(room);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!(".{}.", &name[..end])
}

/// Where the bytes go.
pub enum Sink {
    /// A temporary file renamed into place on commit.
    Temp(tempfile::NamedTempFile),
    /// A device, FIFO or other non-regular file, written directly.
    Direct(File),
    /// Standard output.
    Stdout(std::io::Stdout),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Temp(f) => f.write(buf),
            Sink::Direct(f) => f.write(buf),
            Sink::Stdout(f) => f.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Temp(f) => f.flush(),
            Sink::Direct(f) => f.flush(),
            Sink::Stdout(f) => f.flush(),
        }
    }
}

/// An output file under construction (see the module docs).
pub struct AtomicFile {
    /// The name the user gave (for messages).
    name: PathBuf,
    /// The file the temporary replaces (links resolved).
    target: PathBuf,
    /// The registered temporary, if any.
    temp: Option<PathBuf>,
    writer: Option<BufWriter<Sink>>,
}

impl AtomicFile {
    /// Opens `target` for writing as the module docs say.
    pub fn create(target: &Path) -> Result<Self> {
        let (sink, resolved, temp) = match kind_of(target)? {
            Kind::Stdout => (Sink::Stdout(std::io::stdout()), target.to_path_buf(), None),
            Kind::Direct(t) => {
                let f = OpenOptions::new()
                    .write(true)
                    .open(&t)
                    .with_context(|| format!("cannot open `{}`", target.display()))?;
                (Sink::Direct(f), t, None)
            }
            Kind::Regular(t) => {
                let tmp = Self::temp_beside(&t)?;
                let path = tmp.path().to_path_buf();
                (Sink::Temp(tmp), t, Some(path))
            }
        };
        Ok(Self {
            name: target.to_path_buf(),
            target: resolved,
            temp,
            writer: Some(BufWriter::with_capacity(1 << 20, sink)),
        })
    }

    /// A registered temporary file in `t`'s directory with the mode `t` will have.
    fn temp_beside(t: &Path) -> Result<tempfile::NamedTempFile> {
        let dir = parent_dir(t);
        let name = t
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let prefix = temp_prefix(&name);
        let mut b = tempfile::Builder::new();
        b.prefix(&prefix).suffix(".partial");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // open(2) applies the umask: a new file gets 0666 & !umask.
            b.permissions(std::fs::Permissions::from_mode(0o666));
        }
        // Registered before it exists, so a signal between the two cannot miss it (the
        // registry's lock is held across the creation).
        let mut l = live();
        let tmp = b
            .tempfile_in(dir)
            .with_context(|| format!("cannot create a file in `{}`", dir.display()))?;
        l.push(tmp.path().to_path_buf());
        drop(l);
        if let Ok(m) = std::fs::metadata(t) {
            // A replaced file keeps its mode.
            tmp.as_file()
                .set_permissions(m.permissions())
                .with_context(|| format!("setting the mode of `{}`", t.display()))?;
        }
        Ok(tmp)
    }

    /// The buffered writer.
    pub fn writer(&mut self) -> &mut BufWriter<Sink> {
        self.writer.as_mut().expect("an open output")
    }

    /// Overwrites `bytes` at `offset` from the start (a header's count known only at the
    /// end) where the output is a file that can be rewritten, the temporary; returns whether
    /// it could (not on standard output, a FIFO or a device).
    pub fn patch(&mut self, offset: u64, bytes: &[u8]) -> Result<bool> {
        use std::io::{Seek, SeekFrom};
        let name = self.name.clone();
        let w = self.writer();
        w.flush()
            .with_context(|| format!("writing `{}`", name.display()))?;
        match w.get_mut() {
            Sink::Temp(tmp) => {
                let f = tmp.as_file_mut();
                let end = f.stream_position()?;
                f.seek(SeekFrom::Start(offset))?;
                f.write_all(bytes)?;
                f.seek(SeekFrom::Start(end))?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Flushes, and renames a temporary into place.
    pub fn commit(self) -> Result<()> {
        let mut l = live();
        self.commit_locked(&mut l)
    }

    /// [`AtomicFile::commit`] with the registry held by the caller (several files renamed
    /// into place with no signal handled between them).
    fn commit_locked(mut self, l: &mut Vec<PathBuf>) -> Result<()> {
        let name = self.name.clone();
        let sink = self
            .writer
            .take()
            .expect("an open output")
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("writing `{}`", name.display()))?;
        match sink {
            Sink::Temp(tmp) => {
                tmp.as_file()
                    .sync_all()
                    .with_context(|| format!("writing `{}`", name.display()))?;
                // The registry is held across the rename: a signal handled meanwhile waits,
                // and one handled before has already exited.
                let path = tmp.path().to_path_buf();
                tmp.persist(&self.target)
                    .map_err(|e| e.error)
                    .with_context(|| format!("cannot create `{}`", name.display()))?;
                if let Some(i) = l.iter().position(|p| *p == path) {
                    l.swap_remove(i);
                }
                self.temp = None;
            }
            Sink::Direct(mut f) => f
                .flush()
                .with_context(|| format!("writing `{}`", name.display()))?,
            Sink::Stdout(mut s) => s.flush().context("writing standard output")?,
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // The temporary removes itself (tempfile) when the writer drops.
        drop(self.writer.take());
        if let Some(p) = self.temp.take() {
            // Not waiting for the registry: a commit of this thread may hold it (a failed
            // commit drops its file), and a signal handler holding it is about to exit. A
            // stale entry names a removed file, which the handler skips.
            if let Ok(mut l) = LIVE.try_lock() {
                l.retain(|q| *q != p);
            }
        }
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.writer().flush()
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
        // No signal is handled between two renames (it waits for the last).
        let mut l = live();
        let mut files = self.files.into_iter();
        let mut result = Ok(());
        for f in files.by_ref() {
            if let Err(e) = f.commit_locked(&mut l) {
                result = Err(e);
                break;
            }
        }
        drop(l);
        drop(files);
        result
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
