"""bdeeponet: Bayesian DeepONets for noisy parametric PDEs, sampled with replica-exchange SGLD.

The flat public API::

    from bdeeponet import get_problem, generate, load_data, TrainConfig, train, load_run
"""

from .config import TrainConfig
from .data import DataError, OperatorData, generate
from .data import load as load_data
from .energy import EnergyValue, GaussianEnergy
from .grf import periodic_grf, rbf_grf
from .metrics import all_metrics, coverage, relative_errors
from .model import DeepONet, ModelConfig, parameter_groups
from .posterior import Posterior
from .problems import PROBLEMS, get_problem
from .run import Run, RunError, evaluate, load_run, predict
from .samplers import METHODS, SGLD, AdamDropout, DeepEnsemble, MReSGLD, ReSGLD
from .train import RunResult, TrainingDiverged, train

__version__ = "0.1.0"

__all__ = [
    "METHODS", "PROBLEMS", "SGLD", "AdamDropout", "DataError", "DeepEnsemble", "DeepONet", "EnergyValue",
    "GaussianEnergy", "MReSGLD", "ModelConfig", "OperatorData", "Posterior", "ReSGLD", "Run",
    "RunError", "RunResult", "TrainConfig", "TrainingDiverged", "all_metrics", "coverage",
    "evaluate", "generate", "get_problem", "load_data", "load_run", "parameter_groups",
    "periodic_grf", "predict", "rbf_grf", "relative_errors", "train",
]
