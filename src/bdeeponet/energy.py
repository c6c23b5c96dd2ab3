"""The energy of the Bayesian DeepONet and its minibatch estimator (paper Section 3.2).

``U(θ) = |θ|²/(2 σ_p²) + Σ_i (G_θ(u_i)(y_i) − s̃_i)² / (2 σ²)`` and, on a minibatch of
``n`` of the ``N`` training functions, the unbiased estimator
``Û(θ) = |θ|²/(2 σ_p²) + (N/n) Σ_{f in batch} L_f(θ)`` with
``L_f = Σ_points (G_θ(u_f)(y) − s̃_f(y))² / (2 σ²)``. The data-size scaling ``N/n`` lives
here and nowhere else. Because the data are aligned, a function (all its P targets) is the
sampling unit, which is also what the swap-variance estimate needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.func import functional_call

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class EnergyValue:
    """``total`` = Û (scalar, differentiable); ``terms`` = L_f per batch unit (n,);
    ``scale`` = N/n; ``n_total`` = N."""

    total: torch.Tensor
    terms: torch.Tensor
    scale: float
    n_total: int


class GaussianEnergy:
    """Gaussian likelihood with known noise ``noise_std`` and an isotropic Gaussian prior.

    ``energy(params, batch)`` with ``batch = (u (n, m), s (n, P))`` evaluates ``model`` at the
    shared query points ``y`` through ``torch.func.functional_call``; tensors in ``params``
    that do not require grad build no graph, so their gradient costs nothing.
    """

    def __init__(self, model, y, n_total: int, noise_std: float, prior_std: float = 1.0):
        if noise_std <= 0:
            raise ValueError(f"noise_std must be > 0, got {noise_std}")
        if prior_std <= 0:
            raise ValueError(f"prior_std must be > 0, got {prior_std}")
        self.model, self.y, self.n_total = model, y, n_total
        self.noise_std, self.prior_std = noise_std, prior_std

    def __call__(self, params: Params, batch) -> EnergyValue:
        u, s = batch
        # DeepONet has a direct functional forward (faster); any other module goes through
        # torch.func.functional_call.
        fwd = getattr(self.model, "functional_forward", None)
        if fwd is not None:
            pred = fwd(params, u, self.y)
        else:
            pred = functional_call(self.model, params, (u, self.y))
        terms = ((pred - s) ** 2).sum(dim=1) / (2 * self.noise_std**2)
        tracked = [p for p in params.values() if p.requires_grad]
        fixed = [p for p in params.values() if not p.requires_grad]
        prior = _SumSquares.apply(*tracked) if tracked else 0.0
        if fixed:
            prior = prior + torch.stack(torch._foreach_norm(fixed)).square().sum()
        prior = prior / (2 * self.prior_std**2)
        scale = self.n_total / u.shape[0]
        return EnergyValue(prior + scale * terms.sum(), terms.detach(), scale, self.n_total)


class _SumSquares(torch.autograd.Function):
    """``Σ_t |t|²`` over many tensors as one autograd node (gradient ``2 t``)."""

    @staticmethod
    def forward(ctx, *tensors):
        ctx.save_for_backward(*tensors)
        return torch.stack(torch._foreach_norm(tensors)).square().sum()

    @staticmethod
    def backward(ctx, grad):
        return tuple(torch._foreach_mul(ctx.saved_tensors, 2 * grad))
