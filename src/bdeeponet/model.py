"""DeepONet (Lu et al. 2021) in the aligned form, as a plain ``nn.Module``.

``G(u)(y) = s_shift + s_scale (<b((u - u_shift) / u_scale), t(φ(y))> + bias)``: the branch
net maps the standardised sensor values u (n, m) to coefficients b (n, q), the trunk net
maps the features φ(y) of the query points y (P, d) to basis values t (P, q), and the output
for every function at every point is ``s_shift + s_scale (B @ T^T + bias)`` (n, P). The
branch input is never replicated per query point (docs/design.md: aligned data). The
standardisation constants live in :class:`ModelConfig` (see :func:`standardisation`), so a
saved model predicts in the data's own units. φ replaces each periodic coordinate by its
Fourier features, so the model is exactly periodic in it, and appends Fourier features of
the coordinates named in ``features`` (:func:`fourier_features`); it is the identity
without either. The branch is an MLP, or a convolutional net (:func:`conv_branch`) for
inputs on a grid.

Samplers take thousands of steps on a net this small, so the step is dominated by fixed
per-operation costs and by the trunk's activations on P points. Two things keep it fast:
:meth:`DeepONet.forward_backward` computes the gradient of a loss of the output by hand
(the chain rule of an MLP, no autograd graph), and ``tanh`` is evaluated as
``2 sigmoid(2x) - 1``, which PyTorch's CPU kernels compute about 3x faster than ``tanh``
(absolute difference below 2e-7 in float32).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


def fast_tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x)`` as ``2 sigmoid(2x) - 1`` (differentiable, also under torch.func)."""
    if torch.is_grad_enabled() and x.requires_grad:
        return torch.sigmoid(x * 2) * 2 - 1
    return torch.sigmoid(x * 2).mul_(2).sub_(1)


