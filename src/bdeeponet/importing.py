"""Convert another tool's data file into the aligned operator data of :mod:`bdeeponet.data`.

The file holds input functions ``X`` (N, n) or (N, n1, n2) under one key and outputs ``S``
under another, one row per function on a fixed grid (as in the usual DeepONet / FNO
benchmark files). Formats, chosen by the content as well as the extension:

* ``.mat`` MATLAB v5 (read with :func:`scipy.io.loadmat`),
* MATLAB v7.3, which is HDF5 opening with MATLAB's text header (read with h5py; MATLAB
  stores arrays transposed, so the axes of every array read are reversed),
* plain HDF5, without that header, whatever its extension (h5py, keys may be nested:
  ``group/dataset``),
* ``.npz`` (:func:`numpy.load` with ``allow_pickle=False``).

Nothing is ever unpickled: only arrays of real numbers (bool, int, float) are read; object,
struct, cell, string and complex arrays are refused. Every bad input raises
:class:`ImportDataError` with one line naming the key or option at fault.
"""

from __future__ import annotations

import io
import math
import numbers
import os
import struct
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np
import scipy.io
import scipy.io.matlab

from .data import FORMAT_VERSION, SCALE_RANGE, DataError, OperatorData
from .data import sensor_grid as points_grid
from .io import atomic_write

ASSUMED_GRID = "equispaced on [0, 1] (assumed)"
ASSUMED_PERIODIC_GRID = "equispaced on [0, 1), periodic (assumed)"
# MATLAB classes that hold real numbers (v5 ``whosmat`` and v7.3 ``MATLAB_class`` names).
_MATLAB_NUMERIC = {"double", "single", "logical", "int8", "uint8", "int16", "uint16",
                   "int32", "uint32", "int64", "uint64"}


class ImportDataError(ValueError):
    """A data file, key or option that cannot be converted (one-line message)."""


class _MissingKey(ImportDataError):
    """The file holds no array under that key."""


def import_file(path, *, input_key: str, output_key: str, grid_key: str | None = None,
                subsample: int = 1, n_train: int | None = None, n_test: int | None = None,
                noise: float | None = None, seed: int = 0,
                noise_std: float | None = None, periodic: bool = False) -> OperatorData:
    """Read ``input_key`` / ``output_key`` (and ``grid_key``) from ``path`` as aligned data.

    Every ``subsample``-th grid point is kept along each grid axis. The first ``n_train``
    functions are for training and the next ``n_test`` for testing (default: 10% test, at
    least one, the rest training). With ``noise``, i.i.d. N(0, noise^2) drawn with ``seed``
    is added to the training outputs only, and the clean ones are kept. With ``noise_std``
    the outputs are measurements whose noise has that sd: it is recorded, nothing is added.
    With ``periodic`` the grid is periodic along each of its axes: the assumed grid is
    [0, 1) (n points, its end left out), and ``meta["periodic"]`` declares each axis's
    period (a grid read from ``grid_key`` must be equispaced; its period is its step times
    its points).
    """
    path = Path(path)
    _check_options(input_key, output_key, grid_key, subsample, n_train, n_test, noise, seed)
    if not isinstance(periodic, bool):
        raise ImportDataError(f"periodic must be True or False, got {periodic!r}")
    if noise_std is not None:
        if noise is not None:
            raise ImportDataError("--noise adds noise to clean outputs and --noise-std records "
                                  "the noise of measured ones: give one of them")
        _check_options(input_key, output_key, grid_key, subsample, n_train, n_test, noise_std,
                       seed, "--noise-std")
    subsample, seed = int(subsample), int(seed)  # plain numbers for the JSON meta
    noise = None if noise is None else float(noise)
    with _reader(path) as (fmt, read):
        x = read(input_key, "--input")
        s = read(output_key, "--output")
        g = read(grid_key, "--grid") if grid_key is not None else None
    src = path.name
    x_grid = _grid_shape(src, input_key, x)
    s_grid = _grid_shape(src, output_key, s)
    if x.shape[0] != s.shape[0]:
        raise ImportDataError(f"{src}: input '{input_key}' has {x.shape[0]} functions (first axis) "
                              f"but output '{output_key}' has {s.shape[0]}")
    x, s = _subsample(src, input_key, x, subsample), _subsample(src, output_key, s, subsample)
    n_train, n_test = _split(src, input_key, x.shape[0], n_train, n_test)
    used = n_train + n_test
    x = _finite(src, input_key, x[:used].reshape(used, -1))
    s = _finite(src, output_key, s[:used].reshape(used, -1))

    if periodic:
        for name, shape in ((input_key, x_grid), (output_key, s_grid)):
            if any(n % subsample for n in shape):
                raise ImportDataError(f"{src}: --subsample {subsample} does not divide the "
                                      f"periodic grid of '{name}' ({' x '.join(map(str, shape))}"
                                      "): a periodic grid's stride must divide its points")
    if g is None:
        y = _equispaced(s_grid, subsample, periodic)
        grid = ASSUMED_PERIODIC_GRID if periodic else ASSUMED_GRID
    else:
        y, grid = _finite(src, grid_key, _read_grid(src, grid_key, g, s_grid, subsample)), grid_key
    if g is not None and x_grid == s_grid:  # input on the same grid as the output
        sensors, sensor_grid = y, grid_key
    else:
        sensors = _equispaced(x_grid, subsample, periodic)
        sensor_grid = ASSUMED_PERIODIC_GRID if periodic else ASSUMED_GRID

    s_train = s_train_clean = s[:n_train]
    if noise is not None:
        rng = np.random.default_rng(seed)
        s_train = s_train_clean + noise * rng.standard_normal(s_train_clean.shape)
    meta = {
        "source": src, "format": fmt, "input_key": input_key, "output_key": output_key,
        "subsample": subsample, "n_train": n_train, "n_test": n_test, "noise": noise,
        "measured_noise_std": None if noise_std is None else float(noise_std),
        "seed": seed, "grid": grid, "sensor_grid": sensor_grid,
        "format_version": FORMAT_VERSION,
    }
    if periodic:
        meta["periodic"] = _periods(src, y, s_grid, subsample)
    try:
        return OperatorData(
            u_train=x[:n_train], s_train=s_train, u_test=x[n_train:], s_test=s[n_train:],
            y=y, sensors=sensors, s_train_clean=s_train_clean if noise is not None else None,
            noise_std=noise if noise_std is None else float(noise_std), meta=meta)
    except DataError as exc:  # not expected after the checks above; keep the one-line form
        raise ImportDataError(f"{src}: {exc}") from None


