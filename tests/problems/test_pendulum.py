"""Pendulum: agreement with an adaptive high-accuracy integrator, RK4 order, and the
small-amplitude (linear oscillator) limit."""

import numpy as np
from scipy.integrate import solve_ivp
from scipy.interpolate import CubicSpline

from bdeeponet.grf import rbf_grf
from bdeeponet.problems import Pendulum


def loglog_slope(h, err):
    return np.polyfit(np.log(h), np.log(err), 1)[0]


def reference(x, u_row, k, t):
    """s1(t) from DOP853 at rtol = atol = 1e-11, forced by the same cubic spline of u."""
    forcing = CubicSpline(x, u_row)
    sol = solve_ivp(
        lambda tt, y: [y[1], -k * np.sin(y[0]) + forcing(tt)],
        (0.0, 1.0), [0.0, 0.0], method="DOP853", t_eval=t, rtol=1e-11, atol=1e-11,
    )
    return sol.y[0]


def test_matches_adaptive_solver_on_grf_inputs():
    x = np.linspace(0, 1, 1189)
    # Amplitude 3 pushes the angle out of the linear regime (|s1| ~ 1).
    u = 3 * rbf_grf(x, 3, np.random.default_rng(0))
    problem = Pendulum()
    s = problem.solve(x, u)
    t = problem.query_points()[:, 0]
    assert np.abs(s).max() > 0.5
    for row in range(3):
        assert np.abs(s[row] - reference(x, u[row], problem.k, t)).max() < 1e-8


def test_rk4_fourth_order():
    x = np.linspace(0, 1, 1189)
    u = 3 * rbf_grf(x, 3, np.random.default_rng(1))
    ref = Pendulum(steps_per_interval=32).solve(x, u)
    steps = np.array([1, 2, 4])
    errors = [np.abs(Pendulum(steps_per_interval=m).solve(x, u) - ref).max() for m in steps]
    assert 3.7 < loglog_slope(1 / steps, errors) < 4.3


def test_small_amplitude_limit_is_linear_oscillator():
    """For u = eps, s1 = eps / k (1 - cos(sqrt(k) t)) + O(eps^3) (sin s = s - s^3/6)."""
    k = 2.0
    problem = Pendulum(k=k)
    t = problem.query_points()[:, 0]
    x = np.linspace(0, 1, 200)
    eps = np.array([0.4, 0.2, 0.1, 0.05])
    linear = eps[:, None] / k * (1 - np.cos(np.sqrt(k) * t))
    s = problem.solve(x, np.repeat(eps[:, None], x.size, axis=1))
    errors = np.abs(s - linear).max(axis=1)
    assert 2.8 < loglog_slope(eps, errors) < 3.2
