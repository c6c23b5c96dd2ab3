"""Learning curves: which inputs to simulate next, chosen by the posterior (`acquire`)
against chosen at random.

A pool of 2000 candidate inputs and a test set of 200, each drawn from RBF GRFs of length
scales 0.05, 0.1, 0.2 and 0.4 (where what to simulate next matters), in equal parts or in
the shares ``--weights`` gives (both sets alike). Both
strategies start from the same 100 random pool functions; then each trains `train` at its
defaults (m-reSGLD, one chain, one torch thread) and grows to 200, 300, 500 and 800
functions. Active: the next functions are `acquire`'s picks (``--criterion``) for the run
just trained. Random: a random draw from the rest of the pool. Oracle: the functions of
the rest whose actual relative error under the run's posterior mean is largest (their
solutions are known here, as they are not in use): how far picking the worst-predicted
inputs can go. A function's solution is
computed once for the whole pool; its training target gets the problem's noise when picked.
``--steps S``: every run trains S minibatch steps instead of 2000 epochs (whose step count
grows with the training set), so that sizes differ in their data only.

Writes the rows to ``--out`` (CSV); ``summarise(paths)`` makes results.md and
learning-curves.png beside this file from one or more of them.

Run: python docs/results/acquisition/make.py [--problems darcy pendulum] [--seeds 0 1 2]
     [--strategies active random oracle] [--criterion reduction] [--steps S]
     [--weights W0.05 W0.1 W0.2 W0.4] [--out F.csv]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
import torch

from bdeeponet import OperatorData, TrainConfig, get_problem, predict, train
from bdeeponet.acquire import CRITERIA, ERRORS, acquire
from bdeeponet.data import fine_grid
from bdeeponet.grf import rbf_grf

HERE = Path(__file__).resolve().parent
NOISE = {"darcy": (0.05, True), "pendulum": (0.01, False)}  # sd, relative to the targets' sd
SCALES = (0.05, 0.1, 0.2, 0.4)
SIZES = (100, 200, 300, 500, 800)


def counts(total: int, weights) -> list[int]:
    """``total`` split over the length scales in proportion to ``weights`` (rounded, the
    largest share taking the remainder)."""
    w = np.asarray(weights, dtype=float) / np.sum(weights)
    n = [int(round(total * x)) for x in w]
    n[int(np.argmax(w))] += total - sum(n)
    return n


def mixture(problem, n_each, rng):
    """Inputs at 100 sensors, clean solutions and each function's length scale:
    ``n_each[i]`` functions from length scale ``SCALES[i]``."""
    x = fine_grid(100)
    u = np.vstack([rbf_grf(x, n, rng, length_scale=ls) for n, ls in zip(n_each, SCALES,
                                                                         strict=True)])
    return u[:, :: (x.size - 1) // 99], problem.solve(x, u), np.repeat(SCALES, n_each)


def curve(name: str, seed: int, strategy: str, pool, test, y, sd, steps=None,
          criterion=CRITERIA[0], error=ERRORS[0], weights="1:1:1:1") -> list[dict]:
    """One learning curve. ``steps``: each run trains that many minibatch steps (epochs =
    steps / batches per epoch) instead of ``train``'s default 2000 epochs, whose step count
    grows with the training set."""
    rng = np.random.default_rng([seed, 7])
    u_pool, s_pool, scale_of = pool
    noisy = s_pool + sd * np.random.default_rng([seed, 11]).standard_normal(s_pool.shape)
    chosen = list(rng.choice(len(u_pool), SIZES[0], replace=False))
    rows = []
    for size, nxt in zip(SIZES, SIZES[1:] + (None,), strict=True):
        data = OperatorData(u_pool[chosen], noisy[chosen], test[0], test[1], y,
                            s_train_clean=s_pool[chosen], noise_std=sd,
                            meta={"problem": name})
        config = TrainConfig(seed=seed)
        if steps:
            config = TrainConfig(seed=seed, epochs=-(-steps // -(-size // config.batch_size)))
        result = train(data, config, device="cpu")
        p = predict(result, test[0], y, device="cpu", warn=False)
        err = np.linalg.norm(p["mean"] - test[1], axis=1) / np.linalg.norm(test[1], axis=1)
        inside = (test[1] >= p["lower"]) & (test[1] <= p["upper"])
        rows.append({"problem": name, "steps": steps or "default", "mixture": weights,
                     "seed": seed,
                     "strategy": f"active-{criterion}-{error}" if strategy == "active" else
                     strategy,
                     "n": size, "e2": 100 * float(err.mean()),
                     "coverage95": 100 * float(inside.mean()),
                     **{f"e2_l{ls}": 100 * float(err[test[2] == ls].mean()) for ls in SCALES},
                     **{f"picked_l{ls}": int(np.sum(scale_of[chosen] == ls)) for ls in SCALES}})
        print(rows[-1], flush=True)
        if nxt is None:
            break
        rest = np.setdiff1d(np.arange(len(u_pool)), chosen)
        if strategy == "active":
            picks, _ = acquire(result, u_pool[rest], nxt - size, y, criterion, error)
            chosen += list(rest[picks])
        elif strategy == "oracle":  # the largest actual errors: what no posterior can beat
            m = predict(result, u_pool[rest], y, device="cpu", warn=False)["mean"]
            worst = np.linalg.norm(m - s_pool[rest], axis=1) / np.linalg.norm(s_pool[rest], axis=1)
            chosen += list(rest[np.argsort(-worst, kind="stable")[: nxt - size]])
        else:
            chosen += list(rng.choice(rest, nxt - size, replace=False))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="*", default=list(NOISE))
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--out", default=str(HERE / "curves.csv"))
    ap.add_argument("--strategies", nargs="*", default=["active", "random"],
                    choices=["active", "random", "oracle"])
    ap.add_argument("--criterion", choices=CRITERIA, default=CRITERIA[0])
    ap.add_argument("--error", choices=ERRORS, default=ERRORS[0])
    ap.add_argument("--steps", type=int, default=None,
                    help="minibatch steps of every run (default: train's 2000 epochs)")
    ap.add_argument("--weights", nargs=4, type=float, default=[1, 1, 1, 1],
                    metavar=("W0.05", "W0.1", "W0.2", "W0.4"),
                    help="the length scales' shares of the pool and of the test set "
                         "(default: equal parts)")
    args = ap.parse_args()
    if min(args.weights) <= 0:
        ap.error("--weights must all be > 0 (each length scale in the pool and the test set)")
    torch.set_num_threads(1)
    rows = []
    for name in args.problems:
        problem = get_problem(name)
        pool = mixture(problem, counts(2000, args.weights), np.random.default_rng(100))
        test = mixture(problem, counts(200, args.weights), np.random.default_rng(101))
        weights = ":".join(f"{w:g}" for w in args.weights)
        noise, relative = NOISE[name]
        sd = noise * float(pool[1].std()) if relative else noise
        for seed in args.seeds:
            for strategy in args.strategies:
                rows += curve(name, seed, strategy, pool, test, problem.query_points(), sd,
                              args.steps, args.criterion, args.error, weights)
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def summarise(paths) -> None:
    """results.md and learning-curves.png from one or more curves CSVs: per problem and
    step budget, each strategy's e2 (mean ± sd over seeds) against the training set size."""
    rows = [r for p in paths for r in csv.DictReader(open(p))]
    for r in rows:  # files written before --weights drew equal parts
        r["mixture"] = r.get("mixture") or "1:1:1:1"
    panels = list(dict.fromkeys((r["problem"], r["steps"], r["mixture"]) for r in rows))
    lines = ["| problem | steps | pool | strategy | " + " | ".join(f"n = {n}" for n in SIZES)
             + " |", "|---|---|---|---|" + "---|" * len(SIZES)]
    stats = {}
    for panel in panels:
        mine = [r for r in rows if (r["problem"], r["steps"], r["mixture"]) == panel]
        for strategy in dict.fromkeys(r["strategy"] for r in mine):
            cells = []
            for n in SIZES:
                at = [r for r in mine if r["strategy"] == strategy and int(r["n"]) == n]
                e = [float(r["e2"]) for r in at]
                c = [float(r["coverage95"]) for r in at]
                stats[panel, strategy, n] = (np.mean(e), np.std(e))
                cells.append(f"{np.mean(e):.2f} ± {np.std(e):.2f} ({np.mean(c):.0f}%)")
            lines.append(f"| {panel[0]} | {panel[1]} | {panel[2]} | {strategy} | "
                         + " | ".join(cells) + " |")
    (HERE / "results.md").write_text(
        "e2 (%) of the posterior mean on the mixed test set, mean ± sd over seeds "
        "(95% solution band's coverage). steps: minibatch steps of every run, or `train`'s "
        "default 2000 epochs; pool: the shares of length scales 0.05, 0.1, 0.2 and 0.4 in "
        "the pool and the test set:\n\n" + "\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(k[1] for k in stats))  # one colour per strategy throughout
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        for strategy in dict.fromkeys(k[1] for k in stats if k[0] == panel):
            m = np.array([stats[panel, strategy, n][0] for n in SIZES])
            sd = np.array([stats[panel, strategy, n][1] for n in SIZES])
            ax.errorbar(SIZES, m, yerr=sd, marker="o", capsize=3, label=strategy,
                        color=f"C{names.index(strategy)}")
        steps = "2000 epochs" if panel[1] == "default" else f"{int(panel[1])} steps"
        pool = "" if panel[2] == "1:1:1:1" else f", pool {panel[2]}"
        ax.set(xscale="log", yscale="log", xlabel="training functions",
               ylabel="test e2 (%)", title=f"{panel[0]}, {steps}{pool}")
        ax.set_xticks(SIZES, [str(n) for n in SIZES])
        ax.tick_params(axis="x", which="minor", labelbottom=False)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "learning-curves.png", dpi=90)


if __name__ == "__main__":
    main()
