"""What do C chains as one batch cost per iteration, against one chain, on one CPU thread?

Each variant is a run's sampler in its sampling phase (``TrainConfig`` defaults, the
Kronecker metric; each chain on its own minibatches), timed per iteration of all C chains.
The issue's goals: 4 SGLD chains at most 2.5x one chain at the anti-derivative's size, and
reSGLD's two replicas at most 1.5x SGLD. A deep ensemble's step (C Adam networks) is timed
beside them.

Run: python benchmarks/chains_cost.py [--quick] [--pde advection_diffusion|diffusion_reaction]
     [--chains 1 2 4 8 16] [--device cpu|cuda]
"""

from __future__ import annotations

from common import header, parser_for, problem_data, sampler_on, timed_table

from bdeeponet.device import resolve_device


def table(data, chains: list[int], rounds: int, min_run_time: float, device: str) -> None:
    variants = {}
    for c in chains:
        variants[f"SGLD, {c} chain{'s' if c > 1 else ''}"] = ("sgld", True, c)
    for c in (1, max(chains)):
        variants[f"reSGLD, {c} pair{'s' if c > 1 else ''}"] = ("resgld", True, c)
    variants[f"deep ensemble, {max(chains)} members"] = ("ensemble", False, max(chains))
    runs = {label: sampler_on(data, method, sampling=sampling, device=device,
                              chains=c if c > 1 else None, warmup=3)
            for label, (method, sampling, c) in variants.items()}
    timed_table(data, runs, rounds, min_run_time, device, "SGLD, 1 chain",
                "variant (one iteration of all chains)", "batch 100 functions per chain")


def main() -> None:
    parser, timing = parser_for(__doc__)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    device = str(resolve_device(args.device))
    header(" ".join(__doc__.split("\n\n")[0].split()))
    rounds, min_run_time = timing(args)
    table(problem_data("antiderivative"), sorted(set(args.chains) | {1}), rounds, min_run_time,
          device)
    table(problem_data(args.pde), sorted(set(args.chains) | {1}), rounds, min_run_time, device)


if __name__ == "__main__":
    main()
