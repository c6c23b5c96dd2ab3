"""The Bayesian linear-regression baseline against its closed form and in the CLI."""

import numpy as np
import pytest
from scipy.stats import norm

from bdeeponet import TrainConfig, generate, get_problem, load_run, predict, train
from bdeeponet.data import OperatorData
from bdeeponet.linear import fit_linear


def linear_data(rng, n=400, n_test=200, m=5, p=7, sigma=0.1, prior_sd=1.0):
    """Targets from a linear map drawn from the prior: the model is exactly right."""
    w = prior_sd * rng.standard_normal((m + 1, p))
    u, u_test = rng.standard_normal((n, m)), rng.standard_normal((n_test, m))
    clean = np.hstack([u, np.ones((n, 1))]) @ w
    test = np.hstack([u_test, np.ones((n_test, 1))]) @ w
    return u, clean + sigma * rng.standard_normal(clean.shape), u_test, test


def test_posterior_matches_the_textbook_formula():
    rng = np.random.default_rng(0)
    u, s, _, _ = linear_data(rng)
    post = fit_linear(u, s, np.zeros((7, 1)), noise_std=0.1, prior_std=1.0)
    x = np.hstack([u, np.ones((len(u), 1))])
    cov = np.linalg.inv(x.T @ x / 0.01 + np.eye(6))
    assert np.allclose(post.cov, cov)
    assert np.allclose(post.weights, cov @ x.T @ s / 0.01)


def test_bands_are_calibrated_when_the_model_is_right():
    """Averaged over w drawn from the prior, the clean truth falls in the z-band with the
    nominal probability; tolerance from the binomial standard error over independent draws."""
    rng = np.random.default_rng(1)
    hits, total = 0, 0
    for _ in range(200):
        u, s, u_test, truth = linear_data(rng, n=30, n_test=1, p=1, sigma=0.5)
        post = fit_linear(u, s, np.zeros((1, 1)), noise_std=0.5, prior_std=1.0)
        out = post.predict(u_test, np.zeros((1, 1)), z=norm.ppf(0.95))
        hits += int(((out["raw_lower"].numpy() <= truth) & (truth <= out["raw_upper"].numpy())).sum())
        total += truth.size
    rate = hits / total
    assert abs(rate - 0.9) < 4 * np.sqrt(0.9 * 0.1 / total)


def test_linear_method_trains_predicts_and_refuses_new_points(tmp_path):
    data = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0),
                    n_train=200, n_test=20)
    result = train(data, TrainConfig(method="linear"), out=tmp_path / "run")
    # The anti-derivative is linear in u: the closed form is far better than any DeepONet here.
    assert result.metrics["e2"] < 2.0
    run = load_run(tmp_path / "run")
    out = predict(run, data.u_test[:2], data.y)
    assert out["mean"].shape == (2, data.n_points)
    with pytest.raises(ValueError, match="training query points"):
        predict(run, data.u_test[:2], data.y[:5])


def test_linear_needs_no_model_settings():
    rng = np.random.default_rng(2)
    u, s, u_test, truth = linear_data(rng)
    data = OperatorData(u, s, u_test, truth, np.linspace(0, 1, 7)[:, None], noise_std=0.1)
    m = train(data, TrainConfig(method="linear")).metrics
    assert m["e2"] < 5.0 and 80 < m["e3"] <= 100


def test_the_fit_does_not_depend_on_the_units_of_the_data():
    """``train`` fits the linear baseline on standardised data, as the DeepONets: targets
    1000 + 50 s with σ 50 times larger give 1000 + 50 times the prediction and a band 50
    times wider, the same coverage. In the data's units the prior shrank the intercept
    towards 0: the mean was 1.5 off and the raw band covered 0%."""
    from bdeeponet import TrainConfig, generate, get_problem, predict, train

    data = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=200,
                    n_test=50)
    big = data.__class__(data.u_train, 1000 + 50 * data.s_train, data.u_test,
                         1000 + 50 * data.s_test, data.y, noise_std=0.5)
    small, large = (train(d, TrainConfig(method="linear"), device="cpu") for d in (data, big))
    p, q = (predict(r, data.u_test, data.y) for r in (small, large))
    assert np.allclose(q["mean"], 1000 + 50 * p["mean"], rtol=0, atol=1e-6)
    assert np.allclose(q["std"], 50 * p["std"], rtol=1e-6)
    assert large.metrics["coverage"] == small.metrics["coverage"]
