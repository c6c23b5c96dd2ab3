"""Single-chain SGLD: the ablation of replica exchange (Welling & Teh 2011).

At the defaults (``metric="kfac"``) a run has two phases. Burn-in optimises (Adam towards
the MAP, :class:`~.langevin.WarmStart`); :meth:`SGLD.end_burn_in` then estimates a constant
Kronecker-factored metric (:mod:`.kfac`) and anchors the control-variate gradient
(:mod:`.control_variate`) at that point, and sampling runs
``θ ← θ − η M ĝ + sqrt(2 η τ) M^½ ξ``. This is what makes the band the posterior's at the
paper's scale (tests/samplers/test_closed_form.py). ``metric="rmsprop"`` is the earlier
pSGLD (adaptive diagonal metric, noisy from the first step, no control variate) and
``metric="identity"`` the paper's plain step (3.4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..energy import Params
from .control_variate import ControlVariate
from .graph import CapturedStep, captured, graphs_available
from .kfac import KroneckerMetric, estimate_kfac, stiffness, tame
from .langevin import (
    Chain,
    Preconditioner,
    WarmStart,
    check_positive,
    energy_and_grads,
    freeze,
    langevin_update,
)

METRICS = ("kfac", "rmsprop", "identity")
DEFAULT_LR = {"kfac": 0.05, "rmsprop": 3e-4, "identity": 1e-6}


@dataclass(frozen=True)
class LangevinSettings:
    """What every SG-MCMC sampler shares: the metric, the step and the warm start.

    ``lr``: the Langevin step η (None: 0.05 for the Kronecker metric, in units in which the
    preconditioned posterior has unit curvature; 3e-4 for RMSprop). ``warm_lr`` and
    ``warm_steps``: Adam's step during burn-in and the number of burn-in steps over which it
    decays (None: constant). ``control_variate``: anchor the gradient at the warm start.
    ``fisher_samples``: Monte Carlo draws for the metric.
    """

    lr: float | None = None
    metric: str = "kfac"
    freeze_metric: bool = False  # RMSprop only: constant after burn-in
    warm_lr: float = 3e-3
    warm_steps: int | None = None
    control_variate: bool = False
    fisher_samples: int = 16
    max_stiffness: float = 0.2  # kfac: the step is capped at max_stiffness / λ_max(M H)
    cuda_graph: bool = True  # kfac on a CUDA device: replay the sampling step from a graph

    def check(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric '{self.metric}'; choose one of: {', '.join(METRICS)}")
        check_positive(lr=self.step_size, warm_lr=self.warm_lr, fisher_samples=self.fisher_samples)

    @property
    def step_size(self) -> float:
        return DEFAULT_LR[self.metric] if self.lr is None else self.lr

    @property
    def warm_start(self) -> bool:
        return self.metric == "kfac"

    def preconditioner(self) -> Preconditioner | None:
        return Preconditioner() if self.metric == "rmsprop" else None


@dataclass
class Sampling:
    """The sampling phase's constant pieces, set by ``end_burn_in`` (kfac metric only)."""

    metric: KroneckerMetric | None = None
    cv: ControlVariate | None = None
    max_lr: float = float("inf")  # the step cap from the metric's measured stiffness
    stiffness: float = float("nan")  # λ_max(M H) at the warm start


def start_sampling(settings: LangevinSettings, chain: Chain, energy, data, generator) -> Sampling:
    """Estimate the metric and anchor the control variate at ``chain`` (the warm start)."""
    if energy is None or data is None or generator is None:
        raise ValueError("end_burn_in needs the energy, the training data (u, s) and the "
                         "generator to estimate the metric (metric='kfac')")
    batches = metric_batches(data)
    metrics, lams = [], []
    for c in range(chain.n_chains):  # each chain's own metric at its own warm start
        params = {n: p[c] for n, p in chain.params.items()}
        metrics.append(estimate_kfac(energy, params, batches, generator, settings.fisher_samples))
        lams.append(tame(energy, metrics[-1], params, curvature_batches(energy, batches),
                         generator, tolerance=_network(energy, "stiffness_tolerance", 0.0)))
    metric, lam = KroneckerMetric.stack(metrics), max(lams)
    cv = ControlVariate.at(energy, chain, data) if settings.control_variate else None
    return Sampling(metric, cv, settings.max_stiffness / lam, lam)


