"""Sampler benchmark: per-iteration cost of Adam, SGLD, reSGLD and m-reSGLD, the aligned
DeepONet against the per-point replicated form, how a reSGLD step scales, and where the
time of one reSGLD step goes.

Everything runs in one process on one thread (``torch.set_num_threads(1)``). To keep
machine noise from biasing the comparisons, the variants of each table are interleaved:
every round runs a block of steps of each variant (in a rotated order), and the tables
report the median over rounds. Ratios are taken within a round (same machine state)
and their median is reported with its interquartile range.

Sections:

1. ms/iter of each sampler at the paper's settings (batch of 100 functions, default
   model, ``TrainConfig`` defaults) on the anti-derivative (P = 100) and on a PDE problem
   (P = 1024, 2-D y), as ratios to one Adam step, with the targets
   m-reSGLD / reSGLD <= 0.80, reSGLD / SGLD <= 2.0 and, for the default Kronecker metric
   against the earlier diagonal one (``metric="rmsprop"``), <= 1.5 per method. The
   samplers are timed in their sampling phase (after ``end_burn_in``).
2. forward + backward of the aligned DeepONet (``B @ T^T``) against the replicated form
   (branch on (N*P, m), trunk on (N*P, d), row-wise dot) at N = 1000, P = 100, after
   checking both give the same outputs and gradients (target speed-up >= 25x).
3. reSGLD step time against the batch size, the number of query points and the width.
4. the parts of one reSGLD step, timed separately with the library's own functions
   (``--profile`` adds a cProfile listing of reSGLD steps).

Run: python benchmarks/bench_samplers.py [--quick] [--profile] [--pde NAME]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import math
import pstats
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

import bdeeponet
from bdeeponet.config import TrainConfig
from bdeeponet.energy import GaussianEnergy, autograd_value_and_grad, fan_in_prior
from bdeeponet.model import DeepONet, ModelConfig, set_dropout_generator
from bdeeponet.samplers.langevin import energy_and_grads
from bdeeponet.samplers.sgld import move
from bdeeponet.samplers.swap import (
    accept_swap,
    estimator_variance,
    paired_variance,
    swap_log_rate,
)
from bdeeponet.train import build_sampler

NOISE_STD = 0.01
SEED = 0


@dataclass(frozen=True)
class Settings:
    rounds: int  # interleaved rounds per table
    block: int  # sampler steps per variant and round
    warmup: int  # untimed steps per variant before the first round
    batch_sizes: tuple[int, ...]
    n_points: tuple[int, ...]
    widths: tuple[int, ...]
    replicated_rounds: int


FULL = Settings(21, 10, 30, (25, 50, 100, 200, 400), (100, 400, 1024, 2500), (32, 64, 128, 256), 7)
QUICK = Settings(5, 5, 10, (25, 100, 400), (100, 1024), (32, 64, 256), 3)


# ---------------------------------------------------------------------------------------
# timing helpers


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = np.percentile(values, [25, 50, 75])
    return float(q[0]), float(q[1]), float(q[2])


def interleave(variants: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Call each variant once per round, rotating the order; each call returns seconds
    per iteration of one timed block. Returns the per-round times of every variant."""
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(variants[name]())
    return times


def ratio_stats(num: list[float], den: list[float]) -> tuple[float, float, float]:
    """Quartiles of the within-round ratios num/den."""
    return quartiles([a / b for a, b in zip(num, den, strict=True)])


def fmt_ratio(q: tuple[float, float, float]) -> str:
    return f"{q[1]:.3f} [{q[0]:.3f}, {q[2]:.3f}]"


def block_timer(fn: Callable[[], object], reps: int) -> Callable[[], float]:
    """A variant for :func:`interleave`: ``reps`` calls of ``fn``, seconds per call."""

    def run() -> float:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    return run


# ---------------------------------------------------------------------------------------
# data and samplers


@dataclass
class Problem:
    name: str
    u: torch.Tensor  # (N, m)
    s: torch.Tensor  # (N, P)
    y: torch.Tensor  # (P, d)


