"""The function-level band's held-out quantile: split-conformal ranks that hold with
probability ``FUNCTION_CONFIDENCE`` over the held-out draw, the tail fit beyond them, and
the Gaussian union bound for (next to) no held-out functions."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import beta as beta_dist

from .levels import z_value

# the function-level band covers >= its level in 99% of held-out draws (at 90%, 200 test
# trajectories measure it below its level in up to 15% of draws: docs/bands.md)
FUNCTION_CONFIDENCE = 0.99


def conformal_rank(n: int, level: float, confidence: float = FUNCTION_CONFIDENCE) -> int | None:
    """The rank r (1-based) of the held-out score that bounds the function-level band: the
    smallest r whose band covers at least ``level`` of new functions with probability
    ``confidence`` over the draw of the n held-out functions (Vovk 2012, "Conditional
    validity of inductive conformal predictors"). With exchangeable scores the coverage of
    the r-th smallest of n is Beta(r, n + 1 − r), so r is the smallest with
    ``P(Beta(r, n + 1 − r) < level) <= 1 − confidence``. ``confidence=None``: the usual
    ⌈(n + 1) level⌉, whose coverage is ``level`` on average over draws but, from 100
    functions, below it in about half of them (docs/bands.md, "Why the calibration is what
    it is"). None where no rank reaches it (too few functions for the level)."""
    if confidence is None:
        rank = math.ceil((n + 1) * level)
        return rank if rank <= n else None
    ranks = np.arange(1, n + 1)
    ok = np.nonzero(beta_dist.cdf(level, ranks, n + 1 - ranks) <= 1 - confidence)[0]
    return int(ranks[ok[0]]) if ok.size else None


def tail_quantile(scores, level: float, confidence: float = FUNCTION_CONFIDENCE) -> float:
    """The function-level score at a level no held-out rank reaches (from 100 functions:
    99%), as an upper confidence bound: a Gumbel distribution fitted to the logarithms of
    the held-out ``scores`` by its moments, its ``level`` quantile raised by the normal
    quantile at ``confidence`` (2.33 at 0.99) times its standard error (delta method, with
    the Gumbel's skewness 1.14 and excess kurtosis 2.4).

    A score is a maximum over P points; a maximum of light-tailed values is Gumbel, of
    heavy-tailed ones Fréchet, whose logarithm is Gumbel. Fitted on the log scale the bound
    errs wide at 99% from 100 functions; from fewer, at lower levels, it can fall below the
    largest score and short of its level (measured in docs/bands.md, "Why the calibration
    is what it is"): :func:`held_out_quantile` takes the larger of the two."""
    x = np.log(np.maximum(np.asarray(scores, dtype=np.float64), 1e-300))
    n = len(x)
    sd = float(x.std(ddof=1))
    c = math.sqrt(6) / math.pi * (-np.euler_gamma - math.log(-math.log(level)))
    se = sd * math.sqrt((1 + 1.1 * c * c + 1.1395 * c) / n)
    z = z_value(2 * confidence - 1)  # the one-sided normal quantile at ``confidence``
    return float(math.exp(x.mean() + c * sd + z * se))


def held_out_quantile(scores, level: float, confidence: float = FUNCTION_CONFIDENCE) -> float:
    """The function-level score at ``level`` from the sorted held-out ``scores``: the score
    at :func:`conformal_rank` where a rank reaches ``confidence``, else the tail fit
    (:func:`tail_quantile`), never below the largest score."""
    rank = conformal_rank(len(scores), level, confidence)
    if rank is not None:
        return float(scores[rank - 1])
    return max(tail_quantile(scores, level, confidence), float(scores[-1]))


def _bonferroni(level: float, n_points: int) -> float:
    """Without held-out functions: the Gaussian z of a union bound over the P points."""
    return z_value(1 - (1 - level) / n_points)
