//! `detkit._detkit.DevicePool`: the library's `DevicePool` (one backend per GPU, or `n` CPU
//! backends) and its `map`, which runs a Python function on one host thread per device.

use detkit::pool::{DevicePool as Inner, Devices};
use pyo3::prelude::*;

use crate::errors::{err, InvalidInputError};
use crate::Backend;

/// One backend per device. `members()` gives a `Backend` per device (sharing the pool's
/// contexts and workspaces); `map` spreads calls over them.
#[pyclass(module = "detkit._detkit", frozen)]
pub struct DevicePool {
    pub inner: Inner,
}

#[pymethods]
impl DevicePool {
    /// `kind` "cpu": `len(devices)` CPU backends; "cuda": a CUDA backend per ordinal of
    /// `devices` (an error naming a device that cannot be opened).
    #[new]
    fn new(py: Python<'_>, kind: &str, devices: Vec<usize>) -> PyResult<Self> {
        if devices.is_empty() {
            return Err(InvalidInputError::new_err("devices: empty list"));
        }
        let inner = match kind {
            "cpu" => Inner::cpu(devices.len()),
            "cuda" => py
                .detach(|| Inner::cuda(&Devices::List(devices)))
                .map_err(err)?,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown pool kind `{other}` (cpu or cuda)"
                )))
            }
        };
        Ok(Self { inner })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The pool's backends, in pool order.
    fn members(slf: &Bound<'_, Self>) -> Vec<Backend> {
        (0..slf.get().inner.len())
            .map(|i| Backend::pool_member(slf.clone().unbind(), i))
            .collect()
    }

    /// `[fn(members[d], item) for item in items]`, the items spread over the devices (one
    /// host thread each, taking the next item when done), results in input order. The GIL
    /// is released while the threads wait on it, so the devices work at the same time when
    /// `fn` releases it (every detkit call does). On failure no new item starts and the
    /// exception of the lowest failed index is raised.
    fn map(
        &self,
        py: Python<'_>,
        func: Py<PyAny>,
        items: Vec<Py<PyAny>>,
        members: Vec<Py<PyAny>>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let backends = self.inner.backends();
        if members.len() != backends.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "{} members for a pool of {}",
                members.len(),
                backends.len()
            )));
        }
        py.detach(|| {
            self.inner.map(items, |b, item| {
                let d = backends
                    .iter()
                    .position(|x| std::ptr::eq(x, b))
                    .expect("map hands out the pool's own backends");
                Python::attach(|py| func.call1(py, (members[d].clone_ref(py), item)))
            })
        })
    }
}
