"""`detkit.dask`: the file readers against the generators, and `map_files` on a real
`distributed.LocalCluster` (two worker processes, CPU backend) against a single-process run
of the same task functions.

The cluster tests are skipped, with the reason, only when `distributed` cannot be imported
(scripts/setup.sh installs it, so CI runs them)."""

import os
import sys

import numpy as np
import pytest

import detkit
import detkit.dask as dd

try:
    import distributed
except ImportError as e:  # pragma: no cover - CI has distributed
    distributed = None
    _why = f"distributed is not importable ({e}); pip install 'detkit[dask]'"
else:
    _why = ""

needs_distributed = pytest.mark.skipif(distributed is None, reason=_why)


# -- generated event files --------------------------------------------------------------


def write_digis_csv(path, module, x, y, adc):
    np.savetxt(path, np.stack([module, x, y, adc], axis=1), fmt="%d", delimiter=",",
               header="module,x,y,adc", comments="")


def write_digis_bin(path, module, x, y, adc):
    with open(path, "wb") as f:
        f.write(b"DKDIGI01")
        f.write(np.uint32(len(module)).tobytes())
        for a in (module, x, y, adc):
            f.write(np.asarray(a, dtype="<u2").tobytes())


def write_spacepoints_csv(path, x, y, z, var_r, var_z):
    # 9 significant digits give every float32 back exactly.
    np.savetxt(path, np.stack([x, y, z, var_r, var_z], axis=1), fmt="%.9g", delimiter=",",
               header="x,y,z,var_r,var_z", comments="")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Several small event files of each chain, with the generated arrays they hold."""
    d = tmp_path_factory.mktemp("events")
    digis, events = [], {}
    for seed in (1, 2, 3):
        ev = detkit.generate.cluster_event(seed=seed)
        p = d / (f"digis{seed}.bin" if seed == 2 else f"digis{seed}.csv")
        (write_digis_bin if seed == 2 else write_digis_csv)(p, *ev)
        digis.append(str(p))
        events[str(p)] = ev
    spacepoints = []
    for seed in (1, 2, 3):
        sp = detkit.generate.seeding_event(seed=seed, mu=20.0)
        p = d / f"spacepoints{seed}.csv"
        write_spacepoints_csv(p, *sp[:5])
        spacepoints.append(str(p))
        events[str(p)] = sp[:5]
    frames = []
    for seed in (1, 2):
        sub = d / f"pet{seed}"
        sub.mkdir()
        detkit.generate.pet_acquisition(sub, singles=20_000, seed=seed)
        frames.append(str(sub / "frames.bin"))
    return {"digis": digis, "spacepoints": spacepoints, "frames": frames, "events": events}


def assert_same(a, b):
    """Equal results: arrays by value (dtype included), tuples and dicts entry by entry."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    else:
        assert a == b


# -- readers (no Dask) --------------------------------------------------------------------


def test_readers_give_the_generated_arrays_back(files):
    for p in files["digis"] + files["spacepoints"]:
        got = dd.read_digis(p) if "digis" in p else dd.read_spacepoints(p)
        want = files["events"][p]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w), p


def test_csv_reader_follows_the_cli_rules(tmp_path):
    p = tmp_path / "d.csv"
    # BOM, columns in another order, an extra column, spaces, blank lines.
    p.write_text("\ufeffadc, y ,extra,x,module\n3000,5,a,6,7\n\n 4000 ,9,b,9,7\n", "utf-8")
    m, x, y, adc = dd.read_digis(p)
    assert (m.tolist(), x.tolist(), y.tolist(), adc.tolist()) == ([7, 7], [6, 9], [5, 9], [3000, 4000])
    # Quoted fields (the csv module's path, not numpy's): the same digis.
    p.write_text('adc,"y",extra,x,module\n"3000",5,"a,b",6,7\n4000,9,b,9,7\n')
    assert [a.tolist() for a in dd.read_digis(p)] == [[7, 7], [6, 9], [5, 9], [3000, 4000]]
    p.write_text("module,x,y,adc\n")
    assert all(a.size == 0 and a.dtype == np.uint16 for a in dd.read_digis(p))
    sp = tmp_path / "s.csv"
    sp.write_text("z,x,y,particle\n3,1,2,7\n")
    x, y, z, vr, vz = dd.read_spacepoints(sp)
    assert (x[0], y[0], z[0], vr[0], vz[0]) == (1, 2, 3, 0, 0)


