"""The conv branch and the trunk's Fourier features as a run gets them: the grid the
sensors lie on, the command line's defaults, a conv-branch run end to end (the Kronecker
metric covers its convolutions, the reloaded run predicts what the trained one did)."""

import numpy as np
import pytest
import torch
from test_cli import assert_error, cli

from bdeeponet import TrainConfig, generate, get_problem, load_run, predict, train
from bdeeponet.cli import build_parser, train_config
from bdeeponet.data import sensor_grid
from bdeeponet.model import DeepONet
from bdeeponet.train import branch_grid, model_config, trunk_features

torch.set_num_threads(1)


def grid2d(h, w):
    xx, yy = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 2, w), indexing="ij")
    return np.column_stack([xx.ravel(), yy.ravel()])


def test_sensor_grid():
    assert sensor_grid(grid2d(5, 3)) == (5, 3)
    assert sensor_grid(np.linspace(0, 1, 11)[:, None]) == (11,)
    assert sensor_grid(None) is None
    assert sensor_grid(grid2d(5, 3)[::-1]) is None  # not row major
    assert sensor_grid(grid2d(5, 3)[np.r_[1, 0, 2:15]]) is None  # shuffled
    assert sensor_grid(grid2d(5, 3)[:-1]) is None  # a point missing
    assert sensor_grid(np.array([0.0, 0.1, 0.3, 0.4])[:, None]) is None  # not equispaced
    assert sensor_grid(np.random.default_rng(0).random((8, 3))) is None


def test_the_command_line_starts_from_the_defaults():
    """A flag not given keeps the field's default (a key missing from a saved run's config
    means the run predates it, but a flag not given does not)."""
    config = train_config(build_parser().parse_args(["train", "data.npz", "--out", "r"]))
    assert config == TrainConfig()
    assert config.branch == "mlp" and config.branch_pca is None


@pytest.fixture(scope="module")
def darcy17():
    return generate(get_problem("darcy2d", n_points=17), 0.01, np.random.default_rng(0),
                    n_train=30, n_test=6, relative=True)


def test_which_branch(darcy17):
    assert darcy17.n_sensors == 289
    assert branch_grid(TrainConfig(), darcy17) == ()
    assert branch_grid(TrainConfig(branch="conv"), darcy17) == (17, 17)
    line = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=5,
                    n_test=2, m=300)
    assert branch_grid(TrainConfig(branch="conv"), line) == (300,)
    with pytest.raises(ValueError, match="branch_pca"):
        TrainConfig(branch="conv", branch_pca=4)


def test_trunk_features_span_each_coordinates_range(darcy17):
    assert trunk_features(TrainConfig(trunk_harmonics=0), darcy17) == ()
    assert trunk_features(TrainConfig(), darcy17) == ((0, 2.0), (1, 2.0))  # default K = 8
    assert model_config(TrainConfig(), darcy17).trunk_in_features == 2 + 2 * 8 * 2
    # a run written before the features keeps the coordinates alone
    assert TrainConfig.from_dict({"method": "sgld"}).trunk_harmonics == 0
    assert trunk_features(TrainConfig(trunk_harmonics=3), darcy17) == ((0, 2.0), (1, 2.0))
    mconf = model_config(TrainConfig(trunk_harmonics=3), darcy17)
    assert mconf.trunk_in_features == 2 + 2 * 3 * 2
    y = torch.tensor(darcy17.y)
    phi = DeepONet(mconf).trunk_input(y)
    k = torch.arange(1, 4, dtype=torch.float64)
    want = torch.stack([torch.cos(torch.pi * k * y[:, 1, None]),
                        torch.sin(torch.pi * k * y[:, 1, None])], dim=2).flatten(1)
    assert torch.allclose(phi[:, :2].double(), y) and torch.allclose(phi[:, 8:].double(), want)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="trunk_harmonics"):
            TrainConfig(trunk_harmonics=bad)
    periodic = generate(get_problem("burgers", n_points=16), 0.01, np.random.default_rng(0),
                        n_train=4, n_test=1)
    assert trunk_features(TrainConfig(trunk_harmonics=3), periodic) == ()  # x is periodic


def test_a_conv_run_end_to_end(darcy17, tmp_path):
    config = TrainConfig(method="mresgld", epochs=4, batch_size=10, width=8, latent=8,
                         branch="conv", channels=2, calibration=0.2, trunk_harmonics=2)
    result = train(darcy17, config, out=tmp_path / "run", device="cpu")
    post = result.posterior
    assert post.encoder is None and post.config.branch_grid == (17, 17)
    assert "branch_pca" not in result.metrics
    run = load_run(tmp_path / "run")
    direct = post.predict(darcy17.u_test, darcy17.y)
    loaded = predict(run, darcy17.u_test, darcy17.y)
    np.testing.assert_allclose(loaded["mean"], direct["mean"].numpy(), rtol=1e-6, atol=1e-9)
    assert np.isfinite(loaded["std"]).all()


def test_the_kronecker_metric_covers_the_convolutions(darcy17):
    from bdeeponet.samplers.kfac import estimate_kfac
    from bdeeponet.train import setup

    run = setup(darcy17, TrainConfig(method="sgld", width=8, latent=8, branch="conv", channels=2),
                0.01)
    params = {n: p.detach() for n, p in run.model.named_parameters()}
    metric = estimate_kfac(run.energy, params, [(run.u[:10], run.s[:10])], run.generator, samples=2)
    blocks = {b.weight: b for b in metric.blocks}
    conv = blocks["branch.1.weight"]  # the first convolution: 3 x 3 patches of one channel
    assert conv.qa.shape == (10, 10) and conv.qg.shape == (2, 2)
    assert set(metric.diag) == {"bias"}  # every other tensor is in a Kronecker block
    assert len(blocks) == sum(isinstance(m, torch.nn.Linear) for m in run.model.modules())


def test_a_conv_branch_without_a_grid_is_one_error_line(capsys, tmp_path):
    data = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=20,
                    n_test=2)
    path = tmp_path / "d.npz"
    data = data.__class__(**{**data.__dict__, "sensors": None})
    data.save(path)
    assert_error(cli(capsys, "train", path, "--branch", "conv", "--out", tmp_path / "r",
                     "--epochs", "2", "--quiet"), "conv", "grid")
    assert not (tmp_path / "r").exists()
