"""How does a reSGLD iteration scale with the functions per batch, the query points P and
the width of the nets?

One knob at a time, the others at the grid's defaults (batch 100, width 64): the batch on
the anti-derivative (P = 100); P on advection-diffusion with an n x n (x, t) query grid;
the width on the anti-derivative. Sampling phase, ratios to the default within rounds, and
a least-squares line (fixed cost + cost per unit) for batch and P.

Run: python benchmarks/resgld_scaling.py [--quick]
"""

from __future__ import annotations

import argparse

import numpy as np
from common import fmt_ms, fmt_ratio, header, interleaved, median_iqr, problem_data, ratio, sampler_on


def table(title: str, column: str, chains: dict, base, rounds: int, min_run_time: float,
          fit: bool) -> None:
    times = interleaved({k: c.step for k, c in chains.items()}, rounds, min_run_time)
    print(f"\n{title}; {rounds} rounds")
    head = f"{column:>8}{'ms / iteration [IQR]':>26}{f'x {column} = {base} [IQR]':>26}"
    print(head)
    print("-" * len(head))
    for k, t in times.items():
        print(f"{k:>8}{fmt_ms(t):>26}{fmt_ratio(ratio(t, times[base])):>26}")
    if fit and len(times) > 1:
        slope, intercept = np.polyfit(list(times), [1e3 * median_iqr(t)[0] for t in times.values()], 1)
        print(f"least-squares line: {intercept:.3f} ms + {1e3 * slope:.2f} us x {column}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes, 3 rounds of 0.2 s")
    args = parser.parse_args()
    header(" ".join(__doc__.split("\n\n")[0].split()))
    if args.quick:
        rounds, min_run_time = 3, 0.2
        batches, grids, widths = (25, 100, 400), (10, 32), (64, 256)
    else:
        rounds, min_run_time = 7, 1.0
        batches, grids, widths = (25, 50, 100, 200, 400), (10, 20, 32, 50), (32, 64, 128, 256)
    anti = problem_data("antiderivative")
    table("functions per batch (anti-derivative, P = 100)", "batch",
          {b: sampler_on(anti, "resgld", batch_size=b) for b in batches}, 100, rounds,
          min_run_time, fit=True)
    chains = {n * n: sampler_on(problem_data("advection_diffusion", nx=n, nt=n), "resgld")
              for n in grids}
    table("query points (advection-diffusion on an n x n grid, batch 100)", "P", chains,
          1024 if 1024 in chains else max(chains), rounds, min_run_time, fit=True)
    table("width of the hidden layers (anti-derivative, batch 100, latent 64)", "width",
          {w: sampler_on(anti, "resgld", width=w) for w in widths}, 64, rounds, min_run_time,
          fit=False)


if __name__ == "__main__":
    main()
