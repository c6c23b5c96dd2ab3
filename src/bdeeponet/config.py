"""Run configuration: one frozen dataclass, written next to every run as ``config.json``."""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from .samplers.sgld import DEFAULT_LR, METRICS

METHOD_NAMES = ("adam", "sgld", "resgld", "mresgld", "linear")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (defaults documented in the README)."""

    method: str = "mresgld"
    epochs: int = 2000
    batch_size: int = 100  # functions per minibatch (all P points of each)
    seed: int = 0
    lr: float | None = None  # Langevin step; default 0.05 (kfac), 3e-4 (rmsprop); Adam 1e-3
    lr_hot: float | None = None  # hot particle (default: lr)
    tau1: float = 1.0
    tau2: float = 10.0
    c: float = 0.7  # m-reSGLD: probability that the hot particle trains the branch
    metric: str = "kfac"  # kfac (warm start + Kronecker metric), rmsprop (pSGLD), identity
    freeze_metric: bool = False  # rmsprop only: stop adapting the metric after burn-in
    warm_lr: float = 3e-3  # kfac: Adam's step during burn-in (cosine-decayed to 0)
    control_variate: bool = False  # kfac: gradients anchored at the warm start
    fisher_samples: int = 16  # kfac: Monte Carlo draws for the metric
    standardise: bool = True  # inputs and outputs scaled by their training mean and sd
    calibration: float = 0.1  # fraction of training functions held out to calibrate the bands
    burn_in: int | None = None  # epochs; default: 3/4 of the run (kfac), half (otherwise)
    thin: int | None = None  # epochs between kept samples; default: 100 samples
    prior_std: float = 1.0
    prior: str = "fan_in"  # fan_in: N(0, prior_std²/fan_in) per linear layer; iid: N(0, prior_std²)
    noise_std: float | str | None = None  # default: the data file's; "auto": estimated
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
                     "checkpoint_every", "fisher_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric '{self.metric}'; choose one of: {', '.join(METRICS)}")
        if self.prior not in ("fan_in", "iid"):
            raise ValueError(f"unknown prior '{self.prior}'; choose one of: fan_in, iid")
        if isinstance(self.noise_std, str) and self.noise_std != "auto":
            raise ValueError(f"noise_std must be a number > 0 or 'auto', got '{self.noise_std}'")
        for name in ("tau1", "tau2", "prior_std", "lr", "lr_hot", "noise_std", "warm_lr"):
            v = getattr(self, name)
            if (v is None or v == "auto") and name not in ("tau1", "tau2", "prior_std", "warm_lr"):
                continue
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a finite number > 0, got {v}")
        if self.tau1 >= self.tau2:
            raise ValueError(f"tau1 must be < tau2, got tau1={self.tau1}, tau2={self.tau2}")
        if not 0.0 <= self.calibration < 1.0:
            raise ValueError(f"calibration must be a fraction in [0, 1), got {self.calibration}")
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
        return 1e-3 if self.method == "adam" else DEFAULT_LR[self.metric]

    @property
    def burn_in_epochs(self) -> int:
        if self.burn_in is not None:
            return self.burn_in
        # the warm start is what makes the mean accurate; a constant-metric chain from the
        # mode needs few epochs for its samples
        return 3 * self.epochs // 4 if self.metric == "kfac" and self.method != "adam" else self.epochs // 2

    @property
    def thin_epochs(self) -> int:
        return self.thin or max(1, (self.epochs - self.burn_in_epochs) // 100)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        d = dict(d)
        if "precondition" in d:  # run directories written before the Kronecker metric
            d.setdefault("metric", "rmsprop" if d.pop("precondition") else "identity")
            d.setdefault("standardise", False)
            d.setdefault("prior", "iid")
            d.setdefault("calibration", 0.0)
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
