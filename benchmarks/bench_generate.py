"""Data-generation benchmark: GRF draw and solve times, and solver errors.

For each problem, prints the wall time (best of 3) to draw 1100 GRF inputs on the
default fine grid x = linspace(0, 1, 1189) and to solve them with the default
parameters, and the max abs error on a few inputs against a refined reference: the same
functions given on a 2x finer input grid and solved with a refined solver.

Run: python benchmarks/bench_generate.py
"""

from __future__ import annotations

import time

import numpy as np
from common import header

from bdeeponet.grf import periodic_grf, rbf_grf
from bdeeponet.problems import PROBLEMS, get_problem

N_FUNCTIONS = 1100
N_GRID = 1189
N_CHECK = 5
SEED = 0

# Solver refinements used for the references (input grid refinement is added on top).
REFINED = {
    "antiderivative": {},
    "pendulum": {"steps_per_interval": 32},
    "diffusion_reaction": {"x_refine": 32, "t_refine": 8},
    "advection_diffusion": {},
    "darcy": {"refine": 32},
}


REPEATS = 3


def timed(fn):
    """Result of fn() and its best wall time over REPEATS calls: the machine may be
    shared, and the minimum is the least disturbed measurement."""
    best = np.inf
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return result, best


def reference_error(problem, sampler, rng) -> float:
    """Max abs error of the default solve on N_CHECK inputs vs the refined reference.

    The inputs are drawn on a 2x finer grid and subsampled, so both solves see the same
    functions (for rbf_grf the draw depends on the grid, hence the subsampling).
    """
    fine = np.linspace(0.0, 1.0, 2 * (N_GRID - 1) + 1)
    u_fine = sampler(fine, N_CHECK, rng)
    coarse = problem.solve(fine[::2], u_fine[:, ::2])
    reference = get_problem(problem.name, **REFINED[problem.name]).solve(fine, u_fine)
    return float(np.abs(coarse - reference).max())


def bench_problem(name: str, x: np.ndarray) -> str:
    """One table row: draw and solve times for N_FUNCTIONS inputs, reference error."""
    problem = get_problem(name)
    sampler = periodic_grf if problem.periodic_input else rbf_grf
    u, t_draw = timed(lambda: sampler(x, N_FUNCTIONS, np.random.default_rng(SEED)))
    s, t_solve = timed(lambda: problem.solve(x, u))
    err = reference_error(problem, sampler, np.random.default_rng(SEED + 1))
    refined = ", ".join(f"{k}={v}" for k, v in REFINED[name].items()) or "input grid only"
    return f"{name:<22}{s.shape[1]:>6}{t_draw:>10.3f}{t_solve:>11.3f}{err:>12.2e}  {refined}"


def main() -> None:
    header("How long do drawing the inputs and solving take, and how accurate are the solvers?")
    x = np.linspace(0.0, 1.0, N_GRID)
    print(f"best of {REPEATS} wall times; {N_FUNCTIONS} inputs on linspace(0, 1, {N_GRID})")
    print(f"max |err| over {N_CHECK} inputs vs the same functions on a 2x finer input grid, "
          "solved with the refinement listed")
    head = f"{'problem':<22}{'P':>6}{'draw [s]':>10}{'solve [s]':>11}{'max |err|':>12}  reference"
    print(head)
    print("-" * len(head))
    for name in PROBLEMS:
        print(bench_problem(name, x))


if __name__ == "__main__":
    main()
