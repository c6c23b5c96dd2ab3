"""The ``bdeeponet`` command (docs/design.md, command-line contract), driven in-process through
``main(argv)``: bad usage and bad input exit 2 with one ``error: ...`` line on stderr and leave
no output behind; tiny end-to-end runs of generate, plot-data, train, predict and evaluate."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from bdeeponet.cli import main
from bdeeponet.data import load

torch.set_num_threads(1)

METHODS = ("adam", "sgld", "resgld", "mresgld")
N_TRAIN, N_TEST, M, P = 20, 5, 100, 100  # antiderivative defaults: 100 sensors, 100 times
TINY = ["--epochs", "3", "--batch-size", "10", "--width", "8", "--latent", "8", "--quiet"]


def cli(capsys, *argv):
    """Run ``bdeeponet argv`` in-process; returns (exit code, stdout, stderr)."""
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_error(result, *words):
    """Exit 2, exactly one stderr line ``error: ...`` holding every word, no traceback."""
    rc, _, err = result
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], (word, lines[0])


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "f.npz"
    rc = main(["generate", "antiderivative", "--noise", "0.01", "--out", str(path),
               "--n-train", str(N_TRAIN), "--n-test", str(N_TEST)])
    assert rc == 0
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_file):
    """Lazily trained tiny runs, one per method, shared by the module's tests."""
    cache = {}

    def get(method: str) -> Path:
        if method not in cache:
            out = tmp_path_factory.mktemp("runs") / method
            # a tiny run's warnings (it samples too briefly) must not reach the test's capsys
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                rc = main(["train", str(data_file), "--method", method, "--out", str(out), *TINY])
            assert rc == 0
            cache[method] = out
        return cache[method]

    return get


@pytest.fixture
def u_file(tmp_path):
    def write(u, **extra):
        path = tmp_path / "input.npz"
        np.savez(path, u=u, **extra)
        return path

    return write


# ------------------------------------------------------------------ a real process


def test_real_process_exits_2_with_one_error_line(tmp_path):
    exe = Path(sys.executable).with_name("bdeeponet")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "bdeeponet.cli"]
    out = tmp_path / "x.npz"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run(
        [*cmd, "generate", "no_such_problem", "--noise", "0.1", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "no_such_problem" in lines[0]
    assert proc.stdout == ""
    assert not out.exists()


# ------------------------------------------------------------------ usage errors


def test_unknown_problem_lists_valid_ones(capsys, tmp_path):
    result = cli(capsys, "generate", "heat", "--noise", "0.1", "--out", tmp_path / "x.npz")
    assert_error(result, "'heat'", "antiderivative", "pendulum", "diffusion_reaction",
                 "advection_diffusion")
    assert files_in(tmp_path) == []


def test_unknown_subcommand_lists_valid_ones(capsys):
    assert_error(cli(capsys, "frobnicate"), "'frobnicate'", "generate", "train", "predict",
                 "evaluate", "plot-data")


def test_missing_subcommand(capsys):
    assert_error(cli(capsys), "required", "command", "--help")


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["generate", "antiderivative", "--out", "{out}"], "--noise"),
        (["generate", "antiderivative", "--noise", "0.1"], "--out"),
        (["generate", "--noise", "0.1", "--out", "{out}"], "problem"),
        (["train", "{data}", "--method", "adam"], "--out"),
        (["predict", "{run}", "--out", "{out}"], "input"),
        (["plot-data", "{data}"], "--out"),
    ],
    ids=["generate-noise", "generate-out", "generate-problem", "train-out", "predict-input",
         "plot-out"],
)
def test_missing_required_argument(capsys, tmp_path, argv, word):
    names = {"out": tmp_path / "out.npz", "data": tmp_path / "d.npz", "run": tmp_path / "r"}
    argv = [a.format(**names) for a in argv]
    assert_error(cli(capsys, *argv), "required", word)
    assert files_in(tmp_path) == []


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--noise", "0"], ["noise", "> 0"]),
        (["--noise", "-1"], ["noise", "> 0"]),
        (["--noise", "nan"], ["noise", "> 0"]),
        (["--noise", "abc"], ["--noise", "'abc'"]),
        (["--noise", "0.1", "--param", "viscosity=0.1"], ["'viscosity'", "n_points"]),
        (["--noise", "0.1", "--param", "n_points"], ["NAME=VALUE", "'n_points'"]),
        (["--noise", "0.1", "--param", "=3"], ["NAME=VALUE", "'=3'"]),
        (["--noise", "0.1", "--param", "n_points=ten"], ["n_points", "integer"]),
        (["--noise", "0.1", "--n-train", "0"], ["n_train", ">= 1"]),
        (["--noise", "0.1", "--m", "1"], ["m must be an integer >= 2"]),
        (["--noise", "0.1", "--length-scale", "0"], ["length_scale"]),
    ],
    ids=["noise-0", "noise-neg", "noise-nan", "noise-text", "unknown-param", "param-no-eq",
         "param-no-name", "param-bad-value", "n-train-0", "m-1", "length-scale-0"],
)
def test_generate_bad_option_writes_nothing(capsys, tmp_path, extra, words):
    out = tmp_path / "x.npz"
    assert_error(cli(capsys, "generate", "antiderivative", "--out", out, *extra), *words)
    assert files_in(tmp_path) == []


def test_generate_out_must_be_npz(capsys, tmp_path):
    assert_error(cli(capsys, "generate", "pendulum", "--noise", "0.1", "--out",
                     tmp_path / "x.txt"), ".npz")
    assert files_in(tmp_path) == []


def test_generate_without_noise_for_npz(capsys, tmp_path):
    assert_error(cli(capsys, "generate", "pendulum", "--out", tmp_path / "x.npz"), "--noise")
    assert files_in(tmp_path) == []


@pytest.mark.parametrize("mat73", [False, True])
def test_published_layout_round_trip(capsys, tmp_path, mat73):
    """generate darcy2d --out F.mat writes 'coeff'/'sol' (n, s, s) clean, as the benchmark
    files are published; import with a stride reads them back as a user with those files
    would, adding noise there."""
    import scipy.io

    name = tmp_path / "darcy.mat"
    rc, out, err = cli(capsys, "generate", "darcy2d", "--param", "n_points=9", "--param",
                       "refine=2", "--n-train", 6, "--n-test", 2, "--out", name,
                       *(["--mat73"] if mat73 else []))
    assert rc == 0, err
    assert scipy.io.matlab.matfile_version(str(name))[0] == (2 if mat73 else 1)
    rc, out, err = cli(capsys, "import", name, "--input", "coeff", "--output", "sol",
                       "--subsample", 2, "--n-test", 2, "--noise", "1e-4", "--out",
                       tmp_path / "d.npz")
    assert rc == 0, err
    d = load(tmp_path / "d.npz")
    assert d.u_train.shape == (6, 25) and d.s_test.shape == (2, 25) and d.y.shape == (25, 2)
    assert set(np.unique(d.u_train)) == {3.0, 12.0}
    # the same seed generates the same functions as the aligned file
    rc, _, err = cli(capsys, "generate", "darcy2d", "--param", "n_points=9", "--param", "refine=2",
                     "--n-train", 6, "--n-test", 2, "--noise", "1e-4", "--out", tmp_path / "g.npz")
    g = load(tmp_path / "g.npz")
    np.testing.assert_allclose(d.s_test, g.s_test.reshape(2, 9, 9)[:, ::2, ::2].reshape(2, -1))


