"""Bands from a predictive mean and spread: the solution band, the observation band, the
function-level band, and their calibration on held-out training functions.

Three bands answer three questions (all of shape (n, P)):

* **solution band** ``mean ± q_α k std``: where the true s lies, pointwise, with
  probability α. ``std`` is the predictive standard deviation of the posterior's
  predictions, ``q_α`` the Gaussian z, or the Student-t quantile where several chains that
  have not mixed leave few degrees of freedom (:func:`predictive_quantile`); ``k`` the
  calibration factor (1 when uncalibrated).
* **observation band** ``mean ± sqrt((q_α k std)² + (z_α σ)²)``: where a new noisy
  measurement lies, the noise σ included.
* **function-level band** ``mean ± q'_α sqrt(k² std² + σ²)``: the whole trajectory inside
  at once with probability >= α (split conformal on the max-normalised residual, Vovk et
  al. 2005; Lei et al. 2018).

Calibration uses only training data: a split of the training functions that the sampler
never saw. Their targets are noisy, so k is judged by the *observation* band on the
held-out targets (the known or estimated σ separates the two parts), and the solution band
uses the same k. A band of several chains is scaled by the k that the held-out functions'
likelihood puts it at (:func:`scale_likelihood`) where they pin it down to a factor of 2,
and stands (k = 1) where they cannot: where σ dwarfs the error, 100 noisy functions cannot
tell k = 1 from k = 1.5 (measured on the paper grid: pendulum at σ = 0.05 with 4 chains,
whose band under-covers by 13 points at 95%; the likelihood's 90% interval is 0.72-3.75).
Where the held-out error does not follow the band's spread from point to point
(:func:`spread_check`), that band is fitted as one chain's is.
One chain's band is not trusted so far: there the error's second moment, from products of
neighbouring residuals (the independent noise drops out of them;
:func:`moment_scale`), replaces it, and each level gets its own k (see
:func:`fit_calibration`). ``q'_α`` is a held-out order statistic of the n held-out
functions' ``max_p |s̃ − mean| / sqrt(k² std² + σ²)``, the one whose band covers at least α
of new noisy trajectories with probability 0.9 over the draw of the held-out functions
(:func:`conformal_rank`; the usual ⌈(n+1)α⌉-th is right only on average over draws), and
conservative for the clean trajectory. Where no rank reaches that (from 100 functions: at
99%), an upper confidence bound from the held-out scores' tail (:func:`tail_quantile`);
with fewer than 10 held-out functions, the Gaussian union bound over the P points.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import erfinv
from scipy.stats import beta as beta_dist
from scipy.stats import gamma as gamma_dist
from scipy.stats import t as student_t

from .metrics import NOMINAL_LEVELS
from .noise import lag_pairs, line_windows, smooth_second_moment

SCALE_GRID = np.geomspace(1e-2, 1e2, 401)  # scales searched by consistent_scales (2.3% apart)
CONFORMAL_CONFIDENCE = 0.9  # the function-level band covers >= its level in 90% of held-out draws
MIN_CHECK = 10  # held-out functions below which the band's scale is not checked
_HALF = 2  # one chain's residuals averaged over 2 * _HALF + 1 neighbours on a grid line
SPREAD_Z = 2.5  # spread_check's z above which the error does not follow the band's spread


def z_value(level: float) -> float:
    """The two-sided standard-normal quantile: P(|Z| <= z) = level."""
    check_level(level)
    return float(np.sqrt(2) * erfinv(level))


def pins_down(se: float) -> bool:
    """Whether a standard error ``se`` of log k pins the band's scale down: its interval at
    CONFORMAL_CONFIDENCE (90%) spans at most a factor of 2."""
    return se <= _pinning_se()


def _pinning_se() -> float:
    """The largest standard error of log k that :func:`pins_down` accepts (0.21)."""
    return math.log(2) / (2 * z_value(CONFORMAL_CONFIDENCE))


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
    # the scales of the raw band that the held-out functions cannot reject, (low, high);
    # () where no single scale passes at every level, None where not checked
    consistent: tuple[float, ...] | None = None
    # the likelihood's estimate of the raw band's scale and the standard error of its
    # logarithm (:func:`scale_likelihood`); None where not checked
    likelihood: tuple[float, float] | None = None
    # :func:`spread_check`'s z for a trusted band (None: not checked); above SPREAD_Z the
    # error does not follow the band's spread and each level was fitted on its own
    spread_z: float | None = None

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
        CONFORMAL_CONFIDENCE (90%): ``k̂ ×/÷ exp(z se)``; None where not checked."""
        if self.likelihood is None:
            return None
        k, se = self.likelihood
        # a nearly flat likelihood has a huge se: cap the exponent below float overflow
        f = math.exp(min(z_value(CONFORMAL_CONFIDENCE) * se, 700.0)) if math.isfinite(se) else math.inf
        return (k / f, k * f)

    @property
    def resolved(self) -> bool | None:
        """Whether the held-out functions pin the band's scale down to a factor of 2 (the
        likelihood's 90% interval, or for runs calibrated before it, the range of scales
        their coverage admits; None: not checked). Where they do not, the noise hides the
        error and the band rests on the sampler: no calibration from such functions can
        correct it."""
        if self.consistent is None:
            return None
        if len(self.consistent) != 2 or self.spread_off:  # no single scale fits: the shape is off
            return False
        if self.likelihood is not None:
            return pins_down(self.likelihood[1])
        return self.consistent[1] <= 2 * self.consistent[0]

    @property
    def functions_needed(self) -> int | None:
        """Roughly how many held-out functions would pin down the scale that these could not:
        the likelihood's standard error of log k shrinks as one over the square root of
        their number (it is clustered by function). The figure rests on that standard
        error, itself uncertain where the noise hides the error: simulated with σ six times
        the error (tests), a fresh set of that many pinned k down or came within 1.25 times
        of it in 79% of draws, and fell short by more than 2x in 12%. None where the scale
        is pinned down, not checked, or its likelihood flat, and where the shape is off
        (more functions would not mend it)."""
        if (self.likelihood is None or self.resolved is not False or self.spread_off
                or not self.consistent or not math.isfinite(self.likelihood[1])):
            return None
        return math.ceil(self.n_functions * (self.likelihood[1] / _pinning_se()) ** 2)

    @classmethod
    def from_dict(cls, d: dict | None) -> Calibration:
        if not d:
            return cls()
        q, ok, lik = d.get("quantiles"), d.get("consistent"), d.get("likelihood")
        return cls(tuple(d["levels"]), tuple(d["scales"]), None if q is None else tuple(q),
                   int(d.get("n_functions", 0)), None if ok is None else tuple(ok),
                   None if lik is None else tuple(lik), d.get("spread_z"))


