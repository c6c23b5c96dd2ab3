"""Aligned operator-data files: a corpus of broken files that ``load`` must refuse with a
one-line message naming the key and the fault, valid hand-written files, the save/load round
trip, and the statistics of ``generate`` (seeding, noise level, clean test targets)."""

import json
import zipfile

import numpy as np
import pytest

from bdeeponet.data import DataError, OperatorData, generate, load
from bdeeponet.problems import PROBLEMS, get_problem

# the problems whose inputs are GRFs on m sensors (burgers and darcy2d draw their own)
GRF_PROBLEMS = [name for name, cls in PROBLEMS.items() if not hasattr(cls, "draw")]

# Standardised deviations allowed for Monte Carlo estimates (false alarm < 1e-6 per check).
Z_TOL = 5.0
N_TRAIN, N_TEST = 50, 10
ARRAY_KEYS = ("u_train", "s_train", "u_test", "s_test", "y", "sensors", "s_train_clean")
REQUIRED = ("u_train", "s_train", "u_test", "s_test", "y")


def valid_arrays(n=4, m=3, p=5, n_test=2) -> dict:
    """A small, valid data set with every optional key, written by hand with plain numpy."""
    rng = np.random.default_rng(1)
    s_clean = rng.standard_normal((n, p))
    return {
        "u_train": rng.standard_normal((n, m)),
        "s_train": s_clean + 0.1 * rng.standard_normal((n, p)),
        "u_test": rng.standard_normal((n_test, m)),
        "s_test": rng.standard_normal((n_test, p)),
        "y": np.linspace(0.0, 1.0, p)[:, None],
        "sensors": np.linspace(0.0, 1.0, m)[:, None],
        "s_train_clean": s_clean,
        "noise_std": np.asarray(0.1),
        "meta": np.asarray(json.dumps({"problem": "hand-made"})),
    }


def with_value(key, make):
    """Mutation that replaces ``key`` by ``make(old_value)``."""

    def mutate(arrays):
        arrays[key] = make(arrays[key])

    return mutate


def without(key):
    def mutate(arrays):
        del arrays[key]

    return mutate


def with_bad_value(key, bad):
    def put(a):
        a = a.astype(np.float64).copy()
        a.flat[a.size // 2] = bad
        return a

    return with_value(key, put)


def shape_case(key, shape, fault):
    return pytest.param(key, with_value(key, lambda a: np.ones(shape)), fault, id=f"{key}-{shape}")


# (key named in the message, mutation of valid_arrays(), words that name the fault)
BROKEN = [
    *[pytest.param(k, without(k), "missing key", id=f"missing-{k}") for k in REQUIRED],
    *[
        pytest.param(k, with_value(k, lambda a: a.ravel()), "rank 2", id=f"rank1-{k}")
        for k in ARRAY_KEYS
    ],
    *[
        pytest.param(k, with_value(k, lambda a: a[..., None]), "rank 2", id=f"rank3-{k}")
        for k in ARRAY_KEYS
    ],
    shape_case("s_train", (3, 5), "axis 0 must be 4"),  # rows vs u_train rows
    shape_case("s_train", (4, 6), "axis 1 must be 5"),  # columns vs y rows
    shape_case("u_test", (2, 4), "axis 1 must be 3"),  # columns vs sensor count
    shape_case("s_test", (3, 5), "axis 0 must be 2"),  # rows vs u_test rows
    shape_case("s_test", (2, 4), "axis 1 must be 5"),  # columns vs y rows
    shape_case("sensors", (4, 1), "axis 0 must be 3"),  # one row per sensor
    shape_case("s_train_clean", (4, 4), "must match 's_train'"),
    shape_case("s_train_clean", (3, 5), "must match 's_train'"),
    *[
        pytest.param(k, with_bad_value(k, bad), "NaN or inf", id=f"{name}-{k}")
        for k in ARRAY_KEYS
        for name, bad in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf))
    ],
    *[
        pytest.param(k, with_value(k, lambda a: a.astype(str)), "must hold numbers", id=f"str-{k}")
        for k in ARRAY_KEYS
    ],
    pytest.param("u_train", with_value("u_train", lambda a: a > 0), "must hold numbers",
                 id="bool-u_train"),
    pytest.param("y", with_value("y", lambda a: a + 0j), "must hold numbers", id="complex-y"),
    pytest.param("u_train", with_value("u_train", lambda a: np.zeros((0, 3))), "empty",
                 id="empty-u_train"),
    pytest.param("y", with_value("y", lambda a: np.zeros((0, 1))), "empty", id="empty-y"),
    pytest.param("s_test", with_value("s_test", lambda a: np.zeros((2, 0))), "empty",
                 id="empty-s_test"),
    *[
        pytest.param("noise_std", with_value("noise_std", lambda a, v=v: np.asarray(v)), fault,
                     id=f"noise_std-{name}")
        for name, v, fault in (
            ("zero", 0.0, "> 0"),
            ("negative", -0.1, "> 0"),
            ("nan", np.nan, "> 0"),
            ("inf", np.inf, "> 0"),
            ("vector", [0.1, 0.2], "single number"),
            ("string", "0.1", "single number"),
            ("bool", True, "single number"),
        )
    ],
    *[
        pytest.param("meta", with_value("meta", lambda a, v=v: np.asarray(v)), "JSON",
                     id=f"meta-{name}")
        for name, v in (
            ("not-json", "{problem: antiderivative"),
            ("json-list", "[1, 2]"),
            ("number", 3.0),
            ("two-strings", ["{}", "{}"]),
        )
    ],
    *[
        pytest.param("meta", with_value("meta", lambda a, v=v: np.asarray(json.dumps(v))), fault,
                     id=f"meta-periodic-{name}")
        for name, v, fault in (
            ("missing-column", {"periodic": [[1, 1.0]]},
             "periodic coordinate 1, but 'y' has 1 columns (0..0)"),
            ("negative-column", {"periodic": [[-1, 1.0]]}, "periodic coordinate -1"),
            ("twice", {"periodic": [[0, 1.0], [0, 2.0]]}, "periodic coordinate 0 twice"),
            ("not-pairs", {"periodic": [0, 1.0]}, "list of [column, period] pairs"),
            ("triple", {"periodic": [[0, 1.0, 2.0]]}, "list of [column, period] pairs"),
            ("not-a-list", {"periodic": "x"}, "list of [column, period] pairs"),
            ("float-column", {"periodic": [[0.0, 1.0]]}, "integer column"),
            ("zero-period", {"periodic": [[0, 0]]}, "period > 0"),
            ("text-period", {"periodic": [[0, "1"]]}, "period > 0"),
        )
    ],
]


