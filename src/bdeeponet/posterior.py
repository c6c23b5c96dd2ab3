"""Posterior samples and the predictive mean, standard deviation and band (paper Section 3).

SG-MCMC runs keep the cold particle every ``thin`` steps after burn-in: ``M`` parameter
vectors. Adam keeps one parameter vector and draws ``M`` dropout masks at prediction time.
Either way a prediction is ``M`` trajectories ``G_θk(u)(y)`` reduced to their mean and
standard deviation, and the band is ``mean ± z std`` (z = 2: the paper's 95% band).
Several chains that have not mixed give a Student-t band (:func:`pooled_predictive`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.func import functional_call

from .data import input_array
from .encoder import PCAEncoder, TrunkModes
from .energy import Params
from .model import ModelConfig, set_dropout_generator
from .networks import FourierConfig, build_network, network_config
from .novelty import Novelty


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

    config: ModelConfig | FourierConfig
    samples: torch.Tensor
    mc_dropout: int = 0
    noise_std: float = float("nan")  # σ of the observations (for the observation band)
    calibration: dict | None = None  # Calibration.to_dict() from held-out functions
    chains: int = 1
    encoder: PCAEncoder | None = None  # maps raw inputs (n, m) to what the branch reads
    novelty: Novelty | None = None  # how unlike the training inputs an input is
    modes: TrunkModes | None = None  # the training outputs' modes, beside y for the trunk

    def __post_init__(self):
        if not self.mc_dropout and self.samples.shape[0] % self.chains:
            raise ValueError(f"{self.samples.shape[0]} samples do not split into "
                             f"{self.chains} chains")
        with torch.random.fork_rng(devices=[]):  # its initial weights are never used: leave
            self.model = build_network(self.config)  # the caller's random stream where it was
        self.template = {k: v.detach() for k, v in self.model.named_parameters()}
        width = sum(v.numel() for v in self.template.values())
        if self.samples.dim() != 2 or self.samples.shape[1] != width:
            raise ValueError(f"samples of shape {tuple(self.samples.shape)} are not parameter "
                             f"vectors of this network ({width} parameters each)")

    kind = "deeponet"

    @property
    def n_sensors(self) -> int:
        """Sensors of a raw input (the branch reads fewer values behind an encoder)."""
        return self.config.n_sensors if self.encoder is None else self.encoder.n_sensors

    @property
    def dim_y(self) -> int:
        """Coordinates of a query point (the trunk reads the modes' values beside them)."""
        return self.config.dim_y if self.modes is None else self.modes.dim_y

    def input_width(self, y) -> int:
        """Values of a raw input for predictions at ``y`` (P, d): the sensors, or for a
        Fourier network the points of y's grid (:meth:`FourierConfig.grid_of`)."""
        if isinstance(self.config, FourierConfig):
            return math.prod(self.config.grid_of(y))
        return self.n_sensors

    def training_inputs(self, u, y):
        """Raw inputs ``u`` given for predictions at ``y`` as at the training sensors (a
        Fourier network's input on another grid, interpolated onto its own)."""
        if isinstance(self.config, FourierConfig):
            return self.config.resample(u, self.config.grid_of(y))
        return u

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
        """Yield each of the M predictions (n, P) in turn (memory O(n P), not O(M n P)) for
        raw inputs u (n, m) (encoded here when the run has an encoder) at query points y
        (P, d) (the trunk's modes appended here when it reads them)."""
        with torch.no_grad():
            if self.encoder is not None:
                u = self.encoder(u)
            if self.modes is not None:
                y = self.modes(y)
            if self.mc_dropout:
                params = unflatten(self.samples[0], self.template)
                gen = torch.Generator(device=self.samples.device).manual_seed(seed)
                set_dropout_generator(self.model, gen, shared=True)
                self.model.train()
                for _ in range(self.mc_dropout):
                    yield functional_call(self.model, params, (u, y))
            else:
                self.model.eval()
                for vec in self.samples:
                    yield functional_call(self.model, unflatten(vec, self.template), (u, y))

    def predict(self, u, y, z: float = 2.0, seed: int = 0) -> dict[str, torch.Tensor]:
        """``mean``, ``raw_std``, ``dof``, ``raw_lower``, ``raw_upper``, each (n, P): the
        predictive distribution of :func:`pooled_predictive`, uncalibrated
        (``raw_lower``/``raw_upper``: mean ± z raw_std). The calibrated bands are
        :func:`bdeeponet.predict`'s."""
        y = input_array("'y'", y, self.dim_y, "P", "the run's query dimension")
        u = input_array("'u'", u, self.input_width(y), "n", "the run's sensor count")
        u = torch.as_tensor(u, dtype=torch.float32, device=self.samples.device)
        y = torch.as_tensor(y, dtype=torch.float32, device=self.samples.device)
        chains = 1 if self.mc_dropout else self.chains
        draws = self.n_samples // chains
        total = sq = None
        for k, pred in enumerate(self.trajectories(u, y, seed)):
            pred = pred.double()
            if k == 0:
                total = pred.new_zeros((chains, *pred.shape))
                sq = torch.zeros_like(total)
            total[k // draws] += pred
            sq[k // draws] += pred**2
        mean, std, dof = (t.cpu() for t in pooled_predictive(total / draws, sq / draws, draws))
        return {"mean": mean, "raw_std": std, "dof": dof, "raw_lower": mean - z * std,
                "raw_upper": mean + z * std}

    def state_dict(self) -> dict:
        return {"config": self.config.to_dict(), "samples": self.samples,
                "mc_dropout": self.mc_dropout, "noise_std": self.noise_std,
                "calibration": self.calibration, "chains": self.chains,
                "encoder": None if self.encoder is None else self.encoder.state_dict(),
                "novelty": None if self.novelty is None else self.novelty.state_dict(),
                "modes": None if self.modes is None else self.modes.state_dict()}

    @classmethod
    def from_state_dict(cls, d: dict) -> Posterior:
        return cls(network_config(d["config"]), d["samples"], int(d["mc_dropout"]),
                   float(d.get("noise_std", float("nan"))), d.get("calibration"),
                   int(d.get("chains", 1)),
                   None if d.get("encoder") is None else PCAEncoder.from_state_dict(d["encoder"]),
                   None if d.get("novelty") is None else Novelty.from_state_dict(d["novelty"]),
                   None if d.get("modes") is None else TrunkModes.from_state_dict(d["modes"]))


def pooled_predictive(chain_mean: torch.Tensor, chain_sq: torch.Tensor, draws: int):
    """``(mean, std, dof)`` of C chains' predictions from each chain's mean and mean square
    over its ``draws`` (each (C, ...)).

    One chain, or chains of one draw each (a deep ensemble's members): the sample standard
    deviation of all draws, Gaussian (``dof`` inf). C >= 2 chains of several draws: the
    chains that have not mixed sit in different regions, and the spread between them, B
    (the variance of the C chain means), is known only to C − 1 degrees of freedom. The
    truth is then taken to lie like one more chain around the pooled mean, within-chain
    variance W beside: ``std² = W + (1 + 1/C) B`` with the Welch–Satterthwaite degrees of
    freedom ``dof = std⁴ (C − 1) / ((1 + 1/C) B)²`` (B known to C − 1, W to many), and the
    band is Student-t. It tends to the Gaussian band of the pooled spread as the chains
    mix (B → 0) or multiply (C → ∞). A deep ensemble's members, single MAP-like draws,
    keep the Gaussian band of their spread. Why, measured: docs/bands.md, "Several
    chains"."""
    chains = chain_mean.shape[0]
    mean = chain_mean.mean(0)
    inf = torch.full_like(mean, float("inf"))
    if chains == 1 or draws == 1:
        m = chains * draws
        var = (chain_sq.mean(0) - mean**2).clamp_min(0.0) * (m / max(m - 1, 1))
        return mean, var.sqrt(), inf
    within = ((chain_sq - chain_mean**2).clamp_min(0.0) * (draws / (draws - 1))).mean(0)
    between = (1 + 1 / chains) * chain_mean.var(0)
    var = within + between
    dof = torch.where(between > 0, var**2 * (chains - 1) / between.square().clamp_min(1e-300), inf)
    return mean, var.sqrt(), dof