def metric_batches(data) -> list:
    """The training data ``(u, s)`` in batches of 100 functions: the metric is estimated
    on all of them, the stiffness (:func:`~.kfac.stiffness`) on the first few hundred
    (:func:`curvature_batches`)."""
    u, s = data
    return [(u[i : i + 100], s[i : i + 100]) for i in range(0, u.shape[0], 100)]


CURVATURE_FUNCTIONS = 300  # the functions the stiffness is estimated on, by default


def curvature_batches(energy, batches: list) -> list:
    """The first functions of ``batches`` that the stiffness is estimated on:
    ``CURVATURE_FUNCTIONS``, or as many as the network's ``curvature_functions`` says (a
    network whose Hessian-vector product is costly asks for fewer; the estimate is scaled
    to the N functions either way)."""
    n = _network(energy, "curvature_functions", CURVATURE_FUNCTIONS)
    out = []
    for u, s in batches:
        if n <= 0:
            break
        out.append((u[:n], s[:n]))
        n -= u.shape[0]
    return out


def _network(energy, name: str, default):
    """The energy's network's attribute ``name`` (the networks' protocol), else ``default``."""
    return getattr(getattr(energy, "model", None), name, default)


def sampling_report(settings: LangevinSettings, sampling: Sampling | None) -> dict:
    """The Kronecker metric's stiffness λ_max(M H) at the warm start, the step used, the
    damping and what it does to the directions only the prior constrains."""
    if sampling is None:
        return {}
    step = min(settings.step_size, sampling.max_lr)
    return {"metric_stiffness": sampling.stiffness, "langevin_step": step,
            "metric_damping": float(torch.as_tensor(sampling.metric.damping).max()),
            "prior_relaxation_steps": prior_relaxation_steps(sampling.metric, step)}


def end_stiffness(state, energy, data, generator: torch.Generator) -> float | None:
    """``λ_max(M H)`` at the cold chains' last position under the sampling metric, the
    largest over the C chains (None before sampling or without the Kronecker metric).

    The metric and its damping are fixed at the warm start, where ``tame`` made this
    number at most about 4 and capped the step at ``max_stiffness / λ``. It grows as a
    chain drifts away from the warm start (``benchmarks/curvature.py`` follows one chain;
    docs/samplers.md); once ``η λ`` passes 2 a step overshoots and the chain diverges, so
    a run reports where it ended. Lanczos reads ``|λ|max`` from below, so this can
    be low, not high. The hot replicas of reSGLD are not measured."""
    sampling = getattr(state, "sampling", None)
    if sampling is None or sampling.metric is None:
        return None
    chain = state.chain if hasattr(state, "chain") else state.chains[0]
    batches = curvature_batches(energy, metric_batches(data))
    return max(stiffness(energy, sampling.metric.member(c), {n: p[c] for n, p in chain.params.items()},
                         batches, generator) for c in range(chain.n_chains))


def prior_relaxation_steps(metric: KroneckerMetric, step: float) -> float:
    """Iterations over which a direction that only the prior constrains relaxes under the
    damped metric: ``1 / (η M H)`` with ``M H = λ / (λ + δ)`` there, λ the prior precision of
    most parameters (each layer block's smallest precision, the median over parameters) and
    δ the damping (the largest of the chains'). Undamped it is ``1/η``; what it is on the
    paper's grid, against the epochs a run samples, is in docs/samplers.md. Tensors outside
    a linear layer count too."""
    precisions = [b.precision for b in metric.blocks] + list(metric.diag_precision.values())
    floors = sorted((float(p.min()), p.numel()) for p in precisions)
    sizes = np.cumsum([n for _, n in floors])
    lam = floors[int(np.searchsorted(sizes, sizes[-1] / 2))][0]
    damping = float(torch.as_tensor(metric.damping).max())
    return (lam + damping) / (step * lam)


def gradients(energy, chain: Chain, batch, active, sampling: Sampling | None, index):
    """``(Û, ĝ)``: the minibatch energy and its (control-variate) gradient for ``active``."""
    value, grads = energy_and_grads(energy, chain.params, batch, active)
    if sampling is not None and sampling.cv is not None:
        if index is None:
            raise ValueError("the control variate needs the batch's row numbers (index=...)")
        grads = sampling.cv.correct(chain, grads, index)
    return value, grads


