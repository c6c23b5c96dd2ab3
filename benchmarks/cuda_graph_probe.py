"""What does the CUDA graph do to one SGLD chain's step on a GPU?

On a GPU one chain is launch-bound: a step is a few dozen small kernels, each launched
from Python. In the sampling phase (Kronecker metric) ``SGLD`` records its step once in a
CUDA graph and replays it (``bdeeponet/samplers/graph.py``; ``--no-cuda-graph`` turns it
off). This times, at the anti-derivative's size and a PDE's, the sampler's own ``step``:

- ``eager step``: ``cuda_graph=False``, a launch per kernel and the energy read back as a
  float at every step;
- ``graph step``: the default, the minibatch copied into the graph's buffers and one
  replay; the energy stays on the GPU (a run reads it once an epoch).

It needs a CUDA GPU.

Run: python benchmarks/cuda_graph_probe.py [--quick] [--pde advection_diffusion|diffusion_reaction]
     [--chains 1 64]
"""

from __future__ import annotations

import torch
from common import header, interleaved, parser_for, print_ratio_table, problem_data, sampler_on


def main() -> None:
    parser, timing = parser_for(__doc__)
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 64])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: this benchmark needs a CUDA GPU")
    header(" ".join(__doc__.split("\n\n")[0].split()))
    rounds, min_run_time = timing(args)
    for name in ("antiderivative", args.pde):
        data = problem_data(name)
        for c in args.chains:
            chains = c if c > 1 else None
            runs = {label: sampler_on(data, "sgld", device="cuda", chains=chains,
                                      shared_metric=True, cuda_graph=on)
                    for label, on in (("eager step", False), ("graph step", True))}
            graphs = runs["graph step"].state.__dict__.get("_graphs", {})
            if graphs.get("failed") or not graphs:
                print(f"\n{name}, {c} chain(s): no graph was recorded (see the warning above)")
                continue
            times = interleaved({k: r.step for k, r in runs.items()}, rounds, min_run_time)
            print(f"\n{name}: P = {data.y.shape[0]}, {c} chain(s), SGLD sampling phase")
            print_ratio_table(times, "eager step", "variant")


if __name__ == "__main__":
    main()
