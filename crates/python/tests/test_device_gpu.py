"""Issue 27 on the GPU: device arrays in and out against a real third-party producer and
consumer, NVIDIA's ``cuda.core`` (wheels: ``scripts/fetch-gpu-wheels.sh``). Skipped, with
the reason, without a CUDA device or without ``cuda.core``.

Covers: results equal to the numpy path bit for bit (DLPack and CUDA array interface v3
inputs, DeviceArray outputs read back by cuda.core through DLPack and by ``get()``), stream
ordering (the producer's copy still pending on its own stream when detkit is called),
lifetime (the producer's buffer closed right after the call; a consumer's view of detkit's
output outliving the backend), the primary context, and the typed errors (wrong dtype, 2-D,
zero length, another device)."""

import gc

import numpy as np
import pytest

import detkit
from detkit import _detkit

if _detkit.device_count() == 0:
    pytest.skip("skipped: no CUDA driver or device", allow_module_level=True)
cc = pytest.importorskip("cuda.core", reason="cuda.core not installed (scripts/fetch-gpu-wheels.sh)")
from cuda.core.utils import StridedMemoryView  # noqa: E402


@pytest.fixture(scope="module")
def dev():
    d = cc.Device(0)
    d.set_current()
    return d


@pytest.fixture(scope="module")
def b(dev):
    return detkit.Backend("cuda", 0)


@pytest.fixture(scope="module")
def cpu():
    return detkit.Backend("cpu")


def host_buffer(a):
    return cc.Buffer.from_handle(a.ctypes.data, a.nbytes, owner=a)


class Cai:
    """A CUDA-array-interface producer over a cuda.core buffer, with its stream."""

    def __init__(self, buf, shape, dtype, stream, strides=None):
        self.buf = buf
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": np.dtype(dtype).str,
            "data": (int(buf.handle) if np.prod(shape) else 0, False), "version": 3,
            "strides": strides, "stream": int(stream.handle),
        }


def produce(dev, a, stream, kind="dlpack", pending=True):
    """``a`` on the device, written by cuda.core on ``stream``. With ``pending`` the final
    copy is queued behind a long fill, and the destination first holds 0xFF bytes, so a
    consumer that does not wait for ``stream`` reads the wrong values."""
    a = np.ascontiguousarray(a)
    n = a.nbytes or 4  # copies need equal sizes; an empty array still has an allocation
    buf = dev.allocate(n, stream=stream)
    buf.fill(0xFF, stream=stream)
    stream.sync()
    if a.nbytes:
        staging = dev.allocate(n, stream=stream)
        staging.copy_from(host_buffer(a), stream=stream)
        stream.sync()
        if pending:
            big = dev.allocate(1 << 30, stream=stream)
            for _ in range(8):
                big.fill(7, stream=stream)
        buf.copy_from(staging, stream=stream)
    if kind == "cai":
        return Cai(buf, a.shape, a.dtype, stream)
    return StridedMemoryView.from_buffer(buf, shape=a.shape, dtype=a.dtype)


def consume(out, stream):
    """A detkit result read by cuda.core through DLPack (ordered on ``stream``)."""
    assert isinstance(out, detkit.DeviceArray)
    v = StridedMemoryView.from_dlpack(out, stream_ptr=int(stream.handle))
    dtype = np.dtype(v.dtype)
    shape = tuple(v.shape)
    # Seeding's seeds, weights and z are strided views of the batch's records: copy the span
    # the strides reach, then read it through the same strides (byte strides from the
    # array interface, which says None for a C-contiguous array).
    strides = out.__cuda_array_interface__.get("strides")
    if strides is None or not all(shape):
        host = np.empty(shape, dtype=dtype)
        if host.nbytes:
            cc.Buffer.from_handle(v.ptr, host.nbytes).copy_to(host_buffer(host), stream=stream)
        stream.sync()
        return host
    span = dtype.itemsize + sum((n - 1) * st for n, st in zip(shape, strides))
    raw = np.empty(span, dtype=np.uint8)
    cc.Buffer.from_handle(v.ptr, span).copy_to(host_buffer(raw), stream=stream)
    stream.sync()
    return np.ndarray(shape, dtype=dtype, buffer=raw, strides=strides).copy()


