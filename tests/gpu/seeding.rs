//! GPU tests of the seeding family against its CPU oracle.

use crate::Test;

/// The seeding tests, run by `main` after the Foundation tests.
pub(crate) const TESTS: &[Test] = &[];