def fit_calibration(mean, std, s_noisy, noise_std: float, levels=NOMINAL_LEVELS,
                    dof=None, y=None, trust_band: bool = True) -> Calibration:
    """k_α and the function-level q_α from held-out functions: ``mean``, ``std``, ``dof``
    (the predictive distribution, see :func:`predictive_quantile`) and ``s_noisy``, each
    (n, P) at the query points ``y`` (P, d; optional).

    How k is found depends on the band:

    * ``trust_band`` (several chains, whose disagreement is in the band; the linear
      baseline): one k for every level, the likelihood's (:func:`scale_likelihood`), where
      it pins the scale down (its 90% interval spans at most a factor of 2: ``resolved``);
      else the band stands, k = 1, and its coverage rests on the sampler. The Student-t
      band has the right shape; only its scale is in question. The likelihood weighs every
      residual by how much of it the band can explain, where coverage counts only see
      whether it falls inside: on diffusion-reaction at σ = 0.1 (4 chains, the paper grid)
      it puts k at 1.33 (90%: 0.97-1.83), where the coverages admit any k from 0.01 to 2.1,
      and the test set wants 1.21-1.41. Where no single scale
      covers the held-out functions at every level (:func:`consistent_scales`: the shape is
      off, and a likelihood under the wrong shape is misled by the tails), the median of
      the per-level roots, each kept at 1 where 1 is not rejected at that level
      (advection-diffusion at σ = 0.01 with 4 chains: roots from 0.91 at 50% down to 0.52
      at 99%, and their median 0.81 covers within two points of nominal at every level).
    * a trusted band whose held-out error does not follow its spread from point to point
      (:func:`spread_check` above SPREAD_Z: four chains after 600-2000 epochs, whose spread
      dips where they happen to agree) is fitted as the next item fits one chain's. There the
      likelihood of the noisy targets had put k at 0.74-0.98 and "resolved" it, where the
      held-out functions' clean targets wanted 1.31-1.59; level by level, the test coverage at
      95% went from 79-87% to 92-97%.
    * otherwise (one chain, MC dropout: local spreads, whose raw 95% band covered 8-60% on
      the paper grid): k_α from the second moment of :func:`moment_scale`, and each level
      its own k_α, fitted on residuals averaged over 5 grid neighbours (the noise's
      variance divided by 5, a smooth error kept): such a band's shape is wrong as well as
      its scale. On one chain the median over levels over-covered by 8-11 points at 50%
      (diffusion-reaction and Darcy at σ = 0.01). The averaging also shrinks an error
      that is not smooth over 5 points: where the observation band of those k_α covers
      fewer of the held-out residuals themselves than a level, by more than 2 points and
      more than two standard errors (clustered by function), each level is fitted on the
      residuals themselves instead, which is what that band promises (docs/bands.md)."""
    mean, std, s = (np.asarray(a, dtype=np.float64) for a in (mean, std, s_noisy))
    r = np.abs(s - mean)
    # standard errors clustered over fewer functions say nothing: no check
    checked = len(r) >= MIN_CHECK
    likelihood = scale_likelihood(s - mean, std, noise_std, dof) if checked else None
    consistent = consistent_scales(r, std, noise_std, levels, dof) if checked else None
    spread_z = spread_check(s - mean, std, y) if checked and trust_band else None
    if spread_off(spread_z):
        trust_band = False  # the error does not follow the band's spread: level by level
    if trust_band and likelihood is not None and consistent != ():
        # the held-out functions' estimate where they pin the scale down; else the band stands
        k = likelihood[0] if pins_down(likelihood[1]) else 1.0
        scales = (k,) * len(levels)
    elif trust_band:  # no single scale covers every level, or too few functions to check
        k = float(np.median([_fit_scale(r, predictive_quantile(level, dof) * std, noise_std,
                                        level, 1.0, True) for level in levels]))
        scales = (k,) * len(levels)
    else:
        fallback = moment_scale(s - mean, std, noise_std, y)
        centres = line_windows(y, _HALF) if y is not None else None
        if centres is not None:
            windows = [s[:, centres + j] - mean[:, centres + j] for j in range(-_HALF, _HALF + 1)]
            r_fit, std_fit = np.abs(np.mean(windows, axis=0)), std[:, centres]
            noise_fit = noise_std / np.sqrt(2 * _HALF + 1)
        else:
            r_fit, std_fit, noise_fit = r, std, noise_std
        # Gaussian z even for a Student-t band sent here by the spread check: the observation
        # band sqrt((k q std)² + (z σ)²) is exact only for Gaussian parts, and with the t
        # quantile q the three flagged runs of docs/bands.md covered 83-91% at 95%, not 92-97%
        scales = tuple(_fit_scale(r_fit, z_value(level) * std_fit, noise_fit, level, fallback,
                                  False) for level in levels)
        if centres is not None and _under_covers(r, std, noise_std, levels, scales):
            scales = tuple(_fit_scale(r, z_value(level) * std, noise_std, level, fallback, False)
                           for level in levels)
    k95 = float(np.interp(0.95, levels, scales))
    width = np.sqrt(k95**2 * std**2 + noise_std**2)
    scores = np.sort((r / width).max(axis=1))
    quantiles = []
    for level in levels:
        rank = conformal_rank(len(scores), level)
        if rank is not None:
            quantiles.append(float(scores[rank - 1]))
        elif len(scores) >= MIN_CHECK:  # a level beyond the held-out ranks: their tail, fitted
            quantiles.append(tail_quantile(scores, level))
        else:  # (next to) no held-out functions: the Gaussian union bound
            quantiles.append(_bonferroni(level, r.shape[1]))
    # a higher level's band is never narrower
    order = np.argsort(levels)
    quantiles = np.asarray(quantiles)
    quantiles[order] = np.maximum.accumulate(quantiles[order])
    return Calibration(tuple(levels), scales, tuple(map(float, quantiles)), len(scores), consistent,
                       likelihood, spread_z)


