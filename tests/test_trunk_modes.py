"""A fixed trunk (``--trunk pod``): the training outputs' mean and principal modes, where
they are known, the model that reads them, and a run that uses them end to end."""

import numpy as np
import pytest
import torch

from bdeeponet import TrainConfig, generate, get_problem, load_run, predict, train
from bdeeponet.encoder import fit_modes
from bdeeponet.model import DeepONet, ModelConfig

torch.set_num_threads(1)


def outputs(n=50, p=40, k=5, seed=0):
    """n functions of rank k around a mean, at p points of [0, 1]."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, p)[:, None]
    basis = np.cos(np.pi * np.arange(1, k + 1)[:, None] * y.T)  # (k, p)
    return 2.0 + y.T ** 2 + rng.standard_normal((n, k)) @ basis, y


def test_the_basis_is_the_mean_and_the_modes_scaled_by_their_coefficients_sd():
    s, y = outputs()
    shift, scale = 1.5, 0.5
    modes = fit_modes(s, y, 5, shift, scale)
    z = (s - shift) / scale
    mean, v = modes.values[:, 0], modes.values[:, 1:]
    np.testing.assert_allclose(mean, z.mean(0), atol=1e-12)
    # the 5 modes span the centred outputs (rank 5), and the coefficients of the centred
    # outputs on them (least squares) have unit variance and no correlation
    coef, *_ = np.linalg.lstsq(v, (z - mean).T, rcond=None)
    np.testing.assert_allclose(v @ coef, (z - mean).T, atol=1e-9)
    np.testing.assert_allclose(np.cov(coef, bias=True), np.eye(5), atol=1e-9)


def test_the_basis_is_looked_up_at_the_training_points_only():
    s, y = outputs()
    modes = fit_modes(s, y, 3)
    order = np.array([7, 0, 39, 7])
    out = modes(y[order])
    np.testing.assert_array_equal(out[:, :1], y[order])
    np.testing.assert_array_equal(out[:, 1:], modes.values[order])
    t = modes(torch.tensor(y[order], dtype=torch.float32))  # single precision finds them too
    assert t.dtype == torch.float32 and t.shape == (4, 5)
    np.testing.assert_allclose(t[:, 1:].numpy(), modes.values[order], rtol=1e-6)
    with pytest.raises(ValueError, match="2 of the 3 points"):
        modes(np.array([[0.5 / 39], [0.0], [2.0]]))


@pytest.mark.parametrize("count, word", [(0, "from 1 to 40"), (41, "from 1 to 40"),
                                         (8, "which have 5")])
def test_bad_basis_sizes(count, word):
    s, y = outputs()
    with pytest.raises(ValueError, match=word):
        fit_modes(s, y, count)


def test_a_fixed_trunk_has_no_parameters_and_its_gradient_is_autograd_s():
    config = ModelConfig(n_sensors=6, dim_y=1 + 1 + 4, width=8, latent=4, fixed_trunk=True,
                         s_shift=0.3, s_scale=2.0)
    torch.manual_seed(0)
    model = DeepONet(config)
    assert not [n for n, _ in model.named_parameters() if n.startswith("trunk")]
    u, y = torch.randn(5, 6), torch.randn(9, 6)
    # the mean column is added as it is: the output at zero branch weights is shift + scale mean
    zero = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    torch.testing.assert_close(model.functional_forward(zero, u, y)[0], 0.3 + 2.0 * y[:, 1])
    with torch.no_grad():
        torch.testing.assert_close(model(u, y), model.functional_forward(
            dict(model.named_parameters()), u, y))
    params = {n: p.detach().clone().requires_grad_() for n, p in model.named_parameters()}
    for batch in (None, 3):  # one chain, and three chains in a batch
        ps = params if batch is None else {
            n: (p.detach()[None] + 0.1 * torch.randn(batch, *p.shape)).requires_grad_()
            for n, p in params.items()}
        pred, backward = model.forward_backward(ps, u, y, list(ps))
        dout = torch.randn_like(pred)
        mine = backward(dout)
        ref = torch.autograd.grad((model.functional_forward(ps, u, y) * dout).sum(), list(ps.values()))
        for (name, g), r in zip(mine.items(), ref, strict=True):
            torch.testing.assert_close(g, r, msg=name)


def test_a_sampler_that_trains_the_nets_in_turn_refuses_a_fixed_trunk():
    with pytest.raises(ValueError, match="resgld"):
        TrainConfig(method="mresgld", trunk="pod")
    with pytest.raises(ValueError, match="unknown trunk"):
        TrainConfig(trunk="fixed")


def test_run_with_a_pod_trunk_predicts_at_its_query_points(tmp_path):
    """The reloaded run predicts what the trained one did, at the training query points in
    any order, and refuses other points."""
    data = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=40,
                    n_test=8)
    config = TrainConfig(method="sgld", epochs=6, batch_size=10, width=8, latent=6,
                         trunk="pod", calibration=0.2)
    result = train(data, config, out=tmp_path / "run", device="cpu")
    assert result.posterior.config.dim_y == 1 + 1 + 6 and result.posterior.dim_y == 1
    run = load_run(tmp_path / "run")
    direct = result.posterior.predict(data.u_test, data.y)
    loaded = predict(run, data.u_test, data.y)
    np.testing.assert_allclose(loaded["mean"], direct["mean"].numpy(), rtol=1e-6, atol=1e-9)
    back = predict(run, data.u_test, data.y[::-1])  # (float32 sums in another order: 1e-6)
    np.testing.assert_allclose(back["mean"], loaded["mean"][:, ::-1], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="training query points"):
        predict(run, data.u_test, data.y + 1e-3)