def write_published(path, inputs: np.ndarray, outputs: np.ndarray, keys: tuple[str, str],
                    mat73: bool = False) -> None:
    """Write ``inputs`` and ``outputs`` (n, *grid) under ``keys`` as the field's benchmark
    files are published: ``.mat`` MATLAB v5 (or v7.3 with ``mat73``: HDF5 with MATLAB's
    512-byte header and its column-major axes, i.e. every array stored transposed), or plain
    ``.h5``. Atomic; :func:`import_file` reads all three back.
    """
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in (".mat", ".h5", ".hdf5"):
        raise ImportDataError(f"a published layout is written as .mat, .h5 or .hdf5, got '{ext}'")
    arrays = {keys[0]: np.asarray(inputs, dtype=np.float64),
              keys[1]: np.asarray(outputs, dtype=np.float64)}
    if ext == ".mat" and not mat73:
        atomic_write(path, lambda fh: scipy.io.savemat(fh, arrays, do_compression=True))
        return

    def write_h5(fh):
        buffer = io.BytesIO()  # h5py needs a file it can read back as it writes
        with h5py.File(buffer, "w", userblock_size=512 if ext == ".mat" else 0) as f:
            for key, a in arrays.items():
                d = f.create_dataset(key, data=a.T if ext == ".mat" else a, compression="gzip")
                if ext == ".mat":
                    d.attrs["MATLAB_class"] = np.bytes_("double")
        data = bytearray(buffer.getvalue())
        if ext == ".mat":  # MATLAB's text header, version 0x0200 and endian mark 'IM'
            text = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created by: bdeeponet HDF5 schema 1.00 ."
            data[:128] = text.ljust(116, b" ") + b"\0" * 8 + b"\x00\x02IM"
        fh.write(data)

    atomic_write(path, write_h5)


def import_to(path, out, **kwargs) -> OperatorData:
    """:func:`import_file` then write the aligned ``.npz`` to ``out`` atomically."""
    data = import_file(path, **kwargs)
    data.save(out)
    return data


# --- options ---------------------------------------------------------------------------

