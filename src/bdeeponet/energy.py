"""The energy of the Bayesian DeepONet and its minibatch estimator (paper Section 3.2).

``U(θ) = Σ_t |θ_t|²/(2 σ_t²) + Σ_i (G_θ(u_i)(y_i) − s̃_i)² / (2 σ²)`` (σ_t the prior sd of
tensor t) and, on a minibatch of ``n`` of the ``N`` training functions, the unbiased
estimator ``Û(θ) = Σ_t |θ_t|²/(2 σ_t²) + (N/n) Σ_{f in batch} L_f(θ)`` with
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
    """Gaussian likelihood with known noise ``noise_std`` and a Gaussian prior of sd
    ``prior_std``: one number for every tensor, or one per tensor (the run's fan-in prior).

    ``energy(params, batch)`` with ``batch = (u (n, m), s (n, P))`` evaluates ``model`` at the
    shared query points ``y`` through ``torch.func.functional_call``; tensors in ``params``
    that do not require grad build no graph, so their gradient costs nothing.
    """

    def __init__(self, model, y, n_total: int, noise_std: float,
                 prior_std: float | dict[str, float] = 1.0):
        if noise_std <= 0:
            raise ValueError(f"noise_std must be > 0, got {noise_std}")
        stds = prior_std.values() if isinstance(prior_std, dict) else [prior_std]
        if not all(v > 0 for v in stds):
            raise ValueError(f"prior_std must be > 0, got {prior_std}")
        self.model, self.y, self.n_total = model, y, n_total
        self.noise_std, self.prior_std = noise_std, prior_std
        self.trunk_memo: dict = {}  # the model keeps a frozen trunk's output here between steps

    def prior_precision(self, name: str) -> float:
        """``1/σ_p²`` of the tensor ``name`` (``prior_std``: one number, or one per tensor)."""
        sd = self.prior_std[name] if isinstance(self.prior_std, dict) else self.prior_std
        return 1.0 / sd**2

    def _prior(self, params: Params) -> torch.Tensor:
        """``Σ_t |θ_t|² / (2 σ_t²)``, differentiable in the tensors that require grad."""
        if not isinstance(self.prior_std, dict):
            tracked = [p for p in params.values() if p.requires_grad]
            fixed = [p for p in params.values() if not p.requires_grad]
            prior = _SumSquares.apply(*tracked) if tracked else 0.0
            if fixed:
                prior = prior + _sum_squares(fixed)
            return prior / (2 * self.prior_std**2)
        return sum(p.square().sum() * (0.5 * self.prior_precision(n)) for n, p in params.items())

    def __call__(self, params: Params, batch) -> EnergyValue:
        if (one := _as_one_set(self.model, params, batch)) is not None:
            return _batch_of_one(self(*one))
        u, s = batch
        chains = n_chains(self.model, params)
        # DeepONet has a direct functional forward (faster, and batched over chains); any
        # other module goes through torch.func.functional_call (vmapped over C chains).
        fwd = getattr(self.model, "functional_forward", None)
        if fwd is not None:
            pred = fwd(params, u, self.y, self.trunk_memo)
        elif chains is not None:
            pred = torch.func.vmap(lambda p, x: functional_call(self.model, p, (x, self.y)),
                                   in_dims=(0, 0 if u.dim() == 3 else None))(params, u)
        else:
            pred = functional_call(self.model, params, (u, self.y))
        terms = ((pred - s) ** 2).sum(dim=-1) / (2 * self.noise_std**2)
        prior = self._prior(params) if chains is None else self._chain_priors(params)
        scale = self.n_total / u.shape[-2]
        return EnergyValue(prior + scale * terms.sum(-1), terms.detach(), scale, self.n_total)

    def value_and_grad(self, params: Params, batch, names: list[str],
                       partial: tuple[list[str], int] | None = None):
        """``(Û, {name: ∂Û/∂θ})`` for ``names``. A model with ``forward_backward`` (the
        DeepONet) gets its gradient by hand, without an autograd graph; any other model goes
        through autograd with only ``names`` requiring grad.

        ``partial = (some, r)`` (C chains): the gradients of the tensors ``some`` are wanted
        for the first r chains only (m-reSGLD's cold level of a batch of levels); the
        DeepONet then skips their backward pass on the other chains, any other model has
        its full gradient cut.

        Parameters (and a batch) of one chain with a chain dimension (a batch of one) are
        evaluated as one set of parameters, with its arithmetic, and the results given
        the chain dimension back."""
        if partial is None and (one := _as_one_set(self.model, params, batch)) is not None:
            value, grads = self.value_and_grad(*one, names)
            return _batch_of_one(value), {n: g.unsqueeze(0) for n, g in grads.items()}
        fb = getattr(self.model, "forward_backward", None)
        if fb is None:
            value, grads = autograd_value_and_grad(self, params, batch, names)
            return value, _first_chains(grads, partial)
        u, s = batch
        with torch.no_grad():
            pred, backward = fb(params, u, self.y, names, partial, self.trunk_memo)
            r = pred.sub_(s)
            terms = (r * r).sum(dim=-1) / (2 * self.noise_std**2)
            scale = self.n_total / u.shape[-2]
            grads = backward(r.mul_(scale / self.noise_std**2))
            if pred.dim() == 3:  # C chains: one energy each, (C,)
                prior = self._chain_priors(params)
                at = _first_chains(params, partial)
                torch._foreach_add_(list(grads.values()), torch._foreach_mul(
                    [at[n] for n in grads], [self.prior_precision(n) for n in grads]))
            elif isinstance(self.prior_std, dict):
                norms = torch.stack(torch._foreach_norm(list(params.values())))
                prec = self._precision_vector(list(params), norms)
                prior = 0.5 * (norms.square() * prec).sum()
                torch._foreach_add_(list(grads.values()), torch._foreach_mul(
                    [params[n] for n in grads], [self.prior_precision(n) for n in grads]))
            else:
                prior = _sum_squares(list(params.values())) / (2 * self.prior_std**2)
                torch._foreach_add_(list(grads.values()), [params[n] for n in grads],
                                    alpha=1 / self.prior_std**2)
        return EnergyValue(prior + scale * terms.sum(-1), terms, scale, self.n_total), grads

    def _precision_vector(self, names: list[str], like: torch.Tensor) -> torch.Tensor:
        """The prior precisions of ``names`` as a tensor like ``like``, made once: building
        it every step copied a host list to the device (a synchronising copy on a GPU, and
        one that CUDA-graph capture refuses)."""
        key = (tuple(names), like.device, like.dtype)
        cache = self.__dict__.setdefault("_precision_vectors", {})
        if key not in cache:
            cache[key] = torch.tensor([self.prior_precision(n) for n in names], dtype=like.dtype,
                                      device=like.device)
        return cache[key]

    def _chain_priors(self, params: Params) -> torch.Tensor:
        """The prior energy of each of C chains (tensors (C, ...)): (C,), differentiable.
        One product with a vector of every entry's precision (made once), not a few
        operations per tensor: at the DeepONet's size these are dispatch-bound."""
        rows = [p.reshape(p.shape[0], -1) for p in params.values()]
        flat = torch.cat(rows, dim=1)
        key = (tuple(params), tuple(r.shape[1] for r in rows), flat.dtype, flat.device)
        cache = self.__dict__.setdefault("_entry_precisions", {})
        if key not in cache:
            cache[key] = 0.5 * torch.cat([
                torch.full((r.shape[1],), self.prior_precision(n), dtype=flat.dtype, device=flat.device)
                for n, r in zip(params, rows, strict=True)])
        return flat.square() @ cache[key]


def _as_one_set(model, params: Params, batch):
    """``(params, batch)`` of a batch of one chain without the chain dimension (a batch
    (n, ...) is shared by the chains, (1, n, ...) is the one chain's); None for a batch of
    several chains or tensors without a chain dimension."""
    if n_chains(model, params) != 1:
        return None
    u, s = batch
    return {n: p[0] for n, p in params.items()}, (u[0], s[0]) if s.dim() == 3 else batch


def _batch_of_one(value: EnergyValue) -> EnergyValue:
    """One set of parameters' energy as that of a batch of one chain: total (1,), terms (1, n)."""
    return EnergyValue(value.total.unsqueeze(0), value.terms.unsqueeze(0), value.scale,
                       value.n_total)


def _first_chains(tensors: dict[str, torch.Tensor], partial: tuple[list[str], int] | None) -> dict:
    """``tensors`` with those named in ``partial = (names, r)`` cut to their first r chains."""
    if partial is None:
        return tensors
    some, r = set(partial[0]), partial[1]
    return {n: t[:r] if n in some else t for n, t in tensors.items()}


def n_chains(model: torch.nn.Module, params: Params) -> int | None:
    """C when the tensors of ``params`` carry a leading chain dimension (one more than the
    model's own parameters), None for one set of parameters."""
    name, p = next(iter(params.items()))
    own = model.get_parameter(name)
    return p.shape[0] if p.dim() == own.dim() + 1 else None


def fan_in_prior(model: torch.nn.Module, scale: float = 1.0) -> dict[str, float]:
    """Per-tensor prior standard deviations ``scale / sqrt(fan_in)`` for the weight and the
    bias of every ``nn.Linear`` (``scale`` for any other tensor); a model with a
    ``prior_stds(scale)`` method gives its own.

    An i.i.d. N(0, 1) prior puts the weights of a 64-wide tanh layer at pre-activations of
    size ~8 wherever the data do not pin them: every unit saturated. Scaling by the fan-in
    (as the usual initialisations do) keeps a draw from the prior a working network; the
    bias shares its layer's scale so that a layer's prior is isotropic (the Kronecker
    metric adds it in the layer's eigenbasis).
    """
    own = getattr(model, "prior_stds", None)
    if own is not None:  # a network with layers of its own kind (the Fourier operator's)
        return own(scale)
    out = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            for p in ("weight", "bias"):
                if getattr(mod, p) is not None:
                    out[f"{name}.{p}" if name else p] = scale / mod.in_features**0.5
    for name, _ in model.named_parameters():
        out.setdefault(name, scale)
    return out


def autograd_value_and_grad(energy, params: Params, batch, names: list[str]):
    """Evaluate ``energy(params, batch)`` and its gradient for ``names`` with autograd.

    The other tensors do not require grad, so autograd neither records nor computes
    anything for them (m-reSGLD's saving).
    """
    act = set(names)
    for n, p in params.items():
        p.requires_grad_(n in act)
    try:
        value = energy(params, batch)  # C chains: (C,) energies, independent of each other
        grads = torch.autograd.grad(value.total.sum(), [params[n] for n in names])
    finally:
        for p in params.values():
            p.requires_grad_(False)
    return value, dict(zip(names, grads, strict=True))


def _sum_squares(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(torch._foreach_norm(tensors)).square().sum()


class _SumSquares(torch.autograd.Function):
    """``Σ_t |t|²`` over many tensors as one autograd node (gradient ``2 t``)."""

    @staticmethod
    def forward(ctx, *tensors):
        ctx.save_for_backward(*tensors)
        return _sum_squares(tensors)

    @staticmethod
    def backward(ctx, grad):
        return tuple(torch._foreach_mul(ctx.saved_tensors, 2 * grad))
