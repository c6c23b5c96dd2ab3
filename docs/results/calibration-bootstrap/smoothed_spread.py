"""Does a smoothed spread rescue the held-out likelihood? (docs/bands.md, "Tried and not kept:
a smoothed spread"; measured 2026-11-28, not kept in the library.)

The Student-t likelihood models a held-out residual as ``k std T + ε`` given each point's
std; where four chains happen to agree the error does not shrink with them, which biases k
under noise (four_chain_toy.py). Here the spread is averaged along each function first,
``λ = sqrt(moving average of std² over w points)`` (w = P: one variance per function), and
k is fitted under ``residual ~ N(0, k² λ² + σ²)`` (w: Gaussian) or ``k λ T + ε`` (t w: the
library's likelihood on λ). Each k scales the library's band, mean ± k t_dof std, and the
script gives that band's coverage of the test truth at 50/80/90/95/99% and whether it is
within the coverage target (±3 points, 99%: −3/+1; marked *), beside the library's
own calibrated band (``lib``, from the run's metrics.json), the plain Student-t
likelihood's k applied unconditionally (``t``), the raw band (``k=1``), and the library's
rule of keeping k = 1 unless the scale is pinned down with the standard error of log k taken
from 40 bootstrap resamples of the held-out functions instead of the clustered sandwich
(``boot``).

Run: python smoothed_spread.py            (the toy: calibrated by construction, right k = 1)
     python smoothed_spread.py GRID ...   (4-chain runs of `bdeeponet reproduce --chains 4`)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from four_chain_toy import toy_band
from noisy_vs_clean import finished_runs, predictions
from scipy.ndimage import uniform_filter1d
from scipy.optimize import minimize_scalar
from scipy.stats import t as student_t

from bdeeponet.calibration import pins_down, scale_likelihood
from bdeeponet.data import load

LEVELS = (0.5, 0.8, 0.9, 0.95, 0.99)
WINDOWS = (1, 11, 41, 100_000)  # points; the last: one variance per function
T_WINDOWS = (11, 41)


def smoothed(std, w: int):
    """sqrt of the moving average of std² over w points along each function (rows)."""
    if w <= 1:
        return std
    if w >= std.shape[1]:
        return np.broadcast_to(np.sqrt(np.mean(std**2, axis=1, keepdims=True)), std.shape)
    return np.sqrt(uniform_filter1d(std**2, size=w, axis=1, mode="nearest"))


def gaussian_k(residual, lam, noise_std: float) -> float:
    """k under residual ~ N(0, k² λ² + σ²)."""
    def nll(log_k):
        v = np.exp(2 * log_k) * lam**2 + noise_std**2
        return 0.5 * float(np.sum(np.log(v) + residual**2 / v))
    return float(np.exp(minimize_scalar(nll, bounds=(-7, 7), method="bounded").x))


def coverage(error, std, dof, k: float) -> list[float]:
    return [100 * float(np.mean(np.abs(error) <= k * student_t.ppf(0.5 + lv / 2, dof) * std))
            for lv in LEVELS]


def on_target(cov) -> bool:
    return (all(abs(c - 100 * lv) <= 3 for c, lv in zip(cov[:4], LEVELS, strict=False))
            and -3 <= cov[4] - 99 <= 1)


def variants(residual, std, dof, noise_std: float) -> dict[str, float]:
    """Every variant's k from held-out residuals."""
    ks = {f"w{w}" if w < 1000 else "w=P": gaussian_k(residual, smoothed(std, w), noise_std)
          for w in WINDOWS}
    ks.update({f"t{w}": scale_likelihood(residual, smoothed(std, w), noise_std, dof)[0]
               for w in T_WINDOWS})
    return ks


def bootstrap_se(residual, std, dof, noise_std: float, draws: int = 40) -> float:
    """sd of log k over bootstrap resamples of the functions (rows)."""
    rng = np.random.default_rng(0)
    logs = []
    for _ in range(draws):
        i = rng.integers(0, len(residual), len(residual))
        logs.append(np.log(scale_likelihood(residual[i], std[i], noise_std, dof[i])[0]))
    return float(np.std(logs))


def fmt(name: str, k: float, cov) -> str:
    return f"{name} {k:.2f} {'/'.join(f'{c:.0f}' for c in cov)}{'*' if on_target(cov) else ''}"


def toy() -> None:
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        e_ho, s_ho = toy_band(rng, 100)
        e_te, s_te = toy_band(rng, 300)
        rms = float(np.sqrt(np.mean(e_ho**2)))
        for ratio in (0.5, 2.0, 6.0):
            sigma = ratio * rms
            noisy = e_ho + sigma * rng.standard_normal(e_ho.shape)
            ks = {"t": scale_likelihood(noisy, s_ho, sigma, 3.0)[0],
                  **variants(noisy, s_ho, 3.0, sigma)}
            print(f"toy seed {seed}, noise {ratio:g} x the error | "
                  + " | ".join(fmt(n, k, coverage(e_te, s_te, 3.0, k)) for n, k in ks.items()))


def real(grids: list[Path]) -> None:
    hits: dict[str, int] = {}
    n = 0
    for grid in grids:
        for run_dir in finished_runs(grid):
            data = load(grid / "data" / f"{run_dir.parent.name}.npz")
            run, (mh, sh, dh, s_noisy, _), (mt, st, dt) = predictions(run_dir, data)
            post = run.posterior
            error = data.s_test - mt
            metrics = json.loads((run_dir / "metrics.json").read_text())
            lib = [metrics["coverage"]["calibrated"]["pointwise"][str(lv)] for lv in LEVELS]
            k_t = scale_likelihood(s_noisy - mh, sh, post.noise_std, dh)[0]
            ks = {"t": k_t, **variants(s_noisy - mh, sh, dh, post.noise_std), "k=1": 1.0,
                  "boot": k_t if pins_down(bootstrap_se(s_noisy - mh, sh, dh, post.noise_std))
                  else 1.0}
            covs = {name: coverage(error, st, dt, k) for name, k in ks.items()}
            k_test = scale_likelihood(error, st, 1e-12 * post.noise_std, dt)[0]
            n += 1
            for name, cov in [("lib", lib), *covs.items()]:
                hits[name] = hits.get(name, 0) + on_target(cov)
            print(f"{run_dir.parent.name} {run_dir.name} | test's k {k_test:.2f} | lib "
                  f"{'/'.join(f'{c:.0f}' for c in lib)}{'*' if on_target(lib) else ''} | "
                  + " | ".join(fmt(name, ks[name], cov) for name, cov in covs.items()), flush=True)
    print(f"{n} runs; within the target: " + ", ".join(f"{k} {v}" for k, v in hits.items()))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        real([Path(g) for g in sys.argv[1:]])
    else:
        toy()
