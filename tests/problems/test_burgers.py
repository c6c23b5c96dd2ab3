"""Viscous Burgers: the pseudo-spectral ETDRK4 solver against exact Cole-Hopf solutions,
its measured order in time, its resolution check and its input distribution."""

import numpy as np
import pytest

from bdeeponet.problems import Burgers

NU = 0.1


def cole_hopf(u0_integral, mean, t, n_out, nu=NU, fine=8192):
    """Exact Burgers solution at time t on x_j = j / n_out for the initial condition
    u0 = mean + v0, v0 of zero mean with ∫_0^x v0 = ``u0_integral(x)``.

    v = -2 nu φ_x / φ with φ_t = nu φ_xx and φ(x, 0) = exp(-∫_0^x v0 / (2 nu)) (Cole-Hopf),
    the heat equation solved exactly in Fourier space; the mean travels with speed ``mean``
    (Galilean invariance): u(x, t) = mean + v(x - mean t, t)."""
    x = np.arange(fine) / fine
    c = np.fft.rfft(np.exp(-u0_integral(x) / (2 * nu)))
    k = 2 * np.pi * np.arange(c.size)
    c = c * np.exp(-nu * k**2 * t - 1j * k * mean * t)  # the shift by mean * t as a phase
    v = -2 * nu * np.fft.irfft(1j * k * c, n=fine) / np.fft.irfft(c, n=fine)
    return mean + v[:: fine // n_out]


def integral(x):  # of v0 = sin 2πx + 0.5 cos 4πx
    return (1 - np.cos(2 * np.pi * x)) / (2 * np.pi) + 0.5 * np.sin(4 * np.pi * x) / (4 * np.pi)


def v0(x):
    return np.sin(2 * np.pi * x) + 0.5 * np.cos(4 * np.pi * x)


@pytest.mark.parametrize("mean", [0.0, 0.7])
def test_matches_cole_hopf(mean):
    problem = Burgers(n_points=128)
    x = np.arange(problem.solve_points) / problem.solve_points
    s = problem.solve_grid((mean + v0(x))[None])[0]
    exact = cole_hopf(integral, mean, problem.t_final, 128)
    assert np.abs(s - exact).max() < 1e-9


def test_fourth_order_in_time():
    """Error against Cole-Hopf for 100 ... 800 steps: log-log slope ≈ 4 (ETDRK4; 3.0 from
    50 to 100 steps, before the asymptotic range)."""
    steps = np.array([100, 200, 400, 800])
    exact = cole_hopf(integral, 0.0, 1.0, 64)
    errors = []
    for n in steps:
        problem = Burgers(n_points=64, solve_points=256, steps=int(n))
        x = np.arange(256) / 256
        errors.append(np.abs(problem.solve_grid(v0(x)[None])[0] - exact).max())
    order = -np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert 3.6 < order < 4.4, (order, errors)


def test_self_convergence_on_random_inputs():
    """Random inputs of the benchmark's distribution: the default solve agrees with one at
    twice the points and four times the steps to 1e-6 of the largest value (measured: 9e-8, the
    time step's error; 10⁴ times below the benchmark's noise of 1% of the targets' sd)."""
    problem = Burgers(n_points=128)
    u = problem.sample_inputs(6, np.random.default_rng(0))
    fine = Burgers(n_points=128, solve_points=2048, steps=1000)
    coef = np.fft.rfft(u, axis=1)
    u_fine = np.fft.irfft(np.pad(coef, ((0, 0), (0, 512))) * 2, n=2048, axis=1)
    ref = fine.solve_grid(u_fine)
    assert np.abs(problem.solve_grid(u) - ref).max() < 1e-6 * np.abs(ref).max()


def test_solve_from_sensors_is_the_interpolant():
    """solve(u at sensors) equals the solve of the trigonometric interpolant of the samples:
    for an input band-limited below the sensors' Nyquist mode, exactly the draw's solution."""
    problem = Burgers(n_points=128)
    x = np.arange(problem.solve_points) / problem.solve_points
    u = (0.3 + v0(x))[None]
    np.testing.assert_allclose(problem.solve(problem.at_sensors(u)), problem.solve_grid(u),
                               atol=1e-12)


def test_input_distribution_spectrum():
    """Coefficients of the real Fourier basis have sd 25 / (4π²k² + 25): measured on 4000
    draws (relative standard error of an sd from n draws: 1 / sqrt(2n))."""
    problem = Burgers(n_points=64, solve_points=64)
    u = problem.sample_inputs(4000, np.random.default_rng(1))
    c = np.fft.rfft(u, axis=1) / 64
    k = np.arange(1, 6)
    expected = 25 / (4 * np.pi**2 * k**2 + 25)
    measured_cos = np.sqrt(2) * c[:, k].real.std(axis=0)  # √2 cos has coefficient 2 Re c / √2
    measured_sin = np.sqrt(2) * c[:, k].imag.std(axis=0)
    tol = 5 / np.sqrt(2 * 4000)
    np.testing.assert_allclose(measured_cos / expected, 1, atol=tol)
    np.testing.assert_allclose(measured_sin / expected, 1, atol=tol)
    np.testing.assert_allclose(c[:, 0], 0, atol=1e-12)  # mean zero, as the published files


def test_unresolved_viscosity_is_refused():
    with pytest.raises(ValueError, match="not resolved at solve_points=1024"):
        Burgers(nu=0.001).draw(2, np.random.default_rng(0))


@pytest.mark.parametrize("params, word", [
    (dict(n_points=100), "divide"), (dict(nu=0.0), "nu"), (dict(steps=0), "steps"),
])
def test_bad_parameters(params, word):
    with pytest.raises(ValueError, match=word):
        Burgers(**params)


def test_a_zero_input_solves_to_zero_beside_others():
    """u = 0 stays 0. Its energy share divided 0 by 0, which read as a blow-up and failed
    every function solved in its chunk."""
    problem = Burgers(n_points=128)
    x = np.arange(128) / 128
    u = np.stack([np.sin(2 * np.pi * x), np.zeros(128)])
    s = problem.solve(u)
    np.testing.assert_array_equal(s[1], 0)
    np.testing.assert_allclose(s[0], problem.solve(u[:1])[0], atol=1e-15)
