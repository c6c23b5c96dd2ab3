"""The predictive distribution of several chains (bdeeponet.posterior.pooled_predictive)
against Monte Carlo: chains stuck in different regions, the truth one more such region."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

from bdeeponet.calibration import predictive_quantile
from bdeeponet.posterior import pooled_predictive

LEVELS = (0.5, 0.8, 0.9, 0.95, 0.99)


def _chains(rng, n, chains, draws, between, within):
    """n independent points; each chain's centre ~ N(0, between), its draws add
    N(0, within); the truth is one more centre plus one more draw."""
    centre = np.sqrt(between) * rng.standard_normal((chains + 1, n))
    x = centre[:chains, None] + np.sqrt(within) * rng.standard_normal((chains, draws, n))
    truth = centre[chains] + np.sqrt(within) * rng.standard_normal(n)
    x = torch.from_numpy(x)
    return x.mean(1), (x**2).mean(1), truth


def _coverage(mean, std, dof, truth, level):
    half = predictive_quantile(level, dof.numpy()) * std.numpy()
    return 100 * float(np.mean(np.abs(truth - mean.numpy()) <= half))


@pytest.mark.parametrize("within", [0.0, 1.0])
def test_four_chains_that_have_not_mixed_cover_at_the_nominal_rate(within):
    """Four chains, the spread between them as large as within them or alone: the t band
    covers within 1 point of nominal (2e5 points: binomial SE <= 0.11 points; with only
    between-chain spread the t_3 band is exact, with both Welch-Satterthwaite is an
    approximation), while the Gaussian band of the pooled draws (the control, what a
    single pool of samples gives) covers 82% and 90% at nominal 95%."""
    rng = np.random.default_rng(0)
    draws = 50
    cm, csq, truth = _chains(rng, 200_000, 4, draws, 1.0, within)
    mean, std, dof = pooled_predictive(cm, csq, draws)
    pooled = ((csq.mean(0) - cm.mean(0) ** 2) * (4 * draws / (4 * draws - 1))).sqrt()
    for level in LEVELS:
        got = _coverage(mean, std, dof, truth, level)
        assert abs(got - 100 * level) < 1.0, (level, got)
    control = 100 * float(np.mean(np.abs(truth - mean.numpy()) <= norm.ppf(0.975) * pooled.numpy()))
    assert control < 95 - 4, control  # 82 (between only), 90 (both)


def test_mixed_chains_and_ensembles_are_gaussian():
    """Chains that agree (no spread between them) give the pooled sample spread and an
    infinite dof; so do one chain and chains of one draw each (a deep ensemble)."""
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal((3, 20, 5)))
    mean, std, dof = pooled_predictive(x.mean(1)[:1], (x**2).mean(1)[:1], 20)
    assert torch.isinf(dof).all()
    assert torch.allclose(std, x[0].std(0)) and torch.allclose(mean, x[0].mean(0))
    members = x[:, 0]
    mean, std, dof = pooled_predictive(members, members**2, 1)
    assert torch.isinf(dof).all() and torch.allclose(std, members.std(0))
    same = x.mean(1)[:1].expand(3, 5)
    _, _, dof = pooled_predictive(same, same**2 + 1.0, 20)
    assert torch.isinf(dof).all()


def test_a_posterior_of_several_chains_predicts_the_pooled_t_distribution():
    """``Posterior.predict`` splits its samples into the chains (chain-major) and gives
    :func:`pooled_predictive` of them; its band is trusted by calibration, one chain's and
    MC dropout's are not."""
    from bdeeponet.model import DeepONet, ModelConfig
    from bdeeponet.posterior import Posterior, flatten

    config = ModelConfig(n_sensors=5, dim_y=1, width=8, depth=1, latent=4)
    torch.manual_seed(0)
    vecs = torch.stack([flatten(dict(DeepONet(config).named_parameters())).detach()
                        for _ in range(6)])
    post = Posterior(config, vecs, chains=2)
    u, y = torch.randn(3, 5), torch.linspace(0, 1, 7)[:, None]
    out = post.predict(u, y)
    draws = torch.stack([p.double() for p in post.trajectories(u, y)]).reshape(2, 3, 3, 7)
    mean, std, dof = pooled_predictive(draws.mean(1), (draws**2).mean(1), 3)
    assert torch.allclose(out["mean"], mean) and torch.allclose(out["raw_std"], std, rtol=1e-6)
    assert torch.allclose(out["dof"], dof) and torch.isfinite(dof).all()


