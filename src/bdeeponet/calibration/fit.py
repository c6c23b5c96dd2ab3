"""Calibrating a band on held-out training functions: :func:`fit_calibration`.

The three bands (all (n, P); :mod:`.bands` computes them):

* **solution band** ``mean ± q_α k std``: the true s, pointwise, with probability α.
  ``std`` is the posterior's predictive sd, ``q_α`` the Gaussian z or, for chains that have
  not mixed, the Student-t quantile (:func:`~.levels.predictive_quantile`), ``k`` the
  calibration factor (1 uncalibrated).
* **observation band** ``mean ± sqrt((q_α k std)² + (z_α σ)²)``: a new noisy measurement.
* **function-level band** ``mean ± q'_α sqrt(k² std² + σ²)``: a whole trajectory inside at
  once with probability >= α (split conformal on the max-normalised residual).

Calibration reads only held-out training functions, whose targets are noisy: k is judged by
the observation band on them (σ, known or estimated, separates the two parts) and the
solution band uses the same k. ``q'_α`` is the held-out order statistic whose band covers
at least α of new noisy trajectories with probability 0.99 over the draw of the held-out
functions (:func:`~.conformal.conformal_rank`); beyond the ranks, an upper confidence
bound from the scores' tail (:func:`~.conformal.tail_quantile`), at least their largest
score (:func:`~.conformal.held_out_quantile`); with fewer than 10
held-out functions, the Gaussian union bound over the P points. The measurements behind
each rule are in docs/bands.md ("Why the calibration is what it is").
"""

from __future__ import annotations

import numpy as np

from ..metrics import NOMINAL_LEVELS
from ..noise import line_windows
from .bands import Calibration
from .conformal import FUNCTION_CONFIDENCE, _bonferroni, conformal_rank, held_out_quantile
from .levels import predictive_quantile, z_value
from .scales import (
    MIN_CHECK,
    _fit_scale,
    _under_covers,
    consistent_scales,
    moment_scale,
    pins_down,
    scale_likelihood,
    spread_check,
    spread_off,
)

_HALF = 2  # one chain's residuals averaged over 2 * _HALF + 1 neighbours on a grid line


def fit_calibration(mean, std, s_noisy, noise_std: float, levels=NOMINAL_LEVELS,
                    dof=None, y=None, trust_band: bool = True) -> Calibration:
    """k_α and the function-level q_α from held-out functions: ``mean``, ``std``, ``dof``
    (the predictive distribution, see :func:`predictive_quantile`) and ``s_noisy``, each
    (n, P) at the query points ``y`` (P, d; optional), with noise sd ``noise_std``.

    How k is found depends on the band (``trust_band``: the method's answer,
    :meth:`~bdeeponet.samplers.methods.Method.band_trusted`):

    * a trusted band (several chains, the linear baseline): one k for every level, the
      likelihood's (:func:`scale_likelihood`) where its 90% interval spans at most a factor
      of 2 (:func:`pins_down`); else k = 1. Where no single scale covers the held-out functions
      at every level (:func:`consistent_scales`), the median of the per-level roots, each
      kept at 1 where 1 is not rejected at that level.
    * a trusted band whose held-out error does not follow its spread from point to point
      (:func:`spread_check` beyond ``SPREAD_Z``) is fitted as the next item fits one chain's,
      with the Gaussian z_α; :func:`~.bands.bands` still serves it with its Student-t
      quantile, so the band served is q_α / z_α wider than the band fitted (docs/bands.md:
      the measured coverage of flagged bands is that of the band served).
    * otherwise (one chain, MC dropout): each level its own k_α, from the second moment of
      :func:`moment_scale` as the fallback, fitted on residuals averaged over 5 grid
      neighbours (noise variance / 5, a smooth error kept); where the observation band of
      those k_α covers fewer of the held-out residuals themselves than a level, by more than
      ``UNDER_COVER`` and two standard errors (clustered by function), each level is fitted
      on the residuals themselves.

    Returns a :class:`Calibration` (levels, scales, function-level quantiles, the number
    of held-out functions, and the checks behind them)."""
    mean, std, s = (np.asarray(a, dtype=np.float64) for a in (mean, std, s_noisy))
    levels = tuple(sorted(levels))  # Calibration interpolates between ascending levels
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
    quantiles, union = [], False
    for level in levels:
        if len(scores) >= MIN_CHECK or conformal_rank(len(scores), level) is not None:
            quantiles.append(held_out_quantile(scores, level))
        else:  # (next to) no held-out functions: the Gaussian union bound
            quantiles.append(_bonferroni(level, r.shape[1]))
            union = True
    quantiles = np.maximum.accumulate(quantiles)  # a higher level's band is never narrower
    return Calibration(tuple(levels), scales, tuple(map(float, quantiles)), len(scores), consistent,
                       likelihood, spread_z, None if union else FUNCTION_CONFIDENCE)
