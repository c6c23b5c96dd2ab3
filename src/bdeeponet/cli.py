"""bdeeponet: Bayesian DeepONets for noisy operator data, sampled with replica-exchange SGLD.

Every bad input ends with one line ``error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

EXIT_BAD_INPUT = 2
"""Below this share of accepted swaps, ``train`` says the replicas did not exchange."""


class UsageError(Exception):
    pass


class _Help(argparse.RawDescriptionHelpFormatter):
    """Appends ``(default: X)`` to an option's help unless it says its default itself or
    has none worth showing (None, or off for a switch)."""

    def _get_help_string(self, action):
        text = action.help or ""
        # by identity: 0 == False, and a default of 0 (--seed) is a default to show
        if "default" in text or any(action.default is v for v in (None, False, argparse.SUPPRESS)) \
                or action.default == [] or not action.option_strings:
            return text
        shown = " ".join(map(str, action.default)) if isinstance(action.default, list) \
            else action.default
        return f"{text} (default: {shown})"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message):  # one line instead of usage + message
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _add_generate(sub):
    p = sub.add_parser("generate", help="draw input functions, solve a problem, write FILE.npz")
    p.add_argument("problem", help="a problem name ('bdeeponet problems' lists them)")
    p.add_argument("--noise", type=float, help="noise standard deviation (required for .npz)")
    p.add_argument("--relative-noise", action="store_true",
                   help="--noise is a fraction of the clean targets' standard deviation")
    p.add_argument("--out", required=True,
                   help="output: .npz (aligned, noisy training targets), or .mat / .h5 (burgers, "
                        "darcy2d: the published benchmark files' layout, clean, all functions)")
    p.add_argument("--mat73", action="store_true", help="with --out F.mat: MATLAB v7.3 (HDF5), "
                   "not v5")
    p.add_argument("--n-train", type=int, help="training functions (default: 1000)")
    p.add_argument("--n-test", type=int, help="test functions (clean targets; default: 100)")
    p.add_argument("--m", type=int, help="number of sensors (default: 100; GRF problems only)")
    p.add_argument("--length-scale", type=float,
                   help="GRF length scale (default: 0.2; GRF problems only)")
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs and the noise")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="problem parameter, e.g. --param D=0.05 (repeatable)")
    p.add_argument("--inputs", metavar="PICKED.npz",
                   help="solve these inputs ('u' (n, m) at m equispaced sensors, as 'acquire' "
                        "writes them) instead of drawing new ones; they become the training "
                        "functions (and, without --merge-into, the test set too)")
    p.add_argument("--merge-into", metavar="DATA.npz",
                   help="with --inputs: DATA's training functions plus the solved inputs, "
                        "DATA's test set (noise: DATA's sd unless --noise)")


def _add_train(sub):
    p = sub.add_parser("train", help="train a (Bayesian) DeepONet, write a run directory")
    p.add_argument("data", help="aligned operator data (.npz)")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--config", help="TOML file with the keys below, '-' for '_' (flags override it)")
    config_options(p)
    p.add_argument("--resume", action="store_true", help="continue from the run's checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's, one per core unless "
                   "OMP_NUM_THREADS says otherwise)")
    _device_option(p)


def _device_option(p) -> None:
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda[:N]",
                   help="where to compute; auto: a CUDA GPU when torch sees one, else the CPU")


def config_options(parser, only=None,
                   title: str = "training configuration (also the keys of --config)") -> None:
    """One ``--flag`` per :class:`TrainConfig` field (or per field named in ``only``), its help
    line and default taken from the field. Flags default to None, so only the ones given
    override a ``--config`` file (or the defaults)."""
    from dataclasses import MISSING, fields

    from .config import TrainConfig

    group = parser.add_argument_group(title)
    for f in fields(TrainConfig):
        if only is not None and f.name not in only:
            continue
        meta, flag = f.metadata, "--" + f.name.replace("_", "-")
        text = meta["help"] if f.default in (None, MISSING) else f"{meta['help']} (default: {f.default})"
        text = text.replace("%", "%%")
        if f.type == "bool":
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
            continue
        kind = {"int": int, "int | None": int, "float": float, "float | None": float,
                "str": str, "str | None": str, "float | str | None": _noise_std}[f.type]
        group.add_argument(flag, type=kind, default=None, choices=meta.get("choices"),
                           metavar=meta.get("metavar"), help=text)


def _noise_std(text: str):
    if text == "auto":
        return "auto"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0 or 'auto', got '{text}'") from None
    if not (value > 0 and np.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number > 0 or 'auto', got '{text}'")
    return value


def _unit_interval(what: str):
    """An argparse type: a number in (0, 1), else one line naming ``what``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not 0 < value < 1:
            raise argparse.ArgumentTypeError(f"{what} must be in (0, 1), got '{text}'")
        return value

    return parse


