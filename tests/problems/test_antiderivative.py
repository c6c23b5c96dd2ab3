"""Antiderivative: exact antiderivatives of known functions, O(h^4) convergence, GRF input."""

import numpy as np

from bdeeponet.grf import rbf_grf
from bdeeponet.problems import Antiderivative


def loglog_slope(h, err):
    return np.polyfit(np.log(h), np.log(err), 1)[0]


def test_cubic_polynomials_are_integrated_exactly():
    # The not-a-knot cubic spline reproduces cubics, so its antiderivative is exact.
    x = np.linspace(0, 1, 200)
    u = np.stack([np.ones_like(x), 3 * x**2 - x, 4 * x**3 - 2 * x + 0.5])
    t = Antiderivative().query_points()[:, 0]
    exact = np.stack([t, t**3 - t**2 / 2, t**4 - t**2 + 0.5 * t])
    np.testing.assert_allclose(Antiderivative().solve(x, u), exact, atol=1e-13)


def test_sine_antiderivative_and_fourth_order_convergence():
    a = 7.0
    problem = Antiderivative(n_points=101)
    t = problem.query_points()[:, 0]
    exact = (1 - np.cos(a * t)) / a
    sizes = np.array([21, 41, 81, 161])
    errors = []
    for k in sizes:
        x = np.linspace(0, 1, k)
        errors.append(np.abs(problem.solve(x, np.sin(a * x)[None])[0] - exact).max())
    assert 3.7 < loglog_slope(1 / (sizes - 1), errors) < 4.3
    x = np.linspace(0, 1, 1189)
    assert np.abs(problem.solve(x, np.sin(a * x)[None])[0] - exact).max() < 1e-10


def test_grf_input_matches_fine_grid_reference():
    # The same GRF seen on a 4x finer grid: its spline antiderivative is ~256x more
    # accurate, so the difference measures the error of the coarse solve.
    fine = np.linspace(0, 1, 1201)
    u_fine = rbf_grf(fine, 5, np.random.default_rng(0))
    problem = Antiderivative()
    coarse = problem.solve(fine[::4], u_fine[:, ::4])
    assert np.abs(coarse - problem.solve(fine, u_fine)).max() < 1e-8
    np.testing.assert_array_equal(coarse[:, 0], 0.0)
