"""Issue 30's Python doors (zero-copy calls, detkit.io, settings by conversion, dask batches)
with issue 31's checks: one argument check for every path, MemoryError for results the
caller sizes, the PET headers through detkit.io and detkit.dask."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import detkit
import detkit.dask as dd
import detkit.io as dio


@pytest.fixture(scope="module")
def cpu():
    return detkit.Backend("cpu")


@pytest.fixture(scope="module")
def pet_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("pet")
    detkit.generate.pet_acquisition(d, singles=5000, seed=4)
    return d


def test_top_level_file_functions_are_detkit_io(tmp_path, pet_dir, cpu):
    for name in ("read_singles", "read_pairs", "write_singles", "write_pairs"):
        assert getattr(detkit, name) is getattr(dio, name), name
    singles, _ = cpu.convert(dio.read_frames(pet_dir / "frames.bin"), pet_dir / "scanner.toml")
    s = cpu.sort(singles)
    p = cpu.coincide(s, 5000.0)
    assert len(p) > 0
    dio.write_singles(tmp_path / "s.bin", s)
    dio.write_pairs(tmp_path / "p.bin", p)
    assert (tmp_path / "s.bin").read_bytes()[:8] == b"DKSNGL01"
    assert (tmp_path / "p.bin").read_bytes()[:8] == b"DKPAIR01"
    assert dio.read_singles(tmp_path / "s.bin").tobytes() == s.tobytes()
    assert dio.read_pairs(tmp_path / "p.bin").tobytes() == p.tobytes()
    # CSV through the same writer and reader.
    dio.write_pairs(tmp_path / "p.csv", p)
    assert dio.read_pairs(tmp_path / "p.csv").tobytes() == p.tobytes()
    # A count that disagrees with the length is the library's error, naming the file.
    raw = bytearray((tmp_path / "s.bin").read_bytes())
    (tmp_path / "cut.bin").write_bytes(bytes(raw[:-8]))
    with pytest.raises(detkit.InvalidInputError, match=r"cut\.bin"):
        dio.read_singles(tmp_path / "cut.bin")


def test_dask_pet_file_pairs_round_trip_through_the_binary_format(tmp_path, pet_dir, cpu):
    pairs, stats = dd.pet_file(cpu, pet_dir / "frames.bin")
    assert stats["frames"] > 0 and len(pairs) > 0
    detkit.write_pairs(tmp_path / "pairs.bin", pairs)
    got = dio.read_pairs(tmp_path / "pairs.bin")
    assert got.dtype == detkit.COINCIDENCE_DTYPE and got.tobytes() == pairs.tobytes()
    # The same pairs as the singles file read back and coincided.
    singles, _ = cpu.convert(dio.read_frames(pet_dir / "frames.bin"), pet_dir / "scanner.toml")
    detkit.write_singles(tmp_path / "singles.bin", cpu.sort(singles))
    again = cpu.coincide(dio.read_singles(tmp_path / "singles.bin"), 5000.0)
    assert again.tobytes() == pairs.tobytes()


def test_charge_cut_is_checked_alike_for_arrays_and_file_batches(tmp_path, cpu):
    module, x, y, adc = detkit.generate.cluster_event(seed=3)
    path = tmp_path / "d.csv"
    np.savetxt(path, np.stack([module, x, y, adc], axis=1), fmt="%d", delimiter=",",
               header="module,x,y,adc", comments="")
    for bad, exc, msg in ((True, TypeError, "charge_cut=True"), (-5, ValueError, "charge_cut=-5"),
                          (2.5, TypeError, "charge_cut"), (2**32, ValueError, "charge_cut=4294967296")):
        with pytest.raises(exc, match=msg):
            cpu.cluster(module, x, y, adc, charge_cut=bad)
        with pytest.raises(exc, match=msg):
            dd._cluster_files(cpu, [str(path)], charge_cut=bad)
    for cut in (None, False, 0, np.uint32(5000)):
        want = cpu.cluster(module, x, y, adc, charge_cut=cut)
        (got,) = dd._cluster_files(cpu, [str(path)], charge_cut=cut)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_seeding_settings_conversion_has_the_number_checks(cpu):
    ev = detkit.generate.seeding_event(seed=2, mu=10.0)[:5]
    with pytest.raises(TypeError, match=r"min_pt=np\.True_|min_pt=True"):
        cpu.seed(*ev, min_pt=np.bool_(True))
    with pytest.raises(ValueError, match="z_max=inf: not finite"):
        cpu.seed(*ev, z_max=float("inf"))
    with pytest.raises(TypeError, match="min_pt=True"):
        cpu.seed_events([ev], min_pt=True)
    a = cpu.seed(*ev, max_seeds_per_spm=3)
    b = cpu.seed(*ev, max_seeds_per_spm=np.uint8(3))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_result_sizes_from_the_caller_are_memory_errors(tmp_path):
    # Under a 3 GB address-space limit: a million events of CMS Phase-1 modules need about
    # 15 GB of per-module results, refused before numpy or the library allocates them; the
    # in-memory PET generator checks its size as the file generator does.
    limit = 3 << 30
    code = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
        import numpy as np, detkit
        b = detkit.Backend("cpu")
        z = np.zeros(0, np.uint16)
        for call in (lambda: b.cluster(z, z, z, z, event_offsets=np.zeros(1_000_001, np.uint32)),
                     lambda: detkit.generate.pet_frames("tiny", singles=2**40)):
            try:
                call()
            except MemoryError as e:
                print("MemoryError:", e)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr)
    lines = [l for l in r.stdout.splitlines() if l.startswith("MemoryError: not enough memory for")]
    assert len(lines) == 2, r.stdout
    assert "1000000 events" in lines[0] and "available" in lines[0], lines[0]
    assert "singles=1099511627776" in lines[1], lines[1]
