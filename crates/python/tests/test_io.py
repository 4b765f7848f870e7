"""`detkit.io` (the library's readers), `detkit.Scanner`, the pool through the library's
`DevicePool`, seeding settings as keyword arguments, and the borrowed-input paths: views,
non-contiguous arrays, repeated calls of growing and shrinking sizes."""

import errno
import os

import numpy as np
import pytest

import detkit
import detkit.io as dio

KIND = os.environ.get("DETKIT_BACKEND", "cpu")


@pytest.fixture(scope="module")
def b():
    return detkit.Backend(KIND)


@pytest.fixture(scope="module")
def cpu():
    return detkit.Backend("cpu")


@pytest.fixture(scope="module")
def pet_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("pet")
    detkit.generate.pet_acquisition(d, singles=20_000, seed=3)
    return d


# -- readers ----------------------------------------------------------------------------


def test_missing_file_is_file_not_found_with_errno_and_filename(tmp_path):
    p = tmp_path / "nope.csv"
    for read in (dio.read_digis, dio.read_spacepoints, dio.read_frames, dio.read_singles,
                 dio.read_pairs, dio.read_scanner, detkit.Scanner):
        with pytest.raises(FileNotFoundError) as e:
            read(p)
        assert e.value.errno == errno.ENOENT and e.value.filename == str(p), read
        assert str(p) in str(e.value)


def test_a_directory_is_an_os_error(tmp_path):
    with pytest.raises(OSError) as e:
        dio.read_digis(tmp_path)
    assert e.value.filename == str(tmp_path)


def test_binary_and_csv_digis_read_the_same(tmp_path):
    ev = detkit.generate.cluster_event(seed=5)
    binp = tmp_path / "d.bin"
    with open(binp, "wb") as f:
        f.write(b"DKDIGI01" + np.uint32(len(ev[0])).tobytes())
        for a in ev:
            f.write(a.astype("<u2").tobytes())
    csvp = tmp_path / "d.csv"
    np.savetxt(csvp, np.stack(ev, axis=1), fmt="%d", delimiter=",", header="module,x,y,adc",
               comments="")
    for p in (binp, csvp):
        got = dio.read_digis(p)
        assert all(g.dtype == np.uint16 and np.array_equal(g, w) for g, w in zip(got, ev)), p


