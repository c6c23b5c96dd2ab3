"""What does one iteration of each method cost, at the anti-derivative's size (P = 100 query
points, 1-D y) and a PDE's (P = 1024, 2-D y)?

Each method as a run of the grid has it (``TrainConfig`` defaults: batch of 100 functions,
width 64, depth 2, latent 64), timed in the sampling phase (after ``end_burn_in``), plus the
SG-MCMC burn-in step (the Adam warm start). Ratios are to one SGLD step measured in the same
rounds. ``experiments.STEP_COST`` (the grid's scheduling weights) rests on these ratios.

Run: python benchmarks/step_cost.py [--quick] [--pde advection_diffusion|diffusion_reaction]
     [--device cpu|cuda]   (on a GPU one chain is launch-bound: see docs/speed.md)
"""

from __future__ import annotations

from common import header, parser_for, problem_data, sampler_on, timed_table

from bdeeponet.device import resolve_device

VARIANTS = {
    # label: (method, sampling phase)
    "Adam + MC dropout": ("adam", False),
    "SG-MCMC burn-in (Adam warm start)": ("sgld", False),
    "SGLD": ("sgld", True),
    "reSGLD": ("resgld", True),
    "m-reSGLD (c = 0.7)": ("mresgld", True),
}


def table(data, rounds: int, min_run_time: float, device: str = "cpu") -> None:
    runs = {label: sampler_on(data, method, sampling=sampling, device=device)
            for label, (method, sampling) in VARIANTS.items()}
    timed_table(data, runs, rounds, min_run_time, device, "SGLD", "method")


def main() -> None:
    parser, timing = parser_for(__doc__)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = parser.parse_args()
    device = str(resolve_device(args.device))
    header(" ".join(__doc__.split("\n\n")[0].split()))
    rounds, min_run_time = timing(args)
    table(problem_data("antiderivative"), rounds, min_run_time, device)
    table(problem_data(args.pde), rounds, min_run_time, device)


if __name__ == "__main__":
    main()
