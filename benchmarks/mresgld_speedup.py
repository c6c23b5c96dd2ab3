"""Is an m-reSGLD iteration cheaper than a reSGLD one, as the paper reports (0.77-0.83)?

After burn-in m-reSGLD's hot replica updates only the branch (probability c) or only the
trunk, and computes no gradient for the other net; the cold replica is as in reSGLD. Timed
in the sampling phase at the grid's defaults (c = 0.7) and at the two extremes, c = 1
(branch only: the trunk's output is reused, so its forward is skipped too) and c = 0
(trunk only), on the anti-derivative (P = 100) and a PDE (P = 1024). Ratios are to reSGLD,
within rounds.

Run: python benchmarks/mresgld_speedup.py [--quick] [--pde advection_diffusion|diffusion_reaction]
"""

from __future__ import annotations

import argparse

from common import fmt_ms, fmt_ratio, header, interleaved, problem_data, ratio, sampler_on

from bdeeponet.grid import PAPER_TIME_RATIO

VARIANTS = {
    # label: (method, TrainConfig overrides)
    "reSGLD": ("resgld", {}),
    "m-reSGLD, c = 0.7 (default)": ("mresgld", {}),
    "m-reSGLD, c = 1 (branch only)": ("mresgld", {"c": 1.0}),
    "m-reSGLD, c = 0 (trunk only)": ("mresgld", {"c": 0.0}),
}


def table(data, rounds: int, min_run_time: float) -> None:
    chains = {label: sampler_on(data, method, **kw) for label, (method, kw) in VARIANTS.items()}
    times = interleaved({k: c.step for k, c in chains.items()}, rounds, min_run_time)
    print(f"\n{data.meta.get('problem', '?')}: P = {data.y.shape[0]}, batch 100 functions; "
          f"{rounds} rounds")
    head = f"{'sampler':<32}{'ms / iteration [IQR]':>26}{'x reSGLD [IQR]':>22}"
    print(head)
    print("-" * len(head))
    for label, t in times.items():
        print(f"{label:<32}{fmt_ms(t):>26}{fmt_ratio(ratio(t, times['reSGLD'])):>22}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.2 s per variant")
    parser.add_argument("--pde", default="advection_diffusion",
                        choices=["advection_diffusion", "diffusion_reaction"])
    args = parser.parse_args()
    header(__doc__.splitlines()[0])
    paper = PAPER_TIME_RATIO.values()
    print(f"the paper's m-reSGLD / reSGLD: {min(paper):.2f}-{max(paper):.2f}")
    rounds, min_run_time = (3, 0.2) if args.quick else (7, 1.0)
    table(problem_data("antiderivative"), rounds, min_run_time)
    table(problem_data(args.pde), rounds, min_run_time)


if __name__ == "__main__":
    main()
