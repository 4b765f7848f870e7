"""Issue 30: clustering results in page-locked memory the backend recycles. On a CUDA backend
``Backend.cluster``'s default results lie in pinned memory (``detkit::HostPool``, the door DMAs
the cluster indices straight into it); the array's base owns the buffer, which goes back to the
backend's pool only when the last view of it is gone. On the CPU backend the results are
ordinary numpy arrays, as before.

``DETKIT_BACKEND=cuda`` runs them on the CUDA backend against the CPU backend."""

import gc
import os
import threading

import numpy as np
import pytest

import detkit

KIND = os.environ.get("DETKIT_BACKEND", "cpu")


@pytest.fixture()
def b():
    return detkit.Backend(KIND)


@pytest.fixture(scope="module")
def cpu():
    return detkit.Backend("cpu")


@pytest.fixture(scope="module")
def events():
    return [detkit.generate.cluster_event(seed=s) for s in (21, 22, 23)]


def batch(events):
    cols = [np.concatenate([e[j] for e in events]) for j in range(4)]
    offs = np.zeros(len(events) + 1, np.uint32)
    offs[1:] = np.cumsum([len(e[0]) for e in events])
    return cols, offs


def base_name(a):
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return type(a).__name__


def test_results_are_numpy_arrays_in_the_backends_memory(b, cpu, events):
    got = b.cluster(*events[0])
    want = cpu.cluster(*events[0])
    for g, w in zip(got, want):
        assert type(g) is np.ndarray and g.dtype == w.dtype and g.flags.c_contiguous
        assert np.array_equal(g, w)
    if b.kind == "cuda":
        assert base_name(got[0]) == "PinnedResultMemory"
        assert base_name(got[1]) == "PinnedResultMemory"
    else:
        assert base_name(got[0]) == "ResultMemory"


def test_a_result_outlives_its_backend(cpu, events):
    b = detkit.Backend(KIND)
    got = b.cluster(*events[1])
    view = got[0][5:50]
    del b
    gc.collect()
    want = cpu.cluster(*events[1])
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    del got
    gc.collect()
    assert np.array_equal(view, want[0][5:50])


def test_a_kept_result_is_unchanged_by_later_calls_of_other_sizes(b, cpu, events):
    cols, offs = batch(events)
    first = b.cluster(*events[0])
    snap = [a.copy() for a in first]
    # Larger (a batch), smaller, equal; results dropped and kept.
    kept = b.cluster(*cols, event_offsets=offs)
    for ev in events[1:] + events:
        b.cluster(*ev)
    assert np.array_equal(first[0], snap[0]) and np.array_equal(first[1], snap[1])
    want = cpu.cluster(*cols, event_offsets=offs)
    assert np.array_equal(kept[0], want[0]) and np.array_equal(kept[1], want[1])
    b.release_results()
    b.cluster(*events[2])
    assert np.array_equal(first[0], snap[0])


def test_growing_and_shrinking_calls_reuse_memory_once_it_fits(b, cpu, events):
    cols, offs = batch(events)
    shapes = [(events[0], None), ((*cols,), offs), (events[1], None), (events[2], None)]
    seen = set()
    for rnd in range(3):
        for ev, o in shapes:
            got = b.cluster(*ev, event_offsets=o)
            want = cpu.cluster(*ev, event_offsets=o)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
            if rnd > 0:
                seen.add(got[0].__array_interface__["data"][0])
            del got
    # One result alive at a time: after the first round, the memory of the largest call is
    # the one buffer used (with the CPU backend's vectors, at most its two holders).
    assert len(seen) <= 2, seen


def test_pinned_inputs_and_default_outputs_equal_cpu(b, cpu, events):
    cols, offs = batch(events)
    pin = [b.pinned_empty(len(c), np.uint16) for c in cols]
    for p, c in zip(pin, cols):
        p[:] = c
    want = cpu.cluster(*cols, event_offsets=offs)
    for _ in range(3):
        got = b.cluster(*pin, event_offsets=offs)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_threads_keep_their_pinned_results(b, cpu, events):
    wants = [cpu.cluster(*ev) for ev in events]
    errors, kept = [], []

    def work(t):
        try:
            mine = []
            for i in range(8):
                e = (t + i) % len(events)
                got = b.cluster(*events[e])
                mine.append((e, got))
                if len(mine) > 2:
                    e0, old = mine.pop(0)
                    if not np.array_equal(old[0], wants[e0][0]):
                        errors.append((t, i, "kept result changed"))
                if not np.array_equal(got[0], wants[e][0]):
                    errors.append((t, i))
            kept.extend(mine)
        except Exception as ex:  # reported below
            errors.append(ex)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for e, got in kept:
        assert np.array_equal(got[0], wants[e][0]) and np.array_equal(got[1], wants[e][1])


def test_many_kept_results_stay_right_past_the_pinned_ones(b, cpu, events):
    # A list of every call's results: past 8 pinned ones alive, ordinary memory (page-locked
    # memory stays bounded); every result right and unchanged.
    wants = [cpu.cluster(*ev) for ev in events]
    kept = [(i % 3, b.cluster(*events[i % 3])) for i in range(12)]
    for e, got in kept:
        assert np.array_equal(got[0], wants[e][0]) and np.array_equal(got[1], wants[e][1])
    names = [base_name(got[0]) for _, got in kept]
    if b.kind == "cuda":
        assert names == ["PinnedResultMemory"] * 8 + ["ResultMemory"] * 4, names
    else:
        assert set(names) == {"ResultMemory"}
