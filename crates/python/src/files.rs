//! detkit's binary singles and pairs files from Python, through the library's one reader
//! and writer of each format (`detkit::pet::read_singles` …): the 16-byte header (magic
//! `DKSNGL01` / `DKPAIR01`, `u64` record count) is checked against the file's length and
//! every error names the file and the sizes.

use std::path::PathBuf;

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::{bytes_of, err, records};

/// The singles of a file (`.bin`: header and 16-byte records; else CSV) as raw bytes.
#[pyfunction]
pub fn read_singles_file<'py>(
    py: Python<'py>,
    path: PathBuf,
) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let s = py
        .detach(|| detkit::pet::read_singles(&path))
        .map_err(err)?;
    Ok(bytes_of(s).into_pyarray(py))
}

/// The pairs of a file (`.bin`: header and 32-byte records; else CSV) as raw bytes.
#[pyfunction]
pub fn read_pairs_file<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let p = py.detach(|| detkit::pet::read_pairs(&path)).map_err(err)?;
    Ok(bytes_of(p).into_pyarray(py))
}

/// Writes singles (raw 16-byte records) to a file (`.bin`: with the header; else CSV).
#[pyfunction]
pub fn write_singles_file(
    py: Python<'_>,
    path: PathBuf,
    singles: PyReadonlyArray1<'_, u8>,
) -> PyResult<()> {
    let s: Vec<detkit::pet::Single> = records(singles.as_slice()?, "singles")?;
    py.detach(|| detkit::pet::write_singles(&path, &s))
        .map_err(err)
}

/// Writes pairs (raw 32-byte records) to a file (`.bin`: with the header; else CSV).
#[pyfunction]
pub fn write_pairs_file(
    py: Python<'_>,
    path: PathBuf,
    pairs: PyReadonlyArray1<'_, u8>,
) -> PyResult<()> {
    let p: Vec<detkit::pet::Coincidence> = records(pairs.as_slice()?, "pairs")?;
    py.detach(|| -> detkit::Result<()> {
        let mut w = detkit::pet::PairsWriter::create(&path)?;
        w.write(&p)?;
        w.finish().map(|_| ())
    })
    .map_err(err)
}
