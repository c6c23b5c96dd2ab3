"""The replica ladder: K = 2 is the paper's two-replica algorithm step for step, a ladder
mixes a bimodal target that a single chain cannot, the schedule is equalised as stated,
and the round trips and per-pair acceptance are counted as defined."""

import math

import numpy as np
import pytest
import torch
from closed_form import LinearOperator

from bdeeponet.energy import EnergyValue, GaussianEnergy
from bdeeponet.metrics import effective_sample_size
from bdeeponet.samplers import SGLD, ReSGLD
from bdeeponet.samplers.langevin import Chain, energy_and_grads, langevin_update
from bdeeponet.samplers.resgld import equalise_ladder
from bdeeponet.samplers.swap import (
    RunningVariance,
    paired_variance,
    swap_log_rate,
)

torch.set_num_threads(1)


def _linear_problem():
    torch.manual_seed(0)
    model = LinearOperator(4, 3)
    g = torch.Generator().manual_seed(3)
    u = torch.randn(30, 4, generator=g)
    s = u @ torch.randn(4, 3, generator=g) + 0.3 * torch.randn(30, 3, generator=g)
    energy = GaussianEnergy(model, torch.zeros(3, 1), 30, 0.3, prior_std=1.0)
    return model, energy, u, s


def test_two_replicas_are_the_papers_algorithm_step_for_step():
    """A direct transcription of Algorithm 1 (swap test every step on the shared minibatch,
    variance-corrected, then each level moves the particle it holds) from the same
    generator gives bit-identical parameters after 300 steps, swaps included."""
    model, energy, u, s = _linear_problem()
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    lr, t1, t2 = 2e-3, 1.0, 1.5
    sampler = ReSGLD(metric="identity", lr=lr, tau1=t1, tau2=t2)
    state = sampler.init(params)
    cold, hot = Chain(params), Chain(params)
    var = RunningVariance(sampler.var_smoothing)
    g_lib, g_ref = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    swaps = 0
    for _ in range(300):
        idx = torch.randperm(30, generator=g_lib)[:10]
        torch.randperm(30, generator=g_ref)
        sampler.step(state, energy, (u[idx], s[idx]), g_lib, index=idx)
        v1, g1 = energy_and_grads(energy, cold.params, (u[idx], s[idx]))
        v2, g2 = energy_and_grads(energy, hot.params, (u[idx], s[idx]))
        v = var.update(paired_variance(v1.terms, v2.terms, v1.scale, v1.n_total))
        log_rate = swap_log_rate(float((v1.total - v2.total).detach()), float(v), t1, t2)
        uniform = float(torch.rand((), generator=g_ref, dtype=torch.float64))
        if math.log(uniform) < log_rate:  # the Metropolis test, u ~ U(0, 1) every step
            cold, hot, g1, g2 = hot, cold, g2, g1
            swaps += 1
        langevin_update(cold, g1, lr, t1, g_ref)
        langevin_update(hot, g2, lr, t2, g_ref)
    assert swaps > 5 and state.n_swaps == swaps
    assert torch.equal(state.chains[0].flat, cold.flat)
    assert torch.equal(state.chains[1].flat, hot.flat)


class Bimodal:
    """U(θ) = −log(w N(θ; −m, s²) + (1 − w) N(θ; m, s²)) for θ of one or C chains; the
    barrier between the modes is m²/(2 s²) = 12.5 nats at τ = 1."""

    w, m, s = 0.3, 2.5, 0.5

    def __call__(self, params, batch):
        t = params["theta"]
        logs = torch.stack([math.log(self.w) - (t + self.m) ** 2 / (2 * self.s**2),
                            math.log(1 - self.w) - (t - self.m) ** 2 / (2 * self.s**2)])
        u = -torch.logsumexp(logs, dim=0).sum(-1)  # (C,) or ()
        return EnergyValue(u, u.detach()[..., None], 1.0, 1)


