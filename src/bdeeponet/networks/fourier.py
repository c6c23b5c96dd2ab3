"""A Fourier neural operator (Li et al. 2021) for fields given on a grid, batched over chains.

The input u, sampled on an equispaced 1-D or 2-D grid (row major), and the output s on the
same grid are fields; the network maps one to the other:

    v₀ = L(u, x)                                   lifting: a pointwise linear map to c channels
    v_{l+1} = σ(K_l v_l + W_l v_l + b_l)           l = 0 .. depth − 1 (no σ after the last)
    s = s_shift + s_scale Q(v_depth)                projection: pointwise, c → h → 1, σ between

``K_l v = F⁻¹(R_l · F v)``: the discrete Fourier transform over the grid, a complex
``c × c`` matrix per retained mode (the lowest ``modes`` along each axis: in 2-D the
corners ``|k₁| < modes``, ``0 <= k₂ < modes`` of the real transform), and back. The
weights act on modes, not grid points, so they do not depend on the grid's size.
``x``: the grid coordinates mapped onto [0, 1], one channel per axis that is not
periodic (along a periodic axis the network commutes with the cyclic shifts). A
non-periodic axis is zero-padded before the first spectral layer and cropped after the
last, to a length whose only prime factors are 2, 3 and 5, at least a tenth longer: the
transform then does not wrap one edge onto the other, and the FFT sizes factor well.

Every parameter may carry a leading chain dimension C: :meth:`FourierOperator.functional_forward`
evaluates C networks on one batch, ``(n, m) -> (C, n, P)``, as one computation (the
samplers' chains and replicas). Parameters are plain tensors (the spectral weights real,
``(..., 2)`` for the real and imaginary parts), so autograd, ``torch.func`` and
``double()`` treat them as any other.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy.interpolate import interpn
from torch import nn
from torch.nn import functional as F

from ..data import sensor_grid as points_grid
from ..model import Dropout, _periodic_pairs

KIND = "fourier"


def smooth_size(n: int) -> int:
    """The smallest integer >= n whose only prime factors are 2, 3 and 5."""
    k = max(1, int(n))
    while True:
        r = k
        for p in (2, 3, 5):
            while r % p == 0:
                r //= p
        if r == 1:
            return k
        k += 1


@dataclass(frozen=True)
class FourierConfig:
    """Architecture of a :class:`FourierOperator`; everything needed to rebuild it.

    ``grid``: ``(W,)`` or ``(H, W)``, the points of the input and output grid (row major);
    ``periodic``: ``(axis, period)`` pairs, the axes along which the fields are periodic
    (as :class:`bdeeponet.model.ModelConfig`'s); ``width``: channels c; ``depth``: spectral layers;
    ``modes``: retained modes per axis (at most what the grid resolves: ``W // 2 + 1``,
    and ``H // 2`` along a first axis of a 2-D grid); ``projection``: hidden units of the
    projection. ``u_shift, u_scale, s_shift, s_scale``: the standardisation of inputs and
    outputs (see :func:`bdeeponet.model.standardisation`).
    """

    grid: tuple
    periodic: tuple = ()
    width: int = 32
    depth: int = 4
    modes: int = 12
    projection: int = 128
    activation: str = "gelu"
    dropout: float = 0.0  # channel dropout after each activation (Adam + MC dropout only)
    patch: int = 1  # points per patch side: the layers run on a grid of patches (see coarse)
    bounds: tuple = ()  # ((lo, hi) per axis): the grid's coordinates (none: [0, 1] each)
    u_shift: float = 0.0
    u_scale: float = 1.0
    s_shift: float = 0.0
    s_scale: float = 1.0

    kind = KIND

    def __post_init__(self):
        grid = tuple(int(g) for g in self.grid)
        if len(grid) not in (1, 2) or any(g < 2 for g in grid):
            raise ValueError(f"a Fourier network needs a 1-D or 2-D grid of at least 2 points "
                             f"a side, got {self.grid!r}")
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "periodic", _periodic_pairs(self.periodic, len(grid)))
        for name in ("width", "depth", "modes", "projection", "patch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.activation not in ("gelu", "tanh", "relu", "silu"):
            raise ValueError(f"unknown activation '{self.activation}'; choose one of: "
                             "gelu, tanh, relu, silu")
        for j, periodic in enumerate(self.periodic_axes):
            if periodic and grid[j] % self.patch:
                raise ValueError(f"patches of {self.patch} points must tile the periodic "
                                 f"axis {j} of {grid[j]} points")
        limit = max_modes(self.coarse)
        if self.modes > limit:
            raise ValueError(f"a {' x '.join(map(str, self.coarse))} grid"
                             f"{' of patches' if self.patch > 1 else ''} resolves at most {limit} "
                             f"Fourier modes per axis: choose --modes {limit} or fewer, or a "
                             "finer grid")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        bounds = tuple(tuple(float(v) for v in b) for b in self.bounds) or ((0.0, 1.0),) * len(grid)
        if len(bounds) != len(grid) or any(len(b) != 2 or not b[0] < b[1] for b in bounds):
            raise ValueError(f"bounds needs one (lo, hi) pair, lo < hi, per grid axis, "
                             f"got {self.bounds!r}")
        object.__setattr__(self, "bounds", bounds)
        for name in ("u_shift", "u_scale", "s_shift", "s_scale"):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Real) and math.isfinite(value)) or (
                    name.endswith("scale") and value <= 0):
                raise ValueError(f"{name} must be a finite number"
                                 f"{' > 0' if name.endswith('scale') else ''}, got {value!r}")
            object.__setattr__(self, name, float(value))

    @property
    def n_points(self) -> int:
        return math.prod(self.grid)

    n_sensors = n_points  # the input is read at the grid's points, the output given there

    @property
    def dim_y(self) -> int:
        return len(self.grid)

    def points(self) -> np.ndarray:
        """The grid's points (P, d), row major: where the input is read and the output is."""
        axes = [np.linspace(lo, hi, g) for (lo, hi), g in zip(self.bounds, self.grid, strict=True)]
        return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(axes))

    def grid_of(self, y) -> tuple[int, ...]:
        """The shape of the grid ``y`` (P, d) lies on: the training grid's, or another
        equispaced grid (row major) over the same bounds, where the network predicts too
        (its weights live on modes). ValueError where ``y`` is no such grid, or one too
        coarse for the modes."""
        y = np.asarray(y, dtype=np.float64)
        span = max(hi - lo for lo, hi in self.bounds)
        if y.shape == (self.n_points, len(self.grid)) and np.allclose(
                y, self.points(), rtol=0, atol=1e-5 * span):
            return self.grid
        if self.patch > 1:
            raise self.fixed_grid()
        shape = points_grid(y) if y.ndim == 2 and y.shape[1] == len(self.grid) else None
        if shape is None or not np.allclose(self._extent(y.min(axis=0), y.max(axis=0), shape),
                                            self._extent(*np.array(self.bounds).T, self.grid),
                                            rtol=0, atol=1e-5 * span):
            bounds = " x ".join(f"[{a:g}, {b:g}{')' if p else ']'}" for (a, b), p in
                                zip(self._extent(*np.array(self.bounds).T, self.grid),
                                    self.periodic_axes, strict=True))
            raise ValueError(f"this run's Fourier network gives its output on an equispaced "
                             f"grid over {bounds} (trained on {' x '.join(map(str, self.grid))}), "
                             f"listed in row-major order; the {len(y)} query points asked "
                             "for are not such a grid")
        if self.modes > max_modes(shape):
            raise ValueError(f"a {' x '.join(map(str, shape))} grid resolves at most "
                             f"{max_modes(shape)} Fourier modes per axis, and this run's "
                             f"network uses {self.modes}: ask for a finer grid")
        return shape

    def fixed_grid(self) -> ValueError:
        """The error of a network on patches asked for another grid."""
        return ValueError(f"this run's Fourier network reads patches of {self.patch} points "
                          "a side, so it predicts on its training grid only "
                          f"({' x '.join(map(str, self.grid))} points, listed in row-major "
                          "order)")

    def _extent(self, lo, hi, grid) -> np.ndarray:
        """(d, 2): per axis where a grid of ``grid`` points from ``lo`` to ``hi`` starts and
        ends, a periodic axis's end one step past its last point (its period)."""
        hi = [h + (h - a) / (g - 1) if p else h for a, h, g, p in
              zip(lo, hi, grid, self.periodic_axes, strict=True)]
        return np.column_stack([lo, hi])

    def padded_for(self, grid: tuple[int, ...]) -> tuple[int, ...]:
        """The spectral layers' size on ``grid``: along a non-periodic axis the padded
        extent of the training grid, in the new grid's steps (29 -> 32 points is 85 -> 96),
        so that each retained mode keeps its physical frequency."""
        if grid == self.grid:
            return self.padded
        out = []
        for g, g0, p0, periodic in zip(grid, self.grid, self.padded, self.periodic_axes,
                                       strict=True):
            out.append(g if periodic else max(g + 1, round(p0 * (g - 1) / (g0 - 1))))
        return tuple(out)

    def resample(self, u: np.ndarray, grid: tuple[int, ...]) -> np.ndarray:
        """Inputs (n, prod(grid)) on ``grid`` as (n, m) on the training grid, by linear
        interpolation (what the run's novelty score reads)."""
        if grid == self.grid:
            return u
        axes = [np.linspace(lo, hi, g) for (lo, hi), g in zip(self.bounds, grid, strict=True)]
        values = np.moveaxis(np.asarray(u, dtype=np.float64).reshape(len(u), *grid), 0, -1)
        return interpn(axes, values, self.points()).T

    @property
    def periodic_axes(self) -> tuple[bool, ...]:
        """One flag per grid axis: periodic or not."""
        axes = {j for j, _ in self.periodic}
        return tuple(j in axes for j in range(len(self.grid)))

    @property
    def coarse(self) -> tuple[int, ...]:
        """The grid the layers run on: the grid itself, or (``patch`` p > 1) one point per
        patch of p points a side, ``ceil(g / p)`` per axis (see :meth:`patch_padding`)."""
        return tuple(-(-g // self.patch) for g in self.grid)

    def patch_padding(self) -> tuple[tuple[int, int], ...]:
        """Per axis, the points added before and after the grid so that patches of
        ``patch`` points tile it (split evenly: a patch centred on every p-th point when p
        is odd); none along a periodic axis, which the patches tile already."""
        out = []
        for g, c in zip(self.grid, self.coarse, strict=True):
            extra = c * self.patch - g
            out.append((extra // 2, extra - extra // 2))
        return tuple(out)

    @property
    def padded(self) -> tuple[int, ...]:
        """The size of the coarse grid in the spectral layers: a periodic axis as it is,
        another padded (see the module docstring)."""
        return tuple(g if p else smooth_size(g + -(-g // 10))
                     for g, p in zip(self.coarse, self.periodic_axes, strict=True))

    @property
    def coordinates(self) -> int:
        """Input channels beside u: one per non-periodic axis."""
        return sum(not p for p in self.periodic_axes)

    def to_dict(self) -> dict:
        return {"network": KIND, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> FourierConfig:
        d = {k: v for k, v in d.items() if k != "network"}
        return cls(**d)


# the side of the coarse grid the default patch brings a 2-D grid down to (the patches
# were weighed on Darcy 85 x 85: docs/results/field-benchmarks)
COARSE_SIDE = 32


def default_patch(grid: tuple[int, ...], periodic_axes: tuple[bool, ...],
                  modes: int = 12) -> int:
    """The patch a 2-D grid's layers read by default: the smallest p that brings every
    side to at most ``COARSE_SIDE`` points and tiles each periodic axis, or, where the
    coarse grid would then resolve fewer than ``modes`` modes, the largest p that keeps
    them (1 if none does); a 1-D grid's layers read it point by point."""
    best = 1
    if len(grid) < 2:
        return best
    for p in range(2, max(grid) + 1):
        if any(g % p for g, per in zip(grid, periodic_axes, strict=True) if per):
            continue
        coarse = tuple(-(-g // p) for g in grid)
        if max_modes(coarse) < modes:
            break
        best = p
        if max(coarse) <= COARSE_SIDE:
            break
    return best


def max_modes(grid: tuple[int, ...]) -> int:
    """The most modes per axis a grid resolves: ``W // 2 + 1`` along the last axis (the real
    transform's), ``H // 2`` along a first one (its positive and negative frequencies)."""
    last = grid[-1] // 2 + 1
    return last if len(grid) == 1 else min(last, grid[0] // 2)


def mode_index(padded: tuple[int, ...], modes: int) -> torch.Tensor:
    """Flat indices, into the real transform of a ``padded`` grid (``(W//2+1,)`` or
    ``(H, W//2+1)`` row major), of the retained modes: ``k < modes`` in 1-D; in 2-D
    ``k₂ < modes`` and ``k₁`` in ``0..modes-1`` or ``H-modes+1..H-1`` (the lowest
    ``|k₁|``, each once)."""
    last = padded[-1] // 2 + 1
    cols = torch.arange(min(modes, last))
    if len(padded) == 1:
        return cols
    h = padded[0]
    rows = torch.cat([torch.arange(modes), torch.arange(h - modes + 1, h)]).unique()
    return (rows[:, None] * last + cols[None, :]).reshape(-1)


_ACT = {"gelu": F.gelu, "tanh": torch.tanh, "relu": F.relu, "silu": F.silu}


class FourierOperator(nn.Module):
    """``forward(u (n, m), y (P, d)) -> (n, P)`` with P = m, y the input grid.

    Parameter names: ``lift.{weight,bias}``, ``layers.{l}.{spectral,weight,bias}``,
    ``project.{0,1}.{weight,bias}``. :meth:`parameter_groups` splits them in two halves by
    depth (m-reSGLD's hot replica trains one per step).
    """

    # the sampler's stiffness estimate (Lanczos on float64 Hessian-vector products, about
    # 1.3 s each on 25 functions of Darcy 29 x 29, 6-9 s on 100, one thread) reads 25
    # functions: four disjoint sets of 25 read 3.2-4.9 where 100 read 4.0, well inside
    # the step's margin (it is capped at 0.2 / λ); and taming stops within 25% of its
    # target, where each further round (about 5 Lanczos steps) only moves 4.9 to 4.0
    curvature_functions = 25
    stiffness_tolerance = 0.25
    # the output is the grid's, whatever points y names (a sampler cuts it afterwards)
    reads_query_points = False

    def __init__(self, config: FourierConfig):
        super().__init__()
        self.config = c = config
        index = mode_index(c.padded, c.modes)
        self.register_buffer("kept_modes", index, persistent=False)
        w, k = c.width, index.numel()

        def param(*shape, sd):
            return nn.Parameter(torch.randn(*shape) * sd)

        cells = c.patch ** len(c.grid)  # the points of a patch: its input and output channels
        self.lift = nn.ParameterDict({"weight": param(w, cells + c.coordinates,
                                                      sd=(cells + c.coordinates) ** -0.5),
                                      "bias": param(w, sd=0.0)})
        # initial spectral gains of ~1/c per mode (as FNO's initialisation), so that the
        # first layers start near the pointwise path
        self.layers = nn.ModuleList(nn.ParameterDict({
            "spectral": param(w, w, k, 2, sd=1.0 / w),
            "weight": param(w, w, sd=w**-0.5),
            "bias": param(w, sd=0.0)}) for _ in range(c.depth))
        self.project = nn.ModuleList([
            nn.ParameterDict({"weight": param(c.projection, w, sd=w**-0.5),
                              "bias": param(c.projection, sd=0.0)}),
            nn.ParameterDict({"weight": param(cells, c.projection, sd=c.projection**-0.5),
                              "bias": param(cells, sd=0.0)})])
        # a unit's mask covers a function's whole field (one mask per function and pass)
        self.drop = Dropout(c.dropout) if c.dropout > 0 else None

    def forward(self, u: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return self.functional_forward(dict(self.named_parameters()), u, y)

    def prior_stds(self, scale: float = 1.0) -> dict[str, float]:
        """Per-tensor prior sds: ``scale / sqrt(fan in)`` for every pointwise weight and
        bias (as :func:`bdeeponet.energy.fan_in_prior` gives a linear layer), and for a
        spectral weight, whose c inputs per mode are summed as a pointwise layer's are."""
        out = {}
        for name, _ in self.named_parameters():
            layer = name.rsplit(".", 1)[0]
            out[name] = scale / self.get_parameter(f"{layer}.weight").shape[1] ** 0.5
        return out

    def parameter_groups(self) -> dict[str, list[str]]:
        """Two groups for m-reSGLD: ``lower`` (the lifting and the first ⌈depth/2⌉
        spectral layers) and ``upper`` (the other layers and the projection). A step that
        trains only the upper group never walks back through the lower layers."""
        cut = -(-self.config.depth // 2)
        lower, upper = [], []
        for name, _ in self.named_parameters():
            first = name.startswith("lift.") or (
                name.startswith("layers.") and int(name.split(".")[1]) < cut)
            (lower if first else upper).append(name)
        return {"lower": lower, "upper": upper}

    def functional_forward(self, params, u: torch.Tensor, y: torch.Tensor | None = None,
                           memo: dict | None = None) -> torch.Tensor:
        """The output (n, P) for one set of ``params`` (names as ``named_parameters``), or
        (C, n, P) for C chains' (each tensor (C, ...)); ``u`` (n, m) or, one batch per
        chain, (C, n, m). ``y`` and ``memo`` are accepted for the samplers' signature: the
        output lies on the input grid: the training grid, or (``u`` of another width)
        the grid of ``y`` (:meth:`FourierConfig.grid_of`)."""
        c = self.config
        if u.shape[-1] == c.n_points:
            grid, padded, index = c.grid, c.padded, self.kept_modes
        else:
            if c.patch > 1:
                raise c.fixed_grid()
            if y is None:
                raise ValueError(f"u has {u.shape[-1]} points, the training grid "
                                 f"{c.n_points}: pass y, the grid it is given on")
            grid = _grid_shape(y.detach().cpu().numpy())  # (y checked by predict's caller)
            if math.prod(grid) != u.shape[-1]:
                raise ValueError(f"u has {u.shape[-1]} points and y {math.prod(grid)}")
            padded = c.padded_for(grid)
            index = mode_index(padded, c.modes).to(u.device)
        single = params["lift.bias"].dim() == 1
        if single:
            params = {n: p.unsqueeze(0) for n, p in params.items()}
        chains = params["lift.bias"].shape[0]
        if u.dim() == 2:
            u = u.unsqueeze(0)
        n = u.shape[1]
        x = ((u - c.u_shift) / c.u_scale).reshape(u.shape[0], n, *grid)
        x = self._patches(x) if c.patch > 1 else x.unsqueeze(2)  # (C, n, cells, *coarse)
        grid = c.coarse if c.patch > 1 else grid
        if c.coordinates:
            x = torch.cat([x.expand(chains, *x.shape[1:]), self._coordinates(x, grid).expand(
                chains, n, c.coordinates, *grid)], dim=2)
        x = _pointwise(x, params["lift.weight"], params["lift.bias"])  # (C, n, w, *grid)
        pad = [p - g for g, p in zip(grid, padded, strict=True)]
        if any(pad):
            x = F.pad(x, [v for p in reversed(pad) for v in (0, p)])
        act = _ACT[c.activation]
        for i in range(c.depth):
            spectral = self._spectral(x, params[f"layers.{i}.spectral"], index)
            x = spectral + _pointwise(x, params[f"layers.{i}.weight"], params[f"layers.{i}.bias"])
            if i < c.depth - 1:
                x = self._dropout(act(x))
        if any(pad):
            x = x[(..., *(slice(0, g) for g in grid))]
        x = self._dropout(act(_pointwise(x, params["project.0.weight"], params["project.0.bias"])))
        x = _pointwise(x, params["project.1.weight"], params["project.1.bias"])
        out = (self._unpatch(x) if c.patch > 1 else x).reshape(chains, n, -1)
        if c.s_shift != 0.0 or c.s_scale != 1.0:
            out = c.s_shift + c.s_scale * out
        return out[0] if single else out

    def _patches(self, x: torch.Tensor) -> torch.Tensor:
        """Fields x (A, n, *grid) as (A, n, p^d, *coarse): each patch of p points a side
        (the grid edge-padded to tile, :meth:`FourierConfig.patch_padding`) as p^d channels
        at one point of the coarse grid."""
        c, p = self.config, self.config.patch
        pad = [v for lo_hi in reversed(c.patch_padding()) for v in lo_hi]
        shape = x.shape
        if any(pad):  # 'replicate' pads the last one or two axes of a 3-D or 4-D tensor
            x = F.pad(x.reshape(-1, 1, *shape[2:]), pad, mode="replicate").reshape(
                *shape[:2], *(k * p for k in c.coarse))
        if len(c.grid) == 1:
            return x.reshape(*shape[:2], c.coarse[0], p).transpose(-1, -2)
        h, w = c.coarse
        return x.reshape(*shape[:2], h, p, w, p).permute(0, 1, 3, 5, 2, 4).reshape(
            *shape[:2], p * p, h, w)

    def _unpatch(self, x: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`_patches`, (C, n, p^d, *coarse) -> (C, n, *grid): the
        padding cropped."""
        c, p = self.config, self.config.patch
        if len(c.grid) == 1:
            x = x.transpose(-1, -2).reshape(*x.shape[:2], -1)
        else:
            h, w = c.coarse
            x = x.reshape(*x.shape[:2], p, p, h, w).permute(0, 1, 4, 2, 5, 3).reshape(
                *x.shape[:2], h * p, w * p)
        return x[(..., *(slice(lo, lo + g) for (lo, _), g in zip(c.patch_padding(), c.grid,
                                                                  strict=True)))]

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (C, n, w, *grid) with whole channels of each function dropped (see
        :class:`bdeeponet.model.Dropout`: shared, one mask for every function)."""
        if self.drop is None:
            return x
        mask = self.drop.mask(x.new_empty(x.shape[:3]))
        return x if mask is None else x * mask[(..., *([None] * (x.dim() - 3)))]

    def _coordinates(self, like: torch.Tensor, grid: tuple[int, ...]) -> torch.Tensor:
        """(1, 1, k, *grid): each non-periodic axis's coordinate on [0, 1]."""
        c = self.config
        axes = [torch.linspace(0, 1, g, dtype=like.dtype, device=like.device) for g in grid]
        mesh = torch.meshgrid(*axes, indexing="ij")
        return torch.stack([m for m, p in zip(mesh, c.periodic_axes, strict=True) if not p])[None, None]

    def _spectral(self, x: torch.Tensor, weight: torch.Tensor,
                  index: torch.Tensor) -> torch.Tensor:
        """``F⁻¹(R · F x)`` over the last one or two axes of x (C, n, w, *padded), R the
        complex (C, w, w, k) weights at the retained modes (``index``, :func:`mode_index`)."""
        dims = tuple(range(-len(self.config.grid), 0))
        size = x.shape[-len(dims):]
        xh = torch.fft.rfftn(x, dim=dims, norm="ortho")
        flat = xh.reshape(*xh.shape[:3], -1)  # (C, n, w, modes of the transform)
        kept = flat.index_select(-1, index)  # (C, n, w, k)
        r = torch.complex(weight[..., 0], weight[..., 1])  # (C, w_in, w_out, k); weight may be
        # a view of a flat buffer at any offset, which view_as_complex refuses
        # per mode a matrix product: (C, k, n, w_in) @ (C, k, w_in, w_out)
        mixed = torch.matmul(kept.permute(0, 3, 1, 2), r.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        out = flat.new_zeros(*flat.shape[:2], r.shape[2], flat.shape[-1])
        out = out.index_copy(-1, index, mixed)
        return torch.fft.irfftn(out.reshape(*out.shape[:3], *xh.shape[3:]), s=size, dim=dims,
                                norm="ortho")


def _grid_shape(y: np.ndarray) -> tuple[int, ...]:
    """Points per axis of a row-major grid y (P, d), read in the float32 a forward pass
    gets: distinct coordinates per axis at 1e-4 of the axis's span."""
    span = np.ptp(y, axis=0)
    return tuple(len(np.unique(np.round((y[:, j] - y[:, j].min()) / max(span[j], 1e-30) * 1e4)))
                 for j in range(y.shape[1]))


def _pointwise(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``W x + b`` over the channel axis 2 of x (C or 1, n, i, *grid); W (C, o, i), b (C, o)."""
    shape = x.shape
    flat = x.reshape(shape[0], shape[1], shape[2], -1)  # (C, n, i, L)
    out = torch.matmul(weight.unsqueeze(1), flat) + bias[:, None, :, None]
    return out.reshape(out.shape[0], shape[1], weight.shape[1], *shape[3:])
