"""What the benchmarks share: the machine they ran on, a sampler set up the way
``bdeeponet.train`` sets it up, and interleaved timing with ``torch.utils.benchmark``.

A benchmark measures the library, not a copy of it: the model, energy, sampler and
generator come from ``bdeeponet.train.setup`` (what ``train`` itself builds, with the run's
defaults), and a step is the sampler's own ``step`` on a minibatch drawn as a run draws
it. What is wired here is only the phases.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils import benchmark
from torch.utils.flop_counter import FlopCounterMode

import bdeeponet
from bdeeponet import GaussianEnergy, OperatorData, TrainConfig
from bdeeponet.train import rows, setup

NOISE_STD = 0.01
SEED = 0


def header(question: str) -> None:
    """One thread (as in the grid's workers), then the question, the machine, the command."""
    torch.set_num_threads(1)
    print(question)
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores, {platform.system()} "
          f"{platform.release()}; python {platform.python_version()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread")
    print("command: python " + " ".join(sys.argv))


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def problem_data(name: str, **params) -> OperatorData:
    """A problem's data set at the paper's sizes (1000 training functions, m = 100)."""
    return bdeeponet.generate(bdeeponet.get_problem(name, **params), NOISE_STD,
                              np.random.default_rng(SEED))


@dataclass
class Chain:
    """A sampler on a data set, stepping through reshuffled minibatches as a run does."""

    sampler: object
    state: object
    energy: GaussianEnergy
    u: torch.Tensor
    s: torch.Tensor
    batches: list[torch.Tensor]
    generator: torch.Generator
    cursor: int = 0

    def step(self) -> dict:
        idx = self.batches[self.cursor % len(self.batches)]
        self.cursor += 1
        return self.sampler.step(self.state, self.energy, (rows(self.u, idx), rows(self.s, idx)),
                                 self.generator, index=idx)


def sampler_on(data: OperatorData, method: str, sampling: bool = True, warmup: int = 10,
               device: str = "cpu", shared_metric: bool = False, **config) -> Chain:
    """``method`` with the run's defaults (``TrainConfig(method=method, **config)``), after
    ``warmup`` burn-in steps; with ``sampling``, ``end_burn_in`` and ``warmup`` more steps:
    the sampling phase, where the Kronecker metric is used and m-reSGLD's hot replica
    updates one net. ``shared_metric`` (SGLD with chains only): every chain steps with the
    first chain's metric, estimated once; a step's arithmetic is the same, and the set-up of
    many chains (each chain's metric estimated on its own, one after the other: minutes for
    64 chains on a GPU) is skipped."""
    conf = TrainConfig(method=method, **config)
    run = setup(data, conf, data.noise_std, device)
    gen = torch.Generator().manual_seed(SEED)
    # each chain its own order, as a run draws them (one chain's batches shared: (n,))
    order = torch.stack([torch.randperm(data.n_train, generator=gen)
                         for _ in range(run.chains)]).squeeze(0)
    batches = [b.to(device) for b in order.split(conf.batch_size, dim=-1)]
    chain = Chain(run.sampler, run.init_state(), run.energy, run.u, run.s, batches, run.generator)
    for _ in range(warmup):
        chain.step()
    if sampling and shared_metric and run.chains > 1 and method == "sgld":
        _share_first_metric(chain.state, run.sampler, run.energy, run.u, run.s, run.generator)
        for _ in range(warmup):
            chain.step()
    elif sampling:
        run.sampler.end_burn_in(chain.state, run.energy, (run.u, run.s), run.generator)
        for _ in range(warmup):
            chain.step()
    return chain


def _share_first_metric(state, sampler, energy, u, s, generator) -> None:
    from bdeeponet.samplers.kfac import KroneckerMetric, estimate_kfac, tame
    from bdeeponet.samplers.sgld import Sampling, metric_batches

    params = {n: p[0] for n, p in state.chain.params.items()}
    batches = metric_batches((u, s))
    metric = estimate_kfac(energy, params, batches, generator, sampler.fisher_samples)
    lam = tame(energy, metric, params, batches[:3], generator)
    stacked = KroneckerMetric.stack([metric] * state.chain.n_chains)
    state.sampling = Sampling(stacked, None, sampler.max_stiffness / lam, lam)
    state.warm = None


