"""2-D Darcy flow: -∇·(a(x) ∇s(x)) = f on the unit square, s = 0 on the boundary.

The operator-learning benchmark of Li et al. (FNO, ICLR 2021) and Lu et al. (CMAME 2022):
f = 1, a = 12 where ψ >= 0 and a = 3 where ψ < 0, with ψ ~ N(0, (-Δ + 9 I)^-2) under zero
Neumann conditions, i.e. independent coefficients of sd 1 / (π²(k1² + k2²) + 9) on the
orthonormal cosine basis c_k1 c_k2 cos(π k1 x) cos(π k2 y) (c_0 = 1, c_k = √2).

ψ and a are sampled on the ``solve_points`` × ``solve_points`` nodes x_i = i h,
h = 1 / (solve_points - 1), solve_points = refine (n_points - 1) + 1, and the equation is
solved there by the vertex-centred finite-volume scheme

    Σ_faces a_face (s_node - s_neighbour) = f h²,   a_face = 2 a_node a_nb / (a_node + a_nb)

(harmonic mean of the two nodes' coefficients: the exact flux of a 1-D two-material
cell). It is second order for smooth a (measured in the tests). Inputs (a) and outputs
(s) are both observed at every ``refine``-th node, the n_points × n_points grid, laid out
x slowest (row-major, as ``bdeeponet import`` reads a 2-D field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve

from ._base import require_float, require_int

_MIN_SOLVE_POINTS = 9  # a 7 x 7 interior: below it the scheme resolves no structure of a


@dataclass(frozen=True)
class Darcy2D:
    """Pressure s of 2-D Darcy flow with a two-valued permeability a, on an n_points² grid."""

    f: float = 1.0
    a_high: float = 12.0
    a_low: float = 3.0
    n_points: int = 29
    refine: int = 2

    name: ClassVar[str] = "darcy2d"
    # published layout (Li et al.): inputs under 'coeff', solutions under 'sol', (n, s, s)
    published_keys: ClassVar[tuple[str, str]] = ("coeff", "sol")
    periodic_coordinates: ClassVar[tuple[tuple[int, float], ...]] = ()
    coordinate_names: ClassVar[tuple[str, ...]] = ("x1", "x2")  # the columns of y (figures)

    def __post_init__(self):
        require_float("f", self.f)
        require_float("a_high", self.a_high, positive=True)
        require_float("a_low", self.a_low, positive=True)
        require_int("n_points", self.n_points, 3)
        require_int("refine", self.refine, 1)
        if self.solve_points < _MIN_SOLVE_POINTS:
            raise ValueError(f"darcy2d: a solve grid of {self.solve_points} points a side "
                             f"(refine (n_points - 1) + 1) cannot resolve the flow; it needs "
                             f">= {_MIN_SOLVE_POINTS}")

    @property
    def solve_points(self) -> int:
        return self.refine * (self.n_points - 1) + 1

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return (self.n_points, self.n_points)

    def sensor_points(self) -> np.ndarray:
        """(x, y) of the n_points² grid, x slowest, shape (n_points², 2)."""
        g = np.linspace(0.0, 1.0, self.n_points)
        xx, yy = np.meshgrid(g, g, indexing="ij")
        return np.column_stack([xx.ravel(), yy.ravel()])

    def query_points(self) -> np.ndarray:
        return self.sensor_points()

    def sample_inputs(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n permeabilities on the solve grid, (n, solve_points, solve_points)."""
        big = self.solve_points
        k = np.arange(big)
        x = np.linspace(0.0, 1.0, big)
        basis = np.cos(np.pi * np.outer(x, k)) * np.where(k == 0, 1.0, np.sqrt(2.0))  # (S, K)
        sd = 1.0 / (np.pi**2 * (k[:, None] ** 2 + k[None, :] ** 2) + 9.0)
        psi = basis @ (rng.standard_normal((n, big, big)) * sd) @ basis.T
        return np.where(psi >= 0, self.a_high, self.a_low)

    def at_sensors(self, a: np.ndarray) -> np.ndarray:
        r = self.refine
        return a[:, ::r, ::r].reshape(a.shape[0], -1)

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n inputs and their solutions, each (n, n_points²)."""
        a = self.sample_inputs(n, rng)
        return self.at_sensors(a), self.at_sensors(self.solve_grid(a, self.f))

    def solve(self, a: np.ndarray) -> np.ndarray:
        """Solutions (n, n_points²) for permeabilities given at the n_points² sensors (refine
        must be 1: a two-valued field cannot be refined from its samples)."""
        a = np.asarray(a, dtype=np.float64)
        if a.ndim != 2 or a.shape[1] != self.n_points**2:
            raise ValueError(f"darcy2d inputs must have shape (n, {self.n_points ** 2}), got {a.shape}")
        if self.refine != 1:
            raise ValueError("darcy2d solves given inputs only on their own grid, --param "
                             "refine=1 (a two-valued field cannot be refined from its "
                             "samples); data made at refine > 1 (the default is 2) cannot "
                             "take solved inputs: for the acquire loop, generate the data "
                             "with --param refine=1 too")
        if not (np.all(np.isfinite(a)) and np.all(a > 0)):
            raise ValueError("darcy2d permeabilities must be finite and > 0")
        a = a.reshape(-1, self.n_points, self.n_points)
        return self.solve_grid(a, self.f).reshape(a.shape[0], -1)

    @staticmethod
    def solve_grid(a: np.ndarray, f) -> np.ndarray:
        """Finite-volume solutions on the node grid of ``a`` (n, S, S); ``f`` a number or an
        array (n, S, S) of source values at the nodes. Returns (n, S, S), zero on the boundary."""
        n, big = a.shape[0], a.shape[1]
        h = 1.0 / (big - 1)
        inner = big - 2
        f = np.broadcast_to(np.asarray(f, dtype=np.float64), a.shape)
        index = np.arange(inner * inner).reshape(inner, inner)
        out = np.zeros(a.shape)
        for i in range(n):
            ai = a[i]
            ax = 2 * ai[1:] * ai[:-1] / (ai[1:] + ai[:-1])  # face (i+1/2, j), (S-1, S)
            ay = 2 * ai[:, 1:] * ai[:, :-1] / (ai[:, 1:] + ai[:, :-1])  # face (i, j+1/2)
            west, east = ax[:-1, 1:-1], ax[1:, 1:-1]  # faces of the interior nodes
            south, north = ay[1:-1, :-1], ay[1:-1, 1:]
            diag = (west + east + south + north).ravel()
            rows, cols, vals = [index.ravel()], [index.ravel()], [diag]
            # off-diagonal couplings between interior neighbours (symmetric)
            cx = ax[1:-1, 1:-1]  # face between interior nodes (i, j) and (i+1, j)
            cy = ay[1:-1, 1:-1]
            for c, p, q in ((cx, index[:-1], index[1:]), (cy, index[:, :-1], index[:, 1:])):
                rows += [p.ravel(), q.ravel()]
                cols += [q.ravel(), p.ravel()]
                vals += [-c.ravel(), -c.ravel()]
            matrix = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                                   shape=(inner * inner,) * 2)
            rhs = f[i, 1:-1, 1:-1].ravel() * h * h
            out[i, 1:-1, 1:-1] = spsolve(matrix, rhs).reshape(inner, inner)
        if not np.all(np.isfinite(out)):
            raise ValueError("darcy2d: the solve gave NaN or inf (degenerate permeabilities?)")
        return out