def load_problem(name: str) -> Problem:
    data = bdeeponet.generate(bdeeponet.get_problem(name), NOISE_STD, np.random.default_rng(SEED))
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
    return Problem(name, t(data.u_train), t(data.s_train), t(data.y))


def synthetic_problem(n: int, m: int, n_points: int, dim_y: int, seed: int = SEED) -> Problem:
    """Random inputs and targets of the given shapes (the cost of a step does not depend
    on the values); ``y`` is a regular grid on [0, 1]^dim_y when n_points is a square."""
    g = torch.Generator().manual_seed(seed)
    side = round(n_points ** (1 / dim_y))
    if side**dim_y == n_points:
        axes = torch.meshgrid(*[torch.linspace(0, 1, side)] * dim_y, indexing="ij")
        y = torch.stack([a.reshape(-1) for a in axes], dim=1)
    else:
        y = torch.rand(n_points, dim_y, generator=g)
    return Problem(
        "synthetic",
        torch.randn(n, m, generator=g),
        torch.randn(n, n_points, generator=g),
        y,
    )


@dataclass
class Runner:
    """One sampler on one problem, stepping through a fixed epoch of minibatches like
    ``train._run_epoch`` does (the same batches for every variant)."""

    sampler: object
    state: object
    energy: GaussianEnergy
    batches: list[tuple[torch.Tensor, torch.Tensor]]
    generator: torch.Generator
    cursor: int = 0
    swaps: int = 0
    steps: int = 0
    infos: list[dict] = field(default_factory=list)

    def step(self) -> dict:
        u, s, index = self.batches[self.cursor % len(self.batches)]
        self.cursor += 1
        return self.sampler.step(self.state, self.energy, (u, s), self.generator, index=index)

    def timed_block(self, n: int) -> float:
        swaps = 0
        t0 = time.perf_counter()
        for _ in range(n):
            swaps += bool(self.step().get("swapped", False))
        elapsed = time.perf_counter() - t0
        self.swaps += swaps
        self.steps += n
        return elapsed / n


def make_batches(problem: Problem, batch_size: int) -> list[tuple[torch.Tensor, ...]]:
    order = torch.randperm(problem.u.shape[0], generator=torch.Generator().manual_seed(SEED))
    n = problem.u.shape[0]
    return [
        (problem.u[idx], problem.s[idx], idx)
        for idx in (order[i : i + batch_size] for i in range(0, n - batch_size + 1, batch_size))
    ]


def make_runner(
    problem: Problem,
    method: str,
    batch_size: int = 100,
    width: int = 64,
    sampling: bool = False,
    warmup: int = 0,
    **overrides,
) -> Runner:
    """A sampler built exactly as ``train.train`` builds it (``TrainConfig`` defaults,
    ``build_sampler``), with ``warmup`` untimed steps; ``sampling`` takes ``warmup`` burn-in
    steps, then calls ``end_burn_in`` (the sampling phase: the Kronecker metric, and
    m-reSGLD's one-group hot steps) and takes ``warmup`` more."""
    config = TrainConfig(method=method, batch_size=batch_size, width=width, **overrides)
    mconf = ModelConfig(
        n_sensors=problem.u.shape[1],
        dim_y=problem.y.shape[1],
        width=config.width,
        depth=config.depth,
        latent=config.latent,
        activation=config.activation,
        dropout=config.dropout if method == "adam" else 0.0,
    )
    with torch.random.fork_rng():
        torch.manual_seed(config.seed)
        model = DeepONet(mconf)
    gen = torch.Generator().manual_seed(config.seed + 1)
    set_dropout_generator(model, gen)
    model.train(method == "adam")
    energy = GaussianEnergy(model, problem.y, problem.u.shape[0], NOISE_STD,
                            fan_in_prior(model, config.prior_std))
    batches = make_batches(problem, batch_size)
    sampler = build_sampler(config, model, len(batches))
    state = sampler.init(dict(model.named_parameters()))
    runner = Runner(sampler, state, energy, batches, gen)
    if sampling:
        for _ in range(warmup):
            runner.step()
        sampler.end_burn_in(state, energy, (problem.u, problem.s), gen)
    for _ in range(warmup):
        runner.step()
    return runner


