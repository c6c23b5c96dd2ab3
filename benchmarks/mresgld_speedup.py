"""Is an m-reSGLD iteration cheaper than a reSGLD one, as the paper reports (0.77-0.83)?

After burn-in m-reSGLD's hot replica updates only the branch (probability c) or only the
trunk, and computes no gradient for the other net; the cold replica is as in reSGLD. Both
replicas share one forward and backward pass, in which the net the hot replica does not
train is walked back over the cold replica's rows only. Timed in the sampling phase at the
grid's defaults (c = 0.7) and at the two extremes, c = 1 (branch only) and c = 0 (trunk
only), and at c = 0.7 with the hot replica's pass apart from the cold one's (as before
2026-11-28), on the anti-derivative (P = 100) and a PDE (P = 1024). Ratios are to reSGLD,
within rounds; MFLOP: the matrix products of one iteration.

Run: python benchmarks/mresgld_speedup.py [--quick] [--pde advection_diffusion|diffusion_reaction]
"""

from __future__ import annotations

from common import (
    flops_per_call,
    header,
    interleaved,
    parser_for,
    print_ratio_table,
    problem_data,
    sampler_on,
)

from bdeeponet.grid import PAPER_TIME_RATIO
from bdeeponet.samplers import MReSGLD

HOT_APART = "m-reSGLD, c = 0.7, hot apart"
VARIANTS = {
    # label: (method, TrainConfig overrides)
    "reSGLD": ("resgld", {}),
    "m-reSGLD, c = 0.7 (default)": ("mresgld", {}),
    "m-reSGLD, c = 1 (branch only)": ("mresgld", {"c": 1.0}),
    "m-reSGLD, c = 0 (trunk only)": ("mresgld", {"c": 0.0}),
    HOT_APART: ("mresgld", {}),
}


class HotApart(MReSGLD):
    """m-reSGLD whose hot levels take a forward and backward pass of their own after burn-in
    (what the library does for an energy without the DeepONet's hand-written gradient, and
    did for every energy before 2026-11-28), for comparison with the shared batch."""

    @staticmethod
    def _together(state, energy, active) -> bool:
        return active is None and MReSGLD._together(state, energy, active)


def table(data, rounds: int, min_run_time: float) -> None:
    chains = {label: sampler_on(data, method, **kw) for label, (method, kw) in VARIANTS.items()}
    object.__setattr__(chains[HOT_APART].sampler, "__class__", HotApart)  # (a frozen dataclass)
    times = interleaved({k: c.step for k, c in chains.items()}, rounds, min_run_time)
    flops = {k: flops_per_call(c.step) for k, c in chains.items()}
    print(f"\n{data.meta.get('problem', '?')}: P = {data.y.shape[0]}, batch 100 functions; "
          f"{rounds} rounds")
    print_ratio_table(times, "reSGLD", "sampler", width=32, flops=flops)


def main() -> None:
    parser, timing = parser_for(__doc__)
    args = parser.parse_args()
    header(__doc__.splitlines()[0])
    paper = PAPER_TIME_RATIO.values()
    print(f"the paper's m-reSGLD / reSGLD: {min(paper):.2f}-{max(paper):.2f}")
    rounds, min_run_time = timing(args)
    table(problem_data("antiderivative"), rounds, min_run_time)
    table(problem_data(args.pde), rounds, min_run_time)


if __name__ == "__main__":
    main()