@pytest.mark.parametrize(("problem", "extra", "words"), [
    ("burgers", ["--noise", "0.1", "--out", "x.npz", "--m", "64"], ["--m", "n_points"]),
    ("burgers", ["--out", "x.mat", "--noise", "0.1"], ["clean", "import"]),
    ("pendulum", ["--out", "x.mat"], ["no published layout"]),
    ("burgers", ["--out", "x.h5", "--mat73"], ["--mat73", ".mat"]),
    ("burgers", ["--out", "x.mat", "--param", "n_points=100"], ["n_points", "divide"]),
    ("darcy2d", ["--out", "x.mat", "--param", "n_points=4", "--param", "refine=1"],
     ["cannot resolve"]),
    ("burgers", ["--out", "x.mat", "--param", "nu=0.001", "--n-train", "2", "--n-test", "1"],
     ["not resolved"]),
])
def test_generate_field_bad_input_writes_nothing(capsys, tmp_path, problem, extra, words):
    extra = [str(tmp_path / a) if a.startswith("x.") else a for a in extra]
    assert_error(cli(capsys, "generate", problem, *extra), *words)
    assert files_in(tmp_path) == []


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--method", "lbfgs"], ["'lbfgs'", "--method", "'mresgld'"]),
        (["--c", "1.5"], ["c must be in [0, 1]", "1.5"]),
        (["--tau1", "2", "--tau2", "1"], ["tau1 must be < tau2"]),
        (["--tau1", "1", "--tau2", "1"], ["tau1 must be < tau2"]),
        (["--lr", "0"], ["lr must be a finite number > 0"]),
        (["--noise-std", "-1"], ["--noise-std", "a number > 0 or 'auto'"]),
        (["--noise-std", "0"], ["--noise-std", "a number > 0 or 'auto'"]),
        (["--calibration", "1.5"], ["calibration must be a fraction in [0, 1)", "1.5"]),
        (["--calibration", "0.99", "--epochs", "1"], ["calibration = 0.99", "leaves"]),
        (["--metric", "newton"], ["--metric", "'newton'", "kfac"]),
        (["--epochs", "0"], ["epochs must be >= 1"]),
        (["--epochs", "2", "--burn-in", "2"], ["burn_in"]),
        (["--activation", "sine", "--epochs", "1"], ["'sine'", "tanh"]),
        (["--config", "no_such.toml"], ["no such config file"]),
        (["--epochs", "30", "--thin", "100"], ["thin (100) keeps no sample", "sampled epochs"]),
        (["--noise-std", "1e-300"], ["noise_std must be within [1e-30, 1e+30]"]),
        (["--tau2", "1e300"], ["tau2 must be within [1e-30, 1e+30]"]),
    ],
    ids=["method", "c", "tau-order", "tau-equal", "lr", "noise-std", "noise-std-zero",
         "calibration-range", "calibration-too-large", "metric", "epochs", "burn-in",
         "activation", "config", "thin", "noise-std-tiny", "tau2-huge"],
)
def test_train_bad_option_writes_nothing(capsys, tmp_path, data_file, extra, words):
    out = tmp_path / "run"
    assert_error(cli(capsys, "train", data_file, "--out", out, "--quiet", *extra), *words)
    assert not out.exists()


@pytest.mark.parametrize("kind", ["binary", "directory", "bad-toml"])
def test_train_unreadable_config_file(capsys, tmp_path, data_file, kind):
    config = tmp_path / "config.toml"
    if kind == "binary":
        config.write_bytes(bytes(range(256)))
    elif kind == "directory":
        config.mkdir()
    else:
        config.write_text("epochs = = 3\n")
    out = tmp_path / "run"
    assert_error(cli(capsys, "train", data_file, "--out", out, "--config", config), str(config))
    assert not out.exists()


@pytest.mark.parametrize(("line", "words"), [
    ('epochs = "ten"', ["epochs must be of type int", "'ten'"]),
    ("chains = 2.5", ["chains must be of type int | None", "2.5"]),
    ("noise_std = true", ["noise_std must be of type float | string | None", "True"]),
    ('standardise = "yes"', ["standardise must be of type bool", "'yes'"]),
    ("burn_in = 2.5", ["burn_in must be of type int | None", "2.5"]),
], ids=["string-for-int", "float-for-int", "bool-for-number", "string-for-bool", "burn-in"])
def test_train_config_file_of_the_wrong_types(capsys, tmp_path, data_file, line, words):
    """A value of another type than the field's in a --config file is one error line, and
    nothing is written (an int is taken where a float is declared)."""
    config = tmp_path / "config.toml"
    config.write_text(line + "\n")
    out = tmp_path / "run"
    assert_error(cli(capsys, "train", data_file, "--out", out, "--config", config), *words)
    assert not out.exists()


@pytest.mark.parametrize(("args", "words"), [
    (["--method", "adam", "--dropout", "0"], ["band comes from dropout masks", "> 0"]),
    (["--method", "sgld", "--dropout", "1.5"], ["dropout must be a probability", "1.5"]),
    (["--threads", "0"], ["--threads must be >= 1"]),
], ids=["adam-without-dropout", "dropout-beyond-1", "no-threads"])
def test_train_settings_that_mean_nothing(capsys, tmp_path, data_file, args, words):
    """Adam without dropout gave a band of width 0 marked calibrated; a dropout of 1.5 and
    0 or -1 threads were taken. Each is one error line, nothing written."""
    out = tmp_path / "run"
    assert_error(cli(capsys, "train", data_file, "--out", out, *args), *words)
    assert not out.exists()


def test_a_file_of_u_and_s_points_to_import(capsys, tmp_path):
    path = tmp_path / "measurements.npz"
    np.savez(path, u=np.zeros((5, 3)), s=np.zeros((5, 4)))
    assert_error(cli(capsys, "train", path, "--out", tmp_path / "run"), "missing key 'u_train'",
                 "bdeeponet import")


def test_train_missing_file(capsys, tmp_path):
    missing = tmp_path / "nothing.npz"
    assert_error(cli(capsys, "train", missing, "--out", tmp_path / "run"), "no such file",
                 str(missing))
    assert files_in(tmp_path) == []


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [("s_train", np.nan, ["'s_train'", "NaN"]), ("u_test", None, ["missing key 'u_test'"])],
    ids=["nan", "missing-key"],
)
def test_train_broken_file(capsys, tmp_path, data_file, key, value, words):
    with np.load(data_file) as z:
        arrays = dict(z)
    if value is None:
        del arrays[key]
    else:
        arrays[key][0, 0] = value
    broken = tmp_path / "broken.npz"
    np.savez(broken, **arrays)
    assert_error(cli(capsys, "train", broken, "--out", tmp_path / "run", *TINY), *words)
    assert not (tmp_path / "run").exists()


