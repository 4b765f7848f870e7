"""Issue 27 on the GPU with CuPy as the producer and consumer (preinstalled on the GPU host:
``cupy-cuda13x``): the device-resident clustering and seeding calls (CUDA arrays of the
exact dtype go to the library's device-view entry points, no host round trip) give the
numpy path's results bit for bit and its errors word for word; ordering after the
producer's stream; lifetimes. A second producer beside ``test_device_gpu.py``'s
``cuda.core`` (a separate file so that each skips only for its own missing library).
Skipped without a CUDA device or without CuPy."""

import gc

import numpy as np
import pytest

import detkit
from detkit import _detkit

if _detkit.device_count() == 0:
    pytest.skip("skipped: no CUDA driver or device", allow_module_level=True)
cp = pytest.importorskip("cupy", reason="CuPy not installed")


@pytest.fixture(scope="module")
def b():
    return detkit.Backend("cuda", 0)


def batch(events):
    """``events`` Run-3-like events concatenated: four columns and the event offsets."""
    evs = [detkit.generate.cluster_event(seed=s) for s in range(1, events + 1)]
    cols = [np.concatenate([e[j] for e in evs]) for j in range(4)]
    offs = np.zeros(events + 1, np.uint32)
    offs[1:] = np.cumsum([len(e[0]) for e in evs])
    return cols, offs


def equal(got, want):
    assert isinstance(got, detkit.DeviceArray)
    np.testing.assert_array_equal(cp.asnumpy(cp.asarray(got)), want)  # CAI consumer
    np.testing.assert_array_equal(cp.asnumpy(cp.from_dlpack(got)), want)  # DLPack consumer
    np.testing.assert_array_equal(got.get(), want)


@pytest.mark.parametrize("events", [1, 5, 64])
@pytest.mark.parametrize("cut", [None, False, 3000])
def test_cluster_cupy_equals_numpy(b, events, cut):
    cols, offs = batch(events)
    want = b.cluster(*cols, charge_cut=cut, event_offsets=offs)
    got = b.cluster(*[cp.asarray(c) for c in cols], charge_cut=cut, event_offsets=offs)
    for g, w in zip(got, want):
        equal(g, w)
    # Event offsets on the device too (read back: events + 1 words).
    got = b.cluster(*[cp.asarray(c) for c in cols], charge_cut=cut, event_offsets=cp.asarray(offs))
    for g, w in zip(got, want):
        equal(g, w)


@pytest.mark.parametrize("n", [0, 1, 31, 33])
def test_cluster_cupy_small(b, n):
    ev = [a[:n] for a in detkit.generate.cluster_event(seed=3)]
    want = b.cluster(*ev)
    got = b.cluster(*[cp.asarray(a) for a in ev])
    for g, w in zip(got, want):
        equal(g, w)


