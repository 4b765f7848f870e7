#!/usr/bin/env bash
# Sets up a fresh machine for detkit: the pinned nightly (from rust-toolchain.toml, with the
# components the kernels need), `ptxas` from PyPI in a private venv (.tools/ptxas-venv), and a
# venv with numpy, pytest and Dask `distributed` for the Python package's tests (.tools/py-venv),
# without touching the system Python. Idempotent. Needs rustup and python3; no CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
channel=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
if ! rustup run "$channel" rustc --version >/dev/null 2>&1 \
   || ! rustup component list --toolchain "$channel" --installed 2>/dev/null | grep -q '^llvm-bitcode-linker'; then
  echo "== installing Rust $channel"
  rustup toolchain install "$channel" --profile minimal \
    -c rust-src -c llvm-tools -c llvm-bitcode-linker -c rustfmt -c clippy
fi
# ptxas is pinned to one exact release: the committed cubins (crates/host/ptx/) are its output,
# and `cargo xtask build-ptx --check` compares bytes (xtask/src/images.rs: PTXAS_RELEASE).
PTXAS_WHEEL='nvidia-cuda-nvcc-cu12==12.9.86'
if [[ "${DETKIT_SKIP_PTXAS:-0}" != 1 ]] \
   && ! .tools/ptxas-venv/bin/python -m pip show nvidia-cuda-nvcc-cu12 2>/dev/null | grep -qx "Version: ${PTXAS_WHEEL#*==}"; then
  echo "== installing ptxas ($PTXAS_WHEEL from PyPI) into .tools/ptxas-venv"
  python3 -m venv .tools/ptxas-venv
  .tools/ptxas-venv/bin/python -m pip install --quiet --disable-pip-version-check "$PTXAS_WHEEL"
fi
if [[ "${DETKIT_SKIP_PYTHON:-0}" != 1 ]] && ! .tools/py-venv/bin/python -c "import numpy, pytest, distributed" >/dev/null 2>&1; then
  echo "== creating .tools/py-venv (numpy, pytest, distributed) for the Python package's tests"
  python3 -m venv .tools/py-venv
  .tools/py-venv/bin/python -m pip install --quiet --disable-pip-version-check 'numpy>=1.21' 'pytest>=7' 'distributed>=2024.1'
fi
echo "== setup done"