def test_train_without_noise_std_estimates_it(capsys, tmp_path, data_file):
    with np.load(data_file) as z:
        arrays = {k: z[k] for k in ("u_train", "s_train", "u_test", "s_test", "y")}
    plain = tmp_path / "plain.npz"
    np.savez(plain, **arrays)
    out = tmp_path / "run"
    assert cli(capsys, "train", plain, "--out", out, *TINY)[0] == 0
    assert json.loads((out / "config.json").read_text())["noise_std"] is None  # unknown
    assert json.loads((out / "metrics.json").read_text())["noise_std"] > 0  # estimated
    # ... the linear baseline needs it ...
    assert_error(cli(capsys, "train", plain, "--out", tmp_path / "lin", "--method", "linear",
                     *TINY), "noise", "--noise-std")
    # ... and with --noise-std the run uses it.
    known = tmp_path / "known"
    assert cli(capsys, "train", plain, "--out", known, "--noise-std", "0.01", *TINY)[0] == 0
    assert json.loads((known / "config.json").read_text())["noise_std"] == 0.01
    assert json.loads((known / "metrics.json").read_text())["noise_std"] == 0.01


def test_train_says_when_the_damping_outlasts_the_sampling(capsys, tmp_path, data_file):
    """A run sampling 1 epoch under a damped metric warns, and records the relaxation time
    of the directions only the prior constrains (steps and epochs, 2 steps an epoch here)."""
    out = tmp_path / "run"
    rc, _, err = cli(capsys, "train", data_file, "--method", "sgld", "--out", out, *TINY)
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["prior_relaxation_epochs"] == pytest.approx(metrics["prior_relaxation_steps"] / 2)
    assert metrics["prior_relaxation_epochs"] > 1 and metrics["metric_damping"] > 0
    assert metrics["metric_stiffness_end"] > 0  # where the chain ended (a tiny run: stable)
    assert "relax over about" in err and "sampled 1," in err
    assert "stiffer ground" not in err


def test_train_says_when_the_chains_ended_near_their_stability_limit(capsys, tmp_path, data_file,
                                                                    monkeypatch):
    """The warning follows ``metric_stiffness_end``: silent for the tiny run's own value
    (above), loud when the chains ended where η λ > 1 (here forced to 1e3)."""
    import importlib

    monkeypatch.setattr(importlib.import_module("bdeeponet.train"), "end_stiffness",
                        lambda *args: 1e3)
    out = tmp_path / "run"
    rc, _, err = cli(capsys, "train", data_file, "--method", "sgld", "--out", out, *TINY)
    assert rc == 0 and "ended on stiffer ground" in err
    assert json.loads((out / "metrics.json").read_text())["metric_stiffness_end"] == 1e3


@pytest.mark.parametrize("accepted", [0.0, 0.005, 0.02, 0.5])
def test_train_says_when_the_replicas_did_not_exchange(capsys, tmp_path, data_file, monkeypatch,
                                                       accepted):
    """Below 1% of the swaps offered to the cold replica accepted, the run says its chain
    was SGLD's and how many replicas a communicating ladder would need (2Λ); at or above, it
    is silent."""
    from bdeeponet.samplers.resgld import ReSGLD

    real = ReSGLD.swap_report
    monkeypatch.setattr(ReSGLD, "swap_report",
                        lambda self, state: {**real(self, state), "measured": accepted})
    out = tmp_path / "run"
    rc, _, err = cli(capsys, "train", data_file, "--method", "mresgld", "--out", out, *TINY)
    swap = json.loads((out / "metrics.json").read_text())["swap"]
    assert rc == 0 and swap["measured"] == accepted
    warned = [line for line in err.splitlines() if "sampled as --method sgld would" in line]
    assert len(warned) == (accepted < 0.01)
    if warned:
        assert f"{accepted:.2%} of the swaps" in warned[0]
        assert f"about {2 * swap['barrier']:.0f} replicas" in warned[0]


def test_train_refuses_to_overwrite_finished_run(capsys, runs, data_file):
    run = runs("adam")
    before = (run / "metrics.json").read_bytes()
    assert_error(cli(capsys, "train", data_file, "--out", run, *TINY), "finished run")
    assert (run / "metrics.json").read_bytes() == before


def test_a_run_stopped_before_its_figures_says_how_to_draw_them(capsys, tmp_path, runs,
                                                                 data_file):
    """metrics.json is written before the command draws the figures: a run stopped between
    the two is finished without band.png. The refusal says --resume draws it, and does."""
    run = tmp_path / "run"
    shutil.copytree(runs("adam"), run)
    (run / "band.png").unlink()
    assert_error(cli(capsys, "train", data_file, "--method", "adam", "--out", run, *TINY),
                 "finished run", "--resume draws them")
    assert cli(capsys, "train", data_file, "--method", "adam", "--out", run, *TINY,
               "--resume")[0] == 0
    assert (run / "band.png").exists()


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_missing_run_directory(capsys, tmp_path, data_file, command):
    args = [data_file, "--out", tmp_path / "p.npz"] if command == "predict" else [data_file]
    assert_error(cli(capsys, command, tmp_path / "no_run", *args), "no such run directory")
    assert files_in(tmp_path) == []


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_unfinished_run_directory(capsys, tmp_path, runs, data_file, u_file, command):
    run = tmp_path / "unfinished"
    shutil.copytree(runs("adam"), run)
    (run / "metrics.json").unlink()
    pred = tmp_path / "p.npz"
    args = [u_file(np.zeros((2, M))), "--out", pred] if command == "predict" else [data_file]
    assert_error(cli(capsys, command, run, *args), "metrics.json", "did not finish")
    assert not pred.exists()


@pytest.mark.parametrize(
    ("arrays", "words"),
    [
        ({"u": np.zeros((2, M + 1))}, ["'u'", f"(n, {M})", f"{M + 1}"]),
        ({"u": np.zeros(M)}, ["'u'", f"(n, {M})"]),
        ({"u": np.zeros((2, M)), "y": np.zeros((4, 2))}, ["'y'", "(P, 1)"]),
        ({"u": np.full((2, M), np.nan)}, ["'u'", "NaN"]),
        ({"v": np.zeros((2, M))}, ["missing key 'u'"]),
        ({"u": np.full((2, M), "x")}, ["'u'", "must hold real numbers"]),
        ({"u": np.full((2, M), "1.5")}, ["'u'", "must hold real numbers"]),
        ({"u": np.ones((2, M), complex)}, ["'u'", "must hold real numbers", "complex"]),
        ({"u": np.full((2, M), 1e300)}, ["'u'", "float32's range"]),
        ({"u": np.zeros((0, M))}, ["'u'", "no rows"]),
        ({"u": np.zeros((2, M)), "y": np.zeros((0, 1))}, ["'y'", "no rows"]),
    ],
    ids=["u-sensor-count", "u-rank", "y-dim", "u-nan", "no-u", "u-text", "u-numeric-text",
         "u-complex", "u-huge", "u-empty", "y-empty"],
)
def test_predict_bad_input_writes_nothing(capsys, tmp_path, runs, arrays, words):
    path = tmp_path / "input.npz"
    np.savez(path, **arrays)
    pred = tmp_path / "pred.npz"
    assert_error(cli(capsys, "predict", runs("adam"), path, "--out", pred), *words)
    assert not pred.exists()


