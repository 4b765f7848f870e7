"""Issue 30, the numpy layer: results written into memory a backend reuses (never while a
result that shows it is alive), ``Backend.cluster(out=...)`` and ``seed_events_flat``.

``DETKIT_BACKEND=cuda`` runs them on the CUDA backend against the CPU backend."""

import gc
import os

import numpy as np
import pytest

import detkit

KIND = os.environ.get("DETKIT_BACKEND", "cpu")


@pytest.fixture()
def b():
    # A backend of its own per test: the reuse rule is about this backend's memory.
    return detkit.Backend(KIND)


@pytest.fixture(scope="module")
def cpu():
    return detkit.Backend("cpu")


@pytest.fixture(scope="module")
def events():
    return [detkit.generate.cluster_event(seed=s) for s in (3, 4, 5)]


def test_a_kept_result_is_never_overwritten(b, cpu, events):
    first = b.cluster(*events[0])
    snapshot = [a.copy() for a in first]
    # Calls of other sizes and contents on the same backend, results dropped and kept.
    for ev in events[1:] + events[:1] + events[1:]:
        b.cluster(*ev)
    kept_view = first[0][10:20]
    del first
    for ev in events[1:]:
        b.cluster(*ev)
    assert np.array_equal(kept_view, snapshot[0][10:20])
    want = cpu.cluster(*events[0])
    assert np.array_equal(snapshot[0], want[0]) and np.array_equal(snapshot[1], want[1])


def test_dropped_results_lend_their_memory_and_the_results_stay_right(b, cpu, events):
    def mem(a):
        return a.__array_interface__["data"][0]

    seen = set()
    for rnd in range(3):
        for ev in events:
            got = b.cluster(*ev)
            want = cpu.cluster(*ev)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
            if rnd > 0:  # after the first round has grown the memory to fit every event
                seen.add(mem(got[0]))
            del got
            gc.collect()
    # Six calls, their results dropped each time: the same memory again and again.
    assert len(seen) <= 2, seen
    # A loop that replaces its result keeps at most two buffers in turn.
    r = None
    seen = set()
    for i, ev in enumerate(events * 3):
        r = b.cluster(*ev)
        if i >= len(events):
            seen.add(mem(r[0]))
    assert len(seen) <= 2, seen


def test_release_results_keeps_held_results_valid(b, events):
    r = b.cluster(*events[0])
    copy = r[0].copy()
    b.release_results()
    b.cluster(*events[1])
    assert np.array_equal(r[0], copy)


def test_cluster_out_arrays_are_written_and_returned(b, cpu, events):
    ev = events[1]
    n = len(ev[0])
    clus = np.full(n, 12345, dtype=np.int32)
    per = np.full(1856, 7, dtype=np.uint32)
    got = b.cluster(*ev, out=(clus, per))
    assert got[0] is clus and got[1] is per
    want = cpu.cluster(*ev)
    assert np.array_equal(clus, want[0]) and np.array_equal(per, want[1])
    # Several events into one pair of arrays.
    both = [np.concatenate([a, c]) for a, c in zip(events[0], events[2])]
    offs = np.array([0, len(events[0][0]), len(both[0])], dtype=np.uint32)
    clus2 = np.empty(len(both[0]), np.int32)
    per2 = np.empty(2 * 1856, np.uint32)
    b.cluster(*both, event_offsets=offs, out=(clus2, per2))
    want2 = cpu.cluster(*both, event_offsets=offs)
    assert np.array_equal(clus2, want2[0]) and np.array_equal(per2, want2[1])


