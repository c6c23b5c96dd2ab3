"""A constant Kronecker-factored metric for Langevin sampling, estimated once at the warm start.

Why. The posterior of a DeepONet trained on ``N·P ≈ 1e5`` targets at σ = 0.01 is extremely
ill-conditioned: the branch's first layer sees GRF sensor values whose covariance has
eigenvalues from 1 down to 1e-12, so the data fix some weight combinations 1e7 times more
tightly than others, and every data-determined direction contributes about equally to the
predictive variance. A diagonal metric (pSGLD) cannot mix such a posterior; a metric that
captures the input correlations can, and then a Langevin step of size ``η ≈ 0.05`` mixes
every well-approximated direction in about ``1/η`` steps.

What. For every ``nn.Linear`` layer (weight ``W`` (out, in), bias ``b``) the Fisher block of
``[W, b]`` is approximated as ``R · Ā ⊗ Ḡ`` (K-FAC, Martens & Grosse 2015), with
``Ā = E[ā āᵀ]`` the second moment of the layer's input ``ā = [a, 1]`` over the ``R`` rows it
sees in one pass over the data, and ``Ḡ = E[g gᵀ]`` that of the gradient with respect to the
layer's output, where the output gradient is drawn from the model's own noise model
(``∂L/∂output = ε/σ²``, ``ε ~ N(0, σ² I)``: the Monte Carlo Fisher, averaged over
``samples`` draws). With ``Ā = Q_A diag(a) Q_Aᵀ`` and ``R Ḡ = Q_G diag(g) Q_Gᵀ`` the
block's precision is taken as

    Λ = (Q_G ⊗ Q_A) diag(g_i a_j + λ) (Q_G ⊗ Q_A)ᵀ,     λ = 1/σ_p² (the prior),

i.e. the prior is added exactly in the Kronecker eigenbasis rather than as factored damping,
which would over-damp the weakly determined directions by orders of magnitude. For a
linear model this is the exact posterior precision (up to the Monte Carlo error of Ḡ).
Tensors outside any ``nn.Linear`` get a diagonal Monte Carlo Fisher plus λ.

The Langevin step with metric ``M = Λ⁻¹`` is then, per layer,
``Δ = Q_G [−η (Q_Gᵀ ∇ Q_A) / D + sqrt(2ητ) Ξ / sqrt(D)] Q_Aᵀ`` with ``D = g aᵀ + λ`` and
``Ξ`` standard normal (rotation invariant, so drawn directly in the eigenbasis): four
small matrix products. The metric is constant, so the dynamics are exact Langevin up to the
O(η) discretisation error, and m-reSGLD can update the blocks of one net only.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call

from ..energy import Params


@dataclass
class KroneckerBlock:
    weight: str
    bias: str | None
    # float64: in float32 the rounding of the eigenvectors alone leaks ~1e-7 of a stiff
    # direction's curvature (1e4 times the prior's) into the soft ones, and M H reaches ~10
    # (a damped block that is conditioned well enough steps in float32: FLOAT32_CONDITION)
    qa: torch.Tensor  # (in+1, in+1) or (in, in): eigenvectors of Ā
    qg: torch.Tensor  # (out, out): eigenvectors of R Ḡ
    precision: torch.Tensor  # (out, in[+1]): D, the precision in that eigenbasis
    inv: torch.Tensor | None = None  # 1 / (D + damping)
    inv_sqrt: torch.Tensor | None = None  # its square root


class KroneckerMetric:
    """``blocks``: one per linear layer; ``diag``: name -> precision d (float64) for the rest.

    ``damping`` δ is added to every precision (``M = (Λ + δ I)⁻¹``); see :func:`stiffness`.
    """

    def __init__(self, blocks: list[KroneckerBlock], diag: dict[str, torch.Tensor],
                 damping: float = 0.0):
        self.blocks, self.diag_precision = blocks, diag
        self.set_damping(damping)

    def set_damping(self, damping: float) -> None:
        self.damping = damping
        for blk in self.blocks:
            d = blk.precision + damping
            blk.inv, blk.inv_sqrt = 1 / d, d.rsqrt()
            blk.__dict__.pop("_float32", None)
        self.__dict__.pop("_levels", None)
        self.diag = {}
        for name, prec in self.diag_precision.items():
            d = prec + damping
            self.diag[name] = ((1 / d).float(), d.rsqrt().float())

    @torch.no_grad()
    def step(self, params: Params, grads: dict[str, torch.Tensor], lr: float | tuple[float, ...],
             tau: float | tuple[float, ...], generator: torch.Generator) -> None:
        """In place, for the tensors named in ``grads``:
        ``θ ← θ − η M ∇ + sqrt(2 η τ) M^½ ξ``. The tensors are (C, ...), C chains, for a
        :meth:`stack` of C chains' metrics; one chain's metric takes its chain's tensors with
        or without that dimension. ``lr`` and ``tau`` are numbers, or tuples of L numbers
        for L levels (replica exchange's temperatures stepped as one batch, the metric
        broadcast over them): the tensors then hold the levels' rows one level after the
        other, (L·C, ...) ((L, ...) for one chain)."""
        if isinstance(lr, tuple):
            if self.stacked:  # (L·C, ...) -> (L, C, ...)
                params = {n: p.view(len(lr), -1, *p.shape[1:]) for n, p in params.items()}
                grads = {n: g.view(len(lr), -1, *g.shape[1:]) for n, g in grads.items()}
            return self._step_levels(params, grads, lr, tau, generator)
        if not self.stacked:
            params, grads = _without_chain_dim(params, grads, self._reference_dims(grads))
        noise_scale = (2 * lr * tau) ** 0.5
        for blk in self.blocks:
            if blk.weight in grads:
                rotated, scales = _in_eigenbasis(blk, grads)
                xi = _block_noise(rotated, generator)
                _add_rotated_back(blk, rotated.mul_(scales[0]).mul_(-lr).addcmul_(
                    xi, scales[1], value=noise_scale), params)
        for name, (inv, inv_sqrt) in self.diag.items():
            if name in grads:
                xi = torch.randn(grads[name].shape, generator=generator, dtype=inv.dtype,
                                 device=inv.device)
                params[name].addcmul_(inv.to(grads[name].dtype), grads[name], value=-lr).addcmul_(
                    inv_sqrt.to(xi.dtype), xi, value=noise_scale)

    def _step_levels(self, params: Params, grads: dict[str, torch.Tensor], lr: tuple[float, ...],
                     tau: tuple[float, ...], generator: torch.Generator) -> None:
        """:meth:`step` of L levels at once, each with its own step and temperature: the
        drift and noise factors ``−η_l D⁻¹`` and ``sqrt(2 η_l τ_l) D^-½`` of every level are
        made once per (steps, temperatures) and kept on the metric."""
        for blk in self.blocks:
            if blk.weight in grads:
                rotated, scales = _in_eigenbasis(blk, grads)
                drift, noise = self._level_factors(blk.weight, lr, tau, *scales)
                xi = _block_noise(rotated, generator)
                _add_rotated_back(blk, rotated.mul_(drift).addcmul_(xi, noise), params)
        for name, (inv, inv_sqrt) in self.diag.items():
            if name in grads:
                g = grads[name]
                drift, noise = self._level_factors(name, lr, tau, inv.to(g.dtype), inv_sqrt)
                xi = torch.randn(g.shape, generator=generator, dtype=inv.dtype, device=inv.device)
                params[name].addcmul_(drift, g).addcmul_(noise, xi)

    def _level_factors(self, name: str, lr: tuple[float, ...], tau: tuple[float, ...],
                       inv: torch.Tensor, inv_sqrt: torch.Tensor):
        """``(−η_l inv, sqrt(2 η_l τ_l) inv_sqrt)`` stacked over the levels l (cached)."""
        cache = self.__dict__.setdefault("_levels", {})
        key = (name, lr, tau, inv.dtype, inv.device)
        if key not in cache:
            if len(cache) > 64:  # an adapting ladder: temperatures change round by round
                cache.clear()
            cache[key] = (torch.stack([-a * inv for a in lr]),
                          torch.stack([(2 * a * t) ** 0.5 * inv_sqrt for a, t in zip(lr, tau, strict=True)]))
        return cache[key]

    @torch.no_grad()
    def root(self, v: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``M^½ v`` for the tensors named in ``v``."""
        out = {}
        for blk in self.blocks:
            if blk.weight in v:
                x = blk.qg @ ((blk.qg.mT @ _joined(blk, v) @ blk.qa) * blk.inv_sqrt) @ blk.qa.mT
                out.update({n: d.to(v[n].dtype) for n, d in _split(blk, x)})
        for name, (_, inv_sqrt) in self.diag.items():
            if name in v:
                out[name] = v[name] * inv_sqrt.to(v[name].dtype)
        return out

    @property
    def stacked(self) -> bool:
        """Whether this is a :meth:`stack` of several chains' metrics."""
        return torch.is_tensor(self.damping)

    def _reference_dims(self, grads: dict[str, torch.Tensor]) -> tuple[str, int] | None:
        """A tensor named in ``grads`` and the number of dimensions one chain's gradient of
        it has (None if ``grads`` names none of this metric's tensors)."""
        for blk in self.blocks:
            if blk.weight in grads:
                return blk.weight, blk.precision.dim()
        return next(((n, p.dim()) for n, p in self.diag_precision.items() if n in grads), None)

    @classmethod
    def stack(cls, metrics: list[KroneckerMetric]) -> KroneckerMetric:
        """One metric for C chains from the C chains' own (each with its own damping): its
        tensors gain a leading dimension of C and :meth:`step` moves parameters (C, ...).
        The stack of one chain's metric is that metric (it steps a batch of one as its one
        chain, with the arithmetic of unbatched tensors)."""
        if len(metrics) == 1:
            return metrics[0]
        blocks = []
        for parts in zip(*(m.blocks for m in metrics), strict=True):
            blk = KroneckerBlock(parts[0].weight, parts[0].bias,
                                 *(torch.stack([getattr(b, k) for b in parts])
                                   for k in ("qa", "qg", "precision")))
            blk.inv, blk.inv_sqrt = (torch.stack([getattr(b, k) for b in parts])
                                     for k in ("inv", "inv_sqrt"))
            blocks.append(blk)
        out = cls.__new__(cls)
        out.blocks = blocks
        out.diag_precision = {n: torch.stack([m.diag_precision[n] for m in metrics])
                              for n in metrics[0].diag_precision}
        out.diag = {n: tuple(torch.stack([m.diag[n][i] for m in metrics]) for i in range(2))
                    for n in metrics[0].diag}
        out.damping = torch.tensor([float(m.damping) for m in metrics], dtype=torch.float64)
        return out

    def member(self, c: int) -> KroneckerMetric:
        """Chain ``c``'s metric out of a :meth:`stack` (views, no copies); one chain's
        metric is its own member 0."""
        if not self.stacked:
            if c != 0:
                raise ValueError(f"this is one chain's metric: it has no member {c}")
            return self
        out = self.__class__.__new__(self.__class__)
        out.blocks = []
        for blk in self.blocks:
            part = KroneckerBlock(blk.weight, blk.bias, blk.qa[c], blk.qg[c], blk.precision[c])
            part.inv, part.inv_sqrt = blk.inv[c], blk.inv_sqrt[c]
            out.blocks.append(part)
        out.diag_precision = {n: p[c] for n, p in self.diag_precision.items()}
        out.diag = {n: (inv[c], inv_sqrt[c]) for n, (inv, inv_sqrt) in self.diag.items()}
        out.damping = float(torch.as_tensor(self.damping).reshape(-1)[c])
        return out

    def check_groups(self, groups: dict[str, list[str]]) -> None:
        """Raise ValueError if a group splits a layer's weight from its bias: the metric
        couples the two, so a step of one alone would need another metric."""
        for blk in self.blocks:
            if blk.bias is None:
                continue
            for name, members in groups.items():
                if (blk.weight in members) != (blk.bias in members):
                    raise ValueError(f"group '{name}' holds only one of {blk.weight} and "
                                     f"{blk.bias}; a layer's weight and bias must share a group")


