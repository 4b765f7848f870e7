//! The typed error of every detkit operation.

use cudarc::driver::DriverError;

/// Everything that can go wrong in detkit, by cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CUDA driver refused a call; `context` names what detkit was doing
    /// (the kernel name for launches).
    #[error("CUDA driver error while {context}: {source}")]
    Driver {
        /// What detkit was doing.
        context: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// CUDA was asked for but is not usable here (no driver library, no device).
    #[error("CUDA is not available: {0}")]
    NoCuda(String),
    /// The embedded PTX lacks a kernel detkit needs (a stale or foreign PTX).
    #[error("kernel `{0}` is missing from the PTX module")]
    MissingKernel(String),
    /// The caller's input breaks a documented precondition.
    #[error("invalid input `{what}`: {detail}")]
    InvalidInput {
        /// The argument or data at fault.
        what: &'static str,
        /// What is wrong with it, naming the first offending element where there is one.
        detail: String,
    },
    /// A file is malformed: `FILE:LINE` (1-based line in the file) and, where one is at
    /// fault, the column's name.
    #[error("{file}{}: {}{detail}", if *line > 0 { format!(":{line}") } else { String::new() }, column.as_ref().map(|c| format!("column `{c}`: ")).unwrap_or_default())]
    Format {
        /// The file (as the caller named it).
        file: String,
        /// 1-based line number in the file (0: the file as a whole, e.g. a binary file; the
        /// message is then `FILE: ...`).
        line: u64,
        /// The column at fault, by its header name.
        column: Option<String>,
        /// What is wrong.
        detail: String,
    },
    /// A file could not be read or written.
    #[error("{file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// One element of the caller's input breaks a documented precondition: `index` is its
    /// position in the input (0-based; the CLI turns it into `FILE:LINE`), `column` the field.
    #[error("{what} {index}: {detail} (column `{column}`)")]
    InvalidItem {
        /// What the elements are (`digi`, `spacepoint`).
        what: &'static str,
        /// 0-based index of the element.
        index: usize,
        /// The field at fault.
        column: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// A fixed capacity would be exceeded.
    #[error("capacity exceeded for {what}: needed {needed}, capacity {capacity}")]
    CapacityExceeded {
        /// The buffer or limit.
        what: &'static str,
        /// What the input needs.
        needed: u64,
        /// What is available.
        capacity: u64,
    },
    /// Not enough memory for a request: `needed` bytes by detkit's estimate (or asked of
    /// the allocator), `available` what the system and the process's limits leave (`None`:
    /// the allocator refused, nothing is known of what is left). Nothing was allocated for it.
    #[error("not enough memory for {what}: it needs about {}{}", human_bytes(*needed), available.map(|a| format!(", {} available", human_bytes(a))).unwrap_or_default())]
    OutOfMemory {
        /// What the memory was for (naming the size that asked for it).
        what: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes available, when known.
        available: Option<u64>,
    },
}

/// `12.3 GB`, `512 MB`, `100 kB`, `17 bytes` (decimal units, as `df -H`).
pub fn human_bytes(b: u64) -> String {
    let f = b as f64;
    if f >= 1e9 {
        format!("{:.1} GB", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.1} MB", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.1} kB", f / 1e3)
    } else {
        format!("{b} bytes")
    }
}

/// `Result` with detkit's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Attaches a context string to driver errors (`Error::Driver`): `stream.memcpy_dtod(..).ctx("copy")`.
pub trait DriverContext<T> {
    fn ctx(self, context: impl Into<String>) -> Result<T>;
}

impl<T> DriverContext<T> for std::result::Result<T, DriverError> {
    fn ctx(self, context: impl Into<String>) -> Result<T> {
        self.map_err(|source| Error::Driver {
            context: context.into(),
            source,
        })
    }
}

pub(crate) fn invalid(what: &'static str, detail: impl Into<String>) -> Error {
    Error::InvalidInput {
        what,
        detail: detail.into(),
    }
}
