"""The Langevin step shared by every SG-MCMC sampler (DESIGN.md, numerical conventions).

``θ ← θ − η G ∇Û(θ) + sqrt(2 η τ G) ξ``,  ξ ~ N(0, I) drawn from an explicit generator.

``G`` is a diagonal preconditioner (pSGLD, Li et al. 2016): the inverse root of an
exponential average of squared energy gradients. The true energy has gradients of size
``N/σ²`` (1e9 for the anti-derivative at σ = 0.01), so a raw step ``η`` must be ~1e-10 and
differs per problem; with ``G`` the drift has the size of ``η`` whatever ``N`` and ``σ`` are,
and the injected noise ``sqrt(2ητG)`` has the scale of the tempered posterior.

By default ``G`` keeps adapting after burn-in, as in pSGLD, whose neglected correction term
is O(1 − β). With ``freeze_metric=True`` the samplers freeze ``G`` at the end of burn-in
(:func:`freeze`), and sampling is plain Langevin dynamics with a constant metric, exact up to
the O(η) step error: the closed-form tests use it. On the DeepONet problems the frozen metric
slowed the chains (anti-derivative, 1000 epochs: ESS 5–14 of 100 samples, band coverage
e3 ≈ 72%) against the adaptive one (ESS 22, e3 ≈ 96%), hence the default.
With ``precondition=False``, G = I and the step is the paper's equation (3.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..energy import EnergyValue, Params


@dataclass
class Chain:
    """One particle: its parameters (leaf tensors, updated in place) and its step count."""

    params: Params
    step: int = 0


@dataclass
class Preconditioner:
    """RMSprop-style running second moments of the energy gradient, per parameter tensor.

    Two averages are kept: a fast one (``beta``) that steers burn-in, and a slow one
    (``beta_slow``). The frozen metric uses the larger of the two, so a snapshot taken during
    a quiet spell cannot leave a coordinate with a huge step once adaptation stops.
    """

    beta: float = 0.99
    beta_slow: float = 0.995
    eps: float = 1e-8
    sq_avg: dict[str, torch.Tensor] = field(default_factory=dict)
    sq_slow: dict[str, torch.Tensor] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=dict)
    _frozen: dict = field(default_factory=dict, repr=False)

    def update(self, grads: dict[str, torch.Tensor]) -> None:
        if self.frozen:
            return
        for name, g in grads.items():
            if name not in self.sq_avg:
                self.sq_avg[name] = torch.zeros_like(g)
                self.sq_slow[name] = torch.zeros_like(g)
                self.count[name] = 0
            self.count[name] += 1
        names = list(grads)
        gl = list(grads.values())
        fast = [self.sq_avg[n] for n in names]
        slow = [self.sq_slow[n] for n in names]
        torch._foreach_mul_(fast, self.beta)
        torch._foreach_addcmul_(fast, gl, gl, value=1 - self.beta)
        torch._foreach_mul_(slow, self.beta_slow)
        torch._foreach_addcmul_(slow, gl, gl, value=1 - self.beta_slow)

    def metrics(self, names: list[str]):
        """``(G list, sqrt(G) list)`` for ``names`` (all known), in one pass of foreach ops."""
        if self._frozen:
            pairs = [self._frozen[n] for n in names]
            return [a for a, _ in pairs], [b for _, b in pairs]
        v = torch._foreach_div([self.sq_avg[n] for n in names],
                               [1 - self.beta ** self.count[n] for n in names])
        torch._foreach_sqrt_(v)
        torch._foreach_add_(v, self.eps)
        torch._foreach_reciprocal_(v)
        return v, torch._foreach_sqrt(v)

    def second_moment(self, name: str, conservative: bool = False) -> torch.Tensor:
        # Bias-corrected like Adam, so the first steps are not 10x too large.
        k = self.count[name]
        v = self.sq_avg[name] / (1 - self.beta**k)
        if conservative:
            v = torch.maximum(v, self.sq_slow[name] / (1 - self.beta_slow**k))
        return v

    @property
    def frozen(self) -> bool:
        return bool(self._frozen)


def _metric(v: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    G = 1.0 / (v.sqrt() + eps)
    return G, G.sqrt()


def freeze(preconds: list[Preconditioner]) -> None:
    """Stop adapting and give every preconditioner the same constant metric, built from the
    largest second moment any of them saw (one metric for all temperature levels, so a
    swapped-in particle never meets a step size tuned to flatter ground)."""
    names = set().union(*(p.sq_avg for p in preconds))
    for name in names:
        v = torch.stack([p.second_moment(name, True) for p in preconds if name in p.sq_avg])
        G = _metric(v.max(dim=0).values, preconds[0].eps)
        for p in preconds:
            p._frozen[name] = G


def clone_params(params: Params) -> Params:
    return {k: v.detach().clone() for k, v in params.items()}


def energy_and_grads(
    energy, params: Params, batch, active: list[str] | None = None
) -> tuple[EnergyValue, dict[str, torch.Tensor]]:
    """Evaluate Û on ``batch`` and its gradient for the ``active`` names only.

    Inactive tensors do not require grad, so autograd neither records nor computes
    anything for them (m-reSGLD's saving).
    """
    names = list(params) if active is None else active
    act = set(names)
    for n, p in params.items():
        p.requires_grad_(n in act)
    value = energy(params, batch)
    grads = torch.autograd.grad(value.total, [params[n] for n in names])
    for p in params.values():
        p.requires_grad_(False)
    return value, dict(zip(names, grads, strict=True))


@torch.no_grad()
def langevin_update(
    params: Params,
    grads: dict[str, torch.Tensor],
    lr: float,
    tau: float,
    generator: torch.Generator,
    precond: Preconditioner | None = None,
) -> None:
    """In place: ``θ ← θ − η G g + sqrt(2 η τ G) ξ`` for the tensors named in ``grads``."""
    names = list(grads)
    ps = [params[n] for n in names]
    gl = list(grads.values())
    noise = [torch.randn(p.shape, generator=generator, dtype=p.dtype) for p in ps]
    if precond is None:
        torch._foreach_add_(ps, gl, alpha=-lr)
        torch._foreach_add_(ps, noise, alpha=(2 * lr * tau) ** 0.5)
        return
    G, sqrt_g = precond.metrics(names)
    torch._foreach_add_(ps, torch._foreach_mul(gl, G), alpha=-lr)
    torch._foreach_mul_(noise, sqrt_g)
    torch._foreach_add_(ps, noise, alpha=(2 * lr * tau) ** 0.5)


def check_positive(**values: float) -> None:
    """Raise ValueError naming the first hyperparameter that is not > 0."""
    for name, v in values.items():
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v}")