# ---------------------------------------------------------------------------------------
# 1. per-iteration time of the samplers

RMSPROP = {"metric": "rmsprop"}
SAMPLER_VARIANTS = {
    # label: (method, sampling phase, TrainConfig overrides)
    "Adam (MC dropout, p=0.1)": ("adam", False, {}),
    "warm start (Adam burn-in)": ("sgld", False, {}),
    "SGLD": ("sgld", True, {}),
    "SGLD + control variate": ("sgld", True, {"control_variate": True}),
    "reSGLD": ("resgld", True, {}),
    "m-reSGLD (c=0.7)": ("mresgld", True, {}),
    "  hot trains branch only (c=1)": ("mresgld", True, {"c": 1.0}),
    "  hot trains trunk only (c=0)": ("mresgld", True, {"c": 0.0}),
    "SGLD, rmsprop (before)": ("sgld", True, RMSPROP),
    "reSGLD, rmsprop (before)": ("resgld", True, RMSPROP),
    "m-reSGLD, rmsprop (before)": ("mresgld", True, RMSPROP),
}
ADAM = "Adam (MC dropout, p=0.1)"
MRESGLD = "m-reSGLD (c=0.7)"


def bench_samplers(problem: Problem, cfg: Settings) -> None:
    runners = {
        label: make_runner(problem, method, sampling=acc, warmup=cfg.warmup, **kw)
        for label, (method, acc, kw) in SAMPLER_VARIANTS.items()
    }
    times = interleave({k: (lambda r=r: r.timed_block(cfg.block)) for k, r in runners.items()},
                       cfg.rounds)
    n_points, dim_y = problem.y.shape
    print(f"\n{problem.name}: batch 100 functions x P = {n_points} points (d = {dim_y}), "
          f"width 64, depth 2, latent 64; {cfg.rounds} rounds x {cfg.block} steps")
    header = (f"{'method':<32}{'ms/iter':>9}{'IQR':>17}{'x Adam step':>22}{'swaps/step':>12}")
    print(header)
    print("-" * len(header))
    for label, t in times.items():
        q25, med, q75 = quartiles(t)
        r = runners[label]
        swaps = f"{r.swaps / r.steps:.3f}" if hasattr(r.state, "n_swaps") else ""
        print(f"{label:<32}{1e3 * med:>9.3f}{f'[{1e3 * q25:.3f}, {1e3 * q75:.3f}]':>17}"
              f"{fmt_ratio(ratio_stats(t, times[ADAM])):>22}{swaps:>12}")
    print("ratios (median within-round [IQR]):")
    m_re = ratio_stats(times[MRESGLD], times["reSGLD"])
    re_s = ratio_stats(times["reSGLD"], times["SGLD"])
    print(f"  m-reSGLD / reSGLD               = {fmt_ratio(m_re)}   target <= 0.80: "
          f"{'met' if m_re[1] <= 0.80 else 'NOT met'}")
    print(f"  reSGLD / SGLD                   = {fmt_ratio(re_s)}   target <= 2.0: "
          f"{'met' if re_s[1] <= 2.0 else 'NOT met'}")
    for method, before in (("SGLD", "SGLD, rmsprop (before)"), ("reSGLD", "reSGLD, rmsprop (before)"),
                           (MRESGLD, "m-reSGLD, rmsprop (before)"),
                           ("SGLD + control variate", "SGLD, rmsprop (before)")):
        r = ratio_stats(times[method], times[before])
        print(f"  {method + ' / before':<31} = {fmt_ratio(r)}   target <= 1.5: "
              f"{'met' if r[1] <= 1.5 else 'NOT met'}")


# ---------------------------------------------------------------------------------------
# 2. aligned vs replicated DeepONet


