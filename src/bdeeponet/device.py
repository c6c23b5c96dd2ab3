"""Where a run computes: ``auto`` (a CUDA GPU when torch sees one, else the CPU), ``cpu``,
``cuda`` or ``cuda:N``. Data, model, samplers and the run's random generator all live there.

CPU results are bit-reproducible for a seed. A GPU's generator (Philox) draws other numbers
than the CPU's for the same seed, so a GPU run is a different chain from the CPU run of
that seed (the same in distribution); it repeats itself to rounding (samples within 1e-4
relative, measured on an H100).
"""

from __future__ import annotations

import torch


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """The torch device for ``spec``; ValueError (one line) for a bad or unavailable one."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    if spec in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(spec, str) or not (spec == "cpu" or spec == "cuda" or (
            spec.startswith("cuda:") and spec[5:].isdigit())):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {spec!r}")
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {spec}: torch sees no CUDA GPU on this machine "
                             "(use --device cpu or auto)")
        index = int(spec[5:]) if ":" in spec else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {spec}: only {torch.cuda.device_count()} CUDA GPU(s)")
    return torch.device(spec)
