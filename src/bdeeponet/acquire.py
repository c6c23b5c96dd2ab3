"""Which inputs to simulate next: the pool inputs whose predictions the posterior is least
sure of, picked as a batch that does not repeat itself.

Each candidate i is represented by its M posterior draws at the query points, centred:
``F_i`` (M, P'), P' at most ``MAX_POINTS`` evenly spread query points. Their covariance
across candidates, ``K_ii' = <F_i, F_i'> / M`` (the trace of the cross-covariance of two
predictions), is the posterior's joint uncertainty. The picks are made greedily by the
largest variance left after conditioning on the picks so far (a pivoted Cholesky
factorisation of K, the greedy maximiser of the picks' joint log-determinant): a second
near-duplicate of a pick has almost nothing left to explain and is not taken. M draws span
a space of limited rank; once the picks exhaust it, the rest are taken by their own
variance (their score is then 0).
"""

from __future__ import annotations

import numpy as np
import torch

from .run import Run, as_run

MAX_POINTS = 256


def acquire(run: Run, u_pool, k: int, y=None) -> tuple[np.ndarray, np.ndarray]:
    """``(indices (k,), scores (k,))``: the k picks of ``u_pool`` (n, m) in the order they
    were taken and the predictive variance each had left when taken (summed over the points
    scored). ``y``: the query points (default: the run's training ones)."""
    run = as_run(run)
    u = np.asarray(u_pool, dtype=np.float64)
    if u.ndim != 2 or u.shape[1] != run.n_sensors:
        raise ValueError(f"the pool's 'u' must have shape (n, {run.n_sensors}) (the run's "
                         f"sensor count), got {u.shape}")
    if not np.all(np.isfinite(u)):
        raise ValueError("the pool's 'u' contains NaN or inf")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= len(u):
        raise ValueError(f"--n must be an integer in [1, {len(u)}] (the pool's size), got {k}")
    features = _centred_draws(run, u, y)  # (n, M * P')
    return greedy_conditional_variance(features, int(k))


def greedy_conditional_variance(features: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Pivoted Cholesky of ``K = features features^T`` (n, n) for k pivots, without forming K:
    each step takes the row of largest remaining diagonal and removes its direction."""
    n = features.shape[0]
    marginal = np.einsum("ij,ij->i", features, features)
    left = marginal.copy()
    factors = np.zeros((k, n))
    picks, scores = [], []
    for t in range(k):
        i = int(np.argmax(left))
        if not left[i] > 1e-12 * max(scores[:1] or [0.0]):
            break  # the draws explain nothing more: the rest by their own variance
        picks.append(i)
        scores.append(float(left[i]))
        row = features @ features[i] - factors[:t].T @ factors[:t, i]
        factors[t] = row / np.sqrt(left[i])
        left = left - factors[t] ** 2
        left[picks] = -np.inf
    if len(picks) < k:
        # M posterior draws span a space of limited rank: once the picks exhaust it, the
        # remaining variance is zero for every candidate and says nothing
        taken = set(picks)
        rest = [j for j in np.argsort(-marginal, kind="stable") if j not in taken]
        picks += rest[: k - len(picks)]
        scores += [0.0] * (k - len(scores))
    return np.array(picks), np.array(scores)


def _centred_draws(run: Run, u: np.ndarray, y) -> np.ndarray:
    post = run.posterior
    if not hasattr(post, "trajectories"):
        raise ValueError("acquire needs a sampled posterior (a DeepONet run), not the linear "
                         "baseline")
    if y is None:
        if run.path is None or not (run.path / "query_points.npy").exists():
            raise ValueError("acquire needs the query points: the run stores none")
        y = np.load(run.path / "query_points.npy")
    y = np.asarray(y, dtype=np.float64)
    keep = np.unique(np.linspace(0, len(y) - 1, min(MAX_POINTS, len(y))).round().astype(int))
    ut = torch.as_tensor(u, dtype=torch.float32)
    yt = torch.as_tensor(y[keep], dtype=torch.float32)
    draws = torch.stack([p.double() for p in post.trajectories(ut, yt, run.config.seed)])
    draws = (draws - draws.mean(0)).numpy()  # (M, n, P')
    return draws.transpose(1, 0, 2).reshape(len(u), -1) / np.sqrt(draws.shape[0])
