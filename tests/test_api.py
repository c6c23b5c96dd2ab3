"""The Python API as a script or notebook calls it: the caller's grad mode and default
dtype, a directory reused, arguments of the wrong type, tensors, numpy scalars in meta.
Each either works as documented or raises one exception naming the argument."""

import numpy as np
import pytest
import torch

from bdeeponet import OperatorData, TrainConfig, evaluate, generate, get_problem, load_run, train
from bdeeponet.data import DataError, load
from bdeeponet.run import RunError
from bdeeponet.train import TrainingDiverged

torch.set_num_threads(1)
TINY = dict(epochs=4, batch_size=10, width=8, latent=8)


@pytest.fixture(scope="module")
def data():
    return generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=30,
                    n_test=5)


def test_train_ignores_the_callers_grad_mode_and_default_dtype(data):
    """The default sampler's metric needs autograd (it raised under no_grad), and the model
    was built in the caller's default dtype (float64: a dtype clash in the first product).
    Both now give the run a plain call gives, and are left as the caller set them."""
    plain = train(data, TrainConfig(**TINY)).metrics["e2"]
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            e2 = train(data, TrainConfig(**TINY)).metrics["e2"]
            assert not torch.is_grad_enabled()
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert e2 == plain


def test_a_run_over_a_finished_one_never_reads_back_as_it(data, tmp_path):
    """A second run into a finished run's directory that fails left the first one's
    posterior and metrics beside the second's settings, and load_run took them together."""
    out = tmp_path / "run"
    train(data, TrainConfig(**TINY), out=out)
    with pytest.raises(TrainingDiverged):  # plain SGLD at a step of 1e6
        train(data, TrainConfig(**{**TINY, "method": "sgld", "metric": "identity", "lr": 1e6,
                                   "seed": 7}), out=out)
    with pytest.raises(RunError, match="did not finish"):
        load_run(out)
    with pytest.raises(ValueError, match="out must name a directory"):
        train(data, TrainConfig(**TINY), out="")


def test_arguments_of_the_wrong_kind_are_named(data, tmp_path):
    data.save(tmp_path / "d.npz")
    run = train(data, TrainConfig(**TINY))
    with pytest.raises(TypeError, match="data must be an OperatorData"):
        train(str(tmp_path / "d.npz"), TrainConfig(**TINY))
    with pytest.raises(TypeError, match="config must be a TrainConfig"):
        train(data, {"epochs": 4})
    with pytest.raises(TypeError, match="data must be an OperatorData"):
        evaluate(run, str(tmp_path / "d.npz"))
    with pytest.raises(TypeError, match="get_problem"):
        generate("antiderivative", 0.01, np.random.default_rng(0))
    with pytest.raises(TypeError, match="rng must be a numpy Generator"):
        generate(get_problem("antiderivative"), 0.01, 0)
    with pytest.raises(ValueError, match="n_train must be an integer"):
        generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=5.0)
    for seed in (-1, 2**64):
        with pytest.raises(ValueError, match="seed must be in"):
            TrainConfig(seed=seed)


def test_the_posteriors_own_predict_checks_its_inputs(data):
    """``result.posterior.predict`` (the guide's raw predictive) passed its arrays to torch
    unchecked: reversed rows raised torch's stride error, y of shape (P,) an IndexError,
    a wrong sensor count a matmul error. Tensors that require grad are taken as values."""
    post = train(data, TrainConfig(**TINY)).posterior
    u, y = data.u_test, data.y
    # (equal to float32 rounding: a matrix product may block reversed rows differently)
    ref = post.predict(u, y)["mean"].numpy()[::-1]
    np.testing.assert_allclose(post.predict(u[::-1], y)["mean"].numpy(), ref, rtol=0,
                               atol=1e-5 * np.abs(ref).max())
    with pytest.raises(ValueError, match="'y' must have shape"):
        post.predict(u, y[:, 0])
    with pytest.raises(ValueError, match="'u' must have shape"):
        post.predict(u[:, :50], y)
    with pytest.raises(ValueError, match="NaN"):
        post.predict(np.full_like(u, np.nan), y)
    grad = torch.tensor(u, requires_grad=True)
    np.testing.assert_array_equal(post.predict(grad, y)["mean"].numpy(),
                                  post.predict(u, y)["mean"].numpy())


