"""The Python twin of ``bench-host`` (issue 30): per call shape, the time of the public
Python call on host data (numpy in, numpy out), beside the host memcpy of the same bytes and,
when given, the Rust device-resident figure of the same row.

Usage (the GPU host, after ``pip install ./crates/python`` or with the bundle's wheel)::

    python crates/python/bench_host.py [--backend cuda] [--reps 20] [--rows cluster1,seed64,...]
                                       [--rust bench-host.csv] [--csv out.csv] [--dask 2]
                                       [--producer detkit|cupy] [--variants 0]
                                       [--files-per-task auto,32] [--dask-direct auto,0,1]

Rows (the call shapes of issue 30's table):

=============  =================================================================
``cluster1``   ``Backend.cluster``, one Run-3-like event (``run3_event``) per call
``cluster64``  the same, 64 events per call (``event_offsets``)
``seed1``      ``Backend.seed``, one ⟨μ⟩ = 200 event per call
``seed64``     ``Backend.seed_events``, 64 ⟨μ⟩ = 200 events per call
``seed64-flat`` the same by ``Backend.seed_events_flat`` (flat arrays and offsets)
``seed64-rs``  ``seed64`` of the Rust bench's events (``bench-host``: seeds 300-307, each
               eight times), so that the row compares with ``seed_columns_into, 64`` there
``cluster1-out`` ``cluster1`` writing into ``out=`` arrays allocated once
``cluster1-pinned`` / ``cluster64-pinned``  ``cluster1`` / ``cluster64`` with the digis in
               ``Backend.pinned_empty`` memory (page-locked, made once), default outputs
               (on CUDA: pinned memory the backend recycles)
``cluster1-pinned-out`` / ``cluster64-pinned-out``  the same with ``out=`` arrays in
               ``Backend.pinned_empty`` memory
``convert``    ``Backend.convert``, 2^22 frames, a ``Scanner`` (the bench scanner) held
``sort``       ``Backend.sort``, the converted singles
``coincide``   ``Backend.coincide``, the sorted singles
``dask-cluster`` / ``dask-seed``  ``detkit.dask.map_files`` with ``--dask N`` local GPU
               workers (one per GPU): 64 binary Run-3 files / 32 ⟨μ⟩ = 200 CSVs
``seed64-flat-dev`` issue 27: ``Backend.seed_flat`` of the 64 events' five concatenated
               device columns and host event offsets (five arrays opened, not 320)
``*-dev``      issue 27: the same calls with device arrays in and out (inputs made once:
               ``DeviceArray`` by ``Backend.to_device``, or with ``--producer cupy``
               CuPy arrays; results stay on the device as ``DeviceArray``)
=============  =================================================================

Every row checks its result against the CPU backend (the first event(s)) before it prints a
time. Columns: ``median_ms`` per call, ``items_per_s``, ``memcpy_ms`` (numpy copy of the
call's input and output bytes in host memory: the floor of any host path) and, with ``--rust
FILE`` (the CSV of ``bench-host --csv FILE`` from the same run of the same card), the Rust
rows of the same call shape: ``rust_host_ms`` (the Rust door, pinned staging),
``rust_device_ms`` (device-resident), ``copy_pin_ms`` (plain pinned copy of the same bytes
in and out), and ``vs_device`` (median / device).
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import sys
import tempfile
import time

import numpy as np

import detkit

ROWS = ("cluster1", "cluster64", "seed1", "seed64", "convert", "sort", "coincide",
        "dask-cluster", "dask-seed", "cluster1-dev", "cluster64-dev", "seed64-dev",
        "cluster1-out", "seed64-flat", "seed64-flat-dev", "cluster1-pinned",
        "cluster64-pinned", "seed64-rs", "cluster1-pinned-out", "cluster64-pinned-out")


# bench-host's `call` column (its first words) -> our rows.
RUST_ROWS = {
    "cluster_events_into, 1 Run-3 event": ("cluster1", "cluster1-dev", "cluster1-out"),
    "cluster_events_into, 64 Run-3 events": ("cluster64", "cluster64-dev"),
    "seed_into, 1 <mu>=200 event": ("seed1",),
    "seed_events_into, 64 <mu>=200 events": ("seed64", "seed64-dev", "seed64-flat"),
    "pet_convert_into, 2^22 frames, handle": ("convert",),
    "pet_sort_into": ("sort",),
    "pet_coincide_into": ("coincide",),
    # `bench-host --only devview`: the device-view entries on this script's own batches,
    # beside the device-resident time of the same batch (read after the rows above, so they
    # win when both are in the file).
    "devview cluster_events_device, 1 ev": ("cluster1-dev",),
    "devview cluster_events_device, 64 ev": ("cluster64-dev",),
    "devview seed_events_device, 64 ev": ("seed64-dev", "seed64-flat-dev"),
    "cluster, 1 event, caller pinned in+out": ("cluster1-pinned", "cluster1-pinned-out"),
    "cluster, 64 events, caller pinned in+out": ("cluster64-pinned", "cluster64-pinned-out"),
}


def read_rust(paths):
    """``{row: (host_ms, device_ms or None, copy_pinned_ms)}`` from ``bench-host --csv``
    files (comma-separated paths; a later row of the same shape wins)."""
    out = {}
    for path in paths.split(","):
        if not os.path.exists(path):
            print(f"# --rust {path}: no such file (the Rust run failed?); its Rust columns stay empty")
            continue
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                for prefix, rows in RUST_ROWS.items():
                    if r["call"].startswith(prefix):
                        dev = float(r["device_ms"]) if r.get("device_ms") else None
                        for row in rows:
                            out[row] = (float(r["pinned_ms"]), dev, float(r["copy_pinned_ms"]))
    return out


def median_time(fn, reps):
    fn()  # warm: workspaces grown, kernels loaded
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


#: ``--phases``: per row, where the time of a call goes (filled by :func:`host_time`).
PHASES = {}


def host_time(row, fn, reps):
    """:func:`median_time` of a host-data row; with ``--phases`` also the mean time per call
    of the library's phases and of the Python layer's parts (``_detkit._timers``) over
    ``reps`` more calls, and the mean call time they ran in."""
    t = median_time(fn, reps)
    if PHASES.get(None):
        k = detkit._detkit
        k._timers(True)
        k._timers_take()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        total = (time.perf_counter() - t0) / reps
        parts = {n: v / reps for n, v in k._timers_take()}
        k._timers(False)
        PHASES[row] = (total, parts)
    return t


def print_phases():
    """The ``--phases`` table: ms per call; ``python`` is the call's time outside this layer's
    Rust parts (the Python wrapper, argument conversion and checks)."""
    if len(PHASES) <= 1:
        return
    names = None
    for row, v in PHASES.items():
        if row is None:
            continue
        total, parts = v
        if names is None:
            names = [n for n in parts if parts is not None]
            print("# phases, ms per call (door phases, then this layer's parts):")
            print("# " + "  ".join(["row", "call"] + names + ["python"]))
        layer = sum(parts[n] for n in ("layer:door", "layer:fill", "layer:views"))
        print("# " + "  ".join([row, f"{total * 1e3:.3f}"] + [f"{parts[n] * 1e3:.3f}" for n in names]
                               + [f"{(total - layer) * 1e3:.3f}"]))


def memcpy_time(arrays, reps):
    """Median time of copying these arrays' bytes once in host memory (numpy)."""
    src = [np.ascontiguousarray(a).view(np.uint8).reshape(-1) for a in arrays]
    dst = [np.empty_like(s) for s in src]

    def run():
        for s, d in zip(src, dst):
            np.copyto(d, s)

    return median_time(run, reps)


