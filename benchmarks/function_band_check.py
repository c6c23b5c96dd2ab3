"""How often does the function-level band fall short of its level, over draws of the
held-out functions, at the confidence it is built with?

Scores are what the band sees where the noise dominates: the maximum over P = 100 points of
|N(0, 1)|, of |t_5|, of |t_3|, of |N(0, 1)| with 30% of the functions 1.6x wider, and of an
AR(1) along the points with ρ = 0.95. For each, 2000 draws of 100 held-out functions
(``--n``); the band's true coverage comes from the exact CDF of the maximum (for the AR(1),
from 200,000 further maxima). Printed per model and confidence:

* at 50/80/90/95%: the share of draws whose band covers less than its level, and the share
  that a test set of 200 independent trajectories would measure below its level (one
  binomial draw per held-out draw); a level that no held-out rank reaches
  (:func:`bdeeponet.calibration.conformal_rank`) is marked ``*``: it takes the tail fit,
  at least the largest score (:func:`bdeeponet.calibration.held_out_quantile`);
* at 99% (beyond the ranks from fewer than 459 functions): the share short of 99%, and
  the median width over the width that would just cover 99%.

Run: python benchmarks/function_band_check.py [--n 100] [--draws 2000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np
from common import header
from scipy.stats import norm
from scipy.stats import t as student_t

from bdeeponet.calibration import conformal_rank, held_out_quantile

P, TEST = 100, 200
LEVELS = (0.5, 0.8, 0.9, 0.95)


def _ar1_maxima(rng, shape, rho=0.95):
    z = np.empty((*shape, P))
    z[..., 0] = rng.standard_normal(shape)
    for j in range(1, P):
        z[..., j] = rho * z[..., j - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(shape)
    return np.abs(z).max(-1)


def models(rng, draws, n):
    """name: (scores (draws, n), CDF of one score)."""
    out = {}
    for name, dist, sample in (("|N(0, 1)|", norm, rng.standard_normal),
                               ("|t_5|", student_t(5), lambda s: rng.standard_t(5, s)),
                               ("|t_3|", student_t(3), lambda s: rng.standard_t(3, s))):
        out[name] = (np.abs(sample((draws, n, P))).max(-1),
                     lambda q, d=dist: (2 * d.cdf(q) - 1) ** P)
    wide = np.where(rng.random((draws, n, 1)) < 0.3, 1.6, 1.0)
    out["|N(0, 1)|, 30% 1.6x wider"] = (
        (wide * np.abs(rng.standard_normal((draws, n, P)))).max(-1),
        lambda q: 0.7 * (2 * norm.cdf(q) - 1) ** P + 0.3 * (2 * norm.cdf(q / 1.6) - 1) ** P)
    reference = np.sort(_ar1_maxima(rng, (200_000,)))
    out["AR(1), rho = 0.95"] = (_ar1_maxima(rng, (draws, n)),
                                lambda q: np.searchsorted(reference, q) / reference.size)
    return out


def _quantile_99(cdf, lo=0.1, hi=100.0):
    for _ in range(100):  # bisection on the CDF of one score
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cdf(mid) < 0.99 else (lo, mid)
    return hi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="held-out functions")
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    header(__doc__.splitlines()[0] + " " + __doc__.splitlines()[1])
    rng = np.random.default_rng(args.seed)
    n = args.n
    print(f"{n} held-out functions, P = {P}, {args.draws} draws; % of draws "
          f"short (measured short by {TEST} test trajectories); * the tail fit")
    print(f"| scores | confidence | {' | '.join(f'{lv:.0%}' for lv in LEVELS)} "
          "| 99%: short, width / needed |")
    print("|---|---|" + "---|" * len(LEVELS) + "---|")
    for name, (scores, cdf) in models(rng, args.draws, n).items():
        ordered = np.sort(scores, axis=1)
        needed = _quantile_99(cdf)
        for confidence in (0.9, 0.99):
            cells = []
            for level in LEVELS:
                rank = conformal_rank(n, level, confidence)
                cover = cdf(np.array([held_out_quantile(s, level, confidence) for s in ordered]))
                measured = rng.binomial(TEST, cover) / TEST
                cells.append(f"{100 * np.mean(cover < level):.1f} "
                             f"({100 * np.mean(measured < level):.1f}){'*' if rank is None else ''}")
            q = np.array([held_out_quantile(s, 0.99, confidence) for s in ordered])
            tail = f"{100 * np.mean(cdf(q) < 0.99):.1f}, {np.median(q) / needed:.2f}x"
            print(f"| {name} | {confidence} | {' | '.join(cells)} | {tail} |")


if __name__ == "__main__":
    main()