def replicated_forward(model: DeepONet, u_rep: torch.Tensor, y_rep: torch.Tensor) -> torch.Tensor:
    """The unaligned DeepONet: one (function, point) pair per row, (N*P,)."""
    return (model.branch(u_rep) * model.trunk(y_rep)).sum(dim=1) + model.bias


def bench_aligned(problem: Problem, cfg: Settings) -> None:
    n, n_points = problem.s.shape
    torch.manual_seed(SEED)
    model = DeepONet(ModelConfig(problem.u.shape[1], problem.y.shape[1]))
    params = list(model.parameters())
    u, s, y = problem.u, problem.s, problem.y
    # The replicated data set, materialised once as the classic pipeline stores it.
    u_rep = u.repeat_interleave(n_points, dim=0)  # (N*P, m)
    y_rep = y.repeat(n, 1)  # (N*P, d)
    s_rep = s.reshape(-1)

    def aligned():
        loss = 0.5 * ((model(u, y) - s) ** 2).sum()
        return loss, torch.autograd.grad(loss, params)

    def replicated():
        loss = 0.5 * ((replicated_forward(model, u_rep, y_rep) - s_rep) ** 2).sum()
        return loss, torch.autograd.grad(loss, params)

    with torch.no_grad():
        out_a = model(u, y)
        out_r = replicated_forward(model, u_rep, y_rep).reshape(n, n_points)
    (loss_a, grad_a), (loss_r, grad_r) = aligned(), replicated()
    out_diff = float((out_a - out_r).abs().max())
    grad_rel = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(grad_a, grad_r, strict=True))

    t_rep_build = block_timer(lambda: (u.repeat_interleave(n_points, 0), y.repeat(n, 1)), 3)()
    # Blocks of about the same length: one replicated pass against many aligned ones.
    t_probe = block_timer(aligned, 5)()
    reps_aligned = max(1, int(0.05 / t_probe))
    times = interleave({"aligned": block_timer(aligned, reps_aligned),
                        "replicated": block_timer(replicated, 1)}, cfg.replicated_rounds)
    print(f"\naligned vs replicated forward + backward (loss and all parameter gradients), "
          f"N = {n} functions, P = {n_points} points, default model; "
          f"{cfg.replicated_rounds} rounds")
    print(f"  same numbers: max |output diff| = {out_diff:.2e}, max relative gradient diff = "
          f"{grad_rel:.2e}, loss {float(loss_a.detach()):.6e} vs {float(loss_r.detach()):.6e}")
    header = f"{'form':<40}{'ms':>10}{'IQR':>22}"
    print(header)
    print("-" * len(header))
    for name, label in (("aligned", "aligned  B @ T^T, (N, m) and (P, d)"),
                        ("replicated", "replicated rows (N*P, m) and (N*P, d)")):
        q25, med, q75 = quartiles(times[name])
        print(f"{label:<40}{1e3 * med:>10.2f}{f'[{1e3 * q25:.2f}, {1e3 * q75:.2f}]':>22}")
    speed = ratio_stats(times["replicated"], times["aligned"])
    print(f"  speed-up replicated / aligned = {speed[1]:.1f}x [{speed[0]:.1f}, {speed[2]:.1f}]   "
          f"target >= 25x: {'met' if speed[1] >= 25 else 'NOT met'}")
    print(f"  (building the replicated inputs, not included above: {1e3 * t_rep_build:.1f} ms; "
          f"replicated input {u_rep.numel() * 4 / 2**20:.0f} MiB vs {u.numel() * 4 / 2**20:.2f} MiB)")


# ---------------------------------------------------------------------------------------
# 3. scaling of a reSGLD step


