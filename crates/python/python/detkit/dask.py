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
import math
import os
import threading
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np

from . import Backend, Scanner
from .io import read_digis, read_spacepoints

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
    "worker_scanner",
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


def _failure(path: str, e: BaseException, tb: Optional[str] = None) -> FileFailure:
    """The :class:`FileFailure` of ``path`` for the exception ``e``."""
    if tb is None:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return FileFailure(
        path=path,
        error_type=type(e).__name__,
        message=str(e),
        worker=_worker_address(),
        traceback=tb,
    )


def _run_files(
    func: Callable[..., Any], paths: List[str], kind: str, device: int, kwargs: Dict[str, Any]
) -> List[Any]:
    """One task: the results of ``func(worker_backend(kind, device), path, **kwargs)`` for
    every path of the group, in order, a :class:`FileFailure` in the place of each file that
    raises (so that a failure is data, never a retried or lost task). A function with a batch
    form (``func._detkit_batch``, as :func:`cluster_file` and :func:`seed_file` have) gets the
    whole group in one call: one library call for all the files."""
    try:
        backend = worker_backend(kind, device)
    except Exception as e:  # no backend on this worker: every file of the group fails
        tb = traceback.format_exc()
        return [_failure(p, e, tb) for p in paths]
    batch = getattr(func, "_detkit_batch", None)
    if batch is not None:
        try:
            out = batch(backend, paths, **kwargs)
        except Exception as e:  # e.g. a bad keyword argument: the same for every file
            tb = traceback.format_exc()
            return [_failure(p, e, tb) for p in paths]
        return [_failure(p, r) if isinstance(r, BaseException) else r for p, r in zip(paths, out)]
    results = []
    for p in paths:
        try:
            results.append(func(backend, p, **kwargs))
        except Exception as e:  # every failure of this file is reported, none escapes
            results.append(_failure(p, e, traceback.format_exc()))
    return results


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
    files_per_task: Optional[int] = None,
    direct: Optional[bool] = None,
    **kwargs: Any,
) -> List[Any]:
    """Runs ``func(backend, path, **kwargs)`` for every path of ``paths`` on a Dask cluster,
    the files grouped into tasks, and returns one result per file in the order of ``paths``.

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

    ``files_per_task``: files per task (``None``: one task per worker for the ready-made
    :func:`cluster_file` and :func:`seed_file`, about four per worker for other functions;
    at most 64 files a task). A task runs its files one after the other on one worker; the ready-made
    :func:`cluster_file` and :func:`seed_file` run a task's files as one batch of events
    (one library call), which is where a GPU worker's files/s comes from. Results and
    failures stay per file.

    ``direct``: whether the client fetches the results straight from the workers
    (``client.gather(direct=True)``) or through the scheduler. ``None``: the client's own
    ``direct_to_workers`` setting when it has one, else straight from the workers (the
    results cross the network once instead of twice, and the scheduler's event loop does not
    carry them; see docs/benchmarks.md, "chost"). Pass ``False`` when the client cannot reach
    the workers.

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
    if files_per_task is not None and (not isinstance(files_per_task, int) or files_per_task < 1):
        raise ValueError(f"files_per_task must be a positive int, got {files_per_task!r}")
    if direct is None:
        direct = getattr(client, "direct_to_workers", None)
        direct = True if direct is None else bool(direct)
    size = files_per_task or _auto_group(client, len(paths), hasattr(func, "_detkit_batch"))
    groups = [list(range(i, min(i + size, len(paths)))) for i in range(0, len(paths), size)]
    name = getattr(func, "__name__", "task")
    run = uuid.uuid4().hex[:12]
    futures = [
        client.submit(
            _run_files,
            func,
            [paths[i] for i in g],
            backend,
            device,
            kwargs,
            key=f"detkit-{name}-{run}-{k}",
            resources=resources,
            retries=0,
        )
        for k, g in enumerate(groups)
    ]
    results: List[Any] = [None] * len(paths)
    try:
        distributed.wait(futures)
        done = [k for k, f in enumerate(futures) if f.status == "finished"]
        values = client.gather([futures[k] for k in done], direct=direct) if done else []
        for k, v in zip(done, values):
            for i, r in zip(groups[k], v):
                results[i] = r
        for k, f in enumerate(futures):
            if f.status != "finished":  # the task itself failed: lost worker, pickling, ...
                for i in groups[k]:
                    results[i] = _future_failure(paths[i], f)
    finally:
        for f in futures:
            f.release()
    failures = [r for r in results if isinstance(r, FileFailure)]
    if failures and errors == "raise":
        raise DaskFilesError(failures, results, paths)
    return results


def _auto_group(client: Any, n: int, batched: bool = False) -> int:
    """Files per task when not given: a function with a batch form (:func:`cluster_file`,
    :func:`seed_file`) one task per worker (one library call for all its files: a task's
    fixed cost, scheduling and a round trip, is what limits files/s; see docs/benchmarks.md,
    "pynum"), else about four tasks per worker (so a slow worker takes fewer); at most 64
    files a task."""
    try:
        # The count alone (no per-worker records to build and send).
        info = client.scheduler_info(n_workers=0)
        workers = max(1, int(info.get("n_workers") or len(info.get("workers", {}))))
    except Exception:
        try:  # an older client or scheduler: the records of every worker
            workers = max(1, len(client.scheduler_info().get("workers", {})))
        except Exception:  # an unusual client: one worker's worth of grouping
            workers = 1
    return max(1, min(64, math.ceil(n / (workers if batched else 4 * workers))))


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
# Task functions: one file, one backend
# ---------------------------------------------------------------------------------------


def cluster_file(
    backend: Backend,
    path: PathLike,
    *,
    geometry: str = "phase1",
    charge_cut: Union[None, bool, int] = None,
) -> Tuple[np.ndarray, np.ndarray]:
    """Clusters the digis of ``path`` (:func:`detkit.io.read_digis`), as ``detkit cluster``;
    returns ``Backend.cluster``'s ``(clus, clus_in_module)``: the ``int32`` cluster index of
    every digi within its module (-1: invalid, duplicate or cut), in file order, and the
    cluster count of every module. ``geometry``, ``charge_cut``: as ``Backend.cluster``.
    In :func:`map_files` a task's files are clustered as one batch of events."""
    module, x, y, adc = read_digis(path)
    return backend.cluster(module, x, y, adc, geometry=geometry, charge_cut=charge_cut)


