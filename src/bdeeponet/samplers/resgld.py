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
from .langevin import (
    Chain,
    Preconditioner,
    check_positive,
    energy_and_grads,
    freeze,
    langevin_update,
)
from .swap import RunningVariance, accept_swap, estimator_variance, paired_variance, swap_log_rate


@dataclass
class ReplicaState:
    chains: list[Chain]  # [cold, hot]: level k holds chains[k]
    preconds: list[Preconditioner | None]
    swap_var: RunningVariance  # Var(ΔÛ) on a shared minibatch
    replica_var: list[RunningVariance]  # σ_j² of each level's energy estimator
    n_swaps: int = 0
    n_steps: int = 0
    accelerated: bool = False  # m-reSGLD: the hot replica updates one group at a time


@dataclass(frozen=True)
class ReSGLD:
    """Cold (τ1, η1) and hot (τ2, η2) replicas with variance-corrected swaps."""

    lr: float = 1e-3
    lr_hot: float | None = None  # defaults to lr
    tau1: float = 1.0
    tau2: float = 10.0
    precondition: bool = True
    freeze_metric: bool = False  # True: constant preconditioner after burn-in
    var_smoothing: float = 0.1

    name = "resgld"

    def __post_init__(self):
        check_positive(lr=self.lr, lr_hot=self.hot_lr, tau1=self.tau1, tau2=self.tau2)
        if self.tau1 >= self.tau2:
            raise ValueError(f"tau1 must be < tau2, got tau1={self.tau1}, tau2={self.tau2}")

    @property
    def hot_lr(self) -> float:
        return self.lr if self.lr_hot is None else self.lr_hot

    def init(self, params: Params, params_hot: Params | None = None) -> ReplicaState:
        hot = params if params_hot is None else params_hot
        n = 2
        return ReplicaState(
            chains=[Chain(params, self.layout(params)), Chain(hot, self.layout(hot))],
            preconds=[Preconditioner() if self.precondition else None for _ in range(n)],
            swap_var=RunningVariance(self.var_smoothing),
            replica_var=[RunningVariance(self.var_smoothing) for _ in range(n)],
        )

    def hot_active(self, state: ReplicaState, generator: torch.Generator) -> list[str] | None:
        """Names the hot replica updates this step (None = all); m-reSGLD overrides it."""
        return None

    def layout(self, params: Params) -> list[str] | None:
        """Order of the tensors in each chain's flat buffer (None: as given)."""
        return None

    def step(self, state: ReplicaState, energy, batch, generator: torch.Generator) -> dict:
        cold, hot = state.chains
        active = self.hot_active(state, generator)
        v1, g1 = energy_and_grads(energy, cold.params, batch)
        v2, g2 = energy_and_grads(energy, hot.params, batch, active)
        var = state.swap_var.update(paired_variance(v1.terms, v2.terms, v1.scale, v1.n_total))
        for level, v in enumerate((v1, v2)):
            state.replica_var[level].update(estimator_variance(v.terms, v.scale, v.n_total))
        t1, t2 = self.tau1, self.tau2
        log_rate = swap_log_rate(float(v1.total.detach() - v2.total.detach()), var, t1, t2)
        swapped = accept_swap(log_rate, generator)
        if swapped:
            state.chains = [hot, cold]
            cold, hot = hot, cold
            g1, g2 = g2, g1
            if active is not None:  # the new cold particle only has a partial gradient
                _, g1 = energy_and_grads(energy, cold.params, batch)
                g2 = {n: g2[n] for n in active}
            state.n_swaps += 1
        for level, (chain, grads) in enumerate(((cold, g1), (hot, g2))):
            lr, tau = (self.lr, t1) if level == 0 else (self.hot_lr, t2)
            langevin_update(chain, grads, lr, tau, generator, state.preconds[level])
        state.n_steps += 1
        return {
            "energy": float(v1.total.detach()),
            "energy_hot": float(v2.total.detach()),
            "swapped": swapped,
            "swap_rate_estimate": math.exp(min(0.0, log_rate)),
        }

    def end_burn_in(self, state: ReplicaState) -> None:
        if self.precondition and self.freeze_metric:
            freeze(state.preconds)

    def sample(self, state: ReplicaState) -> Params:
        return state.chains[0].params
