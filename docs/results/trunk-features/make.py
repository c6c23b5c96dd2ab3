"""The trunk's Fourier features on the paper's problems: `bdeeponet train` at its defaults
(m-reSGLD, one chain, 2000 epochs, seed 0) with `--trunk-harmonics 0` (the query
coordinates alone) and `--trunk-harmonics 8` (the default: cos and sin of π k y / L,
k = 1..8, beside each coordinate), on data made by `bdeeponet generate PROBLEM --noise SD
--seed 0` (1000 training and 100 test functions, 100 sensors).

Writes beside this file: results.md and results.csv (test e2 of the posterior mean, the
calibrated solution band's and the function-level band's coverage of the clean truth at
50/80/90/95%, the split R̂, seconds per iteration).

Run: python docs/results/trunk-features/make.py [--work DIR]   (about 25 min, one thread)
A run directory already holding metrics.json is read, not trained again.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = (("antiderivative", 0.01), ("pendulum", 0.01), ("pendulum", 0.05),
             ("diffusion_reaction", 0.01), ("advection_diffusion", 0.01))
HARMONICS = (0, 8)
LEVELS = ("0.5", "0.8", "0.9", "0.95")


def bdeeponet(*args) -> None:
    proc = subprocess.run([sys.executable, "-m", "bdeeponet.cli", *map(str, args)],
                          capture_output=True, text=True, env=os.environ | {"OMP_NUM_THREADS": "1"})
    if proc.returncode:
        raise SystemExit(f"bdeeponet {' '.join(map(str, args))} failed:\n{proc.stderr}")


def run_one(problem: str, noise: float, k: int, work: Path) -> dict:
    data, run = work / f"{problem}-{noise}.npz", work / f"{problem}-{noise}-k{k}"
    if not data.exists():
        bdeeponet("generate", problem, "--noise", noise, "--seed", 0, "--out", data)
    if not (run / "metrics.json").exists():
        bdeeponet("train", data, "--out", run, "--threads", 1, "--quiet", "--trunk-harmonics", k)
    metrics = json.loads((run / "metrics.json").read_text())
    timing = json.loads((run / "timing.json").read_text())
    cal = metrics["coverage"]["calibrated"]
    row = {"problem": problem, "noise": noise, "trunk_harmonics": k, "e2": metrics["e2"],
           "rhat": metrics["convergence"]["rhat"], "sec_per_iter": timing["sec_per_iter"]}
    row.update({f"solution_{lv}": cal["pointwise"][lv] for lv in LEVELS})
    row.update({f"function_{lv}": cal["function"][lv] for lv in LEVELS})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="trunk-features-work", help="data and run directories")
    work = Path(parser.parse_args().work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for problem, noise in SCENARIOS:
        for k in HARMONICS:
            rows.append(run_one(problem, noise, k, work))
            print(json.dumps(rows[-1]), flush=True)
    with open(HERE / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| problem | noise | K | e2 (%) | solution band 50 / 80 / 90 / 95 (%) | "
             "function-level band | R̂ | ms / iteration |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bands = [" / ".join(f"{r[f'{kind}_{lv}']:.0f}" for lv in LEVELS)
                 for kind in ("solution", "function")]
        lines.append(f"| {r['problem']} | {r['noise']} | {r['trunk_harmonics']} | {r['e2']:.2f} | "
                     f"{bands[0]} | {bands[1]} | {r['rhat']:.2f} | {1e3 * r['sec_per_iter']:.1f} |")
    (HERE / "results.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