def scaling_table(title: str, column: str, runners: dict[int, Runner], base: int,
                  unit: Callable[[int], float], unit_name: str, cfg: Settings, fit: bool = True) -> None:
    times = interleave({k: (lambda r=r: r.timed_block(cfg.block)) for k, r in runners.items()},
                       cfg.rounds)
    print(f"\n{title}")
    header = f"{column:>10}{'ms/iter':>10}{'IQR':>18}{f'x {column}={base}':>24}{unit_name:>16}"
    print(header)
    print("-" * len(header))
    for k, t in times.items():
        q25, med, q75 = quartiles(t)
        ratio = fmt_ratio(ratio_stats(t, times[base])) if base in times else ""
        print(f"{k:>10}{1e3 * med:>10.3f}{f'[{1e3 * q25:.3f}, {1e3 * q75:.3f}]':>18}{ratio:>24}"
              f"{1e6 * med / unit(k):>16.3f}")
    if fit and len(times) > 2:
        slope, intercept = np.polyfit(list(times), [1e3 * quartiles(t)[1] for t in times.values()], 1)
        print(f"  least-squares line: {intercept:.3f} ms + {1e3 * slope:.3f} us x {column} "
              f"(fixed cost {100 * intercept / (intercept + slope * base):.0f}% at {column} = {base})")


def bench_scaling(anti: Problem, cfg: Settings) -> None:
    print(f"\nreSGLD step time scaling ({cfg.rounds} rounds x {cfg.block} steps; other settings "
          "at the defaults: batch 100, P = 100, width 64)")
    runners = {b: make_runner(anti, "resgld", batch_size=b, sampling=True, warmup=cfg.warmup)
               for b in cfg.batch_sizes}
    scaling_table("functions per batch (anti-derivative, P = 100, d = 1)", "batch", runners, 100,
                  lambda b: b, "us/function", cfg)
    runners = {}
    for p in cfg.n_points:
        prob = synthetic_problem(1000, 100, p, 2)
        runners[p] = make_runner(prob, "resgld", sampling=True, warmup=cfg.warmup)
    scaling_table("query points (synthetic data, batch 100, y on a 2-D grid)", "P", runners, 100,
                  lambda p: 100 * p / 1000, "us/1000 outputs", cfg)
    runners = {w: make_runner(anti, "resgld", width=w, sampling=True, warmup=cfg.warmup)
               for w in cfg.widths}
    n_params = {w: sum(p.numel() for p in r.state.chains[0].params.values()) for w, r in runners.items()}
    scaling_table("width of the hidden layers (anti-derivative, batch 100, latent 64)", "width",
                  runners, 64, lambda w: n_params[w] / 1000, "us/1000 params", cfg, fit=False)


# ---------------------------------------------------------------------------------------
# 4. anatomy of a reSGLD step


