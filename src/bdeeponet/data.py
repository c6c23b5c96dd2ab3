"""Aligned operator data: every input function shares the same query points.

File format (``.npz``, see docs/design.md):

=================  =========  ===============================================
key                shape      meaning
=================  =========  ===============================================
``u_train``        (N, m)     input functions at the m sensors
``s_train``        (N, P)     observed (noisy) targets at the P query points
``u_test``         (Nt, m)    test inputs
``s_test``         (Nt, P)    test targets (clean for synthetic data)
``y``              (P, d)     query points shared by every function
``sensors``        (m, d_in)  optional: sensor locations
``s_train_clean``  (N, P)     optional: noise-free training targets
``noise_std``      ()         optional: standard deviation of the noise
``meta``           () str     optional: JSON text (problem, parameters, seed)
=================  =========  ===============================================

``meta`` may declare ``"periodic": [[j, period], ...]``: the solution is periodic with that
period in column j of ``y`` (see :attr:`OperatorData.periodic`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
import os
import reprlib
import zipfile
import zlib
from dataclasses import dataclass, field

import numpy as np

from .grf import periodic_grf, rbf_grf
from .io import atomic_write

FORMAT_VERSION = 1
SCALE_RANGE = (1e-30, 1e30)
"""Where a noise or prior sd or a temperature may lie: their squares and inverses stay
numbers in float64 (1e-300 made the energy divide by zero)."""


class DataError(ValueError):
    """A data file or array that does not follow the aligned operator-data format."""


@dataclass(frozen=True)
class OperatorData:
    """Aligned operator data set; shapes as in the module docstring."""

    u_train: np.ndarray
    s_train: np.ndarray
    u_test: np.ndarray
    s_test: np.ndarray
    y: np.ndarray
    sensors: np.ndarray | None = None
    s_train_clean: np.ndarray | None = None
    noise_std: float | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        validate(self)

    @property
    def n_train(self) -> int:
        return self.u_train.shape[0]

    @property
    def n_sensors(self) -> int:
        return self.u_train.shape[1]

    @property
    def n_points(self) -> int:
        return self.y.shape[0]

    @property
    def periodic(self) -> tuple[tuple[int, float], ...]:
        """``(j, period)`` for each column j of ``y`` that ``meta["periodic"]`` declares
        periodic; empty when it declares none."""
        return tuple((int(j), float(period)) for j, period in self.meta.get("periodic", ()))

    def training_fingerprint(self) -> str:
        """SHA-256 of the training functions and query points (``u_train``, ``s_train``,
        ``y`` as float64): what a run's held-out split is drawn from, so a run can tell the
        data set it was trained on from another of the same shapes."""
        digest = hashlib.sha256()
        for key in ("u_train", "s_train", "y"):
            a = np.ascontiguousarray(getattr(self, key), dtype=np.float64)
            digest.update(repr(a.shape).encode())
            digest.update(a.tobytes())
        return digest.hexdigest()

    def save(self, path: str | os.PathLike) -> None:
        """Write the ``.npz`` atomically."""
        arrays = {k: getattr(self, k) for k in ("u_train", "s_train", "u_test", "s_test", "y")}
        for key in ("sensors", "s_train_clean"):
            if getattr(self, key) is not None:
                arrays[key] = getattr(self, key)
        if self.noise_std is not None:
            arrays["noise_std"] = np.asarray(self.noise_std, dtype=np.float64)
        arrays["meta"] = np.asarray(json.dumps(self.meta, sort_keys=True))
        atomic_write(path, lambda fh: np.savez_compressed(fh, **arrays))


def sensor_grid(sensors: np.ndarray | None) -> tuple[int, ...] | None:
    """The shape of the grid the sensors (m, d) lie on, ``(W,)`` or ``(H, W)``, when they
    are an equispaced tensor-product grid listed in row-major order (the first coordinate
    slowest, as ``generate`` and ``import`` write them); None otherwise (or without
    sensors)."""
    if sensors is None or sensors.shape[1] > 2 or sensors.shape[0] < 2:
        return None
    axes = [np.unique(sensors[:, j]) for j in range(sensors.shape[1])]
    if math.prod(len(a) for a in axes) != sensors.shape[0] or min(len(a) for a in axes) < 2:
        return None
    for a in axes:
        step = np.diff(a)
        if not np.allclose(step, step.mean(), rtol=1e-6, atol=0):
            return None
    mesh = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(axes))
    if not np.allclose(mesh, sensors, rtol=0, atol=1e-9 * float(np.ptp(sensors) or 1.0)):
        return None
    return tuple(len(a) for a in axes)


def square_symmetries(points: np.ndarray | None) -> np.ndarray | None:
    """The 8 rotations and reflections of a square grid as permutations of its points
    (8, n): row g lists, for each point i, the point whose value lands on i under the g-th
    element (row 0 the identity), so that ``f[:, perm[g]]`` is the field ``f`` turned by g.
    None unless ``points`` (n, 2) are an equispaced n' x n' grid in row-major order (see
    :func:`sensor_grid`) spanning a square: equal ranges on both axes."""
    grid = sensor_grid(points)
    if grid is None or len(grid) != 2 or grid[0] != grid[1]:
        return None
    spans = np.ptp(points, axis=0)
    if not np.isclose(spans[0], spans[1], rtol=1e-6, atol=0):
        return None
    index = np.arange(points.shape[0]).reshape(grid)
    turns = [np.rot90(index, k) for k in range(4)]
    return np.stack([g.reshape(-1) for g in turns + [t.T for t in turns]])


def cyclic_shifts(points: np.ndarray | None, period: float | None) -> np.ndarray | None:
    """The n cyclic shifts of a periodic 1-D grid as permutations of its points (n, n):
    row g is ``(i + g) mod n``, so that ``f[:, perm[g]]`` is the field ``f`` moved by g grid
    steps (row 0 the identity). None unless ``points`` (n, 1) are equispaced in increasing
    order and n steps span ``period``."""
    if period is None or sensor_grid(points) is None or points.shape[1] != 1:
        return None
    x = points[:, 0]
    n, step = len(x), float(np.mean(np.diff(x)))
    if step <= 0 or not np.isclose(n * step, period, rtol=1e-6, atol=0):
        return None
    return (np.arange(n)[None] + np.arange(n)[:, None]) % n


def input_array(name: str, a, width: int, rows: str, what: str) -> np.ndarray:
    """``a`` as a float64 array (k, width) of at least one row, of real numbers the network's
    float32 arithmetic holds; ValueError naming ``name`` otherwise (strings, booleans and
    complex numbers are not taken as numbers)."""
    if hasattr(a, "detach"):  # a torch tensor, on any device, grad or not
        a = a.detach().cpu()
    try:
        kind = np.asarray(a).dtype
    except (TypeError, ValueError, RuntimeError):  # ragged lists
        kind = None
    if kind is None or kind.kind not in "fiu":
        raise ValueError(f"{name} must hold real numbers, got dtype {kind}")
    a = np.ascontiguousarray(a, dtype=np.float64)  # (torch takes no negative strides)
    if a.ndim != 2 or a.shape[1] != width:
        raise ValueError(f"{name} must have shape ({rows}, {width}) ({what}), got {a.shape}")
    if len(a) == 0:
        raise ValueError(f"{name} holds no rows")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.abs(a).max() > _FLOAT32_MAX:
        raise ValueError(f"{name} holds values beyond float32's range (|x| > 3.4e38)")
    return a


_FLOAT32_MAX = float(np.finfo(np.float32).max)


_REQUIRED = {"u_train": 2, "s_train": 2, "u_test": 2, "s_test": 2, "y": 2}
_OPTIONAL = {"sensors": 2, "s_train_clean": 2}


def _check_array(key: str, a, ndim: int) -> np.ndarray:
    if hasattr(a, "detach"):  # a torch tensor, on any device, grad or not
        a = a.detach().cpu()
    a = np.asarray(a)
    if a.dtype.kind not in "fiu":
        raise DataError(f"'{key}' must hold numbers, got dtype {a.dtype}")
    if a.ndim != ndim:
        raise DataError(f"'{key}' must have rank {ndim}, got shape {a.shape}")
    if a.size == 0:
        raise DataError(f"'{key}' is empty (shape {a.shape})")
    if not np.all(np.isfinite(a)):
        raise DataError(f"'{key}' contains NaN or inf")
    return a


def _check_size(key: str, a: np.ndarray, axis: int, want: int, what: str) -> None:
    if a.shape[axis] != want:
        raise DataError(f"'{key}' has shape {a.shape}: axis {axis} must be {want} ({what})")


def validate(d: OperatorData) -> None:
    """Raise :class:`DataError` naming the key and the fault of the first problem found."""
    for key, ndim in _REQUIRED.items():
        object.__setattr__(d, key, _check_array(key, getattr(d, key), ndim).astype(np.float64))
    for key, ndim in _OPTIONAL.items():
        if getattr(d, key) is not None:
            object.__setattr__(d, key, _check_array(key, getattr(d, key), ndim).astype(np.float64))
    n, m = d.u_train.shape
    p = d.y.shape[0]
    _check_size("s_train", d.s_train, 0, n, "one row per training function in 'u_train'")
    _check_size("s_train", d.s_train, 1, p, "one column per query point in 'y'")
    _check_size("u_test", d.u_test, 1, m, "the sensor count of 'u_train'")
    _check_size("s_test", d.s_test, 0, d.u_test.shape[0], "one row per test function")
    _check_size("s_test", d.s_test, 1, p, "one column per query point in 'y'")
    if d.sensors is not None:
        _check_size("sensors", d.sensors, 0, m, "one row per sensor")
    if d.s_train_clean is not None and d.s_train_clean.shape != d.s_train.shape:
        raise DataError(
            f"'s_train_clean' has shape {d.s_train_clean.shape}, must match 's_train' "
            f"{d.s_train.shape}"
        )
    if d.noise_std is not None:
        sd = np.asarray(d.noise_std)
        if sd.dtype.kind not in "fiu" or sd.size != 1:  # bools and text are not numbers
            raise DataError(
                f"'noise_std' must be a single number, got dtype {sd.dtype}, shape {sd.shape}"
            )
        sd = float(sd.reshape(()))
        if not np.isfinite(sd) or sd <= 0:
            raise DataError(f"'noise_std' must be a finite number > 0, got {sd}")
        if not SCALE_RANGE[0] <= sd <= SCALE_RANGE[1]:
            raise DataError(f"'noise_std' must be within [{SCALE_RANGE[0]:g}, {SCALE_RANGE[1]:g}], "
                            f"got {sd:g}")
        object.__setattr__(d, "noise_std", sd)
    _check_periodic(d.meta, d.y.shape[1])
    try:  # what save() writes: numpy numbers as the plain ones they are
        object.__setattr__(d, "meta", json.loads(json.dumps(d.meta, default=_plain)))
    except (TypeError, ValueError) as exc:
        raise DataError(f"'meta' must be JSON-serialisable: {exc}") from None


def _plain(x):
    """A numpy number or array in ``meta`` as the Python number or list it holds."""
    if isinstance(x, np.generic | np.ndarray):
        return x.tolist()
    raise TypeError(f"Object of type {type(x).__name__} is not JSON serializable")


def _check_periodic(meta, dim_y: int) -> None:
    """``meta["periodic"]``, when present, is a list of [column of y, period > 0] pairs."""
    if not isinstance(meta, dict):
        raise DataError(f"'meta' must be a dict, got {type(meta).__name__}")
    value = meta.get("periodic", [])
    if not isinstance(value, list | tuple) or not all(_is_period_pair(p) for p in value):
        raise DataError(
            f"'meta' declares periodic {reprlib.repr(value)}: it must be a list of "
            f"[column, period] pairs, an integer column and a finite period > 0"
        )
    seen = set()
    for j, _ in value:
        if not 0 <= j < dim_y:
            raise DataError(f"'meta' declares periodic coordinate {j}, but 'y' has {dim_y} "
                            f"columns (0..{dim_y - 1})")
        if j in seen:
            raise DataError(f"'meta' declares periodic coordinate {j} twice")
        seen.add(j)


def _is_period_pair(p) -> bool:
    if not isinstance(p, list | tuple) or len(p) != 2:
        return False
    j, period = p
    return (isinstance(j, numbers.Integral) and not isinstance(j, bool)
            and isinstance(period, numbers.Real) and not isinstance(period, bool)
            and bool(np.isfinite(period)) and period > 0)


def load(path: str | os.PathLike) -> OperatorData:
    """Read and validate an aligned ``.npz``; any fault raises :class:`DataError` in one line."""
    arrays = read_npz(path)
    missing = [k for k in _REQUIRED if k not in arrays]
    if missing:
        hint = ("; another tool's file of inputs and outputs is converted by 'bdeeponet import'"
                if len(missing) == len(_REQUIRED) else "")
        raise DataError(f"{path}: missing key '{missing[0]}' (required: "
                        f"{', '.join(_REQUIRED)}){hint}")
    meta = _parse_meta(path, arrays["meta"]) if "meta" in arrays else {}
    kwargs = {k: arrays[k] for k in (*_REQUIRED, *_OPTIONAL) if k in arrays}
    if "noise_std" in arrays:
        kwargs["noise_std"] = arrays["noise_std"]
    try:
        return OperatorData(**kwargs, meta=meta)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None


def read_npz(path) -> dict[str, np.ndarray]:
    """All arrays of the ``.npz`` at ``path`` (no pickles), as a dict.

    A missing file, a directory, a non-zip file (``.npy``, text, truncated archive) or a
    member that is not a plain array raises :class:`DataError` in one line.
    """
    if not os.path.exists(path):
        raise DataError(f"no such file: {path}")
    if os.path.isdir(path):
        raise DataError(f"{path} is a directory, not an .npz file")
    try:
        if not zipfile.is_zipfile(path):  # also refuses .npy, pickles and truncated files
            raise DataError(f"{path} is not an .npz file (not a zip archive)")
        with np.load(path, allow_pickle=False) as z:
            return {key: _read_member(path, z, key) for key in z.files}
    except DataError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise DataError(f"{path} is not a readable .npz file ({exc})") from None
    except MemoryError:  # a member's header claims an array larger than the machine
        raise DataError(f"{path} is not a readable .npz file (an array too large for memory)") from None


def _read_member(path, z, key: str) -> np.ndarray:
    try:
        value = z[key]
    except ValueError as exc:  # object arrays need pickle: never accepted
        raise DataError(f"{path}: '{key}' cannot be read ({exc})") from None
    if not isinstance(value, np.ndarray):  # a zip member that is not an .npy array
        raise DataError(f"{path}: '{key}' is not a NumPy array")
    return value


def _parse_meta(path, meta: np.ndarray) -> dict:
    """``meta`` holds JSON text of an object (str or UTF-8 bytes, one element)."""
    text = meta.item() if meta.size == 1 and meta.dtype.kind in "US" else None
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    try:
        value = json.loads(text) if text is not None else None
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise DataError(f"{path}: 'meta' is not JSON text of an object ({{...}})")
    return value


def fine_grid(m: int, min_points: int = 1000) -> np.ndarray:
    """Uniform grid of [0, 1] that contains the m equispaced sensors (refinement factor even)."""
    r = max(2, int(np.ceil((min_points - 1) / (m - 1))))
    r += r % 2
    return np.linspace(0.0, 1.0, (m - 1) * r + 1)


def generate(
    problem,
    noise_std: float,
    rng: np.random.Generator,
    n_train: int = 1000,
    n_test: int = 100,
    m: int | None = None,
    length_scale: float | None = None,
    relative: bool = False,
) -> OperatorData:
    """Draw inputs, solve ``problem`` and add i.i.d. N(0, noise_std^2) to the train targets.

    With ``relative`` the noise's standard deviation is ``noise_std`` times that of the
    clean training targets (``meta["noise_relative"]`` keeps the factor, ``noise_std`` the
    resulting absolute value).

    GRF inputs (m sensors, default 100; length scale default 0.2) are sampled on a fine grid
    that contains the m sensors, so the solver sees the same function the branch net sees at
    its sensors. A problem with a ``draw(n, rng)`` method (the field benchmarks ``burgers``
    and ``darcy2d``) draws its own inputs on its own grid, set by its parameters.
    """
    if isinstance(problem, str) or not hasattr(problem, "query_points"):
        raise TypeError(f"problem must be a problem object (bdeeponet.get_problem(name)), got "
                        f"{problem!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (np.random.default_rng(seed)), got "
                        f"{type(rng).__name__}")
    if not (isinstance(noise_std, numbers.Real) and not isinstance(noise_std, bool)
            and np.isfinite(noise_std) and noise_std > 0):  # also refuses NaN and inf
        raise ValueError(f"noise must be a finite number > 0, got {noise_std!r}")
    for name, v, lo in (("n_train", n_train, 1), ("n_test", n_test, 1), ("m", 100 if m is None else m, 2)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    u, s, sensors = draw_inputs(problem, n_train + n_test, rng, m, length_scale)
    factor = noise_std
    if relative:
        noise_std = float(noise_std * s[:n_train].std())
    noisy = s[:n_train] + noise_std * rng.standard_normal(s[:n_train].shape)
    meta = {**problem_meta(problem), "noise_std": noise_std}
    if not hasattr(problem, "draw"):
        meta["length_scale"] = 0.2 if length_scale is None else length_scale
    if relative:
        meta["noise_relative"] = factor
    return OperatorData(
        u_train=u[:n_train],
        s_train=noisy,
        u_test=u[n_train:],
        s_test=s[n_train:],
        y=problem.query_points(),
        sensors=sensors,
        s_train_clean=s[:n_train],
        noise_std=noise_std,
        meta=meta,
    )


def _jsonable(v):
    return v.item() if isinstance(v, np.generic) else v


def problem_meta(problem) -> dict:
    """What a data file records of the problem that made it: its name and parameters, the
    format version and the coordinates in which its solutions are periodic."""
    meta = {
        "problem": problem.name,
        "parameters": {k: _jsonable(v) for k, v in dataclasses.asdict(problem).items()},
        "format_version": FORMAT_VERSION,
    }
    if problem.periodic_coordinates:
        meta["periodic"] = [[j, period] for j, period in problem.periodic_coordinates]
    return meta


def input_sensors(problem, m: int) -> np.ndarray:
    """The sensors (m, d_in) at which :func:`solve_inputs` takes inputs of m values: a
    field problem's own, else m equispaced points on [0, 1] (as ``generate`` writes them)."""
    if hasattr(problem, "draw"):
        return problem.sensor_points()
    return np.linspace(0.0, 1.0, m)[:, None]


