"""Issue 27 on the CPU: arrays that arrive through DLPack (numpy >= 1.22 exports it on the
CPU) take the same protocol path as device arrays (capsule, dtype, shape, strides, device
checks) and give the numpy path's results; CUDA arrays given to the CPU backend are errors
naming both devices. The GPU side (CuPy / cuda.core producers, DeviceArray out, streams) is
tests/gpu/test_device_arrays.py."""

import gc
import os
import sys

import numpy as np
import pytest

import detkit
from detkit import _detkit

KIND = os.environ.get("DETKIT_BACKEND", "cpu")


class Dl:
    """A DLPack producer that is not a numpy array (only the protocol is visible)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None, **kwargs):
        assert stream is None  # a CPU tensor is asked for without a stream
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.fixture(scope="module")
def b():
    return detkit.Backend(KIND)


def test_numpy_through_dlpack_is_a_view_of_its_memory(b):
    a = np.arange(10, dtype=np.uint32)
    view, on_device = _detkit.import_array(b._b, Dl(a), "values")
    assert not on_device and view.dtype == np.uint32 and view.tolist() == list(range(10))
    a[3] = 99  # the same memory, not a copy
    assert view[3] == 99
    # Strided and offset tensors keep their layout.
    s = np.arange(20, dtype=np.uint16)[3::2]
    view, _ = _detkit.import_array(b._b, Dl(s), "x")
    assert view.strides == s.strides and view.tolist() == s.tolist()
    for dt in (np.int8, np.int64, np.float32, np.float64, np.bool_):
        v, _ = _detkit.import_array(b._b, Dl(np.ones(3, dt)), "v")
        assert v.dtype == dt


def test_the_producers_memory_is_released_after_the_call(b):
    a = np.arange(1000, dtype=np.uint32)
    before = sys.getrefcount(a)
    for _ in range(50):
        out = b.scan(Dl(a))
        del out
    gc.collect()
    assert sys.getrefcount(a) == before  # every consumed capsule's deleter ran


@pytest.mark.parametrize("n", [0, 1, 33, 5000])
def test_every_method_gives_the_numpy_results_through_dlpack(b, n):
    rng = np.random.default_rng(n)
    v32 = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    v64 = rng.integers(0, 2**63, n, dtype=np.uint64)
    for f in (lambda a: b.scan(a), lambda a: b.scan(a, inclusive=True),
              lambda a: b.select(a, 1000, 2**31),
              lambda a: b.radix_sort(a), lambda a: b.argsort(a, descending=True)):
        np.testing.assert_array_equal(f(Dl(v32)), f(v32))
    small = v32 % 70
    for g, w in zip(b.histogram(Dl(small), 64), b.histogram(small, 64)):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(b.radix_sort(Dl(v64)), b.radix_sort(v64))
    k, v = b.radix_sort(Dl(v32), Dl(v64))
    k2, v2 = b.radix_sort(v32, v64)
    np.testing.assert_array_equal(k, k2)
    np.testing.assert_array_equal(v, v2)


def test_clustering_seeding_and_pet_through_dlpack(b, tmp_path):
    ev = detkit.generate.cluster_event(seed=3)
    want = b.cluster(*ev)
    got = b.cluster(*[Dl(a) for a in ev])
    assert isinstance(got[0], np.ndarray)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # Non-contiguous columns of one 2-D table, given through DLPack.
    table = np.stack(ev, axis=1)
    for g, w in zip(b.cluster(*[Dl(table[:, j]) for j in range(4)]), want):
        np.testing.assert_array_equal(g, w)
    sp = detkit.generate.seeding_event(seed=2, mu=20.0)[:5]
    for g, w in zip(b.seed(*[Dl(c) for c in sp], min_pt=0.9), b.seed(*sp, min_pt=0.9)):
        np.testing.assert_array_equal(g, w)
    evs = [detkit.generate.seeding_event(seed=s, mu=10.0)[:3] for s in (1, 2)]
    for r, w in zip(b.seed_events([[Dl(c) for c in e] for e in evs]), b.seed_events(evs)):
        for g, x in zip(r, w):
            np.testing.assert_array_equal(g, x)
    scanner, frames = detkit.generate.pet_frames("tiny", singles=5000, seed=2)
    singles, stats = b.convert(Dl(frames.view(np.uint8)), scanner)
    want_s, want_st = b.convert(frames, scanner)
    assert singles.tobytes() == want_s.tobytes() and stats == want_st
    rows = singles.view(np.uint8).reshape(-1, 16)  # records as uint8 rows (a DeviceArray's form)
    np.testing.assert_array_equal(b.sort(Dl(rows)), b.sort(singles))
    s = b.sort(singles)
    np.testing.assert_array_equal(b.coincide(Dl(s.view(np.uint8).reshape(-1, 16)), 5000.0),
                                  b.coincide(s, 5000.0))


def test_pet_sort_and_coincide_errors_through_dlpack(b):
    """Singles as DLPack ``uint8`` rows (the form of a device ``DeviceArray``): a NaN time or
    an unsorted pair is the numpy path's error, word for word."""
    scanner, frames = detkit.generate.pet_frames("tiny", singles=3000, seed=9)
    s = b.sort(b.convert(frames, scanner)[0]).copy()
    nan, unsorted = s.copy(), s.copy()
    nan["time"][700] = np.nan
    unsorted[[10, 500]] = unsorted[[500, 10]]
    for bad, calls in ((nan, (b.sort, lambda a: b.coincide(a, 5000.0))),
                       (unsorted, (lambda a: b.coincide(a, 5000.0),))):
        for call in calls:
            with pytest.raises(detkit.InvalidInputError) as want:
                call(bad)
            with pytest.raises(detkit.InvalidInputError) as got:
                call(Dl(bad.view(np.uint8).reshape(-1, 16)))
            assert str(got.value) == str(want.value)


