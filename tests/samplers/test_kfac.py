"""The Kronecker metric (samplers/kfac.py): exact for a linear layer, tamed for a deep net."""

import pytest
import torch
from torch import nn

from bdeeponet import DeepONet, GaussianEnergy, ModelConfig, parameter_groups
from bdeeponet.energy import fan_in_prior
from bdeeponet.samplers.kfac import (
    HESSIAN_POINTS,
    KroneckerMetric,
    estimate_kfac,
    hessian_points,
    largest_magnitude,
    scaled_hessian,
    stiffness,
    tame,
)
from bdeeponet.samplers.langevin import energy_and_grads
from bdeeponet.samplers.sgld import SGLD, end_stiffness, prior_relaxation_steps

torch.set_num_threads(1)


class Linear(nn.Module):
    def __init__(self, m, p):
        super().__init__()
        self.map = nn.Linear(m, p)

    def forward(self, u, y):
        return self.map(u)


def linear_problem(seed=0, n=400, m=12, p=5, sigma=0.05):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    u = randn(n, 3) @ randn(3, m) + 1e-3 * randn(n, m)  # correlated inputs: rank 3 + noise
    s = u @ randn(m, p) + sigma * randn(n, p)
    torch.manual_seed(seed)
    model = Linear(m, p).double()
    energy = GaussianEnergy(model, torch.zeros(p, 1, dtype=torch.float64), n, sigma, 1.0)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    batches = [(u[i : i + 100], s[i : i + 100]) for i in range(0, n, 100)]
    return energy, params, batches, (u, s, sigma)


def exact_map(u, s, sigma):
    x = torch.cat([u, torch.ones(len(u), 1, dtype=u.dtype)], 1)
    prec = x.T @ x / sigma**2 + torch.eye(x.shape[1], dtype=u.dtype)
    return torch.linalg.solve(prec, x.T @ s / sigma**2).T  # (p, m+1): [W, b]


def test_a_unit_drift_step_is_the_newton_step_for_a_linear_model():
    """For a linear layer M is the inverse posterior precision, so θ − M ∇U(θ) is the MAP
    from any θ (up to the Monte Carlo error of the output factor: 64 draws)."""
    energy, params, batches, (u, s, sigma) = linear_problem()
    metric = estimate_kfac(energy, params, batches, torch.Generator().manual_seed(1), samples=64)
    _, grads = energy_and_grads(energy, params, (u, s))
    moved = {k: v.clone() for k, v in params.items()}
    metric.step(moved, grads, lr=1.0, tau=0.0, generator=torch.Generator())
    got = torch.cat([moved["map.weight"], moved["map.bias"][:, None]], 1)
    want = exact_map(u, s, sigma)
    start = torch.cat([params["map.weight"], params["map.bias"][:, None]], 1)
    assert (got - want).norm() < 0.05 * (start - want).norm()


@pytest.mark.parametrize("damping", [0.0, 50.0])
def test_prior_relaxation_is_how_fast_the_weakest_direction_decays(damping):
    """Full-batch steps without noise from the MAP displaced along the block's weakest
    direction (the inputs are rank 3 plus 1e-3 noise, so the prior holds it): the
    displacement decays geometrically at 1 / prior_relaxation_steps per step, within 10%
    (the metric's Monte Carlo error). Undamped that is η per step; damped 50x the prior
    precision, about 50 times slower."""
    energy, params, batches, (u, s, sigma) = linear_problem()
    metric = estimate_kfac(energy, params, batches, torch.Generator().manual_seed(1), samples=64)
    metric.set_damping(damping)
    (blk,) = metric.blocks
    i, j = divmod(int(blk.precision.argmin()), blk.precision.shape[1])
    direction = torch.outer(blk.qg[:, i], blk.qa[:, j])  # (out, in + 1), unit norm
    lr, steps = 0.05, 400
    start = exact_map(u, s, sigma) + direction
    moved = {"map.weight": start[:, :-1].clone(), "map.bias": start[:, -1].clone()}
    for _ in range(steps):
        _, grads = energy_and_grads(energy, moved, (u, s))
        metric.step(moved, grads, lr=lr, tau=0.0, generator=torch.Generator())
    left = torch.cat([moved["map.weight"], moved["map.bias"][:, None]], 1) - exact_map(u, s, sigma)
    rate = -torch.log((left * direction).sum()).item() / steps
    predicted = 1 / prior_relaxation_steps(metric, lr)
    assert rate == pytest.approx(predicted, rel=0.1), (rate, predicted)
    if damping:
        assert predicted < lr / 30


