"""The training methods as objects: the one place that knows a method by its name.

Each :class:`Method` says what it draws, which settings it takes, and builds its sampler
from a run's configuration. Everything outside ``samplers/`` asks the method
(:func:`get_method`), never its name.
"""

from __future__ import annotations

from dataclasses import dataclass

from .adam import AdamDropout, DeepEnsemble
from .mresgld import MReSGLD
from .resgld import ReSGLD
from .sgld import DEFAULT_LR, SGLD


@dataclass(frozen=True)
class Method:
    """A method as a run sees it.

    ``draws``: samples a posterior by SG-MCMC after a burn-in (its draws get R̂); ``network``:
    trains a DeepONet (the linear baseline is a closed-form fit instead); ``dropout``:
    trains and predicts with MC dropout, whose masks make its band; ``single``: one network
    only (no ``chains``); ``chains``: its default number of chains (ensemble members);
    ``min_chains``: the fewest it runs with; ``ladder``: takes a ladder of temperatures
    (``replicas`` > 2); ``groups``: steps the branch and the trunk as separate groups
    (m-reSGLD's hot replica); ``lr``: its default step where it is not the metric's Langevin
    step; ``sampler``: its class (None: no sampler).
    """

    name: str
    draws: bool
    sampler: type | None = None
    network: bool = True
    dropout: bool = False
    single: bool = False
    chains: int = 1
    min_chains: int = 1
    ladder: bool = False
    groups: bool = False
    lr: float | None = None

    def default_lr(self, metric: str) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[metric]

    def band_trusted(self, chains: int) -> bool:
        """How its band is calibrated: True where calibration keeps the band unless held-out
        functions reject it (several sampled chains, whose disagreement is in it; the linear
        baseline's exact posterior), False where each level gets its own scale (one chain,
        MC dropout: local spreads; a deep ensemble's few MAP members, whose spread gains
        nothing over a level-by-level fit, docs/bands.md;
        :func:`bdeeponet.calibration.fit_calibration`)."""
        if not self.network:
            return True
        return chains > 1 and self.draws and not self.dropout

    def build(self, config, model, steps_per_epoch: int):
        """The sampler of a run of ``config`` (a :class:`~bdeeponet.config.TrainConfig`) on
        ``model``; None for a method without one (the linear baseline)."""
        if self.sampler is None:
            return None
        if not self.draws:
            return self.sampler(lr=config.step_size)
        kwargs = dict(lr=config.step_size, metric=config.metric,
                      freeze_metric=config.freeze_metric, warm_lr=config.warm_lr,
                      warm_steps=config.burn_in_epochs * steps_per_epoch,
                      control_variate=config.control_variate,
                      fisher_samples=config.fisher_samples, cuda_graph=config.cuda_graph)
        if self.ladder:
            kwargs.update(lr_hot=config.lr_hot, tau1=config.tau1, tau2=config.tau2,
                          replicas=config.replicas,
                          adapt_steps=config.ladder_adapt_epochs * steps_per_epoch)
        else:
            kwargs.update(tau=config.tau1)
        if self.groups:
            from ..networks import parameter_groups

            kwargs.update(groups=parameter_groups(model), c=config.c)
        return self.sampler(**kwargs)


_ALL = (
    Method("adam", draws=False, sampler=AdamDropout, dropout=True, single=True, lr=1e-3),
    Method("ensemble", draws=False, sampler=DeepEnsemble, chains=8, min_chains=2, lr=1e-3),
    Method("sgld", draws=True, sampler=SGLD),
    Method("resgld", draws=True, sampler=ReSGLD, ladder=True),
    Method("mresgld", draws=True, sampler=MReSGLD, ladder=True, groups=True),
    Method("linear", draws=False, network=False, single=True),
)
METHOD_NAMES = tuple(m.name for m in _ALL)
_BY_NAME = {m.name: m for m in _ALL}


def get_method(name: str) -> Method:
    """The method called ``name``; ValueError naming the choices for another name."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown method '{name}'; choose one of: {', '.join(METHOD_NAMES)}")
    return _BY_NAME[name]
