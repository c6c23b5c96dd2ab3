"""The paper's experiment grid (Section 5) and its executors.

A job is one (problem, noise, method, seed) run. Data sets are generated once per scenario
(data seed 0, so the training seed is the only thing that varies across seeds) under
``OUT/data/``; runs go to ``OUT/runs/PROBLEM-NOISE/METHOD-EPOCHSep-seedS/``. A run whose
``metrics.json`` exists is skipped; one with a checkpoint resumes from it, so rerunning the
command after an interruption only redoes what is missing.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .progress import Progress

PAPER_SCENARIOS = (
    ("antiderivative", 0.01), ("antiderivative", 0.05),
    ("pendulum", 0.01), ("pendulum", 0.05),
    ("diffusion_reaction", 0.01), ("diffusion_reaction", 0.1),
    ("advection_diffusion", 0.01), ("advection_diffusion", 0.1),
)
PAPER_METHODS = ("adam", "resgld", "mresgld")
# Beyond the paper, run only when named in ``problems``: a nonlinear operator (1-D Darcy
# flow), with noise levels relative to the solution's standard deviation.
EXTRA_SCENARIOS = (("darcy", 0.01), ("darcy", 0.05))
RELATIVE_NOISE = frozenset({"darcy"})

# The paper's Tables 1–8: mean e1, e2 after burn-in (8000 epochs).
PAPER_ERRORS = {
    ("antiderivative", 0.01): {"adam": (13.099151, 14.961829), "resgld": (6.953939, 7.35423),
                               "mresgld": (7.82799, 8.234294)},
    ("antiderivative", 0.05): {"adam": (14.877717, 16.611967), "resgld": (11.970458, 12.182682),
                               "mresgld": (11.367707, 11.708988)},
    ("pendulum", 0.01): {"adam": (16.8571, 18.6582), "resgld": (6.2147, 5.7965),
                         "mresgld": (6.6997, 6.2231)},
    ("pendulum", 0.05): {"adam": (18.8935, 20.6669), "resgld": (12.6139, 11.2885),
                         "mresgld": (12.2996, 11.11955)},
    ("diffusion_reaction", 0.01): {"adam": (31.854993, 33.759108), "resgld": (9.644058, 9.904289),
                                   "mresgld": (11.344359, 11.62751)},
    ("diffusion_reaction", 0.1): {"adam": (31.954806, 33.850071), "resgld": (11.670668, 12.043854),
                                  "mresgld": (9.040757, 9.404453)},
    ("advection_diffusion", 0.01): {"adam": (14.3524, 16.5843), "resgld": (8.9257, 9.2734),
                                    "mresgld": (7.3409, 7.7345)},
    ("advection_diffusion", 0.1): {"adam": (21.5141, 25.0701), "resgld": (11.2455, 11.9178),
                                   "mresgld": (14.2553, 14.7162)},
}
# m-reSGLD / reSGLD per-iteration time reported in the paper (its Figures 6, 8, ...).
PAPER_TIME_RATIO = {
    ("antiderivative", 0.01): 0.801, ("antiderivative", 0.05): 0.769,
    ("pendulum", 0.01): 0.7906, ("pendulum", 0.05): 0.808,
    ("diffusion_reaction", 0.01): 0.830, ("diffusion_reaction", 0.1): 0.815,
    ("advection_diffusion", 0.01): 0.7944, ("advection_diffusion", 0.1): 0.802,
}


@dataclass(frozen=True)
class Job:
    problem: str
    noise: float
    method: str
    seed: int
    epochs: int

    @property
    def scenario(self) -> str:
        return scenario_name(self.problem, self.noise)

    def run_dir(self, out: Path) -> Path:
        # The length is in the name: a rerun with other --epochs never reuses these runs.
        return out / "runs" / self.scenario / f"{self.method}-{self.epochs}ep-seed{self.seed}"


def scenario_name(problem: str, noise: float) -> str:
    return f"{problem}-{noise:g}"


def data_path(out: Path, problem: str, noise: float) -> Path:
    return out / "data" / f"{scenario_name(problem, noise)}.npz"


def scenarios(problems=None, noises=None) -> list[tuple[str, float]]:
    """The paper's eight by default; ``problems`` filters them (and adds those of
    ``EXTRA_SCENARIOS`` it names), ``noises`` replaces their noise levels (every chosen
    problem × every given noise)."""
    from .problems import PROBLEMS

    for p in problems or ():
        if p not in PROBLEMS:
            raise ValueError(f"unknown problem '{p}'; choose one of: {', '.join(PROBLEMS)}")
    chosen = [s for s in PAPER_SCENARIOS + EXTRA_SCENARIOS if s[0] in problems] if problems \
        else list(PAPER_SCENARIOS)
    if noises:
        names = list(dict.fromkeys(p for p, _ in chosen))
        for n in noises:
            if not (np.isfinite(n) and n > 0):
                raise ValueError(f"noise must be a finite number > 0, got {n}")
        chosen = [(p, float(n)) for p in names for n in noises]
    return chosen


def make_jobs(scen, methods, seeds, epochs) -> list[Job]:
    from .config import METHOD_NAMES

    for m in methods:
        if m not in METHOD_NAMES:
            raise ValueError(f"unknown method '{m}'; choose one of: {', '.join(METHOD_NAMES)}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    return [Job(p, n, m, s, epochs) for p, n in scen for m in methods for s in seeds]


def ensure_data(out: Path, scen) -> None:
    """Generate each scenario's data set once (data seed 0)."""
    from .data import generate
    from .problems import get_problem

    for problem, noise in scen:
        path = data_path(out, problem, noise)
        if not path.exists():
            data = generate(get_problem(problem), noise, np.random.default_rng(0),
                            relative=problem in RELATIVE_NOISE)
            data.meta["seed"] = 0
            data.save(path)