def test_format_errors_name_file_line_and_column(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("module,x,y,adc\n7,1,1,3000\n\n7,2,2,70000\n")
    with pytest.raises(detkit.InvalidInputError, match=rf"^{p}:4: column `adc`"):
        dio.read_digis(p)
    f = tmp_path / "frames.bin"
    f.write_bytes(b"\0" * 17)
    with pytest.raises(detkit.InvalidInputError, match=r"frames\.bin: .*17 bytes"):
        dio.read_frames(f)
    s = tmp_path / "s.csv"
    s.write_text("crystal,energy,time\n1,511,inf\n")
    with pytest.raises(detkit.InvalidInputError, match=r"s\.csv:2: column `time`"):
        dio.read_singles(s)


def test_pet_readers_round_trip_the_records(tmp_path, pet_dir, cpu):
    frames = dio.read_frames(pet_dir / "frames.bin")
    assert frames.dtype == detkit.FRAME_DTYPE and frames.size > 0
    scanner = dio.read_scanner(pet_dir / "scanner.toml")
    singles, _ = cpu.convert(frames, scanner)
    sorted_ = cpu.sort(singles)[:300]
    pairs = cpu.coincide(sorted_, scanner.time_window)
    assert pairs.size > 0
    # CSV (the text formats: shortest round-trip decimals, as the CLI writes them).
    row = lambda s: f"{s['crystal']},{str(np.float32(s['energy']))},{float(s['time'])!r}"  # noqa: E731
    (tmp_path / "s.csv").write_text("crystal,energy,time\n" + "".join(row(s) + "\n" for s in sorted_))
    (tmp_path / "p.csv").write_text(
        "crystal_a,energy_a,time_a,crystal_b,energy_b,time_b\n"
        + "".join(f"{row(p['a'])},{row(p['b'])}\n" for p in pairs))
    got_s, got_p = dio.read_singles(tmp_path / "s.csv"), dio.read_pairs(tmp_path / "p.csv")
    assert got_s.dtype == detkit.SINGLE_DTYPE and got_p.dtype == detkit.COINCIDENCE_DTYPE
    assert got_s.tobytes() == sorted_.tobytes() and got_p.tobytes() == pairs.tobytes()


# -- Scanner ----------------------------------------------------------------------------


def test_scanner_object_equals_the_path_and_is_read_once(tmp_path, pet_dir, b, cpu):
    frames = np.fromfile(pet_dir / "frames.bin", np.uint8)
    scanner = detkit.Scanner(pet_dir / "scanner.toml")
    assert scanner.time_window == 5000.0 and scanner.table_bytes > 0
    assert "scanner.toml" in repr(scanner) and scanner.path.name == "scanner.toml"
    want, st_want = cpu.convert(frames, pet_dir / "scanner.toml")
    # The tables are held: the files may go away after the Scanner is made.
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in os.listdir(pet_dir):
        if f.startswith("scanner"):
            (copy / f).write_bytes((pet_dir / f).read_bytes())
    held = detkit.Scanner(copy / "scanner.toml")
    for f in os.listdir(copy):
        os.remove(copy / f)
    for s in (scanner, held):
        for _ in range(2):
            got, st = b.convert(frames, s)
            assert got.tobytes() == want.tobytes() and st == st_want


# -- pool -------------------------------------------------------------------------------


def test_pool_members_share_the_library_pool_and_run_in_threads():
    import threading

    pool = detkit.Backend("cpu", devices=3)
    assert pool.devices == 3
    seen = set()

    def work(backend, i):
        seen.add(threading.get_ident())
        return i, backend.kind, int(backend.scan(np.arange(i, dtype=np.uint32))[-1]) if i else 0

    out = pool.map(work, range(40))
    assert [o[0] for o in out] == list(range(40)) and {o[1] for o in out} == {"cpu"}
    assert [o[2] for o in out] == [0] + [i * (i - 1) // 2 - (i - 1) for i in range(1, 40)]
    assert threading.get_ident() not in seen


# -- settings ---------------------------------------------------------------------------


def test_seeding_settings_are_converted_from_keywords(cpu):
    ev = detkit.generate.seeding_event(seed=2, mu=20.0)[:5]
    a = cpu.seed(*ev, min_pt=0.9, max_seeds_per_spm=3)
    c = cpu.seed(*ev, min_pt=np.float32(0.9), max_seeds_per_spm=np.int64(3))
    for x, y in zip(a, c):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(detkit.InvalidInputError, match="unknown field `nope`"):
        cpu.seed(*ev, nope=1)
    with pytest.raises(TypeError, match="bool"):
        cpu.seed(*ev, min_pt=True)
    with pytest.raises(TypeError, match="number"):
        cpu.seed(*ev, min_pt="fast")
    with pytest.raises(detkit.InvalidInputError, match="z_min"):
        cpu.seed(*ev, z_min=10.0, z_max=0.0)


# -- borrowed inputs ----------------------------------------------------------------------


def test_views_and_non_contiguous_inputs_equal_contiguous_ones(b, cpu):
    module, x, y, adc = detkit.generate.cluster_event(seed=7)
    want = cpu.cluster(module, x, y, adc)
    # Strided copies (every column interleaved in one 2-D array, taken by column).
    table = np.stack([module, x, y, adc], axis=1)
    cols = [table[:, j] for j in range(4)]
    assert not cols[0].flags.c_contiguous
    got = b.cluster(*cols)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # A view into a larger buffer (offset slice), and another integer dtype.
    big = np.concatenate([np.zeros(5, np.uint16), module])
    got = b.cluster(big[5:], x.astype(np.int32), y, adc)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # Seeding: a reversed view of reversed columns is the original order.
    sp = detkit.generate.seeding_event(seed=3, mu=20.0)[:5]
    rev = [np.ascontiguousarray(c[::-1])[::-1] for c in sp]
    assert rev[0].strides[0] < 0
    for g, w in zip(b.seed(*rev), cpu.seed(*sp)):
        np.testing.assert_array_equal(g, w)
    # PET singles at an odd byte offset (not 8-byte aligned: copied once) and a strided view.
    singles = np.zeros(64, detkit.SINGLE_DTYPE)
    singles["crystal"] = np.arange(64)
    singles["energy"] = 511
    singles["time"] = np.arange(64)[::-1] * 3.0
    raw = np.zeros(64 * 16 + 1, np.uint8)
    odd = raw[1:].view(detkit.SINGLE_DTYPE)
    odd[:] = singles
    np.testing.assert_array_equal(b.sort(odd), cpu.sort(singles))
    np.testing.assert_array_equal(b.sort(singles[::2]), cpu.sort(singles[::2].copy()))


def test_repeated_calls_growing_and_shrinking_give_identical_results(b, cpu):
    events = {s: detkit.generate.cluster_event(seed=s) for s in (1, 2)}
    sizes = [0, 1, 31, 33, 5000, 100_000, 70, 0, 100_000, 7]
    for n in sizes:
        ev = [a[:n] for a in events[1 + n % 2]]
        got, want = b.cluster(*ev), cpu.cluster(*ev)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, err_msg=f"n={n}")
    sp = detkit.generate.seeding_event(seed=4, mu=50.0)[:5]
    for n in (0, 1, 2000, 10, len(sp[0]), 500):
        got, want = b.seed(*[c[:n] for c in sp]), cpu.seed(*[c[:n] for c in sp])
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, err_msg=f"n={n}")


