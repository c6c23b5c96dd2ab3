"""What the residuals' structure in y says about the noise: independent from point to
point, while a model's misfit (and its error) is smooth along the query points.

Used to estimate an unknown σ (:func:`noise_sd_from_residuals`) and, in calibration, the
error's second moment without the noise's (:func:`smooth_second_moment`).
"""

from __future__ import annotations

import numpy as np
import torch


def noise_sd_from_residuals(residuals, y) -> float:
    """σ from residuals (a list of (n, P) blocks) at the query points y (P, d), their
    coordinates only.

    A residual is noise plus the model's misfit, and the misfit is smooth in y while the
    noise is independent from point to point. Second differences of the residuals along
    triples of query points that are consecutive, collinear and equally spaced,
    ``(r₋ − 2 r₀ + r₊) / sqrt(6)``, keep the noise's variance and remove most of the misfit
    (Gasser, Sroka & Jennen-Steinmetz 1986, applied to residuals rather than to the data).
    Without such triples, the root mean squared residual (which counts misfit as noise)."""
    mid = equispaced_triples(y)
    total, count = 0.0, 0
    for r in residuals:
        r = torch.as_tensor(r).double()
        if mid is not None:
            mid = mid.to(r.device)
            r = (r[:, mid - 1] - 2 * r[:, mid] + r[:, mid + 1]) / 6**0.5
        total += float(r.square().sum())
        count += r.numel()
    return (total / count) ** 0.5


def equispaced_triples(y) -> torch.Tensor | None:
    """Middle indices p of the consecutive triples (p−1, p, p+1) with y[p+1] − y[p] equal to
    y[p] − y[p−1] (a grid line), or None when there are none."""
    grid = _steps(y)
    if grid is None:
        return None
    step, tol = grid
    same = (np.abs(step[1:] - step[:-1]) <= 2 * tol).all(axis=1)
    same &= (np.abs(step[1:]) > tol).any(axis=1)
    mids = np.nonzero(same)[0] + 1
    return torch.from_numpy(mids) if mids.size else None


def neighbour_pairs(y) -> np.ndarray | None:
    """Indices p of the consecutive pairs (p, p+1) one grid step apart (the most common
    step between consecutive query points), or None when no step repeats."""
    grid = _steps(y)
    if grid is None:
        return None
    step, tol = grid
    values, inverse, counts = np.unique(np.round(step / tol), axis=0, return_inverse=True,
                                        return_counts=True)
    mode = counts.argmax()
    if counts[mode] < 2 or not np.any(values[mode]):
        return None
    centre = step[inverse.reshape(-1) == mode].mean(axis=0)  # a step split between two
    return np.nonzero((np.abs(step - centre) <= 2 * tol).all(axis=1))[0]  # bins counts once


def _steps(y) -> tuple[np.ndarray, np.ndarray] | None:
    """The steps between consecutive query points (P − 1, d) in float64 and, per column, the
    size ``tol`` of y's rounding: 2 ulps of the largest |y| (in float32 when every value is
    a float32, as in a file written in float32 and read as float64, else in float64), and
    at least 1e-9. A step of rounded values is off by at most 1 ulp, so steps within
    2 ``tol`` of each other count as equal. None for fewer than 3 points."""
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    y = np.asarray(y, dtype=np.float64)
    if y.shape[0] < 3:
        return None
    single = np.array_equal(y.astype(np.float32).astype(np.float64), y)
    ulp = np.finfo(np.float32 if single else np.float64).eps
    tol = np.maximum(2 * ulp * np.abs(y).max(axis=0), 1e-9)
    return y[1:] - y[:-1], tol


def line_windows(y, half: int = 2) -> np.ndarray | None:
    """Centres p of the windows p−half .. p+half that lie on one grid line (every step
    between them one grid step), or None without grid lines."""
    pairs = lag_pairs(y, 2 * half)
    if pairs is None or len(pairs) < 2 * half:
        return None
    return pairs[-1][0] + half  # a window starts 2·half steps along one line before p + half


def lag_pairs(y, lags: int = 3) -> list[tuple[np.ndarray, int]] | None:
    """``(idx, j)`` for j = 1..``lags``: the points p (idx) whose partner p + j lies j grid
    steps further along the same grid line. None without neighbouring pairs."""
    pairs = neighbour_pairs(y)
    if pairs is None:
        return None
    n = np.asarray(y).shape[0]
    step = np.zeros(n, dtype=bool)
    step[pairs] = True  # p -> p+1 is one grid step along a line
    out, run = [], step.copy()
    for j in range(1, lags + 1):
        if j > 1:  # p -> p+j stays on the line when the j single steps after p all do
            run = run[:-1] & step[j - 1 :]
        idx = np.nonzero(run[: n - j])[0]
        if idx.size == 0:
            break
        out.append((idx, j))
    return out


def smooth_second_moment(r: np.ndarray, y, lags: int = 3) -> float | None:
    """``E[e_p e_{p+j}]``, j = 1..``lags`` grid steps apart along a grid line, from residuals
    ``r = e + ε`` (n, P): the independent noise ε drops out of the products' mean, a smooth
    error e keeps (nearly) its second moment, and several lags average more products.
    None without neighbouring pairs."""
    pairs = lag_pairs(y, lags)
    if pairs is None:
        return None
    total, count = 0.0, 0
    for idx, j in pairs:
        prod = r[:, idx] * r[:, idx + j]
        total, count = total + float(prod.sum()), count + prod.size
    return total / count