def _without_chain_dim(params: Params, grads: dict[str, torch.Tensor],
                       reference: tuple[str, int] | None):
    """``params`` and ``grads`` without their leading dimension (of size 1) where they
    carry one chain's tensors as a batch of one: ``reference`` (a name, its dimensions
    without it) tells whether they do. Views: an update of them writes the caller's
    tensors."""
    if reference is None or grads[reference[0]].dim() == reference[1]:
        return params, grads
    if grads[reference[0]].shape[0] != 1:
        raise ValueError("one chain's metric cannot step several chains: stack their metrics")
    return ({n: p.squeeze(0) for n, p in params.items()},
            {n: g.squeeze(0) for n, g in grads.items()})


def _in_eigenbasis(blk: KroneckerBlock, grads: dict[str, torch.Tensor]):
    """``(the layer's gradient in the metric's eigenbasis, (1 / (D + δ), its root))``: in
    float32 where the block is well enough conditioned, else in float64."""
    scales = _float32_scales(blk)
    if scales is None:  # an ill-conditioned block: rotate its gradient in float64
        return blk.qg.mT @ _joined(blk, grads) @ blk.qa, (blk.inv, blk.inv_sqrt)
    qg, qa = _single(blk)
    return qg.mT @ _joined(blk, grads, torch.float32) @ qa, scales


