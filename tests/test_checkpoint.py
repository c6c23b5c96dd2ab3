"""Checkpoints: plain tensors and numbers (weights_only), exact round trips, refusals."""

import json

import numpy as np
import pytest
import torch

from bdeeponet import TrainConfig, checkpoint, generate, get_problem, train
from bdeeponet.energy import GaussianEnergy
from bdeeponet.model import DeepONet, ModelConfig, parameter_groups
from bdeeponet.samplers import SGLD, AdamDropout, DeepEnsemble, MReSGLD, ReSGLD
from bdeeponet.train import settings_differ

torch.set_num_threads(1)


class Anything:  # an object only unpickling could rebuild
    pass


@pytest.fixture(scope="module")
def data():
    return generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=40,
                    n_test=2, m=20)


def _chain(data, make, round_trips=(), chains=None):
    """30 steps (warm start, then sampling from step 10), the state sent through a
    checkpoint at the steps in ``round_trips``; returns the final parameters. With
    ``chains=C``, C chains as one batch, each from its own start and on its own batches."""
    u, s, y = (torch.tensor(a, dtype=torch.float32) for a in (data.u_train, data.s_train, data.y))
    torch.manual_seed(0)
    model = DeepONet(ModelConfig(n_sensors=20, dim_y=1, width=8, latent=8, depth=2))
    energy = GaussianEnergy(model, y, 40, 0.01, 1.0)
    sampler = make(model)
    if chains is None:
        state = sampler.init(dict(model.named_parameters()))
    else:
        starts = [dict(model.named_parameters())] + [
            dict(DeepONet(model.config).named_parameters()) for _ in range(chains - 1)]
        state = sampler.init({n: torch.stack([p[n].detach() for p in starts]) for n in starts[0]},
                             chains=chains)
    g = torch.Generator().manual_seed(1)
    for k in range(30):
        if k == 10 and not isinstance(sampler, AdamDropout):
            sampler.end_burn_in(state, energy, (u, s), g)
        if k in round_trips:
            state = checkpoint.round_trip(state)
        idx = torch.randint(0, 40, (10,) if chains is None else (chains, 10), generator=g)
        if isinstance(sampler, AdamDropout):
            sampler.step(state, energy, (u[idx], s[idx]), g)
        else:
            sampler.step(state, energy, (u[idx], s[idx]), g, index=idx)
    return torch.cat([v.flatten() for v in sampler.sample(state).values()])


@pytest.mark.parametrize("make", [
    lambda m: AdamDropout(lr=1e-3),
    lambda m: SGLD(warm_steps=10),
    lambda m: SGLD(warm_steps=10, control_variate=True),
    lambda m: ReSGLD(warm_steps=10),
    lambda m: MReSGLD(warm_steps=10, groups=parameter_groups(m)),
    lambda m: MReSGLD(metric="rmsprop", groups=parameter_groups(m)),
], ids=["adam", "sgld", "sgld-cv", "resgld", "mresgld", "mresgld-rmsprop"])
def test_round_trip_continues_the_same_chain(data, make):
    """Through a checkpoint during the warm start and during sampling: bit-identical."""
    assert torch.equal(_chain(data, make), _chain(data, make, round_trips=(5, 20)))


@pytest.mark.parametrize("make", [
    lambda m: DeepEnsemble(lr=1e-3),
    lambda m: MReSGLD(warm_steps=10, groups=parameter_groups(m)),
], ids=["ensemble", "mresgld"])
def test_round_trip_continues_the_same_batch_of_chains(data, make):
    assert torch.equal(_chain(data, make, chains=2),
                       _chain(data, make, round_trips=(5, 20), chains=2))


def test_file_holds_only_plain_types(data, tmp_path):
    conf = TrainConfig(method="mresgld", epochs=4, batch_size=10, width=8, latent=8,
                       checkpoint_every=2, burn_in=2, calibration=0)
    train(data, conf, tmp_path / "run")
    tree = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert tree["format"] == checkpoint.FORMAT
    state = checkpoint.load(tmp_path / "run" / "checkpoint.pt")
    assert state["epoch"] == 4 and len(state["history"]) == 4


def test_refuses_unknown_types_and_pickled_objects(tmp_path):
    bad = {"format": checkpoint.FORMAT, "state": {"__type__": "Popen", "fields": {}}}
    torch.save(bad, tmp_path / "a.pt")
    with pytest.raises(checkpoint.CheckpointError, match="unknown object type 'Popen'"):
        checkpoint.load(tmp_path / "a.pt")

    torch.save({"x": Anything()}, tmp_path / "b.pt")  # needs unpickling: refused, never run
    with pytest.raises(checkpoint.CheckpointError, match="not a readable checkpoint"):
        checkpoint.load(tmp_path / "b.pt")
    torch.save({"x": 1}, tmp_path / "c.pt")
    with pytest.raises(checkpoint.CheckpointError, match="not a bdeeponet checkpoint"):
        checkpoint.load(tmp_path / "c.pt")
    with pytest.raises(TypeError, match="cannot checkpoint"):
        checkpoint.encode(Anything())


def test_library_resume_checks_the_settings(data, tmp_path):
    conf = TrainConfig(method="sgld", epochs=4, batch_size=10, width=8, latent=8,
                       checkpoint_every=2, calibration=0)
    train(data, conf, tmp_path / "run")
    with pytest.raises(ValueError, match=r"resume: the settings differ.*\(epochs, lr\)"):
        train(data, conf.updated(epochs=6, lr=1e-3), tmp_path / "run", resume=True)
    # how a step is executed is not a setting of the run: a failed CUDA graph's way on
    assert settings_differ(tmp_path / "run", conf.updated(cuda_graph=False)) == []
    # a setting added since the run started (absent from its config.json) takes its default
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    del saved["train"]["replicas"], saved["train"]["chains"]
    (tmp_path / "run" / "config.json").write_text(json.dumps(saved))
    train(data, conf, tmp_path / "run", resume=True)


