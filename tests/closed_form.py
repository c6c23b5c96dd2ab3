"""A closed-form check of the samplers at the paper's scale (used by the test suite and by
``benchmarks/closed_form_check.py``, which draws its figure).

A linear operator (the anti-derivative) learnt from N = 1000 GRF inputs (RBF, l = 0.2,
m = 100 correlated sensor values) with P = 100 noisy targets each, σ = 0.01, by a linear
model ``s = W u + b + c`` (10,200 parameters, prior N(0, 1)): the posterior is Gaussian,
and its predictive mean and sd are known exactly (``fit_linear`` on the inputs ``[u, 1]``:
the two intercepts b and c are one column each). This is the regime in which the
minibatch noise of a diagonal preconditioner made the band six times too wide.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from bdeeponet.calibration import predictive_quantile
from bdeeponet.energy import GaussianEnergy
from bdeeponet.grf import rbf_grf
from bdeeponet.linear import fit_linear
from bdeeponet.metrics import effective_sample_size, ess_bulk, rhat
from bdeeponet.posterior import pooled_predictive

N, N_TEST, M, SIGMA = 1000, 100, 100, 0.01


class LinearOperator(nn.Module):
    """``s(y_p) = Σ_j W_pj u_j + b_p + c_p``: linear in its parameters, in two groups."""

    groups = {"map": ["map.weight", "map.bias"], "offset": ["offset"]}

    def __init__(self, m: int = M, p: int = M):
        super().__init__()
        self.map = nn.Linear(m, p)
        self.offset = nn.Parameter(torch.zeros(p))

    def forward(self, u, y):
        return self.map(u) + self.offset


@dataclass
class ClosedForm:
    u: torch.Tensor  # (N, m)
    s: torch.Tensor  # (N, P) noisy
    u_test: torch.Tensor
    y: torch.Tensor  # (P, 1)
    mean: np.ndarray  # exact predictive mean at u_test (N_TEST, P)
    sd: np.ndarray  # exact predictive sd
    truth: np.ndarray  # clean test targets


def closed_form_problem(seed: int = 0) -> ClosedForm:
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, M)
    u = rbf_grf(x, N + N_TEST, rng, length_scale=0.2)
    s = np.concatenate([np.zeros((N + N_TEST, 1)),
                        np.cumsum((u[:, 1:] + u[:, :-1]) * (x[1] - x[0]) / 2, axis=1)], axis=1)
    s_train = s[:N] + SIGMA * rng.standard_normal((N, M))

    def ones(a):
        return np.hstack([a, np.ones((len(a), 1))])

    exact = fit_linear(ones(u[:N]), s_train, x[:, None], SIGMA, 1.0).predict(ones(u[N:]), x[:, None])
    t = [torch.tensor(a, dtype=torch.float32) for a in (u[:N], s_train, u[N:], x[:, None])]
    return ClosedForm(*t, exact["mean"].numpy(), exact["raw_std"].numpy(), s[N:])


def sample_predictions(sampler, problem: ClosedForm, burn_in: int = 100, keep: int = 300,
                       batch: int = 100, seed: int = 1, chains: int | None = None) -> np.ndarray:
    """Burn-in epochs, ``end_burn_in``, then one prediction of the test set per epoch:
    (keep, N_TEST, P); with ``chains=C``, C chains from C initialisations, each on its own
    minibatches, run as one batch: (C, keep, N_TEST, P)."""
    inits = []
    for c in range(chains or 1):
        torch.manual_seed(c)
        model = LinearOperator()
        inits.append({k: v.detach().clone() for k, v in model.named_parameters()})
    energy = GaussianEnergy(model, problem.y, N, SIGMA, prior_std=1.0)
    g = torch.Generator().manual_seed(seed)
    if chains is None:
        state = sampler.init(inits[0])
    else:
        state = sampler.init({k: torch.stack([p[k] for p in inits]) for k in inits[0]}, chains)
    u, s = problem.u, problem.s
    preds = []
    for epoch in range(burn_in + keep):
        if epoch == burn_in:
            sampler.end_burn_in(state, energy, (u, s), g)
        if chains is None:
            order = torch.randperm(N, generator=g)
        else:
            order = torch.stack([torch.randperm(N, generator=g) for _ in range(chains)])
        for i in range(0, N, batch):
            idx = order[..., i : i + batch]  # (batch,) or (C, batch)
            sampler.step(state, energy, (u[idx], s[idx]), g, index=idx)
        if epoch >= burn_in:
            p = sampler.sample(state)
            with torch.no_grad():
                pred = (problem.u_test @ p["map.weight"].mT + p["map.bias"].unsqueeze(-2)
                        + p["offset"].unsqueeze(-2))
            preds.append(pred.double())
    return torch.stack(preds, dim=0 if chains is None else 1).numpy()


def compare(preds: np.ndarray, problem: ClosedForm) -> dict:
    """Sampled against exact: the sd ratio (median over test points), the mean's error in
    exact sds (99th percentile), the 95% coverage of the truth, the prediction ESS (of C
    chains' draws (C, keep, ...): the predictive distribution users get
    (:func:`~bdeeponet.posterior.pooled_predictive`), their multi-chain bulk ESS and R̂)."""
    chains = preds if preds.ndim == 4 else preds[None]
    t = torch.from_numpy(chains)
    mean, std, dof = pooled_predictive(t.mean(1), (t**2).mean(1), chains.shape[1])
    pm, ps, q95 = mean.numpy(), std.numpy(), predictive_quantile(0.95, dof.numpy())
    flat = chains.reshape(*chains.shape[:2], -1)
    cols = np.linspace(0, flat.shape[2] - 1, 200).astype(int)
    if len(chains) == 1:
        ess = float(np.median([effective_sample_size(flat[0, :, j]) for j in cols]))
    else:
        ess = float(np.median([ess_bulk(flat[:, :, j]) for j in cols]))
    return {
        "sd_ratio": float(np.median(ps / problem.sd)),
        "mean_error": float(np.quantile(np.abs(pm - problem.mean) / problem.sd, 0.99)),
        "coverage": 100 * float(np.mean(np.abs(problem.truth - pm) <= q95 * ps)),
        "exact_coverage": 100 * float(np.mean(np.abs(problem.truth - problem.mean)
                                              <= 1.96 * problem.sd)),
        "ess": ess,
        "rhat": float(max(rhat(flat[:, :, j]) for j in cols)),
    }
