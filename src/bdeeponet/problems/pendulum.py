"""Forced gravity pendulum: s1' = s2, s2' = -k sin(s1) + u(t), s(0) = (0, 0), t in [0, 1].

The output is the angle s1 at the query times. The forcing u between the input grid
points is the not-a-knot cubic spline through the input values (O(h^4) interpolation
error). Time integration: classical fixed-step RK4 on all functions at once, with
``steps_per_interval`` steps between consecutive query times, so every query time is a
step boundary; the global error is O(dt^4) (dt = 1 / ((n_points - 1) steps_per_interval)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.interpolate import CubicSpline

from ._base import check_input, require_float, require_int


@dataclass(frozen=True)
class Pendulum:
    """Pendulum with stiffness ``k``; s1 observed at linspace(0, 1, n_points)."""

    k: float = 1.0
    n_points: int = 100
    steps_per_interval: int = 4

    name: ClassVar[str] = "pendulum"
    periodic_input: ClassVar[bool] = False
    periodic_coordinates: ClassVar[tuple[tuple[int, float], ...]] = ()
    coordinate_names: ClassVar[tuple[str, ...]] = ("t",)  # the columns of y (figures)

    def __post_init__(self):
        require_float("k", self.k)
        require_int("n_points", self.n_points, 2)
        require_int("steps_per_interval", self.steps_per_interval, 1)

    def query_points(self) -> np.ndarray:
        """Query times t, shape (n_points, 1)."""
        return np.linspace(0.0, 1.0, self.n_points)[:, None]

    def solve(self, x, u) -> np.ndarray:
        """Angles s1 for the forcings u (n, K) on the grid x (K,); returns (n, n_points)."""
        x, u = check_input(x, u)
        n_steps = (self.n_points - 1) * self.steps_per_interval
        dt = 1.0 / n_steps
        # RK4 needs u at every step start, midpoint and end: 2 n_steps + 1 half-step times.
        # Rows are times so that each step reads contiguous (n,) slices.
        forcing = CubicSpline(x, u.T, axis=0)(np.linspace(0.0, 1.0, 2 * n_steps + 1))
        angle = np.zeros(u.shape[0])
        speed = np.zeros(u.shape[0])
        out = np.empty((u.shape[0], self.n_points))
        out[:, 0] = 0.0
        for i in range(n_steps):
            angle, speed = self._rk4_step(
                angle, speed, forcing[2 * i], forcing[2 * i + 1], forcing[2 * i + 2], dt
            )
            if (i + 1) % self.steps_per_interval == 0:
                out[:, (i + 1) // self.steps_per_interval] = angle
        return out

    def _rk4_step(self, a, v, f0, f_half, f1, dt):
        """One RK4 step of (a, v)' = (v, -k sin a + f) with forcing f0, f_half, f1 at
        the step's start, midpoint and end; arrays of shape (n,)."""
        k = self.k
        a1, v1 = v, -k * np.sin(a) + f0
        a2, v2 = v + 0.5 * dt * v1, -k * np.sin(a + 0.5 * dt * a1) + f_half
        a3, v3 = v + 0.5 * dt * v2, -k * np.sin(a + 0.5 * dt * a2) + f_half
        a4, v4 = v + dt * v3, -k * np.sin(a + dt * a3) + f1
        return (a + dt / 6 * (a1 + 2 * a2 + 2 * a3 + a4),
                v + dt / 6 * (v1 + 2 * v2 + 2 * v3 + v4))
