"""Accuracy and uncertainty metrics of a predictive mean and band (paper Section 5).

All functions take arrays of shape (n_functions, P): the clean truth ``s``, the predictive
``mean`` and ``std``. Relative errors and coverage are computed per test function and then
averaged over **all** test functions (the paper shows one random trajectory).
"""

from __future__ import annotations

import numpy as np
from scipy.special import erf, erfinv

NOMINAL_LEVELS = (0.5, 0.8, 0.9, 0.95, 0.99)


def relative_errors(mean: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """``e1, e2 = 100 |v − w|_p / |w|_p`` per function (p = 1, 2), averaged."""
    diff = mean - s
    e1 = np.abs(diff).sum(1) / np.abs(s).sum(1)
    e2 = np.linalg.norm(diff, axis=1) / np.linalg.norm(s, axis=1)
    return 100 * float(e1.mean()), 100 * float(e2.mean())


def coverage(mean, std, s, z: float = 2.0) -> float:
    """``e3``: % of the true trajectory inside ``mean ± z std``, averaged over functions."""
    inside = np.abs(s - mean) <= z * std
    return 100 * float(inside.mean(1).mean())


def gaussian_nll(mean, std, s, floor: float = 1e-12) -> float:
    """Mean negative log density of the truth under N(mean, std²)."""
    var = np.maximum(std, floor) ** 2
    return float(np.mean(0.5 * np.log(2 * np.pi * var) + (s - mean) ** 2 / (2 * var)))


def gaussian_crps(mean, std, s, floor: float = 1e-12) -> float:
    """Mean CRPS of N(mean, std²) at the truth (closed form, Gneiting & Raftery 2007)."""
    sd = np.maximum(std, floor)
    w = (s - mean) / sd
    pdf = np.exp(-0.5 * w**2) / np.sqrt(2 * np.pi)
    cdf = 0.5 * (1 + erf(w / np.sqrt(2)))
    return float(np.mean(sd * (w * (2 * cdf - 1) + 2 * pdf - 1 / np.sqrt(np.pi))))


def calibration(mean, std, s, levels=NOMINAL_LEVELS) -> dict[str, float]:
    """Observed coverage (%) of the central Gaussian interval at each nominal level."""
    out = {}
    for level in levels:
        z = float(np.sqrt(2) * erfinv(level))
        out[f"{level:g}"] = coverage(mean, std, s, z)
    return out


def effective_sample_size(x: np.ndarray) -> float:
    """ESS of a scalar chain (Geyer's initial positive sequence on autocovariances)."""
    x = np.asarray(x, dtype=np.float64)
    m = x.size
    if m < 4 or np.var(x) == 0:
        return float(m)
    xc = x - x.mean()
    f = np.fft.rfft(xc, n=2 * m)
    acov = np.fft.irfft(f * np.conj(f))[:m] / m
    rho = acov / acov[0]
    tau = -1.0
    for k in range(0, m - 1, 2):
        pair = rho[k] + rho[k + 1]
        if pair <= 0:
            break
        tau += 2 * pair
    return float(m / max(tau, 1e-12))


def all_metrics(mean, std, s, z: float = 2.0) -> dict:
    e1, e2 = relative_errors(mean, s)
    return {
        "e1": e1,
        "e2": e2,
        "e3": coverage(mean, std, s, z),
        "band_width": float(np.mean(2 * z * std)),
        "nll": gaussian_nll(mean, std, s),
        "crps": gaussian_crps(mean, std, s),
        "calibration": calibration(mean, std, s),
    }
