"""Could a CUDA graph bring one SGLD chain's step on a GPU under 1 ms?

On a GPU one chain is launch-bound: a step is a few dozen small kernels, each launched from
Python, and the sampler's ``step`` ends with a host synchronisation (the energy it
returns as a float). This probe times, in the sampling phase (Kronecker metric), at the
anti-derivative's size and a PDE's:

- ``eager step``: the sampler's own ``step`` (what a run does today);
- ``eager, no sync``: the same arithmetic (energy and gradient, then the Kronecker move)
  without reading the energy back;
- ``CUDA graph``: that arithmetic captured once in a ``torch.cuda.CUDAGraph`` and replayed,
  the minibatch copied into the graph's input buffers before each replay.

The probe draws its noise from the device's default generator (which graphs capture
safely), not the run's own generator: it measures what capture would save, not a run.
It needs a CUDA GPU.

Run: python benchmarks/cuda_graph_probe.py [--quick] [--pde advection_diffusion|diffusion_reaction]
     [--chains 1 64]
"""

from __future__ import annotations

import torch
from common import header, interleaved, parser_for, print_ratio_table, problem_data, sampler_on

from bdeeponet.samplers.langevin import energy_and_grads


def variants(data, chains: int | None) -> dict:
    run = sampler_on(data, "sgld", device="cuda", chains=chains)
    state, energy = run.state, run.energy
    metric, lr = state.sampling.metric, min(run.sampler.step_size, state.sampling.max_lr)
    params = state.chain.params
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    u0, s0 = run.u[run.batches[0]], run.s[run.batches[0]]
    static_u, static_s = u0.clone(), s0.clone()

    def arithmetic(u, s):
        _, grads = energy_and_grads(energy, params, (u, s))
        metric.step(params, grads, lr, run.sampler.tau, gen)

    def no_sync():
        idx = run.batches[run.cursor % len(run.batches)]
        run.cursor += 1
        arithmetic(run.u[idx], run.s[idx])

    side = torch.cuda.Stream()  # warm up on a side stream, as capture requires
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            arithmetic(static_u, static_s)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        arithmetic(static_u, static_s)

    def replay():
        idx = run.batches[run.cursor % len(run.batches)]
        run.cursor += 1
        static_u.copy_(run.u[idx])
        static_s.copy_(run.s[idx])
        graph.replay()

    return {"eager step": run.step, "eager, no sync": no_sync, "CUDA graph": replay}


def main() -> None:
    parser, timing = parser_for(__doc__)
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 64])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: this probe needs a CUDA GPU")
    header(" ".join(__doc__.split("\n\n")[0].split()))
    rounds, min_run_time = timing(args)
    for name in ("antiderivative", args.pde):
        data = problem_data(name)
        for c in args.chains:
            try:
                fns = variants(data, c if c > 1 else None)
            except Exception as exc:  # a failed capture is a result too
                print(f"\n{name}, {c} chain(s): capture failed: {type(exc).__name__}: {exc}")
                continue
            times = interleaved(fns, rounds, min_run_time)
            print(f"\n{name}: P = {data.y.shape[0]}, {c} chain(s), SGLD sampling phase")
            print_ratio_table(times, "eager step", "variant")


if __name__ == "__main__":
    main()
