//! Seeding settings from Python keyword arguments (`b.seed(x, y, z, min_pt=0.9)`), converted
//! by `FromPyObject` into the library's `SeedingSettings` (its serde field names and
//! defaults, so an unknown name is the library's "unknown field" error) and checked once.

use detkit::seeding::{SeedingConfig, SeedingSettings};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt};

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
                let name: String = k.extract()?;
                let value = if v.is_instance_of::<PyBool>() {
                    return Err(PyTypeError::new_err(format!(
                        "seeding setting `{name}`: expected a number, got a bool"
                    )));
                } else if v.is_instance_of::<PyInt>() {
                    // Integers are valid for every field (float fields accept them too).
                    toml::Value::Integer(v.extract::<i64>()?)
                } else if v.is_instance_of::<PyFloat>() {
                    toml::Value::Float(v.extract::<f64>()?)
                } else {
                    // numpy scalars and other numbers: by value.
                    match v.extract::<i64>() {
                        Ok(i) if v.extract::<f64>().is_ok_and(|f| f == i as f64) => {
                            toml::Value::Integer(i)
                        }
                        _ => toml::Value::Float(v.extract::<f64>().map_err(|_| {
                            PyTypeError::new_err(format!(
                                "seeding setting `{name}`: expected a number, got {}",
                                v.get_type()
                                    .name()
                                    .map_or_else(|_| "?".into(), |n| n.to_string())
                            ))
                        })?),
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
