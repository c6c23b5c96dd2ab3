"""Fixed linear encoders fitted on the training data: the branch net's input as the
training inputs' principal components (PCA), and a fixed trunk, the training outputs'
mean and principal modes (:class:`TrunkModes`).

A DeepONet whose branch reads m = 7225 sensor values (an 85 × 85 field) has a first layer
with m inputs: its Kronecker metric factor is m × m (O(m³) to build, O(m² h) a step) and
every forward pass carries m columns. Inputs drawn from a smooth or structured distribution
lie near a low-dimensional subspace, so the branch reads instead

    z = Vᵀ (u - ū) / c,      (n, r)

with ū the training inputs' mean, V (m, r) their first r principal directions and c the
root-mean variance per kept component (so ``|z|² ≈ r`` on average, as the standardised
sensors give ``|x|² ≈ m`` to a first layer of fan-in m: the fan-in prior keeps its
meaning). It is a fixed linear map fitted once on the training inputs, stored with the
posterior, and applied to every raw input the run predicts for (as POD/PCA-based operator
networks do; Bhattacharya et al. 2021, Lu et al. 2022).

The default keeps at most 32 components: an MLP branch fed more of a two-valued 2-D field's
components fits their fine detail and predicts worse (measured in docs/speed.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

AUTO_MIN_SENSORS = 257  # below this the raw sensors cost little: no encoder by default
AUTO_MAX_COMPONENTS = 32  # measured best on 2-D Darcy (docs/speed.md); more overfit the MLP
AUTO_DROPPED_VARIANCE = 1e-6  # the default keeps all but this share of the inputs' variance


@dataclass
class PCAEncoder:
    """``z = (u - mean) @ basis / scale``; ``mean`` (m,), ``basis`` (m, r), float64."""

    mean: np.ndarray
    basis: np.ndarray
    scale: float
    kept_variance: float  # share of the training inputs' variance in the r components

    @property
    def n_sensors(self) -> int:
        return self.basis.shape[0]

    @property
    def components(self) -> int:
        return self.basis.shape[1]

    def __call__(self, u):
        """Encode raw inputs u (n, m): numpy in, numpy out; a tensor in, a tensor out (its
        dtype and device)."""
        if torch.is_tensor(u):
            mean = torch.as_tensor(self.mean, dtype=torch.float64, device=u.device)
            basis = torch.as_tensor(self.basis, dtype=torch.float64, device=u.device)
            return ((u.double() - mean) @ basis / self.scale).to(u.dtype)
        return (np.asarray(u, dtype=np.float64) - self.mean) @ self.basis / self.scale

    def state_dict(self) -> dict:
        return {"mean": torch.as_tensor(self.mean), "basis": torch.as_tensor(self.basis),
                "scale": self.scale, "kept_variance": self.kept_variance}

    @classmethod
    def from_state_dict(cls, d: dict) -> PCAEncoder:
        return cls(np.asarray(d["mean"], dtype=np.float64), np.asarray(d["basis"], dtype=np.float64),
                   float(d["scale"]), float(d["kept_variance"]))


def fit_pca(u_train: np.ndarray, components: int | None = None) -> PCAEncoder | None:
    """The encoder of ``u_train`` (N, m) with ``components`` r, or None for the raw sensors.

    ``components`` None (the default): no encoder when m < 257; else the fewest components
    that keep all but 1e-6 of the inputs' variance, at most 32 and at most N - 1.
    0: no encoder. r > 0: exactly r (at most min(N - 1, m)).
    """
    u = np.asarray(u_train, dtype=np.float64)
    n, m = u.shape
    if components == 0 or (components is None and m < AUTO_MIN_SENSORS):
        return None
    limit = min(n - 1, m)
    if components is not None and not 1 <= components <= limit:
        raise ValueError(f"branch_pca must be in [0, {limit}] (at most the training functions "
                         f"minus one and the sensors), got {components}")
    if limit < 1:
        raise ValueError("a PCA encoder needs at least 2 training functions")
    mean, var, vt = principal_components(u)
    total = var.sum()
    if total <= 0:
        raise ValueError("the training inputs are all equal: no principal components to encode")
    if components is None:
        kept = np.cumsum(var) / total
        components = min(int(np.searchsorted(kept, 1 - AUTO_DROPPED_VARIANCE)) + 1,
                         AUTO_MAX_COMPONENTS, limit)
    r = components
    scale = float(np.sqrt(var[:r].sum() / (n * r)))
    if scale <= 0:
        raise ValueError(f"the first {r} principal components of the training inputs are zero")
    return PCAEncoder(mean, vt[:r].T.copy(), scale, float(var[:r].sum() / total))


def principal_components(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean (m,), sums of squares (k,), directions (k, m))`` of the rows of ``u`` (N, m),
    k = min(N, m), largest first: the SVD of the centred rows."""
    mean = u.mean(axis=0)
    _, sv, vt = np.linalg.svd(u - mean, full_matrices=False)
    return mean, sv**2, vt


