"""What the residuals' structure in y says about the noise: independent from point to
point, while a model's misfit (and its error) is smooth along the query points.

Used to estimate an unknown σ (:func:`noise_sd_from_residuals`) and, in calibration, the
error's second moment without the noise's (:func:`smooth_second_moment`).
"""

from __future__ import annotations

import numpy as np
import torch


def noise_sd_from_residuals(residuals, y: torch.Tensor) -> float:
    """σ from residuals (a list of (n, P) blocks) at the query points y (P, d).

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
            r = (r[:, mid - 1] - 2 * r[:, mid] + r[:, mid + 1]) / 6**0.5
        total += float(r.square().sum())
        count += r.numel()
    return (total / count) ** 0.5


def equispaced_triples(y) -> torch.Tensor | None:
    """Middle indices p of the consecutive triples (p−1, p, p+1) with y[p+1] − y[p] equal to
    y[p] − y[p−1] (a grid line), or None when there are none."""
    y = torch.as_tensor(y)
    if y.shape[0] < 3:
        return None
    step = (y[1:] - y[:-1]).double()
    same = torch.isclose(step[1:], step[:-1], rtol=1e-6, atol=1e-9).all(dim=1)
    same &= step[1:].abs().sum(dim=1) > 0
    mids = torch.nonzero(same).flatten() + 1
    return mids if mids.numel() else None


def neighbour_pairs(y) -> np.ndarray | None:
    """Indices p of the consecutive pairs (p, p+1) one grid step apart (the most common
    step between consecutive query points), or None when no step repeats."""
    y = np.asarray(y, dtype=np.float64)
    if y.shape[0] < 3:
        return None
    steps = np.round(y[1:] - y[:-1], 9)
    values, inverse, counts = np.unique(steps, axis=0, return_inverse=True, return_counts=True)
    mode = counts.argmax()
    if counts[mode] < 2 or not np.any(values[mode]):
        return None
    return np.nonzero(inverse.reshape(-1) == mode)[0]


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