def _cluster_files(backend: Backend, paths: List[str], *, geometry: str = "phase1", charge_cut=None):
    # charge_cut as Backend.cluster takes it (None, False or electrons), checked in Rust.
    return backend._b.cluster_files(paths, geometry, charge_cut)


cluster_file._detkit_batch = _cluster_files  # type: ignore[attr-defined]


def seed_file(backend: Backend, path: PathLike, **settings: float):
    """Seeds the spacepoints of ``path`` (:func:`detkit.io.read_spacepoints`), as ``detkit
    seed``; returns ``Backend.seed``'s ``(seeds, weight, z_vertex, params)`` (seed indices are
    0-based data rows of the file). ``settings``: traccc's configuration fields, e.g.
    ``min_pt=0.9``. In :func:`map_files` a task's files are seeded as one batch of events
    (``Backend.seed_events``)."""
    x, y, z, var_r, var_z = read_spacepoints(path)
    return backend.seed(x, y, z, var_r, var_z, **settings)


def _seed_files(backend: Backend, paths: List[str], **settings: float):
    return backend._b.seed_files(paths, settings)


seed_file._detkit_batch = _seed_files  # type: ignore[attr-defined]

_SCANNERS: Dict[Tuple[str, int, int], Scanner] = {}


def worker_scanner(path: PathLike) -> Scanner:
    """The :class:`detkit.Scanner` of the TOML file ``path``, read once per process and kept
    (keyed by the absolute path, the file's size and modification time, so an edited file
    is read again)."""
    name = os.path.abspath(os.fspath(path))
    st = os.stat(name)
    key = (name, st.st_size, st.st_mtime_ns)
    with _BACKENDS_LOCK:
        s = _SCANNERS.get(key)
    if s is None:
        s = Scanner(name)
        with _BACKENDS_LOCK:
            _SCANNERS[key] = s
    return s


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
    writes them), read once per worker process (:func:`worker_scanner`); ``window``:
    coincidence window in ticks (default: the scanner's ``time_window``); ``delay``,
    ``policy``: as ``Backend.coincide``.

    Returns ``(pairs, stats)``: the pairs (``COINCIDENCE_DTYPE``) and the conversion
    statistics (dict)."""
    from .io import read_frames

    name = os.fspath(path)
    toml = os.fspath(scanner) if scanner is not None else os.path.join(
        os.path.dirname(os.path.abspath(name)), "scanner.toml"
    )
    frames = read_frames(name)
    s = worker_scanner(toml)
    singles, stats = backend.convert(frames, s)
    if window is None:
        window = s.time_window
    pairs = backend.coincide(backend.sort(singles), window, delay=delay, policy=policy)
    return pairs, stats