_level = _unit_interval("a nominal level")
_rate = _unit_interval("a false-alarm rate")


def _add_predict_evaluate(sub):
    p = sub.add_parser("predict", help="predictive mean, std and bands for new inputs")
    p.add_argument("run", help="run directory")
    p.add_argument("input", help=".npz, MATLAB or HDF5 file with 'u' (n, m) and optionally 'y' (P, d)")
    p.add_argument("--out", required=True,
                   help="output .npz: mean, std, lower/upper (solution band), obs_std, "
                        "obs_lower/obs_upper (observation band), sim_lower/sim_upper (whole "
                        "trajectory), novelty and novel (per input), meta")
    p.add_argument("--level", type=_level, default=0.95,
                   help="nominal level of the pointwise bands")
    p.add_argument("--function-level", type=_level, default=0.95,
                   help="nominal level of the function-level band")
    p.add_argument("--false-alarm", type=_rate, default=0.05,
                   help="rate at which inputs drawn like the training inputs are flagged novel")
    _device_option(p)
    p = sub.add_parser("evaluate", help="metrics of a run on a data file's test set (JSON)")
    p.add_argument("run", help="run directory")
    p.add_argument("data", help="aligned operator data (.npz)")
    _device_option(p)
    p = sub.add_parser("calibrate", help="refit a finished run's band calibration on its "
                       "held-out training functions (rewrites posterior.pt and metrics.json)")
    p.add_argument("run", help="run directory")
    p.add_argument("data", help="the aligned operator data (.npz) the run was trained on")
    p = sub.add_parser("plot-data", help="figure of the input and target distributions")
    p.add_argument("data", help="aligned operator data (.npz)")
    p.add_argument("--out", required=True, help="output image (.png, .pdf, .svg)")


def _add_reproduce(sub):
    p = sub.add_parser("reproduce", help="the paper's experiment grid: runs, tables, figures, report.html")
    p.add_argument("--out", required=True, help="output directory (data, runs, tables, report)")
    p.add_argument("--problems", nargs="+",
                   help="problems to run (default: the paper's four; darcy runs when named)")
    p.add_argument("--noises", nargs="+", type=float,
                   help="noise levels for every chosen problem (default: the paper's pairs)")
    p.add_argument("--methods", nargs="+", default=["adam", "resgld", "mresgld"],
                   help="any of adam, ensemble, sgld, resgld, mresgld, linear")
    p.add_argument("--chains", type=int, help="chains per sampler run, members per ensemble "
                   "(default: 1; ensemble 8)")
    p.add_argument("--epochs", type=int, default=8000, help="epochs of every run")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="training seeds")
    p.add_argument("--workers", type=int, default=2, help="local processes (one torch thread each)")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="where the runs execute: local processes or a Ray cluster")
    p.add_argument("--ray-address", help="address of a running Ray cluster (default: start one)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false",
                   help="sgld with kfac on a CUDA device: take eager steps, not a CUDA graph's "
                        "replays of them (the same draws; default: the replays)")
    _device_option(p)
    from .grid import MODEL_SIZE

    config_options(p, only=MODEL_SIZE, title="network of every run but the linear baseline")