def conformal_rank(n: int, level: float, confidence: float = CONFORMAL_CONFIDENCE) -> int | None:
    """The rank r (1-based) of the held-out score that bounds the function-level band: the
    smallest r whose band covers at least ``level`` of new functions with probability
    ``confidence`` over the draw of the n held-out functions (Vovk 2012, "Conditional
    validity of inductive conformal predictors"). With exchangeable scores the coverage of
    the r-th smallest of n is Beta(r, n + 1 − r), so r is the smallest with
    ``P(Beta(r, n + 1 − r) < level) <= 1 − confidence``. ``confidence=None``: the usual
    ⌈(n + 1) level⌉, whose coverage is ``level`` on average over draws but, from 100
    functions, below it in about half of them (on the 8000-epoch grid with 4 chains,
    37.7–43.6% at nominal 50% in 9 of 12 runs: they share one held-out split, and their
    score, mostly the noise's maximum over the P points, is nearly the same for every
    function, so a small error in the quantile moves the coverage a lot).
    None where no rank reaches it (too few functions for the level)."""
    if confidence is None:
        rank = math.ceil((n + 1) * level)
        return rank if rank <= n else None
    ranks = np.arange(1, n + 1)
    ok = np.nonzero(beta_dist.cdf(level, ranks, n + 1 - ranks) <= 1 - confidence)[0]
    return int(ranks[ok[0]]) if ok.size else None


