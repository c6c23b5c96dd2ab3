"""Replica-exchange SGLD, the paper's Algorithm 1 (with the printed typos corrected), and its
ladder of K >= 2 replicas.

Particles at temperatures τ_0 = τ1 < ... < τ_{K-1} = τ2 follow the Langevin step of
:mod:`.langevin`, each level with its own step size and preconditioner. Every iteration all
energies are evaluated on the same minibatch (the forward pass that also gives the
gradients); neighbouring levels are swapped with the variance-corrected rate of :mod:`.swap`
and then each level moves from the particle it now holds. Alternating a swap kernel and a
Langevin kernel, each of which leaves ``π(θ_0, ..., θ_{K-1}) ∝ Π_k exp(−U(θ_k)/τ_k)``
invariant, is the same target as the paper's "move, then swap" order and costs no extra
forward pass. All levels' particles live in one batch (``ReplicaState.together``, each
level a view of its rows): with the Kronecker metric and no control variate one pass over
that batch gives every energy and gradient and one metric step moves every level at its own
step and temperature. m-reSGLD's hot half-steps share that pass where the energy allows it
(the DeepONet's hand-written gradient, groups of whole nets): the net they do not train is
walked back over the cold level's rows only, and moved on the cold level only.

With K = 2 (the paper's algorithm) the pair is offered a swap every step. With K > 2 the
swaps follow the deterministic even-odd scheme of non-reversible parallel tempering (Syed,
Bouchard-Côté, Deligiannidis & Doucet 2022): pairs (k, k+1) with k even on even steps, k odd
on odd steps, so that a replica travels the ladder in one direction for long stretches. The
ladder starts geometric; with ``adapt_steps`` it is re-spaced in rounds of doubling length
(as Pigeons.jl does) so that every pair has the same rejection rate: the cumulative
rejection Λ(β) over β = 1/τ is interpolated and β placed at equal steps of it. Only the
intermediate temperatures move, so the coldest level samples the posterior throughout.
The report gives each pair's acceptance, the estimated barrier Λ (the sum of the pairs'
mean rejection probabilities) and the number of round trips (a replica going from the
coldest level to the hottest and back).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..energy import EnergyValue, Params
from .langevin import (
    Chain,
    Preconditioner,
    WarmStart,
    check_positive,
    energy_and_grads,
    freeze,
    level_rows,
    skips_partial_backward,
)
from .sgld import LangevinSettings, Sampling, gradients, move, sampling_report, start_sampling
from .swap import (
    RunningVariance,
    accept_swaps,
    communication_barrier,
    estimator_variance,
    paired_variance,
    predicted_swap_rate,
    swap_log_rate,
)


@dataclass
class ReplicaState:
    chains: list[Chain]  # level k holds chains[k]; level 0 (the coldest) is the posterior
    preconds: list[Preconditioner | None]  # one per level
    swap_var: list[RunningVariance]  # Var(ΔÛ) of each neighbouring pair on a shared minibatch
    replica_var: list[RunningVariance]  # σ_k² of each level's energy estimator
    taus: list[float]  # the ladder
    together: Chain | None = None  # all levels' particles, one batch: chains[k] views its rows
    n_steps: int = 0  # sampling steps
    accelerated: bool = False  # m-reSGLD: the hot replicas update one group at a time
    warm: WarmStart | None = None
    sampling: Sampling | None = None
    log_rate_sum: float = 0.0  # Σ min(0, log r̂) over the attempts of pair (0, 1)
    energy_gap_sum: float = 0.0  # Σ (Û_1 − Û_0) over the attempts of pair (0, 1)
    attempts: list[int] = field(default_factory=list)  # per pair, counting C chains
    accepted: list[int] = field(default_factory=list)  # per pair
    rejection: list[float] = field(default_factory=list)  # per pair: Σ (1 − min(1, r̂))
    labels: list[list[int]] = field(default_factory=list)  # [level][chain]: replica held
    last_end: list[list[int]] = field(default_factory=list)  # [replica][chain]: 0 cold, 1 hot
    round_trips: int = 0
    round_rejection: list[float] = field(default_factory=list)  # this adaptation round's
    round_attempts: list[int] = field(default_factory=list)
    round_length: int = 0  # steps of the current adaptation round
    round_left: int = 0  # its steps still to take
    adapt_left: int = 0  # adaptation steps still to take

    @property
    def n_swaps(self) -> int:
        """Accepted swaps, all pairs (and all C chains)."""
        return sum(self.accepted)


@dataclass(frozen=True)
class ReSGLD(LangevinSettings):
    """``replicas`` levels from τ1 (the posterior) to τ2 with variance-corrected swaps
    (K = 2: the paper's cold and hot replicas). The cold level steps with ``lr``, the others
    with ``lr_hot``. ``adapt_steps``: sampling steps over which the ladder is adapted.

    With the default Kronecker metric, burn-in optimises the cold replica alone (the warm
    start); at :meth:`end_burn_in` the other levels start from the same point and all
    share the metric and the control variate (see :mod:`.sgld`).
    """

    lr_hot: float | None = None  # defaults to lr
    tau1: float = 1.0
    tau2: float = 10.0
    var_smoothing: float = 0.1
    replicas: int = 2
    adapt_steps: int = 0

    name = "resgld"
    draws_samples = True

    def __post_init__(self):
        self.check()
        check_positive(lr_hot=self.hot_lr, tau1=self.tau1, tau2=self.tau2)
        if self.tau1 >= self.tau2:
            raise ValueError(f"tau1 must be < tau2, got tau1={self.tau1}, tau2={self.tau2}")
        if self.replicas < 2:
            raise ValueError(f"replicas must be >= 2, got {self.replicas}")
        if self.adapt_steps < 0:
            raise ValueError(f"adapt_steps must be >= 0, got {self.adapt_steps}")

    @property
    def hot_lr(self) -> float:
        return self.step_size if self.lr_hot is None else self.lr_hot

    def ladder(self) -> list[float]:
        """The initial ladder: geometric from τ1 to τ2."""
        k = self.replicas - 1
        return [self.tau1 * (self.tau2 / self.tau1) ** (i / k) for i in range(k + 1)]

    def init(self, params: Params, chains: int | None = None) -> ReplicaState:
        """All replicas at ``params``; with ``chains=C``, C independent ladders, the tensors
        of ``params`` with a leading dimension of C (see :class:`~.langevin.Chain`): each
        level is one batch of C particles, ladder c is row c of every level."""
        K, width = self.replicas, chains or 1
        batch = params if chains else {n: p.unsqueeze(0) for n, p in params.items()}
        tiled = {n: p.repeat(K, *[1] * (p.dim() - 1)) for n, p in batch.items()}
        together = Chain(tiled, self.layout(params), K * width)
        together.single = chains is None  # (sample gives the cold level as init was given)
        levels = [together.rows(k, width) for k in range(K)]
        return ReplicaState(
            chains=levels, together=together,
            preconds=[self.preconditioner() for _ in range(K)],
            swap_var=[RunningVariance(self.var_smoothing) for _ in range(K - 1)],
            replica_var=[RunningVariance(self.var_smoothing) for _ in range(K)],
            taus=self.ladder(),
            warm=WarmStart(levels[0], self.warm_lr, self.warm_steps) if self.warm_start else None,
            attempts=[0] * (K - 1), accepted=[0] * (K - 1), rejection=[0.0] * (K - 1),
            labels=[[k] * width for k in range(K)],
            last_end=[[0] * width] + [[-1] * width for _ in range(K - 1)],
            round_rejection=[0.0] * (K - 1), round_attempts=[0] * (K - 1),
            round_length=2 * K, round_left=2 * K, adapt_left=self.adapt_steps,
        )

    def hot_active(self, state: ReplicaState, generator: torch.Generator) -> list[str] | None:
        """Names the hot replicas update this step (None = all); m-reSGLD overrides it."""
        return None

    def layout(self, params: Params) -> list[str] | None:
        """Order of the tensors in each chain's flat buffer (None: as given)."""
        return None

    @staticmethod
    def pairs(step: int, replicas: int) -> list[int]:
        """The pairs (k, k+1) offered a swap at ``step``: the only pair every step when
        K = 2, else the even pairs on even steps and the odd ones on odd steps."""
        if replicas == 2:
            return [0]
        return list(range(step % 2, replicas - 1, 2))

    def step(self, state: ReplicaState, energy, batch, generator: torch.Generator,
             index: torch.Tensor | None = None) -> dict:
        """One update on ``batch = (u, s)``; ``index``: the batch's row numbers in the
        training data (needed by the control variate after burn-in)."""
        if state.sampling is None and state.warm is not None:  # burn-in: optimise the cold one
            value, grads = energy_and_grads(energy, state.chains[0].params, batch)
            state.warm.step(state.chains[0], grads)
            e = float(value.total.detach().mean())
            return {"energy": e, "energy_hot": e}
        K = len(state.chains)
        active = self.hot_active(state, generator)
        together = self._together(state, energy, active)
        width = state.chains[0].n_chains
        if together:  # each level's own gradients are cut out only if a swap needs them
            values, stacked = self._gradients_together(state, energy, batch, active)
            grads = None
        else:
            evals = [gradients(energy, chain, batch, None if k == 0 else active, state.sampling,
                               index) for k, chain in enumerate(state.chains)]
            values = [v for v, _ in evals]
            grads = [g for _, g in evals]
        for k in range(K - 1):
            state.swap_var[k].update(paired_variance(values[k].terms, values[k + 1].terms,
                                                     values[k].scale, values[k].n_total))
        for k, v in enumerate(values):
            state.replica_var[k].update(estimator_variance(v.terms, v.scale, v.n_total))
        swapped_pair0, rate0, n_accepted, n_offered = False, float("nan"), 0, 0
        for k in self.pairs(state.n_steps, K):
            # (C,); an energy written for one set of parameters gives one chain's as a number
            delta = (values[k].total - values[k + 1].total).detach().double().reshape(-1)
            log_rate = swap_log_rate(delta, state.swap_var[k].value, state.taus[k],
                                     state.taus[k + 1])
            accept = accept_swaps(log_rate, generator)
            rejection = (1 - log_rate.clamp(max=0.0).exp()).tolist()
            accept_list = accept.tolist()
            if k == 0:
                state.log_rate_sum = state.log_rate_sum + log_rate.clamp(max=0.0)
                state.energy_gap_sum = state.energy_gap_sum - delta
                swapped_pair0 = any(accept_list)
                rate0 = 1 - sum(rejection) / len(rejection)
            self._record(state, k, accept_list, rejection)
            n_accepted, n_offered = n_accepted + sum(accept_list), n_offered + len(accept_list)
            if any(accept_list):
                if grads is None:  # level j's rows (the hot levels': the names they train)
                    grads = [{n: g[level_rows(j, width)] for n, g in stacked.items()
                              if j == 0 or active is None or n in active} for j in range(K)]
                grads = self._exchange(state, k, accept, grads, active)
        if swapped_pair0 and active is not None:  # the new cold particles: a full gradient
            _, grads[0] = gradients(energy, state.chains[0], batch, None, state.sampling, index)
        if together:  # the gradients as computed, or re-stacked after an exchange
            self._move_together(state, stacked if grads is None else grads, active, generator)
        else:
            for k, chain in enumerate(state.chains):
                lr = self.step_size if k == 0 else self.hot_lr
                move(chain, grads[k], lr, state.taus[k], generator, state.preconds[k],
                     state.sampling)
        state.n_steps += 1
        self._adapt(state)
        return {
            "energy": float(values[0].total.detach().mean()),
            "energy_hot": float(values[-1].total.detach().mean()),
            "swapped": n_accepted / max(n_offered, 1),  # of the swaps offered this step
            "swap_rate_estimate": rate0,  # the mean acceptance probability of pair (0, 1)
        }

    @staticmethod
    def _together(state: ReplicaState, energy, active: list[str] | None) -> bool:
        """Whether this step evaluates and moves all levels as one batch: under the
        Kronecker metric the levels share, without the control variate. m-reSGLD's hot
        half-steps join the batch where the energy's backward pass can skip the hot rows
        of the tensors they do not train (the DeepONet's, for whole nets); elsewhere they
        take a pass of their own, which differentiates only the trained tensors."""
        return (state.together is not None and state.sampling is not None
                and state.sampling.cv is None
                and (active is None or skips_partial_backward(
                    energy, [n for n in state.together.params if n not in active])))

    @staticmethod
    def _gradients_together(state: ReplicaState, energy, batch,
                            active: list[str] | None) -> tuple[list, dict]:
        """Every level's energy, and the gradients of all levels' particles (rows as in
        ``state.together``), from one forward and backward pass over the batch of all K
        levels (they share the minibatch: a batch of each chain's own, (C, n, ...), is
        repeated for each level). With m-reSGLD's ``active`` names, the other tensors'
        gradients are computed for the cold level's rows only: the hot levels' backward pass
        skips that net."""
        K, width = len(state.chains), state.chains[0].n_chains
        if batch[1].dim() == 3:  # each chain its own minibatch: each level the same ones
            batch = tuple(x.repeat(K, *[1] * (x.dim() - 1)) for x in batch)
        params = state.together.params
        partial = None if active is None else ([n for n in params if n not in active], width)
        value, grads = energy_and_grads(energy, params, batch, partial=partial)
        total, terms = value.total.view(K, width), value.terms.view(K, width, -1)
        return [EnergyValue(total[k], terms[k], value.scale, value.n_total) for k in range(K)], grads

    def _move_together(self, state: ReplicaState, grads: dict | list, active: list[str] | None,
                       generator) -> None:
        """One Langevin step of every level at once: the shared metric broadcast over the
        levels, each with its own step (capped as the cold one's) and temperature; with
        m-reSGLD's ``active`` names, the other tensors step on the cold level only.
        ``grads``: as :meth:`_gradients_together` gives them, or a list of the levels' own."""
        K, width = len(state.chains), state.chains[0].n_chains
        sampling, chain = state.sampling, state.together
        lr = tuple(min(self.step_size if k == 0 else self.hot_lr, sampling.max_lr) for k in range(K))
        params = chain.params
        if isinstance(grads, list):
            every = {n: torch.cat([g[n] for g in grads]) for n in grads[-1]}
            cold = {n: g for n, g in grads[0].items() if n not in every}
        else:
            every = {n: g for n, g in grads.items() if active is None or n in active}
            cold = {n: g[level_rows(0, width)] for n, g in grads.items() if n not in every}
        sampling.metric.step(params, every, lr, tuple(state.taus), generator)  # (K·C, ...)
        if cold:
            rows = level_rows(0, width)
            sampling.metric.step({n: params[n][rows] for n in cold}, cold, lr[0], state.taus[0],
                                 generator)
        for level in state.chains:
            level.step += 1

    @staticmethod
    def _record(state: ReplicaState, k: int, accept: list[bool], rejection: list[float]) -> None:
        """Pair k's counts, and the round trips of the replicas it exchanged."""
        state.attempts[k] += len(accept)
        state.accepted[k] += sum(accept)
        state.rejection[k] += sum(rejection)
        if state.adapt_left > 0:
            state.round_attempts[k] += len(accept)
            state.round_rejection[k] += sum(rejection)
        K = len(state.labels)
        for c, swapped in enumerate(accept):
            if not swapped:
                continue
            lo, hi = state.labels[k][c], state.labels[k + 1][c]
            state.labels[k][c], state.labels[k + 1][c] = hi, lo
            if k == 0 and state.last_end[hi][c] == 1:  # back at the cold end from the hot one
                state.round_trips += 1
            if k == 0:
                state.last_end[hi][c] = 0
            if k + 1 == K - 1 and state.last_end[lo][c] == 0:
                state.last_end[lo][c] = 1

    @staticmethod
    def _exchange(state: ReplicaState, k: int, mask: torch.Tensor, grads: list,
                  active: list[str] | None) -> list:
        """Levels k and k+1 exchange their particles in the chains (rows) where ``mask``
        (C,), and with them their gradients. Level 0's gradient is recomputed by the caller
        when it came from a partial step (m-reSGLD)."""
        grads = list(grads)
        a, b = state.chains[k], state.chains[k + 1]
        rows = mask.nonzero()[:, 0]
        held = a.flat[rows].clone()
        a.flat[rows] = b.flat[rows]
        b.flat[rows] = held

        def pick(x, y):  # x's tensors, with y's rows where the pair swapped
            return {n: torch.where(mask.view(-1, *[1] * (x[n].dim() - 1)), y[n], x[n]) for n in x}

        low, high = grads[k], grads[k + 1]
        grads[k + 1] = pick(high, low)
        grads[k] = low if (k == 0 and active is not None) else pick(low, high)
        return grads

    def _adapt(self, state: ReplicaState) -> None:
        """At the end of an adaptation round, re-space the intermediate temperatures so the
        pairs' rejection rates are equal (:func:`equalise_ladder`); rounds double."""
        if state.adapt_left <= 0:
            return
        state.adapt_left -= 1
        state.round_left -= 1
        if state.round_left > 0 and state.adapt_left > 0:
            return
        if all(n > 0 for n in state.round_attempts):
            rates = [r / n for r, n in zip(state.round_rejection, state.round_attempts, strict=True)]
            state.taus = equalise_ladder(state.taus, rates)
        state.round_rejection = [0.0] * len(state.round_rejection)
        state.round_attempts = [0] * len(state.round_attempts)
        state.round_length *= 2
        state.round_left = state.round_length

    def report(self, state: ReplicaState) -> dict:
        """What a run's ``metrics.json`` records of the sampler: the metric's stiffness and
        step, the swap rate (accepted swaps per offered swap, all pairs), the report of pair
        (0, 1), the ladder, and the energy estimators' sd (of the coldest and hottest levels
        and of their difference, as tracked online for the swap, paper Section 3.2)."""
        return {
            **sampling_report(self, state.sampling),
            "swap_rate": state.n_swaps / max(sum(state.attempts), 1),
            "swap": self.swap_report(state),
            "ladder": self.ladder_report(state),
            "energy_estimator_sd": {  # (the mean over C chains)
                "cold": _mean(state.replica_var[0].value) ** 0.5,
                "hot": _mean(state.replica_var[-1].value) ** 0.5,
                "difference": _mean(state.swap_var[0].value) ** 0.5,
            },
        }

    @staticmethod
    def ladder_report(state: ReplicaState) -> dict:
        """The temperatures, each pair's acceptance, the barrier Λ estimated as the sum of
        the pairs' mean rejection probabilities, and the round trips (Syed et al. 2022)."""
        return {
            "temperatures": list(state.taus),
            "acceptance": [a / n if n else float("nan")
                           for a, n in zip(state.accepted, state.attempts, strict=True)],
            "barrier": sum(r / n for r, n in zip(state.rejection, state.attempts, strict=True) if n),
            "round_trips": state.round_trips,
        }

    def swap_report(self, state: ReplicaState) -> dict:
        """Measured swap acceptance of pair (0, 1) beside the one a d-dimensional Gaussian
        posterior predicts, with d the number of parameters and with the effective d implied
        by the measured mean energy gap between the two levels (``E[U1 − U0] = d_eff
        (τ_1 − τ_0)/2``)."""
        d = state.chains[0].flat.shape[-1]
        t0, t1 = state.taus[0], state.taus[1]
        n = max(state.attempts[0], 1)  # attempts of pair (0, 1), over all C chains
        width = state.chains[0].n_chains
        var = _mean(state.swap_var[0].value)
        gap = _mean(state.energy_gap_sum) * width / n
        log_rate_sum = _mean(state.log_rate_sum) * width
        d_eff = max(2 * gap / (t1 - t0), 0.0)
        return {
            "measured": state.accepted[0] / n,
            # the geometric mean of min(1, r̂) (the mean of its log, which stays finite where
            # r̂ ~ e^-1e4), a typical offer's acceptance; "measured" is the accepted share
            "mean_acceptance": math.exp(log_rate_sum / n) if log_rate_sum > -700 * n else 0.0,
            "predicted": predicted_swap_rate(d, t0, t1, var),
            "predicted_from_gap": predicted_swap_rate(d_eff, t0, t1, var),
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
            cold = state.chains[0]
            for hot in state.chains[1:]:
                hot.flat.copy_(cold.flat)
            state.sampling = start_sampling(self, cold, energy, data, generator)
            state.warm = None
        elif self.metric == "rmsprop" and self.freeze_metric:
            freeze(state.preconds)

    def sample(self, state: ReplicaState) -> Params:
        """The cold level's parameters, in the form ``init`` was given them."""
        return state.chains[0].as_given()


def _mean(x) -> float:
    """A number (0 for None), or the mean of a tensor of C pairs' numbers."""
    if x is None:
        return 0.0
    return float(x.mean()) if isinstance(x, torch.Tensor) else float(x)


def equalise_ladder(taus: list[float], rejection: list[float]) -> list[float]:
    """New temperatures, the ends kept, whose pairs would have equal rejection rates: with
    β = 1/τ and the cumulative rejection Λ(β_k) = Σ_{j<k} rejection_j, interpolated linearly
    in between, the new β_k sit at Λ = k Λ(β_{K-1}) / (K − 1) (Syed et al. 2022)."""
    beta = 1 / np.asarray(taus, dtype=np.float64)
    cum = np.concatenate([[0.0], np.cumsum(np.maximum(rejection, 1e-9))])
    targets = np.linspace(0.0, cum[-1], len(taus))
    new = np.interp(targets, cum, beta)  # cum increases along the ladder
    new[0], new[-1] = beta[0], beta[-1]
    return [float(t) for t in 1 / new]
