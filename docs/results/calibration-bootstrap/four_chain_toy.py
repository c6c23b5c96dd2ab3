"""A band that is calibrated by construction, and what the held-out likelihood makes of it.

The truth and four chains are independent draws of one smooth Gaussian process (100 points
per function, length-scale 10 points, amplitude varying along the function): the pooled
mean's error has variance (1 + 1/C) B, and the four chains' sample variance B̂ has 3
degrees of freedom, so the band mean ± t_3 sqrt((1 + 1/C) B̂) covers at its level exactly.
The script prints that coverage, the rms of error / std where a function's std dips
(lowest fifth relative to its own median) and where it peaks, and the band's scale k from
:func:`bdeeponet.calibration.scale_likelihood` (dof 3) on clean errors and on errors plus
independent noise of 0.5, 2 and 6 times their rms, against the right k = 1, and from a
Gaussian likelihood on each function's mean variance (docs/bands.md).

Run: python four_chain_toy.py [--seed S]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.stats import t as student_t

from bdeeponet.calibration import scale_likelihood

P, N, C = 100, 300, 4


def toy_band(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(error, std)`` (n, P) of n functions: the truth and C chains are draws of one GP
    (length-scale 10 points, amplitude varying along the function); error = truth − the
    chains' mean, std = sqrt((1 + 1/C) × their sample variance)."""
    x = np.arange(P)
    chol = np.linalg.cholesky(np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 10**2)
                              + 1e-8 * np.eye(P))
    amplitude = np.exp(0.5 * np.sin(x / 15))
    truth = (chol @ rng.standard_normal((P, n))).T * amplitude
    chains = np.stack([(chol @ rng.standard_normal((P, n))).T * amplitude for _ in range(C)], 1)
    return truth - chains.mean(axis=1), np.sqrt((1 + 1 / C) * chains.var(axis=1, ddof=1))


def per_function_gaussian_k(residual, std, noise_std: float) -> float:
    """k under residual ~ N(0, k² mean_p(std²) + σ²), one variance per function."""
    var = np.mean(std**2, axis=1, keepdims=True)

    def nll(log_k):
        v = np.exp(2 * log_k) * var + noise_std**2
        return 0.5 * float(np.sum(np.log(v) + residual**2 / v))

    return float(np.exp(minimize_scalar(nll, bounds=(-5, 5), method="bounded").x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    error, std = toy_band(rng, N)
    dof = np.full(std.shape, C - 1.0)
    z = error / std
    print(f"coverage of the t_3 95% band: {100 * np.mean(np.abs(z) <= student_t.ppf(0.975, 3)):.1f}%")
    rel = std / np.median(std, axis=1, keepdims=True)
    low, high = np.quantile(rel, [0.2, 0.8])
    print(f"rms error / std where a function's std dips / peaks: "
          f"{np.sqrt(np.mean(z[rel < low] ** 2)):.2f} / {np.sqrt(np.mean(z[rel > high] ** 2)):.2f}")
    print(f"k from the clean errors: {scale_likelihood(error, std, 1e-12, dof)[0]:.2f} (right: 1)")
    rms = float(np.sqrt(np.mean(error**2)))
    for ratio in (0.5, 2.0, 6.0):
        sigma = ratio * rms
        noisy = error + sigma * rng.standard_normal(error.shape)
        print(f"noise {ratio:g} x the error: Student-t likelihood k "
              f"{scale_likelihood(noisy, std, sigma, dof)[0]:.2f}, per-function Gaussian k "
              f"{per_function_gaussian_k(noisy, std, sigma):.2f}")


if __name__ == "__main__":
    main()