def test_predict_reads_a_boolean_field_as_0_and_1(capsys, tmp_path, runs):
    """A logical field (a MATLAB logical, a numpy bool) is 0/1 to `predict` as to `import`,
    which trains on such files; `predict` refused it."""
    mask = np.random.default_rng(0).random((3, M)) > 0.5
    preds = []
    for name, u in (("bool", mask), ("float", mask.astype(float))):
        np.savez(tmp_path / f"{name}.npz", u=u)
        assert cli(capsys, "predict", runs("sgld"), tmp_path / f"{name}.npz", "--out",
                   tmp_path / f"{name}-pred.npz")[0] == 0
        preds.append(np.load(tmp_path / f"{name}-pred.npz"))
    for k in preds[1].files:  # (novelty is NaN: the tiny run holds too few functions out)
        np.testing.assert_array_equal(preds[0][k], preds[1][k])


def test_predict_input_that_is_not_npz(capsys, tmp_path, runs):
    path = tmp_path / "input.npy"
    np.save(path, np.zeros((2, M)))
    pred = tmp_path / "pred.npz"
    assert_error(cli(capsys, "predict", runs("adam"), path, "--out", pred), path.name, ".npz",
                 ".mat", ".h5")
    assert not pred.exists()


def test_predict_warns_where_the_query_points_leave_the_training_range(capsys, tmp_path,
                                                                       runs):
    """New query points beyond the training ones (y in [0, 1]) get one warning line naming
    how many and the range; points inside get none. It predicted silently."""
    path, pred = tmp_path / "input.npz", tmp_path / "pred.npz"
    np.savez(path, u=np.zeros((2, M)), y=np.load(runs("linear") / "query_points.npy"))
    rc, _, err = cli(capsys, "predict", runs("linear"), path, "--out", pred)  # it has no trunk
    assert rc == 0 and "outside" not in err, err
    for y, outside in ((np.linspace(-1, 2, 31)[:, None], 20), (np.linspace(0, 1, 7)[:, None], 0)):
        np.savez(path, u=np.zeros((2, M)), y=y)
        rc, _, err = cli(capsys, "predict", runs("sgld"), path, "--out", pred)
        assert rc == 0, err
        err = [line for line in err.splitlines() if "outside" in line]
        assert len(err) == (1 if outside else 0), err
        if outside:
            assert err[0].startswith(f"warning: {outside} of 31 query points") and "[0, 1]" in err[0]


def test_predict_says_when_the_function_band_has_no_stated_confidence(capsys, tmp_path, runs,
                                                                     u_file):
    """Under 10 held-out functions the function-level band is the Gaussian union bound with
    no stated confidence: recorded as null in meta, and now said in one warning line."""
    pred = tmp_path / "pred.npz"
    rc, _, err = cli(capsys, "predict", runs("sgld"), u_file(np.zeros((2, M))), "--out", pred)
    assert rc == 0 and json.loads(str(np.load(pred)["meta"]))["function_confidence"] is None
    assert sum("union bound" in line for line in err.splitlines()) == 1, err


def test_predict_output_that_is_not_npz(capsys, tmp_path, runs, u_file):
    pred = tmp_path / "pred.txt"
    assert_error(cli(capsys, "predict", runs("sgld"), u_file(np.zeros((2, M))), "--out", pred),
                 "--out must end in .npz")
    assert not pred.exists()


@pytest.mark.parametrize("kind", ["mat", "mat73", "h5"])
def test_predict_and_acquire_read_matlab_and_hdf5_inputs(capsys, tmp_path, runs, kind):
    """New inputs in a MATLAB or HDF5 file predict as the same arrays in an .npz do (a v7.3
    file's transposed layout undone); they were refused as not .npz."""
    import h5py
    import scipy.io

    from bdeeponet.importing import write_published

    u = np.random.default_rng(0).standard_normal((3, M))
    ref, pred = tmp_path / "ref.npz", tmp_path / "pred.npz"
    np.savez(tmp_path / "u.npz", u=u)
    assert cli(capsys, "predict", runs("sgld"), tmp_path / "u.npz", "--out", ref)[0] == 0
    path = tmp_path / ("u.h5" if kind == "h5" else "u.mat")
    if kind == "mat":
        scipy.io.savemat(path, {"u": u})
    elif kind == "mat73":
        write_published(path, u, np.zeros((3, 2)), ("u", "unused"), mat73=True)
    else:
        with h5py.File(path, "w") as f:
            f["u"] = u
    rc, _, err = cli(capsys, "predict", runs("sgld"), path, "--out", pred)
    assert rc == 0, err
    with np.load(ref) as a, np.load(pred) as b:
        assert np.array_equal(a["mean"], b["mean"]) and np.array_equal(a["upper"], b["upper"])
    rc, _, err = cli(capsys, "acquire", runs("sgld"), path, "--n", "2", "--out",
                     tmp_path / "picked.npz")
    assert rc == 0, err


def test_predict_missing_input_file(capsys, tmp_path, runs):
    pred = tmp_path / "pred.npz"
    assert_error(cli(capsys, "predict", runs("sgld"), tmp_path / "none.npz", "--out", pred),
                 "no such file")
    assert not pred.exists()


@pytest.mark.parametrize("command", ["generate", "plot-data", "train"])
def test_output_under_a_regular_file(capsys, tmp_path, data_file, command):
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "out.npz"
    argv = {
        "generate": ["generate", "pendulum", "--noise", "0.1", "--out", out, "--n-train", "2",
                     "--n-test", "1", "--m", "5"],
        "plot-data": ["plot-data", data_file, "--out", blocker / "fig.png"],
        "train": ["train", data_file, "--out", blocker, *TINY],
    }[command]
    assert_error(cli(capsys, *argv), str(blocker))
    assert files_in(tmp_path) == ["file"] and blocker.read_text() == ""


def test_plot_data_unsupported_format_writes_nothing(capsys, tmp_path, data_file):
    assert_error(cli(capsys, "plot-data", data_file, "--out", tmp_path / "fig.xyz"), "xyz")
    assert files_in(tmp_path) == []


# ------------------------------------------------------------------ success paths


