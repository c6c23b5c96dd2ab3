"""The CUDA-graph replay of the sampling step (samplers/graph.py): what can be checked
without a GPU. The replay itself is checked against the eager step in tests/test_device.py."""

import pytest
import torch

from bdeeponet.samplers.graph import captured, graphs_available


def test_no_graphs_on_the_cpu():
    assert not graphs_available(torch.zeros(3))


def test_a_failed_recording_warns_once_and_leaves_eager_steps():
    calls = []

    def build():
        calls.append(1)
        raise RuntimeError("operation not permitted when stream is capturing")

    cache = {}
    with pytest.warns(RuntimeWarning, match="going on with eager steps"):
        assert captured(cache, "shape", build) is None
    assert captured(cache, "other shape", build) is None  # no second try, no second warning
    assert calls == [1]


def test_a_recorded_step_is_kept_per_batch_shape():
    built = []
    cache = {}
    for key in ("a", "b", "a", "b", "a"):
        captured(cache, key, lambda k=key: built.append(k) or k)
    assert built == ["a", "b"]
