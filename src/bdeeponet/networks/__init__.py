"""The networks a run can train, behind one protocol.

A network is an ``nn.Module`` built from a frozen config (``config.to_dict()`` rebuilds
it) with

- ``functional_forward(params, u, y, memo=None)``: the output (n, P) for one set of
  parameters, (C, n, P) for C chains' (each tensor with a leading C);
- ``parameter_groups()``: two lists of parameter names, what m-reSGLD's hot replica
  trains in turn;
- optionally ``prior_stds(scale)``: per-tensor prior sds (else the fan-in rule of
  :func:`bdeeponet.energy.fan_in_prior`), and ``forward_backward``: a gradient by hand
  (else the energy takes autograd's); ``curvature_functions``: the functions the
  sampler's stiffness estimate reads (default 300), and ``stiffness_tolerance``: how far
  above its target the metric's taming may stop (default 0); ``reads_query_points``:
  False where the output is always the network's whole grid (default True).

Two families: the DeepONet (:mod:`bdeeponet.model`: MLP or conv branch, learnt or POD
trunk) and the Fourier neural operator (:mod:`.fourier`) for fields on a grid.
"""

from __future__ import annotations

import numpy as np

from ..data import sensor_grid
from ..model import DeepONet, ModelConfig
from ..model import parameter_groups as deeponet_groups
from .fourier import FourierConfig, FourierOperator, default_patch

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


def field_grid(data) -> tuple[tuple[int, ...] | None, bool]:
    """``(grid, same)``: the shape of the equispaced 1-D or 2-D grid (row major) the sensors
    lie on (None where they do not), and whether the query points are those same points."""
    grid = sensor_grid(data.sensors)
    if grid is None:
        return None, False
    sensors = np.asarray(data.sensors, dtype=np.float64)
    same = data.y.shape == sensors.shape and np.allclose(
        data.y, sensors, rtol=0, atol=1e-6 * float(np.ptp(sensors, axis=0).max()))
    return grid, bool(same)


def data_patch(data, grid: tuple[int, ...], patch: int | None = None, modes: int = 12) -> int:
    """The patch a Fourier network reads ``data``'s ``grid`` in: ``patch`` where given, else
    :func:`.fourier.default_patch` for the axes the data declare periodic."""
    periodic = dict(data.periodic)
    return patch or default_patch(grid, tuple(j in periodic for j in range(len(grid))), modes)


def choose_network(data, modes: int = 12) -> tuple[str, str]:
    """``(network, why)``: the network a data set's layout calls for. A field on a grid
    mapped to a field on the same grid (the sensors an equispaced 2-D grid, or a 1-D one
    that the data declare periodic, and the query points the same points) takes the
    Fourier operator (read in the patches of :func:`.fourier.default_patch` for ``modes``);
    anything else (1-D sensors of an ODE's forcing, scattered or other query points) the
    DeepONet."""
    grid, same = field_grid(data)
    if grid is None:
        return "deeponet", "the sensors are not an equispaced grid"
    where = " x ".join(map(str, grid))
    if not same:
        return "deeponet", f"the query points are not the sensors' {where} grid"
    if len(grid) == 1 and not data.periodic:
        return "deeponet", (f"the sensors are a 1-D grid of {where} points that the data do "
                            "not declare periodic")
    patch = data_patch(data, grid, modes=modes)
    return "fourier", f"input and output are fields on one {where} grid" + (
        f", read in patches of {patch} x {patch} points" if patch > 1 else "")


FOURIER_1D_EPOCHS = 300  # a 1-D field is cheap a step and wants more of them (Burgers)
# a 2-D grid read in patches: a step costs what one on the coarse grid does, and the
# detail within the patches wants more steps (Darcy 85 x 85: 1.33% after 100 epochs,
# 0.88% after 250, 0.70% after 400 at 27 min; docs/results/field-benchmarks)
FOURIER_PATCH_EPOCHS = 250


def fit_to_data(config, data):
    """``config`` with the defaults that depend on the data's layout as well as on the
    network: a Fourier network runs ``FOURIER_1D_EPOCHS`` epochs on a 1-D grid and
    ``FOURIER_PATCH_EPOCHS`` on a 2-D one read in patches, unless its epochs were set
    (measured in docs/results/field-benchmarks)."""
    grid, _ = field_grid(data)
    if config.network != "fourier" or "epochs" not in config.network_defaults or grid is None:
        return config
    if len(grid) == 1:
        return config.updated(epochs=FOURIER_1D_EPOCHS)
    if data_patch(data, grid, config.patch, config.modes) > 1:
        return config.updated(epochs=FOURIER_PATCH_EPOCHS)
    return config


def parameter_groups(model) -> dict[str, list[str]]:
    """The network's two parameter groups (a DeepONet's: branch and output bias, trunk)."""
    own = getattr(model, "parameter_groups", None)
    return own() if own is not None else deeponet_groups(model)


__all__ = ["NETWORKS", "DeepONet", "FourierConfig", "FourierOperator", "ModelConfig",
           "build_network", "choose_network", "data_patch", "field_grid", "fit_to_data",
           "network_config", "parameter_groups"]