def test_generate_writes_loadable_file(capsys, data_file):
    d = load(data_file)
    assert d.u_train.shape == (N_TRAIN, M) and d.u_test.shape == (N_TEST, M)
    assert d.s_train.shape == (N_TRAIN, P) and d.y.shape == (P, 1)
    assert d.noise_std == 0.01
    assert d.meta["problem"] == "antiderivative" and d.meta["seed"] == 0
    assert files_in(data_file.parent) == ["f.npz"]  # no temporary left behind


def test_generate_reports_what_it_wrote(capsys, tmp_path):
    out = tmp_path / "p.npz"
    rc, stdout, err = cli(capsys, "generate", "pendulum", "--noise", "0.05", "--out", out,
                          "--n-train", "3", "--n-test", "2", "--m", "10", "--seed", "4",
                          "--param", "k=2")
    assert rc == 0 and err == ""
    assert str(out) in stdout
    d = load(out)
    assert d.u_train.shape == (3, 10) and d.meta["seed"] == 4
    assert d.meta["parameters"]["k"] == 2


@pytest.mark.parametrize(
    ("problem", "extra"),
    [("pendulum", []), ("advection_diffusion", ["--param", "nx=8", "--param", "nt=6"])],
)
def test_plot_data_writes_png(capsys, tmp_path, problem, extra):
    data = tmp_path / "d.npz"
    assert cli(capsys, "generate", problem, "--noise", "0.01", "--out", data, "--n-train", "8",
               "--n-test", "2", "--m", "10", *extra)[0] == 0
    fig = tmp_path / "fig.png"
    rc, _, err = cli(capsys, "plot-data", data, "--out", fig)
    assert rc == 0 and err == ""
    assert fig.stat().st_size > 1000
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(params=METHODS)
def method(request):
    return request.param


def test_train_writes_run_directory(runs, method):
    run = runs(method)
    for name in ("config.json", "history.csv", "posterior.pt", "metrics.json",
                 "query_points.npy"):
        assert (run / name).stat().st_size > 0, name
    rows = (run / "history.csv").read_text().splitlines()
    assert len(rows) == 4 and rows[0].startswith("epoch,")
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3"]
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["method"] == method and config["train"]["epochs"] == 3
    assert config["noise_std"] == 0.01
    metrics = json.loads((run / "metrics.json").read_text())
    assert {"e1", "e2", "e3"} <= metrics.keys()
    assert np.load(run / "query_points.npy").shape == (P, 1)


def test_predict_at_the_runs_query_points(capsys, tmp_path, runs, method, u_file):
    u = new_inputs()
    pred = tmp_path / "pred.npz"
    rc, stdout, _ = cli(capsys, "predict", runs(method), u_file(u), "--out", pred)
    assert rc == 0 and str(pred) in stdout
    with np.load(pred) as z:
        out = dict(z)
    assert_band(out, (len(u), P))
    # Passing the run's own query points explicitly gives the same prediction.
    explicit = tmp_path / "explicit.npz"
    y = np.load(runs(method) / "query_points.npy")
    assert cli(capsys, "predict", runs(method), u_file(u, y=y), "--out", explicit)[0] == 0
    with np.load(explicit) as z:
        np.testing.assert_allclose(z["mean"], out["mean"], rtol=1e-6, atol=1e-9)


def test_predict_levels(capsys, tmp_path, runs, u_file):
    """A wider level gives a wider band; a level outside (0, 1) is refused."""
    u, run = new_inputs(), runs("sgld")
    widths = []
    for level in ("0.5", "0.9"):
        pred = tmp_path / f"pred{level}.npz"
        assert cli(capsys, "predict", run, u_file(u), "--out", pred, "--level", level,
                   "--function-level", level)[0] == 0
        with np.load(pred) as z:
            widths.append(float((z["obs_upper"] - z["obs_lower"]).mean()))
            assert json.loads(str(z["meta"]))["level"] == float(level)
    assert widths[0] < widths[1]
    for flag in ("--level", "--function-level"):
        bad = tmp_path / "bad.npz"
        assert_error(cli(capsys, "predict", run, u_file(u), "--out", bad, flag, "1.5"),
                     flag, "(0, 1)")
        assert not bad.exists()


def test_calibrate_refits_a_finished_run(capsys, tmp_path, runs, data_file):
    """Refitting a run on its own held-out functions gives back what train fitted there:
    the calibration and the novelty score (fitted on the functions trained on, not on the
    held-out ones it is calibrated by)."""
    run = tmp_path / "run"
    shutil.copytree(runs("resgld"), run)
    before = json.loads((run / "metrics.json").read_text())
    novelty = torch.load(run / "posterior.pt", weights_only=True)["novelty"]
    rc, stdout, err = cli(capsys, "calibrate", run, data_file)
    assert rc == 0, err
    after = json.loads((run / "metrics.json").read_text())
    assert json.loads(stdout)["coverage"] == after["coverage"]
    assert after["e2"] == pytest.approx(before["e2"]) and after["swap"] == before["swap"]
    assert after["coverage"] == before["coverage"] and after["novelty"] == before["novelty"]
    refit = torch.load(run / "posterior.pt", weights_only=True)["novelty"]
    for key in novelty:
        assert np.array_equal(np.asarray(refit[key]), np.asarray(novelty[key])), key
    # a run calibrated before the function-level band's confidence was recorded (0.9 then):
    # predict says so in one line until calibrate refits it. The tiny run holds out 2
    # functions, too few for a held-out quantile: its band is the union bound, no confidence.
    u = tmp_path / "u.npz"
    np.savez(u, u=new_inputs(2))
    state = torch.load(run / "posterior.pt", weights_only=True)
    assert state["calibration"]["function_confidence"] is None
    del state["calibration"]["function_confidence"]
    torch.save(state, run / "posterior.pt")
    rc, _, err = cli(capsys, "predict", run, u, "--out", tmp_path / "p.npz")
    assert rc == 0 and f"warning: {run} was calibrated before 2026-11-29" in err
    assert "bdeeponet calibrate" in err
    assert cli(capsys, "calibrate", run, data_file)[0] == 0
    rc, _, err = cli(capsys, "predict", run, u, "--out", tmp_path / "p.npz")
    assert rc == 0 and "calibrated before" not in err
    assert f"warning: {run} holds too few held-out functions (under 10)" in err
    with np.load(tmp_path / "p.npz") as z:
        assert json.loads(str(z["meta"]))["function_confidence"] is None
    # a run without held-out functions cannot be calibrated
    plain = tmp_path / "plain"
    assert cli(capsys, "train", data_file, "--out", plain, "--calibration", "0", *TINY)[0] == 0
    assert_error(cli(capsys, "calibrate", plain, data_file), "calibration = 0")


