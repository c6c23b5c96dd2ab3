"""What held-out functions say about a band's scale: its likelihood, the scales their
coverage cannot reject, the error's second moment from neighbouring residuals, whether the
error follows the band's spread, and the per-level coverage fit."""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.stats import gamma as gamma_dist
from scipy.stats import norm

from ..metrics import NOMINAL_LEVELS
from ..noise import lag_pairs, smooth_second_moment
from .levels import predictive_quantile, z_value

MIN_CHECK = 10  # held-out functions below which the band's scale is not checked
SCALE_GRID = np.geomspace(1e-2, 1e2, 401)  # scales searched by consistent_scales (2.3% apart)
SPREAD_Z = 2.5  # spread_check's z above which the error does not follow the band's spread
SCALE_CONFIDENCE = 0.9  # of the likelihood's interval for k (pins_down, resolved)


# the solution band's claim: coverage within CLAIM_POINTS of each of CLAIM_LEVELS
CLAIM_POINTS, CLAIM_LEVELS = 0.03, (0.5, 0.8, 0.9, 0.95)


def pins_down(se: float) -> bool:
    """Whether a standard error ``se`` of log k pins the band's scale down well enough to
    use: its interval at SCALE_CONFIDENCE (90%) spans at most a factor of 2."""
    return se <= pinning_se()


def pinning_se() -> float:
    """The largest standard error of log k that :func:`pins_down` accepts (0.21)."""
    return math.log(2) / (2 * z_value(SCALE_CONFIDENCE))


def scale_settled(consistent, spread_z, se: float | None, max_se: float) -> bool | None:
    """Whether held-out functions settle a band's scale to a standard error of log k of at
    most ``max_se`` (:func:`pinning_se` or :func:`resolving_se`): None where not checked
    (``consistent`` None); False where no single scale fits the held-out functions
    (``consistent`` empty) or their error does not follow the band's spread (``spread_z``);
    else by the likelihood's ``se``, or for runs calibrated before it, by the range of
    scales their coverage admits, at most the interval ``max_se`` gives (a factor
    ``exp(2 z max_se)``)."""
    if consistent is None:
        return None
    if len(consistent) != 2 or spread_off(spread_z):  # the shape is off: nothing settled
        return False
    if se is not None:
        return se <= max_se
    return consistent[1] <= math.exp(2 * z_value(SCALE_CONFIDENCE) * max_se) * consistent[0]


@functools.cache
def resolving_factor() -> float:
    """The largest factor f by which k may be off while a Gaussian band at each level p of
    CLAIM_LEVELS still covers within CLAIM_POINTS of p (1.068, set by 80%)."""
    return min(min(z_value(p + CLAIM_POINTS) / z_value(p), z_value(p) / z_value(p - CLAIM_POINTS))
               for p in CLAIM_LEVELS)


def resolving_se() -> float:
    """The largest standard error of log k whose 90% interval, k̂ ×/÷ exp(z se), keeps a
    Gaussian band's coverage within CLAIM_POINTS of each level in CLAIM_LEVELS anywhere
    in it: the scale is then resolved (``Calibration.resolved``; 0.040)."""
    return math.log(resolving_factor()) / z_value(SCALE_CONFIDENCE)


