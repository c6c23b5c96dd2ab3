"""The Darcy 85 × 85 runs at the defaults (seeds 0-4, and 200 held-out functions) scored on
1000 fresh test functions: how much of their bands' distance from nominal on the field's
200 test functions is that test set's draw.

The fresh functions come from `bdeeponet generate darcy2d --param n_points=85 --n-train 10
--n-test 1000 --seed 11 --noise 0.01 --out FRESH.npz` (clean test truths; seed 11, so other
inputs than the benchmark's). Each is observed once with the benchmark's σ (that of
`darcy-85.npz`), and each run's band is computed at 50/80/90/95% from one prediction.
Prints one JSON line per run: e2 and the coverage (%) of the observation band (of the noisy
observations, ± its standard error clustered by function) and of the solution band (of the
clean truths), and the observation band's coverage of the noisy targets of the run's own
held-out functions, the sample it was fitted on (``held_out_*``).

Run: python docs/results/field-benchmarks/fresh_test.py FRESH.npz WORK/darcy-85.npz RUN ...
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch

from bdeeponet import load_run
from bdeeponet.calibration import Calibration, bands
from bdeeponet.data import load
from bdeeponet.train import split_calibration

LEVELS = (0.5, 0.8, 0.9, 0.95)


def main(fresh_path: str, data_path: str, runs: list[str]) -> None:
    torch.set_num_threads(1)
    fresh, data = np.load(fresh_path), load(data_path)
    sigma = float(data.noise_std)
    u, s, y = fresh["u_test"], fresh["s_test"], fresh["y"]
    observed = s + sigma * np.random.default_rng(5).standard_normal(s.shape)
    for run_dir in runs:
        run = load_run(run_dir)
        post = run.posterior
        pred = post.predict(u, y, seed=0)
        mean, std, dof = (pred[k].numpy() for k in ("mean", "raw_std", "dof"))
        cal = Calibration.from_dict(post.calibration)
        _, (u_held, s_held) = split_calibration(data, run.config)
        held = post.predict(u_held, data.y, seed=0)
        held_mean, held_std, held_dof = (held[k].numpy() for k in ("mean", "raw_std", "dof"))
        err = np.linalg.norm(mean - s, axis=1) / np.linalg.norm(s, axis=1)
        row = {"run": run_dir.rstrip("/").rsplit("/", 1)[-1], "e2": round(100 * err.mean(), 3)}
        for level in LEVELS:
            b = bands(mean, std, sigma, cal, level, level, dof)
            obs = 100 * np.mean((observed >= b["obs_lower"]) & (observed <= b["obs_upper"]), 1)
            row[f"observation_{level}"] = round(float(obs.mean()), 2)
            row[f"observation_se_{level}"] = round(float(obs.std(ddof=1) / np.sqrt(len(obs))), 2)
            row[f"solution_{level}"] = round(100 * float(np.mean((s >= b["lower"])
                                                                 & (s <= b["upper"]))), 2)
            h = bands(held_mean, held_std, sigma, cal, level, level, held_dof)
            inside = 100 * np.mean((s_held >= h["obs_lower"]) & (s_held <= h["obs_upper"]), 1)
            row[f"held_out_{level}"] = round(float(inside.mean()), 2)
            row[f"held_out_se_{level}"] = round(float(inside.std(ddof=1)
                                                      / np.sqrt(len(inside))), 2)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