def test_shape_and_dtype_errors_are_the_numpy_paths(b):
    with pytest.raises(TypeError, match="values: expected a 1-D array, got shape"):
        b.scan(Dl(np.zeros((2, 3), np.uint32)))
    with pytest.raises(TypeError, match="x: dtype float64 does not convert"):
        b.cluster(np.zeros(3, np.uint16), Dl(np.zeros(3)), np.zeros(3, np.uint16), np.zeros(3, np.uint16))
    np.testing.assert_array_equal(b.scan(Dl(np.arange(5, dtype=np.int64))), b.scan(np.arange(5, dtype=np.uint32)))
    with pytest.raises(TypeError, match="neither an array nor a DLPack"):
        _detkit.import_array(b._b, object(), "values")


class FakeCuda:
    """Claims to be a CUDA tensor (never dereferenced: the CPU backend refuses it first)."""

    def __init__(self, device=0):
        self.device = device

    def __dlpack__(self, stream=None):
        raise AssertionError("the CPU backend must not ask for the capsule")

    def __dlpack_device__(self):
        return (2, self.device)


class FakeCai:
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<u4", "data": (4096, False),
                                "version": 3, "strides": None, "stream": None}


@pytest.mark.skipif(KIND != "cpu", reason="the CPU backend's refusal")
def test_device_arrays_on_the_cpu_backend_name_both_devices(b):
    with pytest.raises(detkit.InvalidInputError, match=r"values: the array is on CUDA device 1, the backend on the CPU"):
        b.scan(FakeCuda(1))
    with pytest.raises(detkit.InvalidInputError, match=r"keys: the array is on a CUDA device, the backend on the CPU"):
        b.histogram(FakeCai(), 4)
    with pytest.raises(detkit.InvalidInputError, match="the backend is the CPU"):
        detkit.DeviceArray.from_host(b._b, np.zeros(4, np.uint8), "|u1", (4,))
    assert _detkit.primary_context(b._b) is False


def test_other_dlpack_devices_are_errors(b):
    class Rocm(FakeCuda):
        def __dlpack_device__(self):
            return (10, 0)

    with pytest.raises(detkit.InvalidInputError, match="DLPack device type 10"):
        b.scan(Rocm())


def test_the_export_side_against_numpys_from_dlpack():
    # The capsule, deleter and keep-alive code of DeviceArray.__dlpack__, on the CPU.
    a = np.arange(12, dtype=np.uint16).reshape(3, 4)
    before = sys.getrefcount(a)
    got = np.from_dlpack(_detkit.CpuExport(a))
    assert got.shape == (3, 4) and got.dtype == np.uint16 and np.array_equal(got, a)
    assert np.shares_memory(got, a)
    assert sys.getrefcount(a) > before  # the consumer's view keeps the owner alive
    del got
    gc.collect()
    assert sys.getrefcount(a) == before  # its deleter released it
    # A capsule never consumed frees the tensor in its destructor.
    cap = _detkit.CpuExport(a).__dlpack__()
    assert sys.getrefcount(a) > before
    del cap
    gc.collect()
    assert sys.getrefcount(a) == before
    for dt in (np.int8, np.uint32, np.int64, np.float32, np.float64):
        v = np.arange(5).astype(dt)
        np.testing.assert_array_equal(np.from_dlpack(_detkit.CpuExport(v)), v)
    # And through detkit's own import: export -> import -> numpy path.
    b = detkit.Backend("cpu")
    v = np.arange(100, dtype=np.uint32)
    np.testing.assert_array_equal(b.scan(_detkit.CpuExport(v)), b.scan(v))
