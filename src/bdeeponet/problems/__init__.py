"""Operator-learning problems (Lin, Moya & Zhang, Bayesian DeepONet, Section 5).

Each problem is a frozen dataclass whose fields are its physical and solver parameters
(defaults: the paper's values) with

* ``name`` (class attribute) and ``periodic_input`` (class attribute: draw u with
  ``periodic_grf`` rather than ``rbf_grf``),
* ``periodic_coordinates`` (class attribute): ``(j, period)`` pairs, the columns of the
  query points in which the solution is periodic (``generate`` writes them to
  ``meta["periodic"]``; the model can then use Fourier features for them),
* ``coordinate_names`` (class attribute): the names of those columns, ``("x", "t")`` for
  a PDE in space and time, ``("x1", "x2")`` for a 2-D field (the figures' axes),
* ``query_points() -> (P, d)``: t for the ODEs (d = 1); (x, t) for the PDEs (d = 2),
  laid out x slowest, t fastest (row i * nt + j is (x_i, t_j)),
* ``solve(x, u) -> (n, P)``: solutions for the n input functions u (n, K) given on the
  grid x = linspace(0, 1, K), vectorised over n.

The field benchmarks (``burgers``, ``darcy2d``) draw inputs from their own distributions on
their own grids instead: ``draw(n, rng) -> (u (n, m), s (n, P))``, ``sensor_points()``,
``solve(u) -> (n, P)`` for inputs given at the sensors, ``grid_shape`` and
``published_keys`` (the names of the published files' arrays, for ``generate --out F.mat``).
"""

from __future__ import annotations

import dataclasses

from .advection_diffusion import AdvectionDiffusion
from .antiderivative import Antiderivative
from .burgers import Burgers
from .darcy import Darcy
from .darcy2d import Darcy2D
from .diffusion_reaction import DiffusionReaction
from .pendulum import Pendulum

PROBLEMS: dict[str, type] = {
    cls.name: cls
    for cls in (Antiderivative, Pendulum, DiffusionReaction, AdvectionDiffusion, Darcy, Burgers,
                Darcy2D)
}


def canonical_name(name: str) -> str:
    """Problem names accept '-' for '_' (``diffusion-reaction``)."""
    return name.replace("-", "_")


def describe_problems() -> str:
    """Every problem: its name, its equation (its module's first docstring line) and its
    parameters with their defaults, for ``bdeeponet problems``."""
    import sys

    lines = []
    for name, cls in PROBLEMS.items():
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        params = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(cls))
        lines += [name, f"  {doc[0] if doc else ''}", f"  parameters: {params}", ""]
    return "\n".join(lines).rstrip()


def get_problem(name: str, **params):
    """Instantiate the problem called ``name`` with parameter overrides ``params``.

    Raises ValueError for an unknown name, an unknown parameter or an invalid value.
    """
    cls = PROBLEMS.get(canonical_name(name))
    if cls is None:
        raise ValueError(f"unknown problem {name!r}; choose one of: {', '.join(PROBLEMS)}")
    valid = [f.name for f in dataclasses.fields(cls)]
    for key in params:
        if key not in valid:
            raise ValueError(
                f"unknown parameter {key!r} for problem {name!r}; valid: {', '.join(valid)}"
            )
    return cls(**params)


__all__ = [
    "PROBLEMS",
    "AdvectionDiffusion",
    "Antiderivative",
    "Burgers",
    "Darcy",
    "Darcy2D",
    "DiffusionReaction",
    "Pendulum",
    "canonical_name",
    "describe_problems",
    "get_problem",
]
