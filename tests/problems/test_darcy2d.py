"""2-D Darcy flow: the finite-volume scheme against a manufactured solution (measured order),
exactness where the harmonic mean is exact, and the benchmark's input distribution."""

import numpy as np
import pytest

from bdeeponet.problems import Darcy2D


def manufactured(big):
    """a = 2 + sin(2πx) cos(3y), s = sin(πx) sin(πy) e^x, f = -∇·(a ∇s), on big² nodes."""
    g = np.linspace(0, 1, big)
    x, y = np.meshgrid(g, g, indexing="ij")
    a = 2 + np.sin(2 * np.pi * x) * np.cos(3 * y)
    a_x, a_y = 2 * np.pi * np.cos(2 * np.pi * x) * np.cos(3 * y), -3 * np.sin(2 * np.pi * x) * np.sin(3 * y)
    s = np.sin(np.pi * x) * np.sin(np.pi * y) * np.exp(x)
    s_x = np.pi * np.cos(np.pi * x) * np.sin(np.pi * y) * np.exp(x) + s
    s_y = np.pi * np.sin(np.pi * x) * np.cos(np.pi * y) * np.exp(x)
    s_xx = -np.pi**2 * s + 2 * np.pi * np.cos(np.pi * x) * np.sin(np.pi * y) * np.exp(x) + s
    s_yy = -np.pi**2 * s
    f = -(a_x * s_x + a * s_xx + a_y * s_y + a * s_yy)
    return a, f, s


def test_second_order_on_a_manufactured_solution():
    sizes = np.array([17, 33, 65, 129])
    errors = []
    for big in sizes:
        a, f, s = manufactured(big)
        errors.append(np.abs(Darcy2D.solve_grid(a[None], f[None])[0] - s).max())
    order = -np.polyfit(np.log(sizes - 1), np.log(errors), 1)[0]
    assert 1.9 < order < 2.1, (order, errors)


def test_discrete_conservation_across_a_jump():
    """With a two-valued a (12 | 3, the jump between two nodes) and f = 1, each interior
    node's fluxes through its four faces balance its source h² to rounding; s > 0 inside,
    0 on the boundary."""
    big = 21
    g = np.linspace(0, 1, big)
    a = np.where(g[:, None] < 0.52, 12.0, 3.0) * np.ones((1, big))
    s = Darcy2D.solve_grid(a[None], 1.0)[0]
    h = 1 / (big - 1)
    ax = 2 * a[1:] * a[:-1] / (a[1:] + a[:-1])
    ay = 2 * a[:, 1:] * a[:, :-1] / (a[:, 1:] + a[:, :-1])
    flux_x = ax * (s[:-1] - s[1:])  # out of node i through face i+1/2 (times h / h)
    flux_y = ay * (s[:, :-1] - s[:, 1:])
    net = flux_x[1:, 1:-1] - flux_x[:-1, 1:-1] + flux_y[1:-1, 1:] - flux_y[1:-1, :-1]
    np.testing.assert_allclose(net, h * h, rtol=1e-9)  # every interior node's balance
    assert np.all(s[1:-1, 1:-1] > 0) and np.all(s[[0, -1]] == 0) and np.all(s[:, [0, -1]] == 0)


def test_symmetry_of_the_solution():
    """a symmetric under x -> 1 - x gives s with the same symmetry (to solver rounding)."""
    problem = Darcy2D(n_points=17, refine=2)
    a = problem.sample_inputs(2, np.random.default_rng(0))
    a = np.concatenate([a[:, : a.shape[1] // 2 + 1], a[:, : a.shape[1] // 2][:, ::-1]], axis=1)
    s = Darcy2D.solve_grid(a, 1.0)
    np.testing.assert_allclose(s, s[:, ::-1], atol=1e-14)


def test_inputs_are_two_valued_and_balanced():
    """a takes 12 and 3 only; ψ is symmetric about 0, so each value covers half the square
    on average (4000 draws of a 9-point grid; tolerance from the draws' own spread)."""
    problem = Darcy2D(n_points=9, refine=1)
    a = problem.sample_inputs(4000, np.random.default_rng(2))
    assert set(np.unique(a)) == {3.0, 12.0}
    high = (a == 12.0).mean(axis=(1, 2))
    assert abs(high.mean() - 0.5) < 5 * high.std() / np.sqrt(high.size)


def test_draw_subsamples_the_solve_grid():
    problem = Darcy2D(n_points=9, refine=3)
    rng = np.random.default_rng(4)
    u, s = problem.draw(3, rng)
    assert u.shape == s.shape == (3, 81) and problem.sensor_points().shape == (81, 2)
    a = problem.sample_inputs(3, np.random.default_rng(4))
    np.testing.assert_array_equal(u, a[:, ::3, ::3].reshape(3, -1))
    np.testing.assert_allclose(s, Darcy2D.solve_grid(a, 1.0)[:, ::3, ::3].reshape(3, -1))
    # sensors in C order, x slowest: row 1 is (0, 1/8)
    np.testing.assert_allclose(problem.sensor_points()[1], [0.0, 0.125])


def test_solve_given_inputs():
    problem = Darcy2D(n_points=9, refine=1)
    u, s = problem.draw(2, np.random.default_rng(5))
    np.testing.assert_allclose(problem.solve(u), s)
    with pytest.raises(ValueError, match="refine=1"):
        Darcy2D(n_points=9, refine=2).solve(u)
    with pytest.raises(ValueError, match="> 0"):
        problem.solve(-u)


@pytest.mark.parametrize("params, word", [
    (dict(n_points=3, refine=1), "cannot resolve"), (dict(a_low=0.0), "a_low"),
    (dict(refine=0), "refine"),
])
def test_bad_parameters(params, word):
    with pytest.raises(ValueError, match=word):
        Darcy2D(**params)
