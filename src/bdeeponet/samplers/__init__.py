"""Samplers: one file per method, all with ``init(params)``, ``step(state, energy, batch,
generator)``, ``end_burn_in(state)`` and ``sample(state)``.

They work on any torch model through ``torch.func.functional_call``; the energy is any
callable ``energy(params, batch) -> EnergyValue``. A sampler on a user's own model::

    >>> import torch
    >>> from torch.func import functional_call
    >>> from bdeeponet import SGLD, EnergyValue
    >>> model = torch.nn.Linear(3, 1)
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.randn(200, 3, generator=g)
    >>> t = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(200, 1, generator=g)
    >>> def energy(params, batch):            # N(0, 1) prior, noise sd 0.1
    ...     xb, tb = batch
    ...     terms = ((functional_call(model, params, (xb,)) - tb) ** 2).sum(1) / (2 * 0.1**2)
    ...     prior = sum((p**2).sum() for p in params.values()) / 2
    ...     scale = len(x) / len(xb)            # N/n
    ...     return EnergyValue(prior + scale * terms.sum(), terms.detach(), scale, len(x))
    >>> sampler = SGLD(lr=1e-2)
    >>> state = sampler.init(dict(model.named_parameters()))
    >>> for k in range(2000):
    ...     idx = torch.randint(0, 200, (50,), generator=g)
    ...     _ = sampler.step(state, energy, (x[idx], t[idx]), g)
    >>> torch.round(sampler.sample(state)["weight"], decimals=1)
    tensor([[ 1.0000, -2.0000,  0.5000]])
"""

from .adam import AdamDropout
from .mresgld import MReSGLD
from .resgld import ReSGLD
from .sgld import SGLD

METHODS = {"adam": AdamDropout, "sgld": SGLD, "resgld": ReSGLD, "mresgld": MReSGLD}

__all__ = ["METHODS", "AdamDropout", "MReSGLD", "ReSGLD", "SGLD"]
