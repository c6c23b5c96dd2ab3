"""The bands of a calibrated prediction (the keys of ``predict``) and their coverage."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..metrics import NOMINAL_LEVELS
from .conformal import _bonferroni
from .levels import check_level, predictive_quantile, z_value
from .scales import SCALE_CONFIDENCE, resolving_se, scale_settled, spread_off


@dataclass(frozen=True)
class Calibration:
    """``scales[i]``: k at ``levels[i]``; ``quantiles[i]``: the function-level q there."""

    levels: tuple[float, ...] = NOMINAL_LEVELS
    scales: tuple[float, ...] = field(default_factory=lambda: (1.0,) * len(NOMINAL_LEVELS))
    quantiles: tuple[float, ...] | None = None
    n_functions: int = 0
    # the scales of the raw band that the held-out functions cannot reject, (low, high);
    # () where no single scale passes at every level, None where not checked
    consistent: tuple[float, ...] | None = None
    # the likelihood's estimate of the raw band's scale and the standard error of its
    # logarithm (:func:`scale_likelihood`); None where not checked
    likelihood: tuple[float, float] | None = None
    # :func:`spread_check`'s z for a trusted band (None: not checked); above SPREAD_Z the
    # error does not follow the band's spread and each level was fitted on its own
    spread_z: float | None = None
    # the probability over the held-out draw with which the function-level quantiles cover
    # their levels (FUNCTION_CONFIDENCE); None where a level took the Gaussian union bound
    # (too few held-out functions). Absent from runs calibrated before it was recorded,
    # whose quantiles hold with at most 0.9.
    function_confidence: float | None = None

    def __post_init__(self):
        if list(self.levels) != sorted(self.levels) or len(set(self.levels)) != len(self.levels):
            raise ValueError(f"a Calibration's levels must ascend, got {self.levels}")

    @property
    def spread_off(self) -> bool:
        """Whether the held-out error does not follow the band's spread (:func:`spread_check`)."""
        return spread_off(self.spread_z)

    def scale(self, level: float) -> float:
        """k at ``level`` (linear interpolation between the fitted levels, flat outside)."""
        return float(np.interp(level, self.levels, self.scales))

    def quantile(self, level: float) -> float | None:
        if self.quantiles is None:
            return None
        return float(np.interp(level, self.levels, self.quantiles))

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def interval(self) -> tuple[float, float] | None:
        """The likelihood's confidence interval for the raw band's scale, at
        SCALE_CONFIDENCE (90%): ``k̂ ×/÷ exp(z se)``; None where not checked."""
        if self.likelihood is None:
            return None
        k, se = self.likelihood
        # a nearly flat likelihood has a huge se: cap the exponent below float overflow
        f = math.exp(min(z_value(SCALE_CONFIDENCE) * se, 700.0)) if math.isfinite(se) else math.inf
        return (k / f, k * f)

    @property
    def resolved(self) -> bool | None:
        """Whether the held-out functions resolve the band's scale: pin it down so closely
        (the likelihood's 90% interval, or for runs calibrated before it, the range of scales
        their coverage admits) that the solution band's coverage is within CLAIM_POINTS of
        its level anywhere in that range (:func:`~.scales.scale_settled` at
        :func:`~.scales.resolving_se`); None: not checked.
        Where they do not, the band's coverage rests on the sampler as much as on them."""
        return scale_settled(self.consistent, self.spread_z,
                             None if self.likelihood is None else self.likelihood[1],
                             resolving_se())

    @property
    def functions_needed(self) -> int | None:
        """Roughly how many held-out functions would resolve the scale that these could not:
        the likelihood's standard error of log k shrinks as one over the square root of
        their number (it is clustered by function). The figure rests on that standard
        error, itself uncertain (docs/bands.md). None where the scale is resolved, not
        checked, or its likelihood flat, and where the shape is off (more functions would
        not mend it)."""
        if (self.likelihood is None or self.resolved is not False or self.spread_off
                or not self.consistent or not math.isfinite(self.likelihood[1])):
            return None
        return math.ceil(self.n_functions * (self.likelihood[1] / resolving_se()) ** 2)

    @classmethod
    def from_dict(cls, d: dict | None) -> Calibration:
        if not d:
            return cls()
        q, ok, lik = d.get("quantiles"), d.get("consistent"), d.get("likelihood")
        return cls(tuple(d["levels"]), tuple(d["scales"]), None if q is None else tuple(q),
                   int(d.get("n_functions", 0)), None if ok is None else tuple(ok),
                   None if lik is None else tuple(lik), d.get("spread_z"),
                   d.get("function_confidence"))


