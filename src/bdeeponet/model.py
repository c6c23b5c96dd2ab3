"""DeepONet (Lu et al. 2021) in the aligned form, as a plain ``nn.Module``.

``G(u)(y) = <b(u), t(y)> + bias``: the branch net maps the sensor values u (n, m) to
coefficients b (n, q), the trunk net maps query points y (P, d) to basis values t (P, q),
and the output for every function at every point is ``B @ T^T + bias`` (n, P). The branch
input is never replicated per query point (DESIGN.md: aligned data).

Samplers take thousands of steps on a net this small, so the step is dominated by fixed
per-operation costs and by the trunk's activations on P points. Two things keep it fast:
:meth:`DeepONet.forward_backward` computes the gradient of a loss of the output by hand
(the chain rule of an MLP, no autograd graph), and ``tanh`` is evaluated as
``2 sigmoid(2x) - 1``, which PyTorch's CPU kernels compute about 3x faster than ``tanh``
(absolute difference below 2e-7 in float32).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F


def fast_tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x)`` as ``2 sigmoid(2x) - 1`` (differentiable)."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _FastTanh.apply(x)
    return torch.sigmoid(x * 2).mul_(2).sub_(1)


class _FastTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        h = torch.sigmoid(x * 2).mul_(2).sub_(1)
        ctx.save_for_backward(h)
        return h

    @staticmethod
    def backward(ctx, grad):
        (h,) = ctx.saved_tensors
        return torch.addcmul(grad, grad * h, h, value=-1)  # grad (1 - h²)


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
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.generator: torch.Generator | None = None

    def mask(self, x: torch.Tensor) -> torch.Tensor | None:
        """A fresh scaled mask (keep / (1 - p)) shaped like ``x``, or None when inactive."""
        if not self.training or self.p == 0:
            return None
        keep = torch.rand(x.shape, generator=self.generator, dtype=x.dtype) >= self.p
        return keep.to(x.dtype) / (1 - self.p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = self.mask(x)
        return x if mask is None else x * mask


def set_dropout_generator(model: nn.Module, generator: torch.Generator) -> None:
    for mod in model.modules():
        if isinstance(mod, Dropout):
            mod.generator = generator


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a DeepONet; everything needed to rebuild it from a checkpoint."""

    n_sensors: int
    dim_y: int
    width: int = 64
    depth: int = 2  # hidden layers of each net
    latent: int = 64  # q, the number of basis functions
    activation: str = "tanh"
    dropout: float = 0.0  # only the Adam + MC-dropout baseline uses it

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation '{self.activation}'; choose one of: {', '.join(ACTIVATIONS)}"
            )
        for name in ("n_sensors", "dim_y", "width", "depth", "latent"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict:
        return asdict(self)


def mlp(sizes: list[int], activation: str, dropout: float, last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_activation:
            layers.append(ACTIVATIONS[activation]())
            if dropout > 0:
                layers.append(Dropout(dropout))
    return nn.Sequential(*layers)


class DeepONet(nn.Module):
    """Branch/trunk DeepONet; ``forward(u (n, m), y (P, d)) -> (n, P)``.

    Parameter names start with ``branch.``, ``trunk.`` or are ``bias``, which is how the
    samplers split the model into the two groups of m-reSGLD (paper Section 4).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        hidden = [config.width] * config.depth
        self.branch = mlp(
            [config.n_sensors, *hidden, config.latent], config.activation, config.dropout, False
        )
        # The trunk's last layer is activated: its outputs are the basis functions t(y).
        self.trunk = mlp([config.dim_y, *hidden, config.latent], config.activation, 0.0, True)
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.branch(u) @ self.trunk(y).T + self.bias

    def functional_forward(self, params, u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``forward`` with the tensors of ``params`` (names as ``named_parameters``), without
        ``functional_call``'s re-parametrisation of the module (differentiable)."""
        pred, _ = self._forward(params, u, y, need=())
        return pred

    def forward_backward(
        self, params, u: torch.Tensor, y: torch.Tensor, names: list[str]
    ) -> tuple[torch.Tensor, Callable[[torch.Tensor], dict[str, torch.Tensor]]]:
        """The output (n, P) and a function that maps ``dL/d output`` to ``dL/dθ`` for the
        parameters ``names`` only, by the chain rule written out (no autograd graph).

        A net none of whose parameters is in ``names`` keeps no activations and gets no
        backward pass: that is m-reSGLD's saving on the hot particle.
        """
        need = tuple(net for net in ("branch", "trunk")
                     if any(n.startswith(net + ".") for n in names))
        with torch.no_grad():
            pred, tapes = self._forward(params, u, y, need)

        def backward(dout: torch.Tensor) -> dict[str, torch.Tensor]:
            with torch.no_grad():
                grads = {"bias": dout.sum()}
                (b, b_tape), (t, t_tape) = tapes["branch"], tapes["trunk"]
                if "branch" in need:
                    self._backprop("branch", b_tape, dout @ t, params, grads)
                if "trunk" in need:
                    self._backprop("trunk", t_tape, dout.t() @ b, params, grads)
            return {n: grads[n] for n in names}

        return pred, backward

    def _forward(self, params, u, y, need):
        """Output and, per net, ``(output, tape)``: the tape (inputs of each step) is kept
        for the nets in ``need``.

        When the trunk is not needed and none of its tensors requires grad (m-reSGLD's hot
        particle on a branch-only step), its output is reused from the previous call if that
        call had the same ``y`` object and trunk tensors of exactly equal values (compared
        element by element, a few microseconds): a frozen trunk then costs neither its
        backward nor its forward.
        """
        plan = self._plan()
        b_tape = [] if "branch" in need else None
        b = self._run(plan["branch"], params, u, b_tape)
        trunk = [params[n] for n in self._trunk_names]
        if "trunk" in need or any(t.requires_grad for t in trunk):  # (the trunk has no dropout)
            t_tape = [] if "trunk" in need else None
            t = self._run(plan["trunk"], params, y, t_tape)
        else:
            t_tape = None
            cached = self.__dict__.get("_trunk_cache")
            hit = (cached is not None and cached[0] is y
                   and all(torch.equal(a, b) for a, b in zip(cached[1], trunk, strict=True)))
            if not hit:
                with torch.no_grad():
                    cached = (y, [p.detach().clone() for p in trunk],
                              self._run(plan["trunk"], params, y, None))
                self.__dict__["_trunk_cache"] = cached
            t = cached[2]
        pred = torch.addmm(params["bias"], b, t.t())
        return pred, {"branch": (b, b_tape), "trunk": (t, t_tape)}

    def _plan(self):
        """Per net, its steps: ``("linear", weight name, bias name)``, ``("act", name, fn)``
        or ``("dropout", module, None)``."""
        plan = self.__dict__.get("_plan_cache")
        if plan is None:
            plan = {}
            act = self.config.activation
            for net in ("branch", "trunk"):
                steps = []
                for i, mod in enumerate(getattr(self, net)):
                    if isinstance(mod, nn.Linear):
                        steps.append(("linear", f"{net}.{i}.weight", f"{net}.{i}.bias"))
                    elif isinstance(mod, Dropout):
                        steps.append(("dropout", mod, None))
                    else:
                        steps.append(("act", act, mod.forward))
                plan[net] = steps
            self.__dict__["_plan_cache"] = plan
            self.__dict__["_trunk_names"] = [
                n for kind, w, b in plan["trunk"] if kind == "linear" for n in (w, b)
            ]
        return plan

    @staticmethod
    def _run(steps, params, x: torch.Tensor, tape: list | None) -> torch.Tensor:
        for kind, a, b in steps:
            if kind == "linear":
                entry, x = x, F.linear(x, params[a], params[b])
            elif kind == "act":
                entry, x = x, b(x)
                entry = (entry, x)
            else:
                entry = a.mask(x)
                if entry is not None:
                    x = x * entry
            if tape is not None:
                tape.append(entry)
        return x

    def _backprop(self, net: str, tape: list, dh: torch.Tensor, params, grads: dict) -> None:
        """Walk ``net`` backwards from ``dh = dL/d(net output)``, filling ``grads``."""
        steps = self._plan()[net]
        for i in range(len(steps) - 1, -1, -1):
            kind, a, b = steps[i]
            entry = tape[i]
            if kind == "act":
                dh = _activation_grad(a, dh, *entry)
            elif kind == "dropout":
                if entry is not None:
                    dh = dh * entry
            else:
                grads[a] = dh.t() @ entry
                grads[b] = dh.sum(0)
                if i > 0:  # the input's gradient is never needed
                    dh = dh @ params[a]


def parameter_groups(model: nn.Module) -> dict[str, list[str]]:
    """Names of the branch and trunk parameters (the bias goes with the branch)."""
    names = [n for n, _ in model.named_parameters()]
    trunk = [n for n in names if n.startswith("trunk.")]
    return {"branch": [n for n in names if n not in trunk], "trunk": trunk}
