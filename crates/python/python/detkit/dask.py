"""Run a detkit function over many event files on a Dask ``distributed`` cluster.

One task per file: on the worker that runs it, the task opens (once per worker process) a
``detkit.Backend``, calls ``func(backend, path, **kwargs)`` and sends the result back;
:func:`map_files` returns the results **in the order of the input paths**. A file that fails
(missing, malformed, rejected by the library, worker lost) does not lose the others: by
default :func:`map_files` raises :class:`DaskFilesError`, which names every failed file and
carries every result; with ``errors="return"`` it returns the list with a
:class:`FileFailure` in the place of each failed file.

Ready-made task functions read the files of the ``detkit`` command-line tool:

- :func:`cluster_file`: CMS pixel clustering of a digis file (CSV ``module,x,y,adc`` or
  binary ``DKDIGI01``), as ``detkit cluster``;
- :func:`seed_file`: track seeding of a spacepoints CSV (``x,y,z[,var_r,var_z]``), as
  ``detkit seed``;
- :func:`pet_file`: the PET chain of a raw frames file (convert, time sort, coincidences),
  as ``detkit pet run``.

They are plain functions of ``(backend, path, **options)``: they run the same without Dask,
e.g. ``cluster_file(detkit.Backend("cpu"), "digis.csv")``. Any function of that shape, with
a picklable result, can be passed to :func:`map_files`.

``distributed`` is imported only by :func:`map_files` (``pip install 'detkit[dask]'``), so
``import detkit.dask`` and the task functions work without it.

>>> import distributed, detkit.dask as dd                       # doctest: +SKIP
>>> client = distributed.Client("tcp://scheduler:8786")          # doctest: +SKIP
>>> out = dd.map_files(dd.cluster_file, ["e1.csv", "e2.csv"], client=client)  # doctest: +SKIP
>>> clus, clusters_per_module = out[0]                           # doctest: +SKIP

GPU workers: start one worker process per GPU with ``CUDA_VISIBLE_DEVICES`` set to that GPU
(``dask_cuda.LocalCUDACluster`` does this), and keep ``device=0``. See ``docs/dask.md``.
"""

from __future__ import annotations

import asyncio
import csv
import os
import re
import threading
import traceback
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import Backend, InvalidInputError

__all__ = [
    "map_files",
    "FileFailure",
    "DaskFilesError",
    "worker_backend",
    "cluster_file",
    "seed_file",
    "pet_file",
    "read_digis",
    "read_spacepoints",
]

PathLike = Union[str, "os.PathLike[str]"]

# ---------------------------------------------------------------------------------------
# Results and failures
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileFailure:
    """The failure of one file: its ``path``, the exception's type name (``error_type``, e.g.
    ``"FileNotFoundError"`` or ``"InvalidInputError"``) and message, the address of the
    worker where it happened (``None`` when the task never ran to completion there, e.g.
    a lost worker) and the formatted traceback (empty when there is none)."""

    path: str
    error_type: str
    message: str
    worker: Optional[str] = field(default=None, compare=False)
    traceback: str = field(default="", repr=False, compare=False)

    def __str__(self) -> str:
        return f"{self.path}: {self.error_type}: {self.message}"


class DaskFilesError(Exception):
    """Some files failed in :func:`map_files` (``errors="raise"``, the default).

    ``failures``: the :class:`FileFailure` of every failed file, in input order (the message
    lists them all). ``results``: one entry per input path, in input order: the task's
    result, or the file's :class:`FileFailure`; so no successful result is lost. ``paths``:
    the input paths (``str``), in the same order.
    """

    def __init__(self, failures: List[FileFailure], results: List[Any], paths: List[str]) -> None:
        self.failures = failures
        self.results = results
        self.paths = paths
        lines = "\n".join(f"  {f}" for f in failures)
        super().__init__(f"{len(failures)} of {len(results)} files failed:\n{lines}")

    def __reduce__(self):
        return (type(self), (self.failures, self.results, self.paths))

    def succeeded(self) -> Dict[str, Any]:
        """The results of the files that did not fail, by path, in input order."""
        return {
            p: r for p, r in zip(self.paths, self.results) if not isinstance(r, FileFailure)
        }


# ---------------------------------------------------------------------------------------
# The worker side
# ---------------------------------------------------------------------------------------

_BACKENDS: Dict[Tuple[str, int], Backend] = {}
_BACKENDS_LOCK = threading.Lock()