@pytest.mark.parametrize(("key", "mutate", "fault"), BROKEN)
def test_load_refuses_broken_file(tmp_path, key, mutate, fault):
    arrays = valid_arrays()
    mutate(arrays)
    path = tmp_path / "broken.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataError) as info:
        load(path)
    msg = str(info.value)
    assert f"'{key}'" in msg, msg
    assert fault in msg, msg
    assert str(path) in msg and "\n" not in msg, msg


def write_text(path):
    path.write_text("u_train,s_train\n1,2\n")


def write_npy(path):
    with open(path, "wb") as fh:  # an .npy array under an .npz name
        np.save(fh, np.ones((3, 3)))


def write_truncated(path):
    np.savez(path, **valid_arrays())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def write_empty(path):
    path.write_bytes(b"")


def write_zip_of_text(path):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("u_train", "not an array")


@pytest.mark.parametrize(
    ("write", "fault"),
    [
        pytest.param(write_text, "not an .npz", id="text"),
        pytest.param(write_npy, "not an .npz", id="npy"),
        pytest.param(write_truncated, "not an .npz", id="truncated"),
        pytest.param(write_empty, "not an .npz", id="empty-file"),
        pytest.param(write_zip_of_text, "'u_train' is not a NumPy array", id="zip-of-text"),
        pytest.param(None, "no such file", id="missing-file"),
    ],
)
def test_load_refuses_non_npz(tmp_path, write, fault):
    path = tmp_path / "data.npz"
    if write is not None:
        write(path)
    with pytest.raises(DataError) as info:
        load(path)
    msg = str(info.value)
    assert fault in msg and str(path) in msg and "\n" not in msg, msg


def test_load_refuses_directory(tmp_path):
    with pytest.raises(DataError, match="directory"):
        load(tmp_path)


def test_load_refuses_object_array(tmp_path):
    arrays = valid_arrays()
    arrays["u_test"] = np.array([[1.0, "a", None]], dtype=object)
    path = tmp_path / "object.npz"
    np.savez(path, **arrays)  # pickled member: must be refused, never unpickled
    with pytest.raises(DataError, match="'u_test' cannot be read"):
        load(path)


def test_data_error_is_value_error():
    assert issubclass(DataError, ValueError)