def test_calibrate_and_resume_refuse_another_data_file(capsys, tmp_path, runs, data_file):
    """A file of the same shapes but other functions (data seed 1) would calibrate the run on
    the wrong held-out functions: calibrate and train --resume refuse it with one line and
    change nothing; runs written before the fingerprint are checked by the file's meta.
    evaluate may score a run on any test set, and warns when it is another problem's."""
    other = tmp_path / "other.npz"
    assert cli(capsys, "generate", "antiderivative", "--noise", "0.01", "--out", other,
               "--n-train", N_TRAIN, "--n-test", N_TEST, "--seed", "1")[0] == 0
    run = tmp_path / "run"
    shutil.copytree(runs("resgld"), run)
    before = {name: (run / name).read_bytes() for name in ("posterior.pt", "metrics.json")}
    assert_error(cli(capsys, "calibrate", run, other), "not the one the run was trained on")
    assert_error(cli(capsys, "train", other, "--method", "resgld", "--out", run, "--resume",
                     *TINY), "not the one the run was trained on")
    assert before == {name: (run / name).read_bytes() for name in before}
    # a run from before the fingerprint: the data files' meta (here: seed 0 against 1)
    conf = json.loads((run / "config.json").read_text())
    del conf["data_sha256"]
    (run / "config.json").write_text(json.dumps(conf))
    assert_error(cli(capsys, "calibrate", run, other), "not the one the run was trained on")
    assert cli(capsys, "calibrate", run, data_file)[0] == 0
    # evaluating on another problem's test set is allowed, with a warning
    pend = tmp_path / "pend.npz"
    assert cli(capsys, "generate", "pendulum", "--noise", "0.01", "--out", pend,
               "--n-train", N_TRAIN, "--n-test", N_TEST)[0] == 0
    rc, out, err = cli(capsys, "evaluate", run, pend)
    assert rc == 0 and "e2" in json.loads(out)
    assert "trained on antiderivative data" in err and "holds pendulum data" in err
    assert "warning" not in cli(capsys, "evaluate", run, other)[2]


def test_predict_at_new_query_points(capsys, tmp_path, runs, method, u_file):
    u = new_inputs(2)
    y = np.linspace(0.0, 1.0, 7)[:, None]
    pred = tmp_path / "pred.npz"
    assert cli(capsys, "predict", runs(method), u_file(u, y=y), "--out", pred)[0] == 0
    with np.load(pred) as z:
        assert_band(dict(z), (2, 7))


def test_predict_flags_novel_inputs_and_warns(capsys, tmp_path, runs, u_file):
    """The tiny run holds out 2 functions: too few to flag at 5% (it says so); at a rate of
    0.5 white-noise inputs, far from the training GRFs, are all flagged with one warning
    line, and a higher rate (a lower threshold) raises every score."""
    run, pred = runs("sgld"), tmp_path / "pred.npz"
    rc, out, err = cli(capsys, "predict", run, u_file(new_inputs(4)), "--out", pred)
    assert rc == 0 and "too few to flag inputs at a 0.05 false-alarm rate" in err
    with np.load(pred) as z:
        assert not z["novel"].any() and json.loads(str(z["meta"]))["false_alarm"] == 0.05
        assert np.isnan(z["novelty"]).all()  # not scored
    rc, out, err = cli(capsys, "predict", run, u_file(new_inputs(4)), "--out", pred,
                       "--false-alarm", "0.5")
    assert rc == 0 and "4 of 4 inputs (100%) are unlike the training inputs" in err
    with np.load(pred) as z:
        assert z["novel"].all()
        loose = z["novelty"]
    assert cli(capsys, "predict", run, u_file(new_inputs(4)), "--out", pred, "--false-alarm",
               "0.7")[0] == 0
    with np.load(pred) as z:
        assert np.all(z["novelty"] > loose)  # a lower threshold: larger ratios
    for bad in ("0", "1", "1.5", "abc"):
        assert_error(cli(capsys, "predict", run, u_file(new_inputs(1)), "--out",
                         tmp_path / "no.npz", "--false-alarm", bad), "false-alarm rate")
    assert not (tmp_path / "no.npz").exists()


def test_evaluate_prints_metrics_json(capsys, runs, method, data_file):
    rc, stdout, err = cli(capsys, "evaluate", runs(method), data_file)
    assert rc == 0, err
    metrics = json.loads(stdout)
    assert {"e1", "e2", "e3"} <= metrics.keys()
    assert all(np.isfinite(metrics[k]) for k in ("e1", "e2", "e3"))
    assert 0.0 <= metrics["e3"] <= 100.0
    # The same test set as in training: evaluate reproduces the run's own metrics.
    saved = json.loads((runs(method) / "metrics.json").read_text())
    for key in ("e1", "e2", "e3"):
        assert metrics[key] == pytest.approx(saved[key], rel=1e-6, abs=1e-9)


def new_inputs(n: int = 3) -> np.ndarray:
    """Input functions the run has never seen (predict needs no training data)."""
    return np.random.default_rng(5).standard_normal((n, M))


BAND_KEYS = ("mean", "std", "lower", "upper", "obs_std", "obs_lower", "obs_upper", "sim_lower",
             "sim_upper")


def assert_band(out: dict, shape: tuple) -> None:
    """The keys of docs/design.md's predict contract, nested as they must be: the observation
    band (σ included) holds the solution band, and the levels are in ``meta``."""
    for key in BAND_KEYS:
        assert out[key].shape == shape, (key, out[key].shape)
        assert np.all(np.isfinite(out[key])), key
    assert np.all(out["std"] >= 0) and np.all(out["obs_std"] >= 0.01 - 1e-12)  # σ = 0.01
    for lo, hi in (("lower", "upper"), ("obs_lower", "obs_upper"), ("sim_lower", "sim_upper")):
        assert np.all(out[lo] <= out["mean"]) and np.all(out["mean"] <= out[hi]), lo
    assert np.all(out["obs_lower"] <= out["lower"]) and np.all(out["upper"] <= out["obs_upper"])
    meta = json.loads(str(out["meta"]))
    assert meta["level"] == 0.95 and meta["function_level"] == 0.95 and meta["noise_std"] == 0.01
    assert meta["false_alarm"] == 0.05
    assert out["novelty"].shape == out["novel"].shape == shape[:1]
    assert out["novel"].dtype == bool


def _options(parser):
    """(command, action) for every option of every command."""
    import argparse

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        for action in p._actions:
            if action.option_strings and action.dest != "help":
                yield name, p, action


def test_every_option_has_help_and_its_default():
    from bdeeponet.cli import build_parser

    parser = build_parser()
    seen = 0
    for name, p, action in _options(parser):
        text = p.formatter_class("x")._get_help_string(action)
        assert action.help, (name, action.dest)
        # by identity: a default of 0 (--seed) must show, though 0 == False
        if action.default is not None and action.default is not False and action.default != []:
            assert "default" in text, (name, action.dest, text)
        for internal in ("DESIGN", "STYLE", "README", "issue"):
            assert internal not in text, (name, action.dest, text)
        seen += 1
    assert seen > 50
    assert "DESIGN" not in parser.format_help()