def worker_backend(kind: str = "auto", device: int = 0) -> Backend:
    """The ``detkit.Backend(kind, device)`` of this process, opened on first use and cached
    (one per ``(kind, device)`` and process, shared by the worker's threads: a backend is
    safe to use from several threads). On a Dask worker this is the backend every task of
    :func:`map_files` gets."""
    key = (kind, int(device))
    with _BACKENDS_LOCK:
        b = _BACKENDS.get(key)
        if b is None:
            b = Backend(kind, int(device))
            _BACKENDS[key] = b
        return b


def _worker_address() -> Optional[str]:
    try:
        from distributed import get_worker

        return get_worker().address
    except Exception:  # not on a worker (e.g. a direct call), or no distributed
        return None


def _run_file(
    func: Callable[..., Any], path: str, kind: str, device: int, kwargs: Dict[str, Any]
) -> Any:
    """One task: ``func(worker_backend(kind, device), path, **kwargs)``, or the file's
    :class:`FileFailure` when it raises (so that a failure is data, never a retried or
    lost task)."""
    try:
        return func(worker_backend(kind, device), path, **kwargs)
    except Exception as e:  # every failure of this file is reported, none escapes
        return FileFailure(
            path=path,
            error_type=type(e).__name__,
            message=str(e),
            worker=_worker_address(),
            traceback=traceback.format_exc(),
        )


# ---------------------------------------------------------------------------------------
# The client side
# ---------------------------------------------------------------------------------------


def _import_distributed():
    try:
        import distributed
    except ImportError as e:
        raise ImportError(
            "detkit.dask.map_files needs Dask's `distributed` package: "
            "pip install 'detkit[dask]' (or pip install 'distributed>=2024.1')"
        ) from e
    return distributed


def map_files(
    func: Callable[..., Any],
    paths: Iterable[PathLike],
    *,
    client: Any = None,
    backend: str = "auto",
    device: int = 0,
    resources: Optional[Dict[str, float]] = None,
    errors: str = "raise",
    **kwargs: Any,
) -> List[Any]:
    """Runs ``func(backend, path, **kwargs)`` for every path of ``paths`` on a Dask cluster,
    one task per file, and returns the results in the order of ``paths``.

    ``func``: a picklable function (defined at module level, e.g. :func:`cluster_file`,
    :func:`seed_file`, :func:`pet_file`) of a ``detkit.Backend`` and a path (``str``); its
    result must be picklable. It runs on the workers, which must be able to import it and
    read the files (a shared file system, or paths that exist on every worker).

    ``client``: the ``distributed.Client`` (``Client("tcp://host:8786")`` for a running
    scheduler, ``Client(LocalCluster(...))`` on one machine); ``None`` takes the current
    default client (the last one created), and is a ``ValueError`` when there is none.

    ``backend``, ``device``: each worker process opens ``detkit.Backend(backend, device)``
    once (:func:`worker_backend`) and gives it to every task. ``"auto"`` uses the worker's GPU
    when it has one, else its CPU. With one worker per GPU (``CUDA_VISIBLE_DEVICES`` set per
    worker, as ``dask_cuda.LocalCUDACluster`` does) keep ``device=0``: each worker sees only
    its own GPU, as device 0.

    ``resources``: Dask resources each task needs, e.g. ``{"GPU": 1}`` to run only on workers
    started with ``--resources GPU=1`` (and at most one task at a time per GPU).

    ``errors``: what a failed file does. ``"raise"`` (default): after every file has run,
    raise :class:`DaskFilesError` naming every failed file, with ``.results`` holding every
    result (a :class:`FileFailure` in a failed file's place). ``"return"``: return that list
    instead of raising; test entries with ``isinstance(r, FileFailure)``.

    ``**kwargs``: passed to ``func`` with every file.
    """
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', got {errors!r}")
    if not callable(func):
        raise TypeError(f"func must be callable, got {type(func).__name__}")
    distributed = _import_distributed()
    paths = [os.fspath(p) for p in paths]
    if client is None:
        try:
            client = distributed.default_client()
        except ValueError as e:
            raise ValueError(
                "no Dask client: pass client=distributed.Client(...) "
                "(or create one first, which becomes the default)"
            ) from e
    name = getattr(func, "__name__", "task")
    run = uuid.uuid4().hex[:12]
    futures = [
        client.submit(
            _run_file,
            func,
            p,
            backend,
            device,
            kwargs,
            key=f"detkit-{name}-{run}-{i}",
            resources=resources,
            retries=0,
        )
        for i, p in enumerate(paths)
    ]
    try:
        distributed.wait(futures)
        done = [i for i, f in enumerate(futures) if f.status == "finished"]
        values = client.gather([futures[i] for i in done]) if done else []
        results: List[Any] = [None] * len(paths)
        for i, v in zip(done, values):
            results[i] = v
        for i, f in enumerate(futures):
            if f.status != "finished":  # the task itself failed: lost worker, pickling, ...
                results[i] = _future_failure(paths[i], f)
    finally:
        for f in futures:
            f.release()
    failures = [r for r in results if isinstance(r, FileFailure)]
    if failures and errors == "raise":
        raise DaskFilesError(failures, results, paths)
    return results


