"""Learning curves: which inputs to simulate next, chosen by the posterior (`acquire`)
against chosen at random.

A pool of 2000 candidate inputs and a test set of 200, each drawn in equal parts from RBF
GRFs of length scales 0.05, 0.1, 0.2 and 0.4 (where what to simulate next matters). Both
strategies start from the same 100 random pool functions; then each trains `train` at its
defaults (m-reSGLD, one chain, one torch thread) and grows to 200, 300, 500 and 800
functions. Active: the next functions are `acquire`'s picks for the run just trained.
Random: a random draw from the rest of the pool. A function's solution is computed once
for the whole pool; its training target gets the problem's noise when picked.

Writes curves.csv, results.md and learning-curves.png beside this file.

Run: python docs/results/acquisition/make.py [--problems darcy pendulum] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
import torch

from bdeeponet import OperatorData, TrainConfig, get_problem, predict, train
from bdeeponet.acquire import acquire
from bdeeponet.data import fine_grid
from bdeeponet.grf import rbf_grf

HERE = Path(__file__).resolve().parent
NOISE = {"darcy": (0.05, True), "pendulum": (0.01, False)}  # sd, relative to the targets' sd
SCALES = (0.05, 0.1, 0.2, 0.4)
SIZES = (100, 200, 300, 500, 800)


def mixture(problem, n_each: int, rng):
    """Inputs at 100 sensors and clean solutions, n_each from each length scale."""
    x = fine_grid(100)
    u = np.vstack([rbf_grf(x, n_each, rng, length_scale=ls) for ls in SCALES])
    return u[:, :: (x.size - 1) // 99], problem.solve(x, u)


def curve(name: str, seed: int, strategy: str, pool, test, y, sd) -> list[dict]:
    rng = np.random.default_rng([seed, 7])
    u_pool, s_pool = pool
    noisy = s_pool + sd * np.random.default_rng([seed, 11]).standard_normal(s_pool.shape)
    chosen = list(rng.choice(len(u_pool), SIZES[0], replace=False))
    rows = []
    for size, nxt in zip(SIZES, SIZES[1:] + (None,), strict=True):
        data = OperatorData(u_pool[chosen], noisy[chosen], test[0], test[1], y,
                            s_train_clean=s_pool[chosen], noise_std=sd,
                            meta={"problem": name})
        result = train(data, TrainConfig(seed=seed), device="cpu")
        p = predict(result, test[0], y, device="cpu")
        err = np.linalg.norm(p["mean"] - test[1], axis=1) / np.linalg.norm(test[1], axis=1)
        inside = (test[1] >= p["lower"]) & (test[1] <= p["upper"])
        rows.append({"problem": name, "seed": seed, "strategy": strategy, "n": size,
                     "e2": 100 * float(err.mean()), "coverage95": 100 * float(inside.mean())})
        print(rows[-1], flush=True)
        if nxt is None:
            break
        rest = np.setdiff1d(np.arange(len(u_pool)), chosen)
        if strategy == "active":
            picks, _ = acquire(result, u_pool[rest], nxt - size, y)
            chosen += list(rest[picks])
        else:
            chosen += list(rng.choice(rest, nxt - size, replace=False))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="*", default=list(NOISE))
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--out", default=str(HERE / "curves.csv"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in args.problems:
        problem = get_problem(name)
        pool = mixture(problem, 500, np.random.default_rng(100))
        test = mixture(problem, 50, np.random.default_rng(101))
        noise, relative = NOISE[name]
        sd = noise * float(pool[1].std()) if relative else noise
        for seed in args.seeds:
            for strategy in ("active", "random"):
                rows += curve(name, seed, strategy, pool, test, problem.query_points(), sd)
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def summarise(paths) -> None:
    """results.md and learning-curves.png from one or more curves CSVs."""
    rows = [r for p in paths for r in csv.DictReader(open(p))]
    problems = list(dict.fromkeys(r["problem"] for r in rows))
    lines = ["| problem | strategy | " + " | ".join(f"n = {n}" for n in SIZES) + " |",
             "|---|---|" + "---|" * len(SIZES)]
    stats = {}
    for name in problems:
        for strategy in ("active", "random"):
            cells = []
            for n in SIZES:
                e = [float(r["e2"]) for r in rows if r["problem"] == name
                     and r["strategy"] == strategy and int(r["n"]) == n]
                c = [float(r["coverage95"]) for r in rows if r["problem"] == name
                     and r["strategy"] == strategy and int(r["n"]) == n]
                stats[name, strategy, n] = (np.mean(e), np.std(e), np.mean(c))
                cells.append(f"{np.mean(e):.2f} ± {np.std(e):.2f} ({np.mean(c):.0f}%)")
            lines.append(f"| {name} | {strategy} | " + " | ".join(cells) + " |")
    (HERE / "results.md").write_text(
        "e2 (%) of the posterior mean on the mixed test set, mean ± sd over seeds "
        "(95% solution band's coverage):\n\n" + "\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(problems), figsize=(5.2 * len(problems), 3.8), squeeze=False)
    for ax, name in zip(axes[0], problems, strict=True):
        for strategy in ("active", "random"):
            m = np.array([stats[name, strategy, n][0] for n in SIZES])
            s = np.array([stats[name, strategy, n][1] for n in SIZES])
            ax.errorbar(SIZES, m, yerr=s, marker="o", capsize=3, label=strategy)
        ax.set(xscale="log", yscale="log", xlabel="training functions",
               ylabel="test e2 (%)", title=name)
        ax.set_xticks(SIZES, [str(n) for n in SIZES])
        ax.legend()
    fig.tight_layout()
    fig.savefig(HERE / "learning-curves.png", dpi=90)


if __name__ == "__main__":
    main()
