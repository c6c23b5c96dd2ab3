"""What do C chains as one batch cost per iteration, against one chain (one CPU thread, or a GPU)?

Each variant is a run's sampler in its sampling phase (``TrainConfig`` defaults, the
Kronecker metric; each chain on its own minibatches), timed per iteration of all C chains.
The issue's goals: 4 SGLD chains at most 2.5x one chain at the anti-derivative's size, and
reSGLD's two replicas at most 1.5x SGLD. A deep ensemble's step (C Adam networks) is timed
beside them.

Run: python benchmarks/chains_cost.py [--quick] [--pde advection_diffusion|diffusion_reaction]
     [--chains 1 2 4 8 16] [--pairs 1 8] [--fisher-samples 16] [--device cpu|cuda]

``--fisher-samples`` only shortens the set-up (each chain's metric is estimated on its own,
one after the other), and ``--shared-metric`` skips all but the first chain's estimate
(SGLD); a step's arithmetic depends on neither.
"""

from __future__ import annotations

from common import header, parser_for, problem_data, sampler_on, timed_table

from bdeeponet.device import resolve_device


def table(data, chains: list[int], pairs: list[int], rounds: int, min_run_time: float,
          device: str, fisher_samples: int, shared_metric: bool = False) -> None:
    variants = {}
    for c in chains:
        variants[f"SGLD, {c} chain{'s' if c > 1 else ''}"] = ("sgld", True, c)
    for c in pairs:
        variants[f"reSGLD, {c} pair{'s' if c > 1 else ''}"] = ("resgld", True, c)
    variants[f"deep ensemble, {max(chains)} members"] = ("ensemble", False, max(chains))
    runs = {label: sampler_on(data, method, sampling=sampling, device=device,
                              chains=c if c > 1 else None, warmup=3, fisher_samples=fisher_samples,
                              shared_metric=shared_metric)
            for label, (method, sampling, c) in variants.items()}
    timed_table(data, runs, rounds, min_run_time, device, "SGLD, 1 chain",
                "variant (one iteration of all chains)", "batch 100 functions per chain")


def main() -> None:
    parser, timing = parser_for(__doc__)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--pairs", type=int, nargs="+", default=None,
                        help="reSGLD pairs (default: 1 and the largest --chains)")
    parser.add_argument("--fisher-samples", type=int, default=16)
    parser.add_argument("--shared-metric", action="store_true",
                        help="SGLD chains step with the first chain's metric (a faster set-up)")
    args = parser.parse_args()
    chains = sorted(set(args.chains) | {1})
    pairs = sorted(set(args.pairs or (1, max(chains))))
    device = str(resolve_device(args.device))
    header(" ".join(__doc__.split("\n\n")[0].split()))
    rounds, min_run_time = timing(args)
    for name in ("antiderivative", args.pde):
        table(problem_data(name), chains, pairs, rounds, min_run_time, device, args.fisher_samples,
              args.shared_metric)


if __name__ == "__main__":
    main()
