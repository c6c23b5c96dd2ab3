"""The paper's baseline: Adam on the same energy, uncertainty from MC dropout (Gal 2016).

Adam's step is invariant to the scale of the loss, so minimising Û (the MSE scaled by
N/σ² plus the prior term, i.e. MAP estimation) gives the usual Adam training; the band
comes from M stochastic forward passes with dropout on at prediction time
(:mod:`bdeeponet.posterior`). The model must have been built with ``dropout > 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..energy import Params
from .langevin import Chain, check_positive, energy_and_grads


@dataclass
class AdamState:
    chain: Chain  # the parameters, as views into one flat vector that Adam updates
    optimizer: torch.optim.Adam
    n_steps: int = 0


@dataclass(frozen=True)
class AdamDropout:
    lr: float = 1e-3

    name = "adam"
    draws_samples = False  # one trained network; its band comes from dropout masks

    def __post_init__(self):
        check_positive(lr=self.lr)

    def report(self, state: AdamState) -> dict:
        """What a run's ``metrics.json`` records of this optimiser: nothing more."""
        return {}

    def init(self, params: Params, chains: int | None = None) -> AdamState:
        """The state at ``params``; with ``chains=C``, C networks (tensors (C, ...)) trained
        as one batch: Adam's update is elementwise, so each is trained on its own."""
        chain = Chain(params, chains=chains)
        return AdamState(chain, torch.optim.Adam([chain.flat], lr=self.lr))

    def step(self, state: AdamState, energy, batch, generator: torch.Generator,
             index: torch.Tensor | None = None) -> dict:
        value, grads = energy_and_grads(energy, state.chain.params, batch)
        state.chain.flat.grad = state.chain.flat_grad(grads)[1]
        state.optimizer.step()
        state.n_steps += 1
        return {"energy": float(value.total.detach().mean())}

    def end_burn_in(self, state: AdamState, energy=None, data=None, generator=None) -> None:
        pass

    def sample(self, state: AdamState) -> Params:
        """The network's (networks') parameters, in the form ``init`` was given them."""
        return state.chain.as_given()


@dataclass(frozen=True)
class DeepEnsemble(AdamDropout):
    """A deep ensemble (Lakshminarayanan, Pritzel & Blundell 2017): C networks, each from its
    own initialisation and on its own minibatch order, trained to the MAP by Adam as one
    batch (``init(params, chains=C)``); the band is the spread of their predictions. No
    dropout. The strongest practical baseline of the field."""

    name = "ensemble"
