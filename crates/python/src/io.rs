//! `detkit.io`: the library's readers of the command-line tool's file formats (one reader
//! per format, in Rust: the CLI, Python and `detkit.dask` report the same `FILE:LINE`).
//!
//! Every reader releases the GIL while it reads and parses. A file that cannot be read is an
//! `OSError` of its kind (`FileNotFoundError`, ...); a malformed one is `InvalidInputError`
//! naming `FILE:LINE` and the column (CSV) or the file (binary formats).

use std::path::{Path, PathBuf};

use detkit::clustering::{self as cl, Digis};
use detkit::pet::{Coincidence, Single};
use detkit::seeding::SpacePoint;
use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;

use crate::errors::{err, format_err, os_error, read_file};

/// `(module, x, y, adc)` numpy arrays.
pub type DigiArrays<'py> = (
    Bound<'py, PyArray1<u16>>,
    Bound<'py, PyArray1<u16>>,
    Bound<'py, PyArray1<u16>>,
    Bound<'py, PyArray1<u16>>,
);

/// `(x, y, z, var_r, var_z)` numpy arrays.
pub type SpacePointArrays<'py> = (
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<f32>>,
);

/// The digis of a file: binary `DKDIGI01` (detected by its magic) or CSV `module,x,y,adc`.
/// Runs without the GIL (no Python object is touched).
pub fn load_digis(path: &Path) -> PyResult<Digis> {
    let bytes = read_file(path)?;
    if bytes.starts_with(cl::BINARY_MAGIC) {
        // The file's bytes decoded in place (`read_binary` would copy them once more first);
        // the same checks and messages.
        cl::io::read_binary_bytes(&bytes, "binary digis").map_err(|e| format_err(path, e))
    } else {
        cl::read_csv(&bytes[..], &path.display().to_string()).map_err(err)
    }
}

/// The spacepoints of a CSV file `x,y,z[,var_r,var_z]`.
pub fn load_spacepoints(path: &Path) -> PyResult<Vec<SpacePoint>> {
    let bytes = read_file(path)?;
    detkit::seeding::read_csv(&bytes[..], &path.display().to_string()).map_err(err)
}

/// Every file of `paths` read into its buffer of `bufs` (kept by the caller from batch to
/// batch, so a worker reads into memory already mapped; grown to the paths) and parsed by
/// `parse`, on the host's cores; results in path order, an unreadable file its `OSError`.
pub fn read_kept<T: Send>(
    paths: &[PathBuf],
    bufs: &mut Vec<Vec<u8>>,
    parse: impl Fn(&Path, &[u8]) -> PyResult<T> + Sync,
) -> Vec<PyResult<T>> {
    use rayon::prelude::*;
    use std::io::Read as _;
    if bufs.len() < paths.len() {
        bufs.resize_with(paths.len(), Vec::new);
    }
    paths
        .par_iter()
        .zip(bufs[..paths.len()].par_iter_mut())
        .map(|(p, buf)| {
            buf.clear();
            std::fs::File::open(p)
                .and_then(|mut f| f.read_to_end(buf))
                .map_err(|e| os_error(p, &e))?;
            parse(p, buf)
        })
        .collect()
}

/// Checks that `path` can be opened (an `OSError` of its kind when not), for the library
/// readers that open the file themselves and report I/O as a format error.
pub fn check_readable(path: &Path) -> PyResult<()> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|e| os_error(path, &e))
}

pub fn digi_arrays(py: Python<'_>, d: Digis) -> DigiArrays<'_> {
    (
        d.module.into_pyarray(py),
        d.x.into_pyarray(py),
        d.y.into_pyarray(py),
        d.adc.into_pyarray(py),
    )
}

pub fn spacepoint_arrays<'py>(py: Python<'py>, sps: &[SpacePoint]) -> SpacePointArrays<'py> {
    let col = |f: fn(&SpacePoint) -> f32| -> Vec<f32> { sps.iter().map(f).collect() };
    (
        col(|s| s.x).into_pyarray(py),
        col(|s| s.y).into_pyarray(py),
        col(|s| s.z).into_pyarray(py),
        col(|s| s.var_r).into_pyarray(py),
        col(|s| s.var_z).into_pyarray(py),
    )
}

/// Records with 8-byte alignment (`Single`, `Coincidence`) as `u64` words, moved (no copy)
/// into a numpy array that Python views as the record dtype.
pub fn record_words<T: bytemuck::Pod>(py: Python<'_>, v: Vec<T>) -> Bound<'_, PyArray1<u64>> {
    match bytemuck::allocation::try_cast_vec::<T, u64>(v) {
        Ok(words) => words.into_pyarray(py),
        // Not reachable for the PET records (8-byte aligned, sizes of whole words); a copy
        // keeps it correct for any other record.
        Err((_, v)) => bytemuck::pod_collect_to_vec::<T, u64>(&v).into_pyarray(py),
    }
}

/// Digis of a `detkit cluster` input file: `(module, x, y, adc)`, `uint16`.
#[pyfunction]
pub fn read_digis(py: Python<'_>, path: PathBuf) -> PyResult<DigiArrays<'_>> {
    let d = py.detach(|| load_digis(&path))?;
    Ok(digi_arrays(py, d))
}

/// Spacepoints of a `detkit seed` input CSV: `(x, y, z, var_r, var_z)`, `float32`.
#[pyfunction]
pub fn read_spacepoints(py: Python<'_>, path: PathBuf) -> PyResult<SpacePointArrays<'_>> {
    let sps = py.detach(|| load_spacepoints(&path))?;
    Ok(spacepoint_arrays(py, &sps))
}

/// Raw PET frames (16 bytes each) of a file, as `uint8`.
#[pyfunction]
pub fn read_frames(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyArray1<u8>>> {
    let bytes = py.detach(|| -> PyResult<Vec<u8>> {
        let b = read_file(&path)?;
        crate::frames_of(&b).map_err(|e| format_err(&path, e))?;
        Ok(b)
    })?;
    Ok(bytes.into_pyarray(py))
}

/// PET singles of a file (`.bin`: raw 16-byte records, else CSV `crystal,energy,time`), as
/// `uint64` words (two per single) for the Python layer to view as `SINGLE_DTYPE`.
#[pyfunction]
pub fn read_singles(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyArray1<u64>>> {
    let s: Vec<Single> = py.detach(|| -> PyResult<_> {
        check_readable(&path)?;
        detkit::pet::read_singles(&path).map_err(err)
    })?;
    Ok(record_words(py, s))
}

/// PET coincidence pairs of a file (`.bin`: raw 32-byte records, else the pairs CSV), as
/// `uint64` words (four per pair) for the Python layer to view as `COINCIDENCE_DTYPE`.
#[pyfunction]
pub fn read_pairs(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyArray1<u64>>> {
    let p: Vec<Coincidence> = py.detach(|| -> PyResult<_> {
        check_readable(&path)?;
        detkit::pet::read_pairs(&path).map_err(err)
    })?;
    Ok(record_words(py, p))
}
