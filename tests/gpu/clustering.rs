//! GPU tests of the clustering family against its CPU oracle.

use crate::Test;

/// The clustering tests, run by `main` after the Foundation tests.
pub(crate) const TESTS: &[Test] = &[];
