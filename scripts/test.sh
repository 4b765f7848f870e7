#!/usr/bin/env bash
# The test job (what CI runs, after scripts/setup.sh): formatting, lints, the kernel-image
# check (the committed sm_70 and sm_80 PTX and the cubins for sm_80..sm_120, rebuilt with the
# pinned ptxas, must equal what is committed), and the workspace tests. GPU tests print "skipped: no CUDA
# driver" where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo fmt --check"; cargo fmt --all -- --check
echo "== cargo clippy"; cargo clippy --workspace --all-targets -- -D warnings
echo "== build-ptx --check (the embedded PTX and cubins must be current)"; cargo xtask build-ptx --check
echo "== cargo test"; cargo test --workspace
echo "== python: pip install ./crates/python, pytest"
.tools/py-venv/bin/python -m pip install --quiet --disable-pip-version-check ./crates/python
.tools/py-venv/bin/python -m pytest -q crates/python/tests
echo "== all checks passed"
