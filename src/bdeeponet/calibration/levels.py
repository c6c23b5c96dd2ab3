"""The quantiles a band is made of: the level checks, z, and the predictive distribution's
quantile (Gaussian, or Student-t for chains that have not mixed)."""

from __future__ import annotations

import numpy as np
from scipy.special import erfinv
from scipy.stats import t as student_t


def z_value(level: float) -> float:
    """The two-sided standard-normal quantile: P(|Z| <= z) = level."""
    check_level(level)
    return float(np.sqrt(2) * erfinv(level))


def check_level(level: float) -> None:
    if not (isinstance(level, int | float) and 0 < level < 1):
        raise ValueError(f"a nominal level must be in (0, 1), got {level}")


def predictive_quantile(level: float, dof=None):
    """The two-sided quantile of the predictive distribution at ``level``: the Gaussian z,
    or per point the Student-t quantile at ``dof`` (inf: Gaussian), see
    :func:`bdeeponet.posterior.pooled_predictive`."""
    if dof is None:
        return z_value(level)
    dof = np.asarray(dof, dtype=np.float64)
    return np.where(np.isfinite(dof), student_t.ppf(0.5 + level / 2, np.minimum(dof, 1e12)),
                    z_value(level))
