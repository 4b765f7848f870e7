"""The Python package against independent numpy facts and the Rust CPU backend.

`DETKIT_BACKEND=cuda` (the GPU host) runs every test on the CUDA backend and compares it
with the CPU backend; the default, `cpu`, runs on any machine."""

import os

import numpy as np
import pytest

import detkit

KIND = os.environ.get("DETKIT_BACKEND", "cpu")


@pytest.fixture(scope="module")
def b():
    return detkit.Backend(KIND)


@pytest.fixture(scope="module")
def cpu():
    return detkit.Backend("cpu")


def test_backend_kind_and_description(b):
    assert b.kind == KIND
    assert KIND in b.description
    with pytest.raises(ValueError):
        detkit.Backend("gpu")


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 1023, 1025, 100_003])
def test_scan_select_histogram_match_numpy(b, n):
    rng = np.random.default_rng(n)
    v = rng.integers(0, 1 << 20, n, dtype=np.uint32)
    ex = np.concatenate([[0], np.cumsum(v, dtype=np.uint32)[:-1]]).astype(np.uint32) if n else v
    assert np.array_equal(b.scan(v), ex)
    assert np.array_equal(b.scan(v, inclusive=True), np.cumsum(v, dtype=np.uint32))
    v64 = v.astype(np.uint64) << np.uint64(30)
    assert np.array_equal(b.scan(v64, inclusive=True), np.cumsum(v64, dtype=np.uint64))
    assert np.array_equal(b.select(v, 1000, 500_000), v[(v >= 1000) & (v < 500_000)])
    keys = rng.integers(0, 300, n, dtype=np.uint32)
    counts, oor, first = b.histogram(keys, 256)
    assert np.array_equal(counts, np.bincount(keys[keys < 256], minlength=256))
    assert oor == int((keys >= 256).sum())
    assert first == (int(np.argmax(keys >= 256)) if oor else None)


def test_dtypes_are_converted_or_rejected(b):
    assert b.scan([1, 2, 3]).tolist() == [0, 1, 3]  # a list of Python ints
    strided = np.arange(20, dtype=np.uint32)[::2]  # not contiguous
    assert np.array_equal(b.scan(strided, inclusive=True), np.cumsum(strided))
    with pytest.raises(TypeError, match="without loss"):
        b.scan(np.array([-1, 2], dtype=np.int64))
    with pytest.raises(TypeError, match="1-D"):
        b.scan(np.zeros((2, 2), dtype=np.uint32))
    with pytest.raises(TypeError, match="SINGLE_DTYPE"):
        b.sort(np.zeros(3, dtype=np.float64))


def test_cluster_worked_example(b):
    # Module 7: pixels (5,5) (9,9) (6,6) (5,5) (10,10) (2,2); the two (5,5) are duplicates.
    m = np.full(6, 7, dtype=np.uint16)
    xy = np.array([5, 9, 6, 5, 10, 2], dtype=np.uint16)
    clus, per_module = b.cluster(m, xy, xy, np.full(6, 3000), charge_cut=False)
    assert clus.tolist() == [-1, 0, 1, -1, 0, 2]
    assert per_module[7] == 3


def test_cluster_generated_event_equals_cpu(b, cpu):
    ev = detkit.generate.cluster_event(seed=5)
    assert len(ev[0]) > 50_000
    got = b.cluster(*ev)
    want = cpu.cluster(*ev)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # Two events in one call: the same clusters as one at a time.
    ev2 = detkit.generate.cluster_event(seed=6)
    both = [np.concatenate([a, c]) for a, c in zip(ev, ev2)]
    offs = np.array([0, len(ev[0]), len(both[0])], dtype=np.uint32)
    clus, _ = b.cluster(*both, event_offsets=offs)
    assert np.array_equal(clus, np.concatenate([want[0], cpu.cluster(*ev2)[0]]))


def test_cluster_bad_input_is_invalid_input_error(b):
    m = np.array([3, 4, 3], dtype=np.uint16)
    z = np.ones(3, dtype=np.uint16)
    with pytest.raises(detkit.InvalidInputError, match="digi 2: the digis of module 3 are not consecutive"):
        b.cluster(m, z, z, z)
    assert issubclass(detkit.InvalidInputError, ValueError)