def _add_import(sub):
    p = sub.add_parser("import", help="convert another tool's data file (.mat, HDF5, .npz) "
                       "into an aligned operator data file")
    p.add_argument("file", help="MATLAB (v5 or v7.3), HDF5 (.h5, .hdf5) or .npz file")
    p.add_argument("--input", required=True, metavar="KEY",
                   help="array of input functions, (N, n) or (N, n1, n2)")
    p.add_argument("--output", required=True, metavar="KEY",
                   help="array of solutions, (N, P) or (N, n1, n2)")
    p.add_argument("--out", required=True, help="output .npz file")
    p.add_argument("--grid", metavar="KEY",
                   help="array of the output's grid points (default: equispaced on [0, 1])")
    p.add_argument("--subsample", type=int, default=1, metavar="K",
                   help="keep every K-th point along each grid axis")
    p.add_argument("--n-train", type=int, metavar="N",
                   help="training functions, the first N (default: all but the test ones)")
    p.add_argument("--n-test", type=int, metavar="N",
                   help="test functions, after the training ones (default: 10%% of the file)")
    p.add_argument("--noise", type=float, metavar="SD",
                   help="add N(0, SD^2) noise to the training outputs (default: none added and "
                        "none recorded, so training estimates it)")
    p.add_argument("--noise-std", type=float, metavar="SD",
                   help="the outputs are measurements with noise of sd SD: recorded, nothing "
                        "added (instead of --noise)")
    p.add_argument("--seed", type=int, default=0, help="seed of the added noise")
    p.add_argument("--periodic", action="store_true",
                   help="the fields are periodic along every axis of their grid (default "
                        "grid: [0, 1) without its end); recorded in the file's meta")