def test_stiffness_of_a_linear_model_is_one_and_needs_no_damping():
    energy, params, batches, _ = linear_problem()
    g = torch.Generator().manual_seed(2)
    metric = estimate_kfac(energy, params, batches, g, samples=64)
    lam = stiffness(energy, metric, params, batches, g)
    assert 0.8 < lam < 1.3, lam
    assert tame(energy, metric, params, batches, g) == pytest.approx(lam, rel=0.05)
    assert metric.damping == 0.0


def _deeponet_fit(seed, config, n, p, sigma, shape):
    """A DeepONet at its initialisation (seed) and the energy of n functions u ~ N(0, I) with
    targets shape(y) u_0 + N(0, sigma²) at p points of [0, 1]: (energy, params, u, s, g)."""
    torch.manual_seed(seed)
    model = DeepONet(config)
    g = torch.Generator().manual_seed(seed)
    u, y = torch.randn(n, config.n_sensors, generator=g), torch.linspace(0, 1, p)[:, None]
    s = shape(y.T) * u[:, :1] + sigma * torch.randn(n, p, generator=g)
    energy = GaussianEnergy(model, y, n, sigma, fan_in_prior(model))
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    return energy, params, u, s, g


def test_tame_damps_a_deep_net_until_its_steps_are_safe():
    """A DeepONet far from its mode: the Hessian's residual curvature makes |λ|max(M H) large;
    the damped metric brings it under the target (the control is the undamped value)."""
    energy, params, u, s, g = _deeponet_fit(0, ModelConfig(n_sensors=10, dim_y=1, width=16, latent=8),
                                            200, 20, 0.01, lambda y: torch.sin(3 * y))
    batches = [(u[i : i + 100], s[i : i + 100]) for i in (0, 100)]
    metric = estimate_kfac(energy, params, batches, g, samples=4)
    before = stiffness(energy, metric, params, batches, g)
    after = tame(energy, metric, params, batches, g, target=4.0)
    assert before > 8.0, before
    assert after <= 4.0 * 1.05 and metric.damping > 0


def test_tame_with_a_tolerance_stops_at_the_first_reading_within_it():
    """The same net: with ``tolerance`` the rounds stop at the first reading within
    ``target (1 + tolerance)``, so they are a prefix of the exact rounds (same readings,
    same damping) and the damping is at most the exact one's."""
    def rounds(tolerance):
        energy, params, u, s, g = _deeponet_fit(
            0, ModelConfig(n_sensors=10, dim_y=1, width=16, latent=8), 200, 20, 0.01,
            lambda y: torch.sin(3 * y))
        batches = [(u[i : i + 100], s[i : i + 100]) for i in (0, 100)]
        metric = estimate_kfac(energy, params, batches, g, samples=4)
        seen = []
        lam = tame(energy, _Recording(metric, seen), params, batches, g, target=2.0,
                   tolerance=tolerance)
        return lam, seen, metric.damping

    exact, exact_rounds, exact_damping = rounds(0.0)
    loose, loose_rounds, loose_damping = rounds(1.0)
    assert exact <= 2.0 * 1.05 and loose <= 4.0
    assert loose_rounds == exact_rounds[: len(loose_rounds)]
    assert len(loose_rounds) < len(exact_rounds) and loose_damping < exact_damping


class _Recording:
    """A metric that records each damping ``tame`` sets on it."""

    def __init__(self, metric, seen):
        self._metric, self._seen = metric, seen

    def set_damping(self, value):
        self._seen.append(float(value))
        self._metric.set_damping(value)

    def __getattr__(self, name):
        return getattr(self._metric, name)


