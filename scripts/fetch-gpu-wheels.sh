#!/usr/bin/env bash
# Downloads the wheels of the third-party CUDA array producer/consumer that the GPU Python
# tests use (issue 27): NVIDIA's `cuda-core` with `cuda-bindings` 12.x (works with CUDA 12
# and 13 drivers) and `cuda-pathfinder`, about 14 MB together, into the git-ignored .whl/,
# for a GPU host without network access. (CuPy, ~137 MB, and numba-cuda with llvmlite,
# ~65 MB, do not fit beside the GPU bundle in the 64 MiB carried to the device.)
#
#   scripts/fetch-gpu-wheels.sh                 # for this machine's python3 version
#   PYVER=3.12 scripts/fetch-gpu-wheels.sh      # for another CPython (>= 3.10)
#
# On the GPU host:
#   python -m pip install --no-index --find-links .whl cuda-core cuda-bindings cuda-pathfinder
#   python -m pytest -q crates/python/tests/test_device_gpu.py   # DETKIT_BACKEND unused: CUDA
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
PYVER="${PYVER:-$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')}"
mkdir -p .whl
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "$PYVER" \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl 'cuda-core==1.2.*' 'cuda-bindings==12.9.*' 'cuda-pathfinder>=1.4.2'
ls -l .whl/cuda_*.whl
du -ch .whl/cuda_*.whl | tail -1