def tail_quantile(scores, level: float, confidence: float = CONFORMAL_CONFIDENCE) -> float:
    """The function-level score at a level no held-out rank reaches (from 100 functions:
    99%), as an upper confidence bound: a Gumbel distribution fitted to the logarithms of
    the held-out ``scores`` by its moments, its ``level`` quantile raised by the normal
    quantile at ``confidence`` (1.28 at 0.9) times its standard error (delta method, with
    the Gumbel's skewness 1.14 and excess kurtosis 2.4).

    A score is a maximum over P points; a maximum of light-tailed values is Gumbel, of
    heavy-tailed ones Fréchet, whose logarithm is Gumbel. Fitted on the log scale the bound
    is right for the heavy tails and errs wide for the light ones. Simulated with 100 held-out
    functions (the maxima over 100 points of |N(0, 1)|, of |t_5|, of |t_3|, of |N(0, 1)|
    with 30% of functions 1.6x wider, of an AR(1) with ρ = 0.95; 400 draws each): the band
    covers at least 99% in 90-100% of draws, at 1.17-1.40 times the width that would just do.
    The Gaussian union bound used before covered only 98.2-98.9% at 99% in 14 of the 32
    reSGLD and m-reSGLD runs of the two 4-chain grids, all on the PDEs."""
    x = np.log(np.maximum(np.asarray(scores, dtype=np.float64), 1e-300))
    n = len(x)
    sd = float(x.std(ddof=1))
    c = math.sqrt(6) / math.pi * (-np.euler_gamma - math.log(-math.log(level)))
    se = sd * math.sqrt((1 + 1.1 * c * c + 1.1395 * c) / n)
    z = z_value(2 * confidence - 1)  # the one-sided normal quantile at ``confidence``
    return float(math.exp(x.mean() + c * sd + z * se))


def spread_check(residual, std, y, groups: int = 3, lags: int = 3) -> float | None:
    """Whether the held-out error follows the band's spread from point to point. For pairs
    of points a few grid steps apart on a grid line, ``Σ r_p r_q / Σ std_p std_q`` (the
    independent noise drops out of the products, a smooth error keeps its second moment)
    among the pairs of the lowest third of spread, minus the same among the highest third,
    over its standard error clustered by function: a z that is large where the error is
    many times the spread where the spread is small and near it where it is large. That is
    the band of a few chains whose spread dips wherever they happen to agree, while the
    error does not dip there (measured: anti-derivative at σ = 0.01, 4 chains, 2000
    epochs: the error 3.2 times the sd in the lowest fifth of the sd, 1.1 times in the
    highest). The likelihood of noisy held-out targets then learns k from the high-spread
    points alone, where the error stands out of the noise, and the coverage counts from
    them too. None without grid lines or with fewer than MIN_CHECK functions."""
    pairs = lag_pairs(y, lags) if y is not None else None
    r, std = np.asarray(residual, dtype=np.float64), np.asarray(std, dtype=np.float64)
    if pairs is None or len(r) < MIN_CHECK:
        return None
    prod = np.concatenate([r[:, i] * r[:, i + j] for i, j in pairs], axis=1)
    spread = np.concatenate([std[:, i] * std[:, i + j] for i, j in pairs], axis=1)
    edges = np.quantile(spread, np.linspace(0, 1, groups + 1)[1:-1])
    group = np.searchsorted(edges, spread, side="right")
    num = np.stack([np.where(group == g, prod, 0.0).sum(1) for g in (0, groups - 1)], axis=1)
    den = np.stack([np.where(group == g, spread, 0.0).sum(1) for g in (0, groups - 1)], axis=1)
    if np.any(den.sum(0) <= 0):
        return None
    ratio = num.sum(0) / den.sum(0)
    # each function's influence on the two ratios (linearised), clustered by function
    influence = (num - ratio * den) / den.sum(0) * len(r)
    diff = influence[:, 0] - influence[:, 1]
    se = diff.std(ddof=1) / np.sqrt(len(r))
    return float((ratio[0] - ratio[1]) / se) if se > 0 else None


