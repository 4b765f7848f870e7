//! GPU tests of the pet family against its CPU oracle.

use crate::Test;

/// The pet tests, run by `main` after the Foundation tests.
pub(crate) const TESTS: &[Test] = &[];
