"""``threads=``: the CPU backend on a pool of its own, the same results on any count."""

import numpy as np
import pytest

import detkit


def test_threads_setting_and_results():
    one = detkit.Backend("cpu", threads=1)
    assert one.threads == 1
    assert detkit.Backend("cpu", threads=3).threads == 3
    assert detkit.Backend("cpu").threads >= 1
    ev = detkit.generate.cluster_event(seed=4)
    want = one.cluster(*ev)
    x, y, z, vr, vz, _ = detkit.generate.seeding_event(seed=3, mu=10.0)
    want_seeds = one.seed(x, y, z, vr, vz)
    for n in (2, 7):
        b = detkit.Backend("cpu", threads=n)
        got = b.cluster(*ev)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        for g, w in zip(b.seed(x, y, z, vr, vz), want_seeds):
            assert np.array_equal(g, w)


def test_threads_zero_is_an_error():
    with pytest.raises(ValueError, match="threads"):
        detkit.Backend("cpu", threads=0)
