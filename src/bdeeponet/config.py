"""Run configuration: one frozen dataclass, written next to every run as ``config.json``."""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from .data import SCALE_RANGE
from .model import ACTIVATIONS
from .samplers.methods import METHOD_NAMES, get_method
from .samplers.mresgld import DEFAULT_C
from .samplers.sgld import METRICS

NETWORKS = ("deeponet", "fourier")
BRANCHES = ("mlp", "conv")
TRUNKS = ("mlp", "pod")
SYMMETRIES = ("none", "square", "shift")
# the defaults that depend on the network (a field left None takes its network's)
NETWORK_DEFAULTS = {"deeponet": {"epochs": 2000, "batch_size": 100},
                    "fourier": {"epochs": 60, "batch_size": 20}}
# settings that change how a step is executed, not what it computes: a run may resume
# with another value (a CUDA graph replays the eager step's draws)
EXECUTION_ONLY = frozenset({"cuda_graph"})


def _opt(default, help: str, **extra):
    """A field with its help line: the command line's ``train`` options are built from
    these (see :func:`bdeeponet.cli.config_options`), so the text lives in one place. A
    field whose default is None says in its help what None means ("default: ...")."""
    return field(default=default, metadata={"help": help, **extra})


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run; each field carries its help line."""

    method: str = _opt("mresgld", "adam (+ MC dropout), ensemble (deep ensemble of Adam "
                       "MAPs), sgld, resgld, mresgld or linear (the closed-form ridge "
                       "baseline)", choices=METHOD_NAMES)
    chains: int | None = _opt(None, "independent chains (ensemble: members), run as one "
                              "batch and pooled (default: 1; ensemble 8)")
    epochs: int | None = _opt(None, "passes over the training functions (default: 2000; "
                              "fourier: 60 on a 2-D grid, 300 on a 1-D one)")
    batch_size: int | None = _opt(None, "functions per minibatch, all P points of each "
                                  "(default: 100; fourier: 20)")
    seed: int = _opt(0, "seed of the initialisation, minibatches, noise and held-out split")
    lr: float | None = _opt(None, "Langevin step (default: 0.05 with the kfac metric, 3e-4 "
                            "rmsprop, 1e-6 identity; Adam 1e-3)")
    lr_hot: float | None = _opt(None, "step of the hot replica (default: lr)")
    tau1: float = _opt(1.0, "temperature of the cold replica (the posterior)")
    tau2: float = _opt(10.0, "temperature of the hot replica")
    c: float = _opt(DEFAULT_C, "m-reSGLD: probability that the hot replica trains the branch "
                    "net (fourier: its lifting and first half of the spectral layers)")
    replicas: int = _opt(2, "reSGLD / m-reSGLD: temperature levels from tau1 to tau2 (2: the "
                         "paper's pair; more: a ladder with even-odd swaps)")
    ladder_adapt: int | None = _opt(None, "epochs after burn-in over which a ladder of more "
                                    "than 2 replicas is re-spaced to equal swap rates "
                                    "(default: a quarter of the sampling epochs; 0: geometric)")
    metric: str = _opt("kfac", "Langevin metric: kfac (Adam warm start, then a Kronecker "
                       "metric frozen at it), rmsprop (pSGLD), identity", choices=METRICS)
    freeze_metric: bool = _opt(False, "rmsprop only: stop adapting the metric after burn-in")
    warm_lr: float = _opt(3e-3, "kfac: Adam's step during burn-in (cosine-decayed to 0)")
    control_variate: bool = _opt(False, "kfac: gradients anchored at the warm start "
                                 "(Baker et al. 2019)")
    fisher_samples: int = _opt(16, "kfac: Monte Carlo draws for the metric")
    cuda_graph: bool = _opt(True, "sgld with kfac on a CUDA device: replay the sampling step "
                            "from a CUDA graph (the same draws, a fraction of the launches)")
    symmetry: str = _opt("none", "a group the operator commutes with; each minibatch "
                         "function is seen moved by a random element of it. square: the "
                         "square's 8 rotations and reflections (inputs and outputs on "
                         "square grids); shift: the cyclic shifts of a periodic 1-D grid",
                         choices=SYMMETRIES)
    standardise: bool = _opt(True, "scale inputs and outputs by their training mean and sd, "
                                     "and map each query coordinate onto [0, 1]")
    branch_pca: int | None = _opt(None, "principal components of the training inputs that the "
                                  "branch net reads (default: the raw sensors when m < 257, "
                                  "else the fewest keeping all but 1e-6 of the inputs' "
                                  "variance, at most 32; 0: the raw sensors)")
    network: str = _opt("deeponet", "deeponet (branch and trunk nets), or fourier (a Fourier "
                        "neural operator: input and output fields on one equispaced 1-D or "
                        "2-D grid)", choices=NETWORKS)
    modes: int = _opt(12, "fourier: Fourier modes kept per axis in each spectral layer")
    layers: int = _opt(4, "fourier: spectral layers")
    patch: int | None = _opt(None, "fourier: grid points per side of the patches that its "
                             "layers read as one point (default: 1 up to 32 points a side, "
                             "else the smallest that brings each side to 32 or fewer: 3 at "
                             "85; predicts on the training grid only when > 1)")
    branch: str = _opt("mlp", "branch net: mlp, or conv (a convolutional net over inputs "
                       "given on an equispaced 1-D or 2-D grid)", choices=BRANCHES)
    channels: int = _opt(16, "conv branch: channels of its first layer; fourier: channels "
                         "of its spectral layers")
    trunk_harmonics: int = _opt(8, "Fourier features of each non-periodic query coordinate "
                                "for the trunk: cos and sin of π k y / L, k = 1..K, L the "
                                "coordinate's range in the data, beside the coordinate "
                                "(0: the coordinate alone)")
    trunk: str = _opt("mlp", "trunk net: mlp (learnt, on the query coordinates), or pod "
                      "(fixed: the training outputs' mean and first latent principal "
                      "modes, as POD-DeepONet; predicts only at the training query points)",
                      choices=TRUNKS)
    calibration: float = _opt(0.1, "fraction of training functions held out to calibrate the "
                              "bands (0: none)")
    burn_in: int | None = _opt(None, "burn-in epochs (default: 3/4 of the run with kfac, "
                               "half otherwise)")
    thin: int | None = _opt(None, "epochs between kept samples (default: as many as give 100 samples)")
    prior_std: float = _opt(1.0, "scale of the Gaussian prior on the weights")
    prior: str = _opt("fan_in", "fan_in: N(0, prior_std^2 / fan_in) per layer; iid: "
                      "N(0, prior_std^2)", choices=("fan_in", "iid"))
    noise_std: float | str | None = _opt(None, "noise sd of the targets, or 'auto' to estimate "
                                         "it (default: the data file's)", metavar="SD|auto")
    width: int = _opt(64, "hidden units per layer (fourier: of its projection)")
    depth: int = _opt(2, "hidden layers of the branch and trunk nets")
    latent: int = _opt(64, "latent dimension (outputs of branch and trunk)")
    activation: str | None = _opt(None, "activation of the hidden layers (default: tanh; "
                                  "fourier: gelu)", choices=tuple(ACTIVATIONS))
    dropout: float = _opt(0.1, "Adam + MC dropout only: dropout probability")
    mc_samples: int = _opt(100, "Adam: dropout masks per prediction")
    checkpoint_every: int = _opt(100, "epochs between checkpoints")

    def __post_init__(self):
        if self.network not in NETWORKS:
            raise ValueError(f"unknown network {self.network!r}; choose one of: "
                             f"{', '.join(NETWORKS)}")
        filled = []
        for name, value in NETWORK_DEFAULTS.get(self.network, {}).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
                filled.append(name)
        object.__setattr__(self, "_network_defaults", tuple(filled))  # (not a field)
        for f in fields(self):  # a value of another type (a TOML file's "ten", 2.5 chains)
            value = getattr(self, f.name)
            if not any(_is(value, t.strip()) for t in f.type.split("|")):
                raise ValueError(f"{f.name} must be of type {f.type.replace('str', 'string')}, "
                                 f"got {value!r}")
        kind = get_method(self.method)  # ValueError naming the choices
        for name in ("epochs", "batch_size", "width", "depth", "latent", "mc_samples",
                     "checkpoint_every", "fisher_samples", "channels", "modes", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.patch is not None and self.patch < 1:
            raise ValueError(f"patch must be >= 1, got {self.patch}")
        if self.replicas < 2:
            raise ValueError(f"replicas must be >= 2, got {self.replicas}")
        if not 0 <= self.seed < 2**63 - 1:  # numpy's seeds are >= 0, torch's 64-bit (seed + 1)
            raise ValueError(f"seed must be in [0, 2**63 - 1), got {self.seed}")
        if self.replicas > 2 and not kind.ladder:
            raise ValueError("replicas > 2 needs --method resgld or mresgld")
        if self.ladder_adapt is not None and self.ladder_adapt < 0:
            raise ValueError(f"ladder_adapt must be >= 0, got {self.ladder_adapt}")
        if self.chains is not None and (isinstance(self.chains, bool) or self.chains < 1):
            raise ValueError(f"chains must be >= 1, got {self.chains}")
        if self.n_chains < kind.min_chains:
            raise ValueError(f"an ensemble needs chains >= {kind.min_chains}, got {self.chains}")
        if kind.single and self.n_chains > 1:
            raise ValueError(f"{self.method} runs one network; for several use --method "
                             "ensemble, or a sampler")
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
            # an sd's or a temperature's square and inverse must be numbers (a step may be
            # anything finite: a huge one diverges, and is caught as such)
            if name in ("tau1", "tau2", "prior_std", "noise_std") and not (
                    SCALE_RANGE[0] <= v <= SCALE_RANGE[1]):
                raise ValueError(f"{name} must be within [{SCALE_RANGE[0]:g}, {SCALE_RANGE[1]:g}], "
                                 f"got {v:g}")
        if self.tau1 >= self.tau2:
            raise ValueError(f"tau1 must be < tau2, got tau1={self.tau1}, tau2={self.tau2}")
        if not 0.0 <= self.calibration < 1.0:
            raise ValueError(f"calibration must be a fraction in [0, 1), got {self.calibration}")
        if not 0.0 <= self.c <= 1.0:
            raise ValueError(f"c must be in [0, 1], got {self.c}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be a probability in [0, 1), got {self.dropout}")
        if kind.dropout and self.dropout == 0:
            raise ValueError(f"{self.method}'s band comes from dropout masks: dropout must be > 0 "
                             "(with 0 every mask is the same network and the band has width 0)")
        if self.burn_in is not None and not 0 <= self.burn_in < self.epochs:
            raise ValueError(f"burn_in must be in [0, epochs), got {self.burn_in}")
        if self.branch_pca is not None and (not isinstance(self.branch_pca, int)
                                            or isinstance(self.branch_pca, bool)
                                            or self.branch_pca < 0):
            raise ValueError(f"branch_pca must be an integer >= 0, got {self.branch_pca!r}")
        if (not isinstance(self.trunk_harmonics, int) or isinstance(self.trunk_harmonics, bool)
                or self.trunk_harmonics < 0):
            raise ValueError(f"trunk_harmonics must be an integer >= 0, got {self.trunk_harmonics!r}")
        if self.trunk not in TRUNKS:
            raise ValueError(f"unknown trunk '{self.trunk}'; choose one of: {', '.join(TRUNKS)}")
        if self.trunk == "pod" and kind.groups:
            raise ValueError(f"{self.method} trains the branch and the trunk in turn, and a pod "
                             "trunk is fixed: use --method resgld (or sgld)")
        if self.branch not in BRANCHES:
            raise ValueError(f"unknown branch '{self.branch}'; choose one of: {', '.join(BRANCHES)}")
        if self.branch == "conv" and self.branch_pca:
            raise ValueError("a conv branch reads the raw grid: it takes no branch_pca")
        if self.network == "fourier":
            for name, default in (("branch", "mlp"), ("trunk", "mlp"), ("branch_pca", None)):
                if getattr(self, name) != default:
                    raise ValueError(f"the Fourier network reads the input field and gives the "
                                     f"output field on its grid: it takes no {name}")
        if self.symmetry not in SYMMETRIES:
            raise ValueError(f"unknown symmetry '{self.symmetry}'; choose one of: "
                             f"{', '.join(SYMMETRIES)}")
        if not kind.network:  # a closed-form fit from the sensors: no network to shape
            for name, default in (("symmetry", "none"), ("branch", "mlp"), ("trunk", "mlp"),
                                  ("network", "deeponet")):
                if getattr(self, name) != default:
                    raise ValueError(f"{self.method} is fitted in closed form from the "
                                     f"sensors: it takes no {name}")
        if self.symmetry != "none" and self.control_variate:
            raise ValueError("the control variate anchors each training function's gradient, "
                             "and --symmetry moves the functions: use one or the other")
        if self.thin is not None and self.thin < 1:
            raise ValueError(f"thin must be >= 1, got {self.thin}")
        if kind.draws and self.thin is not None and self.thin > self.epochs - self.burn_in_epochs:
            raise ValueError(f"thin ({self.thin}) keeps no sample of the "
                             f"{self.epochs - self.burn_in_epochs} sampled epochs (epochs - burn-in)")

    @property
    def network_defaults(self) -> tuple[str, ...]:
        """The fields that took their network's default (they were left None)."""
        return self._network_defaults

    @property
    def activation_name(self) -> str:
        if self.activation is not None:
            return self.activation
        return "gelu" if self.network == "fourier" else "tanh"

    @property
    def n_chains(self) -> int:
        if self.chains is not None:
            return self.chains
        return get_method(self.method).chains

    @property
    def step_size(self) -> float:
        if self.lr is not None:
            return self.lr
        return get_method(self.method).default_lr(self.metric)

    @property
    def burn_in_epochs(self) -> int:
        if self.burn_in is not None:
            return self.burn_in
        # the warm start is what makes the mean accurate; a constant-metric chain from the
        # mode needs few epochs for its samples
        draws = get_method(self.method).draws
        return 3 * self.epochs // 4 if self.metric == "kfac" and draws else self.epochs // 2

    @property
    def ladder_adapt_epochs(self) -> int:
        if self.ladder_adapt is not None:
            return self.ladder_adapt
        return (self.epochs - self.burn_in_epochs) // 4 if self.replicas > 2 else 0

    @property
    def thin_epochs(self) -> int:
        return self.thin or max(1, (self.epochs - self.burn_in_epochs) // 100)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        d = dict(d)
        d.setdefault("branch_pca", 0)  # written before the encoder: the raw sensors
        d.setdefault("trunk_harmonics", 0)  # written before the trunk's Fourier features
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
        """A copy with ``changes`` (None values ignored); another ``network`` brings its own
        defaults for the fields that took the former network's."""
        changes = {k: v for k, v in changes.items() if v is not None}
        if changes.get("network", self.network) != self.network:
            changes = {**{n: None for n in self.network_defaults}, **changes}
        return replace(self, **changes)


def _is(value, kind: str) -> bool:
    """Whether ``value`` is of the annotated type ``kind`` (int, float, str, bool or None):
    a bool is no number, an int is a float."""
    if kind == "None":
        return value is None
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    return isinstance(value, {"int": int, "float": (int, float), "str": str}[kind])


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