def test_hand_written_file_with_required_keys_loads(tmp_path):
    arrays = {k: v for k, v in valid_arrays().items() if k in REQUIRED}
    arrays["u_train"] = np.arange(12).reshape(4, 3)  # integers are numbers too
    path = tmp_path / "mine.npz"
    np.savez(path, **arrays)
    d = load(path)
    for key in REQUIRED:
        got = getattr(d, key)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, arrays[key])
    assert d.sensors is None and d.s_train_clean is None and d.noise_std is None
    assert d.meta == {}
    assert (d.n_train, d.n_sensors, d.n_points) == (4, 3, 5)


def test_hand_written_file_with_all_keys_loads(tmp_path):
    arrays = valid_arrays()
    arrays["meta"] = np.asarray(arrays["meta"].item().encode())  # UTF-8 bytes also accepted
    arrays["noise_std"] = np.asarray([0.25], dtype=np.float32)  # one element, any shape
    path = tmp_path / "all.npz"
    np.savez_compressed(path, **arrays)
    d = load(path)
    np.testing.assert_array_equal(d.sensors, arrays["sensors"])
    np.testing.assert_array_equal(d.s_train_clean, arrays["s_train_clean"])
    assert d.noise_std == 0.25 and isinstance(d.noise_std, float)
    assert d.meta == {"problem": "hand-made"}
    assert d.periodic == ()


def test_periodic_declaration_is_read_from_meta(tmp_path):
    arrays = valid_arrays()
    arrays["y"] = np.column_stack([arrays["y"], 2 * arrays["y"]])
    arrays["meta"] = np.asarray(json.dumps({"periodic": [[1, 2]]}))  # an int period is fine
    np.savez(tmp_path / "p.npz", **arrays)
    d = load(tmp_path / "p.npz")
    assert d.periodic == ((1, 2.0),) and isinstance(d.periodic[0][1], float)
    with pytest.raises(DataError, match="periodic coordinate 2, but 'y' has 2 columns \\(0..1\\)"):
        OperatorData(**{k: arrays[k] for k in REQUIRED}, meta={"periodic": [[0, 1.0], [2, 1.0]]})


# ---------------------------------------------------------------------------- generate


@pytest.fixture(scope="module")
def generated():
    """One small data set per problem (noise sd 0.1, seed 0)."""
    return {
        name: generate(get_problem(name), 0.1, np.random.default_rng(0), n_train=N_TRAIN,
                       n_test=N_TEST, m=20)
        for name in GRF_PROBLEMS
    }


@pytest.mark.parametrize("name", GRF_PROBLEMS)
def test_generate_shapes(generated, name):
    d = generated[name]
    problem = get_problem(name)
    y = problem.query_points()
    p, dim = y.shape
    assert dim == (1 if name in ("antiderivative", "pendulum", "darcy") else 2)
    assert d.u_train.shape == (N_TRAIN, 20) and d.u_test.shape == (N_TEST, 20)
    assert d.s_train.shape == d.s_train_clean.shape == (N_TRAIN, p)
    assert d.s_test.shape == (N_TEST, p)
    np.testing.assert_array_equal(d.y, y)
    np.testing.assert_allclose(d.sensors, np.linspace(0.0, 1.0, 20)[:, None], atol=1e-12)
    assert d.noise_std == 0.1
    assert d.meta["problem"] == name and d.meta["noise_std"] == 0.1


@pytest.mark.parametrize("name", GRF_PROBLEMS)
def test_generate_declares_the_periodic_coordinates(generated, name):
    d = generated[name]
    if name == "advection_diffusion":  # periodic in x (column 0) with period 1
        assert d.meta["periodic"] == [[0, 1.0]] and d.periodic == ((0, 1.0),)
    else:
        assert "periodic" not in d.meta and d.periodic == ()


@pytest.mark.parametrize("name", GRF_PROBLEMS)
def test_generate_noise_has_requested_sd(generated, name):
    """Noise = s_train - s_train_clean is N(0, 0.1^2): the sample sd has standard error
    about sd / sqrt(2 n) and the sample mean sd / sqrt(n)."""
    d = generated[name]
    noise = (d.s_train - d.s_train_clean).ravel()
    n = noise.size
    assert abs(noise.std() - 0.1) < Z_TOL * 0.1 / np.sqrt(2 * n)
    assert abs(noise.mean()) < Z_TOL * 0.1 / np.sqrt(n)


