"""detkit: reconstruction kernels for particle and medical-imaging detectors, from numpy.

Every call runs on the CUDA GPU when ``Backend("cuda")`` (or ``"auto"`` with a driver and a
device) is used, else on the CPU references; both give the same results, bit for bit. The GIL
is released during every GPU or CPU computation.

Arrays of another integer or float dtype are converted when every value fits (a value that
does not fit is a ``TypeError`` naming the dtype: an integer converts to ``float32`` only when
it is exact there, below 2^24 in magnitude for most; a ``float64`` converts to ``float32`` when
finite there, rounded to the nearest ``float32``); non-contiguous arrays are copied to
contiguous ones. Numbers are not bools: ``charge_cut=True`` or ``min_pt=True`` is a
``TypeError``. A size that needs more memory than there is raises ``MemoryError`` before
anything is allocated.
Bad input raises ``InvalidInputError`` (a ``ValueError``) with the library's message.

>>> import numpy as np, detkit
>>> b = detkit.Backend("cpu")
>>> b.scan(np.array([3, 1, 4, 1, 5], dtype=np.uint32)).tolist()
[0, 3, 4, 8, 9]
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

import numpy as np

from . import _detkit
from ._detkit import CapacityError, CudaError, InvalidInputError

__all__ = [
    "Backend",
    "InvalidInputError",
    "CapacityError",
    "CudaError",
    "SINGLE_DTYPE",
    "COINCIDENCE_DTYPE",
    "FRAME_DTYPE",
    "POLICIES",
    "generate",
    "read_singles",
    "read_pairs",
    "write_singles",
    "write_pairs",
]

#: A PET single, identical to the ``#[repr(C)]`` ``Single`` (16 bytes): the records of a
#: ``.bin`` singles file after its 16-byte header (:func:`read_singles`, or
#: ``np.fromfile(path, SINGLE_DTYPE, offset=16)``).
SINGLE_DTYPE = np.dtype([("crystal", "<u4"), ("energy", "<f4"), ("time", "<f8")], align=True)
#: A coincidence pair (32 bytes): two singles.
COINCIDENCE_DTYPE = np.dtype([("a", SINGLE_DTYPE), ("b", SINGLE_DTYPE)], align=True)
#: A raw ``DataFrameV2`` frame (16 bytes, big-endian fields inside, read as raw bytes).
FRAME_DTYPE = np.dtype((np.void, 16))
#: Multiple-coincidence policies (GATE names).
POLICIES = (
    "killAll",
    "takeAllGoods",
    "takeWinnerOfGoods",
    "takeWinnerIfIsGood",
    "takeWinnerIfAllAreGoods",
    "killAllIfMultipleGoods",
)

_sizes = _detkit.record_sizes()
assert (SINGLE_DTYPE.itemsize, COINCIDENCE_DTYPE.itemsize, FRAME_DTYPE.itemsize) == _sizes, _sizes


def _as(a, dtype, name: str) -> np.ndarray:
    """``a`` as a contiguous 1-D array of ``dtype``, converting only when every value fits."""
    arr = np.asarray(a)
    dtype = np.dtype(dtype)
    if arr.ndim != 1:
        raise TypeError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    if arr.dtype != dtype:
        if arr.size and dtype.kind == "f" and arr.dtype.kind in "ui":
            with np.errstate(invalid="ignore", over="ignore"):
                conv = arr.astype(dtype)
                back = np.where(np.isfinite(conv), conv, 0).astype(arr.dtype)
            bad = np.flatnonzero(~np.isfinite(conv) | (back != arr))
            if bad.size:
                raise TypeError(
                    f"{name}: dtype {arr.dtype} does not convert to {dtype} without loss "
                    f"(value {arr[bad[0]]} at index {bad[0]} is not exact in {dtype})"
                )
        elif arr.size and dtype.kind == "f" and arr.dtype.kind == "f" and arr.dtype.itemsize > dtype.itemsize:
            with np.errstate(over="ignore"):
                conv = arr.astype(dtype)
            bad = np.flatnonzero(np.isfinite(arr) & ~np.isfinite(conv))
            if bad.size:
                raise TypeError(
                    f"{name}: dtype {arr.dtype} does not convert to {dtype} without loss "
                    f"(value {arr[bad[0]]} at index {bad[0]} overflows {dtype})"
                )
        if arr.size and dtype.kind in "ui":
            if arr.dtype.kind not in "uib" or (
                arr.dtype.kind != "b"
                and (arr.min() < np.iinfo(dtype).min or arr.max() > np.iinfo(dtype).max)
            ):
                raise TypeError(
                    f"{name}: dtype {arr.dtype} does not convert to {dtype} without loss"
                )
        elif arr.size and dtype.kind == "f" and arr.dtype.kind not in "uif":
            raise TypeError(f"{name}: dtype {arr.dtype} is not a number type")
        arr = arr.astype(dtype)
    return np.ascontiguousarray(arr)


def _records(a, dtype, name: str) -> np.ndarray:
    """A 1-D array of the structured ``dtype`` as its raw bytes (``uint8``)."""
    arr = np.ascontiguousarray(np.asarray(a))
    if arr.dtype != dtype:
        raise TypeError(f"{name}: expected dtype detkit.{_dtype_name(dtype)}, got {arr.dtype}")
    if arr.ndim != 1:
        raise TypeError(f"{name}: expected a 1-D array of detkit.{_dtype_name(dtype)}, got shape {arr.shape}")
    return arr.view(np.uint8)


def _dtype_name(dtype) -> str:
    return {SINGLE_DTYPE: "SINGLE_DTYPE", COINCIDENCE_DTYPE: "COINCIDENCE_DTYPE"}.get(dtype, str(dtype))


def _device_list(kind: str, devices) -> list:
    """The ordinals of ``devices``: ``"all"``, ``"0,1"``, an int count for ``"cpu"``, or a
    sequence of ordinals."""
    if isinstance(devices, str):
        if devices.strip().lower() == "all":
            if kind == "cpu":
                return list(range(os.cpu_count() or 1))
            n = _detkit.device_count()
            if n == 0:
                raise InvalidInputError("devices='all': the CUDA driver reports no device")
            return list(range(n))
        try:
            devices = [int(p) for p in devices.split(",")]
        except ValueError:
            raise InvalidInputError(f"devices={devices!r}: expected 'all' or ordinals such as '0,1'") from None
    elif isinstance(devices, int):
        devices = list(range(devices))
    devices = [int(d) for d in devices]
    if not devices:
        raise InvalidInputError("devices: empty list")
    if len(set(devices)) != len(devices):
        raise InvalidInputError(f"devices={devices!r}: a device is listed twice")
    return devices


class Backend:
    """Where detkit runs: ``"auto"`` (CUDA when a driver and a device are present, else the
    CPU), ``"cpu"`` or ``"cuda"``; ``device`` is the CUDA device ordinal.

    ``devices`` makes a pool of several GPUs (``"all"``, ``"0,1"`` or ``[0, 1]``; with
    ``"cpu"``, the number of CPU backends): :meth:`map` spreads work over them, one host
    thread per device, results in input order; the other methods run on the first device.
    """

    def __init__(self, kind: str = "auto", device: int = 0, devices=None) -> None:
        if devices is None:
            self._b = _detkit.Backend(kind, device)
            self._members = [self]
            return
        ordinals = _device_list(kind, devices)
        member_kind = "cpu" if kind == "cpu" else "cuda"
        self._members = []
        for d in ordinals:
            m = Backend.__new__(Backend)
            m._b = _detkit.Backend(member_kind, 0 if member_kind == "cpu" else d)
            m._members = [m]
            self._members.append(m)
        self._b = self._members[0]._b

    @property
    def devices(self) -> int:
        """Number of devices (backends) :meth:`map` spreads work over."""
        return len(self._members)

    def map(self, fn, items) -> list:
        """``[fn(backend, item) for item in items]`` with the items spread over the pool's
        devices (one thread each; detkit releases the GIL while it computes, so the devices
        work at the same time). Results are in input order. The first failure (lowest index
        among those run) is raised after the running items finish; no new items start."""
        items = list(items)
        if len(self._members) == 1:
            return [fn(self._members[0], x) for x in items]
        import threading

        results = [None] * len(items)
        errors = [None] * len(items)
        lock = threading.Lock()
        stop = threading.Event()
        order = iter(range(len(items)))

        def work(member):
            while not stop.is_set():
                with lock:
                    i = next(order, None)
                if i is None:
                    return
                try:
                    results[i] = fn(member, items[i])
                except BaseException as e:  # re-raised in the caller's thread below
                    errors[i] = e
                    stop.set()
                    return

        threads = [threading.Thread(target=work, args=(m,), daemon=True) for m in self._members]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for e in errors:
            if e is not None:
                raise e
        return results

    @property
    def kind(self) -> str:
        """``"cpu"`` or ``"cuda"``."""
        return self._b.kind

    @property
    def description(self) -> str:
        """Which backend runs and why."""
        return self._b.description

    def __repr__(self) -> str:
        return f"detkit.Backend({self.kind!r})"

    # -- primitives ---------------------------------------------------------------------

    def scan(self, values, inclusive: bool = False) -> np.ndarray:
        """Prefix sums (wrapping, as CUB) of a ``uint32`` or ``uint64`` array."""
        arr = np.asarray(values)
        if arr.dtype == np.uint64:
            return self._b.scan_u64(_as(arr, np.uint64, "values"), inclusive)
        return self._b.scan_u32(_as(arr, np.uint32, "values"), inclusive)

    def select(self, values, lo: int, hi: int) -> np.ndarray:
        """The ``uint32`` values ``v`` with ``lo <= v < hi``, in input order."""
        return self._b.select_in_range(_as(values, np.uint32, "values"), lo, hi)

    def histogram(self, keys, nbins: int) -> Tuple[np.ndarray, int, Optional[int]]:
        """``(counts, out_of_range, first_out_of_range)``: key ``k < nbins`` counts in bin
        ``k``; other keys are counted apart and the index of the first is returned."""
        return self._b.histogram(_as(keys, np.uint32, "keys"), nbins)

    def radix_sort(self, keys, values=None, begin_bit: int = 0, end_bit: Optional[int] = None, descending: bool = False):
        """Stable LSD radix sort of ``uint32`` or ``uint64`` keys by their bits
        ``begin_bit .. end_bit`` (``None``: all; bits outside the range take no part in the
        order and are kept). ``values`` (any dtype of 4, 8, 12 or 16 bytes per key, e.g.
        ``uint32`` indices, ``float64``, a 16-byte record) follow their keys. Returns the
        sorted keys, or ``(keys, values)``. Equal keys keep their input order, also with
        ``descending``."""
        k = np.asarray(keys)
        if k.dtype == np.uint64:
            k, fn = _as(k, np.uint64, "keys"), self._b.radix_sort_u64
        else:
            k, fn = _as(k, np.uint32, "keys"), self._b.radix_sort_u32
        if values is None:
            out, _ = fn(k, None, 0, int(begin_bit), None if end_bit is None else int(end_bit), bool(descending))
            return out
        v = np.ascontiguousarray(values)
        if v.ndim != 1 or v.shape[0] != k.shape[0]:
            raise InvalidInputError(f"values: expected {k.shape[0]} values in one dimension, got shape {v.shape}")
        raw = v.view(np.uint8).reshape(-1)
        out, vraw = fn(k, raw, v.dtype.itemsize, int(begin_bit), None if end_bit is None else int(end_bit), bool(descending))
        return out, vraw.view(v.dtype)

    def argsort(self, keys, begin_bit: int = 0, end_bit: Optional[int] = None, descending: bool = False) -> np.ndarray:
        """``uint32`` indices that stably sort ``keys`` (as :meth:`radix_sort`)."""
        k = np.asarray(keys)
        return self.radix_sort(k, np.arange(k.shape[0], dtype=np.uint32), begin_bit, end_bit, descending)[1]

    # -- CMS pixel clustering -------------------------------------------------------------

    def cluster(
        self,
        module,
        x,
        y,
        adc,
        geometry: str = "phase1",
        charge_cut=None,
        event_offsets=None,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Clusters digis (``uint16`` arrays; ``module`` 65534 = invalid digi; one module's
        digis consecutive; ``adc`` = charge in electrons).

        ``charge_cut``: ``None`` for the geometry's CMS cut (Phase-1: 2000 e- on layer 1,
        4000 elsewhere), a number of electrons for every module, or ``False`` for no cut.
        ``event_offsets``: ``uint32`` boundaries ``[0, ..., n]`` of several events.

        Returns ``(clus, clus_in_module)``: ``int32`` cluster index of every digi within its
        module (-1: invalid, duplicate pixel or cut), and the cluster count of every
        (event, module).
        """
        offs = None if event_offsets is None else _as(event_offsets, np.uint32, "event_offsets")
        return self._b.cluster(
            _as(module, np.uint16, "module"),
            _as(x, np.uint16, "x"),
            _as(y, np.uint16, "y"),
            _as(adc, np.uint16, "adc"),
            geometry,
            charge_cut,
            offs,
        )

    # -- PET --------------------------------------------------------------------------------

    def convert(self, frames, scanner) -> Tuple[np.ndarray, dict]:
        """Raw frames (bytes, ``uint8`` or ``FRAME_DTYPE`` array, 16 bytes a frame) to singles
        (``SINGLE_DTYPE``), with the scanner description at path ``scanner`` (TOML); also
        returns the conversion statistics."""
        if isinstance(frames, (bytes, bytearray, memoryview)):
            raw = np.frombuffer(frames, dtype=np.uint8)
        else:
            arr = np.asarray(frames)
            if arr.dtype not in (np.dtype(np.uint8), FRAME_DTYPE) or arr.ndim != 1:
                raise TypeError(
                    f"frames: expected raw frame bytes (bytes, a 1-D uint8 or detkit.FRAME_DTYPE "
                    f"array), got dtype {arr.dtype} of shape {arr.shape}"
                )
            raw = np.ascontiguousarray(arr).view(np.uint8)
        out, stats = self._b.pet_convert(raw, os.fspath(scanner))
        return out.view(SINGLE_DTYPE), stats

    def sort(self, singles) -> np.ndarray:
        """Singles (``SINGLE_DTYPE``) stably sorted by time."""
        return self._b.pet_sort(_records(singles, SINGLE_DTYPE, "singles")).view(SINGLE_DTYPE)

    def coincide(self, singles, window: float, delay: Optional[float] = None, policy: str = "killAll") -> np.ndarray:
        """Coincidence pairs (``COINCIDENCE_DTYPE``) of time-sorted singles: a single opens a
        window of ``window`` ticks (a delayed window ``delay`` ticks later when given);
        ``policy`` (one of ``POLICIES``) decides windows of more than two singles."""
        out = self._b.pet_coincide(_records(singles, SINGLE_DTYPE, "singles"), float(window), None if delay is None else float(delay), policy)
        return out.view(COINCIDENCE_DTYPE)

    # -- track seeding --------------------------------------------------------------------

    def seed(self, x, y, z, var_r=None, var_z=None, **settings):
        """traccc-style triplet seeding of spacepoints (mm, global frame; variances in mm²,
        0 when not given). ``settings``: fields of traccc's configuration over its defaults
        (e.g. ``min_pt=0.9`` GeV); an unknown name is an ``InvalidInputError``.

        Returns ``(seeds, weight, z_vertex, params)``: ``seeds`` ``(n, 3)`` ``uint32`` input
        indices (bottom, middle, top), ``weight`` and ``z_vertex`` (mm) ``float32``, ``params``
        ``(n, 5)`` ``float32`` (loc0 mm, loc1 mm, phi rad, theta rad, qop e/GeV).
        """
        return self._b.seed(*_seed_columns(x, y, z, var_r, var_z), _settings_toml(settings))

    def seed_events(self, events, **settings):
        """Seeds several events in one call: ``events`` is a sequence of ``(x, y, z)`` or
        ``(x, y, z, var_r, var_z)`` tuples, one per event; the result is a list of what
        :meth:`seed` returns, one per event, in the same order. On CUDA the events share one
        pass of the device chain (no host synchronisation per event), which is how an H200
        reaches its events/s; the seeds equal those of one :meth:`seed` call per event.
        """
        cols = []
        for i, ev in enumerate(events):
            ev = tuple(ev)
            if len(ev) not in (3, 5):
                raise InvalidInputError(f"event {i}: expected (x, y, z) or (x, y, z, var_r, var_z), got {len(ev)} arrays")
            try:
                cols.append(_seed_columns(*ev))
            except InvalidInputError as e:
                raise InvalidInputError(f"event {i}: {e}") from None
        return self._b.seed_events(cols, _settings_toml(settings))


