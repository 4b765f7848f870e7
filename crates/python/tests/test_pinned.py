"""Issue 30: ``Backend.pinned_empty``, numpy arrays in page-locked memory that detkit allocated
(the clustering door DMAs straight from and into them). On the CPU backend they are ordinary
``numpy.zeros`` arrays, so the same code runs on both.

``DETKIT_BACKEND=cuda`` runs them on the CUDA backend against the CPU backend."""

import gc
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


@pytest.fixture(scope="module")
def events():
    return [detkit.generate.cluster_event(seed=s) for s in (11, 12, 13)]


@pytest.mark.parametrize("shape,dtype", [(10, np.uint16), ((3, 4), np.int32), (0, np.uint32),
                                         ((2, 0, 5), "f8"), ([7], ">u4")])
def test_pinned_empty_gives_a_writeable_array_of_the_shape_and_dtype(b, shape, dtype):
    a = b.pinned_empty(shape, dtype)
    want = np.empty(shape, dtype)
    assert type(a) is np.ndarray
    assert a.shape == want.shape and a.dtype == want.dtype
    assert a.flags.c_contiguous and a.flags.writeable and a.flags.aligned
    assert (a == 0).all()
    a[...] = 3
    assert (a == 3).all()


def test_pinned_memory_outlives_the_name_while_a_view_holds_it(b):
    a = b.pinned_empty(1 << 16, np.uint32)
    a[:] = np.arange(1 << 16, dtype=np.uint32)
    v = a[100:200]
    del a
    gc.collect()
    # The view keeps the allocation (its base chain ends at the owner).
    b.pinned_empty(1 << 16, np.uint32)[:] = 0
    assert np.array_equal(v, np.arange(100, 200, dtype=np.uint32))


def test_pinned_empty_refuses_object_dtypes_and_bad_shapes(b):
    if b.kind == "cpu":
        pytest.skip("the CPU backend hands out numpy.zeros (which allows them)")
    with pytest.raises(TypeError):
        b.pinned_empty(3, object)
    with pytest.raises((TypeError, OverflowError, ValueError)):
        b.pinned_empty("x", np.uint8)


def test_cluster_reads_and_writes_pinned_arrays(b, cpu, events):
    # Growing and shrinking batches as prefixes of one pinned allocation per column.
    n_max = sum(len(e[0]) for e in events)
    cols = [b.pinned_empty(n_max, np.uint16) for _ in range(4)]
    clus = b.pinned_empty(n_max, np.int32)
    per = b.pinned_empty(3 * 1856, np.uint32)
    for k in (1, 3, 2, 1):
        evs = events[:k]
        n = sum(len(e[0]) for e in evs)
        for j in range(4):
            cols[j][:n] = np.concatenate([e[j] for e in evs])
        offs = np.zeros(k + 1, np.uint32)
        offs[1:] = np.cumsum([len(e[0]) for e in evs])
        ins = [c[:n] for c in cols]
        want = cpu.cluster(*ins, event_offsets=offs)
        # Pinned in and out.
        clus[:n] = -7
        got = b.cluster(*ins, event_offsets=offs, out=(clus[:n], per[: k * 1856]))
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert np.shares_memory(got[0], clus)
        # Pinned in, results in the backend's memory; ordinary in, pinned out.
        got = b.cluster(*ins, event_offsets=offs)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        plain = [np.array(c) for c in ins]
        clus[:n] = -7
        got = b.cluster(*plain, event_offsets=offs, out=(clus[:n], per[: k * 1856]))
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_a_bad_digi_in_pinned_memory_is_named_as_in_ordinary_memory(b, cpu, events):
    evs = events
    n = sum(len(e[0]) for e in evs)
    cols = [b.pinned_empty(n, np.uint16) for _ in range(4)]
    for j in range(4):
        cols[j][:] = np.concatenate([e[j] for e in evs])
    offs = np.zeros(4, np.uint32)
    offs[1:] = np.cumsum([len(e[0]) for e in evs])
    mid = int(offs[1] + (offs[2] - offs[1]) // 2)
    cols[0][mid] = 5000
    msgs = []
    for backend, ins in ((cpu, [np.array(c) for c in cols]), (b, cols), (b, [np.array(c) for c in cols])):
        with pytest.raises(detkit.InvalidInputError) as e:
            backend.cluster(*ins, event_offsets=offs)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] == msgs[2], msgs
    assert str(mid) in msgs[0]
