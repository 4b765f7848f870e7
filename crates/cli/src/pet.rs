//! `detkit pet`: the PET acquisition chain (issue 4).

use anyhow::{bail, Result};
use detkit::Backend;

use crate::Line;

/// Runs `detkit pet ARGS`.
pub fn main(_args: &[String]) -> Result<()> {
    bail!("`detkit pet` is not implemented yet")
}

/// The demo lines of this family (none yet).
pub fn demo(_backend: &Backend) -> Result<Vec<Line>> {
    Ok(Vec::new())
}
