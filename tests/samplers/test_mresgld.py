"""m-reSGLD never computes the frozen group's gradient for the hot replica."""

import pytest
import torch

from bdeeponet import DeepONet, GaussianEnergy, ModelConfig, MReSGLD, ReSGLD, parameter_groups

torch.set_num_threads(1)


def setup(seed=0):
    torch.manual_seed(seed)
    model = DeepONet(ModelConfig(n_sensors=10, dim_y=1, width=8, latent=8))
    g = torch.Generator().manual_seed(seed)
    u, y = torch.randn(40, 10, generator=g), torch.linspace(0, 1, 7)[:, None]
    s = torch.randn(40, 7, generator=g)
    return model, GaussianEnergy(model, y, 40, noise_std=0.1), (u, s), g


class Recorder:
    """Wraps an energy and records, per call, which parameters required grad."""

    def __init__(self, energy):
        self.energy, self.calls = energy, []

    def __call__(self, params, batch):
        self.calls.append({n for n, p in params.items() if p.requires_grad})
        return self.energy(params, batch)


def test_hot_replica_updates_one_group_and_never_differentiates_the_other():
    model, energy, batch, g = setup()
    groups = parameter_groups(model)
    sampler = MReSGLD(lr=1e-3, tau1=1.0, tau2=1e6, groups=groups, c=0.5)
    params = dict(model.named_parameters())
    far = {n: p.detach() + 3.0 for n, p in params.items()}  # a hot particle far uphill: no swaps
    state = sampler.init(params, far)
    rec = Recorder(energy)
    sampler.end_burn_in(state)
    seen = set()
    for _ in range(40):
        before = {n: p.clone() for n, p in state.chains[1].params.items()}
        rec.calls.clear()
        sampler.step(state, rec, batch, g)
        assert state.n_swaps == 0
        cold_call, hot_call = rec.calls
        assert cold_call == set(groups["branch"]) | set(groups["trunk"])
        group = "branch" if hot_call == set(groups["branch"]) else "trunk"
        assert hot_call == set(groups[group]), "the hot replica differentiated both groups"
        other = "trunk" if group == "branch" else "branch"
        for n in groups[other]:
            assert torch.equal(state.chains[1].params[n], before[n])
        assert any(not torch.equal(state.chains[1].params[n], before[n]) for n in groups[group])
        seen.add(group)
    assert seen == {"branch", "trunk"}


def test_trunk_backward_is_not_run_when_only_the_branch_trains():
    """Through autograd (an energy without a hand-written gradient)."""
    model, gaussian, batch, g = setup()
    def energy(params, batch):
        return gaussian(params, batch)

    calls = []
    for mod in model.trunk:
        mod.register_full_backward_hook(lambda *a: calls.append(1))
    sampler = MReSGLD(lr=1e-3, tau2=1e6, groups=parameter_groups(model), c=1.0)
    state = sampler.init(dict(model.named_parameters()))
    sampler.end_burn_in(state)
    calls.clear()
    from bdeeponet.samplers.langevin import energy_and_grads

    energy_and_grads(energy, state.chains[1].params, batch, sampler.hot_active(state, g))
    assert calls == []


def test_hand_written_backward_skips_the_frozen_trunk_and_reuses_its_output(monkeypatch):
    model, energy, batch, g = setup()
    backprops, trunk_forwards = [], []
    backprop, run = DeepONet._backprop, DeepONet._run

    def spy_backprop(self, net, *args):
        backprops.append(net)
        return backprop(self, net, *args)

    def spy_run(steps, params, x, tape):
        if x is energy.y:
            trunk_forwards.append(1)
        return run(steps, params, x, tape)

    monkeypatch.setattr(DeepONet, "_backprop", spy_backprop)
    monkeypatch.setattr(DeepONet, "_run", staticmethod(spy_run))
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    branch = parameter_groups(model)["branch"]
    from bdeeponet.samplers.langevin import energy_and_grads

    for _ in range(3):
        energy_and_grads(energy, params, batch, branch)
    assert backprops == ["branch"] * 3
    assert len(trunk_forwards) == 1  # computed once, then reused
    with torch.no_grad():
        params["trunk.0.weight"][0, 0] += 1e-6  # any change to the trunk is seen
    energy_and_grads(energy, params, batch, branch)
    assert len(trunk_forwards) == 2


