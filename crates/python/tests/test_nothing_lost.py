"""Issue 31, "Nothing lost, nothing silently wrong": the Python findings (8 and 12) and the
binary singles/pairs files from Python, one test per finding."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import detkit


@pytest.fixture(scope="module")
def cpu():
    return detkit.Backend("cpu")


def _run_limited(code: str, limit_bytes: int) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter whose address space is limited to ``limit_bytes``."""
    prelude = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({limit_bytes}, {limit_bytes}))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_f08_allocation_beyond_memory_is_memory_error_and_mu_is_limited(tmp_path):
    # Under a 3 GB address-space limit, a 2^32 - 1 singles acquisition (about 340 GB) is a
    # MemoryError naming the need, not an abort of the interpreter; the histogram of 2^32 - 1
    # bins (16 GB) too.
    r = _run_limited(
        f"""
        import detkit
        for call in (lambda: detkit.generate.pet_acquisition({str(tmp_path)!r}, singles=2**32 - 1),
                     lambda: detkit.Backend("cpu").histogram([1, 2, 3], 2**32 - 1)):
            try:
                call()
            except MemoryError as e:
                print("MemoryError:", e)
        """,
        3 << 30,
    )
    assert r.returncode == 0, (r.returncode, r.stderr)
    lines = [l for l in r.stdout.splitlines() if l.startswith("MemoryError: not enough memory for")]
    assert len(lines) == 2, r.stdout
    assert "singles=4294967295" in lines[0] and "GB available" in lines[0], lines[0]
    assert os.listdir(tmp_path) == []
    # The pile-up has the CLI's range (0 to 10000).
    with pytest.raises(ValueError, match="mu=1000000000: not a pile-up between 0 and 10000"):
        detkit.generate.seeding_event(seed=1, mu=1e9)


def test_f12_arguments_have_the_cli_ranges_and_types(cpu, tmp_path):
    m = np.array([0, 0, 0], dtype=np.uint16)
    xy = np.array([1, 2, 9], dtype=np.uint16)
    adc = np.full(3, 3000, dtype=np.uint16)
    # charge_cut: a negative charge is not "no cut", True is not 1 electron.
    with pytest.raises(ValueError, match="charge_cut=-5"):
        cpu.cluster(m, xy, xy, adc, charge_cut=-5)
    with pytest.raises(TypeError, match="charge_cut=True"):
        cpu.cluster(m, xy, xy, adc, charge_cut=True)
    with pytest.raises(TypeError, match="charge_cut"):
        cpu.cluster(m, xy, xy, adc, charge_cut=2000.5)
    # Still accepted: None, False, an integer (numpy's too).
    assert cpu.cluster(m, xy, xy, adc, charge_cut=False)[0].tolist() == [0, 0, 1]
    assert cpu.cluster(m, xy, xy, adc, charge_cut=np.int64(5000))[0].tolist() == [0, 0, -1]
    # Settings are numbers, not bools.
    x, y, z, vr, vz, _ = detkit.generate.seeding_event(seed=1, mu=5.0)
    with pytest.raises(TypeError, match="min_pt=True"):
        cpu.seed(x, y, z, vr, vz, min_pt=True)
    with pytest.raises(ValueError, match="min_pt=NaN: not finite"):
        cpu.seed(x, y, z, vr, vz, min_pt=float("nan"))
    assert len(cpu.seed(x, y, z, vr, vz, min_pt=0.9)[0]) > 0
    # The pile-up: finite, 0 to 10000, not a bool.
    for mu in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="mu="):
            detkit.generate.seeding_event(seed=1, mu=mu)
    with pytest.raises(TypeError, match="mu=True"):
        detkit.generate.seeding_event(seed=1, mu=True)
    # convert: a list of ints is not frame bytes.
    detkit.generate.pet_acquisition(tmp_path, singles=100)
    with pytest.raises(TypeError, match="int64"):
        cpu.convert([1, 2, 3, 4], tmp_path / "scanner.toml")
    # sort: a 2-D array is refused, as everywhere else.
    frames = np.fromfile(tmp_path / "frames.bin", np.uint8)
    singles, _ = cpu.convert(frames, tmp_path / "scanner.toml")
    two_d = singles[: len(singles) // 2 * 2].reshape(2, -1)
    with pytest.raises(TypeError, match="1-D"):
        cpu.sort(two_d)
    # An int64 that float32 cannot hold exactly is refused with the dtype named.
    big = np.array([1, 2, 2**24 + 1], dtype=np.int64)
    with pytest.raises(TypeError, match="int64 does not convert to float32"):
        cpu.seed(big, big, big)
    # Exact ones convert.
    ok = np.array([1, 2, 2**24], dtype=np.int64)
    cpu.seed(ok, ok, ok)


def test_binary_singles_and_pairs_files_have_a_header(cpu, tmp_path):
    detkit.generate.pet_acquisition(tmp_path, singles=2000)
    frames = np.fromfile(tmp_path / "frames.bin", np.uint8)
    singles, _ = cpu.convert(frames, tmp_path / "scanner.toml")
    s = cpu.sort(singles)
    p = cpu.coincide(s, 10000.0)
    detkit.write_singles(tmp_path / "s.bin", s)
    detkit.write_pairs(tmp_path / "p.bin", p)
    raw = (tmp_path / "s.bin").read_bytes()
    assert raw[:8] == b"DKSNGL01" and int.from_bytes(raw[8:16], "little") == len(s)
    assert np.array_equal(detkit.read_singles(tmp_path / "s.bin"), s)
    assert np.array_equal(np.fromfile(tmp_path / "s.bin", detkit.SINGLE_DTYPE, offset=16), s)
    assert np.array_equal(detkit.read_pairs(tmp_path / "p.bin"), p)
    # A pairs file is not singles; a headerless file is refused with how to convert it.
    with pytest.raises(detkit.InvalidInputError, match="binary pairs file"):
        detkit.read_singles(tmp_path / "p.bin")
    s.tofile(tmp_path / "old.bin")
    with pytest.raises(detkit.InvalidInputError, match="write_singles"):
        detkit.read_singles(tmp_path / "old.bin")
    detkit.write_singles(tmp_path / "new.bin", np.fromfile(tmp_path / "old.bin", detkit.SINGLE_DTYPE))
    assert np.array_equal(detkit.read_singles(tmp_path / "new.bin"), s)