def _seed_columns(x, y, z, var_r=None, var_z=None):
    """The five float32 columns of one seeding event (variances 0 when not given), checked
    for equal lengths."""
    x = _as(x, np.float32, "x")
    n = x.shape[0]
    zeros = np.zeros(n, dtype=np.float32)
    cols = [x, _as(y, np.float32, "y"), _as(z, np.float32, "z"),
            zeros if var_r is None else _as(var_r, np.float32, "var_r"),
            zeros if var_z is None else _as(var_z, np.float32, "var_z")]
    for name, c in zip(("y", "z", "var_r", "var_z"), cols[1:]):
        if c.shape[0] != n:
            raise InvalidInputError(f"{name} has {c.shape[0]} values, x has {n}")
    return cols


def _settings_toml(settings):
    """Seeding settings as the TOML lines the library reads: numbers only, bools refused
    (unknown names are the library's error)."""
    return _detkit.settings_toml(dict(settings))


def read_singles(path) -> np.ndarray:
    """The singles of a file written by ``detkit pet convert`` / ``sort`` (``SINGLE_DTYPE``):
    ``.bin`` is the 16-byte header (magic ``DKSNGL01``, ``u64`` count) and 16-byte records,
    other names CSV ``crystal,energy,time``. The library's reader: the count is checked
    against the length, and a pairs or headerless file is refused with a message."""
    return _detkit.read_singles_file(os.fspath(path)).view(SINGLE_DTYPE)


