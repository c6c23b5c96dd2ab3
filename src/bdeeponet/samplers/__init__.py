"""Samplers: one file per method, all with ``init(params, chains=None)``, ``step(state, energy,
batch, generator, index=None)``, ``end_burn_in(state, energy, data, generator)`` and
``sample(state)``. With ``chains=C`` every tensor of ``params`` has a leading dimension of C
and C independent chains (or, for :class:`DeepEnsemble`, networks) advance as one batch;
the batch ``(u, s)`` may then be (C, n, ...) (each chain its own minibatch) or shared.
One chain is a batch of one: ``init(params)`` with one set of parameters keeps them so,
and ``sample`` hands them back without the chain dimension.

They work on any torch model through ``torch.func.functional_call``. At their defaults the
SG-MCMC samplers optimise during burn-in (the warm start), and ``end_burn_in`` estimates the
Kronecker metric they sample with (:mod:`.kfac`), which needs a
:class:`~bdeeponet.energy.GaussianEnergy` and all the training data. A sampler on a user's
own model, called as ``model(u, y)``::

    >>> import torch
    >>> from bdeeponet import SGLD, GaussianEnergy
    >>> class Line(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = torch.nn.Linear(3, 1)
    ...     def forward(self, u, y):              # (n, 3), (P = 1, 1) -> (n, 1)
    ...         return self.fc(u)
    >>> g = torch.Generator().manual_seed(0)
    >>> u = torch.randn(200, 3, generator=g)
    >>> s = u @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(200, 1, generator=g)
    >>> model = Line()
    >>> energy = GaussianEnergy(model, torch.zeros(1, 1), n_total=200, noise_std=0.1)
    >>> sampler = SGLD()
    >>> state = sampler.init({k: v.detach() for k, v in model.named_parameters()})
    >>> for k in range(3000):
    ...     if k == 1000:                      # burn-in ends: estimate the metric, then sample
    ...         sampler.end_burn_in(state, energy, (u, s), g)
    ...     idx = torch.randperm(200, generator=g)[:50]
    ...     _ = sampler.step(state, energy, (u[idx], s[idx]), g, index=idx)
    >>> torch.round(sampler.sample(state)["fc.weight"], decimals=1)
    tensor([[ 1.0000, -2.0000,  0.5000]])
"""

from .adam import AdamDropout, DeepEnsemble
from .methods import METHOD_NAMES, get_method
from .mresgld import MReSGLD
from .resgld import ReSGLD
from .sgld import SGLD

# name -> sampler class, from the registry (the linear baseline has no sampler)
METHODS = {name: get_method(name).sampler for name in METHOD_NAMES if get_method(name).sampler}

__all__ = ["METHODS", "AdamDropout", "DeepEnsemble", "MReSGLD", "ReSGLD", "SGLD"]
