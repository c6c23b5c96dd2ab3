"""1-D Darcy flow: -(exp(u(x)) s'(x))' = f on [0, 1], s(0) = s(1) = 0.

u is the log-permeability (the GRF input), f a constant source. Integrating once,
exp(u) s' = C - F with F(x) = f x, so

    s(x) = int_0^x (C - f t) exp(-u(t)) dt,   C = f int_0^1 t e^{-u} / int_0^1 e^{-u}

(C from s(1) = 0). The operator u -> s is nonlinear (e^{-u}) and has no linear shortcut:
this is the problem where a DeepONet must earn its keep against the linear baseline.
Between the input grid points u is the not-a-knot cubic spline through the input values;
both integrals are taken by cumulative Simpson on a grid with ``refine`` sub-intervals
per query interval (O(h^4) in h = 1 / ((n_points - 1) refine)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.integrate import cumulative_simpson
from scipy.interpolate import CubicSpline

from ._base import check_input, require_float, require_int


@dataclass(frozen=True)
class Darcy:
    """Pressure s of 1-D Darcy flow with log-permeability u and source ``f``, observed at
    linspace(0, 1, n_points)."""

    f: float = 1.0
    n_points: int = 100
    refine: int = 4

    name: ClassVar[str] = "darcy"
    periodic_input: ClassVar[bool] = False
    periodic_coordinates: ClassVar[tuple[tuple[int, float], ...]] = ()
    coordinate_names: ClassVar[tuple[str, ...]] = ("x",)  # the columns of y (figures)

    def __post_init__(self):
        require_float("f", self.f)
        require_int("n_points", self.n_points, 2)
        require_int("refine", self.refine, 1)

    def query_points(self) -> np.ndarray:
        """Query points x, shape (n_points, 1)."""
        return np.linspace(0.0, 1.0, self.n_points)[:, None]

    def solve(self, x, u) -> np.ndarray:
        """Pressures for the log-permeabilities u (n, K) on the grid x (K,); (n, n_points)."""
        x, u = check_input(x, u)
        # an even number of sub-intervals per query interval keeps Simpson's panels aligned
        fine = np.linspace(0.0, 1.0, (self.n_points - 1) * 2 * self.refine + 1)
        w = np.exp(-CubicSpline(x, u.T, axis=0)(fine).T)  # (n, M): 1 / permeability
        a = cumulative_simpson(w, x=fine, axis=1, initial=0.0)  # int_0^x e^{-u}
        b = cumulative_simpson(fine * w, x=fine, axis=1, initial=0.0)  # int_0^x t e^{-u}
        c = self.f * b[:, -1:] / a[:, -1:]
        s = c * a - self.f * b
        s[:, -1] = 0.0  # s(1) = 0 holds to rounding; make it exact
        return s[:, :: 2 * self.refine]
