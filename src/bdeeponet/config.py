"""Run configuration: one frozen dataclass, written next to every run as ``config.json``."""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

METHOD_NAMES = ("adam", "sgld", "resgld", "mresgld", "linear")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (defaults documented in the README)."""

    method: str = "mresgld"
    epochs: int = 2000
    batch_size: int = 100  # functions per minibatch (all P points of each)
    seed: int = 0
    lr: float | None = None  # default: 3e-4 for the SG-MCMC samplers, 1e-3 for Adam
    lr_hot: float | None = None  # hot particle (default: lr)
    tau1: float = 1.0
    tau2: float = 10.0
    c: float = 0.7  # m-reSGLD: probability that the hot particle trains the branch
    precondition: bool = True
    freeze_metric: bool = False  # stop adapting the preconditioner after burn-in
    burn_in: int | None = None  # epochs; default: half of the run
    thin: int | None = None  # epochs between kept samples; default: 100 samples
    prior_std: float = 1.0
    noise_std: float | None = None  # default: the data file's noise_std
    width: int = 64
    depth: int = 2
    latent: int = 64
    activation: str = "tanh"
    dropout: float = 0.1  # Adam + MC dropout only
    mc_samples: int = 100  # Adam: dropout masks per prediction
    checkpoint_every: int = 100  # epochs

    def __post_init__(self):
        if self.method not in METHOD_NAMES:
            raise ValueError(
                f"unknown method '{self.method}'; choose one of: {', '.join(METHOD_NAMES)}"
            )
        for name in ("epochs", "batch_size", "width", "depth", "latent", "mc_samples",
                     "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("tau1", "tau2", "prior_std", "lr", "lr_hot", "noise_std"):
            v = getattr(self, name)
            if v is None and name not in ("tau1", "tau2", "prior_std"):
                continue
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a finite number > 0, got {v}")
        if self.tau1 >= self.tau2:
            raise ValueError(f"tau1 must be < tau2, got tau1={self.tau1}, tau2={self.tau2}")
        if not 0.0 <= self.c <= 1.0:
            raise ValueError(f"c must be in [0, 1], got {self.c}")
        if self.burn_in is not None and not 0 <= self.burn_in < self.epochs:
            raise ValueError(f"burn_in must be in [0, epochs), got {self.burn_in}")
        if self.thin is not None and self.thin < 1:
            raise ValueError(f"thin must be >= 1, got {self.thin}")

    @property
    def step_size(self) -> float:
        if self.lr is not None:
            return self.lr
        return 1e-3 if self.method == "adam" else 3e-4

    @property
    def burn_in_epochs(self) -> int:
        return self.epochs // 2 if self.burn_in is None else self.burn_in

    @property
    def thin_epochs(self) -> int:
        return self.thin or max(1, (self.epochs - self.burn_in_epochs) // 100)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown config key '{unknown[0]}'; valid keys: {', '.join(sorted(known))}")
        return cls(**d)

    def updated(self, **changes) -> TrainConfig:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def load_toml(path: str | Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ValueError(f"no such config file: {path}") from None
    except IsADirectoryError:
        raise ValueError(f"config file {path} is a directory") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid TOML ({exc})") from None