def bands(mean, std, noise_std: float, calibration: Calibration | None = None,
          level: float = 0.95, function_level: float = 0.95, dof=None) -> dict[str, np.ndarray]:
    """The docs/design.md prediction keys, each (n, P), for a mean and the raw posterior spread
    ``std`` (and ``dof``, the predictive distribution's degrees of freedom, inf: Gaussian).

    ``std`` in the result is the calibrated spread, ``(upper - mean) / z`` with z the Gaussian
    quantile of ``level``: mean ± z·std is the solution band whatever the calibration or the
    degrees of freedom. The posterior's own spread is ``raw_std``."""
    check_level(level)
    check_level(function_level)
    cal = calibration or Calibration()
    mean, std = np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)
    half, k, z = predictive_quantile(level, dof) * std, cal.scale(level), z_value(level)
    calibrated = k * half / z  # mean ± z calibrated is the solution band
    obs_std = np.sqrt(calibrated**2 + noise_std**2)
    # the model's part and the Gaussian noise's half-widths add in quadrature
    obs_half = z * obs_std
    out = {
        "mean": mean, "std": calibrated, "raw_std": std,
        "dof": np.broadcast_to(np.inf if dof is None else np.asarray(dof, dtype=np.float64),
                               mean.shape),
        "lower": mean - k * half, "upper": mean + k * half,
        "obs_std": obs_std, "obs_lower": mean - obs_half, "obs_upper": mean + obs_half,
    }
    if cal.quantiles is not None and function_level > max(cal.levels):
        raise ValueError(f"function_level {function_level:g} is above {max(cal.levels):g}, the "
                         f"highest level the held-out functions were fitted at: its band "
                         f"would be that level's")
    q = cal.quantile(function_level)
    k95 = cal.scale(0.95)
    sim_half = (q if q is not None else _bonferroni(function_level, mean.shape[-1])) * np.sqrt(
        (k95 * std) ** 2 + noise_std**2)
    out["sim_lower"], out["sim_upper"] = mean - sim_half, mean + sim_half
    return out


def coverage_table(mean, std, s_clean, noise_std: float, calibration: Calibration | None,
                   levels=NOMINAL_LEVELS, dof=None, s_observed=None) -> dict:
    """Observed coverage (%) at each level: of the clean truth pointwise by the solution
    band, and of whole observed trajectories by the function-level band (an observation
    band: ``s_observed``, (n, P) or replicates (R, n, P); default the clean truth, which
    that band covers far above its level wherever σ is not small)."""
    s = np.asarray(s_clean, dtype=np.float64)
    obs = s if s_observed is None else np.asarray(s_observed, dtype=np.float64)
    point, func = {}, {}
    for level in levels:
        b = bands(mean, std, noise_std, calibration, level, level, dof)
        point[f"{level:g}"] = 100 * float(((s >= b["lower"]) & (s <= b["upper"])).mean())
        inside = (obs >= b["sim_lower"]) & (obs <= b["sim_upper"])
        func[f"{level:g}"] = 100 * float(inside.all(axis=-1).mean())
    return {"pointwise": point, "function": func}


def observed_trajectories(s_test, noise_std: float | None, rng: np.random.Generator,
                          replicates: int = 20) -> np.ndarray:
    """What the function-level band is scored against: where the data record the σ of
    their noise, the test targets are clean and ``replicates`` noisy copies of them are
    drawn, (R, n, P); where they do not, the test targets are the observations."""
    s = np.asarray(s_test, dtype=np.float64)
    if noise_std is None:
        return s
    return s + float(noise_std) * rng.standard_normal((replicates, *s.shape))
