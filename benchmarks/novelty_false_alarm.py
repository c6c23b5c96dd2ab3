"""Not a timing: how often does the novelty flag fire on fresh inputs drawn like the training
inputs, on average and in one run, over draws of the held-out functions?

The score depends on the inputs alone, so no network is trained: each draw takes a problem's
training inputs, holds out ``--calibration`` of them as `train` does, fits the score
(`bdeeponet.novelty.fit_novelty`) and flags 2000 fresh inputs at the false-alarm rate.
The conformal threshold holds the rate on average over the held-out draw; one run's rate
varies with its draw.

Run: python benchmarks/novelty_false_alarm.py [--problem antiderivative] [--n-train 1000]
     [--calibration 0.1] [--draws 200] [--rate 0.05]
"""

from __future__ import annotations

import argparse

import numpy as np
from common import header

from bdeeponet import get_problem
from bdeeponet.data import draw_inputs
from bdeeponet.novelty import fit_novelty


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="antiderivative")
    parser.add_argument("--n-train", type=int, default=1000)
    parser.add_argument("--calibration", type=float, default=0.1)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--rate", type=float, default=0.05)
    args = parser.parse_args()
    header(__doc__.splitlines()[0] + " " + __doc__.splitlines()[1])
    problem = get_problem(args.problem)
    n_held = round(args.calibration * args.n_train)
    rates = []
    for draw in range(args.draws):
        rng = np.random.default_rng([draw, 1])
        u = draw_inputs(problem, args.n_train + 2000, rng)[0]
        order = rng.permutation(args.n_train)
        held, kept = order[:n_held], order[n_held:]
        score = fit_novelty(u[kept], u[held])
        rates.append(score.score(u[args.n_train:], args.rate)[1].mean())
    rates = 100 * np.asarray(rates)
    lo, med, hi = np.percentile(rates, [5, 50, 95])
    print(f"\n{args.problem}, {args.n_train} training inputs, {n_held} held out, rate "
          f"{100 * args.rate:g}%, {args.draws} draws: flagged {rates.mean():.2f}% on average "
          f"(standard error {rates.std(ddof=1) / np.sqrt(len(rates)):.2f}); one run's rate: "
          f"median {med:.1f}%, 5-95% of runs {lo:.1f}-{hi:.1f}%, range "
          f"{rates.min():.1f}-{rates.max():.1f}%")


if __name__ == "__main__":
    main()
