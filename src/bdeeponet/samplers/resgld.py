"""Replica-exchange SGLD, the paper's Algorithm 1 (with the printed typos corrected).

Two particles at temperatures τ1 < τ2 follow the Langevin step of :mod:`.langevin`, each
with its own step size and preconditioner. Every iteration both energies are evaluated on
the same minibatch (the forward pass that also gives the gradients); the pair is swapped
with the variance-corrected rate of :mod:`.swap` and then each temperature level moves from
the particle it now holds. Alternating a swap kernel and a Langevin kernel, each of which
leaves ``π(θ¹, θ²) ∝ exp(−U(θ¹)/τ1 − U(θ²)/τ2)`` invariant, is the same target as the paper's
"move, then swap" order and costs no extra forward pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..energy import Params
from .langevin import Chain, Preconditioner, WarmStart, check_positive, energy_and_grads, freeze
from .sgld import LangevinSettings, Sampling, gradients, move, sampling_report, start_sampling
from .swap import (
    RunningVariance,
    accept_swap,
    communication_barrier,
    estimator_variance,
    paired_variance,
    predicted_swap_rate,
    swap_log_rate,
)


@dataclass
class ReplicaState:
    chains: list[Chain]  # [cold, hot]: level k holds chains[k]
    preconds: list[Preconditioner | None]
    swap_var: RunningVariance  # Var(ΔÛ) on a shared minibatch
    replica_var: list[RunningVariance]  # σ_j² of each level's energy estimator
    n_swaps: int = 0
    n_steps: int = 0  # sampling steps (swap attempts)
    accelerated: bool = False  # m-reSGLD: the hot replica updates one group at a time
    warm: WarmStart | None = None
    sampling: Sampling | None = None
    log_rate_sum: float = 0.0  # Σ min(0, log r̂) over the swap attempts
    energy_gap_sum: float = 0.0  # Σ (Û_hot − Û_cold) over the swap attempts


@dataclass(frozen=True)
class ReSGLD(LangevinSettings):
    """Cold (τ1, η1) and hot (τ2, η2) replicas with variance-corrected swaps.

    With the default Kronecker metric, burn-in optimises the cold replica alone (the warm
    start); at :meth:`end_burn_in` the hot replica starts from the same point and both
    share the metric and the control variate (see :mod:`.sgld`).
    """

    lr_hot: float | None = None  # defaults to lr
    tau1: float = 1.0
    tau2: float = 10.0
    var_smoothing: float = 0.1

    name = "resgld"
    draws_samples = True

    def __post_init__(self):
        self.check()
        check_positive(lr_hot=self.hot_lr, tau1=self.tau1, tau2=self.tau2)
        if self.tau1 >= self.tau2:
            raise ValueError(f"tau1 must be < tau2, got tau1={self.tau1}, tau2={self.tau2}")

    @property
    def hot_lr(self) -> float:
        return self.step_size if self.lr_hot is None else self.lr_hot

    def init(self, params: Params, params_hot: Params | None = None) -> ReplicaState:
        hot = params if params_hot is None else params_hot
        chains = [Chain(params, self.layout(params)), Chain(hot, self.layout(hot))]
        return ReplicaState(
            chains=chains,
            preconds=[self.preconditioner() for _ in range(2)],
            swap_var=RunningVariance(self.var_smoothing),
            replica_var=[RunningVariance(self.var_smoothing) for _ in range(2)],
            warm=WarmStart(chains[0], self.warm_lr, self.warm_steps) if self.warm_start else None,
        )

    def hot_active(self, state: ReplicaState, generator: torch.Generator) -> list[str] | None:
        """Names the hot replica updates this step (None = all); m-reSGLD overrides it."""
        return None

    def layout(self, params: Params) -> list[str] | None:
        """Order of the tensors in each chain's flat buffer (None: as given)."""
        return None

    def step(self, state: ReplicaState, energy, batch, generator: torch.Generator,
             index: torch.Tensor | None = None) -> dict:
        """One update on ``batch = (u, s)``; ``index``: the batch's row numbers in the
        training data (needed by the control variate after burn-in)."""
        if state.sampling is None and state.warm is not None:  # burn-in: optimise the cold one
            value, grads = energy_and_grads(energy, state.chains[0].params, batch)
            state.warm.step(state.chains[0], grads)
            e = float(value.total.detach())
            return {"energy": e, "energy_hot": e}
        cold, hot = state.chains
        active = self.hot_active(state, generator)
        v1, g1 = gradients(energy, cold, batch, None, state.sampling, index)
        v2, g2 = gradients(energy, hot, batch, active, state.sampling, index)
        var = state.swap_var.update(paired_variance(v1.terms, v2.terms, v1.scale, v1.n_total))
        for level, v in enumerate((v1, v2)):
            state.replica_var[level].update(estimator_variance(v.terms, v.scale, v.n_total))
        t1, t2 = self.tau1, self.tau2
        delta = float(v1.total.detach() - v2.total.detach())
        log_rate = swap_log_rate(delta, var, t1, t2)
        state.log_rate_sum += min(0.0, log_rate)
        state.energy_gap_sum += -delta
        swapped = accept_swap(log_rate, generator)
        if swapped:
            state.chains = [hot, cold]
            cold, hot = hot, cold
            g1, g2 = g2, g1
            if active is not None:  # the new cold particle only has a partial gradient
                _, g1 = gradients(energy, cold, batch, None, state.sampling, index)
                g2 = {n: g2[n] for n in active}
            state.n_swaps += 1
        for level, (chain, grads) in enumerate(((cold, g1), (hot, g2))):
            lr, tau = (self.step_size, t1) if level == 0 else (self.hot_lr, t2)
            move(chain, grads, lr, tau, generator, state.preconds[level], state.sampling)
        state.n_steps += 1
        return {
            "energy": float(v1.total.detach()),
            "energy_hot": float(v2.total.detach()),
            "swapped": swapped,
            "swap_rate_estimate": math.exp(min(0.0, log_rate)),
        }

    def report(self, state: ReplicaState) -> dict:
        """What a run's ``metrics.json`` records of the sampler: the metric's stiffness and
        step, the swap rate, the swap report, and the energy estimators' sd (σ1, σ2 and
        sd(ΔÛ), as tracked online for the swap, paper Section 3.2)."""
        return {
            **sampling_report(self, state.sampling),
            "swap_rate": state.n_swaps / max(state.n_steps, 1),
            "swap": self.swap_report(state),
            "energy_estimator_sd": {
                "cold": (state.replica_var[0].value or 0.0) ** 0.5,
                "hot": (state.replica_var[1].value or 0.0) ** 0.5,
                "difference": (state.swap_var.value or 0.0) ** 0.5,
            },
        }

    def swap_report(self, state: ReplicaState) -> dict:
        """Measured swap acceptance beside the one a d-dimensional Gaussian posterior
        predicts, with d the number of parameters and with the effective d implied by the
        measured mean energy gap between the replicas (``E[U2 − U1] = d_eff (τ2 − τ1)/2``)."""
        d = state.chains[0].flat.numel()
        n = max(state.n_steps, 1)
        var = state.swap_var.value or 0.0
        gap = state.energy_gap_sum / n
        d_eff = max(2 * gap / (self.tau2 - self.tau1), 0.0)
        return {
            "measured": state.n_swaps / n,
            "mean_acceptance": math.exp(state.log_rate_sum / n) if state.log_rate_sum > -700 * n
            else 0.0,
            "predicted": predicted_swap_rate(d, self.tau1, self.tau2, var),
            "predicted_from_gap": predicted_swap_rate(d_eff, self.tau1, self.tau2, var),
            "parameters": d,
            "effective_dimension": d_eff,
            "mean_energy_gap": gap,
            "barrier": communication_barrier(d, self.tau1, self.tau2),
        }

    def end_burn_in(self, state: ReplicaState, energy=None, data=None, generator=None) -> None:
        """Start sampling (see :meth:`SGLD.end_burn_in <.sgld.SGLD.end_burn_in>`)."""
        if self.warm_start:
            if state.sampling is not None:  # already sampling (a resumed run)
                return
            cold, hot = state.chains
            hot.flat.copy_(cold.flat)
            state.sampling = start_sampling(self, cold, energy, data, generator)
            state.warm = None
        elif self.metric == "rmsprop" and self.freeze_metric:
            freeze(state.preconds)

    def sample(self, state: ReplicaState) -> Params:
        return state.chains[0].params
