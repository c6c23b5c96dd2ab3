"""The baseline a careful user tries first: Bayesian linear regression from the sensor
values to the targets (closed form, seconds to fit).

For every query point p the model is ``s_p = [u, 1] · w_p + ε``, ``ε ~ N(0, σ²)`` with the
known σ and a Gaussian prior ``w_p ~ N(0, σ_w² I)``. The design matrix ``X = [u, 1]`` (N, m+1)
is shared by all points, so one factorisation gives every posterior:
``Σ = (XᵀX/σ² + I/σ_w²)⁻¹`` and ``W = Σ Xᵀ S / σ²`` (m+1, P). For a new input x the
predictive mean is ``x W`` and the (epistemic) standard deviation ``sqrt(x Σ xᵀ)``, the
same at every point. Exact for linear operators (anti-derivative, advection-diffusion);
an approximation elsewhere. It predicts only at its training query points.

``train`` fits it, as the DeepONets, on standardised data (``scaling``: u and s less their
training mean, over their sd; σ over s's sd), so that the prior means the same whatever
units the data come in and the intercept is not shrunk towards 0 in the data's units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import cho_factor, cho_solve

from .data import input_array
from .novelty import Novelty


@dataclass
class LinearPosterior:
    weights: np.ndarray  # W (m+1, P)
    cov: np.ndarray  # Σ (m+1, m+1)
    y: np.ndarray  # training query points (P, d)
    noise_std: float = float("nan")
    calibration: dict | None = None  # Calibration.to_dict() from held-out functions
    novelty: Novelty | None = None  # how unlike the training inputs an input is
    scaling: dict | None = None  # u_shift, u_scale, s_shift, s_scale (none: the data's units)

    kind = "linear"
    n_samples = 0

    @property
    def n_sensors(self) -> int:
        return self.weights.shape[0] - 1

    @property
    def dim_y(self) -> int:
        return self.y.shape[1]

    def predict(self, u, y, z: float = 2.0, seed: int = 0) -> dict[str, torch.Tensor]:
        u = input_array("'u'", u, self.n_sensors, "n", "the run's sensor count")
        y = input_array("'y'", y, self.dim_y, "P", "the run's query dimension")
        if y.shape != self.y.shape or not np.allclose(y, self.y):
            raise ValueError(
                "the linear baseline predicts only at its training query points: pass them "
                "as 'y' (query_points.npy in its run directory; the command line's default)"
            )
        c = _constants(self.scaling)
        u = (u - c["u_shift"]) / c["u_scale"]
        x = np.hstack([u, np.ones((len(u), 1))])
        mean = c["s_shift"] + c["s_scale"] * (x @ self.weights)
        std = c["s_scale"] * np.sqrt(np.einsum("ij,jk,ik->i", x, self.cov, x))[:, None]
        std = std * np.ones_like(mean)
        mean, std = torch.from_numpy(mean), torch.from_numpy(std)
        return {"mean": mean, "raw_std": std, "dof": torch.full_like(mean, float("inf")),
                "raw_lower": mean - z * std, "raw_upper": mean + z * std}

    def state_dict(self) -> dict:
        return {"kind": self.kind, "weights": torch.from_numpy(self.weights),
                "cov": torch.from_numpy(self.cov), "y": torch.from_numpy(self.y),
                "noise_std": self.noise_std, "calibration": self.calibration,
                "novelty": None if self.novelty is None else self.novelty.state_dict(),
                "scaling": self.scaling}

    @classmethod
    def from_state_dict(cls, d: dict) -> LinearPosterior:
        return cls(d["weights"].numpy(), d["cov"].numpy(), d["y"].numpy(),
                   float(d.get("noise_std", float("nan"))), d.get("calibration"),
                   None if d.get("novelty") is None else Novelty.from_state_dict(d["novelty"]),
                   d.get("scaling"))


def fit_linear(u, s, y, noise_std: float, prior_std: float = 1.0,
               scaling: dict | None = None) -> LinearPosterior:
    """Closed-form posterior of the per-point linear model (module docstring), in the data's
    units or, with ``scaling`` (:func:`bdeeponet.model.standardisation`), in standardised
    ones: the prior is on the weights from ``(u - u_shift) / u_scale`` to
    ``(s - s_shift) / s_scale``."""
    c = _constants(scaling)
    u = (np.asarray(u, dtype=np.float64) - c["u_shift"]) / c["u_scale"]
    s = (np.asarray(s, dtype=np.float64) - c["s_shift"]) / c["s_scale"]
    sd = noise_std / c["s_scale"]
    x = np.hstack([u, np.ones((len(u), 1))])
    precision = x.T @ x / sd**2 + np.eye(x.shape[1]) / prior_std**2
    factor = cho_factor(precision)
    cov = cho_solve(factor, np.eye(x.shape[1]))
    weights = cho_solve(factor, x.T @ s) / sd**2
    return LinearPosterior(weights, cov, np.asarray(y, dtype=np.float64), float(noise_std),
                           scaling=None if scaling is None else dict(scaling))


def _constants(scaling: dict | None) -> dict[str, float]:
    """The standardisation constants, the identity where none were used."""
    return {"u_shift": 0.0, "u_scale": 1.0, "s_shift": 0.0, "s_scale": 1.0, **(scaling or {})}
