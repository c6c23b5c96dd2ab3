"""The executors of the paper's experiment grid (Section 5): choosing the jobs, making
the data, running the jobs on a local process pool or a Ray cluster, then the report.

What the grid is and where its files go is in :mod:`.grid`. Data sets are generated once
per scenario (data seed 0, so the training seed is the only thing that varies across
seeds). A run whose ``metrics.json`` exists is skipped; one with a checkpoint resumes from
it, so rerunning the command after an interruption only redoes what is missing.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import numbers
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .grid import (
    EXTRA_SCENARIOS,
    MODEL_SIZE,
    PAPER_ERRORS,
    PAPER_METHODS,
    PAPER_SCENARIOS,
    PAPER_TIME_RATIO,
    RELATIVE_NOISE,
    Job,
    data_path,
    scenario_name,
)
from .progress import Progress

# The grid's tables and paths live in .grid; they stay importable from here.
__all__ = [
    "EXTRA_SCENARIOS", "PAPER_ERRORS", "PAPER_METHODS", "PAPER_SCENARIOS", "PAPER_TIME_RATIO",
    "RELATIVE_NOISE", "STEP_COST", "Job", "data_path", "ensure_data", "execute", "expected_cost",
    "make_jobs", "reproduce", "run_job", "scenario_name", "scenarios",
]


def scenarios(problems=None, noises=None) -> list[tuple[str, float]]:
    """The paper's eight by default; ``problems`` filters them (and adds those of
    ``EXTRA_SCENARIOS`` it names), ``noises`` replaces their noise levels (every chosen
    problem × every given noise)."""
    from .problems import PROBLEMS, canonical_name

    problems = [canonical_name(p) for p in problems or ()]
    for p in problems:
        if p not in PROBLEMS:
            raise ValueError(f"unknown problem '{p}'; choose one of: {', '.join(PROBLEMS)}")
    chosen = [s for s in PAPER_SCENARIOS + EXTRA_SCENARIOS if s[0] in problems] if problems \
        else list(PAPER_SCENARIOS)
    gridded = {p for p, _ in PAPER_SCENARIOS + EXTRA_SCENARIOS}
    for p in problems:
        if p not in gridded:
            raise ValueError(f"problem '{p}' has no scenario in the paper's grid; the grid's "
                             f"problems: {', '.join(dict.fromkeys(sorted(gridded)))} (train "
                             f"{p} with 'bdeeponet train')")
    if noises:
        names = list(dict.fromkeys(p for p, _ in chosen))
        for n in noises:
            if not (np.isfinite(n) and n > 0):
                raise ValueError(f"noise must be a finite number > 0, got {n}")
        chosen = [(p, float(n)) for p in names for n in noises]
    return chosen


def make_jobs(scen, methods, seeds, epochs, chains: int | None = None,
              model: dict | None = None, cuda_graph: bool = True) -> list[Job]:
    """Every scenario × method × seed; ``chains`` applies to the samplers and the ensemble
    (Adam and the linear baseline run one network), ``model`` (``width``, ``depth``,
    ``latent``; the default sizes where absent) to every method but the linear baseline,
    ``cuda_graph`` (TrainConfig's) to every run."""
    from .config import TrainConfig
    from .samplers.methods import get_method

    for m in methods:
        get_method(m)  # ValueError naming the choices
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if chains is not None and chains < 1:
        raise ValueError(f"chains must be >= 1, got {chains}")
    model = dict(model or {})
    for k, v in model.items():
        if k not in MODEL_SIZE:
            raise ValueError(f"unknown network size '{k}'; choose among {', '.join(MODEL_SIZE)}")
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
            raise ValueError(f"{k} must be an integer, got {v!r}")
    model = {k: int(v) for k, v in model.items() if v is not None}
    TrainConfig(**model)  # its own checks (>= 1)
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
            raise ValueError(f"seeds must be integers >= 0, got {s!r}")
    once = lambda xs: list(dict.fromkeys(xs))  # noqa: E731 (a repeated one is one run)
    jobs = [Job(p, n, m, s, epochs, None if get_method(m).single else chains,
                **(model if get_method(m).network else {}), cuda_graph=cuda_graph)
            for p, n in once(scen) for m in once(methods) for s in once(seeds)]
    for job in jobs:  # each run's own checks (an ensemble of one member), before any work
        job.config()
    return jobs


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


# Relative cost of one step, for scheduling only (a replica-step is about 1; m-reSGLD's hot
# replica takes one-group steps after burn-in); see benchmarks/step_cost.py.
STEP_COST = {"linear": 0.0, "adam": 1.0, "ensemble": 0.4, "sgld": 1.0, "resgld": 2.0,
             "mresgld": 1.8}


def expected_cost(out: Path, job: Job) -> float:
    """A rough relative run time, for scheduling only: steps x replicas x (fixed cost + a
    cost per query point), with the number of query points read from the data file."""
    with np.load(data_path(out, job.problem, job.noise)) as f:
        n_points = f["y"].shape[0]
    from .config import TrainConfig

    chains = TrainConfig(method=job.method, chains=job.chains).n_chains
    return (job.epochs * STEP_COST.get(job.method, 1.0) * (1.0 + n_points / 300)
            * (1 + 0.75 * (chains - 1)))  # C chains batched: about 3x one at C = 4


def run_job(out: str, job: dict, device: str = "cpu") -> dict:
    """Train one job on ``device`` (in a worker: one torch thread). Returns the job."""
    import torch

    from .data import load
    from .train import train

    torch.set_num_threads(1)
    job = Job(**job)
    out = Path(out)
    run_dir = job.run_dir(out)
    if not (run_dir / "metrics.json").exists():
        data = load(data_path(out, job.problem, job.noise))
        train(data, job.config(), run_dir, resume=True, device=device)
    return asdict(job)


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


def execute(out: Path, jobs: list[Job], workers: int = 2, executor: str = "local",
            progress: bool = True, ray_address: str | None = None, device: str = "cpu") -> int:
    """Run the unfinished jobs on a local process pool or a Ray cluster, each on ``device``;
    returns how many it ran."""
    from .data import load
    from .train import check_same_data, settings_differ

    todo = [j for j in jobs if not (j.run_dir(out) / "metrics.json").exists()]
    data = {}
    for job in jobs:  # a finished run is reused: it must be the job's, on the job's data
        if job not in todo:
            diff = settings_differ(job.run_dir(out), job.config())
            if diff:
                raise ValueError(f"{job.run_dir(out)} holds a finished run with other settings "
                                 f"({', '.join(diff)}): write the grid to another --out")
            path = data_path(out, job.problem, job.noise)
            if path not in data:
                data[path] = load(path)
            conf = json.loads((job.run_dir(out) / "config.json").read_text())
            check_same_data(conf, data[path], f"reuse {job.run_dir(out)}")
    # Longest first, so no worker is left with one long run at the end while the others idle.
    costs = {j: expected_cost(out, j) for j in todo}
    todo.sort(key=costs.get, reverse=True)
    done = len(jobs) - len(todo)
    bar = _GridProgress(Progress(len(jobs), enabled=progress, start=done, label="runs"),
                        done, costs)
    if executor == "local":
        _execute_local(out, todo, workers, bar, device)
    elif executor == "ray":
        _execute_ray(out, todo, bar, ray_address, device)
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


def _check_workers(workers: int) -> None:
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")


def _execute_local(out, todo, workers, bar, device) -> None:
    _check_workers(workers)
    ctx = mp.get_context("spawn")  # no forked torch thread pools
    with cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker) as pool:
        futures = {pool.submit(run_job, str(out), asdict(j), device): j for j in todo}
        for fut in cf.as_completed(futures):
            fut.result()
            bar.finished(futures[fut])


def _execute_ray(out, todo, bar, address, device) -> None:
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
        refs = {remote.remote(str(out.resolve()), asdict(j), device): j for j in todo}
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
              ray_address=None, device="auto", chains=None, model=None,
              cuda_graph: bool = True) -> Path:
    """The whole Section 5: data, runs (each on ``device``), then tables, figures and
    ``report.html``. ``chains``: chains per sampler run (members per ensemble); ``model``:
    the network's ``width``, ``depth`` and ``latent`` where not the default; ``cuda_graph``:
    TrainConfig's, for every run."""
    from .device import resolve_device
    from .report import write_report

    device = str(resolve_device(device))  # a bad or missing device fails before any work
    out = Path(out)
    scen = scenarios(problems, noises)
    jobs = make_jobs(scen, methods, seeds, epochs, chains, model, cuda_graph)
    if executor == "local":  # before any data is written
        _check_workers(workers)
    ensure_data(out, scen)
    t0 = time.perf_counter()
    n_trained = execute(out, jobs, workers, executor, progress, ray_address, device)
    return write_report(out, jobs, wall_seconds=time.perf_counter() - t0, n_trained=n_trained)
