//! The Python exceptions of `detkit` and the mapping of the library's errors onto them.
//!
//! `InvalidInputError` (a `ValueError`): bad input, also a malformed file (`FILE:LINE:
//! column ...`); `CapacityError` (a `ValueError`): a fixed capacity the input exceeds;
//! `CudaError` (a `RuntimeError`): the driver; `MemoryError`: a size that needs more memory
//! than there is (checked before allocating, see `args`). A file that cannot be read is an `OSError` of
//! the operating system's kind (`FileNotFoundError`, `PermissionError`, `IsADirectoryError`,
//! ...) with `errno`, `strerror` and `filename` set, as `open()` raises it.

use std::path::Path;

use pyo3::create_exception;
use pyo3::exceptions::{PyMemoryError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    _detkit,
    InvalidInputError,
    PyValueError,
    "The input breaks a documented precondition (the message names the element)."
);
create_exception!(
    _detkit,
    CapacityError,
    PyValueError,
    "The input exceeds a fixed capacity (the message gives what is needed and what there is)."
);
create_exception!(
    _detkit,
    CudaError,
    PyRuntimeError,
    "The CUDA driver failed, or CUDA was asked for and is not available."
);

/// The Python exception of a library error (same message).
pub fn err(e: detkit::Error) -> PyErr {
    use detkit::Error as E;
    match e {
        E::Io { file, source } => os_error(Path::new(&file), &source),
        E::Driver { .. } | E::NoCuda(_) | E::MissingKernel(_) => CudaError::new_err(e.to_string()),
        E::CapacityExceeded { .. } => CapacityError::new_err(e.to_string()),
        E::OutOfMemory { .. } => PyMemoryError::new_err(e.to_string()),
        _ => InvalidInputError::new_err(e.to_string()),
    }
}

/// The `OSError` of a failed read or write of `path`: `OSError(errno, strerror, filename)`,
/// which Python turns into the subclass of the errno (`FileNotFoundError` for `ENOENT`, ...).
pub fn os_error(path: &Path, e: &std::io::Error) -> PyErr {
    let file = path.display().to_string();
    match e.raw_os_error() {
        Some(errno) => {
            // The message without Rust's " (os error N)" suffix, as Python's `strerror`.
            let text = e.to_string();
            let strerror = text
                .strip_suffix(&format!(" (os error {errno})"))
                .unwrap_or(&text)
                .to_string();
            PyOSError::new_err((errno, strerror, file))
        }
        // No OS error number (e.g. an early end of file): the kind's subclass, by pyo3.
        None => PyErr::from(std::io::Error::new(e.kind(), format!("{file}: {e}"))),
    }
}

/// The bytes of a file, or its `OSError`.
pub fn read_file(path: &Path) -> PyResult<Vec<u8>> {
    std::fs::read(path).map_err(|e| os_error(path, &e))
}

/// A malformed file: `InvalidInputError("FILE: detail")` (for formats without lines).
pub fn format_err(path: &Path, detail: impl std::fmt::Display) -> PyErr {
    InvalidInputError::new_err(format!("{}: {detail}", path.display()))
}