def same(a, b, what):
    for x, y in zip(a, b):
        if not np.array_equal(np.asarray(x), np.asarray(y)):
            raise SystemExit(f"{what}: result differs from the CPU backend; no time printed")


def cluster_rows(b, cpu, reps, rows):
    events = [detkit.generate.cluster_event(seed=s) for s in range(1, 65)]
    out = []
    if "cluster1" in rows:
        ev = events[0]
        same(b.cluster(*ev), cpu.cluster(*ev), "cluster1")
        t = host_time("cluster1", lambda: b.cluster(*ev), reps)
        res = b.cluster(*ev)
        out.append(("cluster1", t, 1, memcpy_time(list(ev) + list(res), reps)))
    if "cluster1-out" in rows:
        ev = events[0]
        o = (np.empty(len(ev[0]), np.int32), np.empty(1856, np.uint32))
        same(b.cluster(*ev, out=o), cpu.cluster(*ev), "cluster1-out")
        t = host_time("cluster1-out", lambda: b.cluster(*ev, out=o), reps)
        out.append(("cluster1-out", t, 1, memcpy_time(list(ev) + list(o), reps)))
    if "cluster64" in rows:
        cols = [np.concatenate([e[j] for e in events]) for j in range(4)]
        offs = np.zeros(65, np.uint32)
        offs[1:] = np.cumsum([len(e[0]) for e in events])
        got = b.cluster(*cols, event_offsets=offs)
        want = cpu.cluster(*[c[: offs[2]] for c in cols], event_offsets=offs[:3])
        n2 = want[1].size
        same((got[0][: offs[2]], got[1][:n2]), want, "cluster64")
        t = host_time("cluster64", lambda: b.cluster(*cols, event_offsets=offs), reps)
        out.append(("cluster64", t, 64, memcpy_time(cols + [offs] + list(got), reps)))
    for row, k, own in (("cluster1-pinned", 1, False), ("cluster64-pinned", 64, False),
                        ("cluster1-pinned-out", 1, True), ("cluster64-pinned-out", 64, True)):
        if row not in rows:
            continue
        # The digis (and with `own` the results) in page-locked memory made once (the door
        # DMAs straight from and into it); else the default results (on CUDA, pinned memory
        # the backend recycles).
        pin = [b.pinned_empty(sum(len(e[0]) for e in events[:k]), np.uint16) for _ in range(4)]
        for j in range(4):
            np.concatenate([e[j] for e in events[:k]], out=pin[j])
        offs = np.zeros(k + 1, np.uint32)
        offs[1:] = np.cumsum([len(e[0]) for e in events[:k]])
        o = (b.pinned_empty(int(offs[-1]), np.int32), b.pinned_empty(k * 1856, np.uint32))
        kw = {"out": o} if own else {}
        got = b.cluster(*pin, event_offsets=offs, **kw)
        want = cpu.cluster(*[c[: offs[min(k, 2)]] for c in pin], event_offsets=offs[: min(k, 2) + 1])
        same((got[0][: offs[min(k, 2)]], got[1][: want[1].size]), want, row)
        del got
        t = host_time(row, lambda: b.cluster(*pin, event_offsets=offs, **kw), reps)
        out.append((row, t, k, memcpy_time(pin + [offs] + list(o), reps)))
    return out


