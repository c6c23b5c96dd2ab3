"""Redraw a grid folder's calibration figures (FOLDER/figures/SCENARIO-calibration.png) from its
calibration.csv, where the run directories that `bdeeponet reproduce` would draw them from
are gone: raw and calibrated pointwise coverage per method, one seed.

Run: python docs/results/redraw_calibration.py FOLDER
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from bdeeponet.grid import scenario_name
from bdeeponet.plots import plot_calibration

LEVELS = ("0.5", "0.8", "0.9", "0.95", "0.99")


def main() -> None:
    folder = Path(sys.argv[1])
    with open(folder / "calibration.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for key in dict.fromkeys((r["problem"], r["noise"]) for r in rows):
        calib = {}
        for r in (r for r in rows if (r["problem"], r["noise"]) == key):
            calib[f"{r['method']} raw"] = [{lv: float(r[f"raw_{lv}"]) for lv in LEVELS}]
            calib[f"{r['method']} calibrated"] = [{lv: float(r[f"cal_{lv}"]) for lv in LEVELS}]
        problem, noise = key[0], float(key[1])
        path = folder / "figures" / f"{scenario_name(problem, noise)}-calibration.png"
        print(plot_calibration(calib, path, f"{problem}, σ = {noise:g}"))


if __name__ == "__main__":
    main()