def cmd_import(args) -> None:
    from .importing import import_to

    if not args.out.endswith(".npz"):
        raise UsageError(f"--out must end in .npz, got '{args.out}'")
    data = import_to(args.file, args.out, input_key=args.input, output_key=args.output,
                     grid_key=args.grid, subsample=args.subsample, n_train=args.n_train,
                     n_test=args.n_test, noise=args.noise, seed=args.seed,
                     noise_std=args.noise_std, periodic=args.periodic)
    noise = ("no noise sd" if data.noise_std is None else f"noise sd {data.noise_std:g} "
             + ("recorded" if args.noise_std is not None else "added"))
    print(f"wrote {args.out}: {data.n_train} train / {data.u_test.shape[0]} test functions, "
          f"{data.n_sensors} sensors, {data.n_points} query points of dimension "
          f"{data.y.shape[1]}, {noise} (grid: {data.meta['grid']})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bdeeponet", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_generate(sub)
    _add_import(sub)
    _add_train(sub)
    _add_predict_evaluate(sub)
    _add_reproduce(sub)
    p = sub.add_parser("acquire", help="the pool inputs whose solutions would most reduce the "
                       "posterior's uncertainty over the pool, picked as a batch (the next "
                       "simulations to run)")
    p.add_argument("run", help="run directory")
    p.add_argument("pool", help=".npz, MATLAB or HDF5 file with 'u' (n, m): the candidate inputs")
    p.add_argument("--n", type=int, required=True, help="how many to pick")
    p.add_argument("--criterion", choices=("reduction", "variance", "noisy"),
                   help="reduction (default): each pick the largest cut in the pool's total "
                   "predictive variance; variance: each pick the largest variance of its own "
                   "left by the earlier picks; noisy: reduction with each pick's solution "
                   "measured through the data's noise")
    p.add_argument("--error", choices=("relative", "absolute"),
                   help="relative (default): each candidate's variance over its predicted "
                   "solution's squared norm, as the relative error e2 weighs it; absolute: "
                   "the variance as it is")
    p.add_argument("--exclude", metavar="DATA.npz",
                   help="a data file whose inputs (training and test) are never picked: "
                   "the file the picks will be merged into")
    p.add_argument("--out", required=True, help="output .npz: u, index (into the pool), score")
    sub.add_parser("problems", help="list the problems: equation, parameters and defaults")
    return parser


def _parse_params(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--param must look like NAME=VALUE, got '{item}'")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out


def cmd_generate(args) -> None:
    from .data import generate
    from .problems import get_problem

    problem = get_problem(args.problem, **_parse_params(args.param))
    if args.merge_into and not args.inputs:
        raise UsageError("--merge-into needs --inputs PICKED.npz")
    if args.inputs:
        return _generate_from_inputs(problem, args)
    args.n_train = 1000 if args.n_train is None else args.n_train
    args.n_test = 100 if args.n_test is None else args.n_test
    if args.out.lower().endswith((".mat", ".h5", ".hdf5")):  # as `import` reads them
        return _generate_published(problem, args)
    if not args.out.endswith(".npz"):
        raise UsageError(f"--out must end in .npz (or .mat / .h5 for a published layout), got "
                         f"'{args.out}'")
    if args.noise is None:
        raise UsageError("--noise SD is required for an .npz output")
    if args.mat73:
        raise UsageError("--mat73 needs --out F.mat")
    data = generate(problem, args.noise, np.random.default_rng(args.seed), n_train=args.n_train,
                    n_test=args.n_test, m=args.m, length_scale=args.length_scale,
                    relative=args.relative_noise)
    data.meta["seed"] = args.seed
    data.save(args.out)
    print(f"wrote {args.out}: {data.n_train} train / {data.u_test.shape[0]} test functions, "
          f"{data.n_sensors} sensors, {data.n_points} query points, noise sd {data.noise_std:g}")


def _generate_from_inputs(problem, args) -> None:
    """Solve given inputs (``acquire``'s picks) and write them as training functions, merged
    into a data file when asked (train -> acquire -> generate --inputs -> train)."""
    from .data import OperatorData, input_sensors, load, problem_meta, read_npz, solve_inputs

    if not args.out.endswith(".npz"):
        raise UsageError(f"--out must end in .npz with --inputs, got '{args.out}'")
    for flag, given in (("--relative-noise", args.relative_noise), ("--mat73", args.mat73),
                        ("--m", args.m is not None), ("--length-scale", args.length_scale is not None),
                        ("--n-train", args.n_train is not None), ("--n-test", args.n_test is not None)):
        if given:
            raise UsageError(f"{flag} does not apply with --inputs: the inputs are given, and "
                             "--noise is the noise's sd itself")
    arrays = read_npz(args.inputs)
    if "u" not in arrays:
        raise UsageError(f"{args.inputs}: missing key 'u' (the inputs to solve, shape (n, m))")
    base = load(args.merge_into) if args.merge_into else None
    if base is not None:
        _check_same_problem(base.meta, problem, args.merge_into)
    u = np.asarray(arrays["u"], dtype=np.float64)
    if base is not None and (u.ndim != 2 or u.shape[1] != base.n_sensors):
        raise UsageError(f"{args.inputs}: 'u' has shape {u.shape}; {args.merge_into} has "
                         f"{base.n_sensors} sensors")
    if base is not None:
        _check_merge(base, u, args)
    s = solve_inputs(problem, u)
    sd = args.noise if args.noise is not None else (base.noise_std if base is not None else None)
    if sd is None or not (np.isfinite(sd) and sd > 0):
        raise UsageError("--noise SD (> 0) is required (or --merge-into a file that records its "
                         "noise sd)")
    # the noise's seed draws on the inputs too: each round of picks gets draws of its own
    digest = hashlib.sha256(np.ascontiguousarray(u).tobytes()).digest()
    rng = np.random.default_rng([args.seed, int.from_bytes(digest[:8], "little")])
    noisy = s + sd * rng.standard_normal(s.shape)
    meta = {"problem": problem.name, "noise_std": float(sd), "solved_inputs": args.inputs}
    if base is None:
        data = OperatorData(u, noisy, u, s, problem.query_points(),
                            input_sensors(problem, u.shape[1]), s, float(sd),
                            {**problem_meta(problem), **meta})
    else:
        if base.y.shape != problem.query_points().shape or not np.allclose(
                base.y, problem.query_points()):
            raise UsageError(f"{args.merge_into} was not made by {problem.name} with these "
                             f"parameters: its query points differ")
        clean = None if base.s_train_clean is None else np.vstack([base.s_train_clean, s])
        merged = base.meta.get("merged", [])  # each merge's record, oldest first
        merged = (merged if isinstance(merged, list) else [merged]) + [meta]
        data = OperatorData(np.vstack([base.u_train, u]), np.vstack([base.s_train, noisy]),
                            base.u_test, base.s_test, base.y, base.sensors, clean, float(sd),
                            {**base.meta, "merged": merged})
    data.save(args.out)
    print(f"wrote {args.out}: {data.n_train} train ({len(u)} solved from {args.inputs}) / "
          f"{data.u_test.shape[0]} test functions, noise sd {sd:g}")


def _check_merge(base, u: np.ndarray, args) -> None:
    """Refuse a merge that would give DATA's rows a noise sd they were not drawn with, or add
    inputs it already holds (a second copy of a function the simulator solves alike)."""
    if args.noise is not None and base.noise_std is not None and not np.isclose(
            args.noise, base.noise_std, rtol=1e-6, atol=0):
        raise UsageError(f"--noise {args.noise:g} differs from the noise sd {base.noise_std:g} "
                         f"that {args.merge_into} records: a merged file records one, for all "
                         "its rows (leave --noise out to use its own)")
    from .acquire import input_keys

    held = set(input_keys(np.vstack([base.u_train, base.u_test])))
    again = [i for i, key in enumerate(input_keys(u)) if key in held]
    if again:
        raise UsageError(f"{len(again)} of the {len(u)} inputs of {args.inputs} are already in "
                         f"{args.merge_into} (rows {', '.join(map(str, again[:5]))}"
                         f"{', ...' if len(again) > 5 else ''}): pick with `bdeeponet acquire "
                         f"... --exclude {args.merge_into}`")


def _check_same_problem(meta: dict, problem, path: str) -> None:
    """Refuse to merge solutions of ``problem`` into a data file that records another problem
    or other parameters (a merged file would describe the operator of its first rows only)."""
    from .data import problem_meta

    made = problem_meta(problem)
    if "problem" not in meta:
        raise UsageError(f"{path} records no problem (made by `bdeeponet import`, or by hand): "
                         f"nothing says its functions are {problem.name}'s; solve the inputs "
                         "with your simulator and append them yourself")
    if meta["problem"] != problem.name:
        raise UsageError(f"{path} holds the problem '{meta['problem']}', not '{problem.name}': "
                         f"its functions and these would be two operators")
    theirs = meta.get("parameters")
    if isinstance(theirs, dict):
        differ = sorted(k for k in set(theirs) | set(made["parameters"])
                        if theirs.get(k) != made["parameters"].get(k))
        if differ:
            shown = ", ".join(f"{k}={theirs.get(k)!r}" for k in differ)
            raise UsageError(f"{path} was made with other parameters of {problem.name} "
                             f"({shown}): pass them with --param")


def _generate_published(problem, args) -> None:
    """Clean inputs and solutions of n_train + n_test functions in the layout the field's
    benchmark files are published in (``import`` reads them back, adding noise there)."""
    from .data import draw_inputs
    from .importing import write_published

    keys = getattr(problem, "published_keys", None)
    if keys is None:
        raise UsageError(f"{problem.name} has no published layout; write .npz (the layouts: "
                         f"burgers, darcy2d)")
    if args.noise is not None or args.relative_noise:
        raise UsageError("the published layout holds clean data: add noise when reading it, "
                         "with 'bdeeponet import ... --noise SD'")
    if args.mat73 and not args.out.lower().endswith(".mat"):
        raise UsageError("--mat73 needs --out F.mat")
    n = args.n_train + args.n_test
    if min(args.n_train, args.n_test) < 1:
        raise UsageError("--n-train and --n-test must be >= 1")
    u, s, _ = draw_inputs(problem, n, np.random.default_rng(args.seed), args.m, args.length_scale)
    shape = (n, *problem.grid_shape)
    write_published(args.out, u.reshape(shape), s.reshape(shape), keys, mat73=args.mat73)
    print(f"wrote {args.out}: '{keys[0]}' and '{keys[1]}' of shape {shape} (clean)")


def cmd_plot_data(args) -> None:
    from .data import load
    from .plots import plot_data

    data = load(args.data)
    plot_data(data, args.out, title=data.meta.get("problem"))
    print(f"wrote {args.out}")


def train_config(args):
    from dataclasses import fields

    from .config import TrainConfig, load_toml

    base = load_toml(args.config) if args.config else {}
    base = {k.replace("-", "_"): v for k, v in base.items()}
    flags = {f.name: getattr(args, f.name) for f in fields(TrainConfig)}
    # from the defaults: from_dict fills a missing key as a run written before it existed
    defaults = {f.name: f.default for f in fields(TrainConfig)}  # (None: the network's)
    merged = {**defaults, **base, **{k: v for k, v in flags.items() if v is not None}}
    return TrainConfig.from_dict(merged)


# options only a DeepONet reads: given, they choose it
DEEPONET_OPTIONS = ("branch", "trunk", "branch_pca", "latent", "trunk_harmonics", "depth")


def cmd_train(args) -> None:
    import torch

    from .advice import RunWarning
    from .config import load_toml
    from .data import load
    from .networks import choose_network
    from .plots import RUN_FIGURES
    from .report import write_run_figures
    from .train import train

    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    config = train_config(args)
    data = load(args.data)
    deeponet_only = [f"--{n.replace('_', '-')}" for n in DEEPONET_OPTIONS
                     if getattr(args, n) is not None]
    if args.network is None and deeponet_only:  # (the DeepONet is TrainConfig's default)
        print(f"network: deeponet ({', '.join(deeponet_only)} given)")
    elif args.network is None and args.patch is not None:
        config = config.updated(network="fourier")
        print("network: fourier (--patch given)")
    elif args.network is None and not (args.config and "network" in load_toml(args.config)):
        network, why = choose_network(data, config.modes)
        config = config.updated(network=network)
        other = "deeponet" if network == "fourier" else "fourier"
        print(f"network: {network} ({why}; --network {other} for the other)")
    out = Path(args.out)
    if (out / "metrics.json").exists() and not args.resume:
        drawn = all((out / f).exists() for f in RUN_FIGURES)
        raise UsageError(f"{out} already holds a finished run; choose another --out" + (
            "" if drawn else " (its figures are missing: the same command with --resume draws "
            "them)"))
    if (out / "checkpoint.pt").exists() and not args.resume:
        raise UsageError(f"{out} holds an interrupted run: continue it with --resume (and its "
                         "options), or choose another --out")
    if args.resume and not any((out / f).exists() for f in ("config.json", "checkpoint.pt")):
        print(f"note: {out} holds no run to resume: starting a new one", file=sys.stderr)
    with warnings.catch_warnings():  # printed below, as every warning line of the CLI
        warnings.simplefilter("ignore", RunWarning)
        result = train(data, config, out, resume=args.resume, progress=not args.quiet,
                       device=args.device)
    figs = write_run_figures(out, result, data, config)
    summary = {k: result.metrics[k] for k in ("e1", "e2", "e3", "band_width") if k in result.metrics}
    print(json.dumps({k: round(v, 4) for k, v in summary.items()}))
    for line in result.metrics["warnings"]:
        print(f"warning: {line}", file=sys.stderr)
    print(f"run written to {out}/ (figures: {', '.join(f.name for f in figs)})")


def cmd_predict(args) -> None:
    from .advice import RunWarning
    from .io import atomic_write
    from .run import load_run, predict

    if not args.out.endswith(".npz"):
        raise UsageError(f"--out must end in .npz, got '{args.out}'")
    run = load_run(args.run)
    arrays = _read_inputs(args.input, ("u", "y"))
    if "u" not in arrays:
        raise UsageError(f"{args.input}: missing key 'u' (input functions, shape (n, m))")
    u = arrays["u"]
    y = arrays["y"] if "y" in arrays else _run_query_points(run)
    caught = []  # predict's RunWarnings, printed after what was written; others as ever
    with warnings.catch_warnings():
        warnings.simplefilter("always", RunWarning)
        show = warnings.showwarning

        def keep(message, category, *rest, **kwargs):
            if issubclass(category, RunWarning):
                caught.append(str(message))
            else:
                show(message, category, *rest, **kwargs)

        warnings.showwarning = keep
        out = predict(run, u, y, args.level, args.function_level, device=args.device,
                      false_alarm=args.false_alarm)
    cal = run.posterior.calibration or {}
    meta = json.dumps({"level": args.level, "function_level": args.function_level,
                       "noise_std": run.posterior.noise_std, "false_alarm": args.false_alarm,
                       "calibrated": bool(cal),
                       "function_confidence": cal.get("function_confidence")})
    atomic_write(args.out, lambda fh: np.savez(fh, **out, y=y, meta=np.asarray(meta)))
    print(f"wrote {args.out}: {', '.join(out)} (each (n, P) = {out['mean'].shape}, novelty "
          f"and novel (n,)); bands at {args.level:g}, whole trajectories at "
          f"{args.function_level:g}")
    for line in caught:
        print(f"warning: {line}", file=sys.stderr)


def _read_inputs(path: str, keys) -> dict[str, np.ndarray]:
    """The arrays ``keys`` of an ``.npz``, a MATLAB (v5, v7.3) or an HDF5 file (absent ones
    left out), booleans as 0/1; one error line for a file that cannot be read."""
    from .data import read_npz
    from .importing import read_arrays

    if path.lower().endswith(".npz"):
        found = {k: v for k, v in read_npz(path).items() if k in keys}
    else:
        found = read_arrays(path, keys)
    # a MATLAB logical (or numpy bool) field is 0/1, as `import` reads it for training
    return {k: v.astype(np.float64) if v.dtype == bool else v for k, v in found.items()}


def _run_query_points(run) -> np.ndarray:
    y = run.saved_query_points()
    if y is None:
        raise UsageError("the input has no 'y' and the run stores no default query points")
    return y


def cmd_evaluate(args) -> None:
    from .data import load
    from .run import evaluate, load_run

    run = load_run(args.run)
    data = load(args.data)
    trained = run.saved.get("data_meta", {}).get("problem")
    if trained and data.meta.get("problem", trained) != trained:
        print(f"warning: {args.run} was trained on {trained} data and {args.data} holds "
              f"{data.meta['problem']} data", file=sys.stderr)
    print(json.dumps(evaluate(run, data, device=args.device), indent=2))


def cmd_calibrate(args) -> None:
    from .data import load
    from .train import recalibrate

    metrics = recalibrate(args.run, load(args.data))
    print(json.dumps({"calibration_scales": metrics.get("calibration_scales"),
                      "calibration_check": metrics.get("calibration_check"),
                      "coverage": metrics["coverage"]}, indent=2))


def cmd_reproduce(args) -> None:
    from .experiments import reproduce
    from .grid import MODEL_SIZE

    report = reproduce(args.out, args.problems, args.noises, args.methods, args.epochs, args.seeds,
                       args.workers, args.executor, not args.quiet, args.ray_address,
                       args.device, args.chains, {k: getattr(args, k) for k in MODEL_SIZE},
                       args.cuda_graph)
    print((Path(args.out) / "results.md").read_text())
    tables = [p.name for p in sorted(Path(args.out).glob("*.csv")) if p.name != "results.csv"]
    print(f"report: {report} (tables: results.md, results.csv"
          f"{''.join(', ' + t for t in tables)}; figures/)")


def cmd_problems(args) -> None:
    from .problems import describe_problems

    print(describe_problems())


def cmd_acquire(args) -> None:
    from .acquire import CRITERIA, ERRORS, acquire
    from .io import atomic_write
    from .run import load_run

    if not args.out.endswith(".npz"):
        raise UsageError(f"--out must end in .npz, got '{args.out}'")
    run = load_run(args.run)
    arrays = _read_inputs(args.pool, ("u",))
    if "u" not in arrays:
        raise UsageError(f"{args.pool}: missing key 'u' (candidate inputs, shape (n, m))")
    u = arrays["u"]
    exclude = None
    if args.exclude:
        from .data import load

        done = load(args.exclude)
        exclude = np.vstack([done.u_train, done.u_test])
    criterion, error = args.criterion or CRITERIA[0], args.error or ERRORS[0]
    picks, scores = acquire(run, u, args.n, criterion=criterion, error=error, exclude=exclude)
    meta = json.dumps({"pool": args.pool, "run": args.run, "n": args.n,
                       "criterion": criterion, "error": error, "exclude": args.exclude})
    atomic_write(args.out, lambda fh: np.savez(fh, u=np.asarray(u)[picks], index=picks,
                                               score=scores, meta=np.asarray(meta)))
    kind = "relative " if error == "relative" else ""
    what = (f"the pool's {kind}predictive variance each pick removed"
            if criterion != "variance" else f"the {kind}predictive variance left at each pick")
    print(f"wrote {args.out}: {len(picks)} of {len(u)} pool inputs ('u', 'index' into the "
          f"pool, 'score': {what})")


COMMANDS = {"generate": cmd_generate, "acquire": cmd_acquire, "problems": cmd_problems, "import": cmd_import,
            "plot-data": cmd_plot_data, "train": cmd_train, "predict": cmd_predict,
            "evaluate": cmd_evaluate, "calibrate": cmd_calibrate, "reproduce": cmd_reproduce}


def _out_of_memory(exc: RuntimeError) -> bool:
    """torch's allocators report a failed allocation as a RuntimeError (CUDA's as its
    subclass ``torch.OutOfMemoryError``), not as MemoryError."""
    text = str(exc)
    return (type(exc).__name__ == "OutOfMemoryError" or "can't allocate memory" in text
            or "out of memory" in text)


def argv_command(argv: list[str] | None) -> str | None:
    """The subcommand named on the command line (``argv``, or sys.argv's)."""
    args = sys.argv[1:] if argv is None else argv
    return next((a for a in args if a in COMMANDS), None)


def main(argv: list[str] | None = None) -> int:
    from .samplers.graph import RecordingFailed
    from .train import RunTooLarge, TrainingDiverged

    try:
        args = build_parser().parse_args(argv)
        COMMANDS[args.command](args)
    except BrokenPipeError:  # the reader went away (bdeeponet problems | head -1): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (UsageError, ValueError, TrainingDiverged, RunTooLarge, RecordingFailed,
            OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (MemoryError, RuntimeError) as exc:  # sizes asked for beyond the machine
        if isinstance(exc, RuntimeError) and not _out_of_memory(exc):
            raise
        print("error: out of memory: the sizes asked for do not fit in this machine's memory",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        again = ("the same command continues the grid" if argv_command(argv) == "reproduce"
                 else "a run can continue with --resume")
        print(f"error: interrupted ({again})", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