def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _check_options(input_key, output_key, grid_key, subsample, n_train, n_test, noise, seed,
                   noise_option: str = "--noise"):
    for option, key in (("--input", input_key), ("--output", output_key), ("--grid", grid_key)):
        if (key is not None or option != "--grid") and not (isinstance(key, str) and key):
            raise ImportDataError(f"{option} must be a non-empty key name, got {key!r}")
    if not _is_int(subsample) or subsample < 1:
        raise ImportDataError(f"--subsample must be an integer >= 1, got {subsample!r}")
    for option, v in (("--n-train", n_train), ("--n-test", n_test)):
        if v is not None and (not _is_int(v) or v < 1):
            raise ImportDataError(f"{option} must be an integer >= 1, got {v!r}")
    if noise is not None and not (isinstance(noise, numbers.Real) and not isinstance(noise, bool)
                                  and SCALE_RANGE[0] <= noise <= SCALE_RANGE[1]):
        raise ImportDataError(f"{noise_option} must be a number within [{SCALE_RANGE[0]:g}, "
                              f"{SCALE_RANGE[1]:g}], got {noise!r}")
    if not _is_int(seed) or seed < 0:
        raise ImportDataError(f"--seed must be an integer >= 0, got {seed!r}")


def _split(src, key, n, n_train, n_test) -> tuple[int, int]:
    if n < 2:
        raise ImportDataError(f"'{key}' in {src} has {n} function; at least 2 are needed "
                              f"(one for training, one for testing)")
    if n_test is None:
        n_test = max(1, round(0.1 * n))
    if n_train is None:
        n_train = n - n_test
    if n_train < 1 or n_train + n_test > n:
        raise ImportDataError(f"--n-train {n_train} + --n-test {n_test} needs {n_train + n_test} "
                              f"functions (at least 1 each), but '{key}' in {src} has {n}")
    return int(n_train), int(n_test)


# --- arrays ----------------------------------------------------------------------------

def _grid_shape(src, key, a) -> tuple[int, ...]:
    if a.ndim not in (2, 3):
        raise ImportDataError(f"{src}: '{key}' has shape {a.shape}; expected (N, n) or "
                              f"(N, n1, n2): one row per function on a 1-D or 2-D grid")
    return a.shape[1:]


def _subsample(src, key, a, k) -> np.ndarray:
    """Every k-th point along each grid axis. k must divide n - 1 (a grid with both ends, as
    Darcy's 421 -> 85) or n (a periodic grid without its end, as Burgers' 8192 -> 128)."""
    for n in a.shape[1:]:
        if (n - 1) % k and n % k:
            raise ImportDataError(f"{src}: --subsample {k} does not divide the grid of '{key}' "
                                  f"(shape {a.shape}): it must divide n - 1 (a grid with both "
                                  f"ends) or n (a periodic grid), here {n - 1} or {n}")
    if min(a.shape[1:]) < 2:
        raise ImportDataError(f"{src}: '{key}' (shape {a.shape}) has {min(a.shape[1:])} "
                              "point along an axis of its grid; at least 2 are needed")
    kept = tuple(len(range(0, n, k)) for n in a.shape[1:])
    if min(kept) < 2:
        raise ImportDataError(f"{src}: --subsample {k} leaves {min(kept)} point(s) along an "
                              f"axis of '{key}' (shape {a.shape}); at least 2 are needed")
    return a[(slice(None),) + (slice(None, None, k),) * (a.ndim - 1)]


