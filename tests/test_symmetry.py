"""``--symmetry``: the permutations are the square's 8 rotations and reflections, or a
periodic grid's cyclic shifts; 2-D Darcy flow and periodic Burgers commute with them; each
minibatch function is seen moved by a uniformly drawn element (the same for its input and
its output); and what the group cannot act on is refused."""

import numpy as np
import pytest
import torch
from scipy import stats
from test_cli import assert_error, cli

from bdeeponet import TrainConfig, generate, get_problem
from bdeeponet.data import OperatorData, cyclic_shifts, square_symmetries
from bdeeponet.problems import Burgers, Darcy2D
from bdeeponet.train import _Loop, _run_epoch, setup, symmetry_maps

torch.set_num_threads(1)


def grid(n, x_span=1.0, y_span=1.0):
    xx, yy = np.meshgrid(np.linspace(0, x_span, n), np.linspace(0, y_span, n), indexing="ij")
    return np.column_stack([xx.ravel(), yy.ravel()])


def test_the_permutations_are_the_squares_isometries():
    """Each row moves the points as one of the 8 orthogonal maps that keep the square,
    about its centre; row 0 is the identity, and the 8 rows are distinct."""
    points = grid(6)
    perm = square_symmetries(points)
    assert perm.shape == (8, 36)
    np.testing.assert_array_equal(perm[0], np.arange(36))
    centred = points - 0.5
    isometries = set()
    for row in perm:
        assert sorted(row) == list(range(36))  # a permutation
        # the point that lands on i, as a linear map of i's position
        g, *_ = np.linalg.lstsq(centred, centred[row], rcond=None)
        np.testing.assert_allclose(centred @ g, centred[row], atol=1e-12)
        assert np.allclose(np.abs(g), np.eye(2)) or np.allclose(np.abs(g), np.eye(2)[::-1])
        isometries.add(tuple(np.round(g).astype(int).ravel()))
    assert len(isometries) == 8


def test_grids_that_are_not_a_square_have_none():
    assert square_symmetries(grid(5, y_span=2.0)) is None  # a rectangle
    xx, yy = np.meshgrid(np.linspace(0, 1, 5), np.linspace(0, 1, 4), indexing="ij")
    assert square_symmetries(np.column_stack([xx.ravel(), yy.ravel()])) is None  # 5 x 4
    assert square_symmetries(np.linspace(0, 1, 9)[:, None]) is None  # 1-D
    assert square_symmetries(grid(5)[::-1]) is None  # not row major
    assert square_symmetries(None) is None


def test_darcy2d_commutes_with_the_square():
    """Solving a turned permeability gives the turned solution, to rounding: what makes the
    turned pairs training data of the same operator."""
    n = 17
    a = np.exp(np.random.default_rng(0).standard_normal((1, n * n)))
    perm = square_symmetries(grid(n))
    solve = lambda a: Darcy2D.solve_grid(a.reshape(-1, n, n), 1.0).reshape(len(a), -1)  # noqa: E731
    s = solve(a)
    for row in perm[1:]:
        np.testing.assert_allclose(solve(a[:, row]), s[:, row], rtol=0, atol=1e-12 * np.abs(s).max())


def test_cyclic_shifts_move_a_periodic_grid():
    x = np.arange(8)[:, None] / 8
    perm = cyclic_shifts(x, 1.0)
    assert perm.shape == (8, 8)
    f = np.sin(2 * np.pi * x[:, 0])[None]
    for g in range(8):  # f moved by g steps is f(x + g h)
        np.testing.assert_allclose(f[:, perm[g]], np.sin(2 * np.pi * (x[:, 0] + g / 8))[None],
                                   atol=1e-12)
    assert cyclic_shifts(x, 2.0) is None  # the points do not span the period
    assert cyclic_shifts(x, None) is None  # not declared periodic
    assert cyclic_shifts(np.linspace(0, 1, 8)[:, None], 1.0) is None  # both ends: 7 steps span 1
    assert cyclic_shifts(grid(3), 1.0) is None  # 2-D


def test_periodic_burgers_commutes_with_shifts():
    """Solving a shifted initial condition gives the shifted solution, to rounding."""
    problem = Burgers(n_points=32, solve_points=256, steps=100)
    u = problem.at_sensors(problem.sample_inputs(2, np.random.default_rng(0)))
    perm = cyclic_shifts(problem.sensor_points(), 1.0)
    s = problem.solve(u)
    for g in (1, 5, 31):
        np.testing.assert_allclose(problem.solve(u[:, perm[g]]), s[:, perm[g]], rtol=0,
                                   atol=1e-10 * np.abs(s).max())


@pytest.fixture(scope="module")
def darcy9():
    return generate(get_problem("darcy2d", n_points=9), 0.01, np.random.default_rng(0),
                    n_train=40, n_test=4, relative=True)


