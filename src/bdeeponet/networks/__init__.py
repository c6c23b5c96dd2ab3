"""The networks a run can train, behind one protocol.

A network is an ``nn.Module`` built from a frozen config (``config.to_dict()`` rebuilds
it) with

- ``functional_forward(params, u, y, memo=None)``: the output (n, P) for one set of
  parameters, (C, n, P) for C chains' (each tensor with a leading C);
- ``parameter_groups()``: two lists of parameter names, what m-reSGLD's hot replica
  trains in turn;
- optionally ``prior_stds(scale)``: per-tensor prior sds (else the fan-in rule of
  :func:`bdeeponet.energy.fan_in_prior`), and ``forward_backward``: a gradient by hand
  (else the energy takes autograd's); ``curvature_batches``: the minibatches of 100
  functions the sampler's stiffness estimate reads (default 3).

Two families: the DeepONet (:mod:`bdeeponet.model`: MLP or conv branch, learnt or POD
trunk) and the Fourier neural operator (:mod:`.fourier`) for fields on a grid.
"""

from __future__ import annotations

from ..model import DeepONet, ModelConfig
from ..model import parameter_groups as deeponet_groups
from .fourier import FourierConfig, FourierOperator

NETWORKS = ("deeponet", "fourier")


def build_network(config):
    """The network of ``config`` (a :class:`ModelConfig` or a :class:`FourierConfig`)."""
    if isinstance(config, FourierConfig):
        return FourierOperator(config)
    return DeepONet(config)


def network_config(d: dict):
    """The config a ``to_dict()`` wrote (a DeepONet's carries no ``network`` key)."""
    if d.get("network") == FourierConfig.kind:
        return FourierConfig.from_dict(d)
    return ModelConfig(**{k: v for k, v in d.items() if k != "network"})


def parameter_groups(model) -> dict[str, list[str]]:
    """The network's two parameter groups (a DeepONet's: branch and output bias, trunk)."""
    own = getattr(model, "parameter_groups", None)
    return own() if own is not None else deeponet_groups(model)


__all__ = ["NETWORKS", "DeepONet", "FourierConfig", "FourierOperator", "ModelConfig",
           "build_network", "network_config", "parameter_groups"]