@dataclass
class TrunkModes:
    """A fixed trunk's basis at the training query points (POD-DeepONet, Lu et al. 2022):
    ``points`` (P, d), the training query points; ``values`` (P, 1 + q), the training
    outputs' mean and their first q principal modes, each mode scaled by the sd of its
    coefficient (all in the model's standardised units), so that the branch's q outputs
    have unit variance. ``self(y)`` is ``[y, values at y]`` (P', d + 1 + q).

    The basis is known only at the training query points: a y off them is refused.
    """

    points: np.ndarray
    values: np.ndarray

    @property
    def dim_y(self) -> int:
        return self.points.shape[1]

    def rows(self, y: np.ndarray) -> np.ndarray:
        """Index into ``points`` of each row of ``y`` (P', d); ValueError naming how many
        rows are not training query points. Points are compared in single precision, the
        precision the model computes in."""
        y, points = np.asarray(y, dtype=np.float32), self.points.astype(np.float32)
        if y.shape == points.shape and np.array_equal(y, points):
            return np.arange(len(y))
        index = {row.tobytes(): i for i, row in enumerate(points)}
        found = [index.get(row.tobytes(), -1) for row in y]
        if (missing := found.count(-1)):
            raise ValueError(f"this run's trunk is the training outputs' principal modes, "
                             f"known only at its {len(self.points)} training query points; "
                             f"{missing} of the {len(y)} points asked for are not among them "
                             f"(train with --trunk mlp to predict anywhere)")
        return np.asarray(found)

    def __call__(self, y):
        """``[y, basis at y]``: numpy in, numpy out; a tensor in, a tensor out (its dtype and
        device)."""
        if torch.is_tensor(y):
            values = self.values[self.rows(y.detach().cpu().numpy())]
            return torch.cat([y, torch.as_tensor(values, dtype=y.dtype, device=y.device)], 1)
        y = np.asarray(y, dtype=np.float64)
        return np.concatenate([y, self.values[self.rows(y)]], 1)

    def state_dict(self) -> dict:
        return {"points": torch.as_tensor(self.points), "values": torch.as_tensor(self.values)}

    @classmethod
    def from_state_dict(cls, d: dict) -> TrunkModes:
        return cls(np.asarray(d["points"], dtype=np.float64),
                   np.asarray(d["values"], dtype=np.float64))


def fit_modes(s_train: np.ndarray, y: np.ndarray, count: int, shift: float = 0.0,
              scale: float = 1.0) -> TrunkModes:
    """The mean and first ``count`` principal modes of the training outputs ``s_train``
    (N, P) at the query points ``y`` (P, d), in units of ``(s - shift) / scale``."""
    z = (np.asarray(s_train, dtype=np.float64) - shift) / scale
    n, p = z.shape
    if not 1 <= count <= min(n - 1, p):
        raise ValueError(f"a POD trunk of {count} modes needs as many principal modes of the "
                         f"training outputs, and {n} functions at {p} points have at most "
                         f"{min(n - 1, p)}: choose --latent from 1 to {min(n - 1, p)}")
    mean, var, vt = principal_components(z)
    k = count
    if var[k - 1] <= 1e-12 * var[0]:
        rank = int(np.sum(var > 1e-12 * var[0]))
        raise ValueError(f"a POD trunk of {count} modes needs as many principal modes of the "
                         f"training outputs, which have {rank}: choose --latent {rank} or less")
    values = np.column_stack([mean, vt[:k].T * np.sqrt(var[:k] / n)])
    return TrunkModes(np.asarray(y, dtype=np.float64).copy(), values)