@pytest.mark.parametrize("fault", ["module", "x", "y"])
def test_cluster_cupy_bad_digi_in_the_middle_event(b, fault):
    cols, offs = batch(5)
    mid = int(offs[2] + (offs[3] - offs[2]) // 2)
    bad = [c.copy() for c in cols]
    bad[{"module": 0, "x": 1, "y": 2}[fault]][mid] = {"module": 5000, "x": 160, "y": 416}[fault]
    with pytest.raises(detkit.InvalidInputError) as want:
        b.cluster(*bad, event_offsets=offs)
    with pytest.raises(detkit.InvalidInputError) as got:
        b.cluster(*[cp.asarray(c) for c in bad], event_offsets=offs)
    assert str(got.value) == str(want.value)
    assert str(mid) in str(got.value)
    # The backend works after the error.
    for g, w in zip(b.cluster(*[cp.asarray(c) for c in cols], event_offsets=offs),
                    b.cluster(*cols, event_offsets=offs)):
        equal(g, w)


def test_cluster_cupy_lengths_and_dtypes(b):
    cols, _ = batch(1)
    d = [cp.asarray(c) for c in cols]
    with pytest.raises(detkit.InvalidInputError) as want:
        b.cluster(cols[0], cols[1][:-1], cols[2], cols[3])
    with pytest.raises(detkit.InvalidInputError) as got:
        b.cluster(d[0], d[1][:-1], d[2], d[3])
    assert str(got.value) == str(want.value)
    # Another dtype that fits is converted (general path), one that does not is a TypeError.
    got = b.cluster(d[0].astype(cp.uint32), d[1], d[2], d[3])
    for g, w in zip(got, b.cluster(*cols)):
        equal(g, w)
    with pytest.raises(TypeError):
        b.cluster(d[0].astype(cp.float32), d[1], d[2], d[3])
    with pytest.raises(TypeError):
        b.cluster(d[0].reshape(1, -1), d[1], d[2], d[3])


def test_cluster_cupy_stream_ordering_and_lifetime(b):
    cols, offs = batch(8)
    want = b.cluster(*cols, event_offsets=offs)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        d = [cp.full(c.shape, 0xFFFF, dtype=cp.uint16) for c in cols]
        big = cp.zeros(1 << 28, dtype=cp.float32)
        for _ in range(8):
            big += 1  # long work ahead of the copies on the producer's stream
        for dst, c in zip(d, cols):
            dst.set(c, stream=s)
    got = b.cluster(*d, event_offsets=offs, stream=s.ptr)
    del d, big
    gc.collect()
    for g, w in zip(got, want):
        equal(g, w)
    # Detkit's output outlives the backend that made it.
    b2 = detkit.Backend("cuda", 0)
    out = b2.cluster(*[cp.asarray(c) for c in cols], event_offsets=offs)
    view = cp.from_dlpack(out[0])
    del b2, out
    gc.collect()
    np.testing.assert_array_equal(cp.asnumpy(view), want[0])


@pytest.mark.parametrize("events", [1, 7])
def test_cluster_cupy_offsets_on_the_device(b, events):
    """CUDA event offsets are opened with the digis and read by the library: the numpy
    path's results; offsets of another dtype take the conversion; bad offsets are the numpy
    path's error."""
    cols, offs = batch(events)
    want = b.cluster(*cols, event_offsets=offs)
    d = [cp.asarray(c) for c in cols]
    got = b.cluster(*d, event_offsets=cp.asarray(offs))
    for g, w in zip(got, want):
        equal(g, w)
    got = b.cluster(*d, event_offsets=cp.asarray(offs.astype(np.int64)))
    for g, w in zip(got, want):
        equal(g, w)
    swapped = offs.copy()
    if events > 2:
        swapped[1], swapped[2] = offs[2], offs[1]  # decreasing
    else:
        swapped += 1  # not from 0
    for bad in (offs[:-1], swapped):
        bad = np.ascontiguousarray(bad, dtype=np.uint32)
        with pytest.raises(detkit.InvalidInputError) as w:
            b.cluster(*cols, event_offsets=bad)
        with pytest.raises(detkit.InvalidInputError) as g:
            b.cluster(*d, event_offsets=cp.asarray(bad))
        assert str(g.value) == str(w.value)


def seed_events(k, mu=200.0):
    return [detkit.generate.seeding_event(seed=s, mu=mu)[:5] for s in range(1, k + 1)]


@pytest.mark.parametrize("k", [1, 4, 64])
def test_seed_cupy_equals_numpy(b, k):
    evs = seed_events(k)
    if k == 4:
        evs[2] = tuple(c[:0] for c in evs[2])  # an empty event in the middle
    want = b.seed_events(evs)
    got = b.seed_events([[cp.asarray(c) for c in e] for e in evs])
    assert len(got) == len(want)
    for r, w in zip(got, want):
        for g, x in zip(r, w):
            equal(g, x)
    # One event, and variances not given (zero), as the numpy path.
    e = evs[0]
    for g, x in zip(b.seed(*[cp.asarray(c) for c in e[:3]]), b.seed(*e[:3])):
        equal(g, x)


@pytest.mark.parametrize("col,value", [(0, np.nan), (1, np.inf), (2, -np.inf), (3, -1.0), (4, np.nan)])
def test_seed_cupy_bad_spacepoint_in_the_middle_event(b, col, value):
    evs = [list(e) for e in seed_events(5, mu=10.0)]
    k = len(evs[2][0]) // 2
    evs[2][col] = evs[2][col].copy()
    evs[2][col][k] = value
    with pytest.raises(detkit.InvalidInputError) as want:
        b.seed_events(evs)
    with pytest.raises(detkit.InvalidInputError) as got:
        b.seed_events([[cp.asarray(c) for c in e] for e in evs])
    assert str(got.value) == str(want.value)
    # Lengths: the numpy path's message.
    short = [list(e) for e in seed_events(3, mu=10.0)]
    short[1][4] = short[1][4][:-1]
    with pytest.raises(detkit.InvalidInputError) as want:
        b.seed_events(short)
    with pytest.raises(detkit.InvalidInputError) as got:
        b.seed_events([[cp.asarray(c) for c in e] for e in short])
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("k", [1, 4, 64])
def test_seed_flat_cupy_equals_seed_events(b, k):
    """`seed_flat` of five concatenated CUDA columns and event offsets: the rows of
    `seed_events_flat` of the same events, bit for bit, as flat DeviceArrays."""
    evs = seed_events(k)
    if k == 4:
        evs[2] = tuple(c[:0] for c in evs[2])  # an empty event in the middle
    want = b.seed_events_flat(evs)
    cols = [np.concatenate([e[j] for e in evs]) for j in range(5)]
    offs = np.zeros(k + 1, np.int64)
    offs[1:] = np.cumsum([len(e[0]) for e in evs])
    got = b.seed_flat(*[cp.asarray(c) for c in cols], event_offsets=cp.asarray(offs))
    for g, w in zip(got[:4], want[:4]):
        equal(g, w)
    np.testing.assert_array_equal(got[4], want[4])
    # Variances not given (zero), offsets in host memory: as the numpy path.
    want = b.seed_flat(*cols[:3], event_offsets=offs)
    got = b.seed_flat(*[cp.asarray(c) for c in cols[:3]], event_offsets=offs)
    for g, w in zip(got[:4], want[:4]):
        equal(g, w)
    np.testing.assert_array_equal(got[4], want[4])


def test_seed_flat_cupy_errors(b):
    evs = seed_events(3, mu=10.0)
    cols = [np.concatenate([e[j] for e in evs]) for j in range(5)]
    n = len(cols[0])
    d = [cp.asarray(c) for c in cols]
    for offs in ([0, 5, n - 1], [0, 7, 3, n], [1, n]):
        with pytest.raises(detkit.InvalidInputError, match="event_offsets"):
            b.seed_flat(*d, event_offsets=np.array(offs, np.int64))
        with pytest.raises(detkit.InvalidInputError, match="event_offsets"):
            b.seed_flat(*cols, event_offsets=np.array(offs, np.int64))
    bad = cols[0].copy()
    bad[n // 2] = np.nan
    with pytest.raises(detkit.InvalidInputError):
        b.seed_flat(cp.asarray(bad), *d[1:], event_offsets=np.array([0, n], np.int64))
    with pytest.raises(detkit.InvalidInputError):
        b.seed_flat(d[0], d[1][:-1], *d[2:], event_offsets=np.array([0, n], np.int64))
    # The backend works after the errors.
    got = b.seed_flat(*d, event_offsets=np.array([0, n], np.int64))
    want = b.seed_flat(*cols, event_offsets=np.array([0, n], np.int64))
    for g, w in zip(got[:4], want[:4]):
        equal(g, w)


@pytest.mark.parametrize("n", [0, 1, 1000, 1 << 20])
def test_select_cupy_equals_numpy(b, n):
    v = np.random.default_rng(n).integers(0, 1 << 20, n, dtype=np.uint32)
    want = b.select(v, 1000, 500_000)
    got = b.select(cp.asarray(v), 1000, 500_000)
    equal(got, want)


@pytest.mark.parametrize("singles", [0, 1, 50_000])
def test_convert_cupy_equals_numpy(b, singles):
    scanner, frames = detkit.generate.pet_frames("tiny", singles=singles, seed=6)
    want, want_stats = b.convert(frames, scanner)
    got, stats = b.convert(cp.asarray(frames.view(np.uint8)), scanner)
    assert isinstance(got, detkit.DeviceArray) and stats == want_stats
    assert got.get().tobytes() == want.tobytes()
    assert cp.asnumpy(cp.from_dlpack(got)).tobytes() == want.tobytes()
    if frames.nbytes > 16:
        raw = cp.asarray(frames.view(np.uint8))[:-3]
        with pytest.raises(detkit.InvalidInputError) as w:
            b.convert(frames.view(np.uint8)[:-3], scanner)
        with pytest.raises(detkit.InvalidInputError) as g:
            b.convert(raw, scanner)
        assert str(g.value) == str(w.value)


def pet_singles(n, seed=7):
    """Converted singles of a generated acquisition, and the scanner's window."""
    scanner, frames = detkit.generate.pet_frames("tiny", singles=n, seed=seed)
    return detkit.Backend("cpu").convert(frames, scanner)[0], scanner.time_window


def rows(a):
    """Records as CuPy ``uint8`` rows (the form of a ``DeviceArray`` of records)."""
    return cp.asarray(a.view(np.uint8).reshape(-1, a.dtype.itemsize))


@pytest.mark.parametrize("n", [0, 1, 2, 50_000])
def test_sort_and_coincide_cupy_stay_on_the_device(b, n):
    singles, w = pet_singles(n)
    want = b.sort(singles)
    for form in (rows(singles), rows(singles).reshape(-1)):  # (n, 16) rows or 16 n bytes
        got = b.sort(form)
        assert isinstance(got, detkit.DeviceArray) and got.shape == (len(singles), 16)
        assert got.get().tobytes() == want.tobytes()
        assert cp.asnumpy(cp.from_dlpack(got)).tobytes() == want.tobytes()
    for policy in ("killAll", "takeAllGoods", "takeWinnerOfGoods"):
        for delay in (None, 4 * w):
            pw = b.coincide(want, w, delay=delay, policy=policy)
            pg = b.coincide(rows(want), w, delay=delay, policy=policy)
            assert isinstance(pg, detkit.DeviceArray) and pg.shape == (len(pw), 32)
            assert pg.get().tobytes() == pw.tobytes()
    # A DeviceArray result is the next call's input.
    pairs = b.coincide(b.sort(rows(singles)), w)
    assert pairs.get().tobytes() == b.coincide(want, w).tobytes()


@pytest.mark.parametrize("fault", ["nan", "inf", "unsorted", "unsorted then nan"])
def test_sort_and_coincide_cupy_errors_are_the_numpy_paths(b, fault):
    singles, w = pet_singles(20_000, seed=3)
    bad = b.sort(singles).copy()
    if fault == "nan":
        bad["time"][1234] = np.nan
    elif fault == "inf":
        bad["time"][-1] = np.inf
    elif fault == "unsorted":
        bad[[100, 900]] = bad[[900, 100]]
    else:
        bad[[100, 900]] = bad[[900, 100]]
        bad["time"][5000] = np.nan
    calls = [lambda a: b.coincide(a, w)]
    if "unsorted" != fault:
        calls.append(lambda a: b.sort(a))
    for call in calls:
        with pytest.raises(detkit.InvalidInputError) as want:
            call(bad)
        with pytest.raises(detkit.InvalidInputError) as got:
            call(rows(bad))
        assert str(got.value) == str(want.value)
    if fault == "unsorted":
        assert b.sort(rows(bad)).get().tobytes() == b.sort(bad).tobytes()


def test_sort_cupy_stream_ordering_and_lifetime(b):
    singles, w = pet_singles(200_000, seed=5)
    want = b.sort(singles)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        d = cp.zeros((len(singles), 16), dtype=cp.uint8)
        big = cp.zeros(1 << 28, dtype=cp.float32)
        for _ in range(8):
            big += 1  # long work ahead of the copy on the producer's stream
        d.set(singles.view(np.uint8).reshape(-1, 16), stream=s)
    got = b.sort(d, stream=s.ptr)
    del d, big
    gc.collect()
    assert got.get().tobytes() == want.tobytes()
    # The result outlives the backend that made it.
    b2 = detkit.Backend("cuda", 0)
    out = b2.coincide(rows(want), w)
    view = cp.from_dlpack(out)
    del b2, out
    gc.collect()
    assert cp.asnumpy(view).tobytes() == b.coincide(want, w).tobytes()
