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


@pytest.mark.parametrize("metric", ["kfac", "rmsprop"])
def test_hot_replica_updates_one_group_and_never_differentiates_the_other(metric):
    model, energy, batch, g = setup()
    groups = parameter_groups(model)
    sampler = MReSGLD(lr=1e-3, tau1=1.0, tau2=1e6, groups=groups, c=0.5, metric=metric)
    params = dict(model.named_parameters())
    state = sampler.init(params)
    rec = Recorder(energy)
    index = torch.arange(batch[0].shape[0])  # the batch is the whole data set
    sampler.end_burn_in(state, energy, batch, g)
    with torch.no_grad():  # a hot particle far uphill: no swaps
        state.chains[1].flat.add_(3.0)
    seen = set()
    for _ in range(40):
        before = {n: p.clone() for n, p in state.chains[1].params.items()}
        rec.calls.clear()
        sampler.step(state, rec, batch, g, index=index)
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


def test_levels_in_one_batch_walk_the_untrained_net_back_on_the_cold_rows_only(monkeypatch):
    """With the DeepONet's own gradient the levels share one pass (the default Kronecker
    metric): each step one net is walked back over both levels' rows and the other over
    the cold level's only, and the hot level moves only the net walked over its rows."""
    model, energy, batch, g = setup()
    groups = parameter_groups(model)
    sampler = MReSGLD(lr=1e-3, tau2=1e6, groups=groups, c=0.5, fisher_samples=2)
    state = sampler.init({n: p.detach() for n, p in model.named_parameters()})
    sampler.end_burn_in(state, energy, batch, g)
    with torch.no_grad():  # a hot particle far uphill: no swaps
        state.chains[1].flat.add_(3.0)
    walked, backprop = [], DeepONet._backprop

    def spy(self, net, tape, dh, params, grads, rows=None):
        walked.append((net, dh.shape[0]))  # dh: (levels' rows, n, out)
        return backprop(self, net, tape, dh, params, grads, rows)

    monkeypatch.setattr(DeepONet, "_backprop", spy)
    index, seen = torch.arange(batch[0].shape[0]), set()
    for _ in range(30):
        hot = state.chains[1]
        before = {n: p.clone() for n, p in hot.params.items()}
        walked.clear()
        sampler.step(state, energy, batch, g, index=index)
        assert state.n_swaps == 0
        both = [net for net, rows in walked if rows == 2]
        cold = [net for net, rows in walked if rows == 1]
        assert len(both) == len(cold) == 1 and {*both, *cold} == {"branch", "trunk"}, walked
        for n in groups[cold[0]]:
            assert torch.equal(hot.params[n], before[n]), n
        assert all(not torch.equal(hot.params[n], before[n]) for n in groups[both[0]])
        seen.add(both[0])
    assert seen == {"branch", "trunk"}


def test_groups_that_split_a_net_take_a_pass_per_level():
    """Groups that cut across the branch and trunk (each layer's weight and bias together,
    as the metric requires) cannot share the batched pass, whose backward skips whole nets:
    the hot level then takes its own pass and moves only its group."""
    model, energy, batch, g = setup()
    names = [n for n, _ in model.named_parameters()]
    first = [n for n in names if n.startswith(("branch.0.", "trunk.0."))]
    groups = {"first layers": first, "rest": [n for n in names if n not in first]}
    sampler = MReSGLD(fisher_samples=2, groups=groups, c=0.5)
    state = sampler.init({n: p.detach() for n, p in model.named_parameters()})
    sampler.end_burn_in(state, energy, batch, g)
    with torch.no_grad():  # a hot particle far uphill: no swaps
        state.chains[1].flat.add_(3.0)
    index, seen = torch.arange(batch[0].shape[0]), set()
    for _ in range(12):
        active = sampler.hot_active(state, torch.Generator().manual_seed(0))
        assert not ReSGLD._together(state, energy, active)
        before = {n: p.clone() for n, p in state.chains[1].params.items()}
        sampler.step(state, energy, batch, g, index=index)
        moved = {n for n, p in state.chains[1].params.items() if not torch.equal(p, before[n])}
        assert moved in (set(first), set(groups["rest"]))
        seen.add(frozenset(moved))
    assert len(seen) == 2 and state.n_swaps == 0


class GradRecorder:
    """A plain-function energy (no ``value_and_grad``, so ``energy_and_grads`` goes through
    autograd) that records, per call, which parameters required grad, and registers a
    ``Tensor.register_hook`` on each of them, so every gradient autograd actually computes for
    a parameter tensor is recorded by name. ``close()`` removes the hooks."""

    def __init__(self, energy):
        self.energy, self.requires_grad, self.computed, self.handles = energy, [], [], []

    def __call__(self, params, batch):
        tracked = {n for n, p in params.items() if p.requires_grad}
        self.requires_grad.append(tracked)
        for n in tracked:
            self.handles.append(params[n].register_hook(lambda g, n=n: self.computed.append(n)))
        return self.energy(params, batch)

    def close(self):
        for h in self.handles:
            h.remove()
        self.handles.clear()


