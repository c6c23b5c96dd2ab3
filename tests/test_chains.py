"""Chains as a batch dimension: C chains' parameters stacked (C, ...) and advanced in one
computation. The batched DeepONet gradient against autograd per chain, a deep ensemble's
members against separate Adam runs, the per-pair swaps of C replica pairs, and runs with
``chains`` end to end."""

import math

import numpy as np
import pytest
import torch
from closed_form import LinearOperator

from bdeeponet import TrainConfig, generate, get_problem, train
from bdeeponet.energy import GaussianEnergy, autograd_value_and_grad, fan_in_prior
from bdeeponet.model import DeepONet, ModelConfig, parameter_groups
from bdeeponet.samplers import AdamDropout, DeepEnsemble, MReSGLD, ReSGLD
from bdeeponet.samplers.langevin import Chain, energy_and_grads

torch.set_num_threads(1)
C = 3


def _deeponet(activation="tanh", **extra):
    torch.manual_seed(0)
    m = math.prod(extra.get("branch_grid", (7,)))
    model = DeepONet(ModelConfig(n_sensors=m, dim_y=2, width=9, depth=2, latent=5,
                                 activation=activation, **extra)).double()
    g = torch.Generator().manual_seed(1)
    params = {n: (p.detach()[None] + 0.3 * torch.randn(C, *p.shape, generator=g,
                                                         dtype=torch.float64))
              for n, p in model.named_parameters()}
    return model, params, g


def _deeponet_energy(shared_input: bool, activation="tanh", **extra):
    """A C-chain DeepONet, its energy on 11 query points and a batch of 6 functions (u shared
    by the chains or one per chain)."""
    model, params, g = _deeponet(activation, **extra)
    y = torch.rand(11, 2, generator=g, dtype=torch.float64)
    m = model.config.n_sensors
    u = torch.randn(6, m, generator=g, dtype=torch.float64)
    s = torch.randn(C, 6, 11, generator=g, dtype=torch.float64)
    if not shared_input:
        u = u + torch.randn(C, 6, m, generator=g, dtype=torch.float64)
    energy = GaussianEnergy(model, y, n_total=60, noise_std=0.3, prior_std=fan_in_prior(model))
    return model, params, energy, (u, s)


