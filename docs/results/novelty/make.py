"""The novelty flag under shift: train at the defaults on GRF inputs of length scale 0.2,
predict for inputs drawn like them and for shifted ones, and score two candidates.

Problems: `darcy` (noise 5% of the targets' sd) and `pendulum` (noise 0.01), 1000
training functions, `train` at its defaults (m-reSGLD, one chain), one torch thread. Test
sets of 200 functions each: as trained (l = 0.2), l = 0.1, l = 0.05, twice the amplitude,
periodic GRF inputs (l = 0.2), piecewise-linear inputs (9 knots of N(0, 1) values).

Candidates: the library's `novelty` (a Mahalanobis distance in the training inputs'
principal components, `bdeeponet/novelty.py`) and the posterior's spread (the mean raw sd
of a function's prediction). AUROC separates each shifted set from the in-distribution
one. Writes results.md, results.csv and error-vs-novelty.png beside this file.

Run: python docs/results/novelty/make.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch

from bdeeponet import TrainConfig, generate, get_problem, predict, train
from bdeeponet.data import fine_grid
from bdeeponet.grf import periodic_grf, rbf_grf

HERE = Path(__file__).resolve().parent
PROBLEMS = {"darcy": (0.05, True), "pendulum": (0.01, False)}  # noise, relative
N_TEST = 200


def piecewise_linear(x, n, rng):
    knots = np.linspace(0, 1, 9)
    return np.array([np.interp(x, knots, rng.standard_normal(9)) for _ in range(n)])


def test_sets(rng):
    """name -> inputs (N_TEST, fine grid) on the fine grid of 100 sensors."""
    x = fine_grid(100)
    return x, {
        "as trained (l = 0.2)": rbf_grf(x, N_TEST, rng, 0.2),
        "l = 0.1": rbf_grf(x, N_TEST, rng, 0.1),
        "l = 0.05": rbf_grf(x, N_TEST, rng, 0.05),
        "amplitude x2": 2 * rbf_grf(x, N_TEST, rng, 0.2),
        "periodic GRF": periodic_grf(x, N_TEST, rng, 0.2),
        "piecewise linear": piecewise_linear(x, N_TEST, rng),
    }


def auroc(inside, outside) -> float:
    """P(score of a shifted input > score of an in-distribution one), ties counted half."""
    a, b = np.asarray(inside)[:, None], np.asarray(outside)[None, :]
    return float(np.mean(b > a) + 0.5 * np.mean(b == a))


def main() -> None:
    torch.set_num_threads(1)
    rows, points = [], []
    for name, (noise, relative) in PROBLEMS.items():
        problem = get_problem(name)
        data = generate(problem, noise, np.random.default_rng(0), relative=relative)
        result = train(data, TrainConfig(), device="cpu")
        x, sets = test_sets(np.random.default_rng(1))
        stride = (x.size - 1) // 99
        scores, base = {}, next(iter(sets))  # the in-distribution set comes first
        for label, u_fine in sets.items():
            u, truth = u_fine[:, ::stride], problem.solve(x, u_fine)
            p = predict(result, u, data.y, device="cpu", warn=False)
            spread = p["raw_std"].mean(axis=1)
            err = np.linalg.norm(p["mean"] - truth, axis=1) / np.linalg.norm(truth, axis=1)
            inside = (truth >= p["lower"]) & (truth <= p["upper"])
            scores[label] = (p["novelty"], spread)
            keep = ~p["novel"]
            rows.append({
                "problem": name, "test set": label, "e2 (%)": 100 * err.mean(),
                "95% band covers (%)": 100 * inside.mean(),
                "flagged (%)": 100 * p["novel"].mean(),
                "unflagged: band covers (%)": 100 * inside[keep].mean() if keep.any() else np.nan,
                "AUROC novelty": auroc(scores[base][0], p["novelty"]),
                "AUROC spread": auroc(scores[base][1], spread),
            })
            points += [(name, label, n, 100 * e) for n, e in zip(p["novelty"], err, strict=True)]
    write(rows, points)


def write(rows, points) -> None:
    with open(HERE / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join(("–" if np.isnan(v) else f"{v:.2f}")
                                       if isinstance(v, float) else str(v)
                                       for v in r.values()) + " |")
    (HERE / "results.md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, name in zip(axes, PROBLEMS, strict=True):
        for label in dict.fromkeys(lb for p, lb, *_ in points if p == name):
            xs = [n for p, lb, n, _ in points if p == name and lb == label]
            ys = [e for p, lb, _, e in points if p == name and lb == label]
            ax.scatter(xs, ys, s=6, label=label, alpha=0.6)
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
        ax.set(xscale="log", yscale="log", xlabel="novelty (1 = flag threshold at 5%)",
               ylabel="relative L2 error (%)", title=name)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "error-vs-novelty.png", dpi=90)


if __name__ == "__main__":
    main()
