"""The paper's experiment grid (Section 5): its scenarios, its published numbers, and where
each piece of it lives on disk.

The grid is every (problem, noise) scenario × method × seed. A scenario's data set is
generated once; a job is one training run on it. Under an output folder ``OUT``::

    OUT/data/PROBLEM-NOISE.npz                           one data set per scenario
    OUT/runs/PROBLEM-NOISE/METHOD-EPOCHSep-seedS/        one run directory per job
    OUT/runs/PROBLEM-NOISE/METHOD-EPOCHSep-Cchains-seedS/  the same with C chains
    OUT/runs/PROBLEM-NOISE/METHOD-EPOCHSep-width32-latent32-seedS/  a network of another size

e.g. ``OUT/runs/pendulum-0.01/mresgld-8000ep-seed0/``. This module only names things;
:mod:`.experiments` runs the grid and :mod:`.report` reads what it left behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PAPER_SCENARIOS = (
    ("antiderivative", 0.01), ("antiderivative", 0.05),
    ("pendulum", 0.01), ("pendulum", 0.05),
    ("diffusion_reaction", 0.01), ("diffusion_reaction", 0.1),
    ("advection_diffusion", 0.01), ("advection_diffusion", 0.1),
)
PAPER_METHODS = ("adam", "resgld", "mresgld")
# Beyond the paper, run only when named in ``problems``: a nonlinear operator (1-D Darcy
# flow), with noise levels relative to the solution's standard deviation.
EXTRA_SCENARIOS = (("darcy", 0.01), ("darcy", 0.05))
RELATIVE_NOISE = frozenset({"darcy"})

# The paper's Tables 1–8: mean e1, e2 after burn-in (8000 epochs).
PAPER_ERRORS = {
    ("antiderivative", 0.01): {"adam": (13.099151, 14.961829), "resgld": (6.953939, 7.35423),
                               "mresgld": (7.82799, 8.234294)},
    ("antiderivative", 0.05): {"adam": (14.877717, 16.611967), "resgld": (11.970458, 12.182682),
                               "mresgld": (11.367707, 11.708988)},
    ("pendulum", 0.01): {"adam": (16.8571, 18.6582), "resgld": (6.2147, 5.7965),
                         "mresgld": (6.6997, 6.2231)},
    ("pendulum", 0.05): {"adam": (18.8935, 20.6669), "resgld": (12.6139, 11.2885),
                         "mresgld": (12.2996, 11.11955)},
    ("diffusion_reaction", 0.01): {"adam": (31.854993, 33.759108), "resgld": (9.644058, 9.904289),
                                   "mresgld": (11.344359, 11.62751)},
    ("diffusion_reaction", 0.1): {"adam": (31.954806, 33.850071), "resgld": (11.670668, 12.043854),
                                  "mresgld": (9.040757, 9.404453)},
    ("advection_diffusion", 0.01): {"adam": (14.3524, 16.5843), "resgld": (8.9257, 9.2734),
                                    "mresgld": (7.3409, 7.7345)},
    ("advection_diffusion", 0.1): {"adam": (21.5141, 25.0701), "resgld": (11.2455, 11.9178),
                                   "mresgld": (14.2553, 14.7162)},
}
# m-reSGLD / reSGLD per-iteration time reported in the paper (its Figures 6, 8, ...).
PAPER_TIME_RATIO = {
    ("antiderivative", 0.01): 0.801, ("antiderivative", 0.05): 0.769,
    ("pendulum", 0.01): 0.7906, ("pendulum", 0.05): 0.808,
    ("diffusion_reaction", 0.01): 0.830, ("diffusion_reaction", 0.1): 0.815,
    ("advection_diffusion", 0.01): 0.7944, ("advection_diffusion", 0.1): 0.802,
}


# The TrainConfig fields that shape the network, settable per grid (``reproduce --width``).
MODEL_SIZE = ("width", "depth", "latent", "trunk_harmonics")


@dataclass(frozen=True)
class Job:
    """One training run of the grid."""

    problem: str
    noise: float
    method: str
    seed: int
    epochs: int
    chains: int | None = None  # None: the method's default
    # The network's size; None: TrainConfig's default (the linear baseline has no network).
    width: int | None = None
    depth: int | None = None
    latent: int | None = None
    trunk_harmonics: int | None = None
    # how a step runs, not what it computes: not in the run's name (config.EXECUTION_ONLY)
    cuda_graph: bool = True

    def network(self) -> dict[str, int]:
        """The network's width, depth, latent dimension and trunk harmonics, TrainConfig's
        defaults filled in."""
        from .config import TrainConfig

        return {k: getattr(TrainConfig if getattr(self, k) is None else self, k)
                for k in MODEL_SIZE}

    def config(self):
        """The job's :class:`~bdeeponet.config.TrainConfig`."""
        from .config import TrainConfig

        return TrainConfig(method=self.method, epochs=self.epochs, seed=self.seed,
                           chains=self.chains, cuda_graph=self.cuda_graph, **self.model_size())

    def model_size(self) -> dict[str, int]:
        """The sizes that differ from TrainConfig's defaults: what names the run apart (a
        size given at its default is the default run)."""
        from .config import TrainConfig

        return {k: v for k, v in self.network().items() if v != getattr(TrainConfig, k)}

    @property
    def scenario(self) -> str:
        return scenario_name(self.problem, self.noise)

    def run_dir(self, out: Path) -> Path:
        # The length, chains and network size are in the name: a rerun with other values
        # never reuses these runs.
        chains = "" if self.chains is None else f"-{self.chains}chains"
        size = "".join(f"-{k}{v}" for k, v in self.model_size().items())
        return (out / "runs" / self.scenario
                / f"{self.method}-{self.epochs}ep{chains}{size}-seed{self.seed}")


def scenario_name(problem: str, noise: float) -> str:
    return f"{problem}-{noise:g}"


def scenario_title(problem: str, noise: float) -> str:
    """A scenario as tables and figures head it: σ itself, or relative to the clean
    targets' sd where the problem's noise is (``RELATIVE_NOISE``)."""
    return f"{problem}, σ = {noise:g}" + (" × sd" if problem in RELATIVE_NOISE else "")


def data_path(out: Path, problem: str, noise: float) -> Path:
    return out / "data" / f"{scenario_name(problem, noise)}.npz"