def test_pet_chain_equals_cpu(tmp_path, b, cpu):
    nframes = detkit.generate.pet_acquisition(tmp_path, singles=20_000, seed=3)
    frames = (tmp_path / "frames.bin").read_bytes()
    assert len(frames) == 16 * nframes
    singles, stats = b.convert(frames, tmp_path / "scanner.toml")
    assert singles.dtype == detkit.SINGLE_DTYPE and stats["frames"] == nframes
    assert stats["accepted"] == len(singles)
    want, _ = cpu.convert(np.fromfile(tmp_path / "frames.bin", dtype=detkit.FRAME_DTYPE), tmp_path / "scanner.toml")
    assert singles.tobytes() == want.tobytes()
    s = b.sort(singles)
    assert np.all(np.diff(s["time"]) >= 0)
    order = np.argsort(singles["time"], kind="stable")
    assert s.tobytes() == singles[order].tobytes()
    pairs = b.coincide(s, window=5000.0)
    assert pairs.dtype == detkit.COINCIDENCE_DTYPE
    assert pairs.tobytes() == cpu.coincide(s, window=5000.0).tobytes()
    assert len(pairs) > 0 and np.all(pairs["b"]["time"] - pairs["a"]["time"] <= 5000.0)
    for policy in detkit.POLICIES:
        assert b.coincide(s, 5000.0, policy=policy).tobytes() == cpu.coincide(s, 5000.0, policy=policy).tobytes()
    with pytest.raises(detkit.InvalidInputError):
        b.coincide(s[::-1].copy(), 5000.0)  # not sorted
    with pytest.raises(detkit.InvalidInputError):
        b.coincide(s, 5000.0, policy="nope")


def test_seeding_equals_cpu_and_settings_are_checked(b, cpu):
    x, y, z, vr, vz, particle = detkit.generate.seeding_event(seed=2, mu=20.0)
    seeds, w, zv, params = b.seed(x, y, z, vr, vz)
    assert seeds.shape[1] == 3 and params.shape == (len(seeds), 5) and len(seeds) > 0
    want = cpu.seed(x, y, z, vr, vz)
    for g, e in zip((seeds, w, zv, params), want):
        assert np.array_equal(g, e)
    # Seeds of one particle dominate: the truth agrees on most triplets.
    same = (particle[seeds[:, 0]] == particle[seeds[:, 1]]) & (particle[seeds[:, 1]] == particle[seeds[:, 2]])
    assert same.mean() > 0.3
    fewer = b.seed(x, y, z, vr, vz, max_seeds_per_spm=1)[0]
    assert len(fewer) <= len(seeds)
    with pytest.raises(detkit.InvalidInputError, match="unknown field `nope`"):
        b.seed(x, y, z, nope=1)
    bad = z.copy()
    bad[3] = np.nan
    with pytest.raises(detkit.InvalidInputError, match="spacepoint 3"):
        b.seed(x, y, bad)
    empty = np.zeros(0, dtype=np.float32)
    assert b.seed(empty, empty, empty)[0].shape == (0, 3)


def test_seed_events_equal_one_call_per_event(b, cpu):
    evs = [detkit.generate.seeding_event(seed=s, mu=mu)[:5] for s, mu in ((3, 20.0), (4, 5.0), (5, 30.0))]
    empty = np.zeros(0, dtype=np.float32)
    # An empty event between the others, and one given without variances.
    events = [evs[0], (empty, empty, empty), evs[1], evs[2][:3]]
    got = b.seed_events(events, max_seeds_per_spm=3)
    assert len(got) == 4
    for ev, g in zip(events, got):
        want = cpu.seed(*ev, max_seeds_per_spm=3)
        for a, e in zip(g, want):
            assert np.array_equal(a, e)
    assert got[1][0].shape == (0, 3) and len(got[0][0]) > 0
    assert b.seed_events([]) == []
    with pytest.raises(detkit.InvalidInputError, match="event 1: y has 2 values"):
        b.seed_events([evs[0], (evs[1][0], evs[1][1][:2], evs[1][2])])
    with pytest.raises(detkit.InvalidInputError, match="event 0: expected"):
        b.seed_events([(evs[0][0], evs[0][1])])
    with pytest.raises(detkit.InvalidInputError, match="unknown field `nope`"):
        b.seed_events([evs[0]], nope=1)


