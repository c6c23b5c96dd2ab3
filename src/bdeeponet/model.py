"""DeepONet (Lu et al. 2021) in the aligned form, as a plain ``nn.Module``.

``G(u)(y) = <b(u), t(y)> + bias``: the branch net maps the sensor values u (n, m) to
coefficients b (n, q), the trunk net maps query points y (P, d) to basis values t (P, q),
and the output for every function at every point is ``B @ T^T + bias`` (n, P). The branch
input is never replicated per query point (DESIGN.md: aligned data).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


class Dropout(nn.Module):
    """Inverted dropout whose masks come from ``self.generator`` (a ``torch.Generator``).

    ``nn.Dropout`` draws from torch's global RNG; MC-dropout bands must be reproducible
    from an explicit seed, so the caller sets ``generator`` (see :func:`set_dropout_generator`).
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        keep = torch.rand(x.shape, generator=self.generator, dtype=x.dtype) >= self.p
        return x * keep / (1 - self.p)


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
        ``functional_call``'s re-parametrisation of the module.

        When no trunk tensor requires grad (m-reSGLD's hot particle on a branch-only step),
        the trunk output is reused from the previous call with the very same, unmodified
        tensors (same objects, same in-place version counters) and the same ``y``: a frozen
        trunk then costs neither its backward nor its forward.
        """
        branch_plan, trunk_plan = self._plan()
        b = self._run(branch_plan, params, u)
        trunk = [params[n] for n in self._trunk_names]
        if any(t.requires_grad for t in trunk):  # (the trunk has no dropout)
            t = self._run(trunk_plan, params, y)
        else:
            # The cache holds the tensors themselves, so their ids cannot be reused meanwhile.
            tensors, versions = (y, *trunk), tuple(p._version for p in (y, *trunk))
            cached = self.__dict__.get("_trunk_cache")
            hit = (cached is not None and cached[1] == versions
                   and all(a is b for a, b in zip(cached[0], tensors, strict=True)))
            if not hit:
                cached = (tensors, versions, self._run(trunk_plan, params, y))
                self.__dict__["_trunk_cache"] = cached
            t = cached[2]
        return b @ t.T + params["bias"]

    def _plan(self):
        """Per net, the list of (activation or None, weight name, bias name) steps."""
        plan = self.__dict__.get("_plan_cache")
        if plan is None:
            plan = []
            for net in ("branch", "trunk"):
                steps = []
                for i, mod in enumerate(getattr(self, net)):
                    if isinstance(mod, nn.Linear):
                        steps.append((None, f"{net}.{i}.weight", f"{net}.{i}.bias"))
                    else:
                        steps.append((mod.forward, None, None))
                plan.append(steps)
            self.__dict__["_plan_cache"] = plan
            self.__dict__["_trunk_names"] = [n for _, w, b in plan[1] if w for n in (w, b)]
        return plan

    @staticmethod
    def _run(steps, params, x: torch.Tensor) -> torch.Tensor:
        for fn, w, b in steps:
            x = F.linear(x, params[w], params[b]) if fn is None else fn(x)
        return x


def parameter_groups(model: nn.Module) -> dict[str, list[str]]:
    """Names of the branch and trunk parameters (the bias goes with the branch)."""
    names = [n for n, _ in model.named_parameters()]
    trunk = [n for n in names if n.startswith("trunk.")]
    return {"branch": [n for n in names if n not in trunk], "trunk": trunk}
