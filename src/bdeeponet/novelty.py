"""How unlike the training inputs a new input is, and a flag calibrated at a false-alarm rate.

A calibrated band is a promise about inputs like the training inputs. The score is the
squared Mahalanobis distance of an input u (m,) from the training inputs, in their r
leading principal components plus the residual off them:

    d²(u) = Σ_{i≤r} z_i² / λ_i + |u - ū - V z|² / λ_res,     z = Vᵀ (u - ū),

λ_i the training inputs' variance along component i and λ_res their mean variance per
dimension off the r components (floored at 1e-12 λ_1). r counts the components whose
variance exceeds 1e-12 λ_1, at most half the training functions and 256 (why:
docs/bands.md). Scores of the held-out training functions (which neither the network nor
the components saw) are kept sorted; at a false-alarm rate α the threshold is their
conformal (1 - α) quantile, the ⌈(n + 1)(1 - α)⌉-th smallest of n, so an input drawn like
the training inputs is flagged with probability at most α. ``novelty`` is d² over that
threshold: above 1, flagged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .encoder import principal_components

DEFAULT_FALSE_ALARM = 0.05
_RELATIVE_FLOOR = 1e-12  # a component (and the residual's variance) counts above this × λ_1


def check_false_alarm(rate) -> float:
    a = np.asarray(rate) if not isinstance(rate, str) else None
    if a is None or a.ndim != 0 or a.dtype.kind not in "fiu" or not 0 < float(a) < 1:
        raise ValueError(f"the false-alarm rate must be in (0, 1), got {rate!r}")
    return float(a)


@dataclass
class Novelty:
    """The training inputs' components and the held-out functions' sorted scores."""

    mean: np.ndarray  # (m,)
    basis: np.ndarray  # (m, r)
    var: np.ndarray  # (r,)
    residual_var: float
    held_out: np.ndarray  # (n,) sorted d² of the held-out functions

    def distance(self, u) -> np.ndarray:
        """d² (n,) for inputs u (n, m)."""
        x = np.asarray(u, dtype=np.float64) - self.mean
        z = x @ self.basis
        residual = x - z @ self.basis.T
        return (z**2 / self.var).sum(axis=1) + (residual**2).sum(axis=1) / self.residual_var

    def threshold(self, rate: float) -> float:
        """The conformal (1 - rate) quantile of the held-out scores (inf when there are too
        few held-out functions for that rate)."""
        n = self.held_out.size
        k = math.ceil((n + 1) * (1 - check_false_alarm(rate)))
        return float(self.held_out[k - 1]) if k <= n else math.inf

    def score(self, u, rate: float = DEFAULT_FALSE_ALARM) -> tuple[np.ndarray, np.ndarray]:
        """``(novelty, novel)``, each (n,): d² over the threshold at ``rate``, and > 1; NaN
        and False where too few functions were held out to set a threshold at ``rate``."""
        threshold = self.threshold(rate)
        novelty = self.distance(u) / threshold if math.isfinite(threshold) else np.full(
            len(u), np.nan)
        return novelty, novelty > 1

    def state_dict(self) -> dict:
        return {"mean": torch.as_tensor(self.mean), "basis": torch.as_tensor(self.basis),
                "var": torch.as_tensor(self.var), "residual_var": self.residual_var,
                "held_out": torch.as_tensor(self.held_out)}

    @classmethod
    def from_state_dict(cls, d: dict) -> Novelty:
        return cls(*(np.asarray(d[k], dtype=np.float64) for k in ("mean", "basis", "var")),
                   float(d["residual_var"]), np.asarray(d["held_out"], dtype=np.float64))


def fit_novelty(u_train, u_held_out) -> Novelty:
    """The score of the training inputs ``u_train`` (N, m), calibrated on ``u_held_out``."""
    u = np.asarray(u_train, dtype=np.float64)
    n, m = u.shape
    mean, ss, vt = principal_components(u)
    r = max(1, min(int(np.sum(ss > _RELATIVE_FLOOR * ss[0])), n // 2, 256, m))
    var = np.maximum(ss[:r] / n, _RELATIVE_FLOOR * max(ss[0] / n, 1e-300))
    residual_var = max(float(ss[r:].sum()) / n / max(m - r, 1), _RELATIVE_FLOOR * float(var[0]))
    model = Novelty(mean, vt[:r].T.copy(), var, residual_var, np.empty(0))
    model.held_out = np.sort(model.distance(u_held_out))
    return model
