"""Which inputs to simulate next: the pool inputs whose solutions would most reduce the
posterior's uncertainty over the pool, picked as a batch that does not repeat itself.

Each candidate i is represented by its M posterior draws at the query points, centred:
``F_i`` (M, P'), P' at most ``MAX_POINTS`` evenly spread query points. Their covariance
across candidates, ``K_ii' = <F_i, F_i'> / M`` (the trace of the cross-covariance of two
predictions), is the posterior's joint uncertainty. Picks are greedy, and each conditions K
on itself (K <- K - K_:i K_i: / K_ii, as if its solution were then known), so a second
near-duplicate of a pick has almost nothing left and is not taken. Two criteria:

* ``reduction`` (default): the pick that removes the most variance from the whole pool,
  ``sum_j K_ji² / K_ii``: a candidate whose uncertainty is shared by many others, a
  representative of what is not yet learnt;
* ``variance``: the pick with the largest variance of its own, ``K_ii`` (a pivoted
  Cholesky factorisation of K, the greedy maximiser of the picks' joint log-determinant),
  which favours the pool's outliers;
* ``noisy``: ``reduction`` with the pick's solution observed through the data's noise,
  ``sum_j K_ji² / (K_ii + s_i²)`` and ``K <- K - K_:i K_i: / (K_ii + s_i²)``, s_i² the
  noise variance σ² of one measurement along the pick's direction of uncertainty (over the
  squared norm of its predicted mean with ``error="relative"``): a candidate whose
  uncertainty is below the noise is worth little.

With ``error="relative"`` (default) each F_i is first divided by the norm of candidate i's
predicted mean, so that K measures error against the solution's size, as e2 does.
docs/results/acquisition/ holds the learning curves behind the defaults. M draws span a
space of limited rank; once the picks exhaust it, the rest are taken by their own variance
(their score is then 0).
"""

from __future__ import annotations

import numpy as np
import torch

from .data import input_array
from .run import Run, as_run

MAX_POINTS = 256
CRITERIA = ("reduction", "variance", "noisy")  # the first is the default
ERRORS = ("relative", "absolute")


def acquire(run: Run, u_pool, k: int, y=None, criterion: str = CRITERIA[0],
            error: str = ERRORS[0], exclude=None) -> tuple[np.ndarray, np.ndarray]:
    """``(indices (k,), scores (k,))``: the k picks of ``u_pool`` (n, m) in the order they
    were taken and each one's score when taken (summed over the points scored): the pool's
    variance it removed (``criterion="reduction"``, or ``"noisy"``, observed through the
    run's noise) or its own variance left (``"variance"``). ``error="relative"`` (default):
    each candidate's draws divided by the norm of its predicted mean
    (:func:`solution_norms`), so that variance is measured against
    the solution's size, as e2 measures error; ``"absolute"``: as they are. ``y``: the
    query points (default: the run's training ones). ``exclude`` (e, m): inputs already
    simulated (a data file's training inputs): pool rows equal to one are never picked.
    Exact copies within the pool are picked once at most."""
    run = as_run(run)
    u = input_array("the pool's 'u'", u_pool, run.n_sensors, "n", "the run's sensor count")
    _, copies = np.unique(u, axis=0, return_inverse=True)
    done = set() if exclude is None else set(input_keys(exclude))
    blocked = np.array([key in done for key in input_keys(u)], dtype=bool)
    free = len(np.unique(copies.ravel()[~blocked]))
    if free == 0:
        raise ValueError("every input of the pool is excluded (already simulated)")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= free:
        raise ValueError(f"--n must be an integer in [1, {free}] (the pool's distinct inputs"
                         + (", less those excluded" if blocked.any() else "") + f"), got {k}")
    if criterion not in CRITERIA:
        raise ValueError(f"--criterion must be one of {', '.join(CRITERIA)}, got '{criterion}'")
    if error not in ERRORS:
        raise ValueError(f"--error must be one of {', '.join(ERRORS)}, got '{error}'")
    features, mean = _centred_draws(run, u, y)  # (n, M * P'), (n, P')
    scale = solution_norms(mean) if error == "relative" else np.ones(len(u))
    noise = (run.posterior.noise_std / scale) ** 2 if criterion == "noisy" else None
    return greedy_picks(features / scale[:, None], int(k),
                        "variance" if criterion == "variance" else "reduction", noise=noise,
                        blocked=blocked, copies=copies.ravel())


def input_keys(u) -> list[bytes]:
    """One key per row of ``u`` (n, m), equal for rows of equal values (-0.0 as 0.0)."""
    return [r.tobytes() for r in np.ascontiguousarray(u, dtype=np.float64) + 0.0]