def test_a_resume_clears_half_written_files_and_refuses_a_checkpoint_without_its_settings(
        data, tmp_path):
    """A kill during a write leaves atomic_write's hidden temporary file: the next start
    or resume removes it (and nothing else). A checkpoint whose config.json is gone cannot
    have its settings checked: resuming it is refused, not done unchecked."""
    conf = TrainConfig(method="sgld", epochs=4, batch_size=10, width=8, latent=8,
                       checkpoint_every=2, calibration=0)
    run = tmp_path / "run"
    run.mkdir()
    left = [run / ".checkpoint.pt.k1l2.tmp", run / ".metrics.json.x.tmp"]
    kept = run / ".notes.txt.tmp"  # not a file of the run's
    for f in (*left, kept):
        f.write_bytes(b"half")
    train(data, conf, run)
    assert not any(f.exists() for f in left) and kept.exists()
    (run / "config.json").unlink()
    with pytest.raises(ValueError, match="checkpoint without the config.json of its run"):
        train(data, conf, run, resume=True)


def test_a_checkpoint_from_an_earlier_version_is_refused_in_one_line(tmp_path):
    sampler = ReSGLD(metric="identity")
    state = sampler.init({"w": torch.zeros(3)})
    tree = checkpoint.encode({"state": state})
    del tree["__dict__"][0][1]["fields"]["taus"]  # as written before the replica ladder
    torch.save({"format": checkpoint.FORMAT, "state": tree}, tmp_path / "old.pt")
    with pytest.raises(checkpoint.CheckpointError, match="earlier version .*no 'taus'"):
        checkpoint.load(tmp_path / "old.pt")
    # the format before one chain became a batch of one
    torch.save({"format": "bdeeponet-checkpoint-1", "state": tree}, tmp_path / "older.pt")
    with pytest.raises(checkpoint.CheckpointError, match="earlier version .*start the run afresh"):
        checkpoint.load(tmp_path / "older.pt")


def test_caches_stay_out_of_checkpoints_and_are_rebuilt(data):
    """The metric's float32 eigenbases and the control variate's per-group copies are
    derivable: a checkpoint holds none of them, and the chain continues bit for bit."""
    make = lambda m: MReSGLD(warm_steps=10, control_variate=True,  # noqa: E731
                             groups=parameter_groups(m))
    u, s, y = (torch.tensor(a, dtype=torch.float32) for a in (data.u_train, data.s_train, data.y))
    torch.manual_seed(0)
    model = DeepONet(ModelConfig(n_sensors=20, dim_y=1, width=8, latent=8, depth=2))
    sampler, g = make(model), torch.Generator().manual_seed(1)
    state = sampler.init(dict(model.named_parameters()))
    sampler.end_burn_in(state, GaussianEnergy(model, y, 40, 0.01, 1.0), (u, s), g)
    for _ in range(4):
        idx = torch.randint(0, 40, (10,), generator=g)
        sampler.step(state, GaussianEnergy(model, y, 40, 0.01, 1.0), (u[idx], s[idx]), g,
                     index=idx)
    assert "_columns" in vars(state.sampling.cv) and "_single" in vars(state.sampling.metric.blocks[0])

    def keys(tree):  # every object's attribute names, all the way down
        if isinstance(tree, list):
            for v in tree:
                yield from keys(v)
        elif isinstance(tree, dict):
            fields = tree.get("fields")
            if isinstance(fields, dict):
                yield from fields
                yield from keys(list(fields.values()))
            yield from keys([v for _, v in tree.get("__dict__", [])])

    assert not [k for k in keys(checkpoint.encode(state)) if k.startswith("_")]
    assert torch.equal(_chain(data, make), _chain(data, make, round_trips=(5, 20)))


def test_a_resume_moves_the_sampler_state_to_the_device_and_keeps_the_rest_on_the_cpu(
        data, tmp_path):
    """A checkpoint read for another device (the meta device stands in for a GPU): the
    sampler's state and the running test prediction go there; the generator's state stays
    a CPU byte tensor (a CUDA generator's ``set_state`` takes nothing else) and the kept
    samples stay on the CPU (the posterior lives there)."""
    from bdeeponet.train import _load_checkpoint, _Loop, _save_checkpoint

    model = DeepONet(ModelConfig(n_sensors=20, dim_y=1, width=8, latent=8, depth=2))
    sampler = SGLD(warm_steps=10)
    state = sampler.init(dict(model.named_parameters()))
    loop = _Loop(state, torch.Generator().manual_seed(1).get_state(), epoch=3,
                 samples=[torch.ones(5)], test_pred_sum=torch.zeros(1, 2, 3))
    _save_checkpoint(tmp_path / "checkpoint.pt", loop)
    back = _load_checkpoint(tmp_path / "checkpoint.pt", torch.device("meta"))
    assert back.generator_state.device.type == "cpu"
    assert torch.equal(back.generator_state, loop.generator_state)
    assert back.samples[0].device.type == "cpu" and torch.equal(back.samples[0], torch.ones(5))
    assert back.test_pred_sum.device.type == "meta"
    assert back.state.chain.flat.device.type == "meta"
    torch.Generator().set_state(back.generator_state)  # what a resume does with it
