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


def _autocovariance(x: np.ndarray) -> np.ndarray:
    """Biased (divided by n) autocovariances of each row of ``x`` (k, n) at lags 0..n-1."""
    n = x.shape[-1]
    xc = x - x.mean(axis=-1, keepdims=True)
    f = np.fft.rfft(xc, n=2 * n, axis=-1)
    return np.fft.irfft(f * np.conj(f), axis=-1)[..., :n] / n


def effective_sample_size(x: np.ndarray) -> float:
    """ESS of a scalar chain (Geyer's initial positive sequence on autocovariances)."""
    x = np.asarray(x, dtype=np.float64)
    m = x.size
    if m < 4 or np.var(x) == 0:
        return float(m)
    acov = _autocovariance(x[None, :])[0]
    rho = acov / acov[0]
    tau = -1.0
    for k in range(0, m - 1, 2):
        pair = rho[k] + rho[k + 1]
        if pair <= 0:
            break
        tau += 2 * pair
    return float(m / max(tau, 1e-12))


# Convergence diagnostics across chains (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021,
# "Rank-normalization, folding, and localization: an improved R-hat"). ``draws`` is
# (chains, draws); each chain is split in two halves, so one chain already gives a split R̂.

def _split_chains(draws) -> np.ndarray:
    x = np.asarray(draws, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    half = x.shape[1] // 2
    if half < 2:
        raise ValueError(f"need at least 4 draws per chain, got {x.shape[1]}")
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half:]], axis=0)


def _rank_normalise(x: np.ndarray) -> np.ndarray:
    from scipy.special import ndtri
    from scipy.stats import rankdata

    ranks = rankdata(x, method="average").reshape(x.shape)
    return ndtri((ranks - 0.375) / (x.size + 0.25))


def _rhat(x: np.ndarray) -> float:
    n = x.shape[1]
    within = x.var(axis=1, ddof=1).mean()
    between = n * x.mean(axis=1).var(ddof=1)
    if within == 0:
        return 1.0 if between == 0 else float("inf")
    return float(np.sqrt(((n - 1) / n * within + between / n) / within))


def _ess(x: np.ndarray) -> float:
    """Multi-chain ESS with Geyer's initial monotone sequence (the estimator of Stan)."""
    m, n = x.shape
    acov = _autocovariance(x)
    chain_var = acov[:, 0] * n / (n - 1)
    mean_var = chain_var.mean()
    var_plus = mean_var * (n - 1) / n + (x.mean(axis=1).var(ddof=1) if m > 1 else 0.0)
    if var_plus == 0:
        return float(m * n)
    rho = 1 - (mean_var - acov.mean(axis=0)) / var_plus
    rho[0] = 1.0
    pairs = rho[: n - n % 2].reshape(-1, 2).sum(axis=1)
    end = np.argmax(pairs < 0) if np.any(pairs < 0) else len(pairs)
    pairs = np.minimum.accumulate(pairs[:end])
    tau = max(-1 + 2 * pairs.sum(), 1 / np.log10(m * n))
    return float(m * n / tau)


def rhat(draws) -> float:
    """Rank-normalised split R̂: the larger of the bulk (ranks) and the tail (folded
    ranks) R̂. Near 1 when the chains agree; above 1.01 they have not converged."""
    x = _split_chains(draws)
    folded = np.abs(x - np.median(x))
    return max(_rhat(_rank_normalise(x)), _rhat(_rank_normalise(folded)))


def ess_bulk(draws) -> float:
    """Bulk ESS: the ESS of the rank-normalised split chains."""
    return _ess(_rank_normalise(_split_chains(draws)))


def ess_tail(draws, prob: float = 0.05) -> float:
    """Tail ESS: the smaller ESS of the indicators of the ``prob`` and ``1 − prob``
    quantiles (how well the chains pin down a central 1 − 2 prob interval)."""
    x = _split_chains(draws)
    return min(_ess((x <= np.quantile(x, q)).astype(np.float64)) for q in (prob, 1 - prob))


def convergence(draws) -> dict[str, float]:
    """R̂ and bulk / tail ESS of ``draws`` (points, chains, draws): the worst over points
    (largest R̂, smallest ESS), for ``metrics.json``."""
    draws = np.asarray(draws, dtype=np.float64)
    return {"rhat": max(rhat(d) for d in draws), "ess_bulk": min(ess_bulk(d) for d in draws),
            "ess_tail": min(ess_tail(d) for d in draws)}


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
