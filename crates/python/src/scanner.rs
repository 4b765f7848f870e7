//! `detkit.Scanner`: a PET scanner description (parameters and its two tables) read once and
//! kept in Rust, for every `convert` / `run` call that names it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use detkit::pet::{PetScanner, Scanner as Inner};
use pyo3::prelude::*;

use crate::errors::err;

/// A PET scanner: the TOML description and the position and energy tables it names, read
/// once. Pass it to `Backend.convert` (a path there reads the files again on every call).
#[pyclass(module = "detkit._detkit", frozen, name = "Scanner")]
pub struct Scanner {
    pub inner: Inner,
    path: Option<PathBuf>,
    /// The tables loaded on each CUDA backend this scanner was used with (keyed by the
    /// backend's context handle, which the loaded tables keep alive, so a key is never
    /// reused while its entry exists).
    handles: Mutex<Vec<(usize, Arc<PetScanner>)>>,
}

#[pymethods]
impl Scanner {
    /// Reads the scanner TOML file `path` and its tables (an `OSError` when the TOML file
    /// cannot be read, `InvalidInputError` for a malformed file or table).
    #[new]
    pub fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py.detach(|| -> PyResult<Inner> {
            crate::io::check_readable(&path)?;
            Inner::from_toml_file(&path).map_err(err)
        })?;
        Ok(Self {
            inner,
            path: Some(path),
            handles: Mutex::new(Vec::new()),
        })
    }

    /// The TOML file it was read from (`None` for a generated scanner).
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.path.clone()
    }

    /// The default coincidence window (frame counter ticks).
    #[getter]
    fn time_window(&self) -> f64 {
        self.inner.time_window
    }

    /// Bytes of the two tables held in memory.
    #[getter]
    fn table_bytes(&self) -> usize {
        self.inner.position.len() + 4 * self.inner.energy.len()
    }

    fn __repr__(&self) -> String {
        match &self.path {
            Some(p) => format!("detkit.Scanner({:?})", p.display().to_string()),
            None => "detkit.Scanner(<generated>)".to_string(),
        }
    }
}

impl Scanner {
    /// A scanner made in Rust (e.g. a generated one).
    pub fn from_inner(inner: Inner) -> Self {
        Self {
            inner,
            path: None,
            handles: Mutex::new(Vec::new()),
        }
    }

    /// This scanner's tables on `backend`'s device, loaded on first use and kept (`None` on
    /// the CPU backend, which reads the host tables).
    pub fn handle(&self, backend: &detkit::Backend) -> detkit::Result<Option<Arc<PetScanner>>> {
        let Some(g) = backend.gpu() else {
            return Ok(None);
        };
        let key = Arc::as_ptr(g.context()) as usize;
        let mut hs = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, h)) = hs.iter().find(|(k, _)| *k == key) {
            return Ok(Some(h.clone()));
        }
        let h = Arc::new(backend.load_scanner(&self.inner)?);
        hs.push((key, h.clone()));
        Ok(Some(h))
    }
}