def _block_noise(rotated: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """ξ ~ N(0, I) shaped like ``rotated``, drawn in float32 (5x faster than float64)."""
    return torch.randn(rotated.shape, generator=generator, device=rotated.device).to(rotated.dtype)


def _add_rotated_back(blk: KroneckerBlock, move: torch.Tensor, params: Params) -> None:
    """Rotate a move out of the eigenbasis and add it to the layer's tensors, in place."""
    qg, qa = _single(blk)
    for name, d in _split(blk, qg @ move.float() @ qa.mT):
        params[name].add_(d.to(params[name].dtype))


def _single(blk: KroneckerBlock) -> tuple[torch.Tensor, torch.Tensor]:
    """The eigenbases in float32, for rotating a step back (kept on the block)."""
    cached = blk.__dict__.get("_single")
    if cached is None or cached[0].device != blk.qg.device:
        cached = (blk.qg.float(), blk.qa.float())
        blk.__dict__["_single"] = cached
    return cached


FLOAT32_CONDITION = 1e4
"""A block whose damped precisions ``D + δ`` span a smaller ratio than this is rotated in
float32 (:meth:`KroneckerMetric.step`). Rounding its eigenvectors (relative error ~1e-7)
leaks that fraction of the stiffest direction's curvature into the softest, where it counts
``ratio`` times over: below 1e4 ``M H`` changes by under ~1e-3. A damped DeepONet metric
spans ~40 (δ ≈ 5e5 against precisions up to ~2e7); an undamped metric of GRF-correlated
inputs spans 1e7 and more, and keeps float64 (see :class:`KroneckerBlock`)."""


def _float32_scales(blk: KroneckerBlock) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(1 / (D + δ), its root)`` in float32 when the block is well enough conditioned
    (:data:`FLOAT32_CONDITION`, over all its chains), else None; kept on the block until
    its damping changes."""
    cached = blk.__dict__.get("_float32")  # (device, scales or None)
    if cached is None or cached[0] != blk.inv.device:
        well = float(blk.inv.max() / blk.inv.min()) < FLOAT32_CONDITION
        cached = (blk.inv.device, (blk.inv.float(), blk.inv_sqrt.float()) if well else None)
        blk.__dict__["_float32"] = cached
    return cached[1]


def _joined(blk: KroneckerBlock, tensors: dict[str, torch.Tensor],
            dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``[W, b]`` (out, in+1) of a layer's tensors, in ``dtype``."""
    w = tensors[blk.weight].to(dtype)
    return w if blk.bias is None else torch.cat([w, tensors[blk.bias].to(dtype)[..., None]], dim=-1)


def _split(blk: KroneckerBlock, x: torch.Tensor):
    """``(name, part)`` of a joined ``[W, b]`` matrix."""
    if blk.bias is None:
        return [(blk.weight, x)]
    return [(blk.weight, x[..., :-1]), (blk.bias, x[..., -1])]


def estimate_kfac(energy, params: Params, batches, generator: torch.Generator,
                  samples: int = 16) -> KroneckerMetric:
    """The metric of the module docstring for a :class:`~bdeeponet.energy.GaussianEnergy`
    (it needs ``energy.model``, ``energy.y``, ``energy.noise_std`` and ``energy.prior_precision``).

    ``batches``: a list of ``(u, s)`` minibatches that together hold every training function
    once; ``samples``: Monte Carlo draws of the output noise for each of the two passes
    (the Kronecker factors, then the scales in their eigenbasis).
    """
    for attr in ("model", "y", "noise_std", "prior_precision"):
        if not hasattr(energy, attr):
            raise ValueError(f"the Kronecker metric needs a GaussianEnergy-like energy (no '{attr}')")
    model = energy.model
    linear = {name: mod for name, mod in model.named_modules() if isinstance(mod, nn.Linear)}
    covered = {f"{name}.{p}" for name, mod in linear.items() for p in ("weight", "bias")
               if getattr(mod, p) is not None}
    others = [n for n in params if n not in covered]

    # pass 1: the factors Ā (input second moments) and R·Ḡ (output-gradient second moments)
    factors: dict[str, list] = {}

    def gram(name, g):  # in float64: float32 sums blur the soft eigenvectors
        g = g.double()
        return g.t() @ g

    def add_factors(name, a, g_sum):
        a = a.double()
        f = factors.setdefault(name, [0.0, 0.0])
        f[0] = f[0] + a.t() @ a
        f[1] = f[1] + g_sum / samples

    if linear:  # (a network without linear layers has no factors: its metric is diagonal)
        _score_passes(energy, params, batches, generator, samples, linear, gram, add_factors,
                      None)
    bases = {}
    for name, (aa, gg) in factors.items():
        bases[name] = (torch.linalg.eigh(aa)[1], torch.linalg.eigh(gg)[1])

    # pass 2: the Fisher's diagonal in that eigenbasis (George et al. 2018), which corrects
    # K-FAC's assumption that inputs and output gradients are independent
    scales: dict[str, torch.Tensor] = {}

    def rotated_square(name, g):
        return (g.double() @ bases[name][1]).square()

    def add_scales(name, a, g2_sum):  # Σ_rows (g q_G)² ⊗ (a q_A)², the draws summed first
        term = g2_sum.t() @ (a.double() @ bases[name][0]).square() / samples
        scales[name] = term if name not in scales else scales[name].add_(term)

    diag_sq = {n: torch.zeros_like(params[n]) for n in others}
    _score_passes(energy, params, batches, generator, samples, linear, rotated_square, add_scales,
                  (others, diag_sq))
    blocks = []
    for name, (qa, qg) in bases.items():
        # a layer's weight and bias share one prior precision (see energy.fan_in_prior);
        # should they not, the larger keeps the metric from overshooting either
        d = scales[name] + max(energy.prior_precision(f"{name}.{p}") for p in ("weight", "bias")
                               if getattr(linear[name], p) is not None)
        bias = f"{name}.bias" if linear[name].bias is not None else None
        blocks.append(KroneckerBlock(f"{name}.weight", bias, qa, qg, d))
    diag = {n: diag_sq[n].double() / samples + energy.prior_precision(n) for n in others}
    return KroneckerMetric(blocks, diag)


def _score_passes(energy, params, batches, generator, samples, linear, per_draw, on_layer,
                  diag) -> None:
    """For each of ``batches``, one forward pass and ``samples`` backward passes, each
    backpropagating a draw of the likelihood's score (``∂L/∂output = ε/σ²``,
    ``ε ~ N(0, σ²)``). For every linear layer ``per_draw(name, g)`` of each draw's gradient
    with respect to the layer's output, ``g`` (rows, out), is summed over the draws, and
    then ``on_layer(name, [a, 1] (rows, in+1), that sum)`` is called once per batch: the
    layer's input does not depend on the draw. With ``diag = (names, sums)`` the squared
    gradients of those tensors are added to ``sums``."""
    model, sigma = energy.model, energy.noise_std
    inputs: dict[str, torch.Tensor] = {}
    sums: dict[str, torch.Tensor] = {}

    def add_draw(name, g):
        stat = per_draw(name, g.detach().reshape(-1, g.shape[-1]))
        sums[name] = stat if name not in sums else sums[name].add_(stat)

    def forward_hook(name):
        def hook(mod, args, output):
            a = args[0].detach().reshape(-1, mod.in_features)
            if mod.bias is not None:
                a = torch.cat([a, torch.ones(a.shape[0], 1, dtype=a.dtype, device=a.device)], dim=1)
            inputs[name] = a
            output.register_hook(lambda g: add_draw(name, g))
        return hook

    handles = [mod.register_forward_hook(forward_hook(name)) for name, mod in linear.items()]
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            p = {n: t.detach().clone().requires_grad_(True) for n, t in params.items()}
            out = functional_call(model, p, (batch[0], energy.y))
            sums.clear()
            for k in range(samples):
                eps = torch.randn(out.shape, generator=generator, dtype=out.dtype,
                                  device=out.device)
                # the gradient of every tensor, so that the backward reaches every layer
                grads = torch.autograd.grad((out * eps).sum() / sigma, list(p.values()),
                                            retain_graph=k + 1 < samples)
                if diag is not None:
                    grads = dict(zip(p, grads, strict=True))
                    for n in diag[0]:
                        diag[1][n].add_(grads[n].square())
            for name in linear:
                if name in sums:
                    on_layer(name, inputs[name], sums[name])
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)