def test_meta_with_numpy_numbers_saves_and_other_objects_are_refused(data, tmp_path):
    """numpy numbers in meta passed the checks and then failed save() with a JSON
    TypeError; they are now the plain numbers they hold, and what JSON cannot hold is a
    DataError at construction."""
    keep = dict(u_train=data.u_train, s_train=data.s_train, u_test=data.u_test,
                s_test=data.s_test, y=data.y, noise_std=0.01)
    made = OperatorData(**keep, meta={"periodic": [[np.int64(0), np.float32(1.0)]],
                                      "k": np.arange(3)})
    made.save(tmp_path / "m.npz")
    assert load(tmp_path / "m.npz").meta == {"periodic": [[0, 1.0]], "k": [0, 1, 2]}
    with pytest.raises(DataError, match="'meta' must be JSON-serialisable"):
        OperatorData(**keep, meta={"when": object()})
    grad = torch.tensor(data.u_train, requires_grad=True)
    assert np.array_equal(OperatorData(**{**keep, "u_train": grad}).u_train, data.u_train)


def test_train_warns_from_python_as_the_command_line_does(data):
    """The command line printed the run's warnings (R-hat, the damping, the swaps, the
    calibration); from Python there were none. They are now RunWarnings, the same lines as
    metrics["warnings"], which the command line prints."""
    import warnings

    from bdeeponet.advice import RunWarning, run_warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(data, TrainConfig(**TINY, chains=2))
    issued = [str(w.message) for w in caught if issubclass(w.category, RunWarning)]
    assert issued == result.metrics["warnings"] and issued  # a 4-epoch run is not converged
    config = TrainConfig(**TINY)
    assert run_warnings({"convergence": {"rhat": 1.005}}, config, 4) == []
    assert "the 4 chains disagree" in run_warnings({"convergence": {"rhat": 1.5}}, config, 4)[0]


def test_predict_warns_from_python_as_the_command_line_does(tmp_path):
    """``predict``'s warnings (inputs unlike the training ones, query points beyond the
    training range) were printed by the command line alone; from Python a band that may
    not hold now says so too. Inputs like the training ones at the training points: none."""
    import warnings

    from bdeeponet import predict
    from bdeeponet.advice import RunWarning

    data = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(1),
                    n_train=250, n_test=5)  # 25 held out: enough to flag at 5%
    train(data, TrainConfig(**TINY), out=tmp_path / "run")
    run = load_run(tmp_path / "run")

    def issued(u, y):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = predict(run, u, y)
        return out, [str(w.message) for w in caught if issubclass(w.category, RunWarning)]

    _, none = issued(data.u_test[:2], data.y)
    assert none == []
    out, lines = issued(np.vstack([data.u_test[:1], 50 * data.u_test[1:2]]), 2 * data.y)
    assert out["novel"].tolist() == [False, True]
    assert any(line.startswith("1 of 2 inputs (50%) are unlike the training inputs")
               for line in lines), lines
    assert any("query points lie outside the training points' range" in line
               for line in lines), lines


def test_the_sampling_phase_is_timed_apart(data):
    """timing.json's sampling_sec_per_iter covers the epochs after burn-in alone."""
    result = train(data, TrainConfig(**TINY))
    timing, config = result.timing, TrainConfig(**TINY)
    steps = timing["n_iters"] // config.epochs
    assert timing["sampling_iters"] == (config.epochs - config.burn_in_epochs) * steps > 0
    assert timing["sampling_sec_per_iter"] > 0
