"""Multi-variance replica exchange SGLD, the paper's Algorithm 2 (m-reSGLD, Section 4).

Identical to :class:`~.resgld.ReSGLD` during burn-in. Afterwards the hot particle updates
only one parameter group per step: the first group (the DeepONet branch) with probability
``c``, otherwise the second (the trunk). The frozen group's backward pass is never computed
for it: that is the whole saving (at most 25% of reSGLD for two equal nets, paper Section
4). With the DeepONet's own gradient both particles share one pass, in which the frozen net
is walked back over the cold particle's rows only; any other energy gives the hot particle
a pass of its own in which the frozen tensors do not require grad. The cold particle always
takes full steps. Because the two particles' gradient noise now differs, each level's
estimator variance σ_j² is tracked separately (``ReplicaState.replica_var``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .resgld import ReplicaState, ReSGLD

DEFAULT_C = 0.7  # the probability that the hot replica trains the branch (TrainConfig's too)


@dataclass(frozen=True)
class MReSGLD(ReSGLD):
    """``groups``: two lists of parameter names, e.g. ``parameter_groups(model)``."""

    groups: dict[str, list[str]] = field(default_factory=dict)
    c: float = DEFAULT_C

    name = "mresgld"

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 <= self.c <= 1.0:
            raise ValueError(f"c must be in [0, 1], got {self.c}")
        if len(self.groups) != 2 or not all(self.groups.values()):
            raise ValueError("m-reSGLD needs exactly two non-empty parameter groups")

    def hot_active(self, state: ReplicaState, generator: torch.Generator) -> list[str] | None:
        if not state.accelerated:
            return None
        first, second = self.groups.values()
        gamma = float(torch.rand((), generator=generator, dtype=torch.float64,
                                 device=generator.device))
        return list(first) if gamma < self.c else list(second)

    def layout(self, params) -> list[str]:
        """Each group contiguous in the flat buffer, so a group's update is one slice."""
        grouped = [n for names in self.groups.values() for n in names]
        return grouped + [n for n in params if n not in grouped]

    def end_burn_in(self, state: ReplicaState, energy=None, data=None, generator=None) -> None:
        super().end_burn_in(state, energy, data, generator)
        if state.sampling is not None:
            state.sampling.metric.check_groups(self.groups)
        state.accelerated = True