@pytest.mark.parametrize(
    "text, where",
    [
        ("module,x,y,adc\n7,1,1,3000\n7,2,abc,3000\n", ":3: column `y`"),
        ("module,x,y,adc\n7,1,1,3000\n\n7,2,2,70000\n", ":4: column `adc`"),
        ("module,x,y,adc\n7,1,1,-1\n", ":2: column `adc`"),
        ("module,x,y,adc\n7,1,1,1_000\n", ":2: column `adc`"),
        ("module,x,y\n7,1,1\n", ":1: column `adc`: missing from the header"),
        ("module,x,y,adc\n7,1,1\n", ":2: 3 fields"),
        ("", ":1: no header"),
    ],
)
def test_bad_digis_name_file_line_and_column(tmp_path, text, where):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(detkit.InvalidInputError) as e:
        dd.read_digis(p)
    assert str(e.value).startswith(f"{p}{where}"), str(e.value)


def test_bad_spacepoints_and_binary_digis(tmp_path):
    p = tmp_path / "sp.csv"
    p.write_text("x,y,z\n1,2,3\n1,NaN,3\n")
    with pytest.raises(detkit.InvalidInputError, match=r"sp\.csv:3: column `y`"):
        dd.read_spacepoints(p)
    p.write_text("x,y,z,var_z\n1,2,3,-1\n")
    with pytest.raises(detkit.InvalidInputError, match=r"sp\.csv:2: column `var_z`"):
        dd.read_spacepoints(p)
    b = tmp_path / "short.bin"
    b.write_bytes(b"DKDIGI01" + np.uint32(5).tobytes() + b"\0" * 10)
    with pytest.raises(detkit.InvalidInputError, match="short.bin"):
        dd.read_digis(b)


def test_task_functions_equal_direct_backend_calls(files):
    cpu = detkit.Backend("cpu")
    p = files["digis"][0]
    assert_same(dd.cluster_file(cpu, p), cpu.cluster(*files["events"][p]))
    p = files["spacepoints"][0]
    assert_same(dd.seed_file(cpu, p, min_pt=0.9), cpu.seed(*files["events"][p], min_pt=0.9))
    pairs, stats = dd.pet_file(cpu, files["frames"][0])
    singles, _ = cpu.convert(np.fromfile(files["frames"][0], np.uint8),
                             os.path.join(os.path.dirname(files["frames"][0]), "scanner.toml"))
    assert stats["frames"] > 0 and len(pairs) > 0
    assert_same(pairs, cpu.coincide(cpu.sort(singles), 5000.0))  # the generated time_window


def test_worker_backend_is_cached_per_process():
    assert dd.worker_backend("cpu") is dd.worker_backend("cpu")
    assert dd.worker_backend("cpu").kind == "cpu"


# -- map_files on a LocalCluster --------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    if distributed is None:
        pytest.skip(_why)
    import cloudpickle

    # Task functions of this test module travel by value (workers cannot import it).
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def single_process(func, paths, **kwargs):
    cpu = detkit.Backend("cpu")
    return [func(cpu, p, **kwargs) for p in paths]


@needs_distributed
@pytest.mark.parametrize(
    "chain, func, kwargs",
    [
        ("digis", dd.cluster_file, {}),
        ("digis", dd.cluster_file, {"charge_cut": 6000}),
        ("spacepoints", dd.seed_file, {"min_pt": 0.9}),
        ("frames", dd.pet_file, {"policy": "takeAllGoods"}),
    ],
)
def test_map_files_equals_a_single_process_run_in_order(client, files, chain, func, kwargs):
    paths = files[chain][::-1] + files[chain]  # repeated paths, not in generation order
    got = dd.map_files(func, paths, client=client, backend="cpu", **kwargs)
    want = single_process(func, paths, **kwargs)
    assert len(got) == len(paths)
    for g, w in zip(got, want):
        assert_same(g, w)


@needs_distributed
def test_results_through_the_scheduler_or_from_the_workers_are_the_same(client, files, tmp_path):
    missing = str(tmp_path / "missing.bin")
    paths = files["digis"] + [missing] + files["digis"][::-1]
    want = single_process(dd.cluster_file, files["digis"])
    want = want + [None] + want[::-1]
    for direct in (None, True, False):
        out = dd.map_files(dd.cluster_file, paths, client=client, backend="cpu",
                           errors="return", direct=direct)
        assert len(out) == len(paths)
        for r, w in zip(out, want):
            if w is None:
                assert isinstance(r, dd.FileFailure) and r.error_type == "FileNotFoundError"
            else:
                assert_same(r, w)


def where_it_ran(backend, path):
    return os.getpid(), id(backend), backend.kind, path


@needs_distributed
def test_tasks_spread_over_workers_with_one_backend_per_process(client, files):
    paths = files["digis"] * 8
    out = dd.map_files(where_it_ran, paths, backend="cpu")  # the default client
    assert [o[3] for o in out] == paths
    assert {o[2] for o in out} == {"cpu"}
    backends = {}
    for pid, ident, _, _ in out:
        backends.setdefault(pid, set()).add(ident)
    assert os.getpid() not in backends  # ran on the workers
    assert all(len(ids) == 1 for ids in backends.values()), backends


