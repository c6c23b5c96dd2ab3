"""The DeepONet's hand-written gradient against autograd, the fast tanh against tanh, the
stored standardisation and the periodic Fourier features against their equations."""

import json
import math

import numpy as np
import pytest
import torch
from torch.func import functional_call

import bdeeponet.model as model_module
from bdeeponet.energy import GaussianEnergy, autograd_value_and_grad
from bdeeponet.model import (
    DeepONet,
    ModelConfig,
    fast_tanh,
    parameter_groups,
    set_dropout_generator,
    standardisation,
)

torch.set_num_threads(1)

# Standardisation far from the defaults, so that a missing or misplaced factor shows.
STANDARDISED = {"u_shift": 0.7, "u_scale": 2.5, "s_shift": -1.3, "s_scale": 0.2}
VARIANTS = {
    "plain": {},
    "standardised": STANDARDISED,
    "periodic": {**STANDARDISED, "periodic": ((1, 0.5),), "periodic_harmonics": 3},
    "conv1d": {**STANDARDISED, "branch_grid": (11,), "channels": 3},
    "conv2d": {**STANDARDISED, "branch_grid": (9, 7), "channels": 3},
}


def test_fast_tanh_matches_tanh_and_its_derivative():
    x = torch.linspace(-20, 20, 20001, dtype=torch.float64).float().requires_grad_(True)
    h = fast_tanh(x)
    ref = torch.tanh(x.detach().double())
    assert (h.detach().double() - ref).abs().max() < 3e-7
    (g,) = torch.autograd.grad(h.sum(), x)
    assert (g.double() - (1 - ref**2)).abs().max() < 1e-6
    with torch.no_grad():
        assert torch.equal(fast_tanh(x), h.detach())


def _setup(activation="tanh", dropout=0.0, dim_y=2, seed=0, **extra):
    torch.manual_seed(seed)
    m = math.prod(extra.get("branch_grid", (7,)))
    config = ModelConfig(n_sensors=m, dim_y=dim_y, width=9, depth=2, latent=5,
                         activation=activation, dropout=dropout, **extra)
    model = DeepONet(config)
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(6, m, generator=g)
    y = torch.rand(11, dim_y, generator=g)
    s = torch.randn(6, 11, generator=g)
    # move the weights off their initial values so relu units are mixed and the bias matters
    params = {k: (v.detach() + 0.3 * torch.randn(v.shape, generator=g)).double()
              for k, v in model.named_parameters()}
    model.double()
    return model, params, (u.double(), s.double()), y.double()


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("activation", ["tanh", "relu", "silu", "gelu"])
@pytest.mark.parametrize("group", [None, "branch", "trunk"])
def test_hand_written_gradient_equals_autograd(activation, group, variant):
    model, params, batch, y = _setup(activation, **VARIANTS[variant])
    energy = GaussianEnergy(model, y, n_total=60, noise_std=0.3, prior_std=2.0)
    names = list(params) if group is None else parameter_groups(model)[group]
    v_ref, g_ref = autograd_value_and_grad(energy, params, batch, names)
    v, g = energy.value_and_grad(params, batch, names)
    assert list(g) == names
    assert torch.allclose(v.total, v_ref.total, rtol=1e-12)
    assert torch.allclose(v.terms, v_ref.terms, rtol=1e-12)
    for n in names:
        assert torch.allclose(g[n], g_ref[n], rtol=1e-10, atol=1e-12), n


@pytest.mark.parametrize("variant", ["plain", "conv2d"])
def test_hand_written_gradient_uses_the_same_dropout_masks(variant):
    model, params, batch, y = _setup(dropout=0.3, **VARIANTS[variant])
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


def _features_by_hand(y, j, period, harmonics):
    """φ(y) for one periodic column j, written out column by column."""
    cols = [y[:, i] for i in range(y.shape[1]) if i != j]
    for k in range(1, harmonics + 1):
        cols += [torch.cos(2 * math.pi * k * y[:, j] / period),
                 torch.sin(2 * math.pi * k * y[:, j] / period)]
    return torch.stack(cols, dim=1)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_output_is_the_stated_equation(variant):
    """G(u)(y) = s_shift + s_scale (branch((u - u_shift)/u_scale) @ trunk(φ(y))^T + bias),
    with the module's own nets applied to inputs built by hand."""
    model, params, (u, _), y = _setup(**VARIANTS[variant])
    model.load_state_dict(params)
    c = model.config
    phi = _features_by_hand(y, 1, 0.5, 3) if c.periodic else y
    assert model.trunk[0].in_features == phi.shape[1] == (1 + 2 * 3 if c.periodic else 2)
    with torch.no_grad():
        z = model.branch((u - c.u_shift) / c.u_scale) @ model.trunk(phi).T + model.bias
        ref = c.s_shift + c.s_scale * z
        assert torch.allclose(model(u, y), ref, rtol=1e-12, atol=1e-12)
        assert torch.allclose(model.functional_forward(params, u, y), ref, rtol=1e-12, atol=1e-12)
        pred, _ = model.forward_backward(params, u, y, list(params))
        assert torch.allclose(pred, ref, rtol=1e-12, atol=1e-12)


