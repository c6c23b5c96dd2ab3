"""Tests for bdeeponet.importing: other tools' files into the aligned .npz contract."""

import os

import h5py
import numpy as np
import pytest
import scipy.io

from bdeeponet.data import load
from bdeeponet.importing import ASSUMED_GRID, ImportDataError, import_file, import_to


def _fields(n=12, nx=64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, nx)), rng.standard_normal((n, nx))


def _write_v73(path, arrays):
    """An HDF5 file laid out like MATLAB v7.3: 512-byte userblock header, arrays transposed."""
    with h5py.File(path, "w", userblock_size=512) as f:
        for key, a in arrays.items():
            f.create_dataset(key, data=np.asarray(a).T)
            f[key].attrs["MATLAB_class"] = np.bytes_("double")
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00"
    with open(path, "r+b") as fh:
        fh.write(header.ljust(116) + b"\0" * 8 + (0x0200).to_bytes(2, "little") + b"IM")


def test_mat_v5_burgers_like(tmp_path):
    a, u = _fields()
    path = tmp_path / "burgers.mat"
    scipy.io.savemat(path, {"a": a, "u": u})
    d = import_file(path, input_key="a", output_key="u", subsample=4)
    assert (d.n_train, d.u_test.shape[0], d.n_sensors, d.n_points) == (11, 1, 16, 16)
    np.testing.assert_array_equal(np.vstack([d.u_train, d.u_test]), a[:, ::4])
    np.testing.assert_array_equal(np.vstack([d.s_train, d.s_test]), u[:, ::4])
    np.testing.assert_allclose(d.y[:, 0], np.linspace(0, 1, 64)[::4])
    np.testing.assert_allclose(d.sensors, d.y)
    assert d.noise_std is None and d.s_train_clean is None
    assert d.meta["format"] == "mat-v5" and d.meta["grid"] == ASSUMED_GRID
    assert d.meta["source"] == "burgers.mat" and d.meta["subsample"] == 4


def test_mat_v73_is_transposed_back(tmp_path):
    a, u = _fields(n=10, nx=40)
    path = tmp_path / "v73.mat"
    _write_v73(path, {"a": a, "u": u[:, :30], "x": np.linspace(0, 2, 30)[None, :]})
    assert scipy.io.matlab.matfile_version(str(path))[0] == 2  # scipy sees a v7.3 header
    d = import_file(path, input_key="a", output_key="u", grid_key="x", n_train=7, n_test=3)
    assert d.meta["format"] == "mat-v7.3"
    np.testing.assert_array_equal(d.u_train, a[:7])
    np.testing.assert_array_equal(d.s_test, u[7:, :30])
    np.testing.assert_allclose(d.y[:, 0], np.linspace(0, 2, 30))
    assert d.sensors.shape == (40, 1) and d.meta["sensor_grid"] == ASSUMED_GRID


def test_hdf5_nested_keys_and_grid(tmp_path):
    a, u = _fields(n=10, nx=33)
    x = np.linspace(0, 2 * np.pi, 33)
    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as f:
        f["fields/a"], f["fields/u"], f["coords/x"] = a, u.astype(np.float32), x
    d = import_file(path, input_key="fields/a", output_key="fields/u", grid_key="coords/x",
                    subsample=2, n_train=8, n_test=2)
    assert d.meta["format"] == "hdf5" and d.meta["grid"] == "coords/x"
    assert d.meta["sensor_grid"] == "coords/x"  # input on the output's grid
    np.testing.assert_allclose(d.y[:, 0], x[::2])
    np.testing.assert_allclose(d.sensors, d.y)
    np.testing.assert_array_equal(d.s_train, u[:8, ::2].astype(np.float32))
    assert d.s_train.dtype == np.float64


def test_the_layout_follows_the_matlab_header_not_the_extension(tmp_path):
    """An HDF5 file written by h5py and named .mat has no MATLAB header: its arrays are
    read as stored (they were transposed: 350 'sensors' for 100), and a v7.3 file named .h5
    is MATLAB's, transposed back."""
    a, u = _fields(n=10, nx=40)
    plain = tmp_path / "plain.mat"
    with h5py.File(plain, "w") as f:
        f["a"], f["u"] = a, u
    d = import_file(plain, input_key="a", output_key="u", n_train=8, n_test=2)
    assert d.meta["format"] == "hdf5" and d.n_sensors == 40
    np.testing.assert_array_equal(d.u_train, a[:8])
    matlab = tmp_path / "v73.h5"
    _write_v73(matlab, {"a": a, "u": u})
    d = import_file(matlab, input_key="a", output_key="u", n_train=8, n_test=2)
    assert d.meta["format"] == "mat-v7.3" and d.n_sensors == 40
    np.testing.assert_array_equal(d.s_test, u[8:])