def _hot_step_gradients(sampler_cls=MReSGLD, full_step=False, steps=5):
    """Per hot-replica step after burn-in (c = 1): the names that required grad and the names
    whose gradient autograd computed. ``full_step``: pass ``active=None`` (both groups)."""
    from bdeeponet.samplers.langevin import energy_and_grads

    model, gaussian, batch, g = setup()
    groups = parameter_groups(model)
    sampler = sampler_cls(lr=1e-3, tau2=1e6, groups=groups, c=1.0, metric="rmsprop")
    state = sampler.init(dict(model.named_parameters()))
    sampler.end_burn_in(state)
    rec = GradRecorder(gaussian)
    assert not hasattr(rec, "value_and_grad")  # energy_and_grads must take the autograd path
    required, computed = [], []
    for _ in range(steps):
        active = None if full_step else sampler.hot_active(state, g)
        rec.computed.clear()
        _, grads = energy_and_grads(rec, state.chains[1].params, batch, active)
        rec.close()
        assert set(grads) == set(state.chains[1].params if active is None else active)
        required.append(rec.requires_grad[-1])
        computed.append(set(rec.computed))
    assert len(rec.requires_grad) == steps  # one energy call per step
    return groups, required, computed


def test_trunk_backward_is_not_run_when_only_the_branch_trains():
    """Through autograd (an energy without a hand-written gradient): on the hot replica's
    branch-only steps no trunk tensor requires grad and autograd computes no trunk gradient."""
    groups, required, computed = _hot_step_gradients()
    trunk, branch = set(groups["trunk"]), set(groups["branch"])
    for req, names in zip(required, computed, strict=True):
        assert req == branch
        assert names == branch  # the hooks do see the gradients that were computed ...
        assert not names & trunk  # ... and none of them was a trunk gradient


class _BrokenMReSGLD(MReSGLD):
    """A deliberately broken m-reSGLD: the hot replica differentiates both groups."""

    def hot_active(self, state, generator):
        super().hot_active(state, generator)
        return [n for names in self.groups.values() for n in names]


@pytest.mark.parametrize("case", ["full_step", "broken_sampler"])
def test_trunk_gradient_recorder_trips_when_the_trunk_is_differentiated(case):
    """Control: the recorder above does record trunk gradients on a full (both-group) step and
    with a sampler whose ``hot_active`` returns every name, so that test can fail."""
    if case == "full_step":
        groups, required, computed = _hot_step_gradients(full_step=True)
    else:
        groups, required, computed = _hot_step_gradients(_BrokenMReSGLD)
    trunk = set(groups["trunk"])
    for req, names in zip(required, computed, strict=True):
        assert trunk <= req
        assert trunk <= names


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
    also across a round trip of the state through a checkpoint."""
    from bdeeponet import checkpoint

    class NoCache:  # the same energy, with the trunk cache emptied before every call
        def __init__(self, energy):
            self.energy = energy

        def value_and_grad(self, params, batch, names):
            self.energy.trunk_memo.clear()
            return self.energy.value_and_grad(params, batch, names)

    def run(clear_cache, round_trip):
        model, energy, batch, _ = setup()
        target = NoCache(energy) if clear_cache else energy
        sampler = MReSGLD(lr=1e-2, tau2=1e6, groups=parameter_groups(model), c=0.5,
                          metric="rmsprop")
        state = sampler.init(dict(model.named_parameters()))
        sampler.end_burn_in(state)
        g = torch.Generator().manual_seed(3)
        for k in range(40):
            sampler.step(state, target, batch, g)
            if round_trip and k == 19:
                state = checkpoint.round_trip(state)  # weights_only=True
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
    def slow(params, batch):  # params: the one chain, a batch of one
        value = energy(params, batch)  # same formula ...
        one = {n: p[0] for n, p in params.items()}
        pred = functional_call(model, one, (batch[0], energy.y))  # ... no cache
        terms = ((pred - batch[1]) ** 2).sum(dim=1) / (2 * energy.noise_std**2)
        assert torch.equal(terms, value.terms[0])
        return value

    groups = parameter_groups(model)
    for c in (0.0, 0.5, 1.0):
        sampler = MReSGLD(lr=1e-2, tau2=1e6, groups=groups, c=c, metric="rmsprop")
        state = sampler.init(dict(model.named_parameters()))
        sampler.end_burn_in(state)
        g = torch.Generator().manual_seed(1)
        for _ in range(30):
            sampler.step(state, slow, (u, s), g)
    assert "trunk" in energy.trunk_memo  # the cache was exercised (c > 0)


def test_the_model_keeps_no_sampler_state():
    """After m-reSGLD steps (one chain and a batch of levels), the DeepONet holds only what
    describes itself: its step plan and its nets' parameter names, and the Fourier features
    of the last query points."""
    own = {"config", "_plan_cache", "_net_names", "_first_layer",
           "_feature_cache"}
    model, energy, batch, _ = setup()
    module_keys = set(torch.nn.Module().__dict__)
    sampler = MReSGLD(lr=1e-2, tau2=1e6, groups=parameter_groups(model), metric="rmsprop")
    for chains in (None, 2):
        state = (sampler.init(dict(model.named_parameters())) if chains is None else
                 sampler.init({n: torch.stack([p.detach()] * chains)
                               for n, p in model.named_parameters()}, chains=chains))
        sampler.end_burn_in(state)
        g = torch.Generator().manual_seed(0)
        for _ in range(10):
            sampler.step(state, energy, batch, g)
    assert set(model.__dict__) - module_keys <= own