@pytest.mark.parametrize("variant", [{}, {"s_shift": -1.3, "s_scale": 0.2, "u_shift": 0.7,
                                          "u_scale": 2.5, "periodic": ((1, 0.5),)},
                                     {"branch_grid": (11,), "channels": 2},
                                     {"branch_grid": (9, 7), "channels": 2}],
                         ids=["plain", "standardised-periodic", "conv", "conv2d"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("group", [None, "branch", "trunk"])
@pytest.mark.parametrize("shared_input", [False, True])
def test_batched_hand_written_gradient_equals_autograd_chain_by_chain(variant, activation, group,
                                                                      shared_input):
    model, params, energy, (u, s) = _deeponet_energy(shared_input, activation, **variant)
    names = list(params) if group is None else parameter_groups(model)[group]
    v, grads = energy.value_and_grad(params, (u, s), names)
    assert v.total.shape == (C,) and v.terms.shape == (C, 6)
    for c in range(C):
        one = {n: p[c] for n, p in params.items()}
        v_ref, g_ref = autograd_value_and_grad(energy, one, (u if shared_input else u[c], s[c]),
                                               names)
        assert torch.allclose(v.total[c], v_ref.total, rtol=1e-12)
        for n in names:
            assert torch.allclose(grads[n][c], g_ref[n], rtol=1e-10, atol=1e-12), (c, n)


@pytest.mark.parametrize("extra", [{}, {"branch_grid": (11,), "channels": 2},
                                   {"branch_grid": (9, 7), "channels": 2}],
                         ids=["mlp", "conv", "conv2d"])
@pytest.mark.parametrize("group", ["branch", "trunk"])
@pytest.mark.parametrize("shared_input", [False, True])
def test_partial_gradients_are_the_full_ones_on_the_first_chains(group, shared_input, extra):
    """``partial = (a net's names, r)``: those gradients for the first r chains only, equal
    to the full gradient's rows; the other net's for every chain. A split net is refused."""
    model, params, energy, (u, s) = _deeponet_energy(shared_input, **extra)
    names, some = list(params), parameter_groups(model)[group]
    split = [next(n for n in parameter_groups(model)["branch"] if n.endswith(".weight"))]
    v_full, full = energy.value_and_grad(params, (u, s), names)
    v, part = energy.value_and_grad(params, (u, s), names, partial=(some, 2))
    assert torch.allclose(v.total, v_full.total, rtol=1e-13)  # (a GEMM of 2 chains, not 3)
    for n in names:
        want = full[n][:2] if n in some else full[n]
        assert part[n].shape == want.shape and torch.allclose(part[n], want, rtol=1e-12), n
    with pytest.raises(ValueError, match="whole branch net"):
        energy.value_and_grad(params, (u, s), names, partial=(split, 2))
    # the sampler's entry point takes partial only where the backward skips it
    assert energy_and_grads(energy, params, (u, s), partial=(some, 2))[1].keys() == part.keys()
    with pytest.raises(ValueError, match="partial gradients need"):
        energy_and_grads(energy, params, (u, s), partial=(split, 2))
    linear = LinearOperator(7, 11).double()
    lin_params = {n: p.detach()[None].repeat(C, *[1] * p.dim()) for n, p in linear.named_parameters()}
    with pytest.raises(ValueError, match="partial gradients need"):
        energy_and_grads(GaussianEnergy(linear, torch.zeros(11, 1), 60, 0.3), lin_params, (u, s),
                         partial=(["offset"], 2))


def test_any_model_is_vmapped_over_chains_by_autograd():
    model = LinearOperator(5, 4)
    g = torch.Generator().manual_seed(0)
    params = {n: torch.randn(C, *p.shape, generator=g) for n, p in model.named_parameters()}
    energy = GaussianEnergy(model, torch.zeros(4, 1), 50, 0.2)
    u, s = torch.randn(C, 8, 5, generator=g), torch.randn(C, 8, 4, generator=g)
    v, grads = autograd_value_and_grad(energy, params, (u, s), list(params))
    for c in range(C):
        v_ref, g_ref = autograd_value_and_grad(energy, {n: p[c].clone() for n, p in params.items()},
                                               (u[c], s[c]), list(params))
        assert torch.allclose(v.total[c], v_ref.total)
        for n in params:
            assert torch.allclose(grads[n][c], g_ref[n], atol=1e-5), n


def test_batched_chain_views_its_flat_buffer_row_by_row():
    params = {"a": torch.arange(12.0).view(3, 2, 2), "b": torch.tensor([7.0, 8.0, 9.0])}
    chain = Chain(params, order=["b", "a"], chains=3)
    assert chain.n_chains == 3 and chain.flat.shape == (3, 5)
    assert torch.equal(chain.flat[1], torch.tensor([8.0, 4, 5, 6, 7]))
    chain.flat[2, 0] = -1.0
    assert chain.params["b"][2] == -1.0  # views, not copies
    span, vec = chain.flat_grad({"a": torch.ones(3, 2, 2)})
    assert span == slice(1, 5) and vec.shape == (3, 4)
    with pytest.raises(ValueError, match="leading dimension of 4"):
        Chain(params, chains=4)


def test_ensemble_members_are_the_adam_runs_of_their_own_starts_and_batches():
    """Adam is elementwise and the batched gradient exact, so member c of the batch follows
    exactly the run that starts at initialisation c and sees minibatch sequence c."""
    model, params, g = _deeponet()
    model.float()
    params = {n: p.float() for n, p in params.items()}
    y = torch.rand(11, 2, generator=g)
    u, s = torch.randn(40, 7, generator=g), torch.randn(40, 11, generator=g)
    energy = GaussianEnergy(model, y, 40, 0.3, fan_in_prior(model))
    idx = torch.randint(0, 40, (20, C, 8), generator=g)
    ens = DeepEnsemble(lr=1e-2)
    state = ens.init(params, chains=C)
    for k in range(20):
        ens.step(state, energy, (u[idx[k]], s[idx[k]]), g)
    for c in range(C):
        one = AdamDropout(lr=1e-2)
        single = one.init({n: p[c] for n, p in params.items()})
        for k in range(20):
            one.step(single, energy, (u[idx[k, c]], s[idx[k, c]]), g)
        for n, p in one.sample(single).items():
            assert torch.allclose(ens.sample(state)[n][c], p, rtol=1e-4, atol=1e-5), (c, n)


def test_each_replica_pair_swaps_on_its_own_test():
    """Pair 0's hot particle sits at the minimum and its cold one far away (the swap is
    certain); pair 1 the other way round (a swap has probability ~e^-1e4). After one step
    with a negligible move, pair 0's rows are exchanged and pair 1's are not. (Every
    function is the same, so the energy estimator has no variance to correct for.)"""
    model = LinearOperator(3, 2)
    energy = GaussianEnergy(model, torch.zeros(2, 1), 20, 0.1, prior_std=10.0)
    g = torch.Generator().manual_seed(0)
    u = torch.ones(20, 3)
    s = torch.zeros(20, 2)
    near = {n: torch.zeros(p.shape) for n, p in model.named_parameters()}
    far = {n: torch.full(p.shape, 3.0) for n, p in model.named_parameters()}
    sampler = ReSGLD(metric="identity", lr=1e-12, tau1=1.0, tau2=10.0)
    state = sampler.init({n: torch.stack([far[n], near[n]]) for n in near}, chains=2)
    cold, hot = state.chains
    hot.flat[0].zero_()  # pair 0: hot at the minimum
    hot.flat[1].fill_(3.0)  # pair 1: hot far away
    sampler.end_burn_in(state)
    idx = torch.arange(20).expand(2, 20)[:, :10]
    info = sampler.step(state, energy, (u[idx], s[idx]), g, index=idx)
    assert info["swapped"] == 0.5 and state.n_swaps == 1
    assert torch.allclose(cold.flat[0], torch.zeros(cold.flat.shape[1]), atol=1e-4)
    assert torch.allclose(hot.flat[0], torch.full((hot.flat.shape[1],), 3.0), atol=1e-4)
    assert torch.allclose(cold.flat[1], torch.zeros(cold.flat.shape[1]), atol=1e-4)
    assert torch.allclose(hot.flat[1], torch.full((hot.flat.shape[1],), 3.0), atol=1e-4)
    report = sampler.report(state)
    assert report["swap_rate"] == 0.5 and report["swap"]["parameters"] == 3 * 2 + 2 + 2


@pytest.fixture(scope="module")
def data():
    return generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=40,
                    n_test=5, m=20)


@pytest.mark.parametrize(("method", "extra"), [
    ("sgld", {}), ("sgld", {"control_variate": True}), ("resgld", {}),
    ("mresgld", {"control_variate": True}), ("ensemble", {})])
def test_a_run_with_chains_pools_them_and_diagnoses_across_them(data, method, extra, tmp_path):
    conf = TrainConfig(method=method, chains=3, epochs=12, burn_in=4, batch_size=10, width=8,
                       latent=8, calibration=0.2, **extra)
    result = train(data, conf, tmp_path / "run")
    post = result.posterior
    if method == "ensemble":
        assert post.samples.shape[0] == 3 and "convergence" not in result.metrics
    else:
        assert post.chains == 3 and post.samples.shape[0] == 3 * 8
        assert set(result.metrics["convergence"]) == {"rhat", "ess_bulk", "ess_tail"}
        # the chains start apart: their first draws differ
        first = post.samples.view(3, 8, -1)[:, 0]
        assert not torch.allclose(first[0], first[1])
    loaded = torch.load(tmp_path / "run" / "posterior.pt", weights_only=True)
    assert loaded["chains"] == post.chains
    assert np.isfinite(result.metrics["e2"])


def test_one_chain_of_a_batch_starts_where_a_one_chain_run_starts(data):
    """Chain 0 of C is initialised as the run without chains (the seed's own network)."""
    from bdeeponet.train import initial_parameters, model_config

    conf = TrainConfig(epochs=2, width=8, latent=8)
    mconf = model_config(conf, data)
    torch.manual_seed(conf.seed)
    ref = dict(DeepONet(mconf).named_parameters())
    init = initial_parameters(mconf, conf.seed, 3)
    for n, p in ref.items():
        assert torch.equal(init[n][0], p.detach())
        if n != "bias":  # (the output bias starts at zero in every chain)
            assert not torch.equal(init[n][1], p.detach())


@pytest.mark.parametrize(("changes", "match"), [
    ({"chains": 0}, "chains must be >= 1"),
    ({"method": "ensemble", "chains": 1}, "ensemble needs chains >= 2"),
    ({"method": "adam", "chains": 2}, "adam runs one network"),
])
def test_chains_settings_are_checked(changes, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**changes)


def test_each_chains_control_variate_is_anchored_at_its_own_warm_start():
    """The control variate of C chains: each chain's rows are the per-function gradients at
    its own anchor, and its corrected minibatch gradient, on its own minibatch, is that of
    the chain alone (a Chain of one) with its own anchor, to rounding."""
    from bdeeponet.samplers.control_variate import ControlVariate

    model, params, g = _deeponet()
    y = torch.rand(11, 2, generator=g, dtype=torch.float64)
    u = torch.randn(20, 7, generator=g, dtype=torch.float64)
    s = torch.randn(20, 11, generator=g, dtype=torch.float64)
    energy = GaussianEnergy(model, y, 20, 0.5)
    chain = Chain(params, chains=C)
    cv = ControlVariate.at(energy, chain, (u, s))
    index = torch.stack([torch.randperm(20, generator=g)[:6] for _ in range(C)])
    moved = {n: p + 0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype) for n, p in params.items()}
    chain.flat.copy_(Chain(moved, chains=C).flat)
    _, grads = energy_and_grads(energy, chain.params, (u[index], s[index]))
    got = cv.correct(chain, grads, index)
    for c in range(C):
        alone = Chain({n: p[c] for n, p in params.items()})
        cv_c = ControlVariate.at(energy, alone, (u, s))
        assert torch.allclose(cv.rows[c], cv_c.rows[0], rtol=1e-10, atol=1e-10)
        alone.flat.copy_(chain.flat[c])
        _, g_c = energy_and_grads(energy, alone.params, (u[index[c]], s[index[c]]))
        want = cv_c.correct(alone, g_c, index[c])
        for n in want:
            assert torch.allclose(got[n][c], want[n][0], rtol=1e-9, atol=1e-9), (c, n)


