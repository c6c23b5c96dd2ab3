"""What does the Kronecker metric (the default) cost per iteration against the earlier
diagonal pSGLD metric (``metric="rmsprop"``), and what do control variates add?

Each sampler timed in its sampling phase, with the default metric and with the diagonal
one; the issue's limit for the default is 1.5x the diagonal metric's time. Control
variates (off by default) shown for SGLD, and SGLD with every layer's rotation in float64
(as every layer stepped before well-conditioned ones moved to float32,
``kfac.FLOAT32_CONDITION``).
Ratios within rounds.

Run: python benchmarks/metric_cost.py [--quick] [--problem NAME]
"""

from __future__ import annotations

import argparse
from unittest.mock import patch

from common import fmt_ms, fmt_ratio, header, interleaved, problem_data, ratio, sampler_on

from bdeeponet.samplers import kfac

RMSPROP = {"metric": "rmsprop"}
VARIANTS = {
    # label: (method, TrainConfig overrides, the variant it is compared with)
    "SGLD, rmsprop": ("sgld", RMSPROP, None),
    "SGLD, kfac": ("sgld", {}, "SGLD, rmsprop"),
    "SGLD, kfac + control variate": ("sgld", {"control_variate": True}, "SGLD, kfac"),
    "SGLD, kfac in float64": ("sgld", {}, "SGLD, kfac"),
    "reSGLD, rmsprop": ("resgld", RMSPROP, None),
    "reSGLD, kfac": ("resgld", {}, "reSGLD, rmsprop"),
    "m-reSGLD, rmsprop": ("mresgld", RMSPROP, None),
    "m-reSGLD, kfac": ("mresgld", {}, "m-reSGLD, rmsprop"),
}


def table(data, rounds: int, min_run_time: float) -> None:
    chains = {}
    for label, (method, kw, _) in VARIANTS.items():
        if "float64" in label:  # its blocks decide their precision on its first step
            with patch.object(kfac, "FLOAT32_CONDITION", 0.0):
                chains[label] = sampler_on(data, method, **kw)
        else:
            chains[label] = sampler_on(data, method, **kw)
    times = interleaved({k: c.step for k, c in chains.items()}, rounds, min_run_time)
    print(f"\n{data.meta.get('problem', '?')}: P = {data.y.shape[0]}, batch 100 functions; "
          f"{rounds} rounds")
    head = f"{'sampler, metric':<32}{'ms / iteration [IQR]':>26}{'ratio [IQR]':>22}  to"
    print(head)
    print("-" * (len(head) + 16))
    for label, (_, _, base) in VARIANTS.items():
        r = fmt_ratio(ratio(times[label], times[base])) if base else ""
        print(f"{label:<32}{fmt_ms(times[label]):>26}{r:>22}  {base or ''}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.2 s per variant")
    parser.add_argument("--problem", action="append",
                        help="problem(s) to time (default: antiderivative and advection_diffusion)")
    args = parser.parse_args()
    header(" ".join(__doc__.split("\n\n")[0].split()))
    rounds, min_run_time = (3, 0.2) if args.quick else (7, 1.0)
    for name in args.problem or ["antiderivative", "advection_diffusion"]:
        table(problem_data(name), rounds, min_run_time)


if __name__ == "__main__":
    main()
