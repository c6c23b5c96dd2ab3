"""``make demo``: the shortest path to a result.

Generates the anti-derivative data (σ = 0.01), draws its distribution figure, trains
m-reSGLD on it and prints the test metrics and where every output is.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .cli import main

OUT = Path("demo-output")


def run() -> int:
    data = OUT / "antiderivative.npz"
    steps = [
        ["generate", "antiderivative", "--noise", "0.01", "--out", str(data)],
        ["plot-data", str(data), "--out", str(OUT / "antiderivative-data.png")],
    ]
    run_dir = OUT / "mresgld"
    if (run_dir / "metrics.json").exists():
        print(f"{run_dir}/ already holds a finished run; delete it to train again")
    else:
        steps.append(["train", str(data), "--method", "mresgld", "--out", str(run_dir),
                      "--epochs", "1000", "--resume"])
    steps.append(["evaluate", str(run_dir), str(data)])
    for argv in steps:
        print("$ bdeeponet " + " ".join(argv), flush=True)
        code = main(argv)
        if code:
            return code
    print(f"\nall outputs are in {OUT.resolve()}/ (data, figures, the run directory)")
    return 0


if __name__ == "__main__":
    sys.exit(run())
