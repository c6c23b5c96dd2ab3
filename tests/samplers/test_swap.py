"""The variance-corrected swap estimator (paper Section 3.2) is unbiased."""

import math

import numpy as np
import pytest
import torch

from bdeeponet.samplers.swap import RunningVariance, estimator_variance, swap_log_rate


@pytest.mark.parametrize("delta_u,var", [(-3.0, 4.0), (-0.5, 1.0), (-6.0, 2.25), (1.0, 0.5)])
def test_corrected_swap_rate_is_unbiased(delta_u, var):
    tau1, tau2 = 1.0, 5.0
    tau_delta = 1 / tau1 - 1 / tau2
    rng = np.random.default_rng(7)
    k = 400_000
    noisy = delta_u + math.sqrt(var) * rng.standard_normal(k)
    rates = np.exp(tau_delta * noisy - 0.5 * tau_delta**2 * var)  # vectorised, same formula
    direct = np.exp([swap_log_rate(d, var, tau1, tau2) for d in noisy[:2000]])
    assert np.allclose(rates[:2000], direct)
    exact = math.exp(tau_delta * delta_u)
    se = rates.std() / math.sqrt(k)
    assert abs(rates.mean() - exact) < 5 * se
    # Without the correction the same estimate is biased by exp(τδ² v / 2): detectably so.
    naive = np.exp(tau_delta * noisy)
    assert abs(naive.mean() - exact) > 5 * naive.std() / math.sqrt(k)


def test_estimator_variance_matches_minibatch_sampling():
    """E[within-batch estimate] = the true variance of (N/n) Σ_batch terms (no replacement)."""
    g = torch.Generator().manual_seed(3)
    pop = torch.randn(60, generator=g, dtype=torch.float64) ** 2
    N, n = 60, 12
    draws, estimates = [], []
    for _ in range(20000):
        idx = torch.randperm(N, generator=g)[:n]
        draws.append(float(N / n * pop[idx].sum()))
        estimates.append(estimator_variance(pop[idx], N / n, N))
    true_var = N**2 * (1 - n / N) * float(pop.var()) / n
    assert np.var(draws) == pytest.approx(true_var, rel=0.05)
    assert np.mean(estimates) == pytest.approx(true_var, rel=0.05)
    assert estimator_variance(pop, 1.0, N) == 0.0  # the full batch has no noise


def test_running_variance_smooths():
    rv = RunningVariance(0.5)
    assert rv.update(4.0) == 4.0
    assert rv.update(0.0) == 2.0
    with pytest.raises(ValueError):
        RunningVariance(0.0)