def test_std_is_the_calibrated_spread_and_predict_takes_what_train_returns():
    """What a user takes from a prediction gives the calibrated band: mean ± z·std is
    lower/upper at every level (two chains: a Student-t band; a calibrated run), and the
    posterior's own spread carries its name (raw_std). predict takes train's result as it
    takes a loaded run, with the same default device."""
    import inspect

    from scipy.stats import norm

    from bdeeponet import TrainConfig, evaluate, generate, get_problem, predict, train
    from bdeeponet.run import as_run

    torch.set_num_threads(1)
    data = generate(get_problem("antiderivative"), 0.05, np.random.default_rng(0), n_train=60,
                    n_test=5)
    result = train(data, TrainConfig(method="sgld", chains=2, epochs=8, batch_size=20, width=8,
                                     latent=8, calibration=0.2), device="cpu")
    assert as_run(result).posterior is result.posterior
    for level in (0.5, 0.8, 0.95):
        p = predict(result, data.u_test, data.y, level=level, device="cpu")
        z = norm.ppf(0.5 + level / 2)
        np.testing.assert_allclose(p["mean"] - z * p["std"], p["lower"], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(p["mean"] + z * p["std"], p["upper"], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(p["mean"] + z * p["obs_std"], p["obs_upper"], rtol=1e-12,
                                   atol=1e-12)
        assert not np.allclose(p["std"], p["raw_std"])  # calibrated, not the raw spread
    raw = result.posterior.predict(data.u_test, data.y)
    assert {"raw_std", "raw_lower", "raw_upper"} <= set(raw) and "std" not in raw
    assert evaluate(result, data, device="cpu")["e2"] == pytest.approx(result.metrics["e2"])
    defaults = {f: inspect.signature(f).parameters["device"].default
                for f in (train, predict, evaluate)}
    assert set(defaults.values()) == {"auto"}, defaults
    with pytest.raises(TypeError, match="expected a run"):
        predict(object(), data.u_test, data.y)


@pytest.mark.parametrize("branch_grid", [(), (4, 5)])
def test_an_mc_dropout_pass_is_one_network_whatever_shares_its_batch(branch_grid):
    """Each MC-dropout pass thins the network once for every function and query point
    (Gal 2016): predicting a subset of the inputs at a subset of the points gives those
    entries of the whole prediction, to rounding. With a mask per row (and per point) the
    subset's mean moved by about a tenth of the std."""
    from bdeeponet.model import DeepONet, ModelConfig
    from bdeeponet.posterior import Posterior, flatten

    config = ModelConfig(n_sensors=20, dim_y=1, width=16, depth=2, latent=8, dropout=0.3,
                         branch_grid=branch_grid, channels=2)
    torch.manual_seed(0)
    vec = flatten(dict(DeepONet(config).named_parameters())).detach()[None]
    post = Posterior(config, vec, mc_dropout=30)
    u, y = torch.randn(9, 20), torch.linspace(0, 1, 11)[:, None]
    whole = post.predict(u, y, seed=3)
    rows, points = [1, 4, 8], [0, 5, 6, 10]
    part = post.predict(u[rows], y[points], seed=3)
    for key in ("mean", "raw_std"):
        assert torch.allclose(part[key], whole[key][rows][:, points], rtol=1e-5, atol=1e-7), key
    assert float(whole["raw_std"].min()) > 0  # the passes differ


def test_a_shared_conv_mask_is_one_per_location_and_channel_for_every_function():
    """A conv layer's activations are rows of function × location: a pass's shared mask is
    drawn per location and channel, as training draws it, and repeated for each function.
    It was one per channel for all locations, which dropped whole channels: the band of an
    MC-dropout conv run came out 1.7 times wider than its training masks imply."""
    from bdeeponet.model import DeepONet, Dropout, ModelConfig

    drop = Dropout(0.5, group=4)
    drop.generator, drop.shared = torch.Generator().manual_seed(0), True
    mask = drop.mask(torch.ones(3 * 4, 6)).reshape(3, 4, 6)
    assert torch.equal(mask[0], mask[1]) and torch.equal(mask[0], mask[2])
    assert not all(torch.equal(mask[0, 0], mask[0, j]) for j in range(1, 4))
    config = ModelConfig(n_sensors=100, dim_y=1, width=8, latent=4, dropout=0.2,
                         branch_grid=(10, 10), channels=2)
    layers = list(DeepONet(config).branch)
    for i, layer in enumerate(layers):
        if isinstance(layer, Dropout) and hasattr(layers[i - 3], "out_grid"):
            assert layer.group == math.prod(layers[i - 3].out_grid)