def stiffness(energy, metric: KroneckerMetric, params: Params, batches, generator: torch.Generator,
              iters: int = 30) -> float:
    """The largest ``|λ|`` of ``M H`` (that of ``M^½ H M^½``) by Lanczos, ``H`` the
    Hessian of the energy (estimated on ``batches``, scaled to the N functions).

    The Kronecker metric approximates the Gauss-Newton part of ``H`` only. At the warm start
    of a DeepONet the residuals are not yet pure noise, and their curvature
    ``Σ r ∇²G / σ²`` reaches thousands of times the metric's precision in directions the
    data barely determine, with either sign; a Langevin step there overshoots and the
    chain explodes. :func:`tame` damps the metric until this number is small.
    """
    v = {n: torch.randn(params[n].shape, generator=generator, dtype=torch.float64,
                        device=params[n].device) for n in params}
    points = hessian_points(energy.y.shape[0], generator)
    return largest_magnitude(scaled_hessian(energy, metric, params, batches, points), v, iters)


HESSIAN_POINTS = 1024  # query points the stiffness is estimated on, at most


def hessian_points(n_points: int, generator: torch.Generator) -> torch.Tensor | None:
    """None (every query point) when there are at most ``HESSIAN_POINTS``; else that many
    distinct points drawn with ``generator``, on which the Hessian is estimated and scaled
    up by ``n_points / HESSIAN_POINTS``, an unbiased estimate."""
    if n_points <= HESSIAN_POINTS:
        return None
    return torch.randperm(n_points, generator=generator, device=generator.device)[:HESSIAN_POINTS]