@needs_distributed
def test_bad_files_are_named_and_the_others_kept(client, files, tmp_path):
    bad_csv = tmp_path / "malformed.csv"
    bad_csv.write_text("module,x,y,adc\n7,1,1,3000\n7,2,oops,3000\n")
    missing = tmp_path / "missing.csv"
    good = files["digis"]
    paths = [good[0], str(bad_csv), good[1], str(missing), good[2]]
    want = single_process(dd.cluster_file, good)

    with pytest.raises(dd.DaskFilesError) as e:
        dd.map_files(dd.cluster_file, paths, client=client, backend="cpu")
    err = e.value
    assert [f.path for f in err.failures] == [str(bad_csv), str(missing)]
    assert str(bad_csv) in str(err) and str(missing) in str(err)
    f_csv, f_missing = err.failures
    assert f_csv.error_type == "InvalidInputError" and f"{bad_csv}:3: column `y`" in f_csv.message
    assert f_missing.error_type == "FileNotFoundError"
    assert f_csv.worker is not None and "InvalidInputError" in f_csv.traceback
    assert err.paths == paths and len(err.results) == len(paths)
    assert err.results[1] is f_csv and err.results[3] is f_missing
    for g, w in zip([err.results[0], err.results[2], err.results[4]], want):
        assert_same(g, w)
    assert list(err.succeeded()) == good

    out = dd.map_files(dd.cluster_file, paths, client=client, backend="cpu", errors="return")
    assert [isinstance(r, dd.FileFailure) for r in out] == [False, True, False, True, False]
    assert out[1] == f_csv and out[3] == f_missing  # equal: path, type and message
    for g, w in zip([out[0], out[2], out[4]], want):
        assert_same(g, w)


@needs_distributed
def test_backend_that_cannot_open_fails_every_file_by_name(client, files):
    out = dd.map_files(dd.cluster_file, files["digis"], client=client, backend="gpu",
                       errors="return")
    assert [f.path for f in out] == files["digis"]
    assert all(f.error_type == "ValueError" and "gpu" in f.message for f in out)


@needs_distributed
def test_map_files_argument_errors(client, files):
    with pytest.raises(ValueError, match="errors"):
        dd.map_files(dd.cluster_file, files["digis"], client=client, errors="skip")
    with pytest.raises(TypeError, match="callable"):
        dd.map_files("cluster_file", files["digis"], client=client)
    assert dd.map_files(dd.cluster_file, [], client=client) == []


def test_map_files_without_distributed_says_how_to_install(monkeypatch, files):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` fails
    with pytest.raises(ImportError, match=r"detkit\[dask\]"):
        dd.map_files(dd.cluster_file, files["digis"])


@needs_distributed
def test_map_files_without_a_client_is_a_value_error(monkeypatch, files):
    def no_client():
        raise ValueError("No clients found")

    monkeypatch.setattr(distributed, "default_client", no_client)
    with pytest.raises(ValueError, match="no Dask client"):
        dd.map_files(dd.cluster_file, files["digis"])


@needs_distributed
@pytest.mark.parametrize("chain, func, kwargs", [
    ("digis", dd.cluster_file, {"charge_cut": 5000}),
    ("spacepoints", dd.seed_file, {"min_pt": 0.9}),
    ("frames", dd.pet_file, {}),
])
def test_grouped_files_keep_per_file_results_and_failures(client, files, tmp_path, chain, func, kwargs):
    bad = tmp_path / "bad.csv"
    bad.write_text("module,x,y,adc\n7,1,1,3000\n7,2,oops,3000\n" if chain == "digis"
                   else "x,y,z\n1,2,3\n1,NaN,3\n")
    missing = str(tmp_path / "missing.bin")
    good = files[chain]
    paths = good + [str(bad), missing] + good[::-1] if chain != "frames" else good + [missing] + good
    want = {p: r for p, r in zip(good, single_process(func, good, **kwargs))}
    for size in (1, 3, len(paths)):
        out = dd.map_files(func, paths, client=client, backend="cpu", errors="return",
                           files_per_task=size, **kwargs)
        assert len(out) == len(paths)
        for p, r in zip(paths, out):
            if p in want:
                assert_same(r, want[p])
            elif p == missing:
                assert isinstance(r, dd.FileFailure) and r.error_type == "FileNotFoundError"
            else:
                assert isinstance(r, dd.FileFailure) and r.error_type == "InvalidInputError"
                assert f"{bad}:3: column `y`" in r.message and "InvalidInputError" in r.traceback
    with pytest.raises(ValueError, match="files_per_task"):
        dd.map_files(func, paths, client=client, files_per_task=0)