def same(dev_out, want):
    s = cc.Device(0).create_stream()
    got = consume(dev_out, s)
    np.testing.assert_array_equal(got.reshape(np.asarray(want).shape) if got.size else got, want)
    np.testing.assert_array_equal(dev_out.get(), want)
    np.testing.assert_array_equal(np.asarray(dev_out), want)


def test_detkit_uses_the_primary_context(b, dev):
    assert _detkit.primary_context(b._b) is True


@pytest.mark.parametrize("kind", ["dlpack", "cai"])
@pytest.mark.parametrize("n", [0, 1, 31, 33, None])
def test_cluster_device_arrays_equal_numpy(b, dev, kind, n):
    ev = [a[:n] for a in detkit.generate.cluster_event(seed=5)]
    s = dev.create_stream()
    ins = [produce(dev, a, s, kind) for a in ev]
    got = b.cluster(*ins, stream=s if kind == "dlpack" else None)
    want = b.cluster(*ev)
    assert all(isinstance(g, detkit.DeviceArray) for g in got)
    for g, w in zip(got, want):
        same(g, w)


def test_seeding_device_arrays_equal_numpy(b, dev):
    s = dev.create_stream()
    evs = [detkit.generate.seeding_event(seed=k, mu=200.0)[:5] for k in (1, 2, 3)]
    got = b.seed(*[produce(dev, c, s, "cai") for c in evs[0]])
    for g, w in zip(got, b.seed(*evs[0])):
        same(g, w)
    got = b.seed_events([[produce(dev, c, s) for c in e] for e in evs], stream=s)
    for r, w in zip(got, b.seed_events(evs)):
        for g, x in zip(r, w):
            same(g, x)


def test_pet_chain_stays_on_the_device(b, cpu, dev):
    scanner, frames = detkit.generate.pet_frames("tiny", singles=50_000, seed=4)
    s = dev.create_stream()
    singles, stats = b.convert(produce(dev, frames.view(np.uint8), s), scanner, stream=s)
    want, want_stats = cpu.convert(frames, scanner)
    assert isinstance(singles, detkit.DeviceArray) and stats == want_stats
    assert singles.get().tobytes() == want.tobytes()
    sorted_ = b.sort(singles)  # a DeviceArray in, a DeviceArray out
    assert sorted_.get().tobytes() == cpu.sort(want).tobytes()
    pairs = b.coincide(sorted_, scanner.time_window)
    assert pairs.get().tobytes() == cpu.coincide(cpu.sort(want), scanner.time_window).tobytes()


def test_primitives_device_arrays_equal_numpy(b, dev):
    s = dev.create_stream()
    rng = np.random.default_rng(1)
    v = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    d = produce(dev, v, s, "cai")
    same(b.scan(d), b.scan(v))
    same(b.select(d, 1000, 2**31), b.select(v, 1000, 2**31))
    small = v % 100
    same(b.histogram(produce(dev, small, s), 64, stream=s)[0], b.histogram(small, 64)[0])
    same(b.radix_sort(d), b.radix_sort(v))
    same(b.argsort(d), b.argsort(v))


def test_strided_device_array_is_gathered(b, dev):
    s = dev.create_stream()
    table = np.stack(detkit.generate.cluster_event(seed=2), axis=1)  # (n, 4) uint16
    dbuf = dev.allocate(table.nbytes, stream=s)
    dbuf.copy_from(host_buffer(np.ascontiguousarray(table)), stream=s)
    cols = [Cai(cc.Buffer.from_handle(int(dbuf.handle) + 2 * j, table.nbytes - 2 * j, owner=dbuf),
                (table.shape[0],), np.uint16, s, strides=(8,)) for j in range(4)]
    got = b.cluster(*cols)
    for g, w in zip(got, b.cluster(*[table[:, j] for j in range(4)])):
        same(g, w)


