"""--device: resolution, refusal without a GPU, and (where a GPU exists) agreement with
the CPU. CI has no GPU: the GPU tests run only on a machine with one."""

import numpy as np
import pytest
import torch

from bdeeponet import TrainConfig, generate, get_problem, train
from bdeeponet.cli import main
from bdeeponet.device import resolve_device

torch.set_num_threads(1)
GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
no_gpu = pytest.mark.skipif(GPU, reason="checks the refusal on a machine without a GPU")


def test_resolve():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if GPU else "cpu")
    assert resolve_device(None) == resolve_device("auto")
    for bad in ("gpu", "cuda:x", "CPU", 3):
        with pytest.raises(ValueError, match="device must be auto, cpu, cuda or cuda:N"):
            resolve_device(bad)


@no_gpu
def test_cuda_without_a_gpu_is_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        resolve_device("cuda")
    data = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=10,
                    n_test=2, m=20)
    data.save(tmp_path / "d.npz")
    rc = main(["train", str(tmp_path / "d.npz"), "--out", str(tmp_path / "run"), "--device",
               "cuda", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: device cuda")
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def small():
    return generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=60,
                    n_test=5, m=20)


CONF = dict(epochs=8, batch_size=20, width=16, latent=16, burn_in=4, calibration=0.2)


@pytest.mark.parametrize("method", ["adam", "sgld", "resgld", "mresgld"])
def test_cpu_is_the_default_here_and_bit_reproducible(small, method):
    if GPU:
        pytest.skip("auto picks the GPU on this machine")
    conf = TrainConfig(method=method, **CONF)
    a, b = train(small, conf), train(small, conf, device="cpu")
    assert torch.equal(a.posterior.samples, b.posterior.samples)


@needs_gpu
@pytest.mark.parametrize(("method", "chains"), [
    ("adam", None), ("sgld", None), ("resgld", None), ("mresgld", None),
    ("ensemble", 3), ("sgld", 3), ("resgld", 3), ("mresgld", 3)])
def test_gpu_runs_repeat_and_agree_with_the_cpu_in_distribution(small, method, chains):
    """The GPU's generator (Philox) draws other numbers than the CPU's for the same seed, so
    a GPU run is another chain than the CPU run: it must repeat itself to rounding, come
    back as a CPU posterior, and land near the CPU run's accuracy."""
    conf = TrainConfig(method=method, chains=chains, **CONF)
    cpu, gpu, gpu2 = (train(small, conf, device=d) for d in ("cpu", "cuda", "cuda"))
    assert gpu.posterior.samples.device.type == "cpu"  # the posterior comes back to the CPU
    assert torch.allclose(gpu.posterior.samples, gpu2.posterior.samples, rtol=1e-4, atol=1e-5)
    assert gpu.metrics["e2"] == pytest.approx(cpu.metrics["e2"], rel=0.15)


@needs_gpu
@pytest.mark.parametrize("chains", [None, 3])
def test_the_replayed_sampling_step_is_the_eager_one(small, chains, monkeypatch):
    """SGLD's sampling step replayed from a CUDA graph draws from the run's generator what
    the eager step draws: the two runs agree to rounding. The control: the graphed run did
    replay (batches of 20, 20 and 8 functions: two recorded shapes), the eager one did not."""
    import dataclasses

    from bdeeponet.samplers import graph

    replays = []
    original = graph.CapturedStep.__call__
    monkeypatch.setattr(graph.CapturedStep, "__call__",
                        lambda self, batch: replays.append(1) or original(self, batch))
    conf = TrainConfig(method="sgld", chains=chains, **CONF)
    graphed = train(small, conf, device="cuda")
    n_replays = len(replays)
    eager = train(small, dataclasses.replace(conf, cuda_graph=False), device="cuda")
    assert n_replays == 3 * (CONF["epochs"] - CONF["burn_in"]) and len(replays) == n_replays
    assert torch.allclose(graphed.posterior.samples, eager.posterior.samples, rtol=1e-4,
                          atol=1e-5)


@needs_gpu
@pytest.mark.parametrize("method", ["sgld", "mresgld"])
def test_a_gpu_run_resumes_from_its_checkpoint(small, method, tmp_path):
    """A resume on the GPU reads the checkpoint's generator state back as the CPU byte
    tensor a CUDA generator takes (it raised in set_state) and keeps the samples on the
    CPU; the run it finishes is the one never interrupted."""
    conf = TrainConfig(method=method, checkpoint_every=3, **CONF)
    first = train(small, conf, tmp_path / "run", device="cuda")
    for name in ("metrics.json", "posterior.pt"):  # as if killed after the last checkpoint
        (tmp_path / "run" / name).unlink()
    again = train(small, conf, tmp_path / "run", resume=True, device="cuda")
    assert again.posterior.samples.device.type == "cpu"
    assert torch.allclose(first.posterior.samples, again.posterior.samples, rtol=1e-4, atol=1e-5)