class Recorder:
    """A sampler that keeps every batch it is given."""

    def __init__(self):
        self.batches = []

    def step(self, state, energy, batch, gen, index=None):
        self.batches.append((batch, index))
        return {"energy": 0.0}


@pytest.fixture(scope="module")
def burgers16():
    return generate(get_problem("burgers", n_points=16, solve_points=128, steps=50), 0.01,
                    np.random.default_rng(0), n_train=40, n_test=4, relative=True)


@pytest.mark.parametrize("symmetry, chains", [("square", None), ("square", 3), ("shift", None)])
def test_each_function_is_moved_by_a_uniform_random_element(darcy9, burgers16, symmetry, chains):
    data = darcy9 if symmetry == "square" else burgers16
    config = TrainConfig(branch="conv", trunk="pod", latent=8, method="resgld",
                         symmetry=symmetry, batch_size=8, chains=chains)
    run = setup(data, config, 0.01)
    perm_u, perm_s = (p.numpy() for p in run.turns)
    u, s = run.u.numpy(), run.s.numpy()
    recorder, loop = Recorder(), _Loop(None, run.generator.get_state())
    for _ in range(20):
        _run_epoch(loop, recorder, None, (run.u, run.s), run.generator, config,
                   run.chains, run.turns)
    counts = np.zeros(len(perm_u), dtype=int)
    for (ub, sb), index in recorder.batches:
        ub, sb, index = (t.numpy().reshape(-1, t.shape[-1]) for t in (ub, sb, index[..., None]))
        for x, y, i in zip(ub, sb, index[:, 0], strict=True):
            # the noisy targets are generic fields: exactly one element gives each
            g = [k for k in range(len(perm_s)) if np.array_equal(y, s[i, perm_s[k]])]
            assert len(g) == 1
            np.testing.assert_array_equal(x, u[i, perm_u[g[0]]])  # its input by the same
            counts[g[0]] += 1
    assert counts.sum() == 20 * 40 * (chains or 1)
    assert stats.chisquare(counts).pvalue > 1e-4, counts


def test_a_query_square_off_the_sensors_centre_is_refused():
    """Query points on the lower-left quarter of the sensors' square were turned about the
    quarter's centre, the inputs about the square's: the turned pairs were not the
    operator's (targets off by the solution's size). A query square of the same centre is
    turned as its inputs are."""
    n = 17
    sensors = grid(n)
    a = np.exp(np.random.default_rng(0).standard_normal((6, n * n)))
    s = Darcy2D.solve_grid(a.reshape(-1, n, n), 1.0).reshape(len(a), -1)
    for lo, hi, refused in ((0.0, 0.5, True), (0.25, 0.75, False)):
        window = np.flatnonzero(np.all((sensors >= lo - 1e-12) & (sensors <= hi + 1e-12), 1))
        data = OperatorData(a[:4], s[:4, window], a[4:], s[4:, window], sensors[window],
                            sensors=sensors, noise_std=0.01)
        if refused:
            with pytest.raises(ValueError, match="share their centre"):
                symmetry_maps(TrainConfig(symmetry="square", branch="conv"), data)
            continue
        perm_u, perm_s = symmetry_maps(TrainConfig(symmetry="square", branch="conv"), data)
        turned = Darcy2D.solve_grid(a[:, perm_u].reshape(-1, n, n), 1.0).reshape(6, 8, -1)
        np.testing.assert_allclose(turned[..., window], s[:, window][:, perm_s], atol=1e-12)


def test_what_cannot_be_turned_is_refused(darcy9, capsys, tmp_path):
    for flag in ({"symmetry": "square"}, {"branch": "conv"}, {"trunk": "pod"}):
        with pytest.raises(ValueError, match="closed form"):  # the linear baseline has no network
            TrainConfig(method="linear", **flag)
    with pytest.raises(ValueError, match="control variate"):
        TrainConfig(control_variate=True, symmetry="square")
    with pytest.raises(ValueError, match="principal components"):
        setup(darcy9, TrainConfig(branch_pca=4, symmetry="square"), 0.01)
    assert symmetry_maps(TrainConfig(), darcy9) is None
    line = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=30,
                    n_test=2)
    with pytest.raises(ValueError, match="square"):
        symmetry_maps(TrainConfig(symmetry="square"), line)
    with pytest.raises(ValueError, match="periodic"):  # a line, but not declared periodic
        symmetry_maps(TrainConfig(symmetry="shift"), line)
    with pytest.raises(ValueError, match="periodic"):
        symmetry_maps(TrainConfig(symmetry="shift"), darcy9)
    path = tmp_path / "line.npz"
    line.save(path)
    assert_error(cli(capsys, "train", path, "--out", tmp_path / "r", "--symmetry", "square"),
                 "--symmetry square", "sensors")