def seed_rows(b, cpu, reps, rows):
    events = [detkit.generate.seeding_event(seed=s, mu=200.0)[:5] for s in range(1, 65)]
    out = []
    if "seed1" in rows:
        ev = events[0]
        same(b.seed(*ev), cpu.seed(*ev), "seed1")
        t = host_time("seed1", lambda: b.seed(*ev), reps)
        out.append(("seed1", t, 1, memcpy_time(list(ev) + list(b.seed(*ev)), reps)))
    if "seed64" in rows:
        got = b.seed_events(events)
        for i in (0, 63):
            same(got[i], cpu.seed(*events[i]), f"seed64 event {i}")
        t = host_time("seed64", lambda: b.seed_events(events), reps)
        arrays = [c for e in events for c in e] + [a for r in got for a in r]
        out.append(("seed64", t, 64, memcpy_time(arrays, reps)))
    if "seed64-flat" in rows:
        flat = b.seed_events_flat(events)
        for i in (0, 63):
            lo, hi = flat[4][i], flat[4][i + 1]
            same([a[lo:hi] for a in flat[:4]], cpu.seed(*events[i]), f"seed64-flat event {i}")
        t = host_time("seed64-flat", lambda: b.seed_events_flat(events), reps)
        out.append(("seed64-flat", t, 64, memcpy_time([c for e in events for c in e] + list(flat), reps)))
    if "seed64-rs" in rows:
        # The Rust bench's 64 events (8 distinct, 6.4 MB of input where seed64 reads 51 MB).
        distinct = [detkit.generate.seeding_event(seed=300 + s, mu=200.0)[:5] for s in range(8)]
        evs = [distinct[k % 8] for k in range(64)]
        got = b.seed_events(evs)
        for i in (0, 63):
            same(got[i], cpu.seed(*evs[i]), f"seed64-rs event {i}")
        t = host_time("seed64-rs", lambda: b.seed_events(evs), reps)
        out.append(("seed64-rs", t, 64, memcpy_time([c for e in evs for c in e] + [a for r in got for a in r], reps)))
    return out