def seconds_per_call(fn: Callable[[], object], min_run_time: float) -> float:
    """Median seconds per call of ``fn`` over the blocks of ``blocked_autorange``."""
    timer = benchmark.Timer("fn()", globals={"fn": fn}, num_threads=1)
    return timer.blocked_autorange(min_run_time=min_run_time).median


def interleaved(fns: dict[str, Callable[[], object]], rounds: int,
                min_run_time: float) -> dict[str, list[float]]:
    """Seconds per call of each ``fn``, once per round, the order rotated every round: on a
    shared machine a slow spell then hits every variant alike, and a ratio taken within a
    round compares like with like."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(seconds_per_call(fns[name], min_run_time))
    return times


def median_iqr(values) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile)."""
    q25, q50, q75 = np.percentile(values, [25, 50, 75])
    return float(q50), float(q25), float(q75)


def ratio(num: list[float], den: list[float]) -> tuple[float, float, float]:
    """Median and quartiles of the within-round ratios ``num / den``."""
    return median_iqr([a / b for a, b in zip(num, den, strict=True)])


def fmt_ratio(r: tuple[float, float, float]) -> str:
    return f"{r[0]:.2f} [{r[1]:.2f}, {r[2]:.2f}]"


def fmt_ms(values: list[float]) -> str:
    med, q25, q75 = median_iqr(values)
    return f"{1e3 * med:.3f} [{1e3 * q25:.3f}, {1e3 * q75:.3f}]"


def flops_per_call(fn: Callable[[], object], calls: int = 20) -> float:
    """Floating-point operations per call of ``fn`` in matrix products (the arithmetic that
    grows with the particles; elementwise work is not counted), by
    ``torch.utils.flop_counter``, the mean over ``calls`` calls (m-reSGLD draws which net
    its hot replica trains)."""
    with FlopCounterMode(display=False) as counter:
        for _ in range(calls):
            fn()
    return float(counter.get_total_flops()) / calls


def print_ratio_table(times: dict[str, list[float]], baseline: str, first: str,
                      width: int = 36, flops: dict[str, float] | None = None) -> None:
    """ms per call [IQR] of each variant and its within-round ratio to ``baseline``; with
    ``flops``, each variant's matrix-product MFLOP per call and their ratio to the baseline's
    (the ratio the time would have if every step were arithmetic-bound)."""
    head = f"{first:<{width}}{'ms / iteration [IQR]':>26}{f'x {baseline} [IQR]':>22}"
    if flops:
        head += f"{'MFLOP':>8}{'x':>6}"
    print(head)
    print("-" * len(head))
    for label, t in times.items():
        row = f"{label:<{width}}{fmt_ms(t):>26}{fmt_ratio(ratio(t, times[baseline])):>22}"
        if flops:
            row += f"{flops[label] / 1e6:>8.1f}{flops[label] / flops[baseline]:>6.2f}"
        print(row)


def timed_table(data: OperatorData, runs: dict[str, Chain], rounds: int, min_run_time: float,
                device: str, baseline: str, first: str, batch: str = "batch 100 functions") -> None:
    """Time each run's ``step`` in interleaved rounds and print the ratio table, under a line
    naming the problem, its size and the device."""
    times = interleaved({k: r.step for k, r in runs.items()}, rounds, min_run_time)
    flops = {k: flops_per_call(r.step) for k, r in runs.items()}
    n_points, dim_y = data.y.shape
    print(f"\n{data.meta.get('problem', '?')}: P = {n_points} query points (d = {dim_y}), "
          f"{batch}; {rounds} rounds; device {device}")
    print_ratio_table(times, baseline, first, flops=flops)


def parser_for(doc: str):
    """The options the timing scripts share: --quick and --pde; returns (parser, timing),
    ``timing(args)`` giving (rounds, min_run_time)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.2 s per variant")
    parser.add_argument("--pde", default="advection_diffusion",
                        choices=["advection_diffusion", "diffusion_reaction"])
    return parser, lambda args: (3, 0.2) if args.quick else (7, 1.0)
