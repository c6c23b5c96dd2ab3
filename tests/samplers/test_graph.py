"""The CUDA-graph replay of the sampling step (samplers/graph.py): what can be checked
without a GPU. The replay itself is checked against the eager step in tests/test_device.py."""

import pytest
import torch

from bdeeponet.samplers.graph import RecordingFailed, captured, graphs_available


def test_no_graphs_on_the_cpu():
    assert not graphs_available(torch.zeros(3))


def test_a_failed_recording_stops_the_run_with_what_to_do():
    """A capture that failed part-way can leave the generator in capture mode: no eager
    fallback, one error that says how to go on."""
    def build():
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    with pytest.raises(RecordingFailed, match=r"capturing\); run the same command with "
                                              r"--no-cuda-graph \(train: add --resume"):
        captured({}, "shape", build)


def test_a_recorded_step_is_kept_per_batch_shape():
    built = []
    cache = {}
    for key in ("a", "b", "a", "b", "a"):
        captured(cache, key, lambda k=key: built.append(k) or k)
    assert built == ["a", "b"]
