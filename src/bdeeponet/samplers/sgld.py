"""Single-chain (preconditioned) SGLD: the ablation of replica exchange (Welling & Teh 2011).
"""

from __future__ import annotations

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


@dataclass
class SGLDState:
    chain: Chain
    precond: Preconditioner | None


@dataclass(frozen=True)
class SGLD:
    """``θ ← θ − η G ∇Û + sqrt(2 η τ G) ξ`` on one chain (see :mod:`.langevin`)."""

    lr: float = 1e-3
    tau: float = 1.0
    precondition: bool = True
    freeze_metric: bool = False  # True: constant preconditioner after burn-in

    name = "sgld"

    def __post_init__(self):
        check_positive(lr=self.lr, tau=self.tau)

    def init(self, params: Params) -> SGLDState:
        return SGLDState(Chain(params), Preconditioner() if self.precondition else None)

    def step(self, state: SGLDState, energy, batch, generator: torch.Generator) -> dict:
        value, grads = energy_and_grads(energy, state.chain.params, batch)
        langevin_update(state.chain, grads, self.lr, self.tau, generator, state.precond)
        return {"energy": float(value.total.detach())}

    def end_burn_in(self, state: SGLDState) -> None:
        if state.precond is not None and self.freeze_metric:
            freeze([state.precond])

    def sample(self, state: SGLDState) -> Params:
        return state.chain.params