def test_npz_2d_field_is_flattened_in_c_order(tmp_path):
    rng = np.random.default_rng(1)
    a, u = rng.standard_normal((6, 9, 5)), rng.standard_normal((6, 9, 5))
    path = tmp_path / "darcy.npz"
    np.savez(path, coeff=a, sol=u)
    d = import_file(path, input_key="coeff", output_key="sol", subsample=2, n_test=2)
    assert d.meta["format"] == "npz" and (d.n_train, d.u_test.shape[0]) == (4, 2)
    assert d.n_sensors == 5 * 3 and d.y.shape == (15, 2) and d.sensors.shape == (15, 2)
    np.testing.assert_array_equal(d.s_train, u[:4, ::2, ::2].reshape(4, -1))
    x1, x2 = np.linspace(0, 1, 9)[::2], np.linspace(0, 1, 5)[::2]
    for j in range(15):  # y[j] is (x1, x2) of flattened index j = i1 * n2 + i2
        np.testing.assert_allclose(d.y[j], [x1[j // 3], x2[j % 3]])


def test_2d_grid_key(tmp_path):
    u = np.random.default_rng(2).standard_normal((4, 6, 4))
    g = np.stack(np.meshgrid(np.arange(6.0), np.arange(4.0) * 10, indexing="ij"), axis=-1)
    path = tmp_path / "g.npz"
    np.savez(path, u=u, g=g)
    d = import_file(path, input_key="u", output_key="u", grid_key="g", subsample=2, n_test=1)
    np.testing.assert_array_equal(d.y, g[::2, ::2].reshape(-1, 2))


def test_noise_is_reproducible_and_train_only(tmp_path):
    a, u = _fields(n=200, nx=64)
    path = tmp_path / "n.npz"
    np.savez(path, a=a, u=u)
    kw = dict(input_key="a", output_key="u", noise=0.1, n_train=150, n_test=50)
    d1, d2 = import_file(path, seed=3, **kw), import_file(path, seed=3, **kw)
    np.testing.assert_array_equal(d1.s_train, d2.s_train)
    assert not np.array_equal(d1.s_train, import_file(path, seed=4, **kw).s_train)
    np.testing.assert_array_equal(d1.s_train_clean, u[:150])
    np.testing.assert_array_equal(d1.s_test, u[150:])
    assert abs(np.std(d1.s_train - u[:150]) / 0.1 - 1) < 0.03
    assert d1.noise_std == 0.1 and d1.meta["noise"] == 0.1 and d1.meta["seed"] == 3


def test_round_trip_through_save_and_load(tmp_path):
    a, u = _fields()
    src = tmp_path / "b.mat"
    scipy.io.savemat(src, {"a": a, "u": u, "x": np.linspace(0, 1, 64)})  # x saved as (1, 64)
    made = import_to(src, tmp_path / "out" / "data.npz", input_key="a", output_key="u",
                     grid_key="x", noise=0.05, subsample=2)
    back = load(tmp_path / "out" / "data.npz")
    for key in ("u_train", "s_train", "u_test", "s_test", "y", "sensors", "s_train_clean"):
        np.testing.assert_array_equal(getattr(back, key), getattr(made, key))
    assert back.noise_std == 0.05 and back.meta == made.meta
    assert set(made.meta) >= {"source", "format", "input_key", "output_key", "subsample",
                              "n_train", "n_test", "noise", "seed", "grid", "format_version"}


# --- errors: each names the key or option at fault --------------------------------------

@pytest.fixture
def npz(tmp_path):
    a, u = _fields()
    path = tmp_path / "d.npz"
    np.savez(path, a=a, u=u, u_short=u[:5], x_bad=np.linspace(0, 1, 50), bad=np.full((12, 64), np.nan),
             one=np.ones((12, 1)))
    return path


@pytest.mark.parametrize("kwargs, words", [
    (dict(input_key="nope"), ["'nope'", "--input"]),
    (dict(output_key="u_short"), ["'a'", "'u_short'", "12", "5"]),
    (dict(subsample=64), ["'a'", "(12, 64)", "--subsample"]),
    (dict(noise=0.0), ["--noise"]),
    (dict(noise=-1.0), ["--noise"]),
    (dict(noise=float("nan")), ["--noise"]),
    (dict(noise=1e40), ["--noise", "1e+30"]),
    (dict(n_train=10, n_test=5), ["--n-train", "--n-test", "12"]),
    (dict(grid_key="x_bad"), ["'x_bad'", "50"]),
    (dict(output_key="bad"), ["'bad'", "NaN"]),
    (dict(output_key="one"), ["'one'", "(12, 1)", "1 point", "at least 2"]),  # no --subsample
])
def test_errors_name_the_culprit(npz, kwargs, words):
    kw = dict(input_key="a", output_key="u") | kwargs
    with pytest.raises(ImportDataError) as exc:
        import_file(npz, **kw)
    msg = str(exc.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_pickled_npz_member_is_refused_without_unpickling(tmp_path):
    class Payload:  # unpickling this would create the directory
        def __reduce__(self):
            return os.mkdir, (str(tmp_path / "unpickled"),)

    path = tmp_path / "evil.npz"
    np.savez(path, a=np.array([Payload()] * 4, dtype=object), u=np.zeros((4, 8)))
    with pytest.raises(ImportDataError, match="'a'"):
        import_file(path, input_key="a", output_key="u")
    assert not (tmp_path / "unpickled").exists()


def test_matlab_cell_and_struct_arrays_are_refused(tmp_path):
    path = tmp_path / "cells.mat"
    scipy.io.savemat(path, {"c": np.array([np.zeros(3), np.ones(4)], dtype=object),
                            "st": {"f": 1.0}, "u": np.zeros((2, 8))})
    for key in ("c", "st"):
        with pytest.raises(ImportDataError, match=f"'{key}'"):
            import_file(path, input_key=key, output_key="u")


def test_v73_cell_and_complex_are_refused(tmp_path):
    path = tmp_path / "cells73.mat"
    _write_v73(path, {"u": np.zeros((4, 8)), "z": np.ones((4, 8)) * 1j})
    with h5py.File(path, "r+") as f:
        f["c"] = np.zeros(2)
        f["c"].attrs["MATLAB_class"] = np.bytes_("cell")
    for key in ("c", "z"):
        with pytest.raises(ImportDataError, match=f"'{key}'"):
            import_file(path, input_key=key, output_key="u")


def test_bad_files_are_refused(tmp_path):
    (tmp_path / "junk.mat").write_bytes(b"not a mat file at all" * 20)
    (tmp_path / "junk.h5").write_bytes(b"plain text")
    (tmp_path / "d.csv").write_text("1,2\n")
    for name in ("junk.mat", "junk.h5", "d.csv", "missing.npz"):
        with pytest.raises(ImportDataError, match=name.split(".")[0]):
            import_file(tmp_path / name, input_key="a", output_key="u")
    (tmp_path / "folder.mat").mkdir()
    with pytest.raises(ImportDataError, match="folder.mat is a directory"):
        import_file(tmp_path / "folder.mat", input_key="a", output_key="u")


def test_a_truncated_mat_file_is_named_truncated(tmp_path):
    """scipy's whosmat stops quietly where a truncated v5 file ends, so the missing key was
    reported as absent ("not found (keys: a)"); the file's own element tags say it ends
    early. A whole file, compressed or not, reads as before."""
    a, u = _fields()
    for compress in (False, True):
        whole = tmp_path / f"whole{compress}.mat"
        scipy.io.savemat(whole, {"a": a, "u": u}, do_compression=compress)
        assert import_file(whole, input_key="a", output_key="u").n_train > 0
        cut = tmp_path / f"cut{compress}.mat"
        raw = whole.read_bytes()
        cut.write_bytes(raw[: len(raw) // 3])  # inside 'a': 'u' is never reached
        with pytest.raises(ImportDataError, match=f"cut{compress}.mat is truncated"):
            import_file(cut, input_key="u", output_key="a")  # was: 'u' not found (keys: a)


def test_measured_outputs_record_their_noise_sd_and_keep_their_values(npz):
    """``noise_std``: the outputs are measurements; their σ is recorded for training,
    nothing is added, and no clean targets are claimed. With ``noise`` it is refused."""
    d = import_file(npz, input_key="a", output_key="u", noise_std=0.02)
    plain = import_file(npz, input_key="a", output_key="u")
    assert d.noise_std == 0.02 and d.s_train_clean is None
    np.testing.assert_array_equal(d.s_train, plain.s_train)
    assert d.meta["measured_noise_std"] == 0.02
    with pytest.raises(ImportDataError, match="give one of them"):
        import_file(npz, input_key="a", output_key="u", noise=0.01, noise_std=0.02)
    with pytest.raises(ImportDataError, match="--noise-std must be"):
        import_file(npz, input_key="a", output_key="u", noise_std=-1.0)


def test_measured_test_targets_are_scored_as_they_are(tmp_path):
    """With ``noise_std`` recorded by ``import --noise-std`` the test targets are
    measurements: the function-level band is scored against them, not against noisy copies
    of them (which added the noise twice: 85% at 95% where the measurements were all inside)."""
    from bdeeponet import TrainConfig, generate, get_problem, train
    from bdeeponet.calibration import Calibration, coverage_table
    from bdeeponet.run import predict

    d = generate(get_problem("antiderivative"), 0.05, np.random.default_rng(0), n_train=80,
                 n_test=20)
    rng = np.random.default_rng(1)
    u = np.vstack([d.u_train, d.u_test])
    s = np.vstack([d.s_train_clean, d.s_test]) + 0.05 * rng.standard_normal((100, d.n_points))
    path = tmp_path / "meas.npz"
    np.savez(path, u=u, s=s)
    data = import_file(path, input_key="u", output_key="s", n_test=20, noise_std=0.05)
    result = train(data, TrainConfig(method="linear", calibration=0.3), device="cpu")
    p = predict(result, data.u_test, data.y)
    expected = coverage_table(p["mean"], p["raw_std"], data.s_test, 0.05,
                              Calibration.from_dict(result.posterior.calibration),
                              s_observed=data.s_test)["function"]
    assert result.metrics["coverage"]["calibrated"]["function"] == expected


def test_periodic_grid_is_declared_and_reaches_the_shift_symmetry(tmp_path):
    """--periodic: the assumed grid is [0, 1) without its end, each axis declared periodic
    with period 1, so a Burgers-like file reaches what generated data reach (the shift
    symmetry); a 2-D field gets both axes; a stride must divide the points."""
    a, u = _fields(nx=64)
    path = tmp_path / "b.mat"
    scipy.io.savemat(path, {"a": a, "u": u})
    d = import_file(path, input_key="a", output_key="u", subsample=4, periodic=True)
    np.testing.assert_allclose(d.y[:, 0], np.arange(0, 64, 4) / 64)
    np.testing.assert_allclose(d.sensors, d.y)
    assert d.periodic == ((0, 1.0),)
    from bdeeponet.data import cyclic_shifts
    assert cyclic_shifts(d.y, 1.0) is not None
    rng = np.random.default_rng(1)
    field = rng.standard_normal((5, 12, 12))
    path2 = tmp_path / "f.npz"
    np.savez(path2, a=field, u=field)
    d2 = import_file(path2, input_key="a", output_key="u", subsample=2, periodic=True)
    assert d2.periodic == ((0, 1.0), (1, 1.0))
    with pytest.raises(ImportDataError, match="does not divide the periodic grid"):
        import_file(path2, input_key="a", output_key="u", subsample=11, periodic=True)


def test_periodic_needs_a_grid(tmp_path):
    a, u = _fields(nx=16)
    x = np.sort(np.random.default_rng(2).random(16))
    path = tmp_path / "scattered.npz"
    np.savez(path, a=a, u=u, x=x)
    with pytest.raises(ImportDataError, match="--periodic needs the output on an equispaced"):
        import_file(path, input_key="a", output_key="u", grid_key="x", periodic=True)
    # an equispaced grid given by the file: its period is its step times its points
    np.savez(path, a=a, u=u, x=np.arange(16) * 0.25)
    d = import_file(path, input_key="a", output_key="u", grid_key="x", periodic=True)
    assert d.periodic == ((0, 4.0),)
