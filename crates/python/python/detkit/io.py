"""Readers of the ``detkit`` command-line tool's file formats (and writers of the PET
singles and pairs files): the library's own (Rust) readers and writers, so a malformed file is named the same way in Python, in ``detkit.dask`` and by the
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

from . import COINCIDENCE_DTYPE, FRAME_DTYPE, SINGLE_DTYPE, Scanner, _detkit, _records

__all__ = [
    "read_digis",
    "read_spacepoints",
    "read_frames",
    "read_singles",
    "read_pairs",
    "read_scanner",
    "write_singles",
    "write_pairs",
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
    """PET singles (``SINGLE_DTYPE``) of a file written by ``detkit pet convert`` / ``sort``
    (or :func:`write_singles`): ``.bin`` is the 16-byte header (magic ``DKSNGL01``, ``u64``
    little-endian count) and 16-byte records, the count checked against the length (energies
    and times must be finite); any other name is CSV ``crystal,energy,time``. A pairs file or
    a headerless ``.bin`` of detkit 0.1 is refused with a message saying how to convert it.
    Also ``detkit.read_singles``."""
    return _detkit.read_singles(os.fspath(path)).view(SINGLE_DTYPE)


def read_pairs(path) -> np.ndarray:
    """PET coincidence pairs (``COINCIDENCE_DTYPE``) of a file written by ``detkit pet
    coincide`` / ``run`` (or :func:`write_pairs`): ``.bin`` is the 16-byte header (magic
    ``DKPAIR01``, ``u64`` count) and 32-byte records; any other name the pairs CSV
    (``crystal_a,energy_a,time_a,crystal_b,energy_b,time_b``). Also ``detkit.read_pairs``."""
    return _detkit.read_pairs(os.fspath(path)).view(COINCIDENCE_DTYPE)


def write_singles(path, singles) -> None:
    """Writes singles (``SINGLE_DTYPE``) as ``detkit pet`` reads them: ``.bin`` with the
    ``DKSNGL01`` header, other names CSV. Converts a headerless singles file of detkit 0.1:
    ``write_singles("new.bin", np.fromfile("old.bin", SINGLE_DTYPE))``. Also
    ``detkit.write_singles``."""
    _detkit.write_singles_file(os.fspath(path), _records(singles, SINGLE_DTYPE, "singles"))


def write_pairs(path, pairs) -> None:
    """Writes pairs (``COINCIDENCE_DTYPE``): ``.bin`` with the ``DKPAIR01`` header, other
    names CSV. Also ``detkit.write_pairs``."""
    _detkit.write_pairs_file(os.fspath(path), _records(pairs, COINCIDENCE_DTYPE, "pairs"))


def read_scanner(path) -> Scanner:
    """A scanner TOML file and its tables, read once (the same as ``detkit.Scanner(path)``)."""
    return Scanner(os.fspath(path))
