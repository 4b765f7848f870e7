"""Readers of the ``detkit`` command-line tool's file formats: the library's own (Rust)
readers, so a malformed file is named the same way in Python, in ``detkit.dask`` and by the
CLI.

A file that cannot be read raises ``OSError`` of the operating system's kind
(``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``, ...) with ``errno`` and
``filename`` set; a malformed file raises :class:`detkit.InvalidInputError` naming
``FILE:LINE`` and the column (CSV) or the file (binary formats). The GIL is released while a
file is read and parsed.

CSV rules (every reader): columns found by header name in any order, other columns ignored,
fields trimmed, a UTF-8 byte-order mark accepted, blank lines skipped, a header with no rows
is zero items, no header is an error; integers in range; floats parsed as the record's type.

>>> import detkit.io                                                  # doctest: +SKIP
>>> module, x, y, adc = detkit.io.read_digis("event.bin")            # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Tuple

import numpy as np

from . import COINCIDENCE_DTYPE, FRAME_DTYPE, SINGLE_DTYPE, Scanner, _detkit

__all__ = [
    "read_digis",
    "read_spacepoints",
    "read_frames",
    "read_singles",
    "read_pairs",
    "read_scanner",
]


def read_digis(path) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digis of a ``detkit cluster`` input file: ``(module, x, y, adc)``, ``uint16``.

    Binary ``DKDIGI01`` (magic, ``u32`` little-endian count ``n``, then ``module``, ``x``,
    ``y``, ``adc``: ``n`` little-endian ``u16`` each) is detected by its magic; any other file
    is CSV with the columns ``module,x,y,adc``."""
    return _detkit.read_digis(os.fspath(path))


def read_spacepoints(path) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The spacepoints of a ``detkit seed`` input CSV: ``(x, y, z, var_r, var_z)``,
    ``float32`` (mm, mm²). ``var_r``, ``var_z`` are optional columns (0 when absent).
    Coordinates must be finite, variances finite and non-negative."""
    return _detkit.read_spacepoints(os.fspath(path))


def read_frames(path) -> np.ndarray:
    """The raw PET frames of a file (``detkit pet generate``'s ``frames.bin``), as a
    ``FRAME_DTYPE`` array (16 bytes a frame; the size must be a whole number of frames)."""
    return _detkit.read_frames(os.fspath(path)).view(FRAME_DTYPE)


def read_singles(path) -> np.ndarray:
    """PET singles (``SINGLE_DTYPE``): ``.bin`` raw 16-byte records (energies and times must
    be finite), any other name CSV ``crystal,energy,time``."""
    return _detkit.read_singles(os.fspath(path)).view(SINGLE_DTYPE)


def read_pairs(path) -> np.ndarray:
    """PET coincidence pairs (``COINCIDENCE_DTYPE``): ``.bin`` raw 32-byte records, any other
    name the pairs CSV (``crystal_a,energy_a,time_a,crystal_b,energy_b,time_b``)."""
    return _detkit.read_pairs(os.fspath(path)).view(COINCIDENCE_DTYPE)


def read_scanner(path) -> Scanner:
    """A scanner TOML file and its tables, read once (the same as ``detkit.Scanner(path)``)."""
    return Scanner(os.fspath(path))