def test_batched_cluster_and_seed_files_equal_one_call_per_file(tmp_path, b, cpu):
    paths = []
    for s in (1, 2, 3):
        ev = detkit.generate.cluster_event(seed=s)
        p = tmp_path / f"d{s}.csv"
        np.savetxt(p, np.stack(ev, axis=1), fmt="%d", delimiter=",", header="module,x,y,adc",
                   comments="")
        paths.append(str(p))
    bad = tmp_path / "bad.csv"
    bad.write_text("module,x,y,adc\n7,1,1,3000\n7,2,oops,3000\n")
    invalid = tmp_path / "invalid.csv"  # parses, then fails the library's checks
    invalid.write_text("module,x,y,adc\n60000,1,1,3000\n")
    order = [paths[0], str(bad), paths[1], str(tmp_path / "missing.csv"), str(invalid), paths[2]]
    out = b._b.cluster_files(order, "phase1", None)
    assert isinstance(out[1], detkit.InvalidInputError) and f"{bad}:3: column `y`" in str(out[1])
    assert isinstance(out[3], FileNotFoundError)
    assert isinstance(out[4], detkit.InvalidInputError) and "digi 0" in str(out[4])
    for i, p in ((0, paths[0]), (2, paths[1]), (5, paths[2])):
        want = cpu.cluster(*dio.read_digis(p))
        for g, w in zip(out[i], want):
            np.testing.assert_array_equal(g, w)
    sps = []
    for s in (1, 2):
        ev = detkit.generate.seeding_event(seed=s, mu=20.0)[:5]
        p = tmp_path / f"s{s}.csv"
        np.savetxt(p, np.stack(ev, axis=1), fmt="%.9g", delimiter=",",
                   header="x,y,z,var_r,var_z", comments="")
        sps.append(str(p))
    empty = tmp_path / "empty.csv"
    empty.write_text("x,y,z\n")
    out = b._b.seed_files([sps[0], str(empty), sps[1]], {"min_pt": 0.9})
    assert out[1][0].shape == (0, 3)
    for i, p in ((0, sps[0]), (2, sps[1])):
        want = cpu.seed(*dio.read_spacepoints(p), min_pt=0.9)
        for g, w in zip(out[i], want):
            np.testing.assert_array_equal(g, w)


def test_calls_from_several_threads_on_one_backend(b, cpu):
    from concurrent.futures import ThreadPoolExecutor

    events = [detkit.generate.cluster_event(seed=s) for s in range(1, 9)]
    sps = [detkit.generate.seeding_event(seed=s, mu=10.0)[:5] for s in range(1, 9)]
    want_c = [cpu.cluster(*e) for e in events]
    want_s = [cpu.seed(*e) for e in sps]

    def work(i):
        return b.cluster(*events[i % 8]), b.seed(*sps[i % 8])

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(work, range(32)))
    for i, (c, s) in enumerate(got):
        for g, w in zip(c, want_c[i % 8]):
            np.testing.assert_array_equal(g, w)
        for g, w in zip(s, want_s[i % 8]):
            np.testing.assert_array_equal(g, w)


def test_a_bad_digi_in_the_middle_event_of_a_batch_is_named_as_on_the_cpu(b, cpu):
    events = [detkit.generate.cluster_event(seed=s) for s in (1, 2, 3)]
    cols = [np.concatenate([e[j] for e in events]) for j in range(4)]
    offs = np.array([0, len(events[0][0]), len(events[0][0]) + len(events[1][0]), len(cols[0])],
                    dtype=np.uint32)
    bad = int(offs[1]) + 17
    cols[1][bad] = 60000  # x outside the module
    with pytest.raises(detkit.InvalidInputError) as want:
        cpu.cluster(*cols, event_offsets=offs)
    with pytest.raises(detkit.InvalidInputError) as got:
        b.cluster(*cols, event_offsets=offs)
    assert str(got.value) == str(want.value) and str(bad) in str(got.value)