def greedy_picks(features: np.ndarray, k: int, criterion: str = CRITERIA[0],
                 block: int = 1024, noise: np.ndarray | None = None,
                 blocked: np.ndarray | None = None, copies: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """k greedy picks from the rows of ``features`` (n, D), ``K = features features^T``
    never formed: each pick i conditions K on itself, ``K <- K - K_:i K_i: / K_ii`` (a
    pivoted Cholesky step). ``criterion``: ``"reduction"`` takes the largest
    ``sum_j K_ji² / K_ii`` (``diag(K K)`` kept up to date by rank-one updates and computed
    afresh, in blocks of ``block`` rows, where the updates have cancelled most of a
    value's digits), ``"variance"`` the largest ``K_ii``. Scores: that value when picked.
    Once the rows' span is exhausted, the rest go by their own variance, score 0. ``noise``
    (n,): each candidate's observation noise variance s_i², added to K_ii wherever a pick
    is scored (``reduction``) and conditioned on (both criteria). ``blocked`` (n,): rows
    never picked; ``copies`` (n,): a label per row, equal for the same input, so that a
    pick takes its copies out too (under ``noise`` a copy keeps part of its variance)."""
    n = features.shape[0]
    out = np.zeros(n, dtype=bool) if blocked is None else np.asarray(blocked, dtype=bool).copy()
    copies = np.arange(n) if copies is None else np.asarray(copies)
    k = min(k, len(np.unique(copies[~out])))
    reduction = criterion == "reduction"
    noise = np.zeros(n) if noise is None else np.asarray(noise, dtype=np.float64)
    marginal = np.einsum("ij,ij->i", features, features)
    left = marginal.copy()
    tol = 1e-12 * marginal.max(initial=0.0)
    factors = np.zeros((k, n))
    if reduction:
        g = fresh = _diag_square(features, factors[:0], block)
    picks, scores = [], []
    for t in range(k):
        alive = (left > tol) & ~out
        if not alive.any():
            break  # the draws explain nothing more
        observed = np.where(alive, left + noise, 1.0)  # K_ii + s_i²
        score = np.where(alive, g / observed if reduction else left, -np.inf)
        i = int(np.argmax(score))
        if reduction and g[i] < 1e-6 * fresh[i]:  # rounding would now lead: recompute
            g = fresh = _diag_square(features, factors[:t], block)
            score = np.where(alive, g / observed, -np.inf)
            i = int(np.argmax(score))
        picks.append(i)
        scores.append(float(score[i]))
        out |= copies == copies[i]
        f = (features @ features[i] - factors[:t].T @ factors[:t, i]) / np.sqrt(observed[i])
        if reduction:  # diag((K - f f^T)^2) from diag(K^2), K f and f
            kf = features @ (features.T @ f) - factors[:t].T @ (factors[:t] @ f)
            g = g - 2 * f * kf + f**2 * (f @ f)
        factors[t] = f
        left = left - f**2
    if len(picks) < k:
        # M posterior draws span a space of limited rank: once the picks exhaust it, the
        # remaining variance is zero for every candidate and says nothing
        for j in np.argsort(-marginal, kind="stable"):
            if len(picks) == k:
                break
            if not out[j]:
                picks.append(int(j))
                out |= copies == copies[j]
        scores += [0.0] * (k - len(scores))
    return np.array(picks), np.array(scores)


def _diag_square(features: np.ndarray, factors: np.ndarray, block: int) -> np.ndarray:
    """``diag(R R)`` of ``R = features features^T - factors^T factors``, row block by block."""
    g = np.empty(features.shape[0])
    for a in range(0, len(g), block):
        rb = features[a:a + block] @ features.T - factors[:, a:a + block].T @ factors
        g[a:a + block] = np.einsum("ij,ij->i", rb, rb)
    return g


def _centred_draws(run: Run, u: np.ndarray, y) -> tuple[np.ndarray, np.ndarray]:
    """``(F, mean)``: each candidate's M posterior draws at up to ``MAX_POINTS`` query
    points, centred and over sqrt(M), as one row (n, M P'), and the draws' mean (n, P')."""
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
    mean = draws.mean(0)
    draws = (draws - mean).numpy()  # (M, n, P')
    out = draws.transpose(1, 0, 2).reshape(len(u), -1) / np.sqrt(draws.shape[0])
    return out, mean.numpy()


def solution_norms(mean: np.ndarray) -> np.ndarray:
    """The norm of each candidate's predicted mean (``mean`` (n, P')), at least 1e-3 of the
    pool's median norm: a row of draws divided by it has as its squared norm the expected
    squared relative error of the prediction."""
    norm = np.linalg.norm(mean, axis=1)
    return np.maximum(norm, 1e-3 * np.median(norm))

