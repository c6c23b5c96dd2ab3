"""Gaussian random fields: covariance vs the kernel (Monte Carlo), reproducibility,
periodicity and smoothness of the periodic fields."""

import numpy as np
import pytest

from bdeeponet.grf import (
    RBF_TOL,
    periodic_grf,
    periodic_kernel,
    rbf_factor,
    rbf_grf,
    rbf_kernel,
)

# Standardised deviations allowed for Monte Carlo estimates. With <= 66 entries per
# check, the union bound gives a false-alarm rate below 66 * 5.7e-7 < 1e-4.
Z_TOL = 5.0


def wrapped_kernel(d, length_scale):
    """Wrapped RBF kernel by direct summation over images, normalised to k(0) = 1."""
    j = np.arange(-10, 11)
    k = np.exp(-0.5 * ((np.asarray(d)[..., None] + j) / length_scale) ** 2).sum(-1)
    return k / np.exp(-0.5 * (j / length_scale) ** 2).sum()


def assert_second_moments(u, idx, kernel):
    """Mean-zero fields: E[u_i u_j] = K_ij, and the sample mean of u_i u_j over n draws
    has standard error sqrt((1 + K_ij^2) / n) for unit-variance Gaussians."""
    n = u.shape[0]
    v = u[:, idx]
    moment = v.T @ v / n
    se = np.sqrt((1 + kernel**2) / n)
    z = np.abs(moment - kernel) / se
    assert z.max() < Z_TOL, f"max standardised deviation {z.max():.2f}"
    assert np.abs(v.mean(axis=0)).max() < Z_TOL / np.sqrt(n)


@pytest.mark.parametrize("n_grid, n_draws, length_scale", [(201, 20000, 0.2), (1189, 4000, 0.1)])
def test_rbf_covariance_matches_kernel(n_grid, n_draws, length_scale):
    x = np.linspace(0, 1, n_grid)
    u = rbf_grf(x, n_draws, np.random.default_rng(1), length_scale=length_scale)
    assert u.shape == (n_draws, n_grid)
    idx = np.linspace(0, n_grid - 1, 11).astype(int)
    assert_second_moments(u, idx, rbf_kernel(x[idx], length_scale))


def test_rbf_factor_reproduces_kernel_matrix():
    x = np.linspace(0, 1, 1189)
    factor = rbf_factor(x, 0.2)
    # The numerically singular kernel has a low numerical rank.
    assert factor.shape[1] < 40
    # The residual is PSD with diagonal <= RBF_TOL, which bounds every entry.
    assert np.abs(factor @ factor.T - rbf_kernel(x, 0.2)).max() <= RBF_TOL


@pytest.mark.parametrize("length_scale", [0.2, 0.05])
def test_periodic_kernel_closed_form_matches_image_sum(length_scale):
    d = np.linspace(-1.5, 1.5, 301)
    assert np.abs(periodic_kernel(d, length_scale) - wrapped_kernel(d, length_scale)).max() < 1e-14


def test_periodic_covariance_matches_wrapped_kernel():
    x = np.linspace(0, 1, 201)
    u = periodic_grf(x, 20000, np.random.default_rng(2), length_scale=0.2)
    # Points near both ends: their correlation exists only through the wrap-around.
    idx = np.array([0, 4, 20, 60, 100, 140, 180, 196, 199])
    assert_second_moments(u, idx, wrapped_kernel(x[idx, None] - x[None, idx], 0.2))


@pytest.mark.parametrize("sampler", [rbf_grf, periodic_grf])
def test_same_seed_same_draws(sampler):
    x = np.linspace(0, 1, 300)
    a = sampler(x, 5, np.random.default_rng(42))
    b = sampler(x, 5, np.random.default_rng(42))
    c = sampler(x, 5, np.random.default_rng(43))
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 0.1


def test_periodic_draws_are_periodic_and_grid_independent():
    coarse = np.linspace(0, 1, 201)
    fine = np.linspace(0, 1, 801)
    u = periodic_grf(coarse, 10, np.random.default_rng(3))
    v = periodic_grf(fine, 10, np.random.default_rng(3))
    np.testing.assert_allclose(u[:, -1], u[:, 0], atol=1e-13)
    np.testing.assert_allclose(v[:, ::4], u, atol=1e-13)
    h = 1e-3
    left = periodic_grf(np.array([-h, 0, h]), 10, np.random.default_rng(3))
    right = periodic_grf(np.array([1 - h, 1, 1 + h]), 10, np.random.default_rng(3))
    np.testing.assert_allclose(left, right, atol=1e-13)


def test_periodic_draws_smooth_across_boundary():
    """A jump in u or in a derivative at x = 0 ~ 1 makes the discrete Fourier
    coefficients decay algebraically; a smooth periodic field's decay to round-off."""
    x = np.linspace(0, 1, 257)
    rng = np.random.default_rng(4)
    spectrum = np.abs(np.fft.rfft(periodic_grf(x, 20, rng)[:, :-1], axis=1))
    assert spectrum[:, 20:].max() < 1e-12 * spectrum.max()
    # The non-periodic RBF field, for contrast, fails the same check by far.
    rough = np.abs(np.fft.rfft(rbf_grf(x, 20, rng)[:, :-1], axis=1))
    assert rough[:, 20:].max() > 1e-4 * rough.max()


@pytest.mark.parametrize("sampler", [rbf_grf, periodic_grf])
def test_invalid_arguments(sampler):
    rng = np.random.default_rng(0)
    x = np.linspace(0, 1, 10)
    with pytest.raises(ValueError, match="length_scale"):
        sampler(x, 3, rng, length_scale=0.0)
    with pytest.raises(ValueError, match="n must be"):
        sampler(x, -1, rng)
    with pytest.raises(ValueError, match="1-D"):
        sampler(np.zeros((2, 2)), 3, rng)
