"""The field's benchmarks at their resolution: viscous Burgers (128 and 1024 points) and 2-D
Darcy flow (29 × 29 and 85 × 85), 1000 training and 200 test functions, noise of 1% of the
targets' sd on the training targets, `bdeeponet train` at its defaults (m-reSGLD, one
chain) and again with a conv branch and the POD trunk (the ``-pod`` rows, ``POD`` below),
and each once more with its operator's symmetry group declared (the ``-pod-shift`` and
``-pod-square`` rows), each run one torch thread, one after the other.

Writes beside this file: results.md / results.csv (e2 beside the published noise-free
figures, wall time, peak memory, the metric's share of the run, and the observation,
solution and function-level bands' coverage at 50/80/90/95%) and darcy85-function.png
(one test function of the ``darcy-85-pod-square`` run: input, truth, mean, error, band width).

Run: python docs/results/field-benchmarks/make.py [--work DIR] [--only NAME ...] [--recalibrate]
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCHMARKS = {  # name: (problem, parameters)
    "burgers-128": ("burgers", {"n_points": 128}),
    "burgers-1024": ("burgers", {"n_points": 1024}),
    "darcy-29": ("darcy2d", {"n_points": 29}),
    "darcy-85": ("darcy2d", {"n_points": 85}),
}
# each again, on the same data, with a conv branch and the training outputs' modes as a
# fixed trunk (POD-DeepONet's trunk; m-reSGLD needs a trunk to train, so reSGLD)
POD = ("--branch", "conv", "--trunk", "pod", "--method", "resgld", "--width", 128,
       "--warm-lr", 1e-3)
# each once more with the group its operator commutes with declared (``--symmetry``):
# periodic Burgers and its cyclic shifts, Darcy flow on the unit square and the square's
# rotations and reflections; each training function is seen moved by a random element
GROUP = {"burgers": "shift", "darcy2d": "square"}
VARIANTS = {**{f"{name}-pod": (name, POD) for name in BENCHMARKS},
            **{f"{name}-pod-{GROUP[p]}": (name, (*POD, "--symmetry", GROUP[p]))
               for name, (p, _) in BENCHMARKS.items()},
            # the defaults with 200 held-out functions for the calibration instead of 100
            "darcy-85-calibration-0.2": ("darcy-85", ("--calibration", 0.2)),
            # the defaults with other seeds: other held-out splits, initialisations and draws
            **{f"darcy-85-seed-{s}": ("darcy-85", ("--seed", s)) for s in (1, 2, 3, 4)},
            # the Fourier operator (what `train` chooses for fields on one grid, periodic in
            # 1-D) at its defaults, with the symmetry declared
            **{f"{name}-fourier-{GROUP[p]}": (name, ("--network", "fourier", "--symmetry",
                                                    GROUP[p]))
               for name, (p, _) in BENCHMARKS.items()}}
# published relative L2 test errors (%), noise-free data, 1000 training functions:
# Lu et al., CMAME 393 (2022) 114778; Li et al., ICLR 2021 (FNO, Darcy 85 x 85)
PUBLISHED = {
    "burgers-128": "DeepONet 2.15, POD-DeepONet 1.94, FNO 1.93",
    "burgers-1024": "–",
    "darcy-29": "DeepONet 2.98, POD-DeepONet 2.32, FNO 2.41",
    "darcy-85": "FNO 1.08",
}
GOAL = {"burgers-128": 0.5, "burgers-1024": 0.5, "darcy-29": 2.9, "darcy-85": 2.0}
for _name, (_base, _) in VARIANTS.items():
    PUBLISHED[_name], GOAL[_name] = PUBLISHED[_base], GOAL[_base]
NAMES = [*BENCHMARKS, *VARIANTS]
LEVELS = ("0.5", "0.8", "0.9", "0.95")


def bdeeponet(*args) -> tuple[str, float, float]:
    """Run the command line in a child process (one torch thread); (stdout, wall seconds,
    the child's peak resident memory in GB)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "bdeeponet.cli", *map(str, args)],
                                stdout=out, stderr=err, env=os.environ | {"OMP_NUM_THREADS": "1"})
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        out.seek(0), err.seek(0)
        if proc.returncode:
            raise SystemExit(f"bdeeponet {' '.join(map(str, args))} failed:\n{err.read()}")
        return out.read(), seconds, usage.ru_maxrss / 1024**2


