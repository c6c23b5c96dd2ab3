"""The Langevin step shared by every SG-MCMC sampler (docs/design.md, numerical conventions).

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
slowed the chains against the adaptive one, hence the default.
With ``metric="identity"``, G = I and the step is the paper's equation (3.4). This
module's diagonal metric is ``metric="rmsprop"``; the default metric is in :mod:`.kfac`.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import torch

from ..energy import EnergyValue, GaussianEnergy, Params, autograd_value_and_grad


class Chain:
    """C particles as one batch (C = 1 for one chain): the parameters and the step count.

    All tensors live in one flat buffer ``flat`` (C, p) laid out in ``order`` (m-reSGLD
    lists a group's names together, so each group is one contiguous slice); ``params`` maps
    each name, in the caller's order, to a view (C, ...) into it. The Langevin update is
    then a handful of operations on one buffer instead of a handful per tensor, and C
    independent chains advance in one batched computation (the DeepONet, the energy and
    the metrics all accept such parameters). Slices of the layout (``span``) index the
    last dimension.

    ``params`` given with ``chains=C`` hold a leading dimension of C; given without
    (``chains=None``) they are one set of parameters, kept as a batch of one, and
    :meth:`as_given` hands them back without the chain dimension.
    """

    def __init__(self, params: Params, order: list[str] | None = None,
                 chains: int | None = None):
        order = list(params) if order is None else list(order)
        if sorted(order) != sorted(params):
            raise ValueError("order must list every parameter name exactly once")
        self.single = chains is None
        lead = 0 if chains is None else 1
        if chains is not None and any(p.dim() == 0 or p.shape[0] != chains
                                      for p in params.values()):
            raise ValueError(f"with chains={chains} every tensor needs a leading dimension of {chains}")
        shapes = {name: p.shape[lead:] for name, p in params.items()}  # caller's order
        first = next(iter(params.values()))
        sizes = {name: shape.numel() for name, shape in shapes.items()}
        self.flat = torch.empty(chains or 1, sum(sizes.values()), dtype=first.dtype,
                                device=first.device)
        self.offsets: dict[str, tuple[int, int]] = {}
        start = 0
        for name in order:
            self.offsets[name] = (start, start + sizes[name])
            start += sizes[name]
        self.shapes = shapes
        self._make_views()
        for name, p in params.items():
            self.params[name].copy_(p.detach())  # (one set: broadcast into the batch of one)
        self.step = 0

    @property
    def n_chains(self) -> int:
        """C, the particles in the batch."""
        return self.flat.shape[0]

    def as_given(self) -> Params:
        """``params`` in the form they were given: without the chain dimension for one
        set of parameters (``chains=None``)."""
        return {n: p[0] for n, p in self.params.items()} if self.single else self.params

    def _make_views(self) -> None:
        lead = self.flat.shape[0]
        self.params: Params = {
            name: self.flat[:, slice(*self.offsets[name])].view((lead, *shape))
            for name, shape in self.shapes.items()
        }

    def __getstate__(self):  # pickle the buffer only; the views are rebuilt on loading,
        return {k: v for k, v in self.__dict__.items() if k != "params"}

    def __setstate__(self, state):  # so they share the buffer's in-place version counter
        self.__dict__.update(state)
        self._make_views()

    def rows(self, k: int, width: int) -> Chain:
        """Level ``k`` of a batch that stacks several levels of ``width`` chains each: a
        Chain whose buffer is a view of rows ``k·width`` to ``(k+1)·width − 1`` of this
        one's. Writing either writes both; replica exchange keeps its levels so, to step
        them all as one batch."""
        out = object.__new__(Chain)
        out.flat = self.flat[level_rows(k, width)]
        out.offsets, out.shapes, out.step, out.single = self.offsets, self.shapes, 0, self.single
        out._make_views()
        return out

    def span(self, names: list[str]) -> slice:
        """The slice of ``flat`` that holds exactly ``names`` (they must be contiguous)."""
        a = min(self.offsets[n][0] for n in names)
        b = max(self.offsets[n][1] for n in names)
        if b - a != sum(self.offsets[n][1] - self.offsets[n][0] for n in names):
            raise ValueError("these parameters are not contiguous in the chain's layout")
        return slice(a, b)

    def flat_grad(self, grads: dict[str, torch.Tensor]) -> tuple[slice, torch.Tensor]:
        """``(span, gradient vector)`` of ``grads`` in the layout order."""
        names = sorted(grads, key=lambda n: self.offsets[n][0])
        lead = self.flat.shape[0]
        return self.span(names), torch.cat([grads[n].reshape(lead, -1) for n in names], dim=-1)


def level_rows(k: int, width: int) -> slice:
    """The rows of level k in a batch of levels of ``width`` chains each."""
    return slice(k * width, (k + 1) * width)


@dataclass
class Preconditioner:
    """RMSprop-style running second moments of the energy gradient, one flat vector.

    Two averages are kept: a fast one (``beta``) that steers burn-in, and a slow one
    (``beta_slow``). The frozen metric uses the larger of the two, so a snapshot taken during
    a quiet spell cannot leave a coordinate with a huge step once adaptation stops. The
    bias correction (as in Adam, so the first steps are not 10x too large) is the same
    average taken of ones, ``1 − β^k`` per coordinate, which stays right when m-reSGLD
    updates one group more often than the other.
    """

    beta: float = 0.99
    beta_slow: float = 0.995
    eps: float = 1e-8
    sq_avg: torch.Tensor | None = None
    sq_slow: torch.Tensor | None = None
    weight: torch.Tensor | None = None  # 1 − beta^k
    weight_slow: torch.Tensor | None = None
    frozen_metric: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    def update(self, span: slice, g: torch.Tensor, size: torch.Size | int) -> None:
        if self.frozen:
            return
        if self.sq_avg is None:
            self.sq_avg, self.sq_slow, self.weight, self.weight_slow = (
                torch.zeros(size, dtype=g.dtype, device=g.device) for _ in range(4))
        for v, w, beta in ((self.sq_avg, self.weight, self.beta),
                           (self.sq_slow, self.weight_slow, self.beta_slow)):
            v[..., span].mul_(beta).addcmul_(g, g, value=1 - beta)
            w[..., span].mul_(beta).add_(1 - beta)

    def metric(self, span: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """``(G, sqrt(G))`` on ``span``."""
        if self.frozen_metric is not None:
            G, root = self.frozen_metric
            return G[..., span], root[..., span]
        G = (self.sq_avg[..., span] / self.weight[..., span]).sqrt_().add_(self.eps).reciprocal_()
        return G, G.sqrt()

    def conservative_moment(self) -> torch.Tensor:
        return torch.maximum(self.sq_avg / self.weight, self.sq_slow / self.weight_slow)

    @property
    def frozen(self) -> bool:
        return self.frozen_metric is not None


def freeze(preconds: list[Preconditioner]) -> None:
    """Stop adapting and give every preconditioner the same constant metric, built from the
    largest second moment any of them saw (one metric for all temperature levels, so a
    swapped-in particle never meets a step size tuned to flatter ground). Nothing happens
    before the first update (then there is nothing to freeze)."""
    if any(p.sq_avg is None for p in preconds):
        return
    v = torch.stack([p.conservative_moment() for p in preconds]).max(dim=0).values
    G = (v.sqrt() + preconds[0].eps).reciprocal()
    for p in preconds:
        p.frozen_metric = (G, G.sqrt())


def energy_and_grads(
    energy, params: Params, batch, active: list[str] | None = None,
    partial: tuple[list[str], int] | None = None,
) -> tuple[EnergyValue, dict[str, torch.Tensor]]:
    """Evaluate Û on ``batch`` and its gradient for the ``active`` names only (default all).

    The energy's own ``value_and_grad`` is used when it has one (GaussianEnergy: a
    hand-written backward for the DeepONet); any other callable goes through autograd.
    Either way nothing is computed for the inactive tensors (m-reSGLD's saving).
    ``partial = (names, r)`` (C chains): those tensors' gradients for the first r chains
    only, their backward pass skipped on the rest (see :func:`skips_partial_backward`).
    """
    names = list(params) if active is None else active
    if partial is not None:
        if not skips_partial_backward(energy, partial[0]):
            raise ValueError("partial gradients need a GaussianEnergy of a model whose backward "
                             "can skip them (the DeepONet's, each net whole)")
        return energy.value_and_grad(params, batch, names, partial)
    vg = getattr(energy, "value_and_grad", None)
    if vg is not None:
        return vg(params, batch, names)
    return autograd_value_and_grad(energy, params, batch, names)


def skips_partial_backward(energy, names: list[str]) -> bool:
    """Whether :func:`energy_and_grads` can take ``partial = (names, r)``: skip the backward
    pass of ``names`` on all but the first r chains. Only the DeepONet's hand-written
    gradient can, and only for whole nets (``DeepONet.split_net``). Kept per model and
    set of names: m-reSGLD asks it every step."""
    model = getattr(energy, "model", None)
    if (getattr(type(energy), "value_and_grad", None) is not GaussianEnergy.value_and_grad
            or not hasattr(model, "split_net")):
        return False
    known = _WHOLE_NETS.setdefault(model, {})
    some = frozenset(names)
    if some not in known:
        known[some] = model.split_net(some) is None
    return known[some]


# per model, per set of names: whether the names take each net whole (a cache of the
# samplers', kept out of the model; weak keys, so that it dies with the model)
_WHOLE_NETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@torch.no_grad()
def langevin_update(
    chain: Chain,
    grads: dict[str, torch.Tensor],
    lr: float,
    tau: float,
    generator: torch.Generator,
    precond: Preconditioner | None = None,
) -> None:
    """In place: ``θ ← θ − η G g + sqrt(2 η τ G) ξ`` for the tensors named in ``grads``
    (which must be contiguous in the chain's layout), and the preconditioner's averages."""
    span, g = chain.flat_grad(grads)
    theta = chain.flat[..., span]
    noise = torch.randn(g.shape, generator=generator, dtype=g.dtype, device=g.device)
    if precond is None:
        theta.add_(g, alpha=-lr).add_(noise, alpha=(2 * lr * tau) ** 0.5)
    else:
        precond.update(span, g, chain.flat.shape)
        G, root = precond.metric(span)
        theta.addcmul_(G, g, value=-lr).addcmul_(root, noise, value=(2 * lr * tau) ** 0.5)
    chain.step += 1


def check_positive(**values: float) -> None:
    """Raise ValueError naming the first hyperparameter that is not > 0."""
    for name, v in values.items():
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v}")


class WarmStart:
    """Burn-in as optimisation: Adam on the chain's flat buffer towards the MAP, with the
    step cosine-decayed to zero over ``steps`` (constant when ``steps`` is None).

    The samplers' default burn-in: the anchor of the control variate and the point where
    the metric is estimated should be the mode, and Adam reaches it far sooner than a
    noisy chain does.
    """

    def __init__(self, chain: Chain, lr: float, steps: int | None = None):
        self.optimizer = torch.optim.Adam([chain.flat], lr=lr)
        self.lr, self.steps, self.k = lr, steps, 0

    def step(self, chain: Chain, grads: dict[str, torch.Tensor]) -> None:
        if self.steps:
            frac = min(self.k / self.steps, 1.0)
            self.optimizer.param_groups[0]["lr"] = self.lr * 0.5 * (1 + math.cos(math.pi * frac))
        chain.flat.grad = chain.flat_grad(grads)[1]
        self.optimizer.step()
        chain.flat.grad = None
        self.k += 1
        chain.step += 1
