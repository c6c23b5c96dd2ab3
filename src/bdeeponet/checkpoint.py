"""Checkpoints of plain tensors and numbers, read back with ``torch.load(weights_only=True)``.

A run's loop state (the sampler's state objects, the generator, the history) is turned
into nested dicts, lists, tensors and numbers: each object becomes
``{"__type__": NAME, "fields": {...}}`` (its attributes, less the caches whose names start
with an underscore), where NAME must be one of the :data:`TYPES` allow-listed here, so
reading a checkpoint never runs code named by the file. Tensors that share memory (a
chain's parameter views into its flat buffer) are stored once by ``torch.save`` and share
it again after loading. An optimizer is stored as its
``state_dict`` and rebuilt around the very tensor object it updates (the one holding the
same memory that was decoded first, e.g. ``Chain.flat``), since Adam reads that object's
``.grad``.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
from pathlib import Path

import torch

from .io import atomic_write


def _types() -> dict[str, type]:
    from .samplers.adam import AdamState
    from .samplers.control_variate import ControlVariate
    from .samplers.kfac import KroneckerBlock, KroneckerMetric
    from .samplers.langevin import Chain, Preconditioner, WarmStart
    from .samplers.resgld import ReplicaState
    from .samplers.sgld import Sampling, SGLDState
    from .samplers.swap import RunningVariance

    classes = (AdamState, ControlVariate, KroneckerBlock, KroneckerMetric, Chain, Preconditioner,
               WarmStart, ReplicaState, Sampling, SGLDState, RunningVariance)
    return {cls.__name__: cls for cls in classes}


FORMAT = "bdeeponet-checkpoint-2"  # 2: every chain a batch (one chain: a batch of one)


class CheckpointError(ValueError):
    """A file that is not a readable bdeeponet checkpoint."""


def encode(obj):
    """``obj`` as dicts, lists, tensors and numbers (see the module docstring)."""
    if obj is None or isinstance(obj, bool | int | float | str | torch.Tensor):
        return obj
    if isinstance(obj, torch.Size):
        return {"__type__": "Size", "fields": list(obj)}
    if isinstance(obj, tuple):
        return {"__type__": "tuple", "fields": [encode(v) for v in obj]}
    if isinstance(obj, list):
        return [encode(v) for v in obj]
    if isinstance(obj, dict):
        return {"__dict__": [[encode(k), encode(v)] for k, v in obj.items()]}
    if isinstance(obj, torch.optim.Adam):
        return {"__type__": "Adam", "fields": {
            "params": [p for g in obj.param_groups for p in g["params"]],
            "state_dict": obj.state_dict()}}
    name = type(obj).__name__
    if _types().get(name) is not type(obj):
        raise TypeError(f"cannot checkpoint an object of type {type(obj).__qualname__}")
    # attributes named with a leading underscore are caches, rebuilt on demand: not state
    return {"__type__": name, "fields": {k: encode(v) for k, v in vars(obj).items()
                                         if not k.startswith("_")}}


def decode(tree):
    """The objects :func:`encode` turned into ``tree``."""
    owners: dict[tuple, torch.Tensor] = {}  # (memory address, shape, stride) -> first tensor
    adams: list[tuple[torch.optim.Adam, list[torch.Tensor], dict]] = []
    types = _types()

    def walk(t):
        if isinstance(t, torch.Tensor):
            return owners.setdefault((t.data_ptr(), tuple(t.shape), t.stride()), t)
        if isinstance(t, list):
            return [walk(v) for v in t]
        if not isinstance(t, dict):
            return t
        if "__dict__" in t:
            return {walk(k): walk(v) for k, v in t["__dict__"]}
        kind, fields = t.get("__type__"), t.get("fields")
        if kind == "Size":
            return torch.Size(fields)
        if kind == "tuple":
            return tuple(walk(v) for v in fields)
        if kind == "Adam":
            opt = torch.optim.Adam.__new__(torch.optim.Adam)
            adams.append((opt, fields["params"], fields["state_dict"]))
            return opt
        if kind not in types:
            raise CheckpointError(f"unknown object type {kind!r} in a checkpoint")
        cls = types[kind]
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in fields] \
            if dataclasses.is_dataclass(cls) else []
        if missing:
            raise CheckpointError(f"the checkpoint was written by an earlier version (its "
                                  f"{kind} has no '{missing[0]}'); start the run afresh")
        obj = object.__new__(cls)
        obj.__dict__.update({k: walk(v) for k, v in fields.items()})
        return obj

    out = walk(tree)
    for opt, params, state in adams:  # the tensors they update are known by now
        params = [owners.get((p.data_ptr(), tuple(p.shape), p.stride()), p) for p in params]
        opt.__init__(params)
        opt.load_state_dict(state)
    return out


def save(path: str | Path, state: dict) -> None:
    """Write ``state`` (a dict of run-loop fields) atomically."""
    atomic_write(path, lambda fh: torch.save({"format": FORMAT,
                                              "state": encode(state)}, fh))


def load(path: str | Path) -> dict:
    """The state :func:`save` wrote, its tensors on the CPU (move what a device needs with
    :func:`round_trip`); CheckpointError for anything else."""
    try:
        tree = torch.load(path, weights_only=True, map_location="cpu")
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(f"{path} is not a readable checkpoint ({first})") from None
    if isinstance(tree, dict) and tree.get("format") == "bdeeponet-checkpoint-1":
        raise CheckpointError(f"{path} was written by an earlier version (one chain kept "
                              "without a chain dimension); start the run afresh")
    if not isinstance(tree, dict) or tree.get("format") != FORMAT or "state" not in tree:
        raise CheckpointError(f"{path} is not a bdeeponet checkpoint")
    return decode(tree["state"])


def round_trip(state, device: torch.device | str | None = None):
    """``state`` through an in-memory checkpoint (what a resume sees), its tensors moved to
    ``device`` when given (views of one buffer stay views of one buffer)."""
    buf = io.BytesIO()
    torch.save(encode(state), buf)
    buf.seek(0)
    return decode(torch.load(buf, weights_only=True, map_location=device))


__all__ = ["CheckpointError", "decode", "encode", "load", "round_trip", "save"]
