"""The replica-exchange swap (paper Section 3.2), as pure functions.

With exact energies the swap rate is ``r = exp(τ_δ (U(θ¹) − U(θ²)))``, ``τ_δ = 1/τ1 − 1/τ2``.
Plugging in a noisy estimate ``ΔÛ ~ N(ΔU, v)`` gives ``E exp(τ_δ ΔÛ) = r exp(τ_δ² v / 2)``:
swaps become far too frequent. The variance-corrected estimator

    r̂ = exp(τ_δ ΔÛ − τ_δ² v / 2)

is unbiased, ``E r̂ = r``. The paper writes the correction as ``τ_δ² (a1 σ1 + a2 σ2)²``
(σ_j the standard deviation of replica j's estimator); that is the same formula with
``v = 2 (a1 σ1 + a2 σ2)²``, i.e. two estimators of equal spread drawn on *independent*
minibatches. Both of our energies are computed on the *same* minibatch, so we estimate
``v = Var(ΔÛ)`` directly from the paired per-function differences, which is smaller
(the batch noise cancels in part) and keeps the estimator unbiased. Algorithm 1 as printed
has a factor ``(a1 − a2)`` (zero for a1 = a2) and swaps ``θ¹_{k+1}`` with ``θ²_{k+2}``; both
are typos of the rule above, which is what we implement.
"""

from __future__ import annotations

import math

import torch
from scipy.special import log_ndtr


def swap_log_rate(delta_u: float, var_delta: float, tau1: float, tau2: float) -> float:
    """``log r̂ = τ_δ ΔÛ − τ_δ² Var(ΔÛ) / 2`` with ``ΔÛ = Û(θ¹) − Û(θ²)``."""
    tau_delta = 1.0 / tau1 - 1.0 / tau2
    return tau_delta * delta_u - 0.5 * tau_delta**2 * var_delta


def paired_variance(terms1: torch.Tensor, terms2: torch.Tensor, scale: float, n_total: int) -> float:
    """Variance of ``ΔÛ = (N/n) Σ_f (L_f(θ¹) − L_f(θ²))`` for a batch of n of N units drawn
    without replacement, estimated from the batch itself."""
    return estimator_variance(terms1 - terms2, scale, n_total)


def estimator_variance(terms: torch.Tensor, scale: float, n_total: int):
    """Variance of ``(N/n) Σ_f terms_f`` over minibatches of n units from N (no replacement);
    for C chains' terms (C, n), a tensor (C,) of them."""
    n = terms.shape[-1]
    if n < 2 or n >= n_total:
        return 0.0 if terms.dim() == 1 else torch.zeros(terms.shape[0], dtype=torch.float64,
                                                        device=terms.device)
    v = scale**2 * n * terms.double().var(dim=-1) * (1 - n / n_total)
    return float(v) if terms.dim() == 1 else v


def accept_swaps(log_rate: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The Metropolis test ``u < r̂`` of C pairs at once, ``u ~ U(0, 1)`` (float64) drawn
    from ``generator`` whatever the outcome: a bool tensor (C,)."""
    u = torch.rand(log_rate.shape, generator=generator, dtype=torch.float64,
                   device=generator.device)
    return u.log() < log_rate


class RunningVariance:
    """Online (exponentially smoothed) estimate of an estimator's variance, as Algorithm 1
    requires σ² to be tracked during the run; ``smoothing`` is the weight of the newest value."""

    def __init__(self, smoothing: float = 0.1):
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.smoothing = smoothing
        self.value: float | None = None

    def update(self, v: float) -> float:
        self.value = v if self.value is None else self.value + self.smoothing * (v - self.value)
        return self.value


def predicted_swap_rate(d: float, tau1: float, tau2: float, var_delta: float = 0.0) -> float:
    """The acceptance ``E min(1, r̂)`` to expect between replicas at τ1 < τ2 of a posterior
    that is Gaussian in ``d`` dimensions.

    There ``U_τ − U_min ~ τ χ²_d / 2``: ``E[U1 − U2] = −d (τ2 − τ1)/2`` and
    ``Var[U1 − U2] = d (τ1² + τ2²)/2``; the energies' estimator adds its noise of variance
    ``v`` (``var_delta``), so ``log r̂ = τ_δ (Û1 − Û2) − τ_δ² v/2`` is normal with mean μ and
    variance ``s² = τ_δ² (d (τ1² + τ2²)/2 + v)``, and
    ``E min(1, e^X) = Φ(μ/s) + e^{μ + s²/2} Φ(−μ/s − s)``.
    For the DeepONet (d ≈ 2·10⁴, τ1 = 1, τ2 = 10) μ ≈ −8·10⁴: no unbiased rule can swap
    such a pair, which is what the runs measure. The global communication barrier of the
    pair, ``Λ ≈ sqrt(d/(2π)) ln(τ2/τ1)`` (Syed et al. 2022), is :func:`communication_barrier`.
    """
    tau_delta = 1.0 / tau1 - 1.0 / tau2
    mu = -tau_delta * d * (tau2 - tau1) / 2 - 0.5 * tau_delta**2 * var_delta
    s = tau_delta * math.sqrt(d * (tau1**2 + tau2**2) / 2 + var_delta)
    if s == 0:
        return 1.0 if mu >= 0 else math.exp(mu)
    # both terms in logs: for d ~ 1e4, s²/2 and log Φ(−μ/s − s) are each ~ ±1e5
    log_terms = (float(log_ndtr(mu / s)), mu + s * s / 2 + float(log_ndtr(-mu / s - s)))
    return min(1.0, sum(math.exp(t) for t in log_terms))


def communication_barrier(d: float, tau1: float, tau2: float) -> float:
    """``Λ ≈ sqrt(d / (2π)) ln(τ2 / τ1)`` for a d-dimensional Gaussian; about 2Λ replicas
    are needed for a ladder between τ1 and τ2 to communicate (Syed et al. 2022)."""
    return math.sqrt(d / (2 * math.pi)) * math.log(tau2 / tau1)
