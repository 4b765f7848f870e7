//! `detkit seed`: traccc-style track seeding (issue 5).

use anyhow::{bail, Result};
use detkit::Backend;

use crate::Line;

/// Runs `detkit seed ARGS`.
pub fn main(_args: &[String]) -> Result<()> {
    bail!("`detkit seed` is not implemented yet")
}

/// The demo lines of this family (none yet).
pub fn demo(_backend: &Backend) -> Result<Vec<Line>> {
    Ok(Vec::new())
}