def test_default_standardisation_changes_nothing():
    plain, params, (u, _), y = _setup()
    shifted, _, _, _ = _setup(**STANDARDISED)
    shifted.load_state_dict(params)
    c = shifted.config
    with torch.no_grad():
        ref = plain.functional_forward(params, (u - c.u_shift) / c.u_scale, y)
        got = shifted.functional_forward(params, u, y)
    assert torch.allclose(got, c.s_shift + c.s_scale * ref, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(got, ref)


def test_output_is_periodic_in_the_periodic_coordinate_only():
    model, params, (u, _), y = _setup(periodic=((0, 0.75),), periodic_harmonics=4)
    plain, plain_params, _, _ = _setup()  # the control: no features, not periodic

    def shifted(col, by):
        y2 = y.clone()
        y2[:, col] += by
        return y2

    with torch.no_grad():
        base = model.functional_forward(params, u, y)
        for by in (0.75, -0.75, 3 * 0.75):
            assert torch.allclose(model.functional_forward(params, u, shifted(0, by)), base,
                                  rtol=0, atol=1e-6), by
        assert (model.functional_forward(params, u, shifted(1, 0.75)) - base).abs().max() > 1e-3
        control = plain.functional_forward(plain_params, u, y)
        moved = plain.functional_forward(plain_params, u, shifted(0, 0.75))
        assert (moved - control).abs().max() > 1e-3


def test_features_are_computed_once_per_y_object(monkeypatch):
    model, params, (u, s), y = _setup(**VARIANTS["periodic"])
    calls = []
    real = model_module.fourier_features
    monkeypatch.setattr(model_module, "fourier_features",
                        lambda *a: calls.append(a[0]) or real(*a))
    names = list(params)
    with torch.no_grad():
        first = model.functional_forward(params, u, y)
        model(u, y)
        model.forward_backward(params, u, y, names)[1](torch.ones_like(s))
        model.forward_backward(params, u, y, parameter_groups(model)["branch"])
    assert len(calls) == 1 and calls[0] is y
    y2 = y.clone()
    assert torch.equal(model.functional_forward(params, u, y2), first)
    assert len(calls) == 2
    y2[0, 0] += 0.1  # an in-place change of the same object is seen
    assert not torch.equal(model.functional_forward(params, u, y2), first)
    assert len(calls) == 3


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"u_scale": 0.0}, "u_scale must be a finite number > 0"),
    ({"s_scale": -1.0}, "s_scale must be a finite number > 0"),
    ({"u_scale": float("inf")}, "u_scale"),
    ({"s_shift": float("nan")}, "s_shift must be a finite number"),
    ({"u_shift": "0"}, "u_shift"),
    ({"periodic": ((2, 1.0),)}, "periodic coordinate 2 does not exist: y has 2 columns"),
    ({"periodic": ((-1, 1.0),)}, "periodic coordinate -1 does not exist"),
    ({"periodic": ((0, 1.0), (0, 2.0))}, "periodic coordinate 0 is declared twice"),
    ({"periodic": ((0, 0.0),)}, "periodic coordinate 0 has period 0.0"),
    ({"periodic": ((1, float("inf")),)}, "periodic coordinate 1 has period inf"),
    ({"periodic": ((0.0, 1.0),)}, "must be an integer column index"),
    ({"periodic": (0, 1.0)}, "sequence of \\(coordinate, period\\) pairs"),
    ({"periodic": ((0, 1.0, 2.0),)}, "pairs"),
    ({"periodic_harmonics": 0}, "periodic_harmonics must be >= 1"),
    ({"features": ((2, 1.0),)}, "features coordinate 2 does not exist"),
    ({"features": ((1, 2.0),), "periodic": ((1, 1.0),)}, "features must name non-periodic"),
    ({"branch_grid": (2, 2)}, "branch_grid must be"),
])
def test_model_config_refuses_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        ModelConfig(n_sensors=3, dim_y=2, **kwargs)
    assert "\n" not in str(info.value)


