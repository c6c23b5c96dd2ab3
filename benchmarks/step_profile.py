"""Where does the time of a reSGLD iteration go?

The sampler's own steps (sampling phase, grid defaults) run under cProfile; the library's
functions are listed by cumulative time, as a share of the profiled steps, then by their
own time (where the arithmetic is: cProfile does not see tensor operators such as ``@``, so
their time counts as their caller's own). cProfile slows the Python parts, so the shares of small
Python functions are upper bounds; the unprofiled time per step is printed beside it.

Run: python benchmarks/step_profile.py [--steps N] [--problem NAME] [--method NAME]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats

from common import header, problem_data, sampler_on, seconds_per_call

PACKAGE = f"{os.sep}bdeeponet{os.sep}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--problem", default="antiderivative")
    parser.add_argument("--method", default="resgld", choices=["sgld", "resgld", "mresgld"])
    parser.add_argument("--top", type=int, default=20, help="rows per table")
    args = parser.parse_args()
    header(__doc__.splitlines()[0])
    data = problem_data(args.problem)
    chain = sampler_on(data, args.method)
    plain = seconds_per_call(chain.step, 1.0)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        chain.step()
    prof.disable()
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (calls, _, own, cumulative, _)
    total = sum(own for _, _, own, _, _ in stats.values())
    print(f"\n{args.method} on {args.problem} (P = {data.y.shape[0]}, batch 100): "
          f"{1e3 * plain:.3f} ms per step unprofiled, {1e3 * total / args.steps:.3f} ms profiled; "
          f"{args.steps} steps")
    ours = {(f"{os.path.basename(f)}:{name}", n / args.steps): (own, ct)
            for (f, _, name), (n, _, own, ct, _) in stats.items() if PACKAGE in f}
    show("library function (cumulative)", {k: ct for k, (_, ct) in ours.items()},
         args.steps, total, args.top)
    # A tensor operator such as @ is not a call cProfile sees: its time is its caller's own.
    show("library function (own time, operators included)",
         {k: own for k, (own, _) in ours.items()}, args.steps, total, args.top)


def show(title: str, seconds: dict, steps: int, total: float, top: int) -> None:
    """``seconds``: {(label, calls per step): seconds over the profiled steps (``total``)}."""
    head = f"{title:<52}{'calls/step':>11}{'ms/step':>9}{'share':>8}"
    print("\n" + head)
    print("-" * len(head))
    for (label, calls), sec in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{label:<52}{calls:>11.1f}{1e3 * sec / steps:>9.3f}{100 * sec / total:>7.1f}%")


if __name__ == "__main__":
    main()
