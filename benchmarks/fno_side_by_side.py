"""On one data file, at one thread count: how does `bdeeponet train` compare with
neuraloperator's FNO trained by FNO's published recipe, at equal wall time?

FNO's recipe (Li et al., ICLR 2021, 2-D Darcy): 12 modes a side, 32 channels, 4 Fourier
layers, Adam at 1e-3 with weight decay 1e-4 halved every 100 of 500 epochs, batch 20, the
relative L2 loss, inputs and outputs standardised pointwise, the grid's coordinates as
extra input channels. It trains on every training function of the file (their noisy
targets); `bdeeponet train` holds out its calibration share of them. Both are scored by the
relative L2 error (%) of their prediction (for bdeeponet the posterior mean) on the file's
test targets. bdeeponet runs twice: at its defaults, then with `--epochs` ``--longer`` (4) times the
epochs the defaults chose. FNO's test error is recorded after every epoch until it has run
as long as the longer run; the table gives what it had reached at each bdeeponet run's wall
time (its last epoch finished by then); its whole history (seconds, e2 after each epoch) is
written to ``fno-history.json`` in the work folder.

neuraloperator is an optional extra (`pip install --no-deps neuraloperator==2.0.0 tensorly
tensorly-torch opt-einsum h5py`); without it only bdeeponet runs, and the script says so.

Run: python benchmarks/fno_side_by_side.py DATA.npz [--threads T] [--train-args "..."]
         [--longer 4] [--fno-budget SECONDS] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def relative_l2(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(100 * np.mean(np.linalg.norm(pred - truth, axis=1)
                               / np.linalg.norm(truth, axis=1)))


def train_bdeeponet(data: Path, out: Path, threads: int,
                    extra: list[str]) -> tuple[float, float, int]:
    """(e2 %, wall seconds, epochs) of `bdeeponet train DATA` with ``extra`` flags, in a
    child."""
    t0 = time.perf_counter()
    env = os.environ | {"OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run([sys.executable, "-m", "bdeeponet.cli", "train", str(data), "--out",
                           str(out), "--quiet", *extra], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"bdeeponet train failed:\n{proc.stderr}")
    epochs = json.loads((out / "timing.json").read_text())["epochs"]
    return json.loads((out / "metrics.json").read_text())["e2"], seconds, epochs


def train_fno(d: dict, budget: float, threads: int, seed: int = 0) -> list[tuple[float, float]]:
    """[(wall seconds, test e2 %)] after each epoch of FNO's recipe, until 500 epochs or
    ``budget`` seconds."""
    from neuralop.models import FNO

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    sensors = d["sensors"]
    axes = [np.unique(sensors[:, j]) for j in range(sensors.shape[1])]
    grid = tuple(len(a) for a in axes)

    def fields(a):
        return torch.as_tensor(a, dtype=torch.float32).reshape(-1, 1, *grid)

    u, s, ut = fields(d["u_train"]), fields(d["s_train"]), fields(d["u_test"])
    u_mean, u_sd = u.mean(0), u.std(0) + 1e-6
    s_mean, s_sd = s.mean(0), s.std(0) + 1e-6
    model = FNO(n_modes=(12,) * len(grid), in_channels=1, out_channels=1, hidden_channels=32,
                n_layers=4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)
    gen = torch.Generator().manual_seed(seed)
    history, t0 = [], time.perf_counter()
    for _ in range(500):
        model.train()
        for idx in torch.randperm(len(u), generator=gen).split(20):
            pred = model((u[idx] - u_mean) / u_sd) * s_sd + s_mean
            diff = (pred - s[idx]).flatten(1).norm(dim=1)
            loss = (diff / s[idx].flatten(1).norm(dim=1)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
        model.eval()
        with torch.no_grad():
            pred = torch.cat([model((b - u_mean) / u_sd) * s_sd + s_mean for b in ut.split(50)])
        history.append((time.perf_counter() - t0,
                        relative_l2(pred.flatten(1).double().numpy(), d["s_test"])))
        if history[-1][0] > budget:
            break
    return history


def at(history: list[tuple[float, float]], seconds: float) -> str:
    """FNO's test error at ``seconds`` (its last epoch finished by then)."""
    done = [e for t, e in history if t <= seconds]
    if not done:
        return "– (no epoch yet)"
    last = max(t for t, _ in history if t <= seconds)
    return f"{done[-1]:.2f} (epoch {len(done)}, {last:.0f} s)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--train-args", default="", help="flags for bdeeponet train (default: none)")
    ap.add_argument("--longer", type=int, default=4,
                    help="the second bdeeponet run takes this many times the defaults' epochs "
                         "(0: no second run)")
    ap.add_argument("--fno-budget", type=float, default=None,
                    help="FNO's wall-time budget in seconds (default: the longer run's, or 4x "
                         "the defaults' without one)")
    ap.add_argument("--work", type=Path, default=None, help="where the run directories go")
    args = ap.parse_args()
    d = dict(np.load(args.data))
    print(f"data: {args.data} ({len(d['u_train'])} training, {len(d['u_test'])} test functions), "
          f"{args.threads} thread(s), torch {torch.__version__}", flush=True)
    work = args.work or Path(tempfile.mkdtemp())
    extra = shlex.split(args.train_args)
    runs = []  # (label, e2, seconds)
    e2, seconds, epochs = train_bdeeponet(args.data, work / "run", args.threads, extra)
    runs.append((f"bdeeponet train {args.train_args or '(defaults)'} ({epochs} epochs)", e2,
                 seconds))
    print(f"{runs[-1][0]}: e2 {e2:.2f}% in {seconds:.0f} s", flush=True)
    if args.longer > 0:
        more = [*extra, "--epochs", str(args.longer * epochs)]
        e2, seconds, _ = train_bdeeponet(args.data, work / "run-longer", args.threads, more)
        runs.append((f"bdeeponet train {shlex.join(more)}", e2, seconds))
        print(f"{runs[-1][0]}: e2 {e2:.2f}% in {seconds:.0f} s", flush=True)
    try:
        import neuralop  # noqa: F401
    except ImportError:
        print("neuraloperator is not installed: FNO skipped (see this script's docstring)")
        return
    budget = args.fno_budget or (runs[-1][2] if args.longer > 0 else 4 * runs[0][2])
    history = train_fno(d, budget, args.threads)
    (work / "fno-history.json").write_text(json.dumps(
        [{"seconds": t, "e2": e} for t, e in history], indent=1))
    print("| bdeeponet run | wall time | bdeeponet e2 (%) | FNO (its recipe) at that time |")
    print("|---|---|---|---|")
    for label, e2, seconds in runs:
        print(f"| {label} | {seconds:.0f} s | {e2:.2f} | {at(history, seconds)} |")
    print(f"FNO after {len(history)} epochs ({history[-1][0]:.0f} s): {history[-1][1]:.2f}%")


if __name__ == "__main__":
    main()
