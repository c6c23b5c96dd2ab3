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
    accept_swaps,
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

    def init(self, params: Params, chains: int | None = None) -> ReplicaState:
        """Both replicas at ``params``; with ``chains=C``, C independent pairs of replicas,
        the tensors of ``params`` with a leading dimension of C (see
        :class:`~.langevin.Chain`): each level is one batch of C particles, pair c is row c
        of both."""
        chains = [Chain(params, self.layout(params), chains) for _ in range(2)]
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
            e = float(value.total.detach().mean())
            return {"energy": e, "energy_hot": e}
        cold, hot = state.chains
        active = self.hot_active(state, generator)
        v1, g1 = gradients(energy, cold, batch, None, state.sampling, index)
        v2, g2 = gradients(energy, hot, batch, active, state.sampling, index)
        var = state.swap_var.update(paired_variance(v1.terms, v2.terms, v1.scale, v1.n_total))
        for level, v in enumerate((v1, v2)):
            state.replica_var[level].update(estimator_variance(v.terms, v.scale, v.n_total))
        t1, t2 = self.tau1, self.tau2
        if cold.n_chains is not None:
            return self._batched_step(state, energy, batch, generator, index, active,
                                      (v1, g1), (v2, g2), var)
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
        self._move(state, g1, g2, generator)
        return {
            "energy": float(v1.total.detach()),
            "energy_hot": float(v2.total.detach()),
            "swapped": swapped,
            "swap_rate_estimate": math.exp(min(0.0, log_rate)),
        }

    def _move(self, state: ReplicaState, g1, g2, generator) -> None:
        """Both levels' Langevin steps from the particles they now hold."""
        for level, grads in enumerate((g1, g2)):
            lr, tau = (self.step_size, self.tau1) if level == 0 else (self.hot_lr, self.tau2)
            move(state.chains[level], grads, lr, tau, generator, state.preconds[level],
                 state.sampling)
        state.n_steps += 1

    def _batched_step(self, state: ReplicaState, energy, batch, generator, index, active,
                      cold_eval, hot_eval, var) -> dict:
        """The swaps and moves of C pairs at once: pair c swaps its two rows when its own
        variance-corrected test accepts (the levels keep their objects; rows are copied)."""
        (v1, g1), (v2, g2) = cold_eval, hot_eval
        cold, hot = state.chains
        delta = (v1.total - v2.total).detach().double()
        log_rate = swap_log_rate(delta, var, self.tau1, self.tau2)
        state.log_rate_sum = state.log_rate_sum + log_rate.clamp(max=0.0)
        state.energy_gap_sum = state.energy_gap_sum - delta
        swapped = accept_swaps(log_rate, generator)
        n_swapped = int(swapped.sum())
        if n_swapped:
            rows = swapped.nonzero()[:, 0]
            held = cold.flat[rows].clone()
            cold.flat[rows] = hot.flat[rows]
            hot.flat[rows] = held

            def exchange(a, b):  # rows of b where the pair swapped, of a elsewhere
                return {n: torch.where(swapped.view(-1, *[1] * (a[n].dim() - 1)), b[n], a[n])
                        for n in a}

            if active is None:
                g1, g2 = exchange(g1, g2), exchange(g2, g1)
            else:  # the new cold particles only have a partial gradient: recompute them
                g2 = exchange(g2, {n: g1[n] for n in active})
                _, g1 = gradients(energy, cold, batch, None, state.sampling, index)
            state.n_swaps += n_swapped
        self._move(state, g1, g2, generator)
        return {
            "energy": float(v1.total.detach().mean()),
            "energy_hot": float(v2.total.detach().mean()),
            "swapped": n_swapped / len(swapped),
            "swap_rate_estimate": float(log_rate.clamp(max=0.0).exp().mean()),
        }

    def report(self, state: ReplicaState) -> dict:
        """What a run's ``metrics.json`` records of the sampler: the metric's stiffness and
        step, the swap rate, the swap report, and the energy estimators' sd (σ1, σ2 and
        sd(ΔÛ), as tracked online for the swap, paper Section 3.2)."""
        return {
            **sampling_report(self, state.sampling),
            "swap_rate": state.n_swaps / (max(state.n_steps, 1) * (state.chains[0].n_chains or 1)),
            "swap": self.swap_report(state),
            "energy_estimator_sd": {  # (the mean over pairs of C chains)
                "cold": _mean(state.replica_var[0].value) ** 0.5,
                "hot": _mean(state.replica_var[1].value) ** 0.5,
                "difference": _mean(state.swap_var.value) ** 0.5,
            },
        }

    def swap_report(self, state: ReplicaState) -> dict:
        """Measured swap acceptance beside the one a d-dimensional Gaussian posterior
        predicts, with d the number of parameters and with the effective d implied by the
        measured mean energy gap between the replicas (``E[U2 − U1] = d_eff (τ2 − τ1)/2``)."""
        d = state.chains[0].flat.shape[-1]
        pairs = state.chains[0].n_chains or 1
        n = max(state.n_steps, 1) * pairs  # swap attempts, over all pairs
        var = _mean(state.swap_var.value)
        gap = _mean(state.energy_gap_sum) * pairs / n
        log_rate_sum = _mean(state.log_rate_sum) * pairs
        d_eff = max(2 * gap / (self.tau2 - self.tau1), 0.0)
        return {
            "measured": state.n_swaps / n,
            "mean_acceptance": math.exp(log_rate_sum / n) if log_rate_sum > -700 * n else 0.0,
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


def _mean(x) -> float:
    """A number (0 for None), or the mean of a tensor of C pairs' numbers."""
    if x is None:
        return 0.0
    return float(x.mean()) if isinstance(x, torch.Tensor) else float(x)