def test_lifetimes(dev):
    s = dev.create_stream()
    b = detkit.Backend("cuda", 0)
    ev = detkit.generate.cluster_event(seed=9)
    bufs = []
    for a in ev:
        buf = dev.allocate(a.nbytes, stream=s)
        buf.copy_from(host_buffer(a), stream=s)
        bufs.append(buf)
    ins = [Cai(buf, a.shape, a.dtype, s) for buf, a in zip(bufs, ev)]
    clus, per_module = b.cluster(*ins)
    for buf in bufs:  # the producer's memory goes right after the call
        buf.close(stream=s)
    del ins, bufs
    view = StridedMemoryView.from_dlpack(clus, stream_ptr=int(s.handle))
    want = detkit.Backend("cpu").cluster(*ev)[0]
    del clus, b  # the consumer's view keeps detkit's memory (and context) alive
    gc.collect()
    host = np.empty(view.shape, dtype=view.dtype)
    cc.Buffer.from_handle(view.ptr, host.nbytes).copy_to(host_buffer(host), stream=s)
    s.sync()
    np.testing.assert_array_equal(host, want)


def test_stream_arguments(b, dev):
    s = dev.create_stream()
    v = np.arange(1000, dtype=np.uint32)
    for stream in (s, int(s.handle)):
        same(b.scan(produce(dev, v, s), stream=stream), b.scan(v))
    with pytest.raises(TypeError, match="stream"):
        b.scan(produce(dev, v, s), stream="fast")


def test_typed_errors(b, dev):
    s = dev.create_stream()
    u16 = np.zeros(4, np.uint16)
    with pytest.raises(TypeError, match="x: dtype float32 does not convert"):
        b.cluster(u16, produce(dev, np.ones(4, np.float32), s), u16, u16)
    with pytest.raises(TypeError, match="values: expected a 1-D array"):
        b.scan(produce(dev, np.zeros((2, 3), np.uint32), s))
    empty = b.scan(produce(dev, np.zeros(0, np.uint32), s))
    assert isinstance(empty, detkit.DeviceArray) and empty.shape == (0,) and empty.get().size == 0
    if _detkit.device_count() > 1:
        other = cc.Device(1)
        other.set_current()
        s1 = other.create_stream()
        a = produce(other, np.arange(4, dtype=np.uint32), s1)
        dev.set_current()
        with pytest.raises(detkit.InvalidInputError, match="CUDA device 1, the backend on CUDA device 0"):
            b.scan(a)


def test_scan_and_sort_of_exact_dtypes_stay_on_the_device(b, dev):
    s = dev.create_stream()
    rng = np.random.default_rng(7)
    for dt in (np.uint32, np.uint64):
        v = rng.integers(0, np.iinfo(dt).max, 70_000, dtype=dt)
        for kind in ("dlpack", "cai"):
            d = produce(dev, v, s, kind)
            out = _detkit.device_scan(b._b, d, "values", True, stream=s)
            assert isinstance(out, detkit.DeviceArray)  # the device-resident path, no staging
            same(out, b.scan(v, inclusive=True))
            keys, idx = _detkit.device_sort(b._b, produce(dev, v, s, kind), "keys", 0, None, True, True, stream=s)
            same(keys, b.radix_sort(v, descending=True))
            same(idx, b.argsort(v, descending=True))
    keys = rng.integers(0, 300, 50_000, dtype=np.uint32)
    counts, oor, first = _detkit.device_histogram(b._b, produce(dev, keys, s), "keys", 256, stream=s)
    want = b.histogram(keys, 256)
    same(counts, want[0])
    assert (oor, first) == want[1:]
    counts, oor, first = b.histogram(produce(dev, keys[:0], s), 16)
    assert counts.get().tolist() == [0] * 16 and (oor, first) == (0, None)
    # Other dtypes and layouts take the general path (converted on the host): same results.
    v = np.arange(1000, dtype=np.int64)
    assert _detkit.device_scan(b._b, produce(dev, v, s), "values", False) is None
    same(b.scan(produce(dev, v, s), stream=s), b.scan(v.astype(np.uint32)))
    with pytest.raises(detkit.InvalidInputError):
        b.radix_sort(produce(dev, v.astype(np.uint32), s), end_bit=33)
