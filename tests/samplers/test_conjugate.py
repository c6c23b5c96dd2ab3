"""The diagonal-metric samplers (``metric="rmsprop"`` and ``"identity"``) against a small
closed-form posterior: Bayesian linear regression. The default (Kronecker) samplers are held
against a closed-form posterior at the paper's scale in test_closed_form.py.

Prior θ ~ N(0, σp² I), data t = X θ + N(0, σ²): the posterior is N(μ, Λ⁻¹) with
Λ = XᵀX/σ² + I/σp², μ = Λ⁻¹ Xᵀ t/σ²; at temperature τ it is N(μ, τ Λ⁻¹). Tolerances come
from each chain's effective sample size (Monte Carlo standard errors), not from a seed.
"""

import numpy as np
import pytest
import torch
from torch import nn

from bdeeponet import SGLD, EnergyValue, MReSGLD, ReSGLD
from bdeeponet.metrics import effective_sample_size

torch.set_num_threads(1)
SIGMA, PRIOR_SD, N = 1.0, 1.0, 100


class TwoBlockLinear(nn.Module):
    """t = a x1 + b x2: two parameter tensors, so m-reSGLD has two groups."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.zeros(1))
        self.b = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x[:, 0] * self.a + x[:, 1] * self.b


def problem(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, 2, generator=g, dtype=torch.float64)
    x[:, 1] = 0.3 * x[:, 0] + 0.95 * x[:, 1]  # correlated posterior
    t = x @ torch.tensor([0.7, -0.4], dtype=torch.float64)
    t = t + SIGMA * torch.randn(N, generator=g, dtype=torch.float64)
    prec = (x.T @ x).numpy() / SIGMA**2 + np.eye(2) / PRIOR_SD**2
    cov = np.linalg.inv(prec)
    mean = cov @ (x.T @ t).numpy() / SIGMA**2
    model = TwoBlockLinear().double()

    def energy(params, batch):
        xb, tb = batch
        pred = torch.func.functional_call(model, params, (xb,))
        terms = (pred - tb) ** 2 / (2 * SIGMA**2)
        prior = sum((p**2).sum() for p in params.values()) / (2 * PRIOR_SD**2)
        scale = N / xb.shape[0]
        return EnergyValue(prior + scale * terms.sum(), terms.detach(), scale, N)

    return model, energy, (x, t), mean, cov


def run_chain(sampler, n_burn=3000, n_keep=30000, batch_size=N, seed=1):
    model, energy, (x, t), mean, cov = problem()
    g = torch.Generator().manual_seed(seed)
    state = sampler.init({k: v.detach().clone() for k, v in model.named_parameters()})
    cold, hot = [], []
    for k in range(n_burn + n_keep):
        if k == n_burn:
            sampler.end_burn_in(state)
        idx = torch.randperm(N, generator=g)[:batch_size]
        sampler.step(state, energy, (x[idx], t[idx]), g)
        if k >= n_burn:
            cold.append(torch.cat([p.reshape(-1) for p in sampler.sample(state).values()]))
            if hasattr(state, "chains"):
                hot.append(torch.cat([p.reshape(-1) for p in state.chains[1].params.values()]))
    cold = torch.stack(cold).numpy()
    hot = torch.stack(hot).numpy() if hot else None
    return cold, hot, mean, cov


def check_moments(samples, mean, cov, n_se=4.5):
    """Mean and variance of each coordinate within n_se Monte Carlo standard errors."""
    for j in range(samples.shape[1]):
        ess = effective_sample_size(samples[:, j])
        assert ess > 80, f"chain mixes too slowly for the test (ESS {ess:.0f})"
        sd = np.sqrt(cov[j, j])
        assert abs(samples[:, j].mean() - mean[j]) < n_se * sd / np.sqrt(ess), (
            f"coordinate {j}: mean {samples[:, j].mean():.4f} vs exact {mean[j]:.4f}"
        )
        rel = samples[:, j].var() / cov[j, j]
        # Var of a sample variance ≈ 2 σ⁴ / ESS; plus the O(h) bias of the Euler step (~1%).
        assert abs(rel - 1) < n_se * np.sqrt(2 / ess) + 0.02, (
            f"coordinate {j}: variance ratio {rel:.3f} (ESS {ess:.0f})"
        )


GROUPS = {"first": ["a"], "second": ["b"]}


@pytest.mark.slow
@pytest.mark.parametrize(
    "sampler",
    [SGLD(lr=4e-3, metric="rmsprop", freeze_metric=True), SGLD(lr=4e-3, metric="rmsprop"),
     SGLD(lr=4e-4, metric="identity")],
    ids=["frozen-metric", "adaptive-metric", "no-preconditioner"],
)
def test_sgld_matches_posterior(sampler):
    cold, _, mean, cov = run_chain(sampler)
    check_moments(cold, mean, cov)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sampler",
    [
        ReSGLD(lr=4e-3, tau1=1.0, tau2=3.0, metric="rmsprop", freeze_metric=True),
        MReSGLD(lr=4e-3, tau1=1.0, tau2=3.0, metric="rmsprop", freeze_metric=True, groups=GROUPS),
    ],
    ids=["resgld", "mresgld"],
)
def test_replica_exchange_cold_and_hot_marginals(sampler):
    """Cold replica: the posterior; hot replica: the posterior tempered at τ2."""
    cold, hot, mean, cov = run_chain(sampler)
    check_moments(cold, mean, cov)
    check_moments(hot, mean, sampler.tau2 * cov)


@pytest.mark.slow
def test_resgld_with_minibatches_and_swaps_keeps_the_cold_posterior():
    """Minibatch energies (N/n scaling and the variance-corrected swap), small step."""
    sampler = ReSGLD(lr=3e-3, tau1=1.0, tau2=1.5, metric="rmsprop")  # adaptive diagonal metric
    cold, _, mean, cov = run_chain(sampler, batch_size=50)
    check_moments(cold, mean, cov)


def test_wrong_temperature_is_detected():
    """The moment check can fail: a chain at τ = 2 is not the τ = 1 posterior."""
    cold, _, mean, cov = run_chain(SGLD(lr=4e-3, tau=2.0, metric="rmsprop", freeze_metric=True),
                                   n_keep=20000)
    with pytest.raises(AssertionError):
        check_moments(cold, mean, cov)