def _future_failure(path: str, future: Any) -> FileFailure:
    """The :class:`FileFailure` of a task that Dask reports as failed or cancelled."""
    try:
        exc = future.exception()
    except (Exception, asyncio.CancelledError) as e:  # cancelled: the cancellation itself
        exc = e
    if exc is None:
        return FileFailure(path, "TaskError", f"task ended in state {future.status!r}")
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return FileFailure(path, type(exc).__name__, str(exc), None, tb)


# ---------------------------------------------------------------------------------------
# Readers of the command-line tool's file formats
# ---------------------------------------------------------------------------------------


def _format_error(path: str, line: int, column: Optional[str], detail: str) -> InvalidInputError:
    where = f"{path}:{line}: " + (f"column `{column}`: " if column else "")
    return InvalidInputError(where + detail)


def _csv_header(name: str, required: Sequence[str]) -> Tuple[List[str], int]:
    """The header fields (trimmed) of a CSV file and its 1-based line, after checking that
    every column of ``required`` is there."""
    with open(name, newline="", encoding="utf-8-sig") as f:
        rdr = csv.reader(f)
        header: Optional[List[str]] = None
        for row in rdr:
            if row:
                header = [h.strip() for h in row]
                break
        line = max(rdr.line_num, 1)
    if header is None or all(h == "" for h in header):
        raise _format_error(
            name, 1, None,
            f"no header: expected a first line naming the columns {','.join(required)}",
        )
    for want in required:
        if want not in header:
            raise _format_error(
                name, line, want,
                f"missing from the header (found: {','.join(header)}; "
                f"expected at least: {','.join(required)})",
            )
    return header, line


def _read_csv_columns(
    name: str, header: List[str], wanted: Sequence[str]
) -> Tuple[Dict[str, List[str]], List[int]]:
    """The text of the columns ``wanted`` of a CSV file with ``header`` (see
    :func:`_read_csv`) and the 1-based line of every data row; a row with another number of
    fields than the header is an error naming its line."""
    idx = [header.index(c) for c in wanted]
    width = len(header)
    cols: List[List[str]] = [[] for _ in wanted]
    lines: List[int] = []
    with open(name, newline="", encoding="utf-8-sig") as f:
        rdr = csv.reader(f)
        for row in rdr:  # skip to the header
            if row:
                break
        for row in rdr:
            if not row or (len(row) == 1 and row[0].strip() == ""):
                continue
            if len(row) != width:
                raise _format_error(
                    name, rdr.line_num, None, f"{len(row)} fields, the header has {width}"
                )
            lines.append(rdr.line_num)
            for c, j in zip(cols, idx):
                c.append(row[j].strip())
    return dict(zip(wanted, cols)), lines


def _read_csv_fast(
    name: str, header: List[str], header_line: int, wanted: Sequence[str], dtype: Any
) -> Optional[Dict[str, np.ndarray]]:
    """The columns ``wanted`` parsed by ``np.loadtxt`` (C speed), or ``None`` when the file
    is not plain (quotes, ragged rows, a value that does not parse or fit), for
    :func:`_read_csv_columns` to read it again and name the first bad line."""
    width = len(header)
    idx = tuple(header.index(c) for c in wanted)
    wide = np.int64 if np.dtype(dtype).kind in "ui" else np.float64
    try:
        with open(name, "rb") as f:
            data = f.read()
        if b'"' in data:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data"
            table = np.loadtxt(
                data.decode("utf-8-sig").splitlines(), delimiter=",", skiprows=header_line,
                usecols=idx, dtype=wide, comments=None, ndmin=2, encoding=None,
            )
    except (ValueError, UnicodeDecodeError, OverflowError):
        return None
    rows = table.shape[0]
    body = data.split(b"\n", header_line)[-1] if data.count(b"\n") >= header_line else b""
    if body.count(b",") != (width - 1) * rows:  # a ragged row or a quoted comma
        return None
    out = {}
    for j, c in enumerate(wanted):
        col = table[:, j]
        if wide is np.int64:
            info = np.iinfo(dtype)
            if col.size and (col.min() < info.min or col.max() > info.max):
                return None
        out[c] = np.ascontiguousarray(col.astype(dtype))
    return out


