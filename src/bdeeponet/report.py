"""Figures of one run (written beside it by ``train``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .metrics import coverage
from .plots import plot_band, plot_history


def write_run_figures(out: Path, result, data, config, index: int = 0) -> list[Path]:
    """``history.png`` (e1/e2 per epoch) and ``band.png`` (test function ``index``)."""
    pred = result.posterior.predict(data.u_test[index : index + 1], data.y, seed=config.seed)
    mean, lower, upper = (pred[k].numpy()[0] for k in ("mean", "lower", "upper"))
    std = pred["std"].numpy()[0]
    truth = data.s_test[index]
    e3 = coverage(mean[None], std[None], truth[None])
    title = f"{config.method}: test function {index}, e3 = {e3:.0f}%"
    return [
        plot_history(result.history, out / "history.png", title=config.method,
                     burn_in=config.burn_in_epochs),
        plot_band(np.asarray(data.y), truth, mean, lower, upper, out / "band.png", title=title),
    ]
