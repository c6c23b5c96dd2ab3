"""Figures: data distributions (paper Figs. 2, 3, 9, 13, 17), bands, convergence histories,
and the figure sets written beside a run (:func:`write_run_figures`) and per scenario of the
paper grid (:func:`scenario_figures`).

Figures are made with :class:`matplotlib.figure.Figure` on the Agg canvas, outside pyplot:
importing this module selects no backend, and no figure lingers in a global registry.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .calibration import Calibration, bands
from .grid import data_path, scenario_name, scenario_title
from .io import atomic_write


def figure(figsize: tuple[float, float]) -> Figure:
    """An empty figure drawn by Agg (any format :func:`save` is given still works)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: str | Path) -> Path:
    suffix = Path(path).suffix.lstrip(".") or "png"
    atomic_write(path, lambda fh: fig.savefig(fh, format=suffix, dpi=120, bbox_inches="tight"))
    return Path(path)


def _spread(ax, x, values, color, label, n_lines=20):
    """Quantile bands (5–95%, 25–75%), the median and a few individual functions."""
    q = np.quantile(values, [0.05, 0.25, 0.5, 0.75, 0.95], axis=0)
    ax.fill_between(x, q[0], q[4], color=color, alpha=0.15, label="5–95%")
    ax.fill_between(x, q[1], q[3], color=color, alpha=0.3, label="25–75%")
    for row in values[:n_lines]:
        ax.plot(x, row, color=color, lw=0.5, alpha=0.5)
    ax.plot(x, q[2], color="k", lw=1.5, label="median")
    ax.set_ylabel(label)
    ax.legend(loc="upper left", fontsize=7)


def plot_data(data, path: str | Path, title: str | None = None) -> Path:
    """Distribution of the input functions and of the clean (or noisy) targets."""
    x_s = data.sensors[:, 0] if data.sensors is not None else np.linspace(0, 1, data.n_sensors)
    u, where_u = data.u_train, "sensor location"
    if data.sensors is not None and data.sensors.shape[1] == 2:  # a 2-D field: one row of it
        on, where_u = slice_2d(data.sensors, coordinate_names(data.meta, 2))
        x_s, u = x_s[on], u[:, on]
    targets = data.s_train_clean if data.s_train_clean is not None else data.s_train
    d = data.y.shape[1]
    fig = figure((11 if d == 1 else 15, 3.6))
    axes = fig.subplots(1, 2 if d == 1 else 3)
    order_s = np.argsort(x_s, kind="stable")
    _spread(axes[0], x_s[order_s], u[:, order_s], "tab:blue", "u")
    axes[0].set_xlabel(where_u)
    axes[0].set_title("input functions u")
    if d == 1:
        t = data.y[:, 0]
        order = np.argsort(t)
        _spread(axes[1], t[order], targets[:, order], "tab:red", "s")
        axes[1].set_xlabel("y")
        axes[1].set_title("targets G(u)(y)")
    else:
        names = coordinate_names(data.meta, d)
        sel, where = slice_2d(data.y, names)
        order = np.argsort(data.y[sel, 0])
        _spread(axes[1], data.y[sel, 0][order], targets[:, sel][:, order], "tab:red", "s")
        axes[1].set_xlabel(where)
        axes[1].set_title(f"targets along {where}")
        sc = axes[2].scatter(data.y[:, 0], data.y[:, 1], c=targets[0], s=12, cmap="viridis")
        fig.colorbar(sc, ax=axes[2])
        axes[2].set_xlabel(names[0])
        axes[2].set_ylabel(names[1])
        axes[2].set_title(f"one target s({', '.join(names[:2])})")
    if title:
        fig.suptitle(title)
    return save(fig, path)


def coordinate_names(meta: dict, d: int) -> tuple[str, ...]:
    """The names of the d columns of y: the problem's (``coordinate_names``) for a file it
    generated, else y (d = 1) or y0, y1, ..."""
    from .problems import PROBLEMS

    names = getattr(PROBLEMS.get(meta.get("problem")), "coordinate_names", None)
    if names is not None and len(names) == d:
        return tuple(names)
    return ("y",) if d == 1 else tuple(f"y{j}" for j in range(d))