# Relative cost of one step (a replica-step is about 1; m-reSGLD's hot replica takes
# one-group steps after burn-in), from benchmarks/bench_samplers.py.
STEP_COST = {"linear": 0.0, "adam": 1.0, "sgld": 1.0, "resgld": 2.0, "mresgld": 1.8}


def expected_cost(out: Path, job: Job) -> float:
    """A rough relative run time, for scheduling only: steps x replicas x (fixed cost + a
    cost per query point), with the number of query points read from the data file."""
    with np.load(data_path(out, job.problem, job.noise)) as f:
        n_points = f["y"].shape[0]
    return job.epochs * STEP_COST.get(job.method, 1.0) * (1.0 + n_points / 300)


def run_job(out: str, job: dict) -> dict:
    """Train one job (in a worker: one torch thread). Returns its metrics and timing."""
    import torch

    from .config import TrainConfig
    from .data import load
    from .train import train

    torch.set_num_threads(1)
    job = Job(**job)
    out = Path(out)
    run_dir = job.run_dir(out)
    if not (run_dir / "metrics.json").exists():
        data = load(data_path(out, job.problem, job.noise))
        config = TrainConfig(method=job.method, epochs=job.epochs, seed=job.seed)
        train(data, config, run_dir, resume=True)
    return asdict(job)


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


def execute(out: Path, jobs: list[Job], workers: int = 2, executor: str = "local",
            progress: bool = True, ray_address: str | None = None) -> int:
    """Run the unfinished jobs on a local process pool or a Ray cluster; returns how many
    it ran."""
    todo = [j for j in jobs if not (j.run_dir(out) / "metrics.json").exists()]
    # Longest first, so no worker is left with one long run at the end while the others idle.
    costs = {j: expected_cost(out, j) for j in todo}
    todo.sort(key=costs.get, reverse=True)
    done = len(jobs) - len(todo)
    bar = _GridProgress(Progress(len(jobs), enabled=progress, start=done, label="runs"),
                        done, costs)
    if executor == "local":
        _execute_local(out, todo, workers, bar)
    elif executor == "ray":
        _execute_ray(out, todo, bar, ray_address)
    else:
        raise ValueError(f"unknown executor '{executor}'; choose one of: local, ray")
    bar.progress.close()
    return len(todo)


class _GridProgress:
    """Counts finished runs; the time left comes from their expected costs, since the
    longest runs go first."""

    def __init__(self, progress: Progress, done: int, costs: dict):
        self.progress, self.done, self.costs = progress, done, costs
        self.total_cost, self.done_cost = sum(costs.values()) or 1.0, 0.0
        progress.update(done)

    def finished(self, job: Job) -> None:
        self.done += 1
        self.done_cost += self.costs[job]
        self.progress.update(self.done, work=self.done_cost / self.total_cost)


def _execute_local(out, todo, workers, bar) -> None:
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    ctx = mp.get_context("spawn")  # no forked torch thread pools
    with cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker) as pool:
        futures = {pool.submit(run_job, str(out), asdict(j)): j for j in todo}
        for fut in cf.as_completed(futures):
            fut.result()
            bar.finished(futures[fut])


def _execute_ray(out, todo, bar, address) -> None:
    try:
        import ray
    except ImportError:
        raise ValueError("the ray executor needs Ray: pip install '.[ray]'") from None
    started = not ray.is_initialized()
    if started:
        local = {} if address else {"include_dashboard": False}
        ray.init(address=address, log_to_driver=False, **local)
    try:
        remote = ray.remote(num_cpus=1)(run_job)  # one task per (scenario, method, seed)
        refs = {remote.remote(str(out.resolve()), asdict(j)): j for j in todo}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            ray.get(ready)
            bar.finished(refs[ready[0]])
    finally:
        if started:
            ray.shutdown()


def reproduce(out, problems=None, noises=None, methods=PAPER_METHODS, epochs=8000,
              seeds=(0,), workers=2, executor="local", progress=True,
              ray_address=None) -> Path:
    """The whole Section 5: data, runs, then tables, figures and ``report.html``."""
    from .report import write_report

    out = Path(out)
    scen = scenarios(problems, noises)
    jobs = make_jobs(scen, methods, seeds, epochs)
    ensure_data(out, scen)
    t0 = time.perf_counter()
    n_trained = execute(out, jobs, workers, executor, progress, ray_address)
    return write_report(out, jobs, wall_seconds=time.perf_counter() - t0, n_trained=n_trained)