def test_model_config_round_trips_through_json():
    config = ModelConfig(n_sensors=3, dim_y=2, periodic=[[1, 2]], periodic_harmonics=2,
                         **STANDARDISED)
    assert config.periodic == ((1, 2.0),) and isinstance(config.periodic[0][1], float)
    back = ModelConfig(**json.loads(json.dumps(config.to_dict())))
    assert back == config
    assert config.trunk_in_features == 1 + 2 * 2
    config = ModelConfig(n_sensors=6, dim_y=2, features=[[0, 2]], feature_harmonics=3,
                         branch_grid=[2, 3])
    assert ModelConfig(**json.loads(json.dumps(config.to_dict()))) == config
    assert config.trunk_in_features == 2 + 2 * 3 and config.branch_grid == (2, 3)


def test_standardisation_of_a_known_array():
    u = np.array([[1.0, 3.0], [5.0, 7.0]])  # mean 4, population sd sqrt(5)
    s = np.full((3, 2), 2.5)  # constant: its scale becomes 1
    got = standardisation(u, s)
    assert got == {"u_shift": 4.0, "u_scale": pytest.approx(math.sqrt(5.0), rel=1e-15),
                   "s_shift": 2.5, "s_scale": 1.0}
    assert all(type(v) is float for v in got.values())
    assert standardisation(np.full((2, 2), 0.1), u)["u_scale"] == 1.0  # zero up to rounding
    ModelConfig(n_sensors=2, dim_y=1, **got)  # usable as it is


@pytest.mark.parametrize("grid", [(9, 7), (13,)])
def test_a_conv_layer_is_the_convolution(grid):
    """Patches then a linear layer equal torch's own convolution of the grid (zero padding
    1, stride 2); ``Patches.conv`` computes the same, and ``conv_backward`` the gradients that
    autograd takes through the patches and the layer."""
    torch.manual_seed(0)
    h, w = (1, grid[0]) if len(grid) == 1 else grid
    kernel = (1, 3) if len(grid) == 1 else (3, 3)
    patches = model_module.Patches((h, w), 2, kernel, (1, 2) if len(grid) == 1 else (2, 2),
                                   (0, 1) if len(grid) == 1 else (1, 1))
    layer = torch.nn.Linear(patches.out_features, 4).double()
    x = torch.randn(5, h * w * 2, dtype=torch.float64)  # channels last
    out = layer(patches(x)).reshape(5, *patches.out_grid, 4).permute(0, 3, 1, 2)
    weight = layer.weight.reshape(4, 2, *kernel)  # unfold orders a patch channel first
    ref = torch.nn.functional.conv2d(x.reshape(5, h, w, 2).permute(0, 3, 1, 2), weight,
                                     layer.bias, stride=patches.stride, padding=patches.padding)
    assert out.shape == ref.shape and torch.allclose(out, ref, rtol=1e-12, atol=1e-12)
    fused = patches.conv(x, layer.weight, layer.bias)
    assert torch.allclose(fused, layer(patches(x)), rtol=1e-12, atol=1e-12)
    x.requires_grad_(True)
    v = torch.randn(fused.shape, dtype=torch.float64)
    dx_ref, dw_ref = torch.autograd.grad((layer(patches(x)) * v).sum(), [x, layer.weight])
    dx, dw = patches.conv_backward(v, x.detach(), layer.weight.detach(), True)
    assert dx.shape == x.shape and torch.allclose(dx, dx_ref, rtol=1e-12, atol=1e-12)
    assert dw.shape == layer.weight.shape and torch.allclose(dw, dw_ref, rtol=1e-12, atol=1e-12)
    assert patches.conv_backward(v, x.detach(), layer.weight.detach(), False)[0] is None


def test_the_conv_branch_shrinks_the_grid_to_at_most_4_a_side():
    model = DeepONet(ModelConfig(n_sensors=85 * 85, dim_y=2, branch_grid=(85, 85)))
    grids = [m.out_grid for m in model.branch if isinstance(m, model_module.Patches)]
    assert grids == [(29, 29), (15, 15), (8, 8), (4, 4)]  # 85 > 64: the first steps by 3
    widths = [m.out_features for m in model.branch if isinstance(m, torch.nn.Linear)]
    assert widths == [16, 32, 64, 64, 64, 64]
    model = DeepONet(ModelConfig(n_sensors=29 * 29, dim_y=2, branch_grid=(29, 29)))
    grids = [m.out_grid for m in model.branch if isinstance(m, model_module.Patches)]
    assert grids == [(15, 15), (8, 8), (4, 4)]
    model = DeepONet(ModelConfig(n_sensors=1024, dim_y=1, branch_grid=(1024,)))
    first = model.branch[0]
    assert (first.kernel, first.stride, first.out_grid) == ((1, 32), (1, 32), (1, 32))
    with pytest.raises(ValueError, match="branch_grid"):
        ModelConfig(n_sensors=100, dim_y=2, branch_grid=(9, 11))