def spread_off(z: float | None) -> bool:
    """Whether :func:`spread_check`'s ``z`` (None: not checked) says the held-out error does
    not follow the band's spread."""
    return z is not None and z > SPREAD_Z


def consistent_scales(r, std, noise_std: float, levels=NOMINAL_LEVELS, dof=None,
                      grid=SCALE_GRID) -> tuple[float, ...]:
    """``(k_low, k_high)``: the range of scales k of the raw band whose held-out observation
    band ``sqrt((k q_α std)² + (z_α σ)²)`` covers the held-out residuals ``r`` (n, P) as
    often as nominal at every level: not rejected jointly at 5% (Bonferroni over the
    levels, standard errors clustered by function), searched on ``grid`` and widened to the
    neighbouring grid points; ``()`` where no k passes at every level (the band's shape is
    off).

    This is what held-out noisy functions can tell: where σ dwarfs the error the range is
    wide (on the paper grid with 4 chains, pendulum at σ = 0.05 admits any k from 0.01 to
    4.2), and no calibration from them can bring the band to within a few points of nominal.
    """
    z = z_value(1 - 0.05 / len(levels))
    ok = np.ones(len(grid), dtype=bool)
    for level in levels:
        half, zs = predictive_quantile(level, dof) * std, z_value(level) * noise_std
        for i, k in enumerate(grid):
            if ok[i]:
                c = _held_out_coverage(r, k * half, zs)
                ok[i] = abs(c.mean() - level) <= z * _se(c)
    if not ok.any():
        return ()
    idx = np.flatnonzero(ok)
    return (float(grid[max(idx[0] - 1, 0)]), float(grid[min(idx[-1] + 1, len(grid) - 1)]))


UNDER_COVER = 0.02
"""A shortfall of the observation band on the held-out residuals that keeps the windows'
fit (:func:`fit_calibration`): smaller ones (a heavy-tailed smooth error under noise fell
1.3 points short at 50%, 3 standard errors) cost less than a solution band fitted on the
noisy residuals, which there over-covers by 13 points at 50%."""


def _under_covers(r, std, noise_std: float, levels, scales) -> bool:
    """Whether the observation band of the scales ``k_α`` covers fewer of the held-out
    residuals ``r`` than some level α, by more than :data:`UNDER_COVER` and more than two
    standard errors."""
    for level, k in zip(levels, scales, strict=True):
        c = _held_out_coverage(r, k * z_value(level) * std, z_value(level) * noise_std)
        if c.mean() < level - max(UNDER_COVER, 2 * _se(c)):
            return True
    return False


def _held_out_coverage(r, half, zs) -> np.ndarray:
    """Per function, the fraction of the residuals ``r`` inside ``sqrt(half² + zs²)``."""
    return (r <= np.sqrt(half**2 + zs**2)).mean(axis=1)


def _se(c) -> float:
    """Standard error of the mean of per-function coverages (clustered by function)."""
    return c.std(ddof=1) / np.sqrt(len(c)) if len(c) > 1 else 0.0


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


_DOF_NODES = np.geomspace(1.0, 1e4, 241)  # the degrees of freedom the mixing nodes are tabulated at
_MIXING_POINTS = 32  # quadrature points of the Student-t's Gamma mixing


@functools.cache
def _mixing_table() -> np.ndarray:
    """(len(_DOF_NODES), Q): the nodes of :func:`_mixing_nodes` at each tabulated dof."""
    u = (np.arange(_MIXING_POINTS) + 0.5) / _MIXING_POINTS
    return gamma_dist.ppf(u[None, :], a=_DOF_NODES[:, None] / 2, scale=2 / _DOF_NODES[:, None])


