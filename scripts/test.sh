#!/usr/bin/env bash
# The test job (what CI runs, after scripts/setup.sh): formatting, lints, the PTX checks
# (committed PTX up to date, every kernel assembles with ptxas for sm_70 and sm_90), and the
# workspace tests. GPU tests print "skipped: no CUDA driver" where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo fmt --check"; cargo fmt --all -- --check
echo "== cargo clippy"; cargo clippy --workspace --all-targets -- -D warnings
echo "== build-ptx sm_70 (embedded PTX must be current)"; cargo xtask build-ptx --arch sm_70 --check --require-ptxas
echo "== build-ptx sm_90"; cargo xtask build-ptx --arch sm_90 --require-ptxas
echo "== cargo test"; cargo test --workspace
echo "== python: pip install ./crates/python, pytest"
.tools/py-venv/bin/python -m pip install --quiet --disable-pip-version-check ./crates/python
.tools/py-venv/bin/python -m pytest -q crates/python/tests
echo "== all checks passed"
