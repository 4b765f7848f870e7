//! Seeding settings from Python keyword arguments (`b.seed(x, y, z, min_pt=0.9)`), converted
//! by `FromPyObject` into the library's `SeedingSettings` (its serde field names and
//! defaults, so an unknown name is the library's "unknown field" error) and checked once:
//! numbers only (a bool such as `min_pt=True` is a `TypeError`, a NaN or infinite value a
//! `ValueError`), and then the library's ranges, the same as `detkit seed --config`'s.

use detkit::seeding::{SeedingConfig, SeedingSettings};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt};

use crate::args;
use crate::errors::{err, InvalidInputError};

/// A checked seeding configuration, from a dict of settings (`None`: the defaults).
pub struct Settings(pub SeedingConfig);

impl<'a, 'py> FromPyObject<'a, 'py> for Settings {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let mut table = toml::Table::new();
        if !obj.is_none() {
            let dict = obj.cast::<PyDict>().map_err(|_| {
                PyTypeError::new_err("seeding settings: expected a dict of name = number")
            })?;
            for (k, v) in dict.iter() {
                let name: String = k
                    .extract()
                    .map_err(|_| PyTypeError::new_err("setting names must be strings"))?;
                // The number checks of `args`: a bool is not a number (`min_pt=True`), an
                // integer (Python's or numpy's) stays one, a float must be finite.
                let what = format!("seeding setting {name}");
                let value =
                    if args::is_bool(&v) {
                        return Err(PyTypeError::new_err(format!(
                            "{what}={}: a bool is not a number",
                            v.repr()?
                        )));
                    } else if v.is_instance_of::<PyInt>() || v.hasattr("__index__")? {
                        // Integers are valid for every field (float fields accept them too).
                        let i = args::integer(&name, &v)?;
                        toml::Value::Integer(i64::try_from(i).map_err(|_| {
                            PyValueError::new_err(format!("{what}={i}: out of range"))
                        })?)
                    } else {
                        let f = args::real(&name, &v)?;
                        if !f.is_finite() {
                            return Err(PyValueError::new_err(format!("{name}={f}: not finite")));
                        }
                        if v.is_instance_of::<PyFloat>() || f.fract() != 0.0 || f.abs() >= 9.0e15 {
                            toml::Value::Float(f)
                        } else {
                            // Other numbers (numpy floats) of whole value: as integers, valid
                            // for every field.
                            toml::Value::Integer(f as i64)
                        }
                    };
                table.insert(name, value);
            }
        }
        let settings: SeedingSettings =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    InvalidInputError::new_err(format!(
                        "invalid input `seeding config`: {}",
                        e.message()
                    ))
                })?;
        settings.to_config().map(Settings).map_err(err)
    }
}