def scaled_hessian(energy, metric: KroneckerMetric, params: Params, batches,
                   points: torch.Tensor | None = None):
    """The operator ``v -> M^½ H M^½ v`` (dicts of float64 tensors like ``params``), ``H``
    the Hessian of the energy at ``params`` estimated on ``batches`` (and on the query
    points ``points`` only, when given) and scaled to the N functions and P points (see
    :func:`stiffness`)."""
    model, sigma = copy.deepcopy(energy.model).double().eval(), energy.noise_std
    names = list(params)
    primals = tuple(params[n].detach().double() for n in names)
    us = torch.cat([b[0] for b in batches]).double()
    ss = torch.cat([b[1] for b in batches]).double()
    y = energy.y.double()
    scale = energy.n_total / us.shape[0]
    # a network that gives its whole grid whatever y is (reads_query_points False): its
    # output, not y, is cut to the drawn points
    whole_grid = points is not None and not getattr(model, "reads_query_points", True)
    if points is not None:
        points = points.to(y.device)
        scale *= y.shape[0] / points.numel()
        ss = ss[:, points]
        y = y if whole_grid else y[points]
    prec = [energy.prior_precision(n) for n in names]
    warm = getattr(model, "trunk_input", None)
    if warm is not None:  # fill the DeepONet's feature cache outside the transforms below
        warm(y)

    def u_hat(*ts):  # float64 throughout: the soft directions are 1e-5 of the stiff ones
        pred = functional_call(model, dict(zip(names, ts, strict=True)), (us, y))
        if whole_grid:
            pred = pred[..., points]
        prior = sum(0.5 * p * t.square().sum() for p, t in zip(prec, ts, strict=True))
        return prior + scale * (pred - ss).square().sum() / (2 * sigma**2)

    # The gradient's graph is built once; each Hessian-vector product is one backward pass
    # through it (double backward runs in C++; forward-over-reverse with torch.func ran
    # Python decompositions per operation and was ~10x slower on a small DeepONet).
    leaves = [t.clone().requires_grad_(True) for t in primals]
    with torch.enable_grad():
        grad = torch.autograd.grad(u_hat(*leaves), leaves, create_graph=True)

    def hvp(v):
        with torch.enable_grad():
            hv = torch.autograd.grad(grad, leaves, [v[n] for n in names], retain_graph=True)
        return dict(zip(names, hv, strict=True))

    return lambda x: metric.root(hvp(metric.root(x)))