def solve_inputs(problem, u) -> np.ndarray:
    """Clean solutions (n, P) for inputs u (n, m) given at :func:`input_sensors`."""
    u = np.asarray(u, dtype=np.float64)
    if u.ndim != 2 or u.shape[1] < 2:
        raise ValueError(f"inputs must have shape (n, m) with m >= 2, got {u.shape}")
    with np.errstate(all="ignore"):  # a solver that fails says so below, in one line
        s = (problem.solve(u) if hasattr(problem, "draw") else
             problem.solve(input_sensors(problem, u.shape[1])[:, 0], u))
    bad = ~np.isfinite(s).all(axis=1)
    if bad.any():
        worst = float(np.abs(u[bad]).max())
        raise ValueError(f"{problem.name}'s solver gave NaN or inf for {int(bad.sum())} of the "
                         f"{len(u)} inputs (the largest |u| among them: {worst:.3g}; its own "
                         f"draws are of order 1)")
    return s


def draw_inputs(problem, n: int, rng: np.random.Generator, m: int | None = None,
                length_scale: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n inputs at the sensors (n, m), their clean solutions (n, P) and the sensors (m, d_in).

    ``m`` and ``length_scale`` shape the GRF of the 1-D problems; a problem that draws its
    own inputs (``draw``) fixes its grid by its own parameters and refuses them.
    """
    if hasattr(problem, "draw"):
        for option, value in (("--m", m), ("--length-scale", length_scale)):
            if value is not None:
                raise ValueError(f"{problem.name} draws its own inputs on its own grid: {option} "
                                 f"does not apply (set the grid with --param n_points=N)")
        u, s = problem.draw(n, rng)
        return u, s, problem.sensor_points()
    m = 100 if m is None else m
    x = fine_grid(m)
    stride = (x.size - 1) // (m - 1)
    sampler = periodic_grf if problem.periodic_input else rbf_grf
    u = sampler(x, n, rng, length_scale=0.2 if length_scale is None else length_scale)
    return u[:, ::stride], problem.solve(x, u), x[::stride, None]
