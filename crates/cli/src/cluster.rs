//! `detkit cluster`: CMS pixel clustering (issue 3).

use anyhow::{bail, Result};
use detkit::Backend;

use crate::Line;

/// Runs `detkit cluster ARGS`.
pub fn main(_args: &[String]) -> Result<()> {
    bail!("`detkit cluster` is not implemented yet")
}

/// The demo lines of this family (none yet).
pub fn demo(_backend: &Backend) -> Result<Vec<Line>> {
    Ok(Vec::new())
}