def pet_rows(b, cpu, reps, rows):
    out = []
    if not {"convert", "sort", "coincide"} & set(rows):
        return out
    scanner, frames = detkit.generate.pet_frames("bench", singles=1 << 22, seed=11)
    frames = frames[: 1 << 22]
    singles, stats = b.convert(frames, scanner)
    want, _ = cpu.convert(frames, scanner)
    if singles.tobytes() != want.tobytes():
        raise SystemExit("convert: result differs from the CPU backend; no time printed")
    if "convert" in rows:
        t = host_time("convert", lambda: b.convert(frames, scanner), reps)
        out.append(("convert", t, frames.size, memcpy_time([frames, singles], reps)))
    sorted_ = b.sort(singles)
    if sorted_.tobytes() != cpu.sort(singles).tobytes():
        raise SystemExit("sort: result differs from the CPU backend; no time printed")
    if "sort" in rows:
        t = host_time("sort", lambda: b.sort(singles), reps)
        out.append(("sort", t, singles.size, memcpy_time([singles, sorted_], reps)))
    if "coincide" in rows:
        pairs = b.coincide(sorted_, scanner.time_window)
        if pairs.tobytes() != cpu.coincide(sorted_, scanner.time_window).tobytes():
            raise SystemExit("coincide: result differs from the CPU backend; no time printed")
        t = host_time("coincide", lambda: b.coincide(sorted_, scanner.time_window), reps)
        out.append(("coincide", t, sorted_.size, memcpy_time([sorted_, pairs], reps)))
    return out


PROFILES = []


def profile(row, fn, reps):
    """Host-side timers of the device-array calls (``_detkit.device_profile``): mean µs per
    call of each step, and the library's phases, printed after the table."""
    dp = getattr(detkit._detkit, "device_profile", None)
    if dp is None:
        return
    dp(True)
    dp(True)  # cleared
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    wall = (time.perf_counter() - t) / reps
    steps = dp(False)
    PROFILES.append((row, wall, [(n, us / reps) for n, us, _ in steps]))


def piece(name, fn, reps):
    """One step of a ``*-dev`` call timed alone from Python (median µs), printed with the
    profiles: where the time outside the library's steps goes."""
    PIECES.append((name, median_time(fn, reps) * 1e6))


PIECES = []


def device_rows(b, cpu, reps, rows, producer="detkit"):
    """Issue 27's shapes with device arrays in and out (CUDA backends only), the inputs
    made by ``producer``: ``detkit`` (``Backend.to_device``) or ``cupy``."""
    out = []
    if b.kind != "cuda" or not {"cluster1-dev", "cluster64-dev", "seed64-dev", "seed64-flat-dev"} & set(rows):
        return out
    if producer == "cupy":
        import cupy as cp

        def put(a):
            return cp.asarray(a)
    else:
        put = b.to_device
    events = [detkit.generate.cluster_event(seed=s) for s in range(1, 65)]
    if "cluster1-dev" in rows:
        ev = events[0]
        d = [put(a) for a in ev]
        same([r.get() for r in b.cluster(*d)], cpu.cluster(*ev), "cluster1-dev")
        out.append(("cluster1-dev", median_time(lambda: b.cluster(*d), reps), 1, float("nan")))
        profile("cluster1-dev", lambda: b.cluster(*d), reps)
        piece("cluster1-dev: _detkit.device_cluster alone",
              lambda: detkit._detkit.device_cluster(b._b, *d, "phase1", None, None), reps)
        piece("cluster1-dev: opening one CuPy array's __cuda_array_interface__",
              lambda: d[0].__cuda_array_interface__, reps)
    if "cluster64-dev" in rows:
        cols = [np.concatenate([e[j] for e in events]) for j in range(4)]
        offs = np.zeros(65, np.uint32)
        offs[1:] = np.cumsum([len(e[0]) for e in events])
        d = [put(c) for c in cols] + [put(offs)]
        same([r.get() for r in b.cluster(*d[:4], event_offsets=d[4])],
             b.cluster(*cols, event_offsets=offs), "cluster64-dev")
        out.append(("cluster64-dev", median_time(lambda: b.cluster(*d[:4], event_offsets=d[4]), reps),
                    64, float("nan")))
        profile("cluster64-dev", lambda: b.cluster(*d[:4], event_offsets=d[4]), reps)
        k, c = detkit._detkit, detkit._Call(b, None)
        piece("cluster64-dev: the Python layer's CUDA test of the four digi arrays",
              lambda: c.all_cuda(d[:4]), reps)
        piece("cluster64-dev: event_offsets read into numpy (import_array, the general path's step)",
              lambda: k.import_array(b._b, d[4], "event_offsets"), reps)
        piece("cluster64-dev: _detkit.device_cluster alone, numpy offsets",
              lambda: k.device_cluster(b._b, *d[:4], "phase1", None, offs), reps)
        piece("cluster64-dev: _detkit.device_cluster alone, CUDA offsets",
              lambda: k.device_cluster(b._b, *d[:4], "phase1", None, d[4]), reps)
    if "seed64-dev" in rows:
        evs = [detkit.generate.seeding_event(seed=s, mu=200.0)[:5] for s in range(1, 65)]
        d = [[put(c) for c in e] for e in evs]
        got = b.seed_events(d)
        same([a.get() for a in got[0]], cpu.seed(*evs[0]), "seed64-dev")
        out.append(("seed64-dev", median_time(lambda: b.seed_events(d), reps), 64, float("nan")))
        profile("seed64-dev", lambda: b.seed_events(d), reps)
        rows5 = [list(e) for e in d]
        piece("seed64-dev: _detkit.device_seed_events alone",
              lambda: detkit._detkit.device_seed_events(b._b, rows5, {}, True), reps)
    if "seed64-flat-dev" in rows:
        evs = [detkit.generate.seeding_event(seed=s, mu=200.0)[:5] for s in range(1, 65)]
        cols = [put(np.concatenate([e[j] for e in evs])) for j in range(5)]
        offs = np.cumsum([0] + [len(e[0]) for e in evs])
        got = b.seed_flat(*cols, event_offsets=offs)
        want = b.seed_events_flat(evs)
        same([a.get() for a in got[:4]] + [got[4]], want, "seed64-flat-dev")
        call = lambda: b.seed_flat(*cols, event_offsets=offs)  # noqa: E731
        out.append(("seed64-flat-dev", median_time(call, reps), 64, float("nan")))
        profile("seed64-flat-dev", call, reps)
    return out


