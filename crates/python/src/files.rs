//! detkit's PET singles and pairs files written from Python, through the library's one
//! writer of each format (`detkit::pet::write_singles`, `PairsWriter`): `.bin` with the
//! 16-byte header (magic `DKSNGL01` / `DKPAIR01`, `u64` record count), other names CSV. The
//! readers are `detkit.io`'s ([`crate::io`]); `detkit.read_singles`/`read_pairs` are the same
//! functions.

use std::path::PathBuf;

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use crate::errors::err;
use crate::records;

/// Writes singles (raw 16-byte records, borrowed) to a file (`.bin`: with the header; else
/// CSV).
#[pyfunction]
pub fn write_singles_file(
    py: Python<'_>,
    path: PathBuf,
    singles: PyReadonlyArray1<'_, u8>,
) -> PyResult<()> {
    let s = records::<detkit::pet::Single>(singles.as_slice()?, "singles")?;
    py.detach(|| detkit::pet::write_singles(&path, &s))
        .map_err(err)
}

/// Writes pairs (raw 32-byte records, borrowed) to a file (`.bin`: with the header; else
/// CSV).
#[pyfunction]
pub fn write_pairs_file(
    py: Python<'_>,
    path: PathBuf,
    pairs: PyReadonlyArray1<'_, u8>,
) -> PyResult<()> {
    let p = records::<detkit::pet::Coincidence>(pairs.as_slice()?, "pairs")?;
    py.detach(|| -> detkit::Result<()> {
        let mut w = detkit::pet::PairsWriter::create(&path)?;
        w.write(&p)?;
        w.finish().map(|_| ())
    })
    .map_err(err)
}