def test_generate_test_targets_are_clean():
    """Same seed, very different noise: only s_train changes. And the antiderivative's test
    targets are the integral of the test inputs (trapezoid on the 100 sensors, error ~1e-4),
    far closer than the noise level."""

    def make(sd):
        return generate(get_problem("antiderivative"), sd, np.random.default_rng(3),
                        n_train=N_TRAIN, n_test=N_TEST)

    quiet, loud = make(1e-3), make(0.5)
    for key in ("u_train", "u_test", "s_test", "s_train_clean", "y", "sensors"):
        np.testing.assert_array_equal(getattr(quiet, key), getattr(loud, key))
    assert np.std(loud.s_train - loud.s_train_clean) > 0.4
    t = loud.sensors[:, 0]
    np.testing.assert_allclose(t, loud.y[:, 0], atol=1e-12)  # 100 sensors = 100 query times
    steps = 0.5 * (loud.u_test[:, 1:] + loud.u_test[:, :-1]) * np.diff(t)
    integral = np.concatenate([np.zeros((N_TEST, 1)), np.cumsum(steps, axis=1)], axis=1)
    assert np.max(np.abs(loud.s_test - integral)) < 1e-3


def test_generate_seeding():
    def make(seed):
        return generate(get_problem("pendulum"), 0.05, np.random.default_rng(seed),
                        n_train=N_TRAIN, n_test=N_TEST, m=20)

    a, b, c = make(7), make(7), make(8)
    for key in ("u_train", "s_train", "u_test", "s_test", "s_train_clean"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
        assert not np.allclose(getattr(a, key), getattr(c, key)), key


@pytest.mark.parametrize("noise", [0.0, -0.1, float("nan"), float("inf")])
def test_generate_refuses_bad_noise(noise):
    with pytest.raises(ValueError, match="noise"):
        generate(get_problem("antiderivative"), noise, np.random.default_rng(0), n_train=2,
                 n_test=1, m=5)


@pytest.mark.parametrize(("kwargs", "name"), [({"n_train": 0}, "n_train"),
                                               ({"n_test": 0}, "n_test"), ({"m": 1}, "m")])
def test_generate_refuses_bad_sizes(kwargs, name):
    with pytest.raises(ValueError, match=name):
        generate(get_problem("antiderivative"), 0.1, np.random.default_rng(0), **kwargs)


@pytest.mark.parametrize("name", ["diffusion_reaction", "advection_diffusion"])
def test_save_load_round_trip_is_exact(generated, tmp_path, name):
    d = generated[name]
    path = tmp_path / "sub" / "round.npz"
    d.save(path)
    back = load(path)
    for key in ARRAY_KEYS:
        np.testing.assert_array_equal(getattr(back, key), getattr(d, key))
    assert back.noise_std == d.noise_std
    assert back.meta == d.meta and back.meta["problem"] == name
    assert back.periodic == d.periodic
    assert [p.name for p in path.parent.iterdir()] == ["round.npz"]  # no temporary left


def test_save_load_round_trip_without_optional_keys(tmp_path):
    arrays = {k: v for k, v in valid_arrays().items() if k in REQUIRED}
    d = OperatorData(**arrays)
    d.save(tmp_path / "plain.npz")
    back = load(tmp_path / "plain.npz")
    assert back.noise_std is None and back.sensors is None and back.meta == {}
    np.testing.assert_array_equal(back.s_train, d.s_train)


def test_generate_relative_noise():
    """``relative``: the noise sd is the factor times the clean targets' sd, and the
    residuals of the noisy targets have that sd."""
    d = generate(get_problem("darcy"), 0.05, np.random.default_rng(3), n_train=200, n_test=2,
                 m=20, relative=True)
    assert d.noise_std == pytest.approx(0.05 * d.s_train_clean.std(), rel=1e-12)
    assert d.meta["noise_relative"] == 0.05 and d.meta["noise_std"] == d.noise_std
    sd = (d.s_train - d.s_train_clean).std()
    assert abs(sd / d.noise_std - 1) < 4 / np.sqrt(2 * d.s_train.size)  # 4 standard errors


def test_the_training_fingerprint_follows_the_training_functions_only(tmp_path):
    """The same data read back gives the same fingerprint; one training value changed
    changes it; the test set does not enter it (a run is checked against the functions its
    held-out split is drawn from)."""
    data = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=8,
                    n_test=2)
    data.save(tmp_path / "d.npz")
    fingerprint = data.training_fingerprint()
    assert load(tmp_path / "d.npz").training_fingerprint() == fingerprint
    s = data.s_train.copy()
    s[3, 7] += 1e-12
    other = OperatorData(data.u_train, s, data.u_test, data.s_test, data.y, meta=data.meta)
    assert other.training_fingerprint() != fingerprint
    test_moved = OperatorData(data.u_train, data.s_train, data.u_test, data.s_test + 1.0, data.y)
    assert test_moved.training_fingerprint() == fingerprint