def slice_2d(y: np.ndarray, names: tuple[str, ...]) -> tuple[np.ndarray, str]:
    """The points of a 2-D y on one line along its first column, and that line's label: the
    last time for (x, t), the middle row otherwise (a 2-D field's edge is its boundary)."""
    values = np.unique(y[:, 1])
    at = values[-1] if names[1] == "t" else values[len(values) // 2]
    return np.isclose(y[:, 1], at), f"{names[0]} ({names[1]} = {at:g})"


def band_axes(ax, y, truth, mean, lower, upper, title: str, label: str = "95% band",
              names: tuple[str, ...] | None = None) -> None:
    """One trajectory and its band (``label``: which band it is); for 2-D points, one line
    of them (:func:`slice_2d`; ``names``: the columns', :func:`coordinate_names`)."""
    names = names or coordinate_names({}, y.shape[1])
    if y.shape[1] == 1:
        xs, sel = y[:, 0], np.ones(len(y), bool)
        ax.set_xlabel(names[0])
    else:
        sel, where = slice_2d(y, names)
        xs = y[:, 0]
        ax.set_xlabel(where)
    order = np.argsort(xs[sel])
    xv = xs[sel][order]
    ax.fill_between(xv, lower[sel][order], upper[sel][order], color="tab:orange", alpha=0.35,
                    label=label)
    ax.plot(xv, truth[sel][order], "k-", lw=1.5, label="truth")
    ax.plot(xv, mean[sel][order], "--", color="tab:red", lw=1.2, label="mean")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def plot_band(y, truth, mean, lower, upper, path, title: str = "",
              label: str = "95% band", names: tuple[str, ...] | None = None) -> Path:
    fig = figure((5, 3.6))
    ax = fig.subplots()
    band_axes(ax, y, truth, mean, lower, upper, title, label, names)
    return save(fig, path)


def plot_history(history: list[dict], path, title: str = "", burn_in: int | None = None) -> Path:
    """e1 and e2 of the current sample and of the running posterior mean, per epoch."""
    epochs = np.array([r["epoch"] for r in history])
    fig = figure((11, 3.6))
    axes = fig.subplots(1, 2)
    style = {"marker": "o"} if len(history) == 1 else {}  # a closed-form fit: one point
    for ax, key in zip(axes, ("e1", "e2"), strict=True):
        ax.semilogy(epochs, [r[key] for r in history], lw=0.8, label="current sample", **style)
        mean = np.array([r.get(f"{key}_mean", np.nan) for r in history], dtype=float)
        if np.isfinite(mean).any():
            ax.semilogy(epochs, mean, lw=1.5, label="posterior mean so far", **style)
        if burn_in and len(history) > 1:
            ax.axvline(burn_in, color="gray", ls=":", label="end of burn-in")
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"{key} (%)")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return save(fig, path)


def plot_convergence(histories: dict[str, list[dict]], path, title: str = "") -> Path:
    """The paper's convergence figure: e1 (left) and e2 (right) of the current sample for
    the whole run, the first 1000 and the last 1000 epochs (rows), one line per method."""
    fig = figure((11, 9))
    axes = fig.subplots(3, 2, squeeze=False)
    for method, hist in histories.items():
        ep = np.array([r["epoch"] for r in hist])
        n = len(ep)
        windows = (slice(0, n), slice(0, min(n, 1000)), slice(max(0, n - 1000), n))
        for row, win in enumerate(windows):
            for col, key in enumerate(("e1", "e2")):
                vals = np.array([r[key] for r in hist])
                ax = axes[row][col]
                if n == 1:  # a closed-form fit (the linear baseline): a reference level
                    ax.axhline(vals[0], color="k", ls="--", lw=1, label=method)
                else:
                    ax.semilogy(ep[win], vals[win], lw=0.8, label=method)
    names = ("whole run", "first 1000 epochs", "last 1000 epochs")
    for row in range(3):
        for col, key in enumerate(("e1", "e2")):
            ax = axes[row][col]
            ax.set_title(f"{key}, {names[row]}", fontsize=9)
            ax.set_xlabel("epoch")
            ax.set_ylabel(f"{key} (%)")
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save(fig, path)


def plot_bands(y, truth, panels: dict[str, dict], path, title: str = "",
               names: tuple[str, ...] | None = None) -> Path:
    """One test trajectory, one panel per method: its 95% solution band as ``predict``
    gives it (calibrated where the run is), with the share of the truth inside in the
    title (not the paper's e3, which is the raw mean ± 2 std band's)."""
    fig = figure((4.5 * len(panels), 3.6))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (method, p) in zip(axes[0], panels.items(), strict=True):
        inside = (truth >= p["lower"]) & (truth <= p["upper"])
        band_axes(ax, np.asarray(y), truth, p["mean"], p["lower"], p["upper"],
                  f"{method}: the band covers {100 * inside.mean():.0f}% of {inside.size} points",
                  "95% solution band", names)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save(fig, path)


def plot_iteration_time(histories: dict[str, list[dict]], path, title: str = "",
                        sampling: dict[str, float | None] | None = None) -> Path:
    """Seconds per iteration, per epoch, of reSGLD and m-reSGLD, with each one's mean over
    the sampling phase (``sampling``: seconds per iteration, from the run's timing), or
    over the whole run where that was not timed."""
    fig = figure((6, 3.6))
    ax = fig.subplots()
    for method, hist in histories.items():
        sec = np.array([r["sec_per_iter"] for r in hist]) * 1e3
        mean = (sampling or {}).get(method)
        what = (f"sampling: mean {1e3 * mean:.2f} ms" if mean else
                f"mean {sec.mean():.2f} ms, burn-in included")
        ax.plot([r["epoch"] for r in hist], sec, lw=0.6, label=f"{method} ({what})")
    ax.set_xlabel("epoch")
    ax.set_ylabel("ms per iteration")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return save(fig, path)


