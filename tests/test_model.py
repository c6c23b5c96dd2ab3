"""The DeepONet's hand-written gradient against autograd, and the fast tanh against tanh."""

import pytest
import torch
from torch.func import functional_call

from bdeeponet.energy import GaussianEnergy, autograd_value_and_grad
from bdeeponet.model import DeepONet, ModelConfig, fast_tanh, parameter_groups, set_dropout_generator


def test_fast_tanh_matches_tanh_and_its_derivative():
    x = torch.linspace(-20, 20, 20001, dtype=torch.float64).float().requires_grad_(True)
    h = fast_tanh(x)
    ref = torch.tanh(x.detach().double())
    assert (h.detach().double() - ref).abs().max() < 3e-7
    (g,) = torch.autograd.grad(h.sum(), x)
    assert (g.double() - (1 - ref**2)).abs().max() < 1e-6
    with torch.no_grad():
        assert torch.equal(fast_tanh(x), h.detach())


def _setup(activation="tanh", dropout=0.0, dim_y=2, seed=0):
    torch.manual_seed(seed)
    config = ModelConfig(n_sensors=7, dim_y=dim_y, width=9, depth=2, latent=5,
                         activation=activation, dropout=dropout)
    model = DeepONet(config)
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(6, 7, generator=g)
    y = torch.rand(11, dim_y, generator=g)
    s = torch.randn(6, 11, generator=g)
    # move the weights off their initial values so relu units are mixed and the bias matters
    params = {k: (v.detach() + 0.3 * torch.randn(v.shape, generator=g)).double()
              for k, v in model.named_parameters()}
    model.double()
    return model, params, (u.double(), s.double()), y.double()


@pytest.mark.parametrize("activation", ["tanh", "relu", "silu", "gelu"])
@pytest.mark.parametrize("group", [None, "branch", "trunk"])
def test_hand_written_gradient_equals_autograd(activation, group):
    model, params, batch, y = _setup(activation)
    energy = GaussianEnergy(model, y, n_total=60, noise_std=0.3, prior_std=2.0)
    names = list(params) if group is None else parameter_groups(model)[group]
    v_ref, g_ref = autograd_value_and_grad(energy, params, batch, names)
    v, g = energy.value_and_grad(params, batch, names)
    assert list(g) == names
    assert torch.allclose(v.total, v_ref.total, rtol=1e-12)
    assert torch.allclose(v.terms, v_ref.terms, rtol=1e-12)
    for n in names:
        assert torch.allclose(g[n], g_ref[n], rtol=1e-10, atol=1e-12), n


def test_hand_written_gradient_uses_the_same_dropout_masks():
    model, params, batch, y = _setup(dropout=0.3)
    model.train()
    energy = GaussianEnergy(model, y, n_total=60, noise_std=0.3)
    names = list(params)
    set_dropout_generator(model, torch.Generator().manual_seed(5))
    v_ref, g_ref = autograd_value_and_grad(energy, params, batch, names)
    set_dropout_generator(model, torch.Generator().manual_seed(5))
    v, g = energy.value_and_grad(params, batch, names)
    assert torch.allclose(v.total, v_ref.total, rtol=1e-12)
    for n in names:
        assert torch.allclose(g[n], g_ref[n], rtol=1e-10, atol=1e-12), n
    # and a different mask gives a different gradient: the masks are really applied
    v2, _ = energy.value_and_grad(params, batch, names)
    assert not torch.allclose(v2.total, v.total)


def test_functional_forward_equals_the_module():
    model, params, (u, _), y = _setup()
    model.eval()
    assert torch.allclose(model.functional_forward(params, u, y), functional_call(model, params, (u, y)),
                          rtol=1e-12)
