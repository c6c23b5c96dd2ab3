"""The k that makes the test coverage 95%, per training seed, on the 4-chain grid's runs
(docs/bands.md: the scale a band needs differs from seed to seed).

Run: python k_by_seed.py GRID_SEED0 GRID_RESGLD_SEED1 GRID_RESGLD_SEED2 GRID_MRESGLD_SEEDS12
(the output directories of the `bdeeponet reproduce` commands in docs/results/README.md; the
data are GRID_SEED0/data).
"""

from __future__ import annotations

import sys

import torch
from bootstrap import LEVELS, scales  # this folder's script

from bdeeponet.data import load
from bdeeponet.run import load_run

SCENARIOS = ("antiderivative-0.01", "antiderivative-0.05", "pendulum-0.01", "pendulum-0.05",
             "diffusion_reaction-0.01", "diffusion_reaction-0.1", "advection_diffusion-0.01",
             "advection_diffusion-0.1")


def main() -> None:
    torch.set_num_threads(1)
    g0, g1, g2, gm = sys.argv[1:5]
    for sc in SCENARIOS:
        data = load(f"{g0}/data/{sc}.npz")
        for method, grids in (("resgld", (g0, g1, g2)), ("mresgld", (g0, gm, gm))):
            ks = []
            for seed, grid in enumerate(grids):
                run = load_run(f"{grid}/runs/{sc}/{method}-4000ep-4chains-seed{seed}")
                test = run.posterior.predict(data.u_test, data.y)
                ks.append(scales(data.s_test, test)[LEVELS.index(0.95)])
            print(f"{sc:26s} {method:8s} k95 wanted by the test set, seeds 0/1/2: "
                  + "/".join(f"{k:.2f}" for k in ks) + f"  max/min {max(ks) / min(ks):.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
