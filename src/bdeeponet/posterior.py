"""Posterior samples and the predictive mean, standard deviation and band (paper Section 3).

SG-MCMC runs keep the cold particle every ``thin`` steps after burn-in: ``M`` parameter
vectors. Adam keeps one parameter vector and draws ``M`` dropout masks at prediction time.
Either way a prediction is ``M`` trajectories ``G_θk(u)(y)`` reduced to their mean and
standard deviation, and the band is ``mean ± z std`` (z = 2: the paper's 95% band).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.func import functional_call

from .energy import Params
from .model import DeepONet, ModelConfig, set_dropout_generator


def flatten(params: Params, batched: bool = False) -> torch.Tensor:
    """One vector (p,) of ``params``; ``batched``: C chains' tensors (C, ...) to (C, p)."""
    if batched:
        first = next(iter(params.values()))
        return torch.cat([p.detach().reshape(first.shape[0], -1) for p in params.values()], 1)
    return torch.cat([p.detach().reshape(-1) for p in params.values()])


def unflatten(vec: torch.Tensor, template: Params) -> Params:
    out, i = {}, 0
    for name, p in template.items():
        out[name] = vec[i : i + p.numel()].view_as(p)
        i += p.numel()
    return out


@dataclass
class Posterior:
    """``samples`` (M, p): flattened parameter vectors; ``mc_dropout`` > 0 means one vector
    evaluated with that many dropout masks (the Adam baseline). ``chains``: the samples are
    C chains' draws, one chain after the other (M / C each); a deep ensemble's members are
    one draw each."""

    config: ModelConfig
    samples: torch.Tensor
    mc_dropout: int = 0
    noise_std: float = float("nan")  # σ of the observations (for the observation band)
    calibration: dict | None = None  # Calibration.to_dict() from held-out functions
    chains: int = 1

    def __post_init__(self):
        if not self.mc_dropout and self.samples.shape[0] % self.chains:
            raise ValueError(f"{self.samples.shape[0]} samples do not split into "
                             f"{self.chains} chains")
        self.model = DeepONet(self.config)
        self.template = {k: v.detach() for k, v in self.model.named_parameters()}

    kind = "deeponet"

    @property
    def n_sensors(self) -> int:
        return self.config.n_sensors

    @property
    def dim_y(self) -> int:
        return self.config.dim_y

    @property
    def n_samples(self) -> int:
        return self.mc_dropout or self.samples.shape[0]

    def to(self, device: torch.device | str) -> Posterior:
        """Compute predictions on ``device`` from now on (in place; returns self)."""
        self.model.to(device)
        self.samples = self.samples.to(device)
        self.template = {k: v.detach() for k, v in self.model.named_parameters()}
        return self

    def trajectories(self, u: torch.Tensor, y: torch.Tensor, seed: int = 0):
        """Yield each of the M predictions (n, P) in turn (memory O(n P), not O(M n P))."""
        with torch.no_grad():
            if self.mc_dropout:
                params = unflatten(self.samples[0], self.template)
                gen = torch.Generator(device=self.samples.device).manual_seed(seed)
                set_dropout_generator(self.model, gen)
                self.model.train()
                for _ in range(self.mc_dropout):
                    yield functional_call(self.model, params, (u, y))
            else:
                self.model.eval()
                for vec in self.samples:
                    yield functional_call(self.model, unflatten(vec, self.template), (u, y))

    def predict(self, u, y, z: float = 2.0, seed: int = 0) -> dict[str, torch.Tensor]:
        """Mean, std, lower, upper, each (n, P); std is the sample standard deviation."""
        u = torch.as_tensor(u, dtype=torch.float32, device=self.samples.device)
        y = torch.as_tensor(y, dtype=torch.float32, device=self.samples.device)
        total = sq = None
        for k, pred in enumerate(self.trajectories(u, y, seed)):
            pred = pred.double()
            total = pred.clone() if k == 0 else total + pred
            sq = pred**2 if k == 0 else sq + pred**2
        m = self.n_samples
        mean = total / m
        var = (sq / m - mean**2).clamp_min(0.0) * (m / max(m - 1, 1))
        mean, std = mean.cpu(), var.sqrt().cpu()
        return {"mean": mean, "std": std, "lower": mean - z * std, "upper": mean + z * std}

    def state_dict(self) -> dict:
        return {"config": self.config.to_dict(), "samples": self.samples,
                "mc_dropout": self.mc_dropout, "noise_std": self.noise_std,
                "calibration": self.calibration, "chains": self.chains}

    @classmethod
    def from_state_dict(cls, d: dict) -> Posterior:
        return cls(ModelConfig(**d["config"]), d["samples"], int(d["mc_dropout"]),
                   float(d.get("noise_std", float("nan"))), d.get("calibration"),
                   int(d.get("chains", 1)))