def _mixing_nodes(dof) -> np.ndarray:
    """``g`` (..., Q): equal-weight quadrature nodes (quantile midpoints) of the Gamma(ν/2,
    rate ν/2) precision that makes a Student-t a Gaussian scale mixture, ``t_ν = N(0, 1/g)``,
    for each entry of ``dof`` (rounded to a table 4% apart; inf or None: g = 1)."""
    if dof is None:
        return np.ones((1, _MIXING_POINTS))
    table = _mixing_table()
    dof = np.asarray(dof, dtype=np.float64)
    g = np.ones((*dof.shape, _MIXING_POINTS))
    fin = np.isfinite(dof) & (dof < _DOF_NODES[-1])
    idx = np.clip(np.round(np.log(np.maximum(dof[fin], 1.0)) / np.log(_DOF_NODES[1])).astype(int),
                  0, len(_DOF_NODES) - 1)
    g[fin] = table[idx]
    return g


def scale_likelihood(residual, std, noise_std: float, dof=None,
                     bounds: tuple[float, float] = (1e-2, 1e2)) -> tuple[float, float]:
    """``(k, se)``: the maximum-likelihood scale of the predictive band from held-out noisy
    residuals ``s̃ − mean`` (n, P), under ``s̃ − mean = k std T + ε`` with T the predictive
    distribution's standard variable (Student-t at ``dof``, or Gaussian) and ε ~ N(0, σ²);
    ``se``: the standard error of ``log k``, clustered by function (a sandwich estimate: the
    points of one function share its error). The density is the Student-t's Gaussian scale
    mixture integrated by quadrature, so the noise is deconvolved exactly.

    Unlike coverage counts, which only see whether a residual falls inside a band, the
    likelihood weighs every residual by how much of it the band can explain: on the paper
    grid's diffusion-reaction at σ = 0.1 (4 chains; the noise 13 times the error) its standard
    error is a factor of 1.19 (90% interval 0.97-1.83) where the held-out coverages admit
    any k from 0.01 to 2.1."""
    r2 = (np.asarray(residual, dtype=np.float64) ** 2)[..., None]
    s2g = (np.asarray(std, dtype=np.float64) ** 2)[..., None] / _mixing_nodes(dof)
    var_noise = float(noise_std) ** 2

    def per_function(log_k):
        var = np.maximum(math.exp(2 * log_k) * s2g + var_noise, 1e-300)
        dens = np.mean(np.exp(-0.5 * r2 / var) / np.sqrt(var), axis=-1)
        return np.log(np.maximum(dens, 1e-300)).sum(axis=-1)

    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    best = minimize_scalar(lambda x: -per_function(x).sum(), bounds=(lo, hi), method="bounded",
                           options={"xatol": 1e-4})
    x, h = float(best.x), 1e-2
    up, mid, down = per_function(x + h), per_function(x), per_function(x - h)
    hess = float((up.sum() - 2 * mid.sum() + down.sum()) / h**2)
    score = (up - down) / (2 * h)
    se = math.sqrt(float(np.sum(score**2))) / -hess if hess < 0 else math.inf
    return math.exp(x), se


def _fit_scale(r, half, noise_std, level, fallback: float, trust_band: bool,
               k_max: float = 1e3) -> float:
    """The k whose observation band ``sqrt((k half)² + (z σ)²)`` covers ``level`` of the
    held-out residuals ``r``, or ``fallback`` where the coverage cannot reject it: at k = 1
    (``trust_band``: the band stands) or at k = 0 (the noise alone covers ``level``: σ
    dwarfs the error). Within two standard errors, clustered by function (the points of
    one function share its error)."""
    zs = z_value(level) * noise_std

    def cover(k):
        return _held_out_coverage(r, k * half, zs)

    if trust_band:
        c = cover(1.0)
        if abs(c.mean() - level) <= 2 * _se(c):
            return fallback
    else:
        c = cover(0.0)
        if c.mean() >= level - 2 * _se(c):
            return fallback
    lo, hi = 0.0, k_max
    if cover(hi).mean() < level:
        return hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cover(mid).mean() < level else (lo, mid)
    return hi


def predictive_quantile(level: float, dof=None):
    """The two-sided quantile of the predictive distribution at ``level``: the Gaussian z,
    or per point the Student-t quantile at ``dof`` (inf: Gaussian), see
    :func:`bdeeponet.posterior.pooled_predictive`."""
    if dof is None:
        return z_value(level)
    dof = np.asarray(dof, dtype=np.float64)
    return np.where(np.isfinite(dof), student_t.ppf(0.5 + level / 2, np.minimum(dof, 1e12)),
                    z_value(level))


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