def _parse_column(
    path: str, column: str, text: List[str], lines: List[int], dtype: Any
) -> np.ndarray:
    """``text`` as an array of ``dtype`` (integers: in range; floats: any decimal that Python
    parses), or an ``InvalidInputError`` naming the first bad value's line."""
    dtype = np.dtype(dtype)
    number = int if dtype.kind in "ui" else float

    def conv(t: str):
        if "_" in t:  # Python reads 1_000; Rust, and so the CLI, does not
            raise ValueError(t)
        return number(t)

    try:
        wide = np.array([conv(t) for t in text], dtype=np.int64 if number is int else np.float64)
    except (ValueError, OverflowError):
        for i, t in enumerate(text):
            try:
                np.array(conv(t), dtype=np.int64 if number is int else np.float64)
            except (ValueError, OverflowError):
                raise _format_error(path, lines[i], column, f"`{t}` is not a valid {dtype}") from None
        raise
    if number is int:
        info = np.iinfo(dtype)
        bad = np.flatnonzero((wide < info.min) | (wide > info.max))
        if bad.size:
            i = int(bad[0])
            raise _format_error(path, lines[i], column, f"{text[i]} is out of range for {dtype}")
    return wide.astype(dtype)


def _read_csv(
    path: PathLike, required: Sequence[str], optional: Sequence[str], dtype: Any
) -> Tuple[Dict[str, np.ndarray], Callable[[], List[int]]]:
    """The columns ``required`` and (those present of) ``optional`` of a CSV file as arrays
    of ``dtype``, with a function giving the 1-based line of every data row (to name a row
    that a caller rejects). The CLI's rules (``crates/host/src/csvio.rs``): columns found by
    header name in any order, other columns ignored, UTF-8 with an optional byte-order mark,
    fields trimmed, blank lines skipped, every row as many fields as the header, a header
    with no rows is zero rows, no header is an error; integers in range. Errors are
    ``InvalidInputError`` naming ``FILE:LINE`` and the column."""
    name = os.fspath(path)
    header, header_line = _csv_header(name, required)
    wanted = list(required) + [c for c in optional if c in header]
    fast = _read_csv_fast(name, header, header_line, wanted, dtype)
    if fast is not None:
        return fast, lambda: _read_csv_columns(name, header, wanted)[1]
    cols, lines = _read_csv_columns(name, header, wanted)
    parsed = {c: _parse_column(name, c, cols[c], lines, dtype) for c in wanted}
    return parsed, lambda: lines


_DIGI_MAGIC = b"DKDIGI01"


def read_digis(path: PathLike) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digis of a ``detkit cluster`` input file: ``(module, x, y, adc)``, ``uint16``.

    The binary format (magic ``DKDIGI01``, ``u32`` little-endian count ``n``, then the arrays
    ``module``, ``x``, ``y``, ``adc`` of ``n`` little-endian ``u16`` each) is detected by its
    magic; any other file is CSV with the columns ``module,x,y,adc`` (by name, any order,
    other columns ignored). Errors: ``InvalidInputError`` naming the file (and, for CSV, the
    line and column), ``OSError`` when the file cannot be read."""
    name = os.fspath(path)
    with open(name, "rb") as f:
        head = f.read(8)
    if head == _DIGI_MAGIC:
        data = np.fromfile(name, dtype=np.uint8)
        if data.size < 12:
            raise InvalidInputError(f"{name}: binary digis: no count after the magic")
        n = int(data[8:12].view("<u4")[0])
        if data.size != 12 + 8 * n:
            raise InvalidInputError(
                f"{name}: binary digis: the header counts {n} digis, which take 12 + 8 x {n} = "
                f"{12 + 8 * n} bytes; the file has {data.size}"
            )
        arrs = data[12 : 12 + 8 * n].view("<u2").reshape(4, n).astype(np.uint16)
        return arrs[0].copy(), arrs[1].copy(), arrs[2].copy(), arrs[3].copy()
    cols, _ = _read_csv(name, ("module", "x", "y", "adc"), (), np.uint16)
    return cols["module"], cols["x"], cols["y"], cols["adc"]


def read_spacepoints(
    path: PathLike,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The spacepoints of a ``detkit seed`` input CSV: ``(x, y, z, var_r, var_z)``,
    ``float32`` (mm, mm²). Columns ``x,y,z`` and the optional ``var_r,var_z`` (0 when absent)
    are found by name, in any order; other columns are ignored. Coordinates must be finite,
    variances finite and non-negative. Errors: ``InvalidInputError`` naming ``FILE:LINE`` and
    the column, ``OSError`` when the file cannot be read."""
    name = os.fspath(path)
    cols, lines = _read_csv(name, ("x", "y", "z"), ("var_r", "var_z"), np.float32)
    n = cols["x"].shape[0]
    out = []
    for c in ("x", "y", "z", "var_r", "var_z"):
        v = cols.get(c)
        if v is None:
            out.append(np.zeros(n, dtype=np.float32))
            continue
        bad = ~np.isfinite(v) if c in "xyz" else ~(np.isfinite(v) & (v >= 0))
        if bad.any():
            i = int(np.argmax(bad))
            what = "a finite coordinate" if c in "xyz" else "a variance (finite, >= 0)"
            raise _format_error(name, lines()[i], c, f"{v[i]} is not {what}")
        out.append(v)
    return out[0], out[1], out[2], out[3], out[4]


