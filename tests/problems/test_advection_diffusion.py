"""Advection-diffusion: exact Fourier solutions, spectral convergence in the input grid,
periodicity."""

import numpy as np
import pytest
from scipy.special import iv

from bdeeponet.grf import periodic_grf
from bdeeponet.problems import AdvectionDiffusion

D = 0.1


@pytest.mark.parametrize("n_grid", [65, 1189, 1190])
def test_single_mode_is_exact(n_grid):
    problem = AdvectionDiffusion()
    x = np.linspace(0, 1, n_grid)
    q = problem.query_points()
    exact = np.exp(-4 * np.pi**2 * D * q[:, 1]) * np.sin(2 * np.pi * (q[:, 0] - q[:, 1]))
    s = problem.solve(x, np.sin(2 * np.pi * x)[None])[0]
    assert np.abs(s - exact).max() < 1e-12


def exp_sine_solution(x, t):
    """Exact solution for u = exp(sin 2 pi x) from exp(z cos a) = I0(z) + 2 sum I_m(z) cos(m a)."""
    m = np.arange(1, 40)
    phase = m * (2 * np.pi * (x[:, None] - t[:, None]) - np.pi / 2)
    decay = np.exp(-4 * np.pi**2 * m**2 * D * t[:, None])
    return iv(0, 1) + 2 * np.sum(iv(m, 1) * decay * np.cos(phase), axis=1)


def test_spectral_convergence_in_input_grid():
    problem = AdvectionDiffusion()
    q = problem.query_points()
    exact = exp_sine_solution(q[:, 0], q[:, 1])
    sizes = np.array([9, 13, 17, 25])
    errors = []
    for k in sizes:
        x = np.linspace(0, 1, k)
        s = problem.solve(x, np.exp(np.sin(2 * np.pi * x))[None])[0]
        errors.append(np.abs(s - exact).max())
    # Faster than any power of 1/N: the local order grows with every refinement.
    orders = -np.diff(np.log(errors)) / np.diff(np.log(sizes - 1))
    assert np.all(np.diff(orders) > 0) and orders[0] > 8
    assert errors[-1] < 1e-10


def test_grf_input_grid_independent_and_periodic():
    problem = AdvectionDiffusion()
    fine = np.linspace(0, 1, 4 * 1188 + 1)
    coarse = np.linspace(0, 1, 1189)
    # periodic_grf draws the same functions on every grid for the same seed.
    s_fine = problem.solve(fine, periodic_grf(fine, 4, np.random.default_rng(0)))
    s = problem.solve(coarse, periodic_grf(coarse, 4, np.random.default_rng(0)))
    assert np.abs(s - s_fine).max() < 1e-12
    s = s.reshape(-1, problem.nx, problem.nt)
    np.testing.assert_array_equal(s[:, 0, :], s[:, -1, :])
    u_query = periodic_grf(np.linspace(0, 1, problem.nx), 4, np.random.default_rng(0))
    assert np.abs(s[:, :, 0] - u_query).max() < 1e-12


def test_rejects_non_periodic_input():
    x = np.linspace(0, 1, 101)
    with pytest.raises(ValueError, match="periodic"):
        AdvectionDiffusion().solve(x, x[None])
