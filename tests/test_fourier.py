"""The Fourier neural operator (bdeeponet.networks.fourier) against the truth: a spectral
layer is a multiplier on the retained Fourier modes (exact on single modes), the network
commutes with the shifts of a periodic grid, C chains in one batch are C networks, and a
run trains, saves and predicts with it under every method."""

import math

import numpy as np
import pytest
import torch

from bdeeponet import OperatorData, TrainConfig, load_run, predict, train
from bdeeponet.energy import fan_in_prior
from bdeeponet.networks import FourierConfig, FourierOperator, build_network, network_config, parameter_groups
from bdeeponet.networks.fourier import default_patch, max_modes, mode_index, smooth_size
from bdeeponet.train import fourier_config

torch.set_num_threads(1)


def spectral_only(net: FourierOperator, x: torch.Tensor, layer: int = 0) -> torch.Tensor:
    """The spectral part ``K x`` of one layer on x (1, n, w, *padded)."""
    return net._spectral(x, net.get_parameter(f"layers.{layer}.spectral").detach()[None],
                         net.kept_modes)


def test_smooth_sizes_and_padding():
    assert [smooth_size(n) for n in (1, 7, 29, 31, 33, 94, 97)] == [1, 8, 30, 32, 36, 96, 100]
    assert FourierConfig(grid=(29, 29)).padded == (32, 32)
    assert FourierConfig(grid=(85, 85)).padded == (96, 96)
    assert FourierConfig(grid=(128,), periodic=((0, 1.0),)).padded == (128,)