def _scanner_time_window(scanner: str) -> float:
    """The ``time_window`` of a scanner TOML file."""
    with open(scanner, "rb") as f:
        text = f.read()
    try:
        import tomllib  # Python >= 3.11

        value = tomllib.loads(text.decode("utf-8")).get("time_window")
    except ImportError:  # Python < 3.11: the key is a top-level number
        m = re.search(rb"(?m)^\s*time_window\s*=\s*([-+0-9.eE_]+)", text)
        value = float(m.group(1).replace(b"_", b"")) if m else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidInputError(f"{scanner}: no number `time_window` (pass window=)")
    return float(value)


# ---------------------------------------------------------------------------------------
# Task functions: one file, one backend
# ---------------------------------------------------------------------------------------


def cluster_file(
    backend: Backend,
    path: PathLike,
    *,
    geometry: str = "phase1",
    charge_cut: Union[None, bool, int] = None,
) -> Tuple[np.ndarray, np.ndarray]:
    """Clusters the digis of ``path`` (:func:`read_digis`), as ``detkit cluster``; returns
    ``Backend.cluster``'s ``(clus, clus_in_module)``: the ``int32`` cluster index of every
    digi within its module (-1: invalid, duplicate or cut), in file order, and the cluster
    count of every module. ``geometry``, ``charge_cut``: as ``Backend.cluster``."""
    module, x, y, adc = read_digis(path)
    return backend.cluster(module, x, y, adc, geometry=geometry, charge_cut=charge_cut)


def seed_file(backend: Backend, path: PathLike, **settings: float):
    """Seeds the spacepoints of ``path`` (:func:`read_spacepoints`), as ``detkit seed``;
    returns ``Backend.seed``'s ``(seeds, weight, z_vertex, params)`` (seed indices are
    0-based data rows of the file). ``settings``: traccc's configuration fields, e.g.
    ``min_pt=0.9``."""
    x, y, z, var_r, var_z = read_spacepoints(path)
    return backend.seed(x, y, z, var_r, var_z, **settings)


def pet_file(
    backend: Backend,
    path: PathLike,
    *,
    scanner: Optional[PathLike] = None,
    window: Optional[float] = None,
    delay: Optional[float] = None,
    policy: str = "killAll",
) -> Tuple[np.ndarray, dict]:
    """The PET chain of the raw ``DataFrameV2`` frames of ``path`` (16 bytes a frame), as
    ``detkit pet run``: convert to singles, stable time sort, coincidences. ``scanner``: the
    scanner TOML (default: ``scanner.toml`` beside ``path``, as ``detkit pet generate``
    writes them); ``window``: coincidence window in ticks (default: the scanner's
    ``time_window``); ``delay``, ``policy``: as ``Backend.coincide``.

    Returns ``(pairs, stats)``: the pairs (``COINCIDENCE_DTYPE``) and the conversion
    statistics (dict)."""
    name = os.fspath(path)
    toml = os.fspath(scanner) if scanner is not None else os.path.join(
        os.path.dirname(os.path.abspath(name)), "scanner.toml"
    )
    frames = np.fromfile(name, dtype=np.uint8)
    singles, stats = backend.convert(frames, toml)
    if window is None:
        window = _scanner_time_window(toml)
    pairs = backend.coincide(backend.sort(singles), window, delay=delay, policy=policy)
    return pairs, stats
