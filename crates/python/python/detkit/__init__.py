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

Result arrays are yours: a result you keep is never overwritten by a later call. A backend
reuses the memory of a result only once nothing in Python refers to it any more (the array,
and every view of it, gone): a loop that drops or replaces its results writes each call into
memory already mapped instead of fresh pages, which is where most of a large call's host time
went. Results are therefore often views (``a.base`` is the backend's memory); ``a.copy()``
gives an array of its own. :meth:`Backend.release_results` frees the memory kept for reuse.
On a CUDA backend the clustering results lie in page-locked memory that the backend recycles
(the GPU writes them straight into it, with no copy through a staging buffer); a result held
keeps its memory, and may outlive its backend.
``Backend.cluster`` also takes ``out=(clus, clus_in_module)``: arrays of yours it writes into.

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
from ._detkit import CapacityError, CudaError, DeviceArray, InvalidInputError, Scanner

__all__ = [
    "Backend",
    "Scanner",
    "DeviceArray",
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
    if type(a) is np.ndarray and a.dtype == dtype and a.ndim == 1 and a.flags.c_contiguous:
        return a  # the common case, without numpy's conversion calls
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
    """A 1-D array of the structured ``dtype`` as its raw bytes (``uint8``); ``uint8`` rows of
    ``dtype.itemsize`` bytes (a :class:`DeviceArray` of records) are the same bytes."""
    arr = np.ascontiguousarray(np.asarray(a))
    if arr.dtype == np.uint8 and arr.ndim == 2 and arr.shape[1] == dtype.itemsize:
        return arr.reshape(-1)
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

    ``threads``: CPU threads of this backend, a pool of its own (``None``, the default: the
    process's shared pool, ``RAYON_NUM_THREADS`` threads or one per core). Results never
    depend on it.
    """

    def __init__(self, kind: str = "auto", device: int = 0, devices=None, threads=None) -> None:
        self._pool = None
        if devices is None:
            self._b = _detkit.Backend(kind, device, threads)
            self._members = [self]
            return
        if threads is not None:
            raise InvalidInputError(
                "threads= applies to one backend; the members of a pool (devices=) run their "
                "CPU work on the process's shared pool (RAYON_NUM_THREADS)"
            )
        ordinals = _device_list(kind, devices)
        self._pool = _detkit.DevicePool("cpu" if kind == "cpu" else "cuda", ordinals)
        self._members = []
        for inner in self._pool.members():
            m = Backend.__new__(Backend)
            m._b, m._members, m._pool = inner, [m], None
            self._members.append(m)
        self._b = self._members[0]._b

    @property
    def devices(self) -> int:
        """Number of devices (backends) :meth:`map` spreads work over."""
        return len(self._members)

    def map(self, fn, items) -> list:
        """``[fn(backend, item) for item in items]`` with the items spread over the pool's
        devices by the library's ``DevicePool`` (one host thread per device, each taking the
        next item when done; detkit releases the GIL while it computes, so the devices work
        at the same time). Results are in input order. The first failure (lowest index among
        those run) is raised after the running items finish; no new items start."""
        items = list(items)
        if self._pool is None:
            return [fn(self, x) for x in items]
        return self._pool.map(fn, items, self._members)

    @property
    def kind(self) -> str:
        """``"cpu"`` or ``"cuda"``."""
        return self._b.kind

    @property
    def threads(self) -> int:
        """CPU threads the backend's CPU work runs on."""
        return self._b.threads

    @property
    def description(self) -> str:
        """Which backend runs and why."""
        return self._b.description

    def __repr__(self) -> str:
        return f"detkit.Backend({self.kind!r})"

    def to_device(self, a, *, stream=None) -> "DeviceArray":
        """A :class:`DeviceArray` copy of the numpy array ``a`` on this backend's device
        (CUDA backends only), made on the backend's stream (``stream`` waits for it)."""
        a = np.ascontiguousarray(a)
        if a.dtype.fields is not None:
            return DeviceArray.from_host(self._b, a.reshape(-1).view(np.uint8), "|u1",
                                         (a.size, a.dtype.itemsize), a.dtype, stream)
        return DeviceArray.from_host(self._b, a.reshape(-1).view(np.uint8), a.dtype.str, a.shape, None, stream)

    def pinned_empty(self, shape, dtype=np.float64) -> np.ndarray:
        """A zeroed numpy array of ``shape`` and ``dtype`` in page-locked (pinned) host memory
        that detkit allocated, as ``cupyx.empty_pinned``. :meth:`cluster` copies digis from
        such arrays and cluster indices into them (``out=``) by DMA, with no staging copy
        through memory of its own: keep your event buffers and result arrays in them and
        reuse them (allocating pinned memory is slow and locks the pages). The memory lives
        as long as the array or any view of it. On the CPU backend: ``numpy.zeros`` (ordinary
        memory), so the same code runs without a GPU."""
        return self._b.pinned_empty(shape, dtype)

    # -- primitives ---------------------------------------------------------------------

    def scan(self, values, inclusive: bool = False, *, stream=None) -> np.ndarray:
        """Prefix sums (wrapping, as CUB) of a ``uint32`` or ``uint64`` array."""
        c = _Call(self, stream)
        d = c.native(_detkit.device_scan, values, "values", inclusive)
        if d is not None:
            return d
        arr = np.asarray(c.host(values, "values"))
        if arr.dtype == np.uint64:
            return c.out(self._b.scan_u64(_as(arr, np.uint64, "values"), inclusive))
        return c.out(self._b.scan_u32(_as(arr, np.uint32, "values"), inclusive))

    def select(self, values, lo: int, hi: int, *, stream=None) -> np.ndarray:
        """The ``uint32`` values ``v`` with ``lo <= v < hi``, in input order."""
        c = _Call(self, stream)
        d = c.native(_detkit.device_select, values, "values", lo, hi)
        if d is not None:
            return d
        return c.out(self._b.select_in_range(c.arr(values, np.uint32, "values"), lo, hi))

    def histogram(self, keys, nbins: int, *, stream=None) -> Tuple[np.ndarray, int, Optional[int]]:
        """``(counts, out_of_range, first_out_of_range)``: key ``k < nbins`` counts in bin
        ``k``; other keys are counted apart and the index of the first is returned."""
        c = _Call(self, stream)
        d = c.native(_detkit.device_histogram, keys, "keys", int(nbins))
        if d is not None:
            return d
        counts, out, first = self._b.histogram(c.arr(keys, np.uint32, "keys"), nbins)
        return c.out(counts), out, first

    def radix_sort(self, keys, values=None, begin_bit: int = 0, end_bit: Optional[int] = None, descending: bool = False, *, stream=None):
        """Stable LSD radix sort of ``uint32`` or ``uint64`` keys by their bits
        ``begin_bit .. end_bit`` (``None``: all; bits outside the range take no part in the
        order and are kept). ``values`` (any dtype of 4, 8, 12 or 16 bytes per key, e.g.
        ``uint32`` indices, ``float64``, a 16-byte record) follow their keys. Returns the
        sorted keys, or ``(keys, values)``. Equal keys keep their input order, also with
        ``descending``."""
        c = _Call(self, stream)
        if values is None:
            d = c.native(_detkit.device_sort, keys, "keys", int(begin_bit),
                         None if end_bit is None else int(end_bit), bool(descending), False)
            if d is not None:
                return d[0]
        k = np.asarray(c.host(keys, "keys"))
        if k.dtype == np.uint64:
            k, fn = _as(k, np.uint64, "keys"), self._b.radix_sort_u64
        else:
            k, fn = _as(k, np.uint32, "keys"), self._b.radix_sort_u32
        if values is None:
            out, _ = fn(k, None, 0, int(begin_bit), None if end_bit is None else int(end_bit), bool(descending))
            return c.out(out)
        v = np.ascontiguousarray(c.host(values, "values"))
        if v.ndim != 1 or v.shape[0] != k.shape[0]:
            raise InvalidInputError(f"values: expected {k.shape[0]} values in one dimension, got shape {v.shape}")
        raw = v.view(np.uint8).reshape(-1)
        out, vraw = fn(k, raw, v.dtype.itemsize, int(begin_bit), None if end_bit is None else int(end_bit), bool(descending))
        return c.out(out), c.out(vraw.view(v.dtype))

    def argsort(self, keys, begin_bit: int = 0, end_bit: Optional[int] = None, descending: bool = False, *, stream=None) -> np.ndarray:
        """``uint32`` indices that stably sort ``keys`` (as :meth:`radix_sort`)."""
        c = _Call(self, stream)
        d = c.native(_detkit.device_sort, keys, "keys", int(begin_bit),
                     None if end_bit is None else int(end_bit), bool(descending), True)
        if d is not None:
            return d[1]
        k = np.asarray(c.host(keys, "keys"))
        idx = self.radix_sort(k, np.arange(k.shape[0], dtype=np.uint32), begin_bit, end_bit, descending)[1]
        return c.out(idx)

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
        *,
        out=None,
        stream=None,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Clusters digis (``uint16`` arrays; ``module`` 65534 = invalid digi; one module's
        digis consecutive; ``adc`` = charge in electrons).

        ``charge_cut``: ``None`` for the geometry's CMS cut (Phase-1: 2000 e- on layer 1,
        4000 elsewhere), a number of electrons for every module, or ``False`` for no cut.
        ``event_offsets``: ``uint32`` boundaries ``[0, ..., n]`` of several events.

        Returns ``(clus, clus_in_module)``: ``int32`` cluster index of every digi within its
        module (-1: invalid, duplicate pixel or cut), and the cluster count of every
        (event, module).

        ``out``: ``(clus, clus_in_module)`` arrays to write the results into and return
        (``int32`` of the digi count and ``uint32`` of events × modules, C-contiguous,
        writeable; a wrong dtype, dimension or layout is a ``TypeError``, a wrong length an
        ``InvalidInputError``). Without it the results are arrays whose memory the backend
        reuses once you drop them (see the package documentation); on a CUDA backend that memory
        is page-locked (the GPU writes the cluster indices straight into it).
        """
        nd = np.ndarray
        tm = type(module)
        if (stream is None and tm is nd and type(x) is nd and type(y) is nd and type(adc) is nd
                and (event_offsets is None or type(event_offsets) is nd)):
            # numpy in, numpy out: straight to the library (no device-array checks).
            return self._b.cluster(
                _as(module, np.uint16, "module"), _as(x, np.uint16, "x"), _as(y, np.uint16, "y"),
                _as(adc, np.uint16, "adc"), geometry, charge_cut,
                None if event_offsets is None else _as(event_offsets, np.uint32, "event_offsets"), out)
        if hasattr(tm, "__cuda_array_interface__") or hasattr(tm, "__dlpack_device__"):
            # A device-array producer: straight to the library, which opens the five arrays
            # itself and returns None unless the four digi arrays are CUDA uint16 arrays and
            # the offsets None, numpy uint32 or a CUDA uint32 array (then the general path
            # below decides).
            d = _detkit.device_cluster(self._b, module, x, y, adc, geometry, charge_cut,
                                       event_offsets, stream)
            if d is not None:
                if out is not None:
                    raise TypeError("out=: numpy arrays for numpy inputs; device inputs give DeviceArray results")
                return d
        c = _Call(self, stream)
        d = None
        if event_offsets is not None and c._foreign(event_offsets):
            # CUDA digis and CUDA offsets: the offsets are opened with the digis and read back
            # by the library (one ordering, no numpy array); None for any other kind of
            # offsets (another dtype, the CPU), which the lines below convert.
            d = c.native_many(_detkit.device_cluster, (module, x, y, adc), geometry, charge_cut,
                              event_offsets)
        if d is None:
            offs = None if event_offsets is None else c.arr(event_offsets, np.uint32, "event_offsets")
            d = c.native_many(_detkit.device_cluster, (module, x, y, adc), geometry, charge_cut, offs)
        if d is not None:
            if out is not None:
                raise TypeError("out=: numpy arrays for numpy inputs; device inputs give DeviceArray results")
            return d
        clus, per_module = self._b.cluster(
            c.arr(module, np.uint16, "module"),
            c.arr(x, np.uint16, "x"),
            c.arr(y, np.uint16, "y"),
            c.arr(adc, np.uint16, "adc"),
            geometry,
            charge_cut,
            offs,
            out,
        )
        return c.out(clus), c.out(per_module)

    # -- PET --------------------------------------------------------------------------------

    def convert(self, frames, scanner, *, stream=None) -> Tuple[np.ndarray, dict]:
        """Raw frames (bytes, ``uint8`` or ``FRAME_DTYPE`` array, 16 bytes a frame) to singles
        (``SINGLE_DTYPE``), with the scanner ``scanner``: a :class:`Scanner` (its tables read
        once, the fast way for repeated calls) or the path of its TOML file (read on every
        call); also returns the conversion statistics."""
        c = _Call(self, stream)
        d = c.native_many(_detkit.device_pet_convert, (frames,),
                          scanner if isinstance(scanner, Scanner) else os.fspath(scanner), SINGLE_DTYPE)
        if d is not None:
            return d
        if isinstance(frames, (bytes, bytearray, memoryview)):
            raw = np.frombuffer(frames, dtype=np.uint8)
        else:
            arr = np.asarray(c.host(frames, "frames"))
            rows = arr.dtype == np.uint8 and arr.ndim == 2 and arr.shape[1] == FRAME_DTYPE.itemsize
            if not rows and (arr.dtype not in (np.dtype(np.uint8), FRAME_DTYPE) or arr.ndim != 1):
                raise TypeError(
                    f"frames: expected raw frame bytes (bytes, a 1-D uint8 or detkit.FRAME_DTYPE "
                    f"array), got dtype {arr.dtype} of shape {arr.shape}"
                )
            raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        out, stats = self._b.pet_convert(raw, scanner if isinstance(scanner, Scanner) else os.fspath(scanner))
        return c.out(out.view(SINGLE_DTYPE), SINGLE_DTYPE), stats

    def sort(self, singles, *, stream=None) -> np.ndarray:
        """Singles (``SINGLE_DTYPE``) stably sorted by time. Singles on the device (the
        :class:`DeviceArray` that :meth:`convert` returns for device frames, or a CUDA array
        of ``uint8`` rows ``(n, 16)`` or ``16 n`` bytes) are sorted there, with no host round
        trip, and come back as a :class:`DeviceArray` of the same form."""
        c = _Call(self, stream)
        d = c.native_many(_detkit.device_pet_sort, (singles,), SINGLE_DTYPE)
        if d is not None:
            return d
        out = self._b.pet_sort(_records(c.host(singles, "singles"), SINGLE_DTYPE, "singles"))
        return c.out(out.view(SINGLE_DTYPE), SINGLE_DTYPE)

    def coincide(self, singles, window: float, delay: Optional[float] = None, policy: str = "killAll", *, stream=None) -> np.ndarray:
        """Coincidence pairs (``COINCIDENCE_DTYPE``) of time-sorted singles: a single opens a
        window of ``window`` ticks (a delayed window ``delay`` ticks later when given);
        ``policy`` (one of ``POLICIES``) decides windows of more than two singles. Singles on
        the device (as for :meth:`sort`) are paired there; the pairs come back as a
        :class:`DeviceArray` of ``uint8`` rows ``(n, 32)`` (``get()``: ``COINCIDENCE_DTYPE``)."""
        c = _Call(self, stream)
        d = c.native_many(_detkit.device_pet_coincide, (singles,), float(window),
                          None if delay is None else float(delay), policy, COINCIDENCE_DTYPE)
        if d is not None:
            return d
        out = self._b.pet_coincide(_records(c.host(singles, "singles"), SINGLE_DTYPE, "singles"), float(window), None if delay is None else float(delay), policy)
        return c.out(out.view(COINCIDENCE_DTYPE), COINCIDENCE_DTYPE)

    # -- track seeding --------------------------------------------------------------------

    def seed(self, x, y, z, var_r=None, var_z=None, *, stream=None, **settings):
        """traccc-style triplet seeding of spacepoints (mm, global frame; variances in mm²,
        0 when not given). ``settings``: fields of traccc's configuration over its defaults
        (e.g. ``min_pt=0.9`` GeV); an unknown name is an ``InvalidInputError``.

        Returns ``(seeds, weight, z_vertex, params)``: ``seeds`` ``(n, 3)`` ``uint32`` input
        indices (bottom, middle, top), ``weight`` and ``z_vertex`` (mm) ``float32``, ``params``
        ``(n, 5)`` ``float32`` (loc0 mm, loc1 mm, phi rad, theta rad, qop e/GeV).
        """
        c = _Call(self, stream)
        d = c.native_seed([(x, y, z, var_r, var_z)], settings, False)
        if d is not None:
            return d[0]
        out = self._b.seed(*_seed_columns(c, x, y, z, var_r, var_z), settings)
        return tuple(c.out(a) for a in out)

    def seed_events(self, events, *, stream=None, **settings):
        """Seeds several events in one call: ``events`` is a sequence of ``(x, y, z)`` or
        ``(x, y, z, var_r, var_z)`` tuples, one per event; the result is a list of what
        :meth:`seed` returns, one per event, in the same order. On CUDA the events share one
        pass of the device chain (no host synchronisation per event), which is how an H200
        reaches its events/s; the seeds equal those of one :meth:`seed` call per event.
        """
        if type(events) is list:
            # A list of tuples of five exact float32 numpy columns (the library tells: None
            # at the first column that is not, a CUDA array included) goes straight to the
            # library, before this layer's per-event work (~15 us for 64 events).
            r = self._b.seed_events_exact(events, settings)
            if r is not None:
                return r
        c = _Call(self, stream)
        events = [tuple(ev) for ev in events]
        if all(len(ev) in (3, 5) for ev in events):
            d = c.native_seed(events, settings, True)
            if d is not None:
                return d
        cols = _events_columns(c, events)
        return [tuple(c.out(a) for a in r) for r in self._b.seed_events(cols, settings)]

    def seed_events_flat(self, events, **settings):
        """:meth:`seed_events` with the results of all events in flat arrays, the fast form for
        large batches (no arrays per event): ``(seeds, weight, z_vertex, params, offsets)``,
        ``seeds`` ``(N, 3)``, ``params`` ``(N, 5)`` and ``offsets`` ``int64`` of ``E + 1``
        entries, event ``e``'s seeds being rows ``offsets[e]:offsets[e + 1]`` (the same rows,
        in the same order, as ``seed_events(events)[e]``). Numpy arrays in and out."""
        c = _Call(self, None)
        cols = _events_columns(c, events)
        if c.device:
            raise TypeError("seed_events_flat takes host (numpy) arrays; use seed_events for device arrays")
        return self._b.seed_events_flat(cols, settings)

    def seed_flat(self, x, y, z, var_r=None, var_z=None, *, event_offsets, stream=None, **settings):
        """:meth:`seed_events_flat` of events given back to back in five columns, as
        :meth:`cluster` takes digis: ``x``, ``y``, ``z`` (and the variances, 0 when not given)
        hold every event's spacepoints, event ``e`` being entries
        ``event_offsets[e]:event_offsets[e + 1]`` (``[0, ..., n]``). Returns ``(seeds,
        weight, z_vertex, params, offsets)`` as :meth:`seed_events_flat` does; the same seeds
        as :meth:`seed_events` of the events one by one. With CUDA columns the results are
        :class:`DeviceArray` s (``offsets`` stays a numpy array) and only five arrays are
        opened per call, however many events (``seed_events`` opens five per event)."""
        c = _Call(self, stream)
        offs = c.arr(event_offsets, np.int64, "event_offsets")
        cols = [x, y, z, var_r, var_z]
        if c.all_cuda(cols[:1]):
            d = _detkit.device_seed_flat(self._b, cols, offs, settings, stream=stream)
            if d is not None:
                return d
        if offs.size == 0 or offs[0] != 0 or np.any(np.diff(offs) < 0):
            raise InvalidInputError("event_offsets: expected non-decreasing [0, ..., n]")
        cols = _seed_columns(c, x, y, z, var_r, var_z)
        if offs[-1] != cols[0].shape[0]:
            raise InvalidInputError(
                f"event_offsets: ends at {offs[-1]}, the columns hold {cols[0].shape[0]} spacepoints")
        events = [tuple(a[lo:hi] for a in cols) for lo, hi in zip(offs[:-1], offs[1:])]
        out = self._b.seed_events_flat(events, settings)
        if not c.device:
            return out
        return tuple(c.out(a) for a in out[:4]) + (out[4],)

    def release_results(self) -> None:
        """Frees the memory this backend keeps for reusing results (results you still hold stay
        valid: their memory goes when they go)."""
        for m in self._members:
            m._b.release_results()


class _Call:
    """One call's array arguments and results. Numpy arrays (and anything that is not a
    DLPack or CUDA-array-interface producer) take the numpy path. A DLPack producer on the
    CPU (numpy >= 1.22, a CPU torch tensor, ...) is read through the protocol as a view of its
    memory; a CUDA array (DLPack or ``__cuda_array_interface__`` v3, on the backend's device)
    is ordered after its producer's stream and read by the library
    (``_detkit.import_array``). When any input came from the device, the results go back to
    the device as :class:`DeviceArray` (made on the backend's stream; ``stream``, when given,
    waits for them)."""

    __slots__ = ("b", "stream", "device")

    def __init__(self, backend: "Backend", stream) -> None:
        self.b, self.stream, self.device = backend._b, stream, False

    def host(self, a, name: str):
        if not self._foreign(a):
            return a
        arr, on_device = _detkit.import_array(self.b, a, name, self.stream)
        self.device = self.device or on_device
        return arr

    @staticmethod
    def _foreign(a) -> bool:
        # The type is asked first: `hasattr` on the object runs a property's getter (CuPy
        # builds its whole `__cuda_array_interface__` dict), which the call does once anyway.
        if isinstance(a, (np.ndarray, np.generic, bytes, bytearray, memoryview, list, tuple, range)):
            return False
        t = type(a)
        return (hasattr(t, "__cuda_array_interface__") or hasattr(t, "__dlpack__")
                or hasattr(a, "__cuda_array_interface__") or hasattr(a, "__dlpack__"))

    def native(self, fn, a, name: str, *args):
        """The device-resident form of a call (``_detkit.device_*``) for a CUDA array of the
        exact dtype on a CUDA backend: its result, or ``None`` for the general path."""
        if self.b.kind != "cuda" or not self._foreign(a) or getattr(a, "__dlpack_device__", lambda: (2, 0))()[0] not in (2, 13):
            return None
        return fn(self.b, a, name, *args, stream=self.stream)

    def all_cuda(self, arrays) -> bool:
        """Whether this is a CUDA backend and every one of ``arrays`` a CUDA array (DLPack
        device CUDA or CUDA-managed, or a CUDA-array-interface producer)."""
        return self.b.kind == "cuda" and len(arrays) > 0 and all(
            self._foreign(a) and getattr(a, "__dlpack_device__", lambda: (2, 0))()[0] in (2, 13)
            for a in arrays
        )

    def native_many(self, fn, arrays, *args):
        """As :meth:`native` for a call of several arrays, all CUDA arrays: ``fn`` gets them
        all (it returns ``None`` unless each has the exact dtype and layout)."""
        if not self.all_cuda(arrays):
            return None
        return fn(self.b, *arrays, *args, stream=self.stream)

    def native_seed(self, events, settings, batch: bool):
        """The device-resident seeding of events whose columns are all CUDA arrays
        (``_detkit.device_seed_events``): one result tuple per event, or ``None``."""
        rows = [list(ev) + [None] * (5 - len(ev)) for ev in events]
        # Only the first column is tested here: the library opens every column once and
        # returns None at the first that is not a CUDA array of the exact dtype (testing
        # 320 columns of a 64-event batch twice costs more than the batch's check).
        if not rows or not self.all_cuda(rows[0][:1]):
            return None
        return _detkit.device_seed_events(self.b, rows, settings, batch, stream=self.stream)

    def arr(self, a, dtype, name: str) -> np.ndarray:
        return _as(self.host(a, name), dtype, name)

    def out(self, x, record=None):
        """``x`` as the call's result: itself, or a :class:`DeviceArray` (records of a
        structured dtype as ``uint8`` rows of ``record.itemsize`` bytes, ``get()`` giving the
        records back)."""
        if not self.device:
            return x
        x = np.ascontiguousarray(x)
        raw = x.reshape(-1).view(np.uint8)
        if record is not None:
            return DeviceArray.from_host(self.b, raw, "|u1", (x.shape[0], record.itemsize), record, self.stream)
        return DeviceArray.from_host(self.b, raw, x.dtype.str, x.shape, None, self.stream)


def _events_columns(c, events):
    """The checked columns of every event of a seeding batch; an error names its event."""
    cols = []
    for i, ev in enumerate(events):
        ev = tuple(ev)
        if len(ev) not in (3, 5):
            raise InvalidInputError(f"event {i}: expected (x, y, z) or (x, y, z, var_r, var_z), got {len(ev)} arrays")
        try:
            cols.append(_seed_columns(c, *ev))
        except InvalidInputError as e:
            raise InvalidInputError(f"event {i}: {e}") from None
    return cols


def _seed_columns(c: _Call, x, y, z, var_r=None, var_z=None):
    """The five float32 columns of one seeding event (variances 0 when not given), checked
    for equal lengths."""
    x = c.arr(x, np.float32, "x")
    n = x.shape[0]
    zeros = np.zeros(n, dtype=np.float32) if var_r is None or var_z is None else None
    cols = [x, c.arr(y, np.float32, "y"), c.arr(z, np.float32, "z"),
            zeros if var_r is None else c.arr(var_r, np.float32, "var_r"),
            zeros if var_z is None else c.arr(var_z, np.float32, "var_z")]
    for name, col in zip(("y", "z", "var_r", "var_z"), cols[1:]):
        if col.shape[0] != n:
            raise InvalidInputError(f"{name} has {col.shape[0]} values, x has {n}")
    return cols


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

    @staticmethod
    def pet_frames(scanner: str = "tiny", singles: int = 100_000, seed: int = 1):
        """A generated scanner (``"tiny"``, ``"small_animal"`` or ``"bench"``, the benchmarks'
        scanner with ~110 MB of tables) and an acquisition on it, in memory: ``(Scanner,
        frames)`` (``FRAME_DTYPE``)."""
        s, frames = _detkit.generate_pet_frames(scanner, singles, seed)
        return s, frames.view(FRAME_DTYPE)


from . import io  # noqa: E402  (detkit.io: the library's file readers; needs the dtypes above)

#: The PET singles and pairs files (``.bin`` with the 16-byte ``DKSNGL01`` / ``DKPAIR01``
#: header, other names CSV): the same functions as :mod:`detkit.io`'s, which is their home.
read_singles = io.read_singles
read_pairs = io.read_pairs
write_singles = io.write_singles
write_pairs = io.write_pairs