def test_seed_flat_equals_seed_events_flat(b, cpu):
    evs = [detkit.generate.seeding_event(seed=s, mu=mu)[:5] for s, mu in ((3, 20.0), (4, 5.0), (5, 30.0))]
    empty = np.zeros(0, dtype=np.float32)
    events = [evs[0], (empty,) * 5, evs[1], evs[2]]
    cols = [np.concatenate([e[j] for e in events]) for j in range(5)]
    offs = np.cumsum([0] + [len(e[0]) for e in events])
    got = b.seed_flat(*cols, event_offsets=offs, max_seeds_per_spm=3)
    want = cpu.seed_events_flat(events, max_seeds_per_spm=3)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)
    assert len(got[4]) == 5 and got[4][1] == got[4][2]
    # Variances not given: zero, as seed_events without them.
    got = b.seed_flat(*cols[:3], event_offsets=offs.astype(np.uint32))
    want = cpu.seed_events_flat([e[:3] for e in events])
    for g, w in zip(got, want):
        assert np.array_equal(g, w)
    n = len(cols[0])
    for bad in ([0, 5, n - 1], [0, 7, 3, n], [1, n], []):
        with pytest.raises(detkit.InvalidInputError, match="event_offsets"):
            b.seed_flat(*cols, event_offsets=np.array(bad, np.int64))
    with pytest.raises(detkit.InvalidInputError, match="y has"):
        b.seed_flat(cols[0], cols[1][:-1], cols[2], event_offsets=np.array([0, n]))


def test_device_pool_map_keeps_input_order_and_matches_one_device(b):
    # A pool of CPU backends here (CUDA devices when DETKIT_BACKEND=cuda and devices exist).
    kind = b.kind
    pool = detkit.Backend(kind, devices=2 if kind == "cpu" else "all")
    assert pool.devices >= 1
    events = [detkit.generate.cluster_event(seed=s) for s in range(1, 7)]

    def sizes(backend, ev):
        clus, per_module = backend.cluster(*ev)
        return int(per_module.sum()), clus

    got = pool.map(sizes, events)
    want = [sizes(b, ev) for ev in events]
    assert [g[0] for g in got] == [w[0] for w in want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g[1], w[1])
    # Failures: the lowest failed index is raised.
    def boom(backend, i):
        if i in (3, 5):
            raise ValueError(f"item {i}")
        return i

    with pytest.raises(ValueError, match="item 3"):
        pool.map(boom, range(8))


def test_device_lists_are_checked():
    with pytest.raises(detkit.InvalidInputError, match="listed twice"):
        detkit.Backend("cpu", devices=[0, 0])
    with pytest.raises(detkit.InvalidInputError, match="expected 'all'"):
        detkit.Backend("cpu", devices="0,x")
    with pytest.raises(detkit.InvalidInputError, match="empty"):
        detkit.Backend("cpu", devices=[])


@pytest.mark.parametrize("n", [0, 1, 33, 5000, 70_000])
def test_radix_sort_matches_numpy_stable_sort(b, n):
    rng = np.random.default_rng(n)
    k32 = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    k64 = rng.integers(0, 2**63, n, dtype=np.uint64) | (rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(63))
    for k in (k32, k64):
        np.testing.assert_array_equal(b.radix_sort(k), np.sort(k, kind="stable"))
        # Only bits 8..16 order; the rest rides along; ties keep input order.
        field = (k >> k.dtype.type(8)) & k.dtype.type(0xFF)
        order = np.argsort(field, kind="stable")
        got_k, got_v = b.radix_sort(k, np.arange(n, dtype=np.uint32), begin_bit=8, end_bit=16)
        np.testing.assert_array_equal(got_k, k[order])
        np.testing.assert_array_equal(got_v, order.astype(np.uint32))
        np.testing.assert_array_equal(b.argsort(k, begin_bit=8, end_bit=16), order)
        # Descending is stable too: equal keys in input order.
        desc = np.argsort(-field.astype(np.int64), kind="stable")
        np.testing.assert_array_equal(b.argsort(k, begin_bit=8, end_bit=16, descending=True), desc)
    # Values of 8 and 16 bytes follow their keys.
    vals = rng.standard_normal(n)
    rec = np.zeros(n, dtype=[("a", "<u8"), ("b", "<f8")])
    rec["a"] = np.arange(n)
    order = np.argsort(k32, kind="stable")
    np.testing.assert_array_equal(b.radix_sort(k32, vals)[1], vals[order])
    np.testing.assert_array_equal(b.radix_sort(k32, rec)[1]["a"], order)


def test_radix_sort_rejects_bad_arguments(b):
    k = np.arange(10, dtype=np.uint32)
    with pytest.raises(detkit.InvalidInputError):
        b.radix_sort(k, end_bit=33)
    with pytest.raises(detkit.InvalidInputError):
        b.radix_sort(k, begin_bit=9, end_bit=8)
    with pytest.raises(detkit.InvalidInputError, match="2 bytes"):
        b.radix_sort(k, np.zeros(10, dtype=np.uint16))
    with pytest.raises(detkit.InvalidInputError, match="expected 10 values"):
        b.radix_sort(k, np.zeros(9, dtype=np.uint32))