def test_stiffness_is_the_largest_eigenvalue_of_the_metric_scaled_hessian():
    """Against a dense computation on a DeepONet small enough to form H: the eigenvalues of
    M^½ H M^½, with H by torch.func.hessian and M^½ applied to every unit vector."""
    energy, params, u, s, g = _deeponet_fit(
        1, ModelConfig(n_sensors=4, dim_y=1, width=4, depth=1, latent=3), 60, 6, 0.05,
        lambda y: torch.cos(2 * y))
    model, y = energy.model, energy.y
    batches = [(u[:30], s[:30]), (u[30:], s[30:])]
    metric = estimate_kfac(energy, params, batches, g, samples=4)
    names = list(params)
    sizes = [params[n].numel() for n in names]
    flat = torch.cat([params[n].double().reshape(-1) for n in names])
    dmodel = DeepONet(model.config).double().eval()

    def u_hat(x):
        ts = dict(zip(names, [t.view(params[n].shape) for n, t in
                              zip(names, torch.split(x, sizes), strict=True)], strict=True))
        pred = dmodel.functional_forward(ts, u.double(), y.double())
        prior = sum(0.5 * energy.prior_precision(n) * t.square().sum() for n, t in ts.items())
        return prior + (pred - s.double()).square().sum() / (2 * 0.05**2)

    h = torch.func.hessian(u_hat)(flat)
    root = []
    for i in range(len(flat)):
        e = torch.zeros(len(flat), dtype=torch.float64)
        e[i] = 1.0
        parts = dict(zip(names, [t.view(params[n].shape) for n, t in
                                 zip(names, torch.split(e, sizes), strict=True)], strict=True))
        r = metric.root(parts)
        root.append(torch.cat([r[n].double().reshape(-1) for n in names]))
    root = torch.stack(root, 1)
    exact = torch.linalg.eigvalsh(root @ h @ root.T).abs().max().item()
    assert stiffness(energy, metric, params, batches, g, iters=300) == pytest.approx(exact, rel=1e-3)


def test_hessian_on_a_subset_of_points_is_unbiased():
    """P = 3000 > HESSIAN_POINTS query points: the scaled Hessian-vector product on a random
    subset of 1024 points, averaged over 24 subsets, equals the one on every point within
    4 standard errors (from the subsets' own spread); one subset alone is off by more than
    a standard error of the mean (so the average is what agrees). P <= 1024 uses every point."""
    assert hessian_points(HESSIAN_POINTS, torch.Generator()) is None
    energy, params, u, s, g = _deeponet_fit(2, ModelConfig(n_sensors=5, dim_y=1, width=8, latent=4),
                                            40, 3000, 0.05, lambda y: torch.sin(4 * y))
    batches = [(u, s)]
    metric = estimate_kfac(energy, params, batches, g, samples=2)
    v = {n: torch.randn(p.shape, generator=g, dtype=torch.float64) for n, p in params.items()}

    def flat(hv):
        return torch.cat([hv[n].reshape(-1) for n in params])

    full = flat(scaled_hessian(energy, metric, params, batches)(v))
    draws = torch.stack([flat(scaled_hessian(energy, metric, params, batches,
                                             hessian_points(3000, g))(v)) for _ in range(24)])
    se = draws.std(0).square().sum().sqrt() / 24**0.5
    assert (draws.mean(0) - full).norm() < 4 * se
    assert (draws[0] - full).norm() > se


def test_a_group_must_not_split_a_layer():
    energy, params, batches, _ = linear_problem()
    metric = estimate_kfac(energy, params, batches, torch.Generator().manual_seed(0), samples=2)
    with pytest.raises(ValueError, match="weight and bias must share a group"):
        metric.check_groups({"w": ["map.weight"], "b": ["map.bias"]})
    metric.check_groups({"all": ["map.weight", "map.bias"], "none": []})


def test_deeponet_groups_keep_layers_whole():
    model = DeepONet(ModelConfig(n_sensors=4, dim_y=1, width=8, latent=4))
    groups = parameter_groups(model)
    for net in ("branch", "trunk"):
        names = set(groups[net])
        for n in names:
            if n.endswith(".weight"):
                assert n.replace(".weight", ".bias") in names


def test_the_largest_magnitude_is_found_where_the_rayleigh_quotient_cancels():
    """An indefinite operator with eigenvalues +3 and -3 (and a smaller 1), started with
    equal weight on ±3: the Rayleigh quotient of every iterate is about 1/3 of the truth
    or less (the ±3 parts cancel), the largest Ritz magnitude reads 3."""
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(0),
                                       dtype=torch.float64))
    a = q @ torch.diag(torch.tensor([3.0, -3.0, 1.0], dtype=torch.float64)) @ q.T
    v = {"x": q @ torch.tensor([1.0, 1.0, 0.5], dtype=torch.float64)}
    rayleigh = float(v["x"] @ a @ v["x"] / (v["x"] @ v["x"]))
    assert abs(rayleigh) < 1.0
    got = largest_magnitude(lambda x: {"x": a @ x["x"]}, v, iters=30)
    assert got == pytest.approx(3.0, rel=1e-9)


