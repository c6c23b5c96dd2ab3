"""Shared checks and grids for the problem classes.

Parameter checks raise ``ValueError`` naming the parameter, so that
``get_problem(name, **params)`` can report a bad value in one line.
"""

from __future__ import annotations

import numbers

import numpy as np


def require_int(name: str, value, minimum: int) -> None:
    """Raise ValueError unless ``value`` is an integer (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"parameter '{name}' must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"parameter '{name}' must be >= {minimum}, got {value}")


def require_float(name: str, value, positive: bool = False) -> None:
    """Raise ValueError unless ``value`` is a finite real number (and > 0 if ``positive``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"parameter '{name}' must be a number, got {value!r}")
    if not np.isfinite(value):
        raise ValueError(f"parameter '{name}' must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"parameter '{name}' must be > 0, got {value}")


def require_bool(name: str, value) -> None:
    """Raise ValueError unless ``value`` is a bool."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"parameter '{name}' must be True or False, got {value!r}")


def check_input(x, u, min_points: int = 4, uniform: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validate the input grid x (K,) on [0, 1] and the input functions u (n, K).

    x must be strictly increasing from 0 to 1 (and equispaced if ``uniform``).
    Returns float64 copies-or-views (x, u).
    """
    x = np.asarray(x, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    if x.ndim != 1 or x.size < min_points:
        raise ValueError(f"x must be a 1-D grid of >= {min_points} points, got shape {x.shape}")
    if u.ndim != 2 or u.shape[1] != x.size:
        raise ValueError(f"u must have shape (n, {x.size}) to match x, got {u.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(u))):
        raise ValueError("x and u must not contain NaN or inf")
    if abs(x[0]) > 1e-12 or abs(x[-1] - 1) > 1e-12 or np.any(np.diff(x) <= 0):
        raise ValueError("x must increase strictly from 0 to 1")
    if uniform:
        step = 1.0 / (x.size - 1)
        if np.max(np.abs(np.diff(x) - step)) > 1e-9 * step:
            raise ValueError("x must be the uniform grid linspace(0, 1, K)")
    return x, u


def space_time_points(xq: np.ndarray, tq: np.ndarray) -> np.ndarray:
    """Tensor grid of query points, shape (len(xq) * len(tq), 2), columns (x, t).

    Layout: x slowest, t fastest, i.e. row i * len(tq) + j holds (xq[i], tq[j]); a
    solution array of shape (n, len(xq), len(tq)) reshaped in C order matches it.
    """
    xx, tt = np.meshgrid(xq, tq, indexing="ij")
    return np.column_stack([xx.ravel(), tt.ravel()])