class Tanh(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_tanh(x)


ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


def _activation_grad(name: str, dh: torch.Tensor, z: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``dL/dz`` from ``dL/dh`` for ``h = act(z)``."""
    if name == "tanh":
        return torch.addcmul(dh, dh * h, h, value=-1)
    if name == "relu":
        return dh * (h > 0)
    if name == "silu":
        sig = torch.sigmoid(z)
        return dh * sig * (1 + z * (1 - sig))
    if name == "gelu":  # exact (erf) GELU: Φ(z) + z φ(z)
        cdf = 0.5 * (1 + torch.erf(z * 0.5**0.5))
        return dh * (cdf + z * torch.exp(-0.5 * z * z) * (2 * torch.pi) ** -0.5)
    raise ValueError(f"no gradient rule for activation '{name}'")


class Dropout(nn.Module):
    """Inverted dropout whose masks come from ``self.generator`` (a ``torch.Generator``).

    ``nn.Dropout`` draws from torch's global RNG; MC-dropout bands must be reproducible
    from an explicit seed, so the caller sets ``generator`` (see :func:`set_dropout_generator`).
    ``shared``: one mask for every function (and query point) of a forward pass, so that a
    pass is one thinned network (Gal 2016) and a function's prediction does not depend on
    which functions share its batch; training draws a mask per row. ``group``: the rows of
    one function (a conv layer's locations, ``(n·L, c)``): a shared mask is drawn for L rows
    and repeated for each function, so each unit keeps its own mask as in training.
    """

    def __init__(self, p: float, group: int = 1):
        super().__init__()
        self.p, self.group = p, group
        self.generator: torch.Generator | None = None
        self.shared = False

    def mask(self, x: torch.Tensor) -> torch.Tensor | None:
        """A fresh scaled mask (keep / (1 - p)) shaped like ``x`` (one function's rows of it,
        repeated, when ``shared``), or None when inactive."""
        if not self.training or self.p == 0:
            return None
        shape = (*([1] * (x.dim() - 2)), self.group, x.shape[-1]) if self.shared else x.shape
        keep = torch.rand(shape, generator=self.generator, dtype=x.dtype, device=x.device) >= self.p
        mask = keep.to(x.dtype) / (1 - self.p)
        if self.shared and self.group > 1:
            mask = mask.repeat(*([1] * (x.dim() - 2)), x.shape[-2] // self.group, 1)
        return mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = self.mask(x)
        return x if mask is None else x * mask


def set_dropout_generator(model: nn.Module, generator: torch.Generator,
                          shared: bool = False) -> None:
    for mod in model.modules():
        if isinstance(mod, Dropout):
            mod.generator, mod.shared = generator, shared


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a DeepONet; everything needed to rebuild it from a checkpoint.

    ``u_shift, u_scale, s_shift, s_scale``: the model computes
    ``s_shift + s_scale (branch((u - u_shift) / u_scale) @ trunk(φ(y))^T + bias)``
    (defaults: no standardisation). ``periodic``: ``(j, period)`` pairs, the columns of y in
    which the model is periodic; φ replaces each by ``periodic_harmonics`` cos/sin pairs.
    ``y_shift, y_scale``: one per coordinate of y (none: the identity); φ passes the
    non-periodic ones on as ``(y_j - y_shift_j) / y_scale_j``.
    """

    n_sensors: int
    dim_y: int
    width: int = 64
    depth: int = 2  # hidden layers of each net
    latent: int = 64  # q, the number of basis functions
    activation: str = "tanh"
    dropout: float = 0.0  # only the Adam + MC-dropout baseline uses it
    u_shift: float = 0.0
    u_scale: float = 1.0
    s_shift: float = 0.0
    s_scale: float = 1.0
    periodic: tuple = ()
    periodic_harmonics: int = 4
    features: tuple = ()  # (j, period): non-periodic columns that also get Fourier features
    feature_harmonics: int = 8
    branch_grid: tuple = ()  # (W,) or (H, W): a convolutional branch over that grid
    channels: int = 16  # conv branch: channels of its first layer (doubling, at most 4x)
    fixed_trunk: bool = False  # the trunk is given: y's last latent + 1 columns (mean, basis)
    y_shift: tuple = ()
    y_scale: tuple = ()

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation '{self.activation}'; choose one of: {', '.join(ACTIVATIONS)}"
            )
        grid = tuple(int(g) for g in self.branch_grid)
        if len(grid) > 2 or any(g < 1 for g in grid) or (grid and math.prod(grid) != self.n_sensors):
            raise ValueError(f"branch_grid must be (W,) or (H, W) with H W = n_sensors "
                             f"({self.n_sensors}), got {self.branch_grid!r}")
        object.__setattr__(self, "branch_grid", grid)
        for name in ("n_sensors", "dim_y", "width", "depth", "latent", "periodic_harmonics",
                     "channels", "feature_harmonics"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        for name in ("u_shift", "u_scale", "s_shift", "s_scale"):
            value = getattr(self, name)
            positive = name.endswith("scale")
            if not _is_finite_real(value) or (positive and value <= 0):
                raise ValueError(
                    f"{name} must be a finite number{' > 0' if positive else ''}, got {value!r}"
                )
            object.__setattr__(self, name, float(value))
        for name in ("y_shift", "y_scale"):
            values = tuple(getattr(self, name))
            positive = name == "y_scale"
            if (len(values) > self.dim_y or len(values) != len(tuple(self.y_shift))
                    or not all(_is_finite_real(v) and (v > 0 or not positive) for v in values)):
                raise ValueError(f"{name} must hold one finite number{' > 0' if positive else ''}"
                                 f" per coordinate of y, got {getattr(self, name)!r}")
            object.__setattr__(self, name, tuple(float(v) for v in values))
        # JSON (config.json, checkpoints) turns the pairs into lists: store one canonical form.
        object.__setattr__(self, "periodic", _periodic_pairs(self.periodic, self.dim_y))
        object.__setattr__(self, "features", _periodic_pairs(self.features, self.dim_y, "features"))
        if {j for j, _ in self.features} & {j for j, _ in self.periodic}:
            raise ValueError("a periodic coordinate gets its Fourier features already: "
                             "features must name non-periodic columns")
        if self.fixed_trunk and (self.dim_y < self.latent + 2 or self.periodic or self.features):
            raise ValueError("a fixed trunk reads its mean and basis from the last latent + 1 "
                             "columns of y, after the coordinates, and takes no Fourier features")

    @property
    def trunk_in_features(self) -> int:
        """Width of φ(y): the non-periodic columns, 2 K per periodic column and 2 K' per
        column in ``features``."""
        n = len(self.periodic)
        return (self.dim_y - n + 2 * self.periodic_harmonics * n
                + 2 * self.feature_harmonics * len(self.features))

    def to_dict(self) -> dict:
        return asdict(self)


def _is_finite_real(value) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value))


def _periodic_pairs(value, dim_y: int, what: str = "periodic") -> tuple[tuple[int, float], ...]:
    """``value`` as a tuple of ``(int j, float period)``; ValueError naming a bad entry."""
    try:
        pairs = [tuple(p) for p in value]
    except TypeError:
        pairs = None
    if pairs is None or any(len(p) != 2 for p in pairs):
        raise ValueError(f"{what} must be a sequence of (coordinate, period) pairs, got {value!r}")
    out: dict[int, float] = {}
    for j, period in pairs:
        if isinstance(j, bool) or not isinstance(j, numbers.Integral):
            raise ValueError(f"{what} coordinate {j!r} must be an integer column index of y")
        if not 0 <= j < dim_y:
            raise ValueError(f"{what} coordinate {j} does not exist: y has {dim_y} columns")
        if j in out:
            raise ValueError(f"{what} coordinate {j} is declared twice")
        if not _is_finite_real(period) or period <= 0:
            raise ValueError(
                f"{what} coordinate {j} has period {period!r}; it must be a finite number > 0"
            )
        out[int(j)] = float(period)
    return tuple(out.items())


def standardisation(u_train, s_train) -> dict[str, float]:
    """``{u_shift, u_scale, s_shift, s_scale}`` for :class:`ModelConfig`: the mean and the
    (population) standard deviation of all entries of ``u_train`` and of ``s_train``.

    A standard deviation that is zero up to rounding (constant data: ``std <= 1e-12 |mean|``)
    becomes 1.0, so the model divides by something.
    """
    out = {}
    for prefix, a in (("u", u_train), ("s", s_train)):
        a = np.asarray(a, dtype=np.float64)
        mean, std = float(a.mean()), float(a.std())
        out[f"{prefix}_shift"] = mean
        out[f"{prefix}_scale"] = std if std > 1e-12 * abs(mean) else 1.0
    return out


def fourier_features(y: torch.Tensor, periodic, harmonics: int, features=(),
                     feature_harmonics: int = 0, shift=(), scale=()) -> torch.Tensor:
    """φ(y) (P, d - n + 2 K n) for y (P, d): the non-periodic columns as they are (column
    j < len(shift) as ``(y_j - shift_j) / scale_j``), then for each ``(j, L)`` in
    ``periodic`` the columns ``cos(2π k y_j / L), sin(2π k y_j / L)``, k = 1..K
    (``K = harmonics``), interleaved; then the same for each ``(j, L)`` in ``features`` with
    ``K = feature_harmonics`` (a non-periodic column, also kept).

    The phase is computed in float64 whatever the dtype of y (a float32 phase carries a
    rounding error that grows with |K y_j / L|); the result has y's dtype.
    """
    cols = {j for j, _ in periodic}
    kept = y
    if shift:  # the phases below read y as it is
        y0 = torch.as_tensor(shift, dtype=torch.float64, device=y.device)
        dy = torch.as_tensor(scale, dtype=torch.float64, device=y.device)
        head = ((y[:, : len(shift)].double() - y0) / dy).to(y.dtype)
        kept = torch.cat([head, y[:, len(shift):]], dim=1)
    parts = [kept[:, [j for j in range(y.shape[1]) if j not in cols]]]
    for pairs, count in ((periodic, harmonics), (features, feature_harmonics)):
        k = torch.arange(1, count + 1, dtype=torch.float64, device=y.device)
        for j, period in pairs:
            phase = y[:, j, None].double() * (2 * math.pi / period) * k
            parts.append(torch.stack([phase.cos(), phase.sin()], dim=2).flatten(1).to(y.dtype))
    return torch.cat(parts, dim=1)


def mlp(sizes: list[int], activation: str, dropout: float, last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_activation:
            layers.append(ACTIVATIONS[activation]())
            if dropout > 0:
                layers.append(Dropout(dropout))
    return nn.Sequential(*layers)


class Patches(nn.Module):
    """The patches a convolution reads, so that the convolution is an ``nn.Linear`` on them.

    A map of ``c`` channels on an ``H x W`` grid is held channels last with its locations as
    rows: ``(..., n H W, c)`` (or ``(n, H W c)``, the same memory). ``forward`` returns the
    ``kernel`` patches at ``stride`` with zero ``padding``, ``(..., n L, c kh kw)`` for the
    L output locations. A following ``nn.Linear(c kh kw, c')`` is then the convolution, and
    everything that knows linear layers (the Kronecker metric, the fan-in prior) knows it
    too: its Kronecker factors are those of Grosse & Martens' KFC (2016), the locations
    taken as independent rows. The hand-written gradient runs the pair as one convolution
    (:meth:`conv`, :meth:`conv_backward`): the same numbers up to rounding, without the
    patches in memory (docs/speed.md).
    """

    def __init__(self, grid: tuple[int, int], channels: int, kernel: tuple[int, int],
                 stride: tuple[int, int], padding: tuple[int, int]):
        super().__init__()
        self.grid, self.channels = grid, channels
        self.kernel, self.stride, self.padding = kernel, stride, padding
        self.out_grid = tuple((g + 2 * p - k) // s + 1
                              for g, k, s, p in zip(grid, kernel, stride, padding, strict=True))
        self.out_features = channels * kernel[0] * kernel[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-2]
        cols = F.unfold(self._maps(x), self.kernel, stride=self.stride, padding=self.padding)
        n = cols.shape[0] // max(1, math.prod(lead))  # (B, c kh kw, L)
        return cols.mT.reshape(*lead, n * cols.shape[2], self.out_features)

    def conv(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``nn.Linear(weight, bias)`` of ``forward(x)``, ``(..., n L, out)``, computed as
        the convolution it is."""
        out = F.conv2d(self._maps(x), self._kernel(weight), bias, self.stride, self.padding)
        return out.permute(0, 2, 3, 1).reshape(*x.shape[:-2], -1, out.shape[1])

    def conv_backward(self, dout: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                      input_grad: bool) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(dL/dx or None, dL/dweight)`` of :meth:`conv` from ``dL/d output`` (``dout``,
        shaped like the output; ``x`` and ``weight`` of one set of parameters)."""
        grid_out = dout.reshape(-1, *self.out_grid, dout.shape[-1]).permute(0, 3, 1, 2)
        dx, dw, _ = torch.ops.aten.convolution_backward(
            grid_out, self._maps(x), self._kernel(weight), None, self.stride, self.padding,
            (1, 1), False, (0, 0), 1, (input_grad, True, False))
        return (None if dx is None else dx.permute(0, 2, 3, 1).reshape(x.shape),
                dw.reshape(weight.shape))

    def _maps(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., n H W, c)`` as ``(B, c, H, W)`` maps (channels-last memory: a view)."""
        (h, w), c = self.grid, self.channels
        return x.reshape(-1, h, w, c).permute(0, 3, 1, 2)

    def _kernel(self, weight: torch.Tensor) -> torch.Tensor:
        """A linear layer's ``(out, c kh kw)`` weight as the kernel ``(out, c, kh, kw)``
        (unfold orders a patch channel first)."""
        return weight.view(weight.shape[0], self.channels, *self.kernel)


class Columns(nn.Module):
    """``(P, d + q) -> (P, q)``: the last q columns (a fixed trunk's basis at each point)."""

    def __init__(self, count: int):
        super().__init__()
        self.count = count

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return y[..., -self.count:]


class Flatten(nn.Module):
    """``(..., n L, c) -> (..., n, L c)``: a channels-last map of L locations as one vector
    per function (after a conv branch's last convolution)."""

    def __init__(self, locations: int, channels: int):
        super().__init__()
        self.locations, self.channels = locations, channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(*x.shape[:-2], -1, self.locations * self.channels)

    def backward(self, dh: torch.Tensor) -> torch.Tensor:
        return dh.reshape(*dh.shape[:-2], -1, self.channels)


def conv_branch(grid: tuple[int, ...], channels: int, width: int, latent: int, activation: str,
                dropout: float) -> nn.Sequential:
    """A convolutional branch for inputs on a grid, ``(W,)`` or ``(H, W)`` (row major).

    Convolutions padded by one halve the grid until its longer side is at most 4: 3 (1-D)
    or 3 x 3 (2-D) points at stride 2, except that the first one steps by
    ``s = ceil(side / 32)`` (over ``max(3, s)`` points) on a side longer than 64, so that
    a fine grid costs about what a 32-point one does (85 x 85 -> 29 x 29). The channels
    start at ``channels`` and double per layer up to 4x. The last map, flattened, goes
    through one hidden layer of ``width`` units to the ``latent`` coefficients. Each
    convolution is :class:`Patches` and an ``nn.Linear``.
    """
    size = (1, grid[0]) if len(grid) == 1 else tuple(grid)
    layers: list[nn.Module] = []
    c_in, i = 1, 0
    while max(size) > 4:
        c_out = channels * 2 ** min(i, 2)
        stride = tuple(1 if g == 1 else max(2, -(-g // 32)) if i == 0 else 2 for g in size)
        kernel = tuple(1 if g == 1 else max(3, s) for g, s in zip(size, stride, strict=True))
        padding = tuple(0 if g == 1 else 1 for g in size)
        patches = Patches(size, c_in, kernel, stride, padding)
        layers += [patches, nn.Linear(patches.out_features, c_out), ACTIVATIONS[activation]()]
        if dropout > 0:
            layers.append(Dropout(dropout, group=math.prod(patches.out_grid)))
        size, c_in, i = patches.out_grid, c_out, i + 1
    layers.append(Flatten(size[0] * size[1], c_in))
    return nn.Sequential(*layers, *mlp([size[0] * size[1] * c_in, width, latent], activation,
                                       dropout, False))


class DeepONet(nn.Module):
    """Branch/trunk DeepONet; ``forward(u (n, m), y (P, d)) -> (n, P)``.

    Parameter names start with ``branch.``, ``trunk.`` or are ``bias``, which is how the
    samplers split the model into the two groups of m-reSGLD (paper Section 4).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        hidden = [config.width] * config.depth
        if config.branch_grid:
            self.branch = conv_branch(config.branch_grid, config.channels, config.width,
                                      config.latent, config.activation, config.dropout)
        else:
            self.branch = mlp([config.n_sensors, *hidden, config.latent], config.activation,
                              config.dropout, False)
        if config.fixed_trunk:  # t(y): the basis's values, given beside y (no parameters)
            self.trunk = nn.Sequential(Columns(config.latent))
        else:  # the last layer is activated: its outputs are the basis functions t(y)
            self.trunk = mlp(
                [config.trunk_in_features, *hidden, config.latent], config.activation, 0.0, True
            )
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        c = self.config
        z = self.branch(self.branch_input(u)) @ self.trunk(self.trunk_input(y)).T + self.bias
        if c.fixed_trunk:
            z = z + self.offset(y)
        return c.s_shift + c.s_scale * z

    def offset(self, y: torch.Tensor) -> torch.Tensor:
        """A fixed trunk's mean at each point (P,), added to B T^T: y's column before the
        basis."""
        return y[:, -self.config.latent - 1]

    def branch_input(self, u: torch.Tensor) -> torch.Tensor:
        """``(u - u_shift) / u_scale`` (``u`` itself with the default constants)."""
        c = self.config
        if c.u_shift == 0.0 and c.u_scale == 1.0:
            return u
        return (u - c.u_shift) / c.u_scale

    def trunk_input(self, y: torch.Tensor) -> torch.Tensor:
        """φ(y) (:func:`fourier_features`); ``y`` itself without periodic coordinates and
        scaling.

        φ is a constant of the query points (no gradient flows to y through it). The
        features of the last ``y`` object are kept: samplers pass the same query points at
        every step, which is bound by per-operation costs, and φ is a dozen operations.
        """
        c = self.config
        scaled = any(v != 0 for v in c.y_shift) or any(v != 1 for v in c.y_scale)
        if not c.periodic and not c.features and not scaled:
            return y
        cached = self.__dict__.get("_feature_cache")
        # Keyed on y itself (holding it stops its id being reused) and on its version
        # counter, which in-place writes to y advance.
        if cached is None or cached[0] is not y or cached[1] != y._version:
            with torch.no_grad():
                cached = (y, y._version, fourier_features(
                    y, c.periodic, c.periodic_harmonics, c.features, c.feature_harmonics,
                    c.y_shift if scaled else (), c.y_scale if scaled else ()))
            self.__dict__["_feature_cache"] = cached
        return cached[2]

    def functional_forward(self, params, u: torch.Tensor, y: torch.Tensor,
                           memo: dict | None = None) -> torch.Tensor:
        """``forward`` with the tensors of ``params`` (names as ``named_parameters``), without
        ``functional_call``'s re-parametrisation of the module (differentiable). ``memo``: a
        dict the caller keeps between calls, where a frozen trunk's output is kept
        (:meth:`_forward`). Parameters of a batch of one chain (tensors (1, ...)) on inputs
        (n, m) give (1, n, P) by the arithmetic of one set of parameters."""
        if params["bias"].shape == (1,) and u.dim() == 2:
            return self.functional_forward({n: p[0] for n, p in params.items()}, u, y,
                                           memo).unsqueeze(0)
        pred, _ = self._forward(params, u, y, need=(), memo=memo)
        return pred

    def forward_backward(
        self, params, u: torch.Tensor, y: torch.Tensor, names: list[str],
        partial: tuple[list[str], int] | None = None, memo: dict | None = None,
    ) -> tuple[torch.Tensor, Callable[[torch.Tensor], dict[str, torch.Tensor]]]:
        """The output (n, P) and a function that maps ``dL/d output`` to ``dL/dθ`` for the
        parameters ``names`` only, by the chain rule written out (no autograd graph).

        With ``z = B @ T^T + bias`` and output ``s_shift + s_scale z``, ``dL/dz = s_scale
        dL/d output``; B's tape starts at the standardised u, T's at φ(y).

        A net none of whose parameters is in ``names`` keeps no activations and gets no
        backward pass: that is m-reSGLD's saving on the hot particle. ``partial = (some,
        r)`` (C chains only): the tensors ``some`` get their gradient for the first r chains
        only, and the nets they make up are walked back over those rows only (m-reSGLD's
        levels in one batch: the cold level trains both nets, the hot ones one). ``memo``: as
        :meth:`functional_forward`'s.
        """
        need = tuple(net for net in ("branch", "trunk")
                     if any(n.startswith(net + ".") for n in names))
        rows = self._partial_rows(params, partial)
        with torch.no_grad():
            pred, tapes = self._forward(params, u, y, need, rows.get("trunk"), memo)

        s_scale = self.config.s_scale

        def backward(dout: torch.Tensor) -> dict[str, torch.Tensor]:
            with torch.no_grad():
                if s_scale != 1.0:
                    dout = dout * s_scale  # not in place: dout is the caller's tensor
                grads = {"bias": _first(dout, rows.get("bias")).sum((-2, -1))}
                (b, b_tape), (t, t_tape) = tapes["branch"], tapes["trunk"]
                if "branch" in need:
                    r = rows.get("branch")
                    self._backprop("branch", b_tape, _first(dout, r) @ _first(t, r), params, grads, r)
                if "trunk" in need:
                    r = rows.get("trunk")
                    self._backprop("trunk", t_tape, _first(dout, r).mT @ _first(b, r), params, grads, r)
            return {n: grads[n] for n in names}

        return pred, backward

    def net_parameters(self) -> dict[str, frozenset[str]]:
        """The parameter names of each net, ``{"branch": ..., "trunk": ...}`` (the output
        bias belongs to neither)."""
        self._plan()
        return {net: frozenset(names) for net, names in self._net_names.items()}

    def split_net(self, names) -> str | None:
        """The first net of which ``names`` take some tensors but not all; None where each
        net is taken whole or not at all."""
        some = set(names)
        return next((net for net, members in self.net_parameters().items()
                     if members & some and not members <= some), None)

    def _partial_rows(self, params, partial) -> dict[str, int]:
        """``{net or "bias": r}`` for the nets (and the output bias) whose tensors are all in
        ``partial = (names, r)``; ValueError if ``partial`` splits a net or the parameters
        hold one chain."""
        if partial is None:
            return {}
        some, r = set(partial[0]), partial[1]
        if params["bias"].dim() == 0:
            raise ValueError("partial gradients need the parameters of several chains")
        split = self.split_net(some)
        if split is not None:
            raise ValueError(f"partial gradients must take the whole {split} net or none of it")
        out = {net: r for net in ("branch", "trunk") if any(n.startswith(net + ".") for n in some)}
        if "bias" in some:
            out["bias"] = r
        return out

    def _forward(self, params, u, y, need, trunk_rows: int | None = None,
                 memo: dict | None = None):
        """Output and, per net, ``(output, tape)``: the tape (inputs of each step) is kept
        for the nets in ``need``; with ``trunk_rows`` r (C chains), the trunk's tape holds
        its first r chains only.

        When the trunk is not needed and none of its tensors requires grad (m-reSGLD's hot
        particle on a branch-only step) and the caller passes a ``memo``, its output is
        reused from the previous call with that memo if that call had the same ``y`` object
        (not written in place since) and trunk tensors of exactly equal values (compared
        element by element, a few microseconds): a frozen trunk then costs neither its
        backward nor its forward. The same holds for the chains after the first
        ``trunk_rows`` (m-reSGLD's hot levels in one batch with the cold one, on a
        branch-only step).
        """
        plan = self._plan()
        b_tape = [] if "branch" in need else None
        b = self._run(plan["branch"], params, self.branch_input(u), b_tape)
        trunk = {n: params[n] for n in self._net_names["trunk"]}
        if trunk_rows is not None:
            t_tape = []
            first = self._run(plan["trunk"], {n: p[:trunk_rows] for n, p in trunk.items()},
                              self.trunk_input(y), t_tape)
            rest = {n: p[trunk_rows:] for n, p in trunk.items()}
            t = torch.cat([first, self._frozen_trunk(rest, y, memo)])
        elif "trunk" in need or any(t.requires_grad for t in trunk.values()):  # (no dropout)
            t_tape = [] if "trunk" in need else None
            t = self._run(plan["trunk"], params, self.trunk_input(y), t_tape)
        else:
            t_tape = None
            t = self._frozen_trunk(trunk, y, memo)
        c, bias = self.config, params["bias"]
        if c.s_shift != 0.0 or c.s_scale != 1.0:  # skipped by default: a step is ~op-bound
            bias = c.s_shift + c.s_scale * bias
        if bias.dim() == 1:  # C chains: (C, n, q) @ (C, q, P)
            if t.dim() == 2:  # a fixed trunk: one basis for every chain
                t = t.expand(b.shape[0], *t.shape)
            bias = bias[:, None, None]
        if c.fixed_trunk:  # its mean at each point
            bias = bias + c.s_scale * self.offset(y)
        if bias.dim() == 3:
            pred = torch.baddbmm(bias, b, t.mT, alpha=c.s_scale)
        else:
            pred = torch.addmm(bias, b, t.t(), alpha=c.s_scale)  # s_shift + s_scale (B T^T + bias)
        return pred, {"branch": (b, b_tape), "trunk": (t, t_tape)}

    def _frozen_trunk(self, trunk: dict[str, torch.Tensor], y: torch.Tensor,
                      memo: dict | None) -> torch.Tensor:
        """The trunk's output for the tensors ``trunk``, kept in ``memo`` from the previous
        call when that call had the same ``y`` (not written since) and equal tensors (see
        :meth:`_forward`)."""
        if memo is None:
            with torch.no_grad():
                return self._run(self._plan()["trunk"], trunk, self.trunk_input(y), None)
        cached = memo.get("trunk")
        hit = (cached is not None and cached[0] is y and cached[1] == y._version
               and all(a.shape == b.shape and torch.equal(a, b)
                       for a, b in zip(cached[2], trunk.values(), strict=True)))
        if not hit:
            with torch.no_grad():
                cached = (y, y._version, [p.detach().clone() for p in trunk.values()],
                          self._run(self._plan()["trunk"], trunk, self.trunk_input(y), None))
            memo["trunk"] = cached
        return cached[3]

    def _plan(self):
        """Per net, its steps: ``("linear", weight name, bias name)``, ``("conv", (weight
        name, bias name), patches)`` (a :class:`Patches` and the linear layer after it),
        ``("act", name, fn)``, ``("shape", module, None)`` (:class:`Flatten`,
        :class:`Columns`) or ``("dropout", module, None)``."""
        plan = self.__dict__.get("_plan_cache")
        if plan is None:
            plan = {}
            act = self.config.activation
            for net in ("branch", "trunk"):
                steps, mods = [], list(getattr(self, net))
                for i, mod in enumerate(mods):
                    names = (f"{net}.{i}.weight", f"{net}.{i}.bias")
                    if isinstance(mod, nn.Linear):
                        if steps and steps[-1][0] == "patches":
                            steps[-1] = ("conv", names, steps[-1][1])
                        else:
                            steps.append(("linear", *names))
                    elif isinstance(mod, Patches):
                        steps.append(("patches", mod, None))  # joined to the next layer
                    elif isinstance(mod, (Flatten, Columns)):
                        steps.append(("shape", mod, None))
                    elif isinstance(mod, Dropout):
                        steps.append(("dropout", mod, None))
                    else:
                        steps.append(("act", act, mod.forward))
                if any(step[0] == "patches" for step in steps):
                    raise ValueError(f"the {net} net has patches without a linear layer after them")
                plan[net] = steps
            self.__dict__["_plan_cache"] = plan
            self.__dict__["_net_names"] = {  # in the order of the net's steps
                net: tuple(n for kind, a, b in steps if kind in ("linear", "conv")
                           for n in ((a, b) if kind == "linear" else a))
                for net, steps in plan.items()
            }
            # the backward walk stops at each net's first layer with parameters (nothing
            # before it has any); a fixed trunk has none
            self.__dict__["_first_layer"] = {
                net: next((i for i, step in enumerate(steps) if step[0] in ("linear", "conv")),
                          None)
                for net, steps in plan.items()
            }
        return plan

    @staticmethod
    def _run(steps, params, x: torch.Tensor, tape: list | None) -> torch.Tensor:
        for kind, a, b in steps:
            if kind == "linear":
                w = params[a]
                if w.dim() == 2:
                    entry, x = x, F.linear(x, w, params[b])
                else:  # C chains: w (C, out, in); x (C, rows, in) or shared (rows, in)
                    entry, x = x, torch.matmul(x, w.mT).add_(params[b].unsqueeze(-2))
            elif kind == "conv":
                w, bias = params[a[0]], params[a[1]]
                if w.dim() == 2:
                    entry, x = x, b.conv(x, w, bias)
                else:  # C chains: each its own convolution of its rows (or of a shared x)
                    entry, x = x, torch.stack([b.conv(x if x.dim() == 2 else x[k], w[k], bias[k])
                                               for k in range(w.shape[0])])
            elif kind == "act":
                entry, x = x, b(x)
                entry = (entry, x)
            elif kind == "shape":
                entry, x = None, a(x)
            else:
                entry = a.mask(x)
                if entry is not None:
                    x = x * entry
            if tape is not None:
                tape.append(entry)
        return x

    def _backprop(self, net: str, tape: list, dh: torch.Tensor, params, grads: dict,
                  rows: int | None = None) -> None:
        """Walk ``net`` backwards from ``dh = dL/d(net output)``, filling ``grads``; with
        ``rows`` (C chains), over the first ``rows`` chains only (``dh`` already cut)."""
        steps = self._plan()[net]
        first = self._first_layer[net]
        for i in range(len(steps) - 1, first - 1, -1):
            kind, a, b = steps[i]
            entry = tape[i]
            if kind == "act":
                dh = _activation_grad(a, dh, *(_first(x, rows) for x in entry))
            elif kind == "dropout":
                if entry is not None:
                    dh = dh * _first(entry, rows)
            elif kind == "shape":
                dh = a.backward(dh)
            elif kind == "conv":
                grads[a[1]] = dh.sum(-2)
                w, x = _first(params[a[0]], rows), _first(entry, rows)
                if w.dim() == 2:
                    dx, grads[a[0]] = b.conv_backward(dh, x, w, i > first)
                else:
                    parts = [b.conv_backward(dh[k], x if x.dim() == 2 else x[k], w[k], i > first)
                             for k in range(w.shape[0])]
                    grads[a[0]] = torch.stack([dw for _, dw in parts])
                    dx = torch.stack([d for d, _ in parts]) if i > first else None
                if i > first:
                    dh = dx
            else:
                # (C chains: (C, out, in), also from a shared input)
                grads[a] = dh.mT @ _first(entry, rows)
                grads[b] = dh.sum(-2)
                if i > first:  # the net input's gradient is never needed
                    dh = dh @ _first(params[a], rows)


def _first(x: torch.Tensor, rows: int | None) -> torch.Tensor:
    """The first ``rows`` chains of a batched tensor (3-D: chains first; a 2-D one is
    shared by all chains and kept whole); ``x`` itself for ``rows`` None."""
    return x if rows is None or x.dim() < 3 else x[:rows]


def parameter_groups(model: nn.Module) -> dict[str, list[str]]:
    """Names of the branch and trunk parameters (the bias goes with the branch)."""
    names = [n for n, _ in model.named_parameters()]
    trunk = [n for n in names if n.startswith("trunk.")]
    return {"branch": [n for n in names if n not in trunk], "trunk": trunk}