def _operator(eigenvalues, seed):
    """A symmetric operator on {"x": (n,)} with the given spectrum in a random basis, and
    a counter of its products."""
    n = len(eigenvalues)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=torch.Generator().manual_seed(seed),
                                       dtype=torch.float64))
    a = q @ torch.diag(torch.as_tensor(eigenvalues, dtype=torch.float64)) @ q.T
    calls = []

    def apply(x):
        calls.append(1)
        return {"x": a @ x["x"]}

    return apply, calls


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lanczos_reads_a_near_pair_and_stops_early_on_a_lone_top(seed):
    """Eigenvalues +10 and -9.9 above a bulk in [-5, 5] (n = 300): within 30 products the
    largest magnitude is read to 1e-3, never above it. With a lone top (10 over a bulk in
    [-3, 3]) it stops on its residual after a few products, within tol of the truth."""
    g = torch.Generator().manual_seed(100 + seed)
    bulk = torch.rand(298, generator=g, dtype=torch.float64) * 10 - 5
    apply, calls = _operator(torch.cat([torch.tensor([10.0, -9.9], dtype=torch.float64), bulk]), seed)
    v = {"x": torch.randn(300, generator=g, dtype=torch.float64)}
    got = largest_magnitude(apply, v, iters=30)
    assert 10.0 * (1 - 1e-3) <= got <= 10.0 + 1e-9
    apply, calls = _operator(torch.cat([torch.tensor([10.0, 0.0], dtype=torch.float64), bulk * 0.6]),
                             seed)
    got = largest_magnitude(apply, v, iters=30, tol=1e-3)
    assert 10.0 * (1 - 1e-3) <= got <= 10.0 + 1e-9
    assert len(calls) <= 12, len(calls)


def test_a_stacked_metric_hands_back_each_chains_own():
    """``member(c)`` of a stack of two metrics steps exactly as metric c does alone."""
    energy, params, batches, (u, s, _) = linear_problem()
    metrics = [estimate_kfac(energy, params, batches, torch.Generator().manual_seed(k), samples=2)
               for k in (1, 2)]
    metrics[1].set_damping(30.0)
    stacked = KroneckerMetric.stack(metrics)
    _, grads = energy_and_grads(energy, params, (u, s))
    for c, alone in enumerate(metrics):
        moved = [{k: v.clone() for k, v in params.items()} for _ in range(2)]
        for metric, p in zip((alone, stacked.member(c)), moved, strict=True):
            metric.step(p, grads, lr=0.1, tau=1.0, generator=torch.Generator().manual_seed(3))
        for name in params:
            assert torch.equal(moved[0][name], moved[1][name])
        assert stacked.member(c).damping == alone.damping
        assert stacked.member(c).blocks[0].qa.data_ptr() == stacked.blocks[0].qa[c].data_ptr()
    assert metrics[0].member(0) is metrics[0]  # one chain's metric: its own only member
    assert KroneckerMetric.stack(metrics[:1]) is metrics[0]
    with pytest.raises(ValueError, match="no member 1"):
        metrics[0].member(1)


def test_one_chains_metric_steps_a_batch_of_one_as_its_chain():
    """One chain's metric steps that chain's tensors given as a batch of one (1, ...)
    exactly as it steps them without the chain dimension, and refuses a batch of two; a
    stack of two metrics steps levels of two chains, rows (L·2, ...), as each chain's metric
    steps its own rows (L, ...)."""
    energy, params, batches, (u, s, _) = linear_problem()
    metric = estimate_kfac(energy, params, batches, torch.Generator().manual_seed(1), samples=2)
    _, grads = energy_and_grads(energy, params, (u, s))
    plain = {k: v.clone() for k, v in params.items()}
    metric.step(plain, grads, lr=0.1, tau=1.0, generator=torch.Generator().manual_seed(3))
    one = {k: v.clone()[None] for k, v in params.items()}
    metric.step(one, {k: g[None] for k, g in grads.items()}, lr=0.1, tau=1.0,
                generator=torch.Generator().manual_seed(3))
    for k in params:
        assert torch.equal(one[k][0], plain[k])
    other = estimate_kfac(energy, params, batches, torch.Generator().manual_seed(2), samples=2)
    stacked = KroneckerMetric.stack([metric, other])
    rows = {k: torch.stack([v, v + 0.1, v + 0.2, v + 0.3]) for k, v in params.items()}  # (L·C)
    steps = {k: torch.stack([g, 2 * g, 3 * g, 4 * g]) for k, g in grads.items()}
    zero = torch.Generator()
    zero.manual_seed(5)
    together = {k: v.clone() for k, v in rows.items()}
    stacked.step(together, steps, lr=(0.1, 0.2), tau=(0.0, 0.0), generator=zero)
    for c, alone in enumerate((metric, other)):  # τ = 0: the drift only, no draws to align
        mine = {k: v[c::2].clone() for k, v in rows.items()}  # chain c's rows (L, ...)
        alone.step(mine, {k: g[c::2] for k, g in steps.items()}, lr=(0.1, 0.2), tau=(0.0, 0.0),
                   generator=zero)
        for k in params:
            assert torch.allclose(together[k][c::2], mine[k], rtol=1e-6, atol=1e-7), (c, k)
    with pytest.raises(ValueError, match="several chains"):
        metric.step({k: torch.stack([v, v]) for k, v in params.items()},
                    {k: torch.stack([g, g]) for k, g in grads.items()}, lr=0.1, tau=1.0,
                    generator=torch.Generator())