def run_one(name: str, work: Path, kept: dict | None = None) -> dict:
    """Train ``name`` and score it; with ``kept`` (its row as committed) refit the finished
    run's calibration instead (``bdeeponet calibrate``) and keep the row's training costs."""
    base, flags_ = VARIANTS.get(name, (name, ()))
    problem, params = BENCHMARKS[base]
    data, run, pred = work / f"{base}.npz", work / name, work / f"{name}-pred.npz"
    flags = [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    if not data.exists():
        bdeeponet("generate", problem, "--noise", 0.01, "--relative-noise", "--n-train", 1000,
                  "--n-test", 200, "--out", data, *flags)
    if kept is None:  # (the rows before the Fourier operator trained the DeepONet)
        network = () if "--network" in flags_ else ("--network", "deeponet")
        _, seconds, peak = bdeeponet("train", data, "--out", run, "--quiet", *network, *flags_)
    else:
        e2 = json.loads((run / "metrics.json").read_text())["e2"]
        if abs(e2 - float(kept["e2"])) > 1e-9 * abs(e2):
            raise SystemExit(f"{run} is not the run of the committed row {name} "
                             f"(e2 {e2} against {kept['e2']}): train it instead")
        bdeeponet("calibrate", run, data)
        seconds, peak = float(kept["train_s"]), float(kept["peak_gb"])
    d = np.load(data)
    np.savez(work / f"{name}-test.npz", u=d["u_test"])
    bdeeponet("predict", run, work / f"{name}-test.npz", "--out", pred)
    metrics = json.loads((run / "metrics.json").read_text())
    timing = json.loads((run / "timing.json").read_text())
    p = np.load(pred)
    truth, sigma = d["s_test"], float(d["noise_std"])
    fresh = truth + sigma * np.random.default_rng(1).standard_normal(truth.shape)
    row = {"benchmark": name, "m": d["u_train"].shape[1], "P": truth.shape[1],
           "e2": metrics["e2"], "goal": GOAL[name], "published": PUBLISHED[name],
           "train_s": round(seconds, 1), "peak_gb": round(peak, 2),
           "metric_share": round(timing.get("metric_seconds", float("nan")) / seconds, 4),
           "sec_per_iter": timing["sec_per_iter"], "rhat": metrics["convergence"]["rhat"],
           "resolved": metrics["calibration_check"]["resolved"],
           "branch": _branch(run)}
    cal = metrics["coverage"]["calibrated"]
    for lv in LEVELS:
        row[f"solution_{lv}"] = cal["pointwise"][lv]
        row[f"function_{lv}"] = cal["function"][lv]
    # the observation band at the levels: from the run's calibrated band at each level
    for lv in LEVELS:
        q = np.load(_predict_level(run, work, name, float(lv)))
        row[f"observation_{lv}"] = 100 * float(np.mean((fresh >= q["obs_lower"])
                                                       & (fresh <= q["obs_upper"])))
    if name == "darcy-85-pod-square":
        figure(d, p, HERE / "darcy85-function.png")
    return row


def _branch(run: Path) -> str:
    """What the run's branch read: ``conv HxW``, ``PCA r`` or ``raw`` (and ``, POD trunk``)."""
    config = json.loads((run / "config.json").read_text())
    model, metrics = config["model"], json.loads((run / "metrics.json").read_text())
    trunk = ", POD trunk" if model.get("fixed_trunk") else ""
    if config["train"].get("symmetry", "none") != "none":
        trunk += f", {config['train']['symmetry']} symmetry"
    if model.get("network") == "fourier":
        patch = model.get("patch", 1)
        return (f"Fourier, {model['width']} channels, {model['modes']} modes, "
                f"{model['depth']} layers" + (f", patches of {patch}" if patch > 1 else "")
                + trunk)
    if model.get("branch_grid"):
        return "conv " + " x ".join(map(str, model["branch_grid"])) + trunk
    pca = (metrics.get("branch_pca") or {}).get("components", 0)
    return (f"PCA {pca}" if pca else "raw") + trunk


def _predict_level(run: Path, work: Path, name: str, level: float) -> Path:
    out = work / f"{name}-pred-{level}.npz"
    bdeeponet("predict", run, work / f"{name}-test.npz", "--out", out, "--level", level)
    return out


def figure(d, p, path: Path, k: int = 0) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = int(round(np.sqrt(d["u_test"].shape[1])))
    maps = {"input a": d["u_test"][k], "truth s": d["s_test"][k], "posterior mean": p["mean"][k],
            "error (mean - truth)": p["mean"][k] - d["s_test"][k],
            "95% band width": p["upper"][k] - p["lower"][k]}
    fig, axes = plt.subplots(1, 5, figsize=(17, 3.4))
    for ax, (title, values) in zip(axes, maps.items(), strict=True):
        im = ax.imshow(values.reshape(n, n).T, origin="lower", extent=(0, 1, 0, 1),
                       cmap="RdBu_r" if title.startswith("error") else "viridis")
        ax.set_title(title)
        fig.colorbar(im, ax=ax, shrink=0.8)
    e2 = 100 * np.linalg.norm(maps["error (mean - truth)"]) / np.linalg.norm(maps["truth s"])
    fig.suptitle(f"2-D Darcy, 85 × 85, test function {k}: relative L2 error {e2:.2f}%")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def read_rows() -> dict[str, dict]:
    """The committed rows of results.csv, by benchmark."""
    if not (HERE / "results.csv").exists():
        return {}
    with open(HERE / "results.csv", newline="") as fh:
        return {r["benchmark"]: r for r in csv.DictReader(fh)}


def write(new: dict[str, dict]) -> None:
    """Merge ``new`` into results.csv as it is now (another make.py may have written rows
    since this one started) and rewrite results.csv and results.md, under a lock."""
    with open(HERE / ".results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = read_rows() | new
        rows = [rows[name] for name in NAMES if name in rows]
        tmp = HERE / "results.csv.tmp"
        with open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        os.replace(tmp, HERE / "results.csv")
        lines = ["| benchmark | m = P | branch | e2 (%) | goal | published, noise-free (%) | train "
                 "| peak memory | metric's share | s / iteration | R̂ |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['benchmark']} | {r['P']} | {r['branch']} | {float(r['e2']):.2f} | "
                         f"≤ {r['goal']} | "
                         f"{r['published']} | {float(r['train_s']):.0f} s | "
                         f"{float(r['peak_gb']):.2f} GB | {100 * float(r['metric_share']):.1f}% | "
                         f"{1e3 * float(r['sec_per_iter']):.1f} ms | {float(r['rhat']):.2f} |")
        lines += ["", "Coverage (%) at 50 / 80 / 90 / 95%:", "",
                  "| benchmark | observation band | solution band | function-level band | "
                  "scale resolved |", "|---|---|---|---|---|"]
        for r in rows:
            cells = [" / ".join(f"{float(r[f'{kind}_{lv}']):.0f}" for lv in LEVELS)
                     for kind in ("observation", "solution", "function")]
            lines.append(f"| {r['benchmark']} | {' | '.join(cells)} | {r['resolved']} |")
        (HERE / "results.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="field-benchmarks-work", help="data and run directories")
    parser.add_argument("--only", nargs="*", choices=NAMES, help="a subset")
    parser.add_argument("--recalibrate", action="store_true",
                        help="refit the finished runs in --work (after a change to the "
                             "calibration only) and keep their committed training costs")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    kept = read_rows() if args.recalibrate else {}
    rows = {}
    for name in args.only or NAMES:
        print(f"{name} ...", flush=True)
        if args.recalibrate and name not in kept:
            raise SystemExit(f"--recalibrate: results.csv has no row {name} to refit")
        rows[name] = run_one(name, work, kept.get(name))
        print(json.dumps(rows[name]), flush=True)
        write(rows)  # each row as it is done: a later failure keeps it


if __name__ == "__main__":
    main()
