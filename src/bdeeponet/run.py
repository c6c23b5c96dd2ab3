"""Reading a finished run directory back: predict and evaluate without the training data."""

from __future__ import annotations

import json
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .advice import RunWarning, prediction_warnings
from .calibration import Calibration, bands, coverage_table, observed_trajectories
from .config import TrainConfig
from .data import OperatorData, input_array
from .device import resolve_device
from .linear import LinearPosterior
from .metrics import all_metrics
from .networks import FourierConfig
from .novelty import DEFAULT_FALSE_ALARM, check_false_alarm
from .posterior import Posterior


class RunError(ValueError):
    """A run directory that is missing, unfinished or unreadable."""


@dataclass
class Run:
    path: Path | None  # None for a run held in memory (what train returned)
    config: TrainConfig
    posterior: Posterior | LinearPosterior
    metrics: dict
    saved: dict  # config.json as written by train (settings, data meta and fingerprint)

    def saved_query_points(self) -> np.ndarray | None:
        """The training query points the run directory keeps (None: it keeps none, or the
        run has no directory)."""
        path = None if self.path is None else self.path / "query_points.npy"
        return np.load(path) if path is not None and path.exists() else None

    @property
    def n_sensors(self) -> int:
        return self.posterior.n_sensors

    @property
    def dim_y(self) -> int:
        return self.posterior.dim_y