def _finite(src, key, a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise ImportDataError(f"{src}: '{key}' contains NaN or inf in the part used")
    return a


def _equispaced(shape, k, periodic: bool = False) -> np.ndarray:
    """Points of the equispaced grid of [0, 1]^d with ``shape`` (of [0, 1)^d, its ends left
    out, with ``periodic``), every k-th, in C order."""
    axes = [(np.arange(n) / n if periodic else np.linspace(0.0, 1.0, n))[::k] for n in shape]
    return np.stack([c.ravel() for c in np.meshgrid(*axes, indexing="ij")], axis=1)


def _periods(src, y: np.ndarray, shape, k) -> list[list]:
    """``[[j, period], ...]`` of a periodic grid ``y`` (P, d): along each axis its step
    times its points. ImportDataError unless y is an equispaced tensor grid of ``shape``
    (every k-th point) in row-major order."""
    kept = tuple(len(range(0, n, k)) for n in shape)
    if y.shape[1] != len(kept) or points_grid(y) != kept:
        raise ImportDataError(f"{src}: --periodic needs the output on an equispaced "
                              f"{' x '.join(map(str, kept))} grid, one coordinate per axis, in "
                              "row-major order; the grid given is not one")
    out = []
    for j, n in enumerate(kept):
        axis = np.unique(y[:, j])
        out.append([j, float((axis[-1] - axis[0]) / (n - 1) * n)])
    return out


def _read_grid(src, key, g, shape, k) -> np.ndarray:
    """Coordinates ``g`` of the output grid ``shape`` as (P, d), every k-th per axis."""
    p = math.prod(shape)
    if g.shape[:len(shape)] == shape or (g.ndim >= 1 and g.shape[0] == p):
        g = g.reshape(*shape, -1)
    elif g.ndim == 2 and g.shape == (1, p):  # a MATLAB row vector
        g = g.reshape(*shape, 1)
    else:
        grid_d = f" or ({shape[0]}, {shape[1]}, d)" if len(shape) == 2 else ""
        raise ImportDataError(f"{src}: grid '{key}' has shape {g.shape}, which does not match "
                              f"the output's {p} grid points: expected ({p},), ({p}, d){grid_d}")
    g = g[(slice(None, None, k),) * len(shape)]
    return g.reshape(-1, g.shape[-1])


def _check_dtype(src, key, dtype) -> None:
    if dtype.kind not in "biuf":
        raise ImportDataError(f"{src}: '{key}' has dtype {dtype}; only arrays of real numbers "
                              f"are read (no objects, structs, cells, text or complex)")


def _real_array(src, key, a) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise ImportDataError(f"{src}: '{key}' is not a dense array ({type(a).__name__})")
    _check_dtype(src, key, a.dtype)
    if a.size == 0:
        raise ImportDataError(f"{src}: '{key}' is empty (shape {a.shape})")
    return a


# --- file formats ----------------------------------------------------------------------

Read = Callable[[str, str], np.ndarray]


@contextmanager
def _reader(path: Path) -> Iterator[tuple[str, Read]]:
    """Yield ``(format, read)``; ``read(key, option)`` returns the array stored at ``key``."""
    src, ext = path.name, path.suffix.lower()
    if path.is_dir():
        raise ImportDataError(f"{path} is a directory, not a data file")
    if not path.is_file():
        raise ImportDataError(f"no such file: {path}")
    if ext not in (".mat", ".h5", ".hdf5", ".npz"):
        raise ImportDataError(f"{src}: unknown extension '{ext}' (expected .mat, .h5, .hdf5 "
                              f"or .npz)")
    if ext == ".npz":
        if not zipfile.is_zipfile(path):
            raise ImportDataError(f"{src} is not an .npz file (not a zip archive)")
        try:
            z = np.load(path, allow_pickle=False)
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise ImportDataError(f"{src} is not a readable .npz file ({exc})") from None
        with z:
            yield "npz", lambda key, option: _npz_get(src, z, key, option)
    elif h5py.is_hdf5(path):
        with open(path, "rb") as fh:  # MATLAB's v7.3 files open with its text header
            fmt = "mat-v7.3" if fh.read(6) == b"MATLAB" else "hdf5"
        try:
            f = h5py.File(path, "r")
        except OSError as exc:
            raise ImportDataError(f"{src} is not a readable HDF5 file ({exc})") from None
        with f:
            yield fmt, lambda key, option: _h5_get(src, f, key, option, fmt == "mat-v7.3")
    elif ext == ".mat":
        variables = _mat_variables(path)
        yield "mat-v5", lambda key, option: _mat_get(path, variables, key, option)
    else:
        raise ImportDataError(f"{src} is not an HDF5 file")


def _missing(src, key, option, available) -> ImportDataError:
    names = ", ".join(sorted(available)[:20]) or "none"
    return _MissingKey(f"{src}: {option} key '{key}' not found (keys: {names})")


def read_arrays(path, keys) -> dict[str, np.ndarray]:
    """The arrays of ``keys`` that a file in any of the formats above holds, as stored (v7.3
    transposed back), for inputs given to ``predict`` and ``acquire``; absent keys are left
    out. A file that cannot be read raises :class:`ImportDataError` in one line."""
    out = {}
    with _reader(Path(path)) as (_fmt, read):
        for key in keys:
            try:
                out[key] = read(key, "")
            except _MissingKey:
                pass
    return out


def _npz_get(src, z, key, option) -> np.ndarray:
    if key not in z.files:
        raise _missing(src, key, option, z.files)
    try:
        a = z[key]
    except ValueError as exc:
        if "allow_pickle" in str(exc):  # an object array: reading it would need pickle
            raise ImportDataError(f"{src}: '{key}' holds Python objects (a pickle); refused, "
                                  f"only arrays of real numbers are read") from None
        raise ImportDataError(f"{src}: '{key}' cannot be read ({exc})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ImportDataError(f"{src}: '{key}' cannot be read ({exc})") from None
    return _real_array(src, key, a)


def _h5_get(src, f, key, option, transpose: bool) -> np.ndarray:
    try:
        obj = f.get(key)
    except (KeyError, ValueError, TypeError):
        obj = None
    if obj is None:
        names = []
        f.visititems(lambda name, o: names.append(name) if isinstance(o, h5py.Dataset) else None)
        raise _missing(src, key, option, names)
    if not isinstance(obj, h5py.Dataset):
        raise ImportDataError(f"{src}: '{key}' is a group (e.g. a MATLAB struct), not an array")
    cls = obj.attrs.get("MATLAB_class")
    cls = cls.decode() if isinstance(cls, bytes) else cls
    if cls is not None and cls not in _MATLAB_NUMERIC:  # cell (references), char, struct, ...
        raise ImportDataError(f"{src}: '{key}' is a MATLAB {cls} array; only numeric arrays "
                              f"are read")
    if "MATLAB_empty" in obj.attrs or obj.shape is None:
        raise ImportDataError(f"{src}: '{key}' is empty")
    _check_dtype(src, key, obj.dtype)  # before reading: references, strings, compounds
    try:
        a = np.asarray(obj[()])
    except OSError as exc:
        raise ImportDataError(f"{src}: '{key}' cannot be read ({exc})") from None
    return _real_array(src, key, np.ascontiguousarray(a.T) if transpose else a)


def _mat_variables(path: Path) -> dict[str, str]:
    """``{name: MATLAB class}`` of a v5 .mat file; anything else is refused."""
    try:
        major, _ = scipy.io.matlab.matfile_version(os.fspath(path))
        if major != 1:
            raise ImportDataError(f"{path.name} is a MATLAB v4 file; only v5 and v7.3 are read")
        variables = {name: cls for name, _, cls in scipy.io.whosmat(os.fspath(path))}
        if not _v5_complete(path):  # whosmat stops quietly where a truncated file ends
            raise ImportDataError(f"{path.name} is truncated: its last variable ends past the "
                                  f"end of the file ({path.stat().st_size} bytes)")
        return variables
    except ImportDataError:
        raise
    except Exception as exc:  # scipy raises several types for a file it cannot parse
        raise ImportDataError(f"{path.name} is neither a MATLAB v5 nor a v7.3 (HDF5) file "
                              f"({exc})") from None


def _v5_complete(path: Path) -> bool:
    """Whether the data elements of a MATLAB v5 file, tag after tag from byte 128, end
    within the file (an 8-byte tag: type and size; a matrix padded to 8 bytes, a compressed
    element not; a tag whose first word's upper half is set is a whole small element)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(128)
        order = "<" if head[126:128] == b"IM" else ">"
        pos = 128
        while pos < size:
            fh.seek(pos)
            tag = fh.read(8)
            if len(tag) < 8:
                return False
            kind, nbytes = struct.unpack(order + "II", tag)
            if kind >> 16:
                pos += 8
                continue
            if pos + 8 + nbytes > size:
                return False
            pos += 8 + nbytes + (0 if kind == 15 else -nbytes % 8)
    return True


def _mat_get(path: Path, variables, key, option) -> np.ndarray:
    src = path.name
    if key not in variables:
        raise _missing(src, key, option, variables)
    if variables[key] not in _MATLAB_NUMERIC:  # cell, struct, object, char, sparse, ...
        raise ImportDataError(f"{src}: '{key}' is a MATLAB {variables[key]} array; only numeric "
                              f"arrays are read")
    try:
        a = scipy.io.loadmat(os.fspath(path), variable_names=[key])[key]
    except Exception as exc:
        raise ImportDataError(f"{src}: '{key}' cannot be read ({exc})") from None
    return _real_array(src, key, a)