def test_cluster_out_refuses_wrong_arrays_with_typed_errors(b, events):
    ev = events[0]
    n = len(ev[0])
    good_c, good_p = np.empty(n, np.int32), np.empty(1856, np.uint32)
    with pytest.raises(TypeError, match="dtype"):
        b.cluster(*ev, out=(np.empty(n, np.int64), good_p))
    with pytest.raises(TypeError, match="dtype"):
        b.cluster(*ev, out=(good_c, np.empty(1856, np.int32)))
    with pytest.raises(TypeError, match="dtype"):
        b.cluster(*ev, out=(np.empty(n, ">i4"), good_p))  # not native byte order
    with pytest.raises(TypeError, match="1-D"):
        b.cluster(*ev, out=(np.empty((n, 1), np.int32), good_p))
    with pytest.raises(TypeError, match="contiguous"):
        b.cluster(*ev, out=(np.empty(2 * n, np.int32)[::2], good_p))
    with pytest.raises(detkit.InvalidInputError, match=f"expected {n}"):
        b.cluster(*ev, out=(np.empty(n - 1, np.int32), good_p))
    with pytest.raises(detkit.InvalidInputError, match="expected 1856"):
        b.cluster(*ev, out=(good_c, np.empty(1857, np.uint32)))
    with pytest.raises(TypeError, match="pair"):
        b.cluster(*ev, out=good_c)
    with pytest.raises(TypeError, match="numpy array"):
        b.cluster(*ev, out=([0] * n, good_p))
    ro = np.empty(n, np.int32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        b.cluster(*ev, out=(ro, good_p))
    # After the refused calls the backend still works, the same with and without out=.
    assert np.array_equal(b.cluster(*ev)[0], b.cluster(*ev, out=(good_c, good_p))[0])


def test_pet_results_are_not_overwritten_and_equal_cpu(b, cpu):
    scanner, frames = detkit.generate.pet_frames("tiny", singles=20_000, seed=3)
    s1, st1 = b.convert(frames, scanner)
    keep = s1.copy()
    s2, _ = b.convert(frames[: len(frames) // 2], scanner)
    assert np.array_equal(s1, keep)
    want, wst = cpu.convert(frames, scanner)
    assert s1.tobytes() == want.tobytes() and st1 == wst
    sorted1 = b.sort(s1)
    sorted2 = b.sort(s2)
    assert sorted1.tobytes() == cpu.sort(s1).tobytes()
    assert sorted2.tobytes() == cpu.sort(s2).tobytes()
    p1 = b.coincide(sorted1, scanner.time_window)
    p1_copy = p1.copy()
    for _ in range(3):
        b.coincide(sorted2, scanner.time_window)
    assert p1.tobytes() == p1_copy.tobytes()
    assert p1.tobytes() == cpu.coincide(sorted1, scanner.time_window).tobytes()
    # Records stay aligned views of their dtype.
    assert s1.dtype == detkit.SINGLE_DTYPE and p1.dtype == detkit.COINCIDENCE_DTYPE
    assert s1.ctypes.data % 8 == 0 and p1.ctypes.data % 8 == 0


@pytest.mark.parametrize("mus", [(200.0, 0.0, 50.0), (50.0,), ()])
def test_seed_events_flat_equals_the_per_event_forms(b, cpu, mus):
    evs = [detkit.generate.seeding_event(seed=i + 1, mu=mu)[:5] for i, mu in enumerate(mus)]
    seeds, weight, zv, params, offsets = b.seed_events_flat(evs)
    assert offsets.dtype == np.int64 and offsets.shape == (len(evs) + 1,) and offsets[0] == 0
    assert seeds.shape == (offsets[-1], 3) and params.shape == (offsets[-1], 5)
    per_event = b.seed_events(evs)
    for e, ev in enumerate(evs):
        lo, hi = offsets[e], offsets[e + 1]
        one = cpu.seed(*ev)
        for flat, listed, single in zip((seeds, weight, zv, params), per_event[e], one):
            assert flat[lo:hi].tobytes() == listed.tobytes() == single.tobytes()
            assert flat.flags.c_contiguous
            # Per event: views of the library's 20-byte records (Seed: bottom, middle, top,
            # weight, z_vertex; BoundParams: five float32), one record per row.
            if hi - lo > 1:
                assert listed.strides[0] == 20 and listed.strides[1:] in ((), (4,))
    if mus:
        assert offsets[-1] > 0
    # The flat result survives later calls.
    copy = seeds.copy()
    for _ in range(3):
        b.seed_events_flat(evs[:1])
        b.seed_events(evs[::-1])
    assert np.array_equal(seeds, copy)


def test_seed_results_of_successive_calls_are_independent(b, cpu):
    e1 = detkit.generate.seeding_event(seed=7, mu=50.0)[:5]
    e2 = detkit.generate.seeding_event(seed=8, mu=100.0)[:5]
    r1 = b.seed(*e1)
    c1 = [a.copy() for a in r1]
    r2 = b.seed(*e2)
    assert all(np.array_equal(a, c) for a, c in zip(r1, c1))
    assert all(np.array_equal(a, c) for a, c in zip(r2, cpu.seed(*e2)))


def _write_bin(path, ev):
    with open(path, "wb") as f:
        f.write(b"DKDIGI01" + np.uint32(len(ev[0])).tobytes())
        for a in ev:
            f.write(np.asarray(a, dtype="<u2").tobytes())


def test_cluster_files_binary_batches_reuse_their_buffers_and_name_bad_files(b, cpu, events, tmp_path):
    paths = []
    for i, ev in enumerate(events):
        p = tmp_path / f"d{i}.bin"
        _write_bin(p, ev)
        paths.append(str(p))
    csv = tmp_path / "small.csv"
    small = [a[:500] for a in events[0]]
    np.savetxt(csv, np.stack(small, axis=1), fmt="%d", delimiter=",", header="module,x,y,adc",
               comments="")
    cut = tmp_path / "cut.bin"
    cut.write_bytes(open(paths[1], "rb").read()[:-6])
    wants = {p: cpu.cluster(*ev) for p, ev in zip(paths, events)}
    wants[str(csv)] = cpu.cluster(*small)
    first = None
    for order in ([paths[0], str(csv), paths[1], paths[2]],
                  [paths[2], str(cut), paths[0]],  # fewer, smaller: the kept buffers shrink
                  [paths[1]], paths + [str(csv)]):
        out = b._b.cluster_files(order, "phase1", None)
        for p, got in zip(order, out):
            if p == str(cut):
                assert isinstance(got, detkit.InvalidInputError), got
                assert str(cut) in str(got) and "truncated" in str(got)
                continue
            assert np.array_equal(got[0], wants[p][0]) and np.array_equal(got[1], wants[p][1]), p
        if first is None:
            first, keep = out, [a.copy() for a in out[0]]
    # The first call's results were kept: never overwritten by the later batches.
    assert np.array_equal(first[0][0], keep[0]) and np.array_equal(first[0][1], keep[1])


def test_threads_on_one_backend_never_share_result_memory(b, cpu, events):
    import threading

    wants = [cpu.cluster(*ev) for ev in events]
    errors, kept = [], []

    def work(t):
        try:
            for i in range(6):
                e = (t + i) % len(events)
                got = b.cluster(*events[e])
                kept.append((e, got, got[0].copy()))
                if not np.array_equal(got[0], wants[e][0]):
                    errors.append((t, i))
        except Exception as ex:  # reported below
            errors.append(ex)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    # Every result kept by any thread is still what it was when it came back.
    for e, got, copy in kept:
        assert np.array_equal(got[0], copy) and np.array_equal(got[0], wants[e][0])
    assert len({id(g[0].base) for _, g, _ in kept}) == len(kept)