def test_cached_trunk_gives_the_same_chain_as_recomputing_it():
    """m-reSGLD with the trunk cache equals m-reSGLD that recomputes the trunk every time,
    also across a pickle round trip of the state (what a checkpoint does)."""
    import io

    class NoCache:  # the same energy, with the trunk cache emptied before every call
        def __init__(self, energy):
            self.energy = energy

        def value_and_grad(self, params, batch, names):
            self.energy.model.__dict__.pop("_trunk_cache", None)
            return self.energy.value_and_grad(params, batch, names)

    def run(clear_cache, round_trip):
        model, energy, batch, _ = setup()
        target = NoCache(energy) if clear_cache else energy
        sampler = MReSGLD(lr=1e-2, tau2=1e6, groups=parameter_groups(model), c=0.5)
        state = sampler.init(dict(model.named_parameters()))
        sampler.end_burn_in(state)
        g = torch.Generator().manual_seed(3)
        for k in range(40):
            sampler.step(state, target, batch, g)
            if round_trip and k == 19:
                buf = io.BytesIO()
                torch.save(state, buf)
                buf.seek(0)
                state = torch.load(buf, weights_only=False)
        return [c.flat for c in state.chains]

    reference = run(clear_cache=True, round_trip=False)
    for round_trip in (False, True):
        for a, b in zip(run(clear_cache=False, round_trip=round_trip), reference, strict=True):
            assert torch.equal(a, b)


def test_burn_in_is_full_training():
    model, energy, batch, g = setup()
    sampler = MReSGLD(lr=1e-3, groups=parameter_groups(model))
    state = sampler.init(dict(model.named_parameters()))
    assert sampler.hot_active(state, g) is None


@pytest.mark.parametrize("kwargs", [dict(c=1.5), dict(c=-0.1), dict(groups={"a": ["x"]})])
def test_bad_settings_are_refused(kwargs):
    model, *_ = setup()
    base = dict(groups=parameter_groups(model))
    with pytest.raises(ValueError):
        MReSGLD(**{**base, **kwargs})


def test_resgld_refuses_bad_temperatures_and_steps():
    with pytest.raises(ValueError, match="tau1 must be < tau2"):
        ReSGLD(tau1=2.0, tau2=1.0)
    with pytest.raises(ValueError, match="lr must be > 0"):
        ReSGLD(lr=0.0)


def test_frozen_trunk_output_is_reused_only_while_the_trunk_is_unchanged():
    """The trunk cache never returns a stale value: m-reSGLD with the cache gives exactly the
    chain computed with torch.func.functional_call (no cache)."""
    from torch.func import functional_call

    model, energy, batch, _ = setup()
    u, s = batch
    def slow(params, batch):
        value = energy(params, batch)  # same formula ...
        pred = functional_call(model, params, (batch[0], energy.y))  # ... no cache
        terms = ((pred - batch[1]) ** 2).sum(dim=1) / (2 * energy.noise_std**2)
        assert torch.equal(terms, value.terms)
        return value

    groups = parameter_groups(model)
    for c in (0.0, 0.5, 1.0):
        sampler = MReSGLD(lr=1e-2, tau2=1e6, groups=groups, c=c)
        state = sampler.init(dict(model.named_parameters()))
        sampler.end_burn_in(state)
        g = torch.Generator().manual_seed(1)
        for _ in range(30):
            sampler.step(state, slow, (u, s), g)
    assert "_trunk_cache" in model.__dict__  # the cache was exercised (c > 0)