def test_train_options_come_from_the_config_fields():
    """One flag per TrainConfig field, with the field's help and default, and a flag given
    on the command line reaches the config."""
    from dataclasses import fields

    from bdeeponet.cli import build_parser, train_config
    from bdeeponet.config import TrainConfig

    parser = build_parser()
    train = {a.dest: a for n, p, a in _options(parser) if n == "train"}
    for f in fields(TrainConfig):
        assert f.name in train, f.name
        assert f.metadata["help"] in train[f.name].help
        if f.default is not None:
            assert f"(default: {f.default})" in train[f.name].help
    args = parser.parse_args(["train", "d.npz", "--out", "r", "--warm-lr", "0.01",
                              "--no-standardise", "--noise-std", "auto"])
    config = train_config(args)
    assert (config.warm_lr, config.standardise, config.noise_std) == (0.01, False, "auto")
    assert config.epochs == TrainConfig().epochs


def test_problems_lists_every_problem(capsys):
    from bdeeponet.problems import PROBLEMS

    rc, out, _ = cli(capsys, "problems")
    assert rc == 0
    for name in PROBLEMS:
        assert f"\n{name}\n" in f"\n{out}"
    assert "-(exp(u(x)) s'(x))' = f" in out and "f=1.0" in out and "D=0.01" in out


def test_problem_names_accept_dashes(capsys, tmp_path):
    rc, out, err = cli(capsys, "generate", "diffusion-reaction", "--noise", "0.01", "--n-train",
                       3, "--n-test", 1, "--out", tmp_path / "d.npz")
    assert rc == 0, err
    assert load(tmp_path / "d.npz").meta["problem"] == "diffusion_reaction"


def test_import_then_train(capsys, tmp_path):
    """A MATLAB file made elsewhere trains without a noise sd (estimated from the data)."""
    import scipy.io

    from bdeeponet.grf import rbf_grf
    from bdeeponet.problems import get_problem

    x = np.linspace(0, 1, 101)
    u = rbf_grf(x, 30, np.random.default_rng(0))
    s = get_problem("antiderivative", n_points=101).solve(x, u)
    s = s + 0.01 * np.random.default_rng(1).standard_normal(s.shape)
    scipy.io.savemat(tmp_path / "f.mat", {"a": u, "sol": s})
    rc, out, err = cli(capsys, "import", tmp_path / "f.mat", "--input", "a", "--output", "sol",
                       "--subsample", 2, "--n-test", 5, "--out", tmp_path / "f.npz")
    assert rc == 0, err
    d = load(tmp_path / "f.npz")
    assert d.u_train.shape == (25, 51) and d.s_test.shape == (5, 51) and d.noise_std is None
    np.testing.assert_allclose(d.y[:, 0], x[::2])
    rc, out, err = cli(capsys, "train", tmp_path / "f.npz", "--method", "sgld", "--out",
                       tmp_path / "run", "--calibration", "0.2", *TINY)
    assert rc == 0, err
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["noise_std"] > 0


@pytest.mark.parametrize(("extra", "words"), [
    (["--input", "zz", "--output", "sol"], ["'zz'", "--input"]),
    (["--input", "a", "--output", "sol", "--subsample", "100"], ["--subsample"]),
    (["--input", "a", "--output", "sol", "--subsample", "4"], ["--subsample", "divide"]),
    (["--input", "a", "--output", "sol", "--noise", "-1"], ["--noise"]),
])
def test_import_bad_input_writes_nothing(capsys, tmp_path, extra, words):
    import scipy.io

    scipy.io.savemat(tmp_path / "f.mat", {"a": np.ones((4, 10)), "sol": np.ones((4, 10))})
    assert_error(cli(capsys, "import", tmp_path / "f.mat", *extra, "--out", tmp_path / "o.npz"),
                 *words)
    assert not (tmp_path / "o.npz").exists()


def test_reproduce_refuses_a_problem_without_a_scenario(capsys, tmp_path):
    assert_error(cli(capsys, "reproduce", "--out", tmp_path / "grid", "--problems", "burgers",
                     "--noises", "0.01", "--epochs", "2"), "'burgers' has no scenario")
    assert not (tmp_path / "grid").exists()


def test_reproduce_refuses_a_bad_network_size_before_any_work(capsys, tmp_path):
    assert_error(cli(capsys, "reproduce", "--out", tmp_path / "grid", "--width", "0",
                     "--epochs", "2", "--device", "cpu"), "width must be >= 1, got 0")
    assert not (tmp_path / "grid").exists()


def test_reproduce_names_the_tables_it_wrote(capsys, tmp_path):
    """time_ratio.csv is written only with both resgld and mresgld; it was named always."""
    out = tmp_path / "grid"
    rc, stdout, err = cli(capsys, "reproduce", "--out", out, "--problems", "antiderivative",
                          "--noises", "0.01", "--methods", "linear", "--workers", "1", "--quiet",
                          "--device", "cpu")
    assert rc == 0, err
    line = stdout.strip().splitlines()[-1]
    assert line.startswith("report: ") and "results.csv" in line, line
    assert "time_ratio.csv" not in line and not (out / "time_ratio.csv").exists()
    assert all((out / name).exists() for name in ("results.csv", "calibration.csv"))


@pytest.mark.parametrize(("extra", "words"), [
    (["--workers", "0"], ["workers must be >= 1, got 0"]),
    (["--seeds", "-1"], ["seeds must be integers >= 0", "-1"]),
    (["--methods", "ensemble", "--chains", "1"], ["ensemble needs chains >= 2"]),
], ids=["workers", "seed", "ensemble-of-one"])
def test_reproduce_checks_every_option_before_writing_data(capsys, tmp_path, extra, words):
    assert_error(cli(capsys, "reproduce", "--out", tmp_path / "grid", "--problems",
                     "antiderivative", "--epochs", "2", "--device", "cpu", *extra), *words)
    assert not (tmp_path / "grid").exists()


@pytest.mark.parametrize("flag", [["--relative-noise"], ["--mat73"], ["--m", "7"],
                                  ["--length-scale", "0.1"]])
def test_generate_inputs_refuses_the_options_of_drawn_inputs(capsys, tmp_path, flag):
    picked = tmp_path / "picked.npz"
    np.savez(picked, u=np.zeros((2, 100)))
    out = tmp_path / "g.npz"
    assert_error(cli(capsys, "generate", "antiderivative", "--inputs", picked, "--noise", "0.01",
                     "--out", out, *flag), flag[0], "does not apply with --inputs")
    assert not out.exists()


def _damage(run: Path, how: str) -> None:
    if how == "posterior-empty":
        (run / "posterior.pt").write_bytes(b"")
    elif how == "posterior-text":
        (run / "posterior.pt").write_text("not a posterior\nsecond line\n")
    elif how == "posterior-tensor":
        torch.save(torch.zeros(3), run / "posterior.pt")
    elif how == "samples-width":
        state = torch.load(run / "posterior.pt", weights_only=True)
        state["samples"] = state["samples"][:, :-1]
        torch.save(state, run / "posterior.pt")
    elif how == "metrics-list":
        (run / "metrics.json").write_text("[1]")


@pytest.mark.parametrize("how", ["posterior-empty", "posterior-text", "posterior-tensor",
                                 "samples-width", "metrics-list"])