def read_pairs(path) -> np.ndarray:
    """The pairs of a file written by ``detkit pet coincide`` / ``run``
    (``COINCIDENCE_DTYPE``): ``.bin`` (header ``DKPAIR01``) or CSV."""
    return _detkit.read_pairs_file(os.fspath(path)).view(COINCIDENCE_DTYPE)


def write_singles(path, singles) -> None:
    """Writes singles (``SINGLE_DTYPE``) as ``detkit pet`` reads them: ``.bin`` with the
    header, other names CSV. Converts a headerless singles file of detkit 0.1:
    ``write_singles("new.bin", np.fromfile("old.bin", SINGLE_DTYPE))``."""
    _detkit.write_singles_file(os.fspath(path), _records(singles, SINGLE_DTYPE, "singles"))


def write_pairs(path, pairs) -> None:
    """Writes pairs (``COINCIDENCE_DTYPE``): ``.bin`` with the header, other names CSV."""
    _detkit.write_pairs_file(os.fspath(path), _records(pairs, COINCIDENCE_DTYPE, "pairs"))


class generate:
    """Generated events for examples and tests (the library's generators)."""

    @staticmethod
    def cluster_event(seed: int = 1, dense: bool = False):
        """A CMS Phase-1 event: ``(module, x, y, adc)`` ``uint16`` arrays (Run-3-like pile-up,
        or heavy-ion-like with ``dense``)."""
        return _detkit.generate_cluster_event(seed, dense)

    @staticmethod
    def seeding_event(seed: int = 1, mu: float = 200.0):
        """Spacepoints at pile-up ``mu``: ``(x, y, z, var_r, var_z, particle)``."""
        return _detkit.generate_seeding_event(seed, mu)

    @staticmethod
    def pet_acquisition(directory, singles: int = 100_000, seed: int = 1) -> int:
        """Writes ``scanner.toml``, its tables and ``frames.bin`` into ``directory`` (which
        must exist); returns the number of frames."""
        return _detkit.generate_pet_acquisition(os.fspath(directory), singles, seed)
