"""Diffusion-reaction: exact linear solution, manufactured steady state with k != 0,
measured orders in h (second-order differences) and dt (ETDRK2), default accuracy."""

import numpy as np
import pytest

from bdeeponet.grf import rbf_grf
from bdeeponet.problems import DiffusionReaction

D = 0.01
REFINES = np.array([1, 2, 4, 8])


def loglog_slope(h, err):
    return np.polyfit(np.log(h), np.log(err), 1)[0]


@pytest.fixture(scope="module")
def grf_input():
    x = np.linspace(0, 1, 1189)
    return x, rbf_grf(x, 3, np.random.default_rng(0))


def linear_error(problem):
    """Error against the exact solution for k = 0, u = sin(pi x):
    s = sin(pi x) (1 - exp(-D pi^2 t)) / (D pi^2)."""
    x = np.linspace(0, 1, 401)
    q = problem.query_points()
    rate = D * np.pi**2
    exact = np.sin(np.pi * q[:, 0]) * -np.expm1(-rate * q[:, 1]) / rate
    return np.abs(problem.solve(x, np.sin(np.pi * x)[None])[0] - exact).max()


def test_linear_exact_solution_second_order_in_h():
    errors = [linear_error(DiffusionReaction(k=0.0, x_refine=r, richardson=False)) for r in REFINES]
    assert 1.9 < loglog_slope(1 / REFINES, errors) < 2.1
    # Richardson removes the h^2 term; time stepping is exact for k = 0.
    assert linear_error(DiffusionReaction(k=0.0)) < 1e-9


def steady_error(problem):
    """Manufactured steady state s* = sin(pi x), u = D pi^2 sin(pi x) - k sin^2(pi x);
    at t = 400 the transient exp(-D pi^2 t) ~ 1e-17 is gone."""
    x = np.linspace(0, 1, 401)
    u = D * np.pi**2 * np.sin(np.pi * x) - problem.k * np.sin(np.pi * x) ** 2
    s = problem.solve(x, u[None]).reshape(problem.nx, problem.nt)
    return np.abs(s[:, -1] - np.sin(np.pi * np.linspace(0, 1, problem.nx))).max()


def test_manufactured_steady_state_with_reaction():
    errors = [
        steady_error(DiffusionReaction(t_final=400.0, x_refine=r, richardson=False))
        for r in REFINES
    ]
    assert 1.9 < loglog_slope(1 / REFINES, errors) < 2.1
    assert steady_error(DiffusionReaction(t_final=400.0)) < 1e-8


def test_grf_input_second_order_in_h_and_default_accuracy(grf_input):
    x, u = grf_input
    ref = DiffusionReaction(x_refine=32, t_refine=8).solve(x, u)
    errors = [
        np.abs(DiffusionReaction(x_refine=r, richardson=False).solve(x, u) - ref).max()
        for r in REFINES
    ]
    assert 1.8 < loglog_slope(1 / REFINES, errors) < 2.2
    assert np.abs(DiffusionReaction().solve(x, u) - ref).max() < 1e-4


def test_etdrk2_second_order_in_time(grf_input):
    # A strong reaction (k = -1) so that the time error is well above round-off.
    x, u = grf_input
    ref = DiffusionReaction(k=-1.0, t_refine=64, richardson=False).solve(x, u)
    errors = [
        np.abs(DiffusionReaction(k=-1.0, t_refine=r, richardson=False).solve(x, u) - ref).max()
        for r in REFINES
    ]
    assert 1.8 < loglog_slope(1 / REFINES, errors) < 2.2


def test_boundary_and_initial_values_vanish(grf_input):
    x, u = grf_input
    problem = DiffusionReaction()
    s = problem.solve(x, u).reshape(-1, problem.nx, problem.nt)
    q = problem.query_points().reshape(problem.nx, problem.nt, 2)
    np.testing.assert_array_equal(q[:, 0, 1], 0.0)
    np.testing.assert_array_equal(s[:, :, 0], 0.0)
    np.testing.assert_array_equal(s[:, [0, -1], :], 0.0)
    assert np.abs(s).max() > 0.1
