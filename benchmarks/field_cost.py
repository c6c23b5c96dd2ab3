"""At the field's resolution (2-D Darcy, m = P = n²), what does a sampling iteration cost
against an Adam iteration of the same network, and m-reSGLD against reSGLD?

The data are the `darcy2d` problem's (1000 training functions, noise 1% of the targets' sd)
at n = 29 (m = P = 841) or n = 85 (m = P = 7225). The network is `train`'s default, so the
branch reads the inputs' principal components (`branch_pca`, 32 here). "Adam" is the
samplers' own burn-in step (Adam on the same network and energy); the others are timed
after `end_burn_in`, whose wall time (the Kronecker metric's estimate and taming) is
printed per sampler. Ratios are within interleaved rounds; MFLOP: the matrix products of
one iteration. ``--conv``: the conv branch and the POD trunk instead (``--branch conv --trunk
pod --width 128 --warm-lr 1e-3``, the field benchmarks' ``-pod`` rows), whose trunk has no
parameters, so no m-reSGLD. ``--fourier``: the Fourier operator (``--network fourier`` at its
defaults: batch 20), whose hot replica trains its lower or its upper half.

Run: python benchmarks/field_cost.py [--quick] [--n 29|85] [--data F.npz] [--conv | --fourier]
"""

from __future__ import annotations

import time

import numpy as np
from common import flops_per_call, header, interleaved, print_ratio_table, sampler_on

import bdeeponet

VARIANTS = {  # label: (method, sampling phase)
    "Adam (burn-in step)": ("sgld", False),
    "SGLD": ("sgld", True),
    "reSGLD": ("resgld", True),
    "m-reSGLD, c = 0.7": ("mresgld", True),
}
CONV = {"branch": "conv", "trunk": "pod", "width": 128, "warm_lr": 1e-3}
FOURIER = {"network": "fourier"}


def field_data(n: int) -> bdeeponet.OperatorData:
    problem = bdeeponet.get_problem("darcy2d", n_points=n)
    return bdeeponet.generate(problem, 0.01, np.random.default_rng(0), n_train=1000, n_test=10,
                              relative=True)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.2 s per variant")
    parser.add_argument("--n", type=int, default=29, help="grid points a side (29 or 85)")
    parser.add_argument("--data", help="an aligned .npz to use instead of generating one")
    parser.add_argument("--conv", action="store_true", help="the conv branch and POD trunk")
    parser.add_argument("--fourier", action="store_true", help="the Fourier operator")
    args = parser.parse_args()
    header(__doc__.splitlines()[0] + " " + __doc__.splitlines()[1])
    rounds, min_run_time = (3, 0.2) if args.quick else (7, 1.0)
    data = bdeeponet.load_data(args.data) if args.data else field_data(args.n)
    runs, metric_s = {}, {}
    variants = {k: v for k, v in VARIANTS.items() if not (args.conv and v[0] == "mresgld")}
    for label, (method, sampling) in variants.items():
        extra = CONV if args.conv else FOURIER if args.fourier else {}
        runs[label] = sampler_on(data, method, sampling=False, **extra)
        if sampling:
            run = runs[label]
            t0 = time.perf_counter()
            run.sampler.end_burn_in(run.state, run.energy, (run.u, run.s), run.generator)
            metric_s[label] = time.perf_counter() - t0
            for _ in range(10):
                run.step()
    times = interleaved({k: r.step for k, r in runs.items()}, rounds, min_run_time)
    flops = {k: flops_per_call(r.step) for k, r in runs.items()}
    m, p = data.n_sensors, data.n_points
    print(f"\n{data.meta.get('problem', '?')}: m = {m} sensors, P = {p} query points, "
          f"{data.n_train} training functions, batch {runs['SGLD'].batches[0].numel()}; "
          f"{rounds} rounds")
    print_ratio_table(times, "Adam (burn-in step)", "iteration", flops=flops)
    if "m-reSGLD, c = 0.7" in times:
        mres = [a / b for a, b in zip(times["m-reSGLD, c = 0.7"], times["reSGLD"], strict=True)]
        print(f"m-reSGLD / reSGLD within rounds: median {np.median(mres):.2f} "
              f"[{min(mres):.2f}, {max(mres):.2f}]")
    print("\nend_burn_in (metric estimate and taming), seconds:")
    for label, sec in metric_s.items():
        print(f"  {label:<20}{sec:8.1f}")


if __name__ == "__main__":
    main()
