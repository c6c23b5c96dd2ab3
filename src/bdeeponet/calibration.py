"""Bands from a predictive mean and spread: the solution band, the observation band, the
function-level band, and their calibration on held-out training functions.

Three bands answer three questions (all of shape (n, P)):

* **solution band** ``mean ± z_α k_α std``: where the true s lies, pointwise, with
  probability α. ``std`` is the spread of the posterior's predictions; ``k_α`` its
  calibration factor (1 when uncalibrated).
* **observation band** ``mean ± z_α sqrt(k_α² std² + σ²)``: where a new noisy measurement
  lies, the noise σ included.
* **function-level band** ``mean ± q_α sqrt(k² std² + σ²)``: the whole trajectory inside at
  once with probability >= α (split conformal on the max-normalised residual, Vovk et al.
  2005; Lei et al. 2018).

Calibration uses only training data: a split of the training functions that the sampler
never saw. Their targets are noisy, so for each level ``k_α`` is the factor whose
*observation* band covers a fraction α of the held-out targets (the known or estimated σ
separates the two parts); the solution band then uses the same ``k_α``. When σ dwarfs the
error, coverage counts cannot tell k apart, and k comes from the error's second moment,
estimated from products of neighbouring residuals (the independent noise drops out of
them; :func:`moment_scale`). ``q_α`` is the ⌈(n+1)α⌉-th smallest of the n held-out functions'
``max_p |s̃ − mean| / sqrt(k² std² + σ²)``: finite-sample valid for a noisy trajectory,
and conservative for the clean one. With fewer than 1/(1 − α) − 1 held-out functions the
level is out of conformal reach, and the Gaussian union bound over the P points is used.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.special import erfinv

from .metrics import NOMINAL_LEVELS
from .noise import line_windows, smooth_second_moment

_HALF = 2  # residuals averaged over 2 * _HALF + 1 neighbours on a grid line


def z_value(level: float) -> float:
    """The two-sided standard-normal quantile: P(|Z| <= z) = level."""
    check_level(level)
    return float(np.sqrt(2) * erfinv(level))


def check_level(level: float) -> None:
    if not (isinstance(level, int | float) and 0 < level < 1):
        raise ValueError(f"a nominal level must be in (0, 1), got {level}")


@dataclass(frozen=True)
class Calibration:
    """``scales[i]``: k at ``levels[i]``; ``quantiles[i]``: the function-level q there."""

    levels: tuple[float, ...] = NOMINAL_LEVELS
    scales: tuple[float, ...] = field(default_factory=lambda: (1.0,) * len(NOMINAL_LEVELS))
    quantiles: tuple[float, ...] | None = None
    n_functions: int = 0

    def scale(self, level: float) -> float:
        """k at ``level`` (linear interpolation between the fitted levels, flat outside)."""
        return float(np.interp(level, self.levels, self.scales))

    def quantile(self, level: float) -> float | None:
        if self.quantiles is None:
            return None
        return float(np.interp(level, self.levels, self.quantiles))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> Calibration:
        if not d:
            return cls()
        q = d.get("quantiles")
        return cls(tuple(d["levels"]), tuple(d["scales"]), None if q is None else tuple(q),
                   int(d.get("n_functions", 0)))


def fit_calibration(mean, std, s_noisy, noise_std: float, levels=NOMINAL_LEVELS,
                    y=None) -> Calibration:
    """k_α and q_α from held-out functions: ``mean``, ``std``, ``s_noisy`` (n, P) at the
    query points ``y`` (P, d; optional, see :func:`moment_scale`)."""
    mean, std, s = (np.asarray(a, dtype=np.float64) for a in (mean, std, s_noisy))
    fallback = moment_scale(s - mean, std, noise_std, y)
    r = np.abs(s - mean)
    # Averaging the residuals over 5 neighbours on a grid line divides the noise's variance
    # by 5 and keeps a smooth error: the coverage of the averaged residuals then says much
    # more about the error's own distribution (with noise twice the error, fitting on raw
    # residuals over-covered the truth by 5-8 points at the 50% level).
    centres = line_windows(y, _HALF) if y is not None else None
    if centres is not None:
        windows = [s[:, centres + j] - mean[:, centres + j] for j in range(-_HALF, _HALF + 1)]
        r_fit, std_fit = np.abs(np.mean(windows, axis=0)), std[:, centres]
        noise_fit = noise_std / np.sqrt(2 * _HALF + 1)
    else:
        r_fit, std_fit, noise_fit = r, std, noise_std
    scales = []
    for level in levels:
        scales.append(_fit_scale(r_fit, std_fit, noise_fit, level, fallback))
    k95 = float(np.interp(0.95, levels, scales))
    width = np.sqrt(k95**2 * std**2 + noise_std**2)
    scores = np.sort((r / width).max(axis=1))
    n = len(scores)
    quantiles = []
    for level in levels:
        rank = math.ceil((n + 1) * level)
        # too few held-out functions for this level: the Gaussian union bound instead
        quantiles.append(float(scores[rank - 1]) if rank <= n else _bonferroni(level, r.shape[1]))
    return Calibration(tuple(levels), tuple(scales), tuple(quantiles), n)


def moment_scale(residual, std, noise_std: float, y=None) -> float:
    """One k for every level from second moments: ``k² = E[e²] / E[std²]`` with the error's
    second moment ``E[e²]`` taken from products of neighbouring residuals when y has grid
    lines (the noise drops out of them, and σ need not be exact), else ``E[r²] − σ²``.
    An error too small to detect keeps k = 1."""
    e2 = smooth_second_moment(residual, y) if y is not None else None
    if e2 is None:
        e2 = float(np.mean(residual**2)) - noise_std**2
    spread = float(np.mean(std**2))
    if e2 <= 0 or spread == 0:  # nothing to detect, or no spread to scale
        return 1.0
    return float(np.sqrt(e2 / spread))


def _fit_scale(r, std, noise_std, level, fallback: float, k_max: float = 1e3) -> float:
    """The k whose observation band covers ``level`` of the held-out residuals ``r``.

    Coverage grows with k. When the noise alone covers nearly ``level`` (k = 0 is within
    two function-clustered standard errors), the coverage cannot tell k apart and the
    moment estimate ``fallback`` is used; otherwise the bisection root."""
    z = z_value(level)

    def cover(k):  # per function, so the standard error respects within-function correlation
        return (r <= z * np.sqrt(k**2 * std**2 + noise_std**2)).mean(axis=1)

    def se(c):
        return max(c.std(ddof=1) / np.sqrt(len(c)) if len(c) > 1 else 0.0, 1e-12)

    c0 = cover(0.0)
    if c0.mean() >= level - 2 * se(c0):
        return fallback
    lo, hi = 0.0, k_max
    if cover(hi).mean() < level:
        return hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cover(mid).mean() < level else (lo, mid)
    return hi


def bands(mean, std, noise_std: float, calibration: Calibration | None = None,
          level: float = 0.95, function_level: float = 0.95) -> dict[str, np.ndarray]:
    """The DESIGN.md prediction keys, each (n, P), for a mean and a posterior spread."""
    check_level(level)
    check_level(function_level)
    cal = calibration or Calibration()
    mean, std = np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)
    z, k = z_value(level), cal.scale(level)
    obs_std = np.sqrt((k * std) ** 2 + noise_std**2)
    out = {
        "mean": mean, "std": std,
        "lower": mean - z * k * std, "upper": mean + z * k * std,
        "obs_std": obs_std, "obs_lower": mean - z * obs_std, "obs_upper": mean + z * obs_std,
    }
    q = cal.quantile(function_level)
    k95 = cal.scale(0.95)
    sim_half = (q if q is not None else _bonferroni(function_level, mean.shape[-1])) * np.sqrt(
        (k95 * std) ** 2 + noise_std**2)
    out["sim_lower"], out["sim_upper"] = mean - sim_half, mean + sim_half
    return out


def _bonferroni(level: float, n_points: int) -> float:
    """Without held-out functions: the Gaussian z of a union bound over the P points."""
    return z_value(1 - (1 - level) / n_points)


def coverage_table(mean, std, s_clean, noise_std: float, calibration: Calibration | None,
                   levels=NOMINAL_LEVELS) -> dict:
    """Observed coverage (%) of the clean truth at each level: pointwise by the solution
    band, and per function (the whole trajectory inside) by the function-level band."""
    s = np.asarray(s_clean, dtype=np.float64)
    point, func = {}, {}
    for level in levels:
        b = bands(mean, std, noise_std, calibration, level, level)
        point[f"{level:g}"] = 100 * float(((s >= b["lower"]) & (s <= b["upper"])).mean())
        inside = (s >= b["sim_lower"]) & (s <= b["sim_upper"])
        func[f"{level:g}"] = 100 * float(inside.all(axis=1).mean())
    return {"pointwise": point, "function": func}