def test_a_damaged_run_directory_is_one_error_line(capsys, tmp_path, runs, data_file, how):
    run = tmp_path / "run"
    shutil.copytree(runs("sgld"), run)
    _damage(run, how)
    u = tmp_path / "u.npz"
    np.savez(u, u=new_inputs(2))
    for argv in (["predict", run, u, "--out", tmp_path / "p.npz"], ["evaluate", run, data_file],
                 ["calibrate", run, data_file]):
        assert_error(cli(capsys, *argv), str(run), "is not a readable run directory")
    assert not (tmp_path / "p.npz").exists()


@pytest.mark.parametrize("text", ["{}", "[1, 2]", '{"train": {"epochs": "x"}}'])
def test_resume_from_a_damaged_config_is_one_error_line(capsys, tmp_path, data_file, text):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(text)
    assert_error(cli(capsys, "train", data_file, "--out", out, "--resume", *TINY),
                 "config.json", "is not a run's settings")
    assert (out / "config.json").read_text() == text


def test_a_corrupt_compressed_data_file_is_one_error_line(capsys, tmp_path, data_file):
    with np.load(data_file) as z:
        arrays = dict(z)
    packed = tmp_path / "packed.npz"
    np.savez_compressed(packed, **arrays)
    raw = bytearray(packed.read_bytes())
    first = zipfile.ZipFile(packed).infolist()[0]
    at = first.header_offset  # its local header, then its name and extra field, then data
    start = at + 30 + int.from_bytes(raw[at + 26:at + 28], "little") + int.from_bytes(
        raw[at + 28:at + 30], "little")
    raw[start:start + 2] = b"\xff\xff"  # a deflate block of an invalid type
    broken = tmp_path / "broken.npz"
    broken.write_bytes(bytes(raw))
    assert_error(cli(capsys, "train", broken, "--out", tmp_path / "run", *TINY), str(broken),
                 "not a readable .npz file")
    assert not (tmp_path / "run").exists()


def test_sizes_beyond_memory_are_one_error_line(capsys, tmp_path):
    out = tmp_path / "g.npz"
    assert_error(cli(capsys, "generate", "antiderivative", "--noise", "0.01", "--n-train",
                     "100000000000000", "--out", out), "out of memory")
    assert not out.exists()
    run = tmp_path / "run"  # torch reports a failed allocation as a RuntimeError
    assert_error(cli(capsys, "train", data_file_of(tmp_path), "--width", "100000000", "--out",
                     run, "--epochs", "3"), "out of memory")
    assert not run.exists()


@pytest.mark.parametrize("sizes", [("--chains", "10000000"), ("--depth", "10000000")])
def test_a_run_that_cannot_fit_is_refused_before_it_is_built(capsys, tmp_path, sizes):
    """Ten million chains, or layers, spent minutes building before any allocation failed;
    the particles alone need terabytes, so the run is refused at once, naming the sizes."""
    run = tmp_path / "run"
    assert_error(cli(capsys, "train", data_file_of(tmp_path), *sizes, "--out", run,
                     "--epochs", "3"), "out of memory", "GiB", "parameters or more", sizes[0])
    assert not run.exists()


def test_the_memory_floor_passes_what_fits(tmp_path, monkeypatch):
    """The floor counts each particle's parameters three times: an SGLD run of 2 chains of a
    known size passes with that much free, and is refused with a byte less."""
    import importlib

    from bdeeponet.config import TrainConfig
    from bdeeponet.data import load as load_data
    from bdeeponet.train import RunTooLarge, check_memory, model_config

    train_module = importlib.import_module("bdeeponet.train")  # (the package's `train` is the function)
    data = load_data(data_file_of(tmp_path))
    config = TrainConfig(method="sgld", chains=2, width=8, depth=2, trunk_harmonics=0)
    mconf = model_config(config, data, None)
    inner = 8 * 8 + 8 * mconf.latent
    n_params = (data.u_train.shape[1] * 8 + inner) + (1 * 8 + inner)
    floor = 4 * 2 * (3 * n_params + len(data.y) * 8 * 2 + 20 * len(data.y))
    monkeypatch.setattr(train_module, "_free_memory", lambda device: floor)
    check_memory(mconf, config, data, torch.device("cpu"))
    monkeypatch.setattr(train_module, "_free_memory", lambda device: floor - 1)
    with pytest.raises(RunTooLarge, match="2 chains x 1 level of"):
        check_memory(mconf, config, data, torch.device("cpu"))


def data_file_of(tmp_path):
    path = tmp_path / "small.npz"
    assert main(["generate", "antiderivative", "--noise", "0.01", "--n-train", "20", "--n-test",
                 "5", "--out", str(path)]) == 0
    return path


def test_a_reader_that_goes_away_is_not_an_error():
    """``bdeeponet problems | head -1`` printed 'error: [Errno 32] Broken pipe' (exit 2):
    here stdout is a pipe whose reader is closed, so every write fails."""
    code = ("import os, sys\n"
            "r, w = os.pipe(); os.close(r); sys.stdout = os.fdopen(w, 'w', buffering=1)\n"
            "from bdeeponet.cli import main\n"
            "rc = main(['problems'])\n"
            "try:\n    sys.stdout.flush()\nexcept BrokenPipeError:\n    pass\n"
            "sys.stderr.write(f'rc={rc}')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.stderr.strip() == "rc=1", proc.stderr


def test_acquire_never_picks_what_the_data_hold(capsys, tmp_path, runs, data_file):
    """A pool holding the data's own inputs beside new ones: with --exclude DATA none of the
    data's is picked (without it the loop re-picked functions it had merged); --out must be
    an .npz; asking for more than the free inputs is one error line."""
    data = np.load(data_file)
    new = np.random.default_rng(3).standard_normal((6, M))
    pool = tmp_path / "pool.npz"
    np.savez(pool, u=np.vstack([data["u_train"], new, data["u_test"]]))
    picked = tmp_path / "picked.npz"
    rc, _, err = cli(capsys, "acquire", runs("sgld"), pool, "--n", "6", "--exclude",
                     data_file, "--out", picked)
    assert rc == 0, err
    with np.load(picked) as z:
        n_train = len(data["u_train"])
        assert sorted(z["index"]) == list(range(n_train, n_train + 6))
        assert json.loads(str(z["meta"]))["exclude"] == str(data_file)
    assert_error(cli(capsys, "acquire", runs("sgld"), pool, "--n", "7", "--exclude", data_file,
                     "--out", picked), "--n", "[1, 6]", "excluded")
    np.savez(pool, u=data["u_train"])
    assert_error(cli(capsys, "acquire", runs("sgld"), pool, "--n", "1", "--exclude", data_file,
                     "--out", picked), "every input of the pool is excluded")
    assert_error(cli(capsys, "acquire", runs("sgld"), pool, "--n", "2", "--out",
                     tmp_path / "picked.txt"), "--out must end in .npz")
    assert not (tmp_path / "picked.txt").exists()
