"""The sampling phase's step replayed from a CUDA graph.

On a GPU a step of one chain is a few dozen small kernels (the DeepONet's forward and
hand-written backward, the Kronecker rotations, the noise), each launched from Python: the
GPU waits for the launches, not the arithmetic (benchmarks/cuda_graph_probe.py: 2.6 ms
eager, 0.6 ms replayed, on an H200). :class:`CapturedStep` records such a step once and
replays it: the minibatch is copied into the graph's input buffers, and the noise comes
from the run's own generator, registered with the graph, so a replay advances the
generator as the eager step would and a checkpoint's generator state stays meaningful.

Recording runs the step three times on a side stream first (CUDA's lazy set-up must not
happen inside a capture) and once more while capturing; the chain's parameters and the
generator are restored afterwards, so recording leaves the run where it was.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

WARMUP = 3


def graphs_available(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s device can record a step: a CUDA device, and a torch whose
    graphs accept a generator of the caller's (``register_generator_state``)."""
    return tensor.is_cuda and hasattr(torch.cuda.CUDAGraph, "register_generator_state")


class CapturedStep:
    """``fn(*batch) -> tensor`` recorded once in a CUDA graph for batches shaped like
    ``batch``; calling it with a new batch replays the graph and returns a copy of the
    output. ``flat``: the tensor holding every parameter ``fn`` updates in place (restored
    after recording), ``generator``: the CUDA generator ``fn`` draws from."""

    def __init__(self, fn: Callable[..., torch.Tensor], batch, flat: torch.Tensor,
                 generator: torch.Generator):
        self.inputs = tuple(t.clone() for t in batch)
        self.device = flat.device
        saved, gen_state = flat.clone(), generator.get_state()
        # the run's device made current: torch.cuda.graph's own stream belongs to the current
        # device, and a capture there would not see the step's kernels on another one
        with torch.cuda.device(self.device):
            try:
                side = torch.cuda.Stream(device=self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    for _ in range(WARMUP):
                        fn(*self.inputs)
                torch.cuda.current_stream(self.device).wait_stream(side)
                self.graph = torch.cuda.CUDAGraph()
                self.graph.register_generator_state(generator)
                with torch.cuda.graph(self.graph, stream=side):
                    self.output = fn(*self.inputs)
            finally:  # recording leaves the chain and the generator where they were
                flat.copy_(saved)
                generator.set_state(gen_state)

    def __call__(self, batch) -> torch.Tensor:
        for buffer, t in zip(self.inputs, batch, strict=True):
            buffer.copy_(t)
        with torch.cuda.device(self.device):
            self.graph.replay()
        return self.output.clone()


class RecordingFailed(RuntimeError):
    """The sampling step could not be recorded in a CUDA graph."""


def captured(cache: dict, key, build: Callable[[], CapturedStep]) -> CapturedStep:
    """The step recorded under ``key`` in ``cache`` (recorded on first use).
    :class:`RecordingFailed` where recording fails: a capture that failed part-way leaves the
    run's generator in capture mode (torch ends its capture before the generator's), where
    an eager step's draws raise, so the run cannot go on from there; it can go on from its
    checkpoint with the graph turned off, which draws the same noise."""
    if key not in cache:
        try:
            cache[key] = build()
        except (RuntimeError, TypeError, AttributeError) as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise RecordingFailed(
                f"the sampling step could not be recorded in a CUDA graph ({type(exc).__name__}"
                f": {first}); run the same command with --no-cuda-graph (train: add --resume to "
                "go on from the checkpoint; reproduce goes on by itself)") from exc
    return cache[key]