def dev_variant_rows(b, cpu, a, rows):
    """:func:`device_rows` once per ``--dev-variants`` entry (``_detkit._set_variant``)."""
    variants = [int(v) for v in a.dev_variants.split(",") if v.strip()]
    if variants == [0]:
        return device_rows(b, cpu, a.reps, rows, a.producer)
    out = []
    for v in variants:
        detkit._detkit._set_variant(v)
        first = len(PROFILES)
        out += [(f"{r}[v{v}]", t, n, c) for r, t, n, c in
                device_rows(b, cpu, a.reps, rows, a.producer)]
        PROFILES[first:] = [(f"{r}[v{v}]", w, st) for r, w, st in PROFILES[first:]]
    detkit._detkit._set_variant(0)
    return out


def gpu_cluster(workers):
    """A local Dask cluster of ``workers`` worker processes of one thread each, worker ``i``
    seeing GPU ``i`` alone (``CUDA_VISIBLE_DEVICES``, as ``dask_cuda.LocalCUDACluster``
    does; workers beyond the GPUs share them round-robin; no GPU: CPU workers)."""
    try:
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(n_workers=workers, threads_per_worker=1)
    except ImportError:
        pass
    from distributed import Nanny, Scheduler, SpecCluster

    gpus = detkit._detkit.device_count()
    specs = {
        f"w{i}": {"cls": Nanny, "options": {
            "nthreads": 1,
            "env": {"CUDA_VISIBLE_DEVICES": str(i % gpus)} if gpus else {},
        }}
        for i in range(workers)
    }
    return SpecCluster(workers=specs, scheduler={"cls": Scheduler, "options": {"dashboard": False}},
                       silence_logs=logging.ERROR)


def write_event_files(d):
    """64 binary Run-3 digis files and 32 ⟨μ⟩ = 200 spacepoint CSVs in ``d``."""
    digis = []
    for s in range(64):
        ev = detkit.generate.cluster_event(seed=s + 1)
        p = os.path.join(d, f"digis{s}.bin")
        with open(p, "wb") as f:
            f.write(b"DKDIGI01" + np.uint32(len(ev[0])).tobytes())
            for a in ev:
                f.write(a.astype("<u2").tobytes())
        digis.append(p)
    sps = []
    for s in range(32):
        ev = detkit.generate.seeding_event(seed=s + 1, mu=200.0)[:5]
        p = os.path.join(d, f"sp{s}.csv")
        np.savetxt(p, np.stack(ev, axis=1), fmt="%.9g", delimiter=",",
                   header="x,y,z,var_r,var_z", comments="")
        sps.append(p)
    return digis, sps


