"""The run loop: minibatches, sampler steps, per-epoch history, checkpoints and resume.

A run directory holds ``config.json`` (written first), ``history.csv``, ``checkpoint.pt``
(every ``checkpoint_every`` epochs), then ``posterior.pt``, ``metrics.json`` and
``timing.json``. ``metrics.json`` is written last: a directory without it is not a finished
run. Every file is replaced atomically.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import checkpoint
from .advice import RunWarning, run_warnings
from .calibration import fit_calibration
from .config import EXECUTION_ONLY, TrainConfig
from .data import OperatorData, cyclic_shifts, sensor_grid, square_symmetries
from .device import resolve_device
from .encoder import PCAEncoder, TrunkModes, fit_modes, fit_pca
from .energy import GaussianEnergy, fan_in_prior
from .io import atomic_write, write_json, write_text
from .linear import LinearPosterior, fit_linear
from .metrics import convergence, effective_sample_size, relative_errors
from .model import DeepONet, ModelConfig, set_dropout_generator, standardisation
from .networks import FourierConfig, FourierOperator, build_network, data_patch, field_grid, fit_to_data
from .noise import noise_sd_from_residuals
from .novelty import DEFAULT_FALSE_ALARM, fit_novelty
from .posterior import Posterior, flatten
from .progress import Progress
from .run import test_metrics
from .samplers.methods import get_method
from .samplers.sgld import end_stiffness

HISTORY_COLUMNS = (
    "epoch", "e1", "e2", "e1_mean", "e2_mean", "energy", "swap_rate", "sec_per_iter", "noise_std",
)


class TrainingDiverged(RuntimeError):
    """The energy became NaN or infinite."""


class RunTooLarge(MemoryError):
    """The run's particles and one step's activations cannot fit in the free memory."""


def check_memory(mconf: ModelConfig, config: TrainConfig, data: OperatorData,
                 device: torch.device) -> None:
    """RunTooLarge where even a floor of what a step holds exceeds the device's free
    memory: every particle (C chains x the ladder's levels) with its gradient and its
    noise, and a learnt trunk's activations and the outputs of one minibatch for each. The
    true peak is higher (an allocation that fails later is reported as out of memory), so
    this refuses only sizes that cannot fit, before minutes are spent building them."""
    free = _free_memory(device)
    if free is None:
        return
    levels = config.replicas if get_method(config.method).ladder else 1
    particles = config.n_chains * levels
    batch = min(config.batch_size, data.n_train)
    width, P = mconf.width, data.y.shape[0]
    if isinstance(mconf, FourierConfig):  # its spectral weights; a map per layer and function
        n_params = mconf.depth * width * width * 2 * mconf.modes ** mconf.dim_y
        activations = batch * math.prod(mconf.padded) * width * mconf.depth
    else:
        depth = mconf.depth
        inner = (depth - 1) * width * width + width * mconf.latent  # an MLP's, beyond its input
        n_params = ((0 if mconf.branch_grid else mconf.n_sensors * width + inner)
                    + (0 if mconf.fixed_trunk else mconf.trunk_in_features * width + inner))
        activations = (0 if mconf.fixed_trunk else P) * width * depth + batch * P
    floor = 4 * particles * (3 * n_params + activations)
    if floor > free:
        raise RunTooLarge(
            f"out of memory: this run needs at least {floor / 2**30:.1f} GiB "
            f"({config.n_chains} chain{'s' if config.n_chains > 1 else ''} x {levels} "
            f"level{'s' if levels > 1 else ''} of {n_params:,} parameters or more, and one "
            f"step's activations), and {device.type} has {free / 2**30:.1f} GiB free: ask for "
            "fewer --chains or a smaller --width, --depth or --batch-size")


def _free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device``: the GPU's (with what torch's allocator holds unused), or the
    machine's MemAvailable (None elsewhere)."""
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + cached
    try:
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return 1024 * kb


@dataclass
class RunResult:
    posterior: Posterior | LinearPosterior
    metrics: dict
    history: list[dict]
    timing: dict
    config: TrainConfig | None = None  # what was run (so that predict can take the result)


@dataclass
class _Loop:
    """Everything that changes during a run (what a checkpoint holds)."""

    state: object
    generator_state: torch.Tensor
    epoch: int = 0
    history: list[dict] = field(default_factory=list)
    samples: list[torch.Tensor] = field(default_factory=list)
    test_pred_sum: torch.Tensor | None = None
    step_seconds: float = 0.0
    n_steps: int = 0
    noise_std: float = 0.0  # σ in use (estimated during burn-in when unknown)
    metric_seconds: float = 0.0  # spent in the sampler's end_burn_in (the metric's estimate)
    sampling_seconds: float = 0.0  # step_seconds and n_steps of the epochs after burn-in
    sampling_steps: int = 0


def branch_grid(config: TrainConfig, data: OperatorData) -> tuple[int, ...]:
    """The grid a conv branch reads (``()``: an MLP branch); see ``TrainConfig.branch``.
    ValueError when a conv branch is asked for and the sensors are not a grid."""
    if config.branch != "conv":
        return ()
    grid = sensor_grid(data.sensors)
    if grid is None:
        raise ValueError("a conv branch needs the sensors on an equispaced 1-D or 2-D grid, "
                         "listed in row-major order (the data file's 'sensors')")
    return grid


def symmetry_maps(config: TrainConfig, data: OperatorData,
                  encoder: PCAEncoder | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The permutations (G, m) of the sensors and (G, P) of the query points that move a
    training function by each of the G elements of ``config.symmetry`` (see
    :func:`~bdeeponet.data.square_symmetries` and :func:`~bdeeponet.data.cyclic_shifts`);
    None without one. ValueError when the sensors or the query points are not a grid the
    group acts on, or the branch reads principal components (a moved input has other
    ones)."""
    if config.symmetry == "none":
        return None
    if encoder is not None:
        raise ValueError(f"--symmetry {config.symmetry} moves the raw inputs, and this branch "
                         "reads their principal components: use --branch conv or "
                         "--branch-pca 0")
    if config.symmetry == "square":
        maps = square_symmetries(data.sensors), square_symmetries(data.y)
        grid = "an equispaced n x n grid spanning a square, in row-major order"
    else:
        period = dict(data.periodic).get(0) if data.y.shape[1] == 1 else None
        maps = cyclic_shifts(data.sensors, period), cyclic_shifts(data.y, period)
        grid = ("an equispaced 1-D grid whose points span one period of a coordinate the "
                "data declare periodic (meta 'periodic')")
    for what, perm in zip(("sensors", "query points"), maps, strict=True):
        if perm is None:
            raise ValueError(f"--symmetry {config.symmetry} needs the {what} on {grid}")
    if len(maps[0]) != len(maps[1]):
        raise ValueError(f"--symmetry {config.symmetry} needs the sensors and the query "
                         f"points on grids of one size ({len(maps[0])} and {len(maps[1])} "
                         "shifts)")
    if config.symmetry == "square":  # each grid is turned about its own centre
        centre = [(p.min(0) + p.max(0)) / 2 for p in (data.sensors, data.y)]
        if not np.allclose(*centre, rtol=0, atol=1e-6 * np.ptp(data.sensors, axis=0).max()):
            raise ValueError("--symmetry square needs the sensors' square and the query "
                             "points' square to share their centre (" + " and ".join(
                                 "(" + ", ".join(f"{c:g}" for c in x) + ")" for x in centre)
                             + "): the square's rotations must move both the same way")
    return maps


def trunk_features(config: TrainConfig, data: OperatorData) -> tuple[tuple[int, float], ...]:
    """``(j, 2 L_j)`` for each non-periodic query coordinate j (``L_j`` its range in the
    data), so that the trunk reads ``cos, sin(π k y_j / L_j)``; none when
    ``config.trunk_harmonics`` is 0 (or a coordinate is constant)."""
    if not config.trunk_harmonics:
        return ()
    periodic = {j for j, _ in data.periodic}
    spans = np.ptp(data.y, axis=0)
    return tuple((j, 2.0 * float(spans[j])) for j in range(data.y.shape[1])
                 if j not in periodic and spans[j] > 0)


def model_config(config: TrainConfig, data: OperatorData,
                 encoder: PCAEncoder | None = None) -> ModelConfig:
    """The network of ``config`` for ``data``; with ``encoder`` the branch reads its r
    components (already standardised: the model's u shift and scale stay 0 and 1). A pod
    trunk reads its mean and basis from 1 + ``latent`` columns after the coordinates
    (:func:`trunk_modes`)."""
    scaling = standardisation(data.u_train, data.s_train) if config.standardise else {}
    grid = () if encoder is not None else branch_grid(config, data)
    if encoder is not None:
        scaling.update(u_shift=0.0, u_scale=1.0)
    pod = config.trunk == "pod"
    return ModelConfig(
        n_sensors=data.n_sensors if encoder is None else encoder.components,
        dim_y=data.y.shape[1] + (1 + config.latent if pod else 0),
        width=config.width,
        depth=config.depth,
        latent=config.latent,
        activation=config.activation_name,
        dropout=config.dropout if get_method(config.method).dropout else 0.0,
        periodic=() if pod else data.periodic,
        branch_grid=grid,
        channels=config.channels,
        features=() if pod else trunk_features(config, data),
        fixed_trunk=pod,
        feature_harmonics=max(config.trunk_harmonics, 1),  # unused without features
        **scaling,
        **(coordinate_scaling(data.y, data.periodic) if config.standardise and not pod else {}),
    )


def fourier_config(config: TrainConfig, data: OperatorData) -> FourierConfig:
    """The Fourier network of ``config`` for ``data``: its input and output fields on one
    grid, so the sensors must be an equispaced 1-D or 2-D grid in row-major order and the
    query points the same points; a coordinate the data declare periodic must span one
    period (the grid's step times its points). ValueError saying which does not hold."""
    grid, same = field_grid(data)
    if grid is None:
        raise ValueError("the Fourier network needs the sensors on an equispaced 1-D or 2-D "
                         "grid, listed in row-major order (the data file's 'sensors')")
    if not same:
        raise ValueError("the Fourier network gives the output on the input's grid: the query "
                         f"points y ({data.y.shape[0]}) must be the sensors "
                         f"({data.sensors.shape[0]}), in the same order")
    lo, hi = data.sensors.min(axis=0), data.sensors.max(axis=0)
    periods = dict(data.periodic)
    for j, g in enumerate(grid):
        if j in periods:
            step = (hi[j] - lo[j]) / (g - 1)
            if not np.isclose(step * g, periods[j], rtol=1e-6, atol=0):
                raise ValueError(f"coordinate {j} is declared periodic with period "
                                 f"{periods[j]:g}, and its {g} grid points span "
                                 f"{step * g:g} (a periodic grid holds one period, its end "
                                 "point left out)")
    scaling = standardisation(data.u_train, data.s_train) if config.standardise else {}
    patch = data_patch(data, grid, config.patch, config.modes)
    return FourierConfig(grid=grid, periodic=data.periodic, width=config.channels, patch=patch,
                         depth=config.layers, modes=config.modes, projection=config.width,
                         activation=config.activation_name,
                         dropout=config.dropout if get_method(config.method).dropout else 0.0,
                         bounds=tuple(zip(lo.tolist(), hi.tolist(), strict=True)), **scaling)


def coordinate_scaling(y, periodic=()) -> dict[str, tuple[float, ...]]:
    """``{y_shift, y_scale}`` for :class:`ModelConfig`: each query coordinate mapped onto
    [0, 1] by its training range (the identity for the problems here, which live on the
    unit interval or square), so that the trunk's first layer reads coordinates of order 1
    wherever the data put them (its tanh saturated on a grid at 1000). A constant
    coordinate is only shifted; a periodic one (read through its Fourier features) is left."""
    y = np.asarray(y, dtype=np.float64)
    lo, span = y.min(axis=0), np.ptp(y, axis=0)
    skip = {j for j, _ in periodic}
    return {"y_shift": tuple(0.0 if j in skip else float(v) for j, v in enumerate(lo)),
            "y_scale": tuple(1.0 if j in skip or v <= 0 else float(v) for j, v in enumerate(span))}


def trunk_modes(config: TrainConfig, data: OperatorData, mconf: ModelConfig) -> TrunkModes | None:
    """A pod trunk's basis (:func:`~bdeeponet.encoder.fit_modes`) in the model's
    standardised units; None for a learnt trunk."""
    if config.trunk != "pod":
        return None
    return fit_modes(data.s_train, data.y, config.latent, mconf.s_shift, mconf.s_scale)


def epoch_steps(data: OperatorData, config: TrainConfig) -> int:
    """Minibatches in one pass over the training functions (the last one may be short)."""
    return -(-data.n_train // config.batch_size)


def resolve_noise_std(config: TrainConfig, data: OperatorData) -> float | None:
    """The known σ (flag, then file); None when it is to be estimated (``"auto"``, or a
    file without ``noise_std`` and no flag)."""
    if config.noise_std == "auto":
        return None
    sd = config.noise_std if config.noise_std is not None else data.noise_std
    return None if sd is None else float(sd)


@torch.no_grad()
def residual_sd(model: DeepONet | FourierOperator, params, u: torch.Tensor, s: torch.Tensor, y: torch.Tensor,
                points) -> float:
    """The noise sd estimated from the model's training residuals (``noise_std = "auto"``),
    by :func:`noise_sd_from_residuals` along the grid lines of ``points``, the query points'
    coordinates as the data give them (``y``, what the trunk reads, may carry a pod trunk's
    modes after them, and is float32)."""
    was_training = model.training
    model.eval()  # no dropout masks
    residuals = [(model.functional_forward(params, u[i : i + 100], y) - s[i : i + 100])
                 .reshape(-1, y.shape[0]) for i in range(0, u.shape[0], 100)]  # (C chains pooled)
    model.train(was_training)
    return noise_sd_from_residuals(residuals, points)


def _tensor(a, device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.as_tensor(np.asarray(a), dtype=torch.float32, device=device)


@dataclass
class Setup:
    """A run's pieces before its first step, as :func:`train` builds them (benchmarks and
    experiments build theirs here too): the model at its seeded initial weights, the energy,
    the sampler with the run's defaults, the run's generator and the training tensors.
    ``chains``: C (one chain is a batch of one); ``initial``: the parameters the sampler
    starts from, each tensor (C, ...): chain 0 is the model's initialisation from the seed,
    chain c > 0 one drawn from the seed and c."""

    model: DeepONet | FourierOperator
    model_config: ModelConfig | FourierConfig
    energy: GaussianEnergy
    sampler: object
    generator: torch.Generator
    u: torch.Tensor
    s: torch.Tensor
    y: torch.Tensor
    chains: int
    initial: dict
    encoder: PCAEncoder | None = None  # applied to every raw input before the branch
    modes: TrunkModes | None = None  # appended to the query points before the trunk
    turns: tuple[torch.Tensor, torch.Tensor] | None = None  # symmetry_maps on the device

    def init_state(self):
        """The sampler's state at the initial parameters."""
        return self.sampler.init(self.initial, chains=self.chains)


def initial_parameters(mconf: ModelConfig | FourierConfig, seed: int, chains: int) -> dict[str, torch.Tensor]:
    """C independent initialisations (tensors (C, ...)), chain 0 from ``seed`` itself (the
    model's own initialisation), chain c from the seed sequence of (seed, c)."""
    inits = []
    for c in range(chains):
        with torch.random.fork_rng():
            torch.manual_seed(seed if c == 0 else
                              int(np.random.SeedSequence([seed, c]).generate_state(1)[0]))
            inits.append(dict(build_network(mconf).named_parameters()))
    return {n: torch.stack([p[n].detach() for p in inits]) for n in inits[0]}


def setup(data: OperatorData, config: TrainConfig, noise_std: float | None,
          device: torch.device | str = "cpu") -> Setup:
    """The model, energy, sampler and generator of a run of ``config`` on ``data`` (the
    training functions only: split the calibration ones off first), on ``device``.
    ``noise_std`` None (to be estimated) starts the energy at a tenth of the targets' spread."""
    device = torch.device(device)
    if config.network == "fourier":
        encoder, mconf = None, fourier_config(config, data)
    else:
        encoder = None if branch_grid(config, data) else fit_pca(data.u_train, config.branch_pca)
        mconf = model_config(config, data, encoder)
    check_memory(mconf, config, data, device)
    with torch.random.fork_rng():  # initial weights from the run's seed, global RNG untouched
        torch.manual_seed(config.seed)
        model = build_network(mconf).to(device)  # drawn on the CPU: the same weights anywhere
    u_train = data.u_train if encoder is None else encoder(data.u_train)
    modes = trunk_modes(config, data, mconf)
    y = data.y if modes is None else modes(data.y)
    u, s, y = (_tensor(a, device) for a in (u_train, data.s_train, y))
    prior = fan_in_prior(model, config.prior_std) if config.prior == "fan_in" else config.prior_std
    energy = GaussianEnergy(model, y, data.n_train,
                            noise_std if noise_std is not None else 0.1 * float(s.std()), prior)
    sampler = get_method(config.method).build(config, model, epoch_steps(data, config))
    gen = torch.Generator(device=device).manual_seed(config.seed + 1)
    set_dropout_generator(model, gen)
    model.train(mconf.dropout > 0)  # Adam + MC dropout trains with dropout on
    chains = config.n_chains
    initial = {n: t.to(device) for n, t in initial_parameters(mconf, config.seed, chains).items()}
    maps = symmetry_maps(config, data, encoder)
    turns = None if maps is None else tuple(torch.as_tensor(p, device=device) for p in maps)
    return Setup(model, mconf, energy, sampler, gen, u, s, y, chains, initial, encoder, modes,
                 turns)


def train(
    data: OperatorData,
    config: TrainConfig,
    out: str | Path | None = None,
    resume: bool = False,
    progress: bool = False,
    device: torch.device | str | None = "auto",
) -> RunResult:
    """Train ``config.method`` on ``data``; with ``out``, write the run directory there
    (a fresh start first removes what a run finished there before wrote, so that a failed
    run never reads back as that one). ``device``: where to compute (``auto``: a CUDA GPU
    when present; see :mod:`.device`); the posterior it returns and writes lives on the
    CPU. It computes in float32 with autograd on, whatever the caller's default dtype and
    grad mode (both restored afterwards). What the run's diagnostics advise is issued as
    :class:`~bdeeponet.advice.RunWarning` and kept in ``metrics["warnings"]``.

    With an unknown noise level (``noise_std="auto"``, or a file without ``noise_std``) σ
    is re-estimated from the training residuals after every burn-in epoch (empirical Bayes
    at the warm start) and held fixed while sampling.
    """
    if not isinstance(data, OperatorData):
        raise TypeError(f"data must be an OperatorData (bdeeponet.load(path) reads a data "
                        f"file), got {type(data).__name__}")
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if out is not None and str(out) == "":
        raise ValueError("out must name a directory (None: write nothing), got ''")
    with torch.enable_grad(), _default_dtype(torch.float32):
        result = _train(data, fit_to_data(config, data), out, resume, progress, device)
    for line in result.metrics["warnings"]:
        warnings.warn(line, RunWarning, stacklevel=2)
    return result


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


# what a run writes in its directory besides config.json and its figures
RUN_OUTPUTS = ("checkpoint.pt", "metrics.json", "posterior.pt", "timing.json",
               "query_points.npy", "history.csv")


def _clear_run(out: Path) -> None:
    """Before a fresh start in ``out``: another run's checkpoint must never be resumed, nor
    what it finished with (written only at a run's end) read as this one's."""
    from .plots import RUN_FIGURES  # (matplotlib: only where a run is written)

    for name in (*RUN_OUTPUTS, *RUN_FIGURES):
        (out / name).unlink(missing_ok=True)


def _remove_partial_writes(out: Path) -> None:
    """The temporary files (:func:`~bdeeponet.io.atomic_write`'s ``.NAME.*.tmp``) of this
    run's files that a kill left half-written: never read, but as large as a checkpoint."""
    from .plots import RUN_FIGURES

    for name in (*RUN_OUTPUTS, "config.json", *RUN_FIGURES):
        for tmp in out.glob(f".{name}.*.tmp"):
            tmp.unlink(missing_ok=True)


def _train(data: OperatorData, config: TrainConfig, out, resume: bool, progress: bool,
           device) -> RunResult:
    device = resolve_device(device)
    sigma = resolve_noise_std(config, data)
    out = Path(out) if out is not None else None
    if resume and out is not None:
        check_resume(out, config, data)
        if (out / "checkpoint.pt").exists() and not (out / "config.json").exists():
            raise ValueError(f"{out} holds a checkpoint without the config.json of its run, "
                             "so its settings cannot be checked: remove "
                             f"{out / 'checkpoint.pt'} to start afresh, or choose another --out")
    if out is not None and out.is_dir():
        _remove_partial_writes(out)
    fingerprint = data.training_fingerprint()  # of all the training functions, held-out ones too
    data, held_out = split_calibration(data, config)
    if not get_method(config.method).network:  # the linear baseline: a closed-form fit
        if sigma is None:
            raise ValueError("the linear baseline needs a known noise level: pass --noise-std SD")
        return _train_linear(data, config, sigma, out, held_out, fingerprint)
    run = setup(data, config, sigma, device)
    model, mconf, energy, sampler, gen = run.model, run.model_config, run.energy, run.sampler, run.generator
    u, s, y = run.u, run.s, run.y
    u_test = _tensor(data.u_test if run.encoder is None else run.encoder(data.u_test), device)
    s_test = data.s_test

    chains = run.chains
    loop = _Loop(run.init_state(), gen.get_state(), noise_std=energy.noise_std)
    ckpt = out / "checkpoint.pt" if out else None
    if resume and ckpt is not None and ckpt.exists():
        loop = _load_checkpoint(ckpt, device)
        gen.set_state(loop.generator_state)
        energy.noise_std = loop.noise_std
        mconf = model.config = _started_coordinates(out, mconf)
        model.__dict__.pop("_feature_cache", None)  # features of the scaling it replaced
    elif out is not None:
        _clear_run(out)
        write_json(out / "config.json", {"train": config.to_dict(), "model": mconf.to_dict(),
                                         "noise_std": sigma, "data_meta": data.meta,
                                         "data_sha256": fingerprint})

    bar = Progress(config.epochs, enabled=progress, start=loop.epoch)
    while loop.epoch < config.epochs:
        if loop.epoch == config.burn_in_epochs:
            t0 = time.perf_counter()
            sampler.end_burn_in(loop.state, energy, (u, s), gen)
            if u.is_cuda:  # what end_burn_in queued is its cost, not the first step's
                torch.cuda.synchronize(u.device)
            loop.metric_seconds = time.perf_counter() - t0
        row = _run_epoch(loop, sampler, energy, (u, s), gen, config, chains, run.turns)
        params = sampler.sample(loop.state)
        if sigma is None and loop.epoch < config.burn_in_epochs:
            energy.noise_std = loop.noise_std = residual_sd(model, params, u, s, y, data.y)
        with torch.no_grad():
            was_training = model.training
            model.eval()
            pred = model.functional_forward(params, u_test, y).double()  # (C, n, P)
            model.train(was_training)
        row["e1"], row["e2"] = _errors(pred.cpu().numpy(), s_test)
        row["noise_std"] = energy.noise_std
        loop.epoch += 1
        if loop.epoch > config.burn_in_epochs and (
            (loop.epoch - config.burn_in_epochs) % config.thin_epochs == 0
        ):
            loop.samples.append(flatten(params, batched=True).cpu().clone())
            loop.test_pred_sum = pred if loop.test_pred_sum is None else loop.test_pred_sum + pred
        if loop.test_pred_sum is not None and sampler.draws_samples:
            mean = loop.test_pred_sum / len(loop.samples)
            mean = mean.mean(0).cpu().numpy()
            row["e1_mean"], row["e2_mean"] = relative_errors(mean, s_test)
        loop.history.append(row)
        bar.update(loop.epoch, e2=row["e2"], swap=row["swap_rate"])
        if not math.isfinite(row["energy"]) or not torch.isfinite(pred).all():
            # (the energy is evaluated before each update; the prediction after the last)
            what = (f"the energy became {row['energy']}" if not math.isfinite(row["energy"])
                    else "the parameters became NaN or infinite")
            bar.close()
            raise TrainingDiverged(
                f"{what} at epoch {loop.epoch}; the last good checkpoint is kept. "
                f"Try a smaller step size (--lr, now {config.step_size})"
            )
        if out is not None and (loop.epoch % config.checkpoint_every == 0):
            loop.generator_state = gen.get_state()
            _save_checkpoint(ckpt, loop)
            write_history(out / "history.csv", loop.history)
    bar.close()
    end = end_stiffness(loop.state, energy, (u, s), gen)
    return _finish(loop, sampler, config, mconf, data, out, energy.noise_std, held_out,
                   {} if end is None else {"metric_stiffness_end": end}, run.encoder, run.modes)


def _errors(pred: np.ndarray, s_test) -> tuple[float, float]:
    """The mean over C chains' predictions (C, n, P) of their ``relative_errors``."""
    return tuple(float(v) for v in np.mean([relative_errors(p, s_test) for p in pred], axis=0))


def rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[idx]`` for an index of shape (b,) or (C, b): by ``index_select``, which on a CPU
    gathers a minibatch of 100 rows of 7225 values 5 times faster than indexing does."""
    return x.index_select(0, idx.reshape(-1)).view(*idx.shape, *x.shape[1:])


def _run_epoch(loop: _Loop, sampler, energy, train_data, gen, config: TrainConfig,
               chains: int = 1, turns=None) -> dict:
    """One pass over the training functions; C chains each take their own random order
    (one chain's batches are (n, ...): a batch every chain shares is the cheaper form).
    With ``turns`` (the permutations of :func:`symmetry_maps`) each function of a minibatch
    is turned by a random element of the group: the likelihood, averaged over the group,
    of an operator that commutes with it."""
    u, s = train_data
    n = u.shape[0]
    order = torch.stack([torch.randperm(n, generator=gen, device=gen.device)
                         for _ in range(chains)]).squeeze(0)
    energies, swaps, seconds = [], [], 0.0
    for start in range(0, n, config.batch_size):
        idx = order[..., start : start + config.batch_size]  # (b,) or (C, b)
        t0 = time.perf_counter()
        batch = rows(u, idx), rows(s, idx)
        if turns is not None:
            g = torch.randint(len(turns[0]), idx.shape, generator=gen, device=gen.device)
            batch = batch[0].gather(-1, turns[0][g]), batch[1].gather(-1, turns[1][g])
        info = sampler.step(loop.state, energy, batch, gen, index=idx)
        seconds += time.perf_counter() - t0
        energies.append(info["energy"])
        if "swapped" in info:
            swaps.append(info["swapped"])
        # a step replayed from a CUDA graph returns a device tensor: read once an epoch
        if not torch.is_tensor(info["energy"]) and not math.isfinite(info["energy"]):
            break
    if torch.is_tensor(energies[-1]):  # the replayed steps were only launched: wait for them
        t0 = time.perf_counter()
        energies = torch.stack(energies).tolist()
        seconds += time.perf_counter() - t0
    loop.step_seconds += seconds
    loop.n_steps += len(energies)
    if loop.epoch >= config.burn_in_epochs:  # (this epoch's index: end_burn_in came before it)
        loop.sampling_seconds += seconds
        loop.sampling_steps += len(energies)
    return {
        "epoch": loop.epoch + 1,
        "energy": float(np.mean(energies)),
        "swap_rate": float(np.mean(swaps)) if swaps else float("nan"),
        "sec_per_iter": seconds / len(energies),
        "e1_mean": float("nan"),
        "e2_mean": float("nan"),
    }


def _started_coordinates(out: Path, mconf: ModelConfig) -> ModelConfig:
    """``mconf`` with the query coordinates' scaling the run started with (config.json): a
    run begun before the trunk read them mapped onto [0, 1] goes on reading them as they
    are, so its samples before and after the interruption are of one model."""
    if not isinstance(mconf, ModelConfig):  # (a Fourier network reads no query coordinates)
        return mconf
    try:
        saved = json.loads((out / "config.json").read_text()).get("model", {})
    except (OSError, ValueError, AttributeError):
        return mconf
    return dataclasses.replace(mconf, y_shift=tuple(saved.get("y_shift", ())),
                               y_scale=tuple(saved.get("y_scale", ())))


def _finish(loop, sampler, config, mconf, data, out, noise_std: float, held_out,
            extra: dict | None = None, encoder: PCAEncoder | None = None,
            modes: TrunkModes | None = None) -> RunResult:
    chains = config.n_chains
    if sampler.draws_samples:  # (draws, C, p) -> (C draws, p), chain by chain
        samples = torch.stack(loop.samples)
        if samples.dim() == 3:
            samples = samples.transpose(0, 1).reshape(-1, samples.shape[-1])
        post = Posterior(mconf, samples, noise_std=noise_std, chains=chains, encoder=encoder,
                         modes=modes)
    else:  # trained networks: an ensemble's members, or one with MC dropout masks
        final = flatten(sampler.sample(loop.state), batched=True).cpu()
        post = Posterior(mconf, final.reshape(-1, final.shape[-1]),
                         config.mc_samples if mconf.dropout > 0 else 0, noise_std, encoder=encoder,
                         modes=modes)
    metrics = _test_metrics(post, data, config, held_out)
    post_burn = [r for r in loop.history if r["epoch"] > config.burn_in_epochs]
    metrics["e1_after_burn_in"] = float(np.mean([r["e1"] for r in post_burn]))
    metrics["e2_after_burn_in"] = float(np.mean([r["e2"] for r in post_burn]))
    metrics.update(sampler.report(loop.state))
    metrics.update(extra or {})
    if encoder is not None:
        metrics["branch_pca"] = {"components": encoder.components,
                                 "kept_variance": encoder.kept_variance}
    if "prior_relaxation_steps" in metrics:
        metrics["prior_relaxation_epochs"] = (metrics["prior_relaxation_steps"]
                                              / epoch_steps(data, config))
    if sampler.draws_samples:
        metrics.update(_prediction_diagnostics(post, data))
    timing = {
        "sec_per_iter": loop.step_seconds / max(loop.n_steps, 1),
        "n_iters": loop.n_steps,
        # the epochs after burn-in alone, where the samplers differ (m-reSGLD / reSGLD)
        "sampling_sec_per_iter": (loop.sampling_seconds / loop.sampling_steps
                                  if loop.sampling_steps else None),
        "sampling_iters": loop.sampling_steps,
        "epochs": config.epochs,
        "metric_seconds": loop.metric_seconds,
    }
    return _write_run(out, RunResult(post, metrics, loop.history, timing, config), data)


def _train_linear(data: OperatorData, config: TrainConfig, sigma: float, out, held_out,
                  fingerprint: str) -> RunResult:
    """The closed-form Bayesian linear-regression baseline (:mod:`.linear`)."""
    if out is not None:
        _clear_run(out)
        write_json(out / "config.json", {"train": config.to_dict(), "noise_std": sigma,
                                         "data_meta": data.meta, "data_sha256": fingerprint})
    t0 = time.perf_counter()
    scaling = standardisation(data.u_train, data.s_train) if config.standardise else None
    post = fit_linear(data.u_train, data.s_train, data.y, sigma, config.prior_std, scaling)
    seconds = time.perf_counter() - t0
    metrics = _test_metrics(post, data, config, held_out)
    metrics["e1_after_burn_in"], metrics["e2_after_burn_in"] = metrics["e1"], metrics["e2"]
    row = {"epoch": 1, "e1": metrics["e1"], "e2": metrics["e2"], "e1_mean": metrics["e1"],
           "e2_mean": metrics["e2"], "energy": float("nan"), "swap_rate": float("nan"),
           "sec_per_iter": seconds}
    timing = {"sec_per_iter": seconds, "n_iters": 1, "epochs": 1}
    return _write_run(out, RunResult(post, metrics, [row], timing, config), data)


def split_calibration(data: OperatorData, config: TrainConfig):
    """``(data without the held-out functions, (u, s) held out)``: a fraction
    ``config.calibration`` of the training functions, drawn with the run's seed, that the
    sampler never sees and the bands are calibrated on (None when the fraction is 0)."""
    n_cal = round(config.calibration * data.n_train)
    if config.calibration == 0:
        return data, None
    if n_cal < 2 or data.n_train - n_cal < 2:
        raise ValueError(
            f"calibration = {config.calibration} of {data.n_train} training functions leaves "
            f"{n_cal} to calibrate on and {data.n_train - n_cal} to train on; both need >= 2")
    perm = np.random.default_rng(config.seed).permutation(data.n_train)
    cal, fit = np.sort(perm[:n_cal]), np.sort(perm[n_cal:])
    clean = data.s_train_clean
    fit_data = dataclasses.replace(data, u_train=data.u_train[fit], s_train=data.s_train[fit],
                                   s_train_clean=None if clean is None else clean[fit])
    return fit_data, (data.u_train[cal], data.s_train[cal])


def band_trusted(config: TrainConfig) -> bool:
    """Whether the band of a run of ``config`` is kept unless held-out functions reject it
    (:meth:`~bdeeponet.samplers.methods.Method.band_trusted`)."""
    return get_method(config.method).band_trusted(config.n_chains)


def _test_metrics(post, data: OperatorData, config: TrainConfig, held_out) -> dict:
    """Calibrate ``post`` (a run of ``config``) on the held-out functions (in place), then
    its test metrics."""
    seed = config.seed
    if held_out is not None:
        post.novelty = fit_novelty(data.u_train, held_out[0])
        pred = post.predict(held_out[0], data.y, seed=seed)
        post.calibration = fit_calibration(pred["mean"].numpy(), pred["raw_std"].numpy(),
                                           held_out[1], post.noise_std, dof=pred["dof"].numpy(),
                                           y=data.y, trust_band=band_trusted(config)).to_dict()
    pred = post.predict(data.u_test, data.y, seed=seed)
    metrics = test_metrics(pred["mean"].numpy(), pred["raw_std"].numpy(), data, post,
                           pred["dof"].numpy(), seed=seed)
    metrics["n_samples"] = post.n_samples
    metrics["noise_std"] = post.noise_std
    if post.novelty is not None:  # the test functions are drawn like the training ones
        novelty, flagged = post.novelty.score(data.u_test, DEFAULT_FALSE_ALARM)
        metrics["novelty"] = {"false_alarm": DEFAULT_FALSE_ALARM,  # None: too few held out
                              "test_flagged": None if np.isnan(novelty).all() else
                              float(flagged.mean())}
    return metrics


def recalibrate(run_dir: str | Path, data: OperatorData) -> dict:
    """Refit the bands' calibration of a finished run on its own held-out functions (the
    split is fixed by the run's seed and ``calibration`` fraction) and rewrite its
    ``posterior.pt`` and the test metrics and convergence diagnostics in ``metrics.json``;
    returns the metrics."""
    from .run import load_run

    run = load_run(run_dir)
    path = Path(run_dir)
    check_same_data(run.saved, data, f"calibrate {path}")
    fit_data, held_out = split_calibration(data, run.config)
    if held_out is None:
        raise ValueError(f"{run_dir} was trained without held-out functions (calibration = 0)")
    metrics = {**run.metrics, **_test_metrics(run.posterior, fit_data, run.config, held_out)}
    if get_method(run.config.method).draws:  # also for runs before R̂
        metrics.update(_prediction_diagnostics(run.posterior, data))
    metrics["warnings"] = run_warnings(metrics, run.config, getattr(run.posterior, "chains", 1))
    atomic_write(path / "posterior.pt", lambda fh: torch.save(run.posterior.state_dict(), fh))
    write_json(path / "metrics.json", metrics)
    return metrics


def _write_run(out: Path | None, result: RunResult, data: OperatorData) -> RunResult:
    """Write the run directory; ``metrics.json`` last, so its presence means finished."""
    result.metrics["warnings"] = run_warnings(result.metrics, result.config,
                                              getattr(result.posterior, "chains", 1))
    if out is not None:
        atomic_write(out / "posterior.pt",
                     lambda fh: torch.save(result.posterior.state_dict(), fh))
        atomic_write(out / "query_points.npy", lambda fh: np.save(fh, data.y))
        write_history(out / "history.csv", result.history)
        write_json(out / "timing.json", result.timing)
        write_json(out / "metrics.json", result.metrics)
    return result


def _prediction_diagnostics(post: Posterior, data: OperatorData, n_points: int = 50) -> dict:
    """Convergence of the sampled predictions at a fixed set of test (function, point)
    pairs: the median ESS (``ess``, the chains' single-chain ESSs added), and the worst
    rank-normalised split R̂ and bulk / tail ESS over the pairs, across the chains
    (``convergence``)."""
    u = _tensor(data.u_test[:5])
    y = _tensor(data.y)
    traj = torch.stack(list(post.trajectories(u, y))).reshape(post.chains, -1, u.shape[0] * y.shape[0])
    traj = traj.numpy()  # (chains, draws, points)
    cols = np.linspace(0, traj.shape[2] - 1, min(n_points, traj.shape[2])).astype(int)
    out = {"ess": float(np.median([sum(effective_sample_size(chain[:, j]) for chain in traj)
                                   for j in cols]))}
    if traj.shape[1] >= 4:
        out["convergence"] = convergence(traj[:, :, cols].transpose(2, 0, 1))  # (points, C, draws)
    return out


def write_history(path: Path, history: list[dict]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=HISTORY_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(history)
    write_text(path, buf.getvalue())


def check_resume(out: Path, config: TrainConfig, data: OperatorData | None = None) -> None:
    """A resumed run must have the settings it was started with (config.json's), and the
    same training data where ``data`` is given."""
    diff = settings_differ(out, config)
    if diff:
        raise ValueError(f"resume: the settings differ from the saved run's ({', '.join(diff)})")
    if data is not None and (out / "config.json").exists():
        check_same_data(json.loads((out / "config.json").read_text()), data, f"resume {out}")


def settings_differ(out: Path, config: TrainConfig) -> list[str]:
    """The settings in which the run in ``out`` (its config.json) differs from ``config``;
    none when there is no run. A setting added since the run was written takes the value
    that reproduces it (``TrainConfig.from_dict``)."""
    path = Path(out) / "config.json"
    if not path.exists():
        return []
    try:
        conf = json.loads(path.read_text())
        saved = TrainConfig.from_dict(conf["train"]).to_dict()
    except (KeyError, TypeError, ValueError) as exc:  # JSON errors are ValueErrors
        raise ValueError(f"{path} is not a run's settings ({type(exc).__name__}: {exc})") from None
    now = config.to_dict()
    return sorted(k for k in set(saved) | set(now)
                  if saved.get(k) != now.get(k) and k not in EXECUTION_ONLY)


def check_same_data(conf: dict, data: OperatorData, action: str) -> None:
    """``data`` must be the data set the run of config.json ``conf`` was trained on: its
    training functions' fingerprint (:meth:`OperatorData.training_fingerprint`), or for
    runs written before the fingerprint, the data file's ``meta``. A run's held-out split
    is drawn from its training functions, so another file of the same shapes would
    silently calibrate it on the wrong functions."""
    want = conf.get("data_sha256")
    if want is not None:
        same = want == data.training_fingerprint()
    else:
        same = "data_meta" not in conf or conf["data_meta"] == data.meta
    if not same:
        raise ValueError(f"{action}: this data file is not the one the run was trained on "
                         "(its training functions differ)")


def _save_checkpoint(path: Path, loop: _Loop) -> None:
    checkpoint.save(path, {f.name: getattr(loop, f.name) for f in dataclasses.fields(loop)})


def _load_checkpoint(path: Path, device: torch.device) -> _Loop:
    """The loop a checkpoint holds, its sampler state and running test prediction on
    ``device``; the generator's state (a CPU byte tensor, whatever the generator's device)
    and the kept samples (the posterior lives on the CPU) stay on the CPU."""
    state = checkpoint.load(path)  # plain tensors and numbers: weights_only=True
    try:
        loop = _Loop(**state)
    except TypeError:
        raise checkpoint.CheckpointError(f"{path} is not a checkpoint of this version") from None
    loop.state = checkpoint.round_trip(loop.state, device)
    if loop.test_pred_sum is not None:
        loop.test_pred_sum = loop.test_pred_sum.to(device)
    return loop
