"""The closed-form check of tests/closed_form.py, drawn: each sampler's predictive sd at every
test point against the exact one, and the numbers the test suite checks.

Run: python benchmarks/closed_form_check.py [--out DIR]   (writes closed-form-check.png/.json)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the suite's check

from closed_form import LinearOperator, closed_form_problem, compare, sample_predictions

from bdeeponet import SGLD, MReSGLD, ReSGLD
from bdeeponet.plots import figure, save

SAMPLERS = {
    "SGLD (default)": lambda: SGLD(),
    "reSGLD, cold replica (default)": lambda: ReSGLD(),
    "m-reSGLD, cold replica (default)": lambda: MReSGLD(groups=LinearOperator.groups),
    "SGLD, control variate": lambda: SGLD(control_variate=True),
    "pSGLD, rmsprop metric (before)": lambda: SGLD(metric="rmsprop"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder for the figure and the numbers")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    problem = closed_form_problem()
    results, sds = {}, {}
    for label, make in SAMPLERS.items():
        t0 = time.perf_counter()
        preds = sample_predictions(make(), problem)
        results[label] = {**compare(preds, problem), "seconds": time.perf_counter() - t0}
        sds[label] = preds.std(0, ddof=1).ravel()
        print(f"{label:<34} " + "  ".join(f"{k} {v:.3g}" for k, v in results[label].items()))
    fig = figure((5.5, 5))
    ax = fig.subplots()
    exact = problem.sd.ravel()
    for label, sd in sds.items():
        ax.loglog(exact, sd, ".", ms=1.5, alpha=0.4,
                  label=f"{label}: median ratio {results[label]['sd_ratio']:.2f}")
    lims = [exact.min() * 0.8, max(max(s.max() for s in sds.values()), exact.max()) * 1.2]
    ax.plot(lims, lims, "k:", lw=1, label="exact")
    ax.set_xlabel("exact predictive sd")
    ax.set_ylabel("sampled predictive sd")
    ax.set_title("closed form: N=1000 GRF inputs, P=100, σ=0.01, 10,200 parameters", fontsize=8)
    ax.legend(fontsize=6, markerscale=6)
    save(fig, out / "closed-form-check.png")
    (out / "closed-form-check.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'closed-form-check.png'} and .json; exact 95% coverage "
          f"{np.mean(results[next(iter(results))]['exact_coverage']):.1f}%")


if __name__ == "__main__":
    main()