def _task_time(func, paths, reps=5):
    """On a worker: the median time of one ``detkit.dask`` task over ``paths``."""
    import detkit.dask as dd

    return median_time(lambda: dd._run_files(func, paths, "auto", 0, {}), reps)


def _dask_steps(client, func, paths, size, direct, reps):
    """The steps of one ``map_files`` call, timed apart (median ms over ``reps``): submit of
    the tasks, until every task has finished (scheduling, the work, the notices back), the
    gather of the results (``direct``: from the workers, else through the scheduler)."""
    import distributed

    import detkit.dask as dd

    groups = [paths[i:i + size] for i in range(0, len(paths), size)]
    steps = {"submit": [], "run": [], "gather": [], "release": []}
    for _ in range(reps):
        t0 = time.perf_counter()
        futs = [client.submit(dd._run_files, func, g, "auto", 0, {}, pure=False) for g in groups]
        t1 = time.perf_counter()
        distributed.wait(futs)
        t2 = time.perf_counter()
        client.gather(futs, direct=direct)
        t3 = time.perf_counter()
        for f in futs:
            f.release()
        del futs
        t4 = time.perf_counter()
        for k, v in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            steps[k].append(v * 1e3)
    return {k: float(np.median(v)) for k, v in steps.items()}


def dask_rows(workers, reps, rows, files_per_task=(None,), directs=(None,)):
    """``detkit.dask.map_files`` on ``workers`` local GPU workers (:func:`gpu_cluster`): the
    time of one whole call (submit, run, gather of every file's result), warm workers; for
    each ``files_per_task`` and ``direct`` (the gather from the workers or through the
    scheduler), and where the time of a call goes (:func:`_dask_steps`)."""
    out = []
    if not workers or not {"dask-cluster", "dask-seed"} & set(rows):
        return out
    import distributed

    import detkit.dask as dd

    d = tempfile.mkdtemp(prefix="detkit-bench-host-")
    digis, sps = write_event_files(d)
    cluster = gpu_cluster(workers)
    client = distributed.Client(cluster)
    try:
        client.wait_for_workers(workers)
        where = client.run(lambda: (os.environ.get("CUDA_VISIBLE_DEVICES"),
                                    dd.worker_backend().description))
        print(f"# dask workers: {where}")
        # Round trips: the scheduler's identity (all workers, and the count alone), and one
        # empty task.
        for what, fn in (("scheduler_info()", lambda: client.scheduler_info()),
                         ("scheduler_info(n_workers=0)",
                          lambda: client.scheduler_info(n_workers=0)),
                         ("one empty task, submit to result",
                          lambda: client.submit(int, 0, pure=False).result())):
            print(f"# dask {what}: {median_time(fn, 20) * 1e3:.2f} ms")
        cpu = detkit.Backend("cpu")
        for row, func, paths in (("dask-cluster", dd.cluster_file, digis),
                                 ("dask-seed", dd.seed_file, sps)):
            if row not in rows:
                continue
            for fpt in files_per_task:
                for direct in directs:
                    call = lambda: dd.map_files(func, paths, client=client,  # noqa: E731
                                                files_per_task=fpt, direct=direct)
                    got = call()
                    for i in (0, len(paths) - 1):
                        same(got[i], func(cpu, paths[i]), f"{row} file {i}")
                    t = median_time(call, max(3, reps // 2))
                    name = row if fpt is None else f"{row}/{fpt}"
                    if direct is not None:
                        name += f"/direct={int(direct)}"
                    out.append((name, t, len(paths), float("nan")))
            # Where a call's time goes, one task per worker, gather through the scheduler
            # and straight from the workers.
            size = -(-len(paths) // workers)
            for direct in (False, True):
                st = _dask_steps(client, func, paths, size, direct, max(3, reps // 2))
                print(f"# {row}: {size} files per task, direct={direct}: "
                      + ", ".join(f"{k} {v:.1f} ms" for k, v in st.items()))
            # The workers' own time for their share of the files (one task each, no Dask
            # in between): what the rest of a map_files call adds is Dask's.
            share = paths[:size]
            work = client.run(_task_time, func, share)
            print(f"# {row}: one worker's task of {len(share)} files, run on the worker: "
                  + ", ".join(f"{1e3 * v:.1f} ms" for v in work.values()))
    finally:
        client.close()
        cluster.close()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rows", default=",".join(ROWS[:7] + ROWS[9:]))  # all but the Dask rows
    ap.add_argument("--rust", help="bench-host --csv output(s) of the same card (Rust rows; "
                    "comma-separated files, e.g. the devview rows after the others)")
    ap.add_argument("--csv", help="write the table as CSV here too")
    ap.add_argument("--dask", type=int, default=0, help="local Dask GPU workers (0: no Dask rows)")
    ap.add_argument("--files-per-task", default="auto",
                    help="map_files' files_per_task for the Dask rows: a list such as auto,8,32")
    ap.add_argument("--dask-direct", default="auto",
                    help="map_files' direct= for the Dask rows: a list such as auto,0,1")
    ap.add_argument("--phases", action="store_true",
                    help="also print where the host rows' time goes (library phases, layer parts)")
    ap.add_argument("--producer", choices=("detkit", "cupy"), default="detkit",
                    help="who makes the device inputs of the *-dev rows")
    ap.add_argument("--variants", default="0",
                    help="the host rows again for each measuring variant of the library's doors "
                         "(detkit.phases::set_variant; none is defined now, every value runs the "
                         "default path), rows suffixed [vN] when more than one")
    ap.add_argument("--dev-variants", default="0",
                    help="the *-dev rows once per library measuring variant (a list; none is "
                         "defined now, every value runs the default path; rows suffixed [vN] "
                         "when more than one)")
    a = ap.parse_args(argv)
    rows = [r.strip() for r in a.rows.split(",") if r.strip()]
    bad = [r for r in rows if r not in ROWS]
    if bad:
        ap.error(f"unknown rows {bad}; known: {', '.join(ROWS)}")
    PHASES[None] = a.phases
    b, cpu = detkit.Backend(a.backend), detkit.Backend("cpu")
    print(f"# {b.description}")
    rust = read_rust(a.rust) if a.rust else {}
    variants = [int(v) for v in a.variants.split(",") if v.strip()]
    results = []
    for v in variants:
        detkit._detkit._set_variant(v)
        part = (cluster_rows(b, cpu, a.reps, rows) + seed_rows(b, cpu, a.reps, rows)
                + pet_rows(b, cpu, a.reps, rows))
        if len(variants) > 1:
            part = [(f"{r[0]} [v{v}]",) + tuple(r[1:]) for r in part]
            for row in [r for r in PHASES if r is not None and "[v" not in r]:
                PHASES[f"{row} [v{v}]"] = PHASES.pop(row)
        results += part
    detkit._detkit._set_variant(0)
    results = (results + dev_variant_rows(b, cpu, a, rows)
               + dask_rows(a.dask, a.reps, rows,
                           [None if v == "auto" else int(v) for v in a.files_per_task.split(",")],
                           [None if v == "auto" else bool(int(v))
                            for v in a.dask_direct.split(",")]))
    header = ("row", "median_ms", "items_per_call", "items_per_s", "memcpy_ms", "rust_host_ms",
              "rust_device_ms", "copy_pin_ms", "vs_device")
    lines = []
    for row, t, items, copy in results:
        host, dev, pin = rust.get(row.split("[")[0], (None, None, None))
        fmt = lambda v: "-" if v is None or v != v else f"{v:.3f}"  # noqa: E731
        lines.append((row, f"{t * 1e3:.3f}", str(items), f"{items / t:.0f}",
                      fmt(copy * 1e3), fmt(host), fmt(dev), fmt(pin),
                      "-" if dev is None else f"{t * 1e3 / dev:.2f}x"))
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h)
              for i, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
    for l in lines:
        print("  ".join(v.rjust(w) for v, w in zip(l, widths)))
    print_phases()
    for row, wall, steps in PROFILES:
        print(f"# profile {row}: {wall * 1e6:.1f} us per call (mean, timers on); per call:")
        for name, us in steps:
            print(f"#   {name:<34} {us:9.1f} us")
        mine = sum(us for name, us in steps if not name.startswith("lib:"))
        print(f"#   {'outside the steps (Python layer)':<34} {wall * 1e6 - mine:9.1f} us")
    for name, us in PIECES:
        print(f"# piece {name}: {us:.1f} us (median)")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