def load_run(path: str | Path) -> Run:
    path = Path(path)
    if not path.is_dir():
        raise RunError(f"no such run directory: {path}")
    for name in ("config.json", "posterior.pt", "metrics.json"):
        if not (path / name).exists():
            hint = " (the run did not finish; rerun train with --resume)" if name != "config.json" else ""
            raise RunError(f"{path} has no {name}{hint}")
    try:
        conf = json.loads((path / "config.json").read_text())
        config = TrainConfig.from_dict(conf["train"])
        state = torch.load(path / "posterior.pt", weights_only=True)
        if not isinstance(state, dict):
            raise TypeError(f"posterior.pt holds a {type(state).__name__}, not a posterior")
        kind = LinearPosterior if state.get("kind") == "linear" else Posterior
        posterior = kind.from_state_dict(state)
        metrics = json.loads((path / "metrics.json").read_text())
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics.json holds a {type(metrics).__name__}, not an object")
    except (OSError, KeyError, TypeError, ValueError, RuntimeError, EOFError, AttributeError,
            pickle.UnpicklingError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunError(f"{path} is not a readable run directory ({reason})") from None
    return Run(path, config, posterior, metrics, conf)


def as_run(run) -> Run:
    """``run`` itself, or a :class:`Run` over what :func:`bdeeponet.train` returned (its
    posterior and config; no directory)."""
    if isinstance(run, Run):
        return run
    posterior, config = getattr(run, "posterior", None), getattr(run, "config", None)
    if posterior is None or config is None:
        raise TypeError(f"expected a run (load_run(DIR) or what train returned), got "
                        f"{type(run).__name__}")
    return Run(None, config, posterior, run.metrics, {})


def predict(run: Run, u, y, level: float = 0.95, function_level: float = 0.95,
            device: torch.device | str | None = "auto",
            false_alarm: float = DEFAULT_FALSE_ALARM, warn: bool = True) -> dict[str, np.ndarray]:
    """The prediction for inputs u (n, m) at points y (P, d), each (n, P): ``mean``, ``std``
    and the bands of :mod:`.calibration` (``lower``/``upper``: the solution at ``level``;
    ``obs_*``: a new measurement; ``sim_*``: the whole trajectory at ``function_level``);
    per function (n,), ``novelty`` and ``novel`` (:mod:`.novelty`: flagged at the
    ``false_alarm`` rate; NaN and False for a run without held-out functions).
    With ``warn``, each line of :func:`~.advice.prediction_warnings` (inputs unlike the
    training ones, query points beyond the training range, ...) is issued as a
    :class:`~.advice.RunWarning`."""
    run = as_run(run)
    check_false_alarm(false_alarm)
    post = run.posterior
    sampled = isinstance(post, Posterior)
    y = input_array("'y'", y, run.dim_y, "P", "the run's query dimension")
    u = input_array("'u'", u, post.input_width(y) if sampled else run.n_sensors, "n",
                    "the run's sensor count")
    if sampled:
        post.to(resolve_device(device))
    out = post.predict(u, y, seed=run.config.seed)
    result = bands(out["mean"].numpy(), out["raw_std"].numpy(), post.noise_std,
                   Calibration.from_dict(post.calibration), level, function_level,
                   out["dof"].numpy())
    if post.novelty is None:
        result["novelty"], result["novel"] = np.full(len(u), np.nan), np.zeros(len(u), bool)
    else:
        result["novelty"], result["novel"] = post.novelty.score(
            post.training_inputs(u, y) if sampled else u, false_alarm)
    if warn:
        lines = prediction_warnings(
            post.calibration, post.novelty, result["novel"], false_alarm, y,
            run.saved_query_points(), getattr(getattr(post, "config", None), "periodic", ()),
            "the run" if run.path is None else str(run.path), grid_change(post, y))
        for line in lines:
            warnings.warn(line, RunWarning, stacklevel=2)
    return result




def grid_change(posterior, y) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(training grid, y's grid)`` where a Fourier network predicts on a grid other than
    the one it was trained on; None elsewhere."""
    config = getattr(posterior, "config", None)
    if not isinstance(config, FourierConfig):
        return None
    grid = config.grid_of(y)
    return None if grid == config.grid else (config.grid, grid)


def evaluate(run: Run, data: OperatorData, device: torch.device | str | None = "auto") -> dict:
    """Metrics of the run's predictive distribution on ``data``'s test set."""
    run = as_run(run)
    if not isinstance(data, OperatorData):
        raise TypeError(f"data must be an OperatorData (bdeeponet.load(path) reads a data "
                        f"file), got {type(data).__name__}")
    pred = predict(run, data.u_test, data.y, device=device, warn=False)
    return test_metrics(pred["mean"], pred["raw_std"], data, run.posterior, pred["dof"],
                        seed=run.config.seed)


def test_metrics(mean, std, data: OperatorData, posterior, dof=None, seed: int = 0) -> dict:
    """The paper's e1, e2, e3 of the raw band, NLL, CRPS, and the coverage at each nominal
    level, raw and calibrated: of the clean truth pointwise, and of whole observed test
    trajectories by the function-level band (noisy copies of clean test targets drawn
    with ``seed``, see :func:`~.calibration.observed_trajectories`). Bands of the predictive
    distribution: Student-t at ``dof`` where given."""
    s_clean = data.s_test
    metrics = all_metrics(mean, std, s_clean)
    cal = posterior.calibration
    noise = posterior.noise_std
    measured = data.meta.get("measured_noise_std") is not None  # import --noise-std: the
    # test targets are measurements themselves, not clean targets to draw copies of
    observed = observed_trajectories(s_clean, None if measured else data.noise_std,
                                     np.random.default_rng(seed))
    metrics["coverage"] = {
        "raw": coverage_table(mean, std, s_clean, noise, None, dof=dof, s_observed=observed),
        "calibrated": coverage_table(mean, std, s_clean, noise, Calibration.from_dict(cal),
                                     dof=dof, s_observed=observed) if cal else None,
    }
    if cal:
        metrics["calibration_scales"] = dict(zip((f"{v:g}" for v in cal["levels"]), cal["scales"],
                                                 strict=True))
        check = Calibration.from_dict(cal)
        if check.consistent is not None:
            metrics["calibration_check"] = {"consistent": list(check.consistent),
                                            "resolved": check.resolved,
                                            "n_functions": check.n_functions,
                                            "spread_z": check.spread_z}
            if check.likelihood is not None:
                metrics["calibration_check"].update(
                    scale=check.likelihood[0], scale_se=check.likelihood[1],
                    scale_interval=list(check.interval),
                    functions_needed=check.functions_needed)
    return metrics
