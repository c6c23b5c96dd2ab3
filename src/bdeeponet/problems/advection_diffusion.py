"""Advection-diffusion: s_t + s_x - D s_xx = 0, x periodic on [0, 1), s(x, 0) = u(x).

Exact solution in Fourier space: if u(x) = sum_m c_m exp(2 pi i m x), then

    s(x, t) = sum_m c_m exp(-4 pi^2 m^2 D t) exp(2 pi i m (x - t)).

The c_m are the discrete Fourier coefficients of u on the periodic grid (the input grid
linspace(0, 1, K) without its last point, N = K - 1 points), i.e. u is replaced by its
trigonometric interpolant; for even N the Nyquist mode is split evenly between +-N/2 so
the interpolant is real. For a smooth periodic u this is spectrally accurate: the error
decays faster than any power of 1/N. The series is evaluated at the query x by a
zero-padded inverse FFT on a grid that contains the query points, which is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ._base import check_input, require_float, require_int, space_time_points

# Relative mismatch allowed between u(0) and u(1) before the input is rejected as
# not periodic.
_PERIODIC_TOL = 1e-6


@dataclass(frozen=True)
class AdvectionDiffusion:
    """Periodic advection-diffusion operator u -> s on the (nx x nt) query grid.

    Query x = linspace(0, 1, nx) (x = 0 and x = 1 are the same point and hold equal
    values), t = linspace(0, t_final, nt); layout x slowest, t fastest.
    """

    D: float = 0.1
    t_final: float = 1.0
    nx: int = 32
    nt: int = 32

    name: ClassVar[str] = "advection_diffusion"
    periodic_input: ClassVar[bool] = True
    # s(x + 1, t) = s(x, t): the query points' column 0 (x) is periodic with period 1.
    periodic_coordinates: ClassVar[tuple[tuple[int, float], ...]] = ((0, 1.0),)
    coordinate_names: ClassVar[tuple[str, ...]] = ("x", "t")  # the columns of y (figures)

    def __post_init__(self):
        require_float("D", self.D, positive=True)
        require_float("t_final", self.t_final, positive=True)
        require_int("nx", self.nx, 2)
        require_int("nt", self.nt, 2)

    def query_points(self) -> np.ndarray:
        """(x, t) pairs, shape (nx * nt, 2); row i * nt + j is (x_i, t_j)."""
        xq = np.linspace(0.0, 1.0, self.nx)
        tq = np.linspace(0.0, self.t_final, self.nt)
        return space_time_points(xq, tq)

    def solve(self, x, u) -> np.ndarray:
        """Solutions for periodic initial data u (n, K) on x = linspace(0, 1, K).

        Requires u[:, -1] == u[:, 0] (to a relative 1e-6). Returns (n, nx * nt); column
        i * nt + j holds s(x_i, t_j), matching ``query_points``.
        """
        x, u = check_input(x, u, min_points=3, uniform=True)
        scale = max(1.0, float(np.max(np.abs(u), initial=0.0)))
        if np.max(np.abs(u[:, -1] - u[:, 0]), initial=0.0) > _PERIODIC_TOL * scale:
            raise ValueError("u must be periodic: u[:, -1] must equal u[:, 0]")
        n_grid = x.size - 1
        coef = np.fft.rfft(u[:, :n_grid], axis=1) / n_grid
        if n_grid % 2 == 0:
            coef[:, -1] *= 0.5
        modes = np.arange(coef.shape[1])
        tq = np.linspace(0.0, self.t_final, self.nt)
        # Padded grid of (nx - 1) * stride points, > N + 1 so that no kept mode lands on
        # the padded Nyquist index (where irfft would drop the imaginary part).
        stride = (n_grid + 1) // (self.nx - 1) + 1
        n_pad = (self.nx - 1) * stride
        out = np.empty((u.shape[0], self.nx, self.nt))
        padded = np.zeros((u.shape[0], n_pad // 2 + 1), dtype=complex)
        for j, t in enumerate(tq):
            # Loop over the nt query times only: it bounds memory to one (n, N) slice.
            growth = np.exp(-(4 * np.pi**2 * self.D * modes**2 + 2j * np.pi * modes) * t)
            padded[:, : modes.size] = coef * growth
            values = np.fft.irfft(padded * n_pad, n=n_pad, axis=1)
            out[:, :-1, j] = values[:, ::stride]
        out[:, -1, :] = out[:, 0, :]
        return out.reshape(u.shape[0], -1)
