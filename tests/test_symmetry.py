"""``--symmetry square``: the 8 permutations are the square's rotations and reflections,
2-D Darcy flow commutes with them, each minibatch function is seen turned by a uniformly
drawn one (the same for its input and its output), and what cannot be turned is refused."""

import numpy as np
import pytest
import torch
from scipy import stats
from test_cli import assert_error, cli

from bdeeponet import TrainConfig, generate, get_problem
from bdeeponet.data import square_symmetries
from bdeeponet.problems import Darcy2D
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


@pytest.mark.parametrize("chains", [None, 3])
def test_each_function_is_turned_by_a_uniform_random_element(darcy9, chains):
    config = TrainConfig(branch="conv", trunk="pod", latent=8, method="resgld",
                         symmetry="square", batch_size=8, chains=chains)
    run = setup(darcy9, config, 0.01)
    perm_u, perm_s = (p.numpy() for p in run.turns)
    u, s = run.u.numpy(), run.s.numpy()
    recorder, loop = Recorder(), _Loop(None, run.generator.get_state())
    for _ in range(20):
        _run_epoch(loop, recorder, None, (run.u, run.s), run.generator, config,
                   run.chains, run.turns)
    counts = np.zeros(8, dtype=int)
    for (ub, sb), index in recorder.batches:
        ub, sb, index = (t.numpy().reshape(-1, t.shape[-1]) for t in (ub, sb, index[..., None]))
        for x, y, i in zip(ub, sb, index[:, 0], strict=True):
            # the noisy targets are generic fields: exactly one element gives each
            g = [k for k in range(8) if np.array_equal(y, s[i, perm_s[k]])]
            assert len(g) == 1
            np.testing.assert_array_equal(x, u[i, perm_u[g[0]]])  # its input by the same
            counts[g[0]] += 1
    assert counts.sum() == 20 * 40 * (chains or 1)
    assert stats.chisquare(counts).pvalue > 1e-4, counts


def test_what_cannot_be_turned_is_refused(darcy9, capsys, tmp_path):
    with pytest.raises(ValueError, match="closed form"):
        TrainConfig(method="linear", symmetry="square")
    with pytest.raises(ValueError, match="control variate"):
        TrainConfig(control_variate=True, symmetry="square")
    with pytest.raises(ValueError, match="principal components"):
        setup(darcy9, TrainConfig(branch_pca=4, symmetry="square"), 0.01)
    assert symmetry_maps(TrainConfig(), darcy9) is None
    line = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=30,
                    n_test=2)
    with pytest.raises(ValueError, match="square"):
        symmetry_maps(TrainConfig(symmetry="square"), line)
    path = tmp_path / "line.npz"
    line.save(path)
    assert_error(cli(capsys, "train", path, "--out", tmp_path / "r", "--symmetry", "square"),
                 "--symmetry square", "sensors")
