"""The band's scale k from the held-out functions' noisy targets (what the library sees)
against the same functions' clean targets and the test set's, per 4-chain run, and the k
the test points want by quintile of the band's spread, and within each function
(docs/bands.md, "Why the noisy targets' k runs low"; four_chain_toy.py shows the same bias on
a band calibrated by construction).

Run: python noisy_vs_clean.py GRID [GRID ...]
(output directories of `bdeeponet reproduce --chains 4`; every run under GRID/runs is
read, with its data GRID/data/SCENARIO.npz; unfinished runs are skipped). One line per run,
then a summary.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

from bdeeponet.calibration import fit_calibration, pins_down, scale_likelihood
from bdeeponet.data import load
from bdeeponet.run import load_run
from bdeeponet.train import band_trusted, split_calibration


def quintile_scales(residual, std) -> list[float]:
    """rms of residual / std in each fifth of the points sorted by std (lowest first)."""
    r, s = np.ravel(residual), np.ravel(std)
    order = np.argsort(s, kind="stable")
    return [float(np.sqrt(np.mean((r[i] / s[i]) ** 2))) for i in np.array_split(order, 5)]


def within_function(residual, std) -> tuple[float, float]:
    """rms of residual / std where a function's std is in the lowest and in the highest fifth
    of its std relative to that function's own median (where the chains happen to agree, and
    where they disagree most)."""
    z, rel = residual / std, std / np.median(std, axis=1, keepdims=True)
    low, high = np.quantile(rel, [0.2, 0.8])
    return float(np.sqrt(np.mean(z[rel < low] ** 2))), float(np.sqrt(np.mean(z[rel > high] ** 2)))


def predictions(run_dir: Path, data):
    """A run's held-out functions and test set: ``(run, held_out, test)`` with held_out =
    (mean, std, dof, noisy targets, clean targets) and test = (mean, std, dof), each (n, P)."""
    run = load_run(run_dir)
    post, seed = run.posterior, run.config.seed
    _, (u_ho, s_noisy) = split_calibration(data, run.config)
    _, (_, s_clean) = split_calibration(dataclasses.replace(data, s_train=data.s_train_clean),
                                        run.config)
    ho, test = post.predict(u_ho, data.y, seed=seed), post.predict(data.u_test, data.y, seed=seed)
    return (run, (*(ho[k].numpy() for k in ("mean", "raw_std", "dof")), s_noisy, s_clean),
            tuple(test[k].numpy() for k in ("mean", "raw_std", "dof")))


def finished_runs(grid: Path) -> list[Path]:
    """The m-reSGLD and reSGLD runs under GRID/runs that finished."""
    runs = sorted(grid.glob("runs/*/*mresgld-*")) + sorted(grid.glob("runs/*/resgld-*"))
    return [r for r in runs if (r / "posterior.pt").exists()]


def one_run(run_dir: Path, data) -> dict:
    run, (mh, sh, dh, s_noisy, s_clean), (mt, st, dt) = predictions(run_dir, data)
    post = run.posterior
    tiny = 1e-12 * post.noise_std  # clean targets: no noise to deconvolve
    cal = fit_calibration(mh, sh, s_noisy, post.noise_std, dof=dh, y=data.y,
                          trust_band=band_trusted(run.config))
    return {"noisy": scale_likelihood(s_noisy - mh, sh, post.noise_std, dh),
            "clean": scale_likelihood(s_clean - mh, sh, tiny, dh)[0],
            "test": scale_likelihood(data.s_test - mt, st, tiny, dt)[0],
            "by_spread": quintile_scales(data.s_test - mt, st),
            "within": within_function(data.s_test - mt, st), "spread_z": cal.spread_z}


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    for grid in map(Path, sys.argv[1:]):
        for run_dir in finished_runs(grid):
            data = load(grid / "data" / f"{run_dir.parent.name}.npz")
            r = one_run(run_dir, data)
            rows.append(r)
            k, se = r["noisy"]
            print(f"{run_dir.parent.name:26s} {run_dir.name:32s} noisy {k:.2f} (se {se:.2f}"
                  f"{', pinned' if pins_down(se) else ''}) clean {r['clean']:.2f} test "
                  f"{r['test']:.2f}  by spread (low->high) "
                  + "/".join(f"{x:.2f}" for x in r["by_spread"])
                  + "  within a function (low/high) " + "/".join(f"{x:.2f}" for x in r["within"])
                  + f"  spread_z {r['spread_z'] if r['spread_z'] is None else round(r['spread_z'], 1)}",
                  flush=True)
    pinned = [r for r in rows if pins_down(r["noisy"][1])]
    ratio = np.array([r["noisy"][0] / r["clean"] for r in pinned])
    print(f"\n{len(rows)} runs, {len(pinned)} with the scale pinned down by the noisy targets; "
          f"there noisy/clean k: median {np.median(ratio):.2f}, range {ratio.min():.2f}-"
          f"{ratio.max():.2f}, below 1 in {int((ratio < 1).sum())}")
    clean = np.array([r["clean"] / r["test"] for r in rows])
    low_high = np.array([r["by_spread"][0] / r["by_spread"][-1] for r in rows])
    print(f"clean held-out / test k over all runs: {clean.min():.2f}-{clean.max():.2f}; "
          f"lowest / highest spread quintile's k: median {np.median(low_high):.2f}, "
          f"range {low_high.min():.2f}-{low_high.max():.2f}, above 1 in "
          f"{int((low_high > 1).sum())}")
    within = np.array([r["within"][0] / r["within"][1] for r in rows])
    print(f"within a function, lowest / highest fifth of the relative spread: median "
          f"{np.median(within):.2f}, range {within.min():.2f}-{within.max():.2f}")


if __name__ == "__main__":
    main()