def bench_anatomy(problem: Problem, cfg: Settings) -> None:
    runner = make_runner(problem, "resgld", sampling=True, warmup=cfg.warmup)
    sampler, energy = runner.sampler, runner.energy
    state = copy.deepcopy(runner.state)  # the parts below mutate it
    chain = state.chains[0]
    params = chain.params
    model = energy.model
    u, s, _ = runner.batches[0]
    batch = (u, s)
    names = list(params)
    gen = torch.Generator().manual_seed(SEED)

    def fwd_bwd():
        return energy_and_grads(energy, params, batch)

    def forward():  # the output and the loss, no tape, no gradient
        with torch.no_grad():
            r = model.functional_forward(params, u, energy.y) - s
            return (r * r).sum(dim=1)

    def autograd_fwd_bwd():  # the same value and gradient through autograd
        return autograd_value_and_grad(energy, params, batch, names)

    _, grads = fwd_bwd()

    def flat_grad():
        return chain.flat_grad(grads)

    def noise():
        return torch.randn(chain.flat.shape, generator=gen)

    def update():
        move(chain, grads, sampler.step_size, sampler.tau1, gen, None, state.sampling)

    v1, _ = fwd_bwd()
    v2, _ = energy_and_grads(energy, state.chains[1].params, batch)

    def swap():
        var = state.swap_var.update(paired_variance(v1.terms, v2.terms, v1.scale, v1.n_total))
        for level, v in enumerate((v1, v2)):
            state.replica_var[level].update(estimator_variance(v.terms, v.scale, v.n_total))
        rate = swap_log_rate(float(v1.total - v2.total), var, 1.0, 10.0)
        accept_swap(rate, gen)
        return float(v1.total), float(v2.total), math.exp(min(0.0, rate))

    reps = 50
    parts = {
        "step": lambda: runner.timed_block(reps),
        "fwd_bwd": block_timer(fwd_bwd, reps),
        "forward": block_timer(forward, reps),
        "autograd": block_timer(autograd_fwd_bwd, reps),
        "flat_grad": block_timer(flat_grad, reps),
        "noise": block_timer(noise, reps),
        "update": block_timer(update, reps),
        "swap": block_timer(swap, reps),
    }
    t = {k: quartiles(v)[1] for k, v in interleave(parts, max(5, cfg.rounds // 2)).items()}
    n_points = problem.y.shape[0]
    step = t["step"]
    rows = [
        ("energy and gradient (hand-written backward)", 2 * t["fwd_bwd"]),
        ("  of which the forward pass and the loss", 2 * t["forward"]),
        ("Langevin update (Kronecker metric, noise)", 2 * t["update"]),
        ("  of which gathering the flat gradient", 2 * t["flat_grad"]),
        ("  of which drawing the Gaussian noise", 2 * t["noise"]),
        ("swap bookkeeping (variances, rate, test, floats)", t["swap"]),
    ]
    print(f"\nanatomy of one reSGLD step ({problem.name}, batch 100, P = {n_points}): parts timed "
          "separately with the library's functions, x2 where both replicas do them")
    header = f"{'part':<52}{'ms/step':>9}{'% of step':>11}"
    print(header)
    print("-" * len(header))
    for label, sec in rows:
        print(f"{label:<52}{1e3 * sec:>9.3f}{100 * sec / step:>10.1f}%")
    top = [r for r in rows if not r[0].startswith("  ")]
    total = sum(sec for _, sec in top)
    print(f"{'sum of the parts':<52}{1e3 * total:>9.3f}{100 * total / step:>10.1f}%")
    rest = step - total
    label = "rest (step code, dicts, cache effects, noise)"
    print(f"{label:<52}{1e3 * rest:>9.3f}{100 * rest / step:>10.1f}%")
    print(f"{'measured reSGLD step':<52}{1e3 * step:>9.3f}{100.0:>10.1f}%")
    print(f"(for comparison: energy and gradient through autograd, x2: {2e3 * t['autograd']:.3f} ms)")


def profile_resgld(problem: Problem, n_steps: int) -> None:
    runner = make_runner(problem, "resgld", sampling=True, warmup=20)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n_steps):
        runner.step()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(20)
    print(f"\ncProfile of {n_steps} reSGLD steps ({problem.name}), by own time:")
    print("\n".join(line for line in buf.getvalue().splitlines() if line.strip()))


# ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and sizes")
    parser.add_argument("--profile", action="store_true", help="add a cProfile of reSGLD steps")
    parser.add_argument("--pde", default="advection_diffusion",
                        choices=["advection_diffusion", "diffusion_reaction"],
                        help="the PDE problem of section 1 (P = 1024)")
    args = parser.parse_args()
    cfg = QUICK if args.quick else FULL
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread; medians over interleaved "
          "rounds, [IQR] = interquartile range")
    anti = load_problem("antiderivative")
    print("\n== 1. per-iteration time of the samplers ==")
    bench_samplers(anti, cfg)
    bench_samplers(load_problem(args.pde), cfg)
    print("\n== 2. aligned vs replicated DeepONet ==")
    bench_aligned(anti, cfg)
    print("\n== 3. scaling of a reSGLD step ==")
    bench_scaling(anti, cfg)
    print("\n== 4. where the time of a reSGLD step goes ==")
    bench_anatomy(anti, cfg)
    if args.profile:
        profile_resgld(anti, 100 if args.quick else 300)
    print(f"\ntotal benchmark time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