def move(chain: Chain, grads, lr: float, tau: float, generator, precond, sampling) -> None:
    """One Langevin step of ``chain`` with the Kronecker metric or the diagonal one."""
    if sampling is not None:
        sampling.metric.step(chain.params, grads, min(lr, sampling.max_lr), tau, generator)
        chain.step += 1
    else:
        langevin_update(chain, grads, lr, tau, generator, precond)


@dataclass
class SGLDState:
    chain: Chain
    precond: Preconditioner | None
    warm: WarmStart | None = None
    sampling: Sampling | None = None


@dataclass(frozen=True)
class SGLD(LangevinSettings):
    """One chain at temperature ``tau`` (see the module docstring for the phases)."""

    tau: float = 1.0

    name = "sgld"
    draws_samples = True

    def __post_init__(self):
        self.check()
        check_positive(tau=self.tau)

    def report(self, state: SGLDState) -> dict:
        """What a run's ``metrics.json`` records of the sampler (see :func:`sampling_report`)."""
        return sampling_report(self, state.sampling)

    def init(self, params: Params, chains: int | None = None) -> SGLDState:
        """The state at ``params``; with ``chains=C``, C chains whose tensors in ``params``
        have a leading dimension of C (see :class:`~.langevin.Chain`)."""
        chain = Chain(params, chains=chains)
        warm = WarmStart(chain, self.warm_lr, self.warm_steps) if self.warm_start else None
        return SGLDState(chain, self.preconditioner(), warm)

    def step(self, state: SGLDState, energy, batch, generator: torch.Generator,
             index: torch.Tensor | None = None) -> dict:
        """One update on ``batch = (u, s)``; ``index``: the batch's row numbers in the
        training data (needed by the control variate after burn-in)."""
        if state.sampling is None and state.warm is not None:
            value, grads = energy_and_grads(energy, state.chain.params, batch)
            state.warm.step(state.chain, grads)
        elif (step := self._captured(state, energy, batch, generator)) is not None:
            state.chain.step += 1
            return {"energy": step(batch)}  # a device tensor: the loop reads it once an epoch
        else:
            value, grads = gradients(energy, state.chain, batch, None, state.sampling, index)
            move(state.chain, grads, self.step_size, self.tau, generator, state.precond,
                 state.sampling)
        return {"energy": float(value.total.detach().mean())}

    def _captured(self, state: SGLDState, energy, batch, generator) -> CapturedStep | None:
        """The sampling step recorded in a CUDA graph (see :mod:`.graph`): with the Kronecker
        metric, without the control variate, on a CUDA device, unless ``cuda_graph`` is off."""
        sampling, chain = state.sampling, state.chain
        if not (self.cuda_graph and sampling is not None and sampling.cv is None
                and graphs_available(chain.flat)):
            return None
        lr = min(self.step_size, sampling.max_lr)

        def arithmetic(u, s):
            value, grads = energy_and_grads(energy, chain.params, (u, s))
            sampling.metric.step(chain.params, grads, lr, self.tau, generator)
            return value.total.detach().mean()

        cache = state.__dict__.setdefault("_graphs", {})  # "_": not checkpointed
        key = tuple(tuple(t.shape) for t in batch)
        return captured(cache, key, lambda: CapturedStep(arithmetic, batch, chain.flat, generator))

    def end_burn_in(self, state: SGLDState, energy=None, data=None, generator=None) -> None:
        """Start sampling. With the Kronecker metric this needs the ``energy``, all training
        ``data = (u, s)`` and the ``generator`` (for the metric's Monte Carlo draws)."""
        if self.warm_start:
            if state.sampling is not None:  # already sampling (a resumed run)
                return
            state.sampling = start_sampling(self, state.chain, energy, data, generator)
            state.warm = None
        elif state.precond is not None and self.freeze_metric:
            freeze([state.precond])

    def sample(self, state: SGLDState) -> Params:
        """The chain's parameters, in the form ``init`` was given them."""
        return state.chain.as_given()