def raw_coverage(metrics: dict) -> dict[str, float]:
    """A run's pointwise coverage (%) of the test truth by its raw band as ``predict`` gives
    it (Student-t for several chains), level by level; for runs written before that was
    recorded, the Gaussian band's (``metrics["calibration"]``)."""
    raw = (metrics.get("coverage") or {}).get("raw")
    return raw["pointwise"] if raw else metrics["calibration"]


def plot_calibration(calibrations: dict[str, list[dict]], path, title: str = "") -> Path:
    """Observed vs nominal pointwise coverage of the truth (mean over seeds). Keys
    "METHOD raw" and "METHOD calibrated" share the method's colour, dashed and solid."""
    fig = figure((4.5, 4.2))
    ax = fig.subplots()
    ax.plot([0, 100], [0, 100], "k:", lw=1, label="ideal")
    methods = list(dict.fromkeys(key.rsplit(" ", 1)[0] for key in calibrations))
    for key, cals in calibrations.items():
        method, _, kind = key.rpartition(" ")
        levels = sorted(cals[0], key=float)
        observed = [np.mean([c[lv] for c in cals]) for lv in levels]
        ax.plot([100 * float(lv) for lv in levels], observed, "o--" if kind == "raw" else "o-",
                color=f"C{methods.index(method or key) % 10}", label=key)
    ax.set_xlabel("nominal coverage (%)")
    ax.set_ylabel("observed coverage of the truth (%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return save(fig, path)


# ---------------------------------------------------------------- figure sets


RUN_FIGURES = ("history.png", "band.png")  # what write_run_figures writes beside a run


def write_run_figures(out: Path, result, data, config, index: int = 0) -> list[Path]:
    """Beside a run (:data:`RUN_FIGURES`): ``history.png`` (e1/e2 per epoch) and
    ``band.png`` (test function ``index`` with the run's 95% band, calibrated when the run
    was)."""
    post = result.posterior
    pred = post.predict(data.u_test[index : index + 1], data.y, seed=config.seed)
    band = bands(pred["mean"].numpy(), pred["raw_std"].numpy(), post.noise_std,
                 Calibration.from_dict(post.calibration), dof=pred["dof"].numpy())
    mean, lower, upper = (band[k][0] for k in ("mean", "lower", "upper"))
    truth = data.s_test[index]
    inside = 100 * float(np.mean((truth >= lower) & (truth <= upper)))
    what = "calibrated 95% band" if post.calibration else "95% band"
    title = (f"{config.method}: test function {index}, {what} covers {inside:.0f}% of its "
             f"{truth.size} points")
    return [
        plot_history(result.history, out / RUN_FIGURES[0], title=config.method,
                     burn_in=config.burn_in_epochs),
        plot_band(np.asarray(data.y), truth, mean, lower, upper, out / RUN_FIGURES[1],
                  title=title, label=what, names=coordinate_names(data.meta, data.y.shape[1])),
    ]


def scenario_figures(out: Path, problem: str, noise: float, records: dict, methods) -> list[Path]:
    """A scenario of the paper grid, under ``out/figures/``: convergence, the bands of test
    function 0, time per iteration, calibration. ``records``: as :func:`.report.collect`
    returns them (the first seed of each method is drawn)."""
    from .data import load
    from .run import load_run, predict

    name = scenario_name(problem, noise)
    figdir = out / "figures"
    first = {m: records[(problem, noise, m)][0] for m in methods if records[(problem, noise, m)]}
    if not first:
        return []
    title = scenario_title(problem, noise)
    figs = [plot_convergence({m: r["history"] for m, r in first.items()},
                             figdir / f"{name}-convergence.png", title)]
    data = load(data_path(out, problem, noise))
    panels = {}
    for m, rec in first.items():
        pred = predict(load_run(rec["dir"]), data.u_test[:1], data.y, warn=False)
        panels[m] = {k: v[0] for k, v in pred.items()}
    figs.append(plot_bands(data.y, data.s_test[0], panels, figdir / f"{name}-bands.png", title,
                           coordinate_names(data.meta, data.y.shape[1])))
    timed = {m: first[m]["history"] for m in ("resgld", "mresgld") if m in first}
    if len(timed) == 2:
        figs.append(plot_iteration_time(timed, figdir / f"{name}-time.png", title, {
            m: first[m]["timing"].get("sampling_sec_per_iter") for m in timed}))
    calib = {}
    for m in first:
        recs = [r["metrics"] for r in records[(problem, noise, m)]]
        calib[f"{m} raw"] = [raw_coverage(r) for r in recs]
        if all((r.get("coverage") or {}).get("calibrated") for r in recs):
            calib[f"{m} calibrated"] = [r["coverage"]["calibrated"]["pointwise"] for r in recs]
    figs.append(plot_calibration(calib, figdir / f"{name}-calibration.png", title))
    return figs