def test_one_chain_takes_an_energy_written_for_one_set_of_parameters():
    """One chain reaches the energy as a batch of one; an energy that returns its total as a
    number (not (1,)) still drives reSGLD's swap test, as it did before one chain became a
    batch of one."""

    def energy(params, batch):
        terms = 0.5 * params["x"].reshape(-1) ** 2
        return EnergyValue(terms.sum(), terms.detach(), 1.0, 3)

    for sampler in (SGLD(metric="identity", lr=1e-2), ReSGLD(metric="identity", lr=1e-2)):
        state = sampler.init({"x": torch.ones(3)})
        g = torch.Generator().manual_seed(0)
        for _ in range(20):
            sampler.step(state, energy, None, g)
        x = sampler.sample(state)["x"]
        assert x.shape == (3,) and torch.isfinite(x).all() and not torch.equal(x, torch.ones(3))


def _cold_path(sampler, chains, steps, start=-2.5):
    theta = torch.full((chains, 1) if chains else (1,), start)
    state = sampler.init({"theta": theta}, chains=chains) if chains else sampler.init({"theta": theta})
    g = torch.Generator().manual_seed(0)
    sampler.end_burn_in(state)
    out = []
    for _ in range(steps):
        sampler.step(state, Bimodal(), None, g)
        out.append(sampler.sample(state)["theta"].reshape(-1).clone())
    return torch.stack(out).numpy(), state  # (steps, chains)


@pytest.mark.slow
def test_a_ladder_visits_both_modes_in_proportion_where_one_chain_stays_in_one():
    sgld, _ = _cold_path(SGLD(metric="identity", lr=0.01), None, 3000)
    assert (sgld > 0).mean() == 0.0  # 12.5 nats: never crosses
    ladder = ReSGLD(metric="identity", lr=0.01, tau1=1.0, tau2=30.0, replicas=6, adapt_steps=1000)
    path, state = _cold_path(ladder, 8, 4000)
    upper = (path[1000:] > 0).astype(float)  # (steps, chains)
    ess = sum(effective_sample_size(upper[:, c]) for c in range(upper.shape[1]))
    assert ess > 50, ess
    frac, se = upper.mean(), math.sqrt(0.21 / ess)
    assert abs(frac - (1 - Bimodal.w)) < 4 * se, (frac, se, ess)
    report = ladder.report(state)["ladder"]
    assert report["round_trips"] > 10
    assert all(0 < a <= 1 for a in report["acceptance"])
    taus = report["temperatures"]
    assert taus[0] == 1.0 and taus[-1] == pytest.approx(30.0) and taus == sorted(taus)


def test_equalised_ladder_spaces_the_cumulative_rejection_evenly():
    taus = [1.0, 2.0, 4.0, 8.0]
    rejection = [0.6, 0.1, 0.2]  # Λ = 0, 0.6, 0.7, 0.9 at β = 1, 1/2, 1/4, 1/8
    new = equalise_ladder(taus, rejection)
    assert new[0] == 1.0 and new[-1] == 8.0
    beta = 1 / np.array(new)
    # Λ = 0.3 lies halfway in the first segment, Λ = 0.6 at its end
    assert beta[1] == pytest.approx(0.75) and beta[2] == pytest.approx(0.5)
    assert equalise_ladder(taus, [0.2, 0.2, 0.2]) == pytest.approx(taus)


def test_a_flat_target_accepts_every_swap_and_makes_round_trips():
    """U = 0: every offered swap is accepted, the barrier is 0, and with the even-odd scheme
    each replica rides the ladder up and down: K = 3 makes a round trip every few steps."""

    def flat(params, batch):
        t = params["theta"]
        u = (t * 0).sum(-1)
        return EnergyValue(u, u.detach()[..., None], 1.0, 1)

    sampler = ReSGLD(metric="identity", lr=1e-3, replicas=3)
    state = sampler.init({"theta": torch.zeros(1)})
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        info = sampler.step(state, flat, None, g)
        assert info["swapped"] == 1.0
    report = sampler.report(state)["ladder"]
    assert report["acceptance"] == [1.0, 1.0] and report["barrier"] == 0.0
    assert state.attempts == [20, 20]  # pair 0 on even steps, pair 1 on odd ones
    assert report["round_trips"] >= 40 // (2 * 3)


def test_ladder_settings_are_checked():
    with pytest.raises(ValueError, match="replicas must be >= 2"):
        ReSGLD(replicas=1)
    assert ReSGLD(replicas=4, tau1=1.0, tau2=8.0).ladder() == pytest.approx([1.0, 2.0, 4.0, 8.0])