def spread_check(residual, std, y, groups: int = 3, lags: int = 3) -> float | None:
    """Whether the held-out error follows the band's spread from point to point. For pairs
    of points a few grid steps apart on a grid line, ``Σ r_p r_q / Σ std_p std_q`` (the
    independent noise drops out of the products, a smooth error keeps its second moment)
    among the pairs of the lowest third of spread, minus the same among the highest third,
    over its standard error clustered by function: a z that is large where the error is
    many times the spread where the spread is small and near it where it is large. That is
    the band of a few chains whose spread dips wherever they happen to agree, while the
    error does not dip there (measured in docs/bands.md). The likelihood of noisy held-out
    targets then learns k from the high-spread points alone, where the error stands out of
    the noise, and the coverage counts from them too. None without grid lines or with fewer
    than MIN_CHECK functions."""
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
"""The largest shortfall of the observation band on the held-out residuals at which
:func:`~bdeeponet.calibration.fit.fit_calibration` keeps the fit on residuals averaged over
grid neighbours (why 2 points: docs/bands.md)."""


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
def _mixing_rule() -> tuple[np.ndarray, np.ndarray]:
    """``(table, weights)``: Gauss-Hermite quadrature of the Gamma mixing in its normal score
    z (the Gamma quantile at Φ(z)), so that the nodes reach the mixing's far tails (Φ(z)
    and 1 − Φ(z) down to 1e-12), where a Student-t's large residuals live; equal-weight quantile
    midpoints stopped at the 1/64 quantile, and the scale fitted to Student-t errors came
    out 23% high at 1.5 dof, 3% at 3. ``table`` (len(_DOF_NODES) + 1, Q): the nodes at each
    tabulated dof, and a last row of ones (a Gaussian's); ``weights`` (Q,) sum to 1."""
    z, w = np.polynomial.hermite_e.hermegauss(_MIXING_POINTS)
    shape, scale = _DOF_NODES[:, None] / 2, 2 / _DOF_NODES[:, None]
    # the upper half from the upper tail: Φ(z) rounds to 1 (a node at inf) from z ≈ 8.3
    table = np.where(z < 0, gamma_dist.ppf(norm.cdf(z), a=shape, scale=scale),
                     gamma_dist.isf(norm.sf(z), a=shape, scale=scale))
    return np.vstack([table, np.ones(_MIXING_POINTS)]), w / w.sum()


def _mixing_index(dof) -> np.ndarray | None:
    """Per entry of ``dof``, the row of :func:`_mixing_rule`'s table its Student-t is rounded to
    (tabulated 4% apart), or ``len(_DOF_NODES)`` where it is Gaussian (inf, or beyond the
    table); None where every entry is Gaussian (or ``dof`` is None)."""
    if dof is None:
        return None
    dof = np.asarray(dof, dtype=np.float64)
    fin = np.isfinite(dof) & (dof < _DOF_NODES[-1])
    if not fin.any():
        return None
    idx = np.full(dof.shape, len(_DOF_NODES), dtype=np.int32)
    idx[fin] = np.clip(np.round(np.log(np.maximum(dof[fin], 1.0)) / np.log(_DOF_NODES[1])),
                       0, len(_DOF_NODES) - 1)
    return idx


def _mixing_nodes(index: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``(g, weights)``: ``g`` (..., Q) the quadrature nodes (:func:`_mixing_rule`) of the
    Gamma(ν/2, rate ν/2) precision that makes a Student-t a Gaussian scale mixture,
    ``t_ν = N(0, 1/g)``, at the rows ``index`` of :func:`_mixing_index`; a Gaussian is its
    one node g = 1, so with ``index`` None, (1, 1) and weight 1."""
    if index is None:
        return np.ones((1, 1)), np.ones(1)
    table, weights = _mixing_rule()
    return table[index], weights


_LIKELIHOOD_BLOCK = 2**21
"""Entries (function × point × node) of one block of :func:`scale_likelihood`'s arrays: its
memory is a few such blocks (16 MB each) whatever the number of held-out functions."""


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
    r2 = np.asarray(residual, dtype=np.float64) ** 2
    s2 = np.asarray(std, dtype=np.float64) ** 2
    index = _mixing_index(dof)
    var_noise = float(noise_std) ** 2
    nodes = 1 if index is None else _MIXING_POINTS
    block = max(1, _LIKELIHOOD_BLOCK // (r2[0].size * nodes))  # functions at a time

    def per_function(log_k):
        k2, out = math.exp(2 * log_k), np.empty(len(r2))
        for a in range(0, len(r2), block):
            b = slice(a, a + block)
            g, weights = _mixing_nodes(None if index is None else index[b])
            var = np.maximum(k2 * (s2[b, ..., None] / g) + var_noise, 1e-300)
            dens = (np.exp(-0.5 * r2[b, ..., None] / var) / np.sqrt(var)) @ weights
            out[b] = np.log(np.maximum(dens, 1e-300)).sum(axis=-1)
        return out

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