def test_mode_index_takes_the_lowest_modes_once():
    # a 2-D real transform of an 8 x 8 grid is 8 x 5; 3 modes: k1 in {0, 1, 2, -2, -1}, k2 < 3
    idx = mode_index((8, 8), 3).tolist()
    rows = sorted({i // 5 for i in idx})
    assert rows == [0, 1, 2, 6, 7] and sorted({i % 5 for i in idx}) == [0, 1, 2]
    assert len(idx) == len(set(idx)) == 15
    assert mode_index((16,), 4).tolist() == [0, 1, 2, 3]


def test_a_spectral_layer_multiplies_each_kept_mode_and_drops_the_rest():
    """On a periodic 1-D grid of N points, cos(2π k x) goes to |R_k| cos(2π k x + arg R_k)
    for k < modes (one channel: R_k a complex number) and to 0 for k >= modes."""
    n, modes = 32, 5
    torch.manual_seed(0)
    net = FourierOperator(FourierConfig(grid=(n,), periodic=((0, 1.0),), width=1, modes=modes))
    r = torch.view_as_complex(net.layers[0]["spectral"].detach()[0, 0].contiguous())  # (modes,)
    x = torch.arange(n, dtype=torch.float64) / n
    for k in range(8):
        wave = torch.cos(2 * math.pi * k * x).float()
        out = spectral_only(net, wave.reshape(1, 1, 1, n)).reshape(n).double()
        if k < modes:
            expect = r[k].abs() * torch.cos(2 * math.pi * k * x + r[k].angle())
            if k == 0:  # the mean: only the real part of R_0 survives a real transform
                expect = r[0].real * torch.ones(n, dtype=torch.float64)
        else:
            expect = torch.zeros(n, dtype=torch.float64)
        assert torch.allclose(out, expect, atol=1e-5), k


def test_a_spectral_layer_is_a_circular_convolution_in_2d():
    """K (x ⊛ δ_shift) = (K x) ⊛ δ_shift: it commutes with every cyclic shift of the grid."""
    torch.manual_seed(1)
    net = FourierOperator(FourierConfig(grid=(12, 10), periodic=((0, 1.0), (1, 1.0)), width=3,
                                        modes=4))
    x = torch.randn(1, 2, 3, 12, 10)
    out = spectral_only(net, x)
    moved = spectral_only(net, torch.roll(x, (5, -3), dims=(-2, -1)))
    assert torch.allclose(moved, torch.roll(out, (5, -3), dims=(-2, -1)), atol=1e-5)


def test_the_network_commutes_with_the_shifts_of_a_periodic_grid():
    torch.manual_seed(2)
    c = FourierConfig(grid=(16, 16), periodic=((0, 1.0), (1, 1.0)), width=4, modes=5,
                      projection=8, u_shift=0.3, u_scale=2.0, s_shift=-1.0, s_scale=0.5)
    net = FourierOperator(c)
    u = torch.randn(3, 16, 16)
    out = net(u.reshape(3, -1)).reshape(3, 16, 16)
    moved = net(torch.roll(u, (3, 7), dims=(1, 2)).reshape(3, -1)).reshape(3, 16, 16)
    assert torch.allclose(moved, torch.roll(out, (3, 7), dims=(1, 2)), atol=1e-5)
    # a non-periodic grid reads its coordinates and pads: shifts are not symmetries
    net2 = FourierOperator(FourierConfig(grid=(16, 16), width=4, modes=5, projection=8))
    out2 = net2(u.reshape(3, -1)).reshape(3, 16, 16)
    moved2 = net2(torch.roll(u, (3, 7), dims=(1, 2)).reshape(3, -1)).reshape(3, 16, 16)
    assert not torch.allclose(moved2, torch.roll(out2, (3, 7), dims=(1, 2)), atol=1e-3)


def test_chains_in_one_batch_are_each_chains_network():
    torch.manual_seed(3)
    net = FourierOperator(FourierConfig(grid=(9, 11), width=4, modes=4, projection=8))
    chains = [{n: torch.randn_like(p) * 0.3 for n, p in net.named_parameters()} for _ in range(3)]
    batched = {n: torch.stack([c[n] for c in chains]) for n in chains[0]}
    u = torch.randn(5, 99)
    out = net.functional_forward(batched, u)
    assert out.shape == (3, 5, 99)
    for k, params in enumerate(chains):
        assert torch.allclose(out[k], net.functional_forward(params, u), atol=1e-5)
    # one batch per chain (C, n, m)
    per_chain = torch.randn(3, 5, 99)
    out = net.functional_forward(batched, per_chain)
    assert torch.allclose(out[1], net.functional_forward(chains[1], per_chain[1]), atol=1e-5)


def test_parameter_groups_split_by_depth_and_an_upper_step_skips_the_lower_layers():
    net = FourierOperator(FourierConfig(grid=(8, 8), width=2, depth=4, modes=3, projection=4))
    groups = parameter_groups(net)
    names = [n for n, _ in net.named_parameters()]
    assert sorted(groups["lower"] + groups["upper"]) == sorted(names)
    assert set(groups["lower"]) == {n for n in names if n.startswith(("lift.", "layers.0.",
                                                                       "layers.1."))}
    params = {n: p.detach().clone().requires_grad_(n in groups["upper"])
              for n, p in net.named_parameters()}
    out = net.functional_forward(params, torch.randn(2, 64))
    grads = torch.autograd.grad(out.sum(), [params[n] for n in groups["upper"]])
    assert all(g is not None for g in grads)
    assert all(params[n].grad is None for n in groups["lower"])


def test_prior_is_the_fan_in_rule_of_each_layer():
    net = FourierOperator(FourierConfig(grid=(8,), width=4, modes=3, projection=6))
    stds = fan_in_prior(net, 2.0)
    assert set(stds) == {n for n, _ in net.named_parameters()}
    assert stds["lift.weight"] == stds["lift.bias"] == pytest.approx(2.0 / math.sqrt(2))
    assert stds["layers.0.spectral"] == pytest.approx(2.0 / 2)  # c = 4 inputs per mode
    assert stds["project.1.weight"] == pytest.approx(2.0 / math.sqrt(6))


def test_config_round_trip_and_bad_configs():
    c = FourierConfig(grid=[29, 29], periodic=[[1, 2.0]], width=8, modes=6, dropout=0.1,
                      bounds=[[0, 1], [0, 2]])
    assert network_config(c.to_dict()) == c
    assert isinstance(build_network(c), FourierOperator)
    assert max_modes((29, 29)) == 14 and max_modes((128,)) == 65
    with pytest.raises(ValueError, match="resolves at most 14"):
        FourierConfig(grid=(29, 29), modes=15)
    with pytest.raises(ValueError, match="1-D or 2-D grid"):
        FourierConfig(grid=(4, 4, 4))
    with pytest.raises(ValueError, match="does not exist"):
        FourierConfig(grid=(8,), periodic=((1, 1.0),))
    with pytest.raises(ValueError, match="not such a grid"):
        c.grid_of(np.zeros((29 * 29, 2)))
    assert c.grid_of(c.points()) == (29, 29)


def periodic_data(n_train=40, n_test=10, n=32, seed=0) -> OperatorData:
    """A linear, shift-commuting operator on a periodic grid: a smoothing of u plus its
    square, with 1% noise on the training targets."""
    rng = np.random.default_rng(seed)
    x = np.arange(n) / n
    k = np.fft.rfftfreq(n, 1 / n)

    def draw(count):
        coef = rng.normal(size=(count, k.size)) + 1j * rng.normal(size=(count, k.size))
        u = np.fft.irfft(coef * np.exp(-0.1 * k**2), n=n) * n / 4
        s = np.fft.irfft(np.fft.rfft(u) * np.exp(-0.05 * k**2), n=n) + 0.3 * u**2
        return u, s

    u, s = draw(n_train + n_test)
    noise = 0.01 * s[:n_train].std()
    return OperatorData(u[:n_train], s[:n_train] + noise * rng.normal(size=(n_train, n)),
                        u[n_train:], s[n_train:], x[:, None], x[:, None], noise_std=noise,
                        meta={"periodic": [[0, 1.0]]})


TINY = dict(epochs=6, batch_size=10, channels=4, modes=4, layers=2, width=8,
            network="fourier", calibration=0.25)


@pytest.mark.parametrize("method", ["sgld", "resgld", "mresgld", "adam", "ensemble"])
def test_every_method_trains_saves_and_predicts_a_fourier_network(method, tmp_path):
    data = periodic_data()
    result = train(data, TrainConfig(method=method, **TINY, **({"chains": 2} if method ==
                                                               "ensemble" else {})),
                   out=tmp_path / "run")
    assert np.isfinite(result.metrics["e2"])
    run = load_run(tmp_path / "run")
    assert isinstance(run.posterior.config, FourierConfig)
    out = predict(run, data.u_test, data.y, warn=False)
    again = predict(result, data.u_test, data.y, warn=False)
    for key in ("mean", "std", "obs_lower", "sim_upper"):
        assert out[key].shape == (10, 32)
        np.testing.assert_allclose(out[key], again[key], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="not such a grid"):
        predict(run, data.u_test, data.y[:-1], warn=False)
    with pytest.raises(ValueError, match="must have shape"):  # u on the training grid
        predict(run, data.u_test, data.y[::2], warn=False)


def test_a_fourier_network_learns_the_operator():
    """Adam on 200 functions: the posterior mean's error falls well below the error of
    predicting the training mean (100%) and of the identity map."""
    data = periodic_data(n_train=200, n_test=50)
    result = train(data, TrainConfig(method="ensemble", chains=2, epochs=60, batch_size=20,
                                     channels=8, modes=6, layers=2, width=16,
                                     network="fourier", calibration=0.1))
    identity = 100 * np.mean(np.linalg.norm(data.u_test - data.s_test, axis=1)
                             / np.linalg.norm(data.s_test, axis=1))
    assert result.metrics["e2"] < min(10.0, identity / 4), (result.metrics["e2"], identity)


def test_the_fourier_network_refuses_data_it_cannot_read():
    data = periodic_data()
    scattered = OperatorData(data.u_train, data.s_train, data.u_test, data.s_test,
                             np.sort(np.random.default_rng(0).random((32, 1)), axis=0),
                             data.sensors)
    with pytest.raises(ValueError, match="must be the sensors"):
        train(scattered, TrainConfig(**TINY))
    off_grid = OperatorData(data.u_train, data.s_train, data.u_test, data.s_test, data.y,
                            data.sensors ** 2)
    with pytest.raises(ValueError, match="equispaced 1-D or 2-D grid"):
        train(off_grid, TrainConfig(**TINY))
    wrong_period = OperatorData(data.u_train, data.s_train, data.u_test, data.s_test, data.y,
                                data.sensors, noise_std=data.noise_std,
                                meta={"periodic": [[0, 2.0]]})
    with pytest.raises(ValueError, match="span one period|span 1"):
        train(wrong_period, TrainConfig(**TINY))
    with pytest.raises(ValueError, match="resolves at most"):
        train(data, TrainConfig(**{**TINY, "modes": 20}))
    with pytest.raises(ValueError, match="takes no trunk"):
        TrainConfig(network="fourier", trunk="pod", method="resgld")


def test_the_network_is_chosen_from_the_datas_layout():
    from bdeeponet.networks import choose_network

    periodic = periodic_data()
    assert choose_network(periodic)[0] == "fourier"
    plain = OperatorData(periodic.u_train, periodic.s_train, periodic.u_test, periodic.s_test,
                         periodic.y, periodic.sensors)  # 1-D, not declared periodic
    assert choose_network(plain) == ("deeponet", "the sensors are a 1-D grid of 32 points "
                                     "that the data do not declare periodic")
    other_y = OperatorData(periodic.u_train, periodic.s_train[:, :16], periodic.u_test,
                           periodic.s_test[:, :16], periodic.y[:16], periodic.sensors,
                           meta={"periodic": [[0, 1.0]]})
    assert choose_network(other_y)[0] == "deeponet"
    g = np.stack(np.meshgrid(np.linspace(0, 1, 5), np.linspace(0, 1, 5), indexing="ij"),
                 -1).reshape(-1, 2)
    rng = np.random.default_rng(0)
    field = OperatorData(rng.random((4, 25)), rng.random((4, 25)), rng.random((2, 25)),
                         rng.random((2, 25)), g, g)
    assert choose_network(field) == ("fourier", "input and output are fields on one 5 x 5 grid")
    g85 = np.stack(np.meshgrid(np.linspace(0, 1, 85), np.linspace(0, 1, 85), indexing="ij"),
                   -1).reshape(-1, 2)
    big = OperatorData(rng.random((4, 7225)), rng.random((4, 7225)), rng.random((2, 7225)),
                       rng.random((2, 7225)), g85, g85)
    assert choose_network(big) == ("fourier", "input and output are fields on one 85 x 85 "
                                   "grid, read in patches of 3 x 3 points")
    assert fourier_config(TrainConfig(network="fourier"), big).patch == 3
    assert fourier_config(TrainConfig(network="fourier", patch=1), big).patch == 1


def test_a_network_brings_its_own_defaults_unless_they_are_set():
    assert (TrainConfig().epochs, TrainConfig().batch_size) == (2000, 100)
    fourier = TrainConfig().updated(network="fourier")
    assert (fourier.epochs, fourier.batch_size) == (60, 20)
    assert TrainConfig(epochs=7).updated(network="fourier").epochs == 7
    assert fourier.updated(network="deeponet").epochs == 2000
    assert TrainConfig.from_dict(fourier.to_dict()) == fourier
    with pytest.raises(ValueError, match="unknown network 'fno'"):
        TrainConfig(network="fno")


def test_a_spectral_layer_gives_the_same_field_on_a_finer_periodic_grid():
    """The weights act on modes: on a band-limited input sampled at n and at 3n points of a
    period, K x agrees at the shared points (to rounding)."""
    torch.manual_seed(4)
    coarse = FourierConfig(grid=(16,), periodic=((0, 1.0),), width=2, modes=5)
    net = FourierOperator(coarse)
    weight = net.get_parameter("layers.0.spectral").detach()[None]

    def field(n):
        x = torch.arange(n, dtype=torch.float64) / n
        a = torch.stack([torch.cos(2 * math.pi * x) + 0.5 * torch.sin(6 * math.pi * x),
                         torch.sin(4 * math.pi * x + 0.3)])
        return a.float().reshape(1, 1, 2, n)

    index = mode_index(coarse.padded_for((48,)), coarse.modes)
    fine = net._spectral(field(48), weight, index)
    assert torch.allclose(fine[..., ::3], spectral_only(net, field(16)), atol=1e-5)


def test_the_padding_keeps_its_extent_on_another_grid():
    c = FourierConfig(grid=(29, 29), modes=12)
    assert c.padded_for((85, 85)) == (96, 96) and c.padded_for((57, 57)) == (64, 64)
    periodic = FourierConfig(grid=(32,), periodic=((0, 1.0),), modes=8, bounds=((0, 31 / 32),))
    assert periodic.grid_of(np.arange(128)[:, None] / 128) == (128,)
    with pytest.raises(ValueError, match="resolves at most 5"):
        periodic.grid_of(np.arange(8)[:, None] / 8)


def test_predict_on_a_finer_grid_warns_and_keeps_the_coarse_answer(tmp_path):
    """Trained at 32 points of a period, asked at 64: the prediction at the shared points
    stays close to the coarse one (the nonlinearities' harmonics alias differently), the
    shapes follow the new grid, and a warning names both grids."""
    data = periodic_data()
    train(data, TrainConfig(method="sgld", **TINY), out=tmp_path / "run")
    run = load_run(tmp_path / "run")
    x = np.arange(64) / 64
    u_fine = np.fft.irfft(np.fft.rfft(data.u_test), n=64) * 2  # the same band-limited inputs
    with pytest.warns(UserWarning, match="trained and calibrated on a 32 grid and predicts on 64"):
        fine = predict(run, u_fine, x[:, None])
    coarse = predict(run, data.u_test, data.y, warn=False)
    assert fine["mean"].shape == (10, 64) and fine["novelty"].shape == (10,)
    err = np.linalg.norm(fine["mean"][:, ::2] - coarse["mean"]) / np.linalg.norm(coarse["mean"])
    assert err < 0.05, err


def test_a_fourier_network_on_a_1d_grid_runs_more_epochs_unless_told():
    from bdeeponet.networks import FOURIER_1D_EPOCHS, FOURIER_PATCH_EPOCHS, fit_to_data

    data = periodic_data()
    assert fit_to_data(TrainConfig(network="fourier"), data).epochs == FOURIER_1D_EPOCHS
    assert fit_to_data(TrainConfig(network="fourier", epochs=9), data).epochs == 9
    assert fit_to_data(TrainConfig(), data).epochs == 2000
    g = np.stack(np.meshgrid(np.linspace(0, 1, 5), np.linspace(0, 1, 5), indexing="ij"),
                 -1).reshape(-1, 2)
    rng = np.random.default_rng(0)
    field = OperatorData(rng.random((4, 25)), rng.random((4, 25)), rng.random((2, 25)),
                         rng.random((2, 25)), g, g)
    assert fit_to_data(TrainConfig(network="fourier"), field).epochs == 60
    g = np.stack(np.meshgrid(*[np.linspace(0, 1, 50)] * 2, indexing="ij"), -1).reshape(-1, 2)
    big = OperatorData(rng.random((4, 2500)), rng.random((4, 2500)), rng.random((2, 2500)),
                       rng.random((2, 2500)), g, g)  # read in patches of 2
    assert fit_to_data(TrainConfig(network="fourier"), big).epochs == FOURIER_PATCH_EPOCHS
    assert fit_to_data(TrainConfig(network="fourier", patch=1), big).epochs == 60


def test_patches_are_the_grids_points_as_channels_and_come_back_whole():
    """Patch (a, b) of coarse point (i, j) is the fine point (p i + a - lo, p j + b - lo) of
    the edge-padded grid; the output's patches land back on those points, the padding cut."""
    for grid, p in (((85, 85), 3), ((85, 85), 2), ((13, 10), 4)):
        c = FourierConfig(grid=grid, patch=p, width=2, modes=2, projection=2)
        net = FourierOperator(c)
        (lo0, _), (lo1, _) = c.patch_padding()
        assert c.coarse == tuple(-(-g // p) for g in grid)
        u = torch.randn(1, 3, *grid)
        x = net._patches(u)
        assert x.shape == (1, 3, p * p, *c.coarse)
        for i, j, a, b in ((0, 0, 0, 0), (1, 2, p - 1, 0), (c.coarse[0] - 1, c.coarse[1] - 1,
                                                          p - 1, p - 1)):
            r = min(max(p * i + a - lo0, 0), grid[0] - 1)  # replicated at the edges
            s = min(max(p * j + b - lo1, 0), grid[1] - 1)
            assert x[0, 1, a * p + b, i, j] == u[0, 1, r, s]
        assert torch.equal(net._unpatch(x), u)
    assert FourierConfig(grid=(85, 85), patch=3).patch_padding() == ((1, 1), (1, 1))
    assert [default_patch((g, g), (False, False)) for g in (29, 32, 36, 47, 64, 85, 421)] == [
        1, 1, 1, 2, 2, 3, 14]  # (36: patches of 2 would leave 18 points, 9 modes)
    assert default_patch((85, 85), (False, False), modes=16) == 2
    assert default_patch((64, 64), (True, True)) == 2 and default_patch((100, 100), (True, False)) == 4
    assert default_patch((1024,), (True,)) == 1
    # on a periodic axis the patches tile the grid, and a shift by one patch commutes
    torch.manual_seed(4)
    net = FourierOperator(FourierConfig(grid=(30,), periodic=((0, 1.0),), patch=3, width=4,
                                        modes=4, projection=8))
    u = torch.randn(2, 30)
    assert torch.allclose(net(torch.roll(u, 6, 1)), torch.roll(net(u), 6, 1), atol=1e-5)
    assert not torch.allclose(net(torch.roll(u, 1, 1)), torch.roll(net(u), 1, 1), atol=1e-3)
    with pytest.raises(ValueError, match="must tile the periodic axis 0 of 30"):
        FourierConfig(grid=(30,), periodic=((0, 1.0),), patch=4)
    with pytest.raises(ValueError, match="grid of patches resolves at most"):
        FourierConfig(grid=(85, 85), patch=3, modes=15)


def test_a_network_on_patches_predicts_on_its_own_grid_only():
    c = FourierConfig(grid=(12, 12), patch=2, width=2, modes=3, projection=2)
    assert c.grid_of(c.points()) == (12, 12)
    g = np.stack(np.meshgrid(*[np.linspace(0, 1, 24)] * 2, indexing="ij"), -1).reshape(-1, 2)
    with pytest.raises(ValueError, match="patches of 2 points a side, so it predicts on its "
                                         "training grid only"):
        c.grid_of(g)
    with pytest.raises(ValueError, match="patches of 2 points"):
        FourierOperator(c)(torch.randn(1, 576), torch.tensor(g, dtype=torch.float32))


def test_the_stiffness_reads_a_subset_of_a_large_grids_points():
    """A Fourier network's output is its whole grid: on more than HESSIAN_POINTS points the
    Hessian estimate picks its subset from the output. Every point, in a shuffled order, is
    the same Hessian as the grid read whole."""
    from bdeeponet.energy import GaussianEnergy
    from bdeeponet.samplers.kfac import HESSIAN_POINTS, estimate_kfac, scaled_hessian

    torch.manual_seed(5)
    c = FourierConfig(grid=(40, 40), width=2, modes=3, depth=1, projection=4)
    assert c.n_points > HESSIAN_POINTS
    net = FourierOperator(c)
    g = torch.Generator().manual_seed(0)
    u, s = torch.randn(3, 1600, generator=g), torch.randn(3, 1600, generator=g)
    energy = GaussianEnergy(net, torch.tensor(c.points(), dtype=torch.float32), 30, 0.1)
    params = {n: p.detach().clone() for n, p in net.named_parameters()}
    metric = estimate_kfac(energy, params, [(u, s)], g, samples=2)
    v = {n: torch.randn(p.shape, generator=g, dtype=torch.float64) for n, p in params.items()}
    whole = scaled_hessian(energy, metric, params, [(u, s)])(v)
    shuffled = scaled_hessian(energy, metric, params, [(u, s)], torch.randperm(1600, generator=g))(v)
    for n in params:
        assert torch.allclose(shuffled[n], whole[n], rtol=1e-9, atol=1e-9 * whole[n].abs().max())
