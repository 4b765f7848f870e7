//! Argument checks of the Python layer: the same ranges and types as the command line, bools
//! refused where numbers are meant (`True` is not 1 electron), and the memory a requested
//! size needs checked before it is allocated (a [`detkit::Error::OutOfMemory`] becomes
//! `MemoryError`).

use detkit::clustering::ChargeCut;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString};

/// Whether `obj` is a Python or numpy bool.
fn is_bool(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyBool>()
        || obj
            .get_type()
            .name()
            .is_ok_and(|n| n == "bool" || n == "bool_")
}

/// An integer argument (a Python or numpy integer; bools and floats refused).
fn integer(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<i128> {
    if is_bool(obj) {
        return Err(PyTypeError::new_err(format!(
            "{name}={}: a bool is not a number",
            obj.repr()?
        )));
    }
    // Integers (Python's and numpy's) have `__index__`; floats do not.
    if !obj.hasattr("__index__")? {
        return Err(PyTypeError::new_err(format!(
            "{name}={}: expected an integer",
            obj.repr()?
        )));
    }
    obj.call_method0("__index__")?
        .extract::<i128>()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{name}={}: expected an integer",
                obj.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })
}

/// A real-number argument (Python or numpy integer or float; bools refused).
fn real(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    if is_bool(obj) {
        return Err(PyTypeError::new_err(format!(
            "{name}={}: a bool is not a number",
            obj.repr()?
        )));
    }
    obj.extract::<f64>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name}={}: expected a number",
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

/// `charge_cut` of `Backend.cluster`: `None` (the geometry's CMS cut), `False` (no cut) or
/// a whole number of electrons in `0..=2^32-1` (`detkit cluster --charge-cut`'s range).
pub fn charge_cut(
    obj: Option<&Bound<'_, PyAny>>,
    default: ChargeCut,
) -> PyResult<Option<ChargeCut>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(Some(default));
    };
    if is_bool(obj) {
        if obj.is_truthy()? {
            return Err(PyTypeError::new_err(
                "charge_cut=True: give a charge in electrons, None for the geometry's cut, or \
                 False for no cut",
            ));
        }
        return Ok(None);
    }
    let c = integer("charge_cut", obj)?;
    match u32::try_from(c) {
        Ok(c) => Ok(Some(ChargeCut::uniform(c))),
        Err(_) => Err(PyValueError::new_err(format!(
            "charge_cut={c}: a charge in electrons is 0 to 4294967295 (False: no cut)"
        ))),
    }
}

/// The pile-up `mu` of `generate.seeding_event`: finite, 0 to 10000 (as `detkit seed
/// generate --mu`).
pub fn pileup(obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    let mu = real("mu", obj)?;
    if !(mu.is_finite() && (0.0..=10_000.0).contains(&mu)) {
        return Err(PyValueError::new_err(format!(
            "mu={mu}: not a pile-up between 0 and 10000"
        )));
    }
    Ok(mu)
}

/// The seeding settings (`Backend.seed(**settings)`) as the TOML lines the library reads:
/// numbers only (a bool such as `min_pt=True` is refused, as is a NaN or infinite value);
/// unknown names are the library's error.
#[pyfunction]
pub fn settings_toml(settings: &Bound<'_, PyDict>) -> PyResult<String> {
    let mut out = String::new();
    for (k, v) in settings.iter() {
        let key: String = k
            .cast::<PyString>()
            .map_err(|_| PyTypeError::new_err("setting names must be strings"))?
            .to_string();
        if !v.hasattr("__index__")? || is_bool(&v) {
            let x = real(&key, &v)?;
            if !x.is_finite() {
                return Err(PyValueError::new_err(format!("{key}={x}: not finite")));
            }
            out.push_str(&format!("{key} = {x:?}\n"));
        } else {
            let x = integer(&key, &v)?;
            out.push_str(&format!("{key} = {x}\n"));
        }
    }
    Ok(out)
}

/// Checks that the memory of a generated PET acquisition of `singles` singles (and the tiny
/// scanner's tables) fits, before generating it.
pub fn check_acquisition(singles: usize) -> detkit::Result<()> {
    detkit::mem::check_estimate(
        format!("singles={singles}"),
        detkit::pet::gen::acquisition_bytes(singles),
    )
}

/// Checks that a histogram of `nbins` bins (4-byte counts) fits before it is allocated.
pub fn check_bins(nbins: u32) -> detkit::Result<()> {
    detkit::mem::check_estimate(format!("nbins={nbins}"), 4 * nbins as u64)
}
