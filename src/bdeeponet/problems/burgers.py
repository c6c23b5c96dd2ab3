"""Viscous Burgers: s_t + s s_x = nu s_xx on the periodic [0, 1), s(x, 0) = u(x), s = s(., T).

The operator-learning benchmark of Li et al. (FNO, ICLR 2021) and Lu et al. (CMAME 2022):
nu = 0.1, T = 1, initial conditions u ~ N(0, 625 (-Δ + 25 I)^-2) of mean zero, i.e. in the
real Fourier basis {√2 cos 2πkx, √2 sin 2πkx : k ≥ 1} independent coefficients of sd
25 / (4π²k² + 25). The constant mode is left out, as the published files' generator (the
FNO authors' GRF1, mean argument 0) leaves it out: with it, each output is a constant of sd 1
plus a wave about a hundred times smaller, and noise of 1% of the targets' sd buries the wave.

Inputs are drawn on ``solve_points`` equispaced points x_j = j / N and solved there by a
Fourier pseudo-spectral method (2/3 dealiasing) with ETDRK4 in time (Cox & Matthews 2002,
the φ-functions by the contour integral of Kassam & Trefethen 2005): spectral in space,
fourth order in time. Sensors and query points are every (N / n_points)-th grid point.
The input is the trigonometric interpolant of its samples (modes above N/3 dropped). A
solution whose top kept modes (N/6 to N/3) hold more than ``_RESOLVED_TOL`` of its energy
after the first tenth of the steps is refused as unresolved (raise ``solve_points``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ._base import require_float, require_int

_RESOLVED_TOL = 1e-6  # energy share allowed in the top half of the kept modes, at any time
_CHUNK = 256  # functions solved at once (bounds memory to a few (256, N) arrays)


@dataclass(frozen=True)
class Burgers:
    """Viscous Burgers u(·, 0) -> u(·, t_final), observed at n_points of the periodic [0, 1)."""

    nu: float = 0.1
    t_final: float = 1.0
    n_points: int = 128
    solve_points: int = 1024
    steps: int = 250

    name: ClassVar[str] = "burgers"
    # published layout (Li et al.): inputs under 'a', solutions under 'u', one row a function
    published_keys: ClassVar[tuple[str, str]] = ("a", "u")
    periodic_coordinates: ClassVar[tuple[tuple[int, float], ...]] = ((0, 1.0),)
    coordinate_names: ClassVar[tuple[str, ...]] = ("x",)  # the columns of y (figures)

    def __post_init__(self):
        require_float("nu", self.nu, positive=True)
        require_float("t_final", self.t_final, positive=True)
        require_int("n_points", self.n_points, 4)
        require_int("solve_points", self.solve_points, 16)
        require_int("steps", self.steps, 1)
        if self.solve_points % self.n_points:
            raise ValueError(f"parameter 'n_points' ({self.n_points}) must divide 'solve_points' "
                             f"({self.solve_points})")

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return (self.n_points,)

    def sensor_points(self) -> np.ndarray:
        """x_j = j / n_points, shape (n_points, 1)."""
        return np.arange(self.n_points)[:, None] / self.n_points

    def query_points(self) -> np.ndarray:
        return self.sensor_points()

    def sample_inputs(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n initial conditions on the solve grid, (n, solve_points)."""
        big_n = self.solve_points
        k = np.arange(big_n // 2 + 1)
        sd = 25.0 / (4 * np.pi**2 * k**2 + 25.0)
        coef = rng.standard_normal((n, k.size)) + 1j * rng.standard_normal((n, k.size))
        coef *= sd * np.sqrt(0.5)  # each of cos and sin has sd √2 sd_k / 2 in c_k e^{2πikx} + cc
        coef[:, 0] = 0.0  # mean zero (see the module docstring)
        if big_n % 2 == 0:
            coef[:, -1] = 0.0  # the Nyquist mode has no sine partner: leave it out
        return np.fft.irfft(coef * big_n, n=big_n, axis=1)

    def at_sensors(self, u: np.ndarray) -> np.ndarray:
        return u[:, :: self.solve_points // self.n_points]

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n inputs and their solutions, each (n, n_points)."""
        u = self.sample_inputs(n, rng)
        return self.at_sensors(u), self.solve_grid(u)

    def solve(self, u: np.ndarray) -> np.ndarray:
        """Solutions (n, n_points) for initial conditions given at the n_points sensors,
        trigonometrically interpolated to the solve grid."""
        u = np.asarray(u, dtype=np.float64)
        if u.ndim != 2 or u.shape[1] != self.n_points:
            raise ValueError(f"burgers inputs must have shape (n, {self.n_points}), got {u.shape}")
        coef = np.fft.rfft(u, axis=1) / self.n_points
        if self.n_points % 2 == 0:
            coef[:, -1] *= 0.5  # split the Nyquist mode evenly so the interpolant is real
        fine = np.zeros((u.shape[0], self.solve_points // 2 + 1), dtype=complex)
        fine[:, : coef.shape[1]] = coef
        return self.solve_grid(np.fft.irfft(fine * self.solve_points, n=self.solve_points, axis=1))

    def solve_grid(self, u: np.ndarray) -> np.ndarray:
        """Solutions at t_final, every (solve_points / n_points)-th point, for u (n, solve_points)."""
        out = [self._solve_chunk(u[i:i + _CHUNK]) for i in range(0, u.shape[0], _CHUNK)]
        return np.concatenate(out)[:, :: self.solve_points // self.n_points]

    def _solve_chunk(self, u: np.ndarray) -> np.ndarray:
        big_n, h = self.solve_points, self.t_final / self.steps
        k = 2 * np.pi * np.arange(big_n // 2 + 1)
        lin = -self.nu * k**2
        keep = np.arange(k.size) < big_n // 3  # 2/3 rule
        e, e2, q, f1, f2, f3 = _etdrk4_coefficients(lin, h)

        def nonlinear(v):  # -(u^2 / 2)_x in Fourier space, dealiased
            w = np.fft.irfft(v, n=big_n, axis=1)
            return -0.5j * k * np.fft.rfft(w * w, axis=1) * keep

        v = np.fft.rfft(u, axis=1) * keep
        worst = 0.0  # the input's own top modes decay within the first steps: not counted
        with np.errstate(all="ignore"):  # a blow-up is reported below, not warned about
            for step in range(self.steps):
                nv = nonlinear(v)
                a = e2 * v + q * nv
                na = nonlinear(a)
                b = e2 * v + q * na
                nb = nonlinear(b)
                c = e2 * a + q * (2 * nb - nv)
                nc = nonlinear(c)
                v = e * v + f1 * nv + 2 * f2 * (na + nb) + f3 * nc
                if step >= self.steps // 10 and (step % 10 == 9 or step == self.steps - 1):
                    share = _top_share(v, big_n)
                    if not share <= worst:  # larger, or NaN: stop at a blow-up
                        worst = share
                        if math.isnan(share):
                            break
        if not worst <= _RESOLVED_TOL:  # NaN too
            raise ValueError(f"burgers: the solution is not resolved at solve_points={big_n}, "
                             f"steps={self.steps} ("
                             + ("it blew up" if math.isnan(worst) else
                                f"its top modes hold {worst:.1e} of the energy, more than "
                                f"{_RESOLVED_TOL:g}") + "); raise solve_points or steps")
        return np.fft.irfft(v, n=big_n, axis=1)


def _top_share(v: np.ndarray, big_n: int) -> float:
    """The largest share of a function's energy held by the top half of the kept modes
    (N/6 to N/3), 0 for a function of no energy (zero stays zero); NaN when a function blew
    up."""
    power = np.abs(v) ** 2
    total = power.sum(axis=1)
    if not np.all(np.isfinite(total)):
        return float("nan")
    top = power[:, big_n // 6: big_n // 3].sum(axis=1)
    return float(np.max(np.divide(top, total, out=np.zeros_like(top), where=total > 0)))


def _etdrk4_coefficients(lin: np.ndarray, h: float, contour: int = 32):
    """ETDRK4 coefficients for the diagonal linear part ``lin`` and step h; the φ-functions
    are averaged over a circle of radius 1 around h·lin so that no cancellation occurs."""
    lh = h * lin
    r = np.exp(1j * np.pi * (np.arange(1, contour + 1) - 0.5) / contour)
    z = lh[:, None] + r[None, :]
    e, e2 = np.exp(lh), np.exp(lh / 2)
    q = h * np.real(np.mean((np.exp(z / 2) - 1) / z, axis=1))
    f1 = h * np.real(np.mean((-4 - z + np.exp(z) * (4 - 3 * z + z**2)) / z**3, axis=1))
    f2 = h * np.real(np.mean((2 + z + np.exp(z) * (z - 2)) / z**3, axis=1))
    f3 = h * np.real(np.mean((-4 - 3 * z - z**2 + np.exp(z) * (4 - z)) / z**3, axis=1))
    return e, e2, q, f1, f2, f3
