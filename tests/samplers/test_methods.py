"""The methods as objects: each builds its own sampler from a configuration, and nothing
outside ``samplers/`` branches on a method's name."""

import re
from pathlib import Path

import pytest

import bdeeponet
from bdeeponet import SGLD, AdamDropout, DeepEnsemble, MReSGLD, ReSGLD, TrainConfig
from bdeeponet.model import DeepONet, ModelConfig, parameter_groups
from bdeeponet.samplers.methods import METHOD_NAMES, get_method


@pytest.mark.parametrize(("name", "cls"), [("adam", AdamDropout), ("ensemble", DeepEnsemble),
                                           ("sgld", SGLD), ("resgld", ReSGLD),
                                           ("mresgld", MReSGLD), ("linear", type(None))])
def test_each_method_builds_its_sampler(name, cls):
    model = DeepONet(ModelConfig(n_sensors=5, dim_y=1, width=4, latent=3))
    config = TrainConfig(method=name, epochs=8, tau2=20.0, c=0.4, lr=0.01)
    sampler = get_method(name).build(config, model, steps_per_epoch=3)
    assert type(sampler) is cls
    if name in ("sgld", "resgld", "mresgld"):  # the run's settings reach the sampler
        assert sampler.lr == 0.01 and sampler.warm_steps == config.burn_in_epochs * 3
    if name == "mresgld":
        assert sampler.groups == parameter_groups(model) and sampler.c == 0.4


def test_the_registry():
    assert METHOD_NAMES == ("adam", "ensemble", "sgld", "resgld", "mresgld", "linear")
    with pytest.raises(ValueError, match="unknown method 'hmc'; choose one of: adam, ensemble"):
        get_method("hmc")
    assert TrainConfig(method="ensemble").n_chains == 8 and TrainConfig().n_chains == 1
    assert TrainConfig(method="adam").step_size == 1e-3


def test_nothing_outside_the_samplers_branches_on_a_method_name():
    package = Path(bdeeponet.__file__).parent
    pattern = re.compile(r"method\s*(==|!=|\bin\b|\bnot in\b)\s*[(\"']")
    found = [f"{path.relative_to(package)}:{i}" for path in package.rglob("*.py")
             if path.parent.name != "samplers"
             for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def test_each_method_says_how_its_band_is_calibrated():
    """Several chains' band, an ensemble's and the linear posterior's stand unless held-out
    functions reject them; one chain's and MC dropout's are fitted level by level."""
    assert get_method("mresgld").band_trusted(4) and get_method("sgld").band_trusted(2)
    assert not get_method("mresgld").band_trusted(1) and not get_method("resgld").band_trusted(1)
    assert not get_method("ensemble").band_trusted(8)  # fitted level by level, as trained
    assert not get_method("adam").band_trusted(1)
    assert get_method("linear").band_trusted(1)