def test_the_command_line_trains_chains_and_says_when_they_disagree(data, tmp_path):
    import json
    import subprocess
    import sys

    path = tmp_path / "d.npz"
    data.save(path)
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "bdeeponet.cli", "train", str(path), "--method", "sgld",
         "--chains", "2", "--epochs", "12", "--burn-in", "4", "--batch-size", "10", "--width",
         "8", "--latent", "8", "--out", str(out), "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rhat = json.loads((out / "metrics.json").read_text())["convergence"]["rhat"]
    assert ("the 2 chains disagree" in proc.stderr) == (rhat > 1.01)
    bad = subprocess.run([sys.executable, "-m", "bdeeponet.cli", "train", str(path), "--method",
                          "adam", "--chains", "3", "--out", str(tmp_path / "bad")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: adam runs one network")
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("method", ["resgld", "mresgld"])
@pytest.mark.parametrize(("chains", "replicas"), [(None, 2), (2, 2), (None, 3), (2, 3)])
@pytest.mark.parametrize("draw", [0.0, 1.0])
def test_replica_levels_stepped_as_one_batch_equal_their_own_steps(method, chains, replicas,
                                                                   draw, monkeypatch):
    """reSGLD's levels evaluated and moved as one batch (``state.together``) take the steps
    each level takes alone (``together`` None: one pass per level), each with its own step
    and temperature, a certain swap included, and with ladders whose temperatures adapt;
    so do m-reSGLD's, whose hot levels train one net a step (the batch differentiates the
    other net on the cold rows only). Every draw of ``torch.randn`` is replaced by ``draw``
    so that the two are compared step for step whatever order they draw in: 0 compares the
    drift, 1 the drift plus each level's noise scale ``sqrt(2 η τ) M^½``."""
    model = DeepONet(ModelConfig(n_sensors=7, dim_y=1, width=9, depth=2, latent=5))
    g = torch.Generator().manual_seed(4)
    u, y = torch.randn(40, 7, generator=g), torch.rand(6, 1, generator=g)
    s = torch.sin(u[:, :1] + 3 * y.T)
    energy = GaussianEnergy(model, y, 40, 1.0, prior_std=fan_in_prior(model))
    base = {n: p.detach() for n, p in model.named_parameters()}
    start = base if chains is None else {
        n: p[None] + 0.1 * torch.randn(chains, *p.shape, generator=g) for n, p in base.items()}
    settings = dict(lr_hot=0.02, tau2=3.0, fisher_samples=2, replicas=replicas,
                    adapt_steps=4 if replicas > 2 else 0)
    sampler = ReSGLD(**settings) if method == "resgld" else \
        MReSGLD(**settings, groups=parameter_groups(model), c=0.5)
    states = []
    for _ in range(2):
        state = sampler.init(start, chains=chains)
        sampler.end_burn_in(state, energy, (u, s), torch.Generator().manual_seed(5))
        state.chains[0].flat.add_(0.3)  # the cold particles far off: the first swap is certain
        states.append(state)
    states[1].together = None
    active = sampler.hot_active(states[0], torch.Generator())
    assert (active is None) == (method == "resgld")
    assert ReSGLD._together(states[0], energy, active) and not ReSGLD._together(states[1], energy, active)
    monkeypatch.setattr(torch, "randn", lambda size, **kw: torch.full(
        size, draw, dtype=kw.get("dtype") or torch.float32, device=kw.get("device")))
    swaps = []
    for state in states:
        gen = torch.Generator().manual_seed(6)
        for _ in range(8):  # on all 40 functions: exact energies, no variance to correct for
            rows = torch.arange(40) if chains is None else torch.arange(40).expand(chains, 40)
            sampler.step(state, energy, (u[rows], s[rows]), gen, index=rows)
        swaps.append(state.accepted[0])
    assert swaps[0] == swaps[1] >= 1
    assert states[0].taus == pytest.approx(states[1].taus, rel=1e-5)
    for level_a, level_b in zip(states[0].chains, states[1].chains, strict=True):
        assert torch.allclose(level_a.flat, level_b.flat, rtol=1e-5, atol=1e-6)
    moved = states[0].chains[1].flat - states[0].chains[0].flat
    assert moved.abs().max() > 1e-3  # the levels did not land on the same point


@pytest.mark.parametrize("chains", [None, 3])
def test_replica_levels_keep_viewing_their_batch_through_a_checkpoint(chains):
    """After a resume each level is still a view of the batch of all levels: a write to
    the batch shows in the level, and the burn-in's Adam still updates the cold level."""
    from bdeeponet.checkpoint import round_trip

    model, params, _ = _deeponet()
    start = {n: p[0] for n, p in params.items()} if chains is None else params
    sampler = ReSGLD(replicas=3)
    state = round_trip(sampler.init(start, chains=chains))
    width = chains or 1
    for k, level in enumerate(state.chains):
        state.together.flat[k * width:(k + 1) * width].fill_(float(k + 1))
        assert torch.all(level.flat == k + 1)
    state.chains[0].flat.zero_()
    state.chains[0].flat.grad = torch.ones_like(state.chains[0].flat)
    state.warm.optimizer.step()
    assert torch.all(state.together.flat[:width] < 0) and torch.all(state.together.flat[width:] > 1)