def largest_magnitude(apply, v: dict[str, torch.Tensor], iters: int, tol: float = 1e-3) -> float:
    """``|λ|max`` of a symmetric operator, by Lanczos from ``v`` with full
    reorthogonalisation: the largest magnitude of the Ritz values (the eigenvalues of the
    tridiagonal projection), after at most ``iters`` products, stopping early once that
    Ritz value's residual is at most ``tol`` of it. An eigenvalue then lies that close, not
    always the largest: where the start holds little of the top direction, Lanczos can settle
    on the next one first (on synthetic damped-like spectra, 1 start in 10 read 4% low; 30
    power iterations read up to 7% low on the same).

    Ritz values lie inside the spectrum, so this never exceeds ``|λ|max`` and only grows with
    the iterations. Both ends are read: ``M^½ H M^½`` is indefinite away from the mode, and
    the stiffest directions can come in ± pairs of nearly equal size, where a Rayleigh
    quotient cancels towards 0 and a power iteration converges slowly (on Darcy 29 × 29 at
    the warm start, |λ| ≈ 967: 30 power iterations read 924–965, 20 Lanczos steps 963–967).
    Once the metric is damped, the stiffest direction stands alone and 5–8 steps suffice
    where the power iteration took its 30."""
    names = [n for n in v]
    shapes, sizes = [v[n].shape for n in names], [v[n].numel() for n in names]

    def flat(d):
        return torch.cat([d[n].reshape(-1) for n in names])

    q = flat(v)
    basis = [q / q.norm()]
    alpha, beta, lam = [], [], 0.0
    for j in range(iters):
        w = flat(apply(dict(zip(names, (t.view(s) for t, s in
                                        zip(basis[-1].split(sizes), shapes, strict=True)),
                                strict=True))))
        alpha.append(float(w @ basis[-1]))
        q = torch.stack(basis)
        for _ in range(2):  # twice is enough (Kahan): the basis stays orthonormal to rounding
            w = w - q.T @ (q @ w)
        b = float(w.norm())
        t = torch.diag(torch.tensor(alpha, dtype=torch.float64))
        if j:
            off = torch.tensor(beta, dtype=torch.float64)
            t += torch.diag(off, 1) + torch.diag(off, -1)
        theta, s = torch.linalg.eigh(t)
        end = 0 if abs(float(theta[0])) > abs(float(theta[-1])) else -1
        lam = abs(float(theta[end]))
        residual = b * abs(float(s[-1, end]))  # ||A x - θ x|| of the Ritz vector x
        if b <= 1e-12 * max(lam, 1e-300) or j + 1 == iters or (j >= 2 and residual <= tol * lam):
            break  # (an invariant subspace, the last product, or converged after three)
        beta.append(b)
        basis.append(w / b)
    return lam


def tame(energy, metric: KroneckerMetric, params: Params, batches, generator: torch.Generator,
         target: float = 4.0, rounds: int = 8, tolerance: float = 0.0) -> float:
    """Raise the metric's damping δ until ``|λ|max(M H) <= target (1 + tolerance)``; return
    the last measured value (the step is capped by it, so a value above ``target`` only
    shortens the step). A damped constant metric is still exact Langevin: it only slows the
    directions the data do not determine (their step shrinks from ``1/λ_prior`` to
    ``1/(λ_prior + δ)``), while the data-determined ones keep ``M H ≈ 1``.

    Where δ dominates the metric, λ falls as ``1/δ`` and each round lands just above the
    target (4.92, 4.04, 4.002, 4.0 on Darcy 29 × 29); a network whose rounds cost seconds
    each passes a ``tolerance`` to stop at the first of them."""
    lam = stiffness(energy, metric, params, batches, generator)
    for _ in range(rounds):
        if lam <= target * (1 + tolerance):
            break
        base = metric.damping or max(energy.prior_precision(n) for n in params)
        metric.set_damping(base * lam / target)
        lam = stiffness(energy, metric, params, batches, generator)
    return lam