def test_end_stiffness_is_the_largest_over_the_chains():
    """After sampling starts, the stiffness each chain's own metric sees at its position,
    the largest of the C chains: chain 0's metric is damped far beyond the data's precision
    (stiffness far below 1), chain 1's is not (a linear model: about 1)."""
    energy, params, batches, (u, s, _) = linear_problem()
    sampler = SGLD(fisher_samples=8)
    state = sampler.init({k: torch.stack([v, v + 0.01]) for k, v in params.items()}, chains=2)
    sampler.end_burn_in(state, energy, (u, s), torch.Generator().manual_seed(0))
    metrics = [state.sampling.metric.member(c) for c in range(2)]
    metrics[0].set_damping(1e8)
    state.sampling.metric = KroneckerMetric.stack(metrics)
    got = end_stiffness(state, energy, (u, s), torch.Generator().manual_seed(1))
    each = [stiffness(energy, metrics[c], {k: v[c] for k, v in state.chain.params.items()},
                      batches[:3], torch.Generator().manual_seed(1), iters=100) for c in range(2)]
    assert each[0] < 0.1 and 0.8 < each[1] < 1.3, each
    assert got == pytest.approx(each[1], rel=0.05)
    assert end_stiffness(SGLD().init(params), energy, (u, s), torch.Generator()) is None


def test_a_well_conditioned_block_steps_in_float32_as_in_float64(monkeypatch):
    """Damped far beyond the data's precision, the block's precisions span under 1e4 and it
    is rotated in float32: the move equals the float64 one to float32 rounding (same noise).
    Undamped, the GRF-like inputs span ~1e8 and the block keeps float64."""
    from bdeeponet.samplers import kfac

    energy, params, batches, (u, s, _) = linear_problem()
    metric = estimate_kfac(energy, params, batches, torch.Generator().manual_seed(1), samples=8)
    (blk,) = metric.blocks
    assert kfac._float32_scales(blk) is None
    metric.set_damping(1e6)
    assert kfac._float32_scales(blk) is not None
    _, grads = energy_and_grads(energy, params, (u, s))
    moves = []
    for condition in (kfac.FLOAT32_CONDITION, 0.0):  # 0: every block in float64
        monkeypatch.setattr(kfac, "FLOAT32_CONDITION", condition)
        blk.__dict__.pop("_float32", None)
        moved = {k: v.clone() for k, v in params.items()}
        metric.step(moved, grads, lr=0.05, tau=1.0, generator=torch.Generator().manual_seed(4))
        moves.append(torch.cat([(moved[k] - params[k]).reshape(-1) for k in params]))
    assert kfac._float32_scales(blk) is None  # (the float64 pass)
    assert not torch.equal(moves[0], moves[1])  # the first pass did round in float32
    assert (moves[0] - moves[1]).norm() < 1e-5 * moves[1].norm()


def test_the_stiffness_reads_the_first_functions_the_network_asks_for():
    """300 functions by default; a network's ``curvature_functions`` cuts across the
    batches of 100 (the Fourier operator asks for 25)."""
    from types import SimpleNamespace

    from bdeeponet.networks import FourierConfig, FourierOperator
    from bdeeponet.samplers.sgld import curvature_batches, metric_batches

    u, s = torch.arange(450.0)[:, None], -torch.arange(450.0)[:, None]
    batches = metric_batches((u, s))

    def read(model):
        got = curvature_batches(SimpleNamespace(model=model), batches)
        return torch.cat([b[0] for b in got]), torch.cat([b[1] for b in got])

    assert torch.equal(read(None)[0], u[:300]) and torch.equal(read(None)[1], s[:300])
    assert torch.equal(read(SimpleNamespace(curvature_functions=130))[0], u[:130])
    assert read(SimpleNamespace(curvature_functions=1000))[0].shape[0] == 450
    assert read(FourierOperator(FourierConfig(grid=(16,), modes=4)))[0].shape[0] == 25
