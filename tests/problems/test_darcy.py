"""Darcy flow against closed forms, its convergence order and its nonlinearity."""

import numpy as np
import pytest

from bdeeponet.grf import rbf_grf
from bdeeponet.problems import get_problem

X = np.linspace(0.0, 1.0, 100)


@pytest.mark.parametrize("c", [0.0, 0.7, -1.3])
@pytest.mark.parametrize("f", [1.0, 2.5])
def test_constant_permeability(c, f):
    """exp(c) s'' = -f: s = f e^{-c} x (1 - x) / 2."""
    p = get_problem("darcy", f=f)
    t = p.query_points()[:, 0]
    s = p.solve(X, np.full((1, X.size), c))
    np.testing.assert_allclose(s[0], f * np.exp(-c) * t * (1 - t) / 2, rtol=0, atol=1e-12)


def test_linear_log_permeability():
    """u(x) = x: s = C (1 - e^{-x}) - (1 - e^{-x}(1 + x)), C = (1 - 2/e) / (1 - 1/e)."""
    p = get_problem("darcy")
    t = p.query_points()[:, 0]
    exact = (1 - 2 / np.e) / (1 - 1 / np.e) * (1 - np.exp(-t)) - (1 - np.exp(-t) * (1 + t))
    np.testing.assert_allclose(p.solve(X, X[None, :])[0], exact, rtol=0, atol=1e-12)


def test_fourth_order_and_default_accuracy():
    """Halving the quadrature step divides the error by ~16 (Simpson); the default is
    within 1e-6 of a converged reference on GRF inputs."""
    u = rbf_grf(X, 5, np.random.default_rng(0), length_scale=0.2)
    ref = get_problem("darcy", refine=64).solve(X, u)
    errors = [np.abs(get_problem("darcy", refine=r).solve(X, u) - ref).max() for r in (1, 2, 4)]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(orders > 3.5), orders
    assert np.abs(get_problem("darcy").solve(X, u) - ref).max() < 1e-6


def test_boundary_values_and_nonlinearity():
    p = get_problem("darcy")
    u = rbf_grf(X, 4, np.random.default_rng(1), length_scale=0.2)
    s = p.solve(X, u)
    assert np.all(s[:, 0] == 0) and np.all(s[:, -1] == 0)
    assert np.all(s[:, 1:-1] > 0)  # f > 0 pushes the pressure up everywhere inside
    # the map u -> s is not linear: s(2u) is not 2 s(u) - s(0)
    s0 = p.solve(X, np.zeros((1, X.size)))
    assert np.abs(p.solve(X, 2 * u) - (2 * s - s0)).max() > 1e-2
    # but it is linear in the source f
    np.testing.assert_allclose(get_problem("darcy", f=3.0).solve(X, u), 3 * s, rtol=1e-12)
