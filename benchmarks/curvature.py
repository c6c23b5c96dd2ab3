"""Where the stiffness that forces the Kronecker metric's damping comes from, measured on a
finished run (docs/samplers.md).

At the run's first draw (chain 0) the undamped metric M is estimated as a run estimates
it, and the metric-scaled Hessian ``M^½ H M^½`` (``kfac.scaled_hessian``) is compared with
its Gauss-Newton part ``M^½ G M^½`` (``G = Jᵀ J / σ² + prior``, which the Kronecker metric
approximates; what is left of H is the residuals' curvature ``Σ r ∇²f / σ²``):

1. extreme eigenvalues of both (Lanczos, scipy's eigsh), the number of G's above 4, and a
   stochastic Lanczos quadrature estimate of how many of H's exceed 4, 16 and 64 in size;
2. which parameter blocks hold H's stiffest directions;
3. how far from Gaussian the posterior is: draws ``θ + c M^½ ξ`` of the linearised
   Laplace approximation for c = 0.03 ... 1, their data and prior energies and test e2;
4. the stiffness at draws along chain 0 under the metric of step 1 damped with the run's
   δ (``metric_damping``, the largest of its chains'): it grows as the chain drifts;
5. the latent directions of the output ``b(u)·t(y)``: how many carry (almost) no signal in
   either net at the first draw, and how far they have filled by chain 0's last.

Run: python benchmarks/curvature.py RUN_DIR DATA.npz [--functions 300] [--k 20] [--probes 4]
"""

from __future__ import annotations

import argparse
import copy
import json

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator, eigsh
from torch.func import functional_call

from bdeeponet.data import load
from bdeeponet.metrics import relative_errors
from bdeeponet.posterior import unflatten
from bdeeponet.run import load_run
from bdeeponet.samplers.kfac import estimate_kfac, scaled_hessian, stiffness, tame
from bdeeponet.samplers.sgld import metric_batches
from bdeeponet.train import setup, split_calibration


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("data")
    ap.add_argument("--functions", type=int, default=300, help="training functions in H")
    ap.add_argument("--k", type=int, default=20, help="eigenvalues per Lanczos call")
    ap.add_argument("--probes", type=int, default=4, help="probes of the quadrature")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    print("command: python benchmarks/curvature.py " + " ".join(
        f"{a}" for a in (args.run, args.data, "--functions", args.functions, "--k", args.k,
                         "--probes", args.probes, "--seed", args.seed)))

    run, data = load_run(args.run), load(args.data)
    post, config = run.posterior, run.config
    fit, _ = split_calibration(data, config)
    built = setup(fit, config, post.noise_std)  # u as the branch reads it (encoded where the run is)
    energy, u, s = built.energy, built.u, built.s
    batches = metric_batches((u, s))
    few = [(u[: args.functions], s[: args.functions])]
    chains = post.chains or 1
    per_chain = post.samples.shape[0] // chains
    draw = lambda j: unflatten(post.samples[j], post.template)  # noqa: E731 (chain 0's j-th)
    params = draw(0)
    g = torch.Generator().manual_seed(args.seed)
    metric = estimate_kfac(energy, params, batches, g, config.fisher_samples)
    names, shapes = list(params), [params[n].shape for n in params]
    sizes = [int(np.prod(sh)) for sh in shapes]

    def as_dict(x):
        parts = torch.split(torch.as_tensor(np.asarray(x).ravel()), sizes)
        return {n: t.view(sh) for n, t, sh in zip(names, parts, shapes, strict=True)}

    def as_vector(d):
        return torch.cat([d[n].reshape(-1) for n in names]).double().numpy()

    def operator(apply):
        return LinearOperator((sum(sizes),) * 2, matvec=lambda x: as_vector(apply(as_dict(x))),
                              dtype=np.float64)

    hess = operator(scaled_hessian(energy, metric, params, few))
    ggn = operator(gauss_newton(energy, metric, params, few))
    start = np.random.default_rng(args.seed).standard_normal(sum(sizes))  # Lanczos, seeded

    print("\n1. eigenvalues of M^½ H M^½ (Hessian) and M^½ G M^½ (Gauss-Newton), undamped M, "
          f"{args.functions} functions scaled to {energy.n_total}, d = {sum(sizes)}")
    top = np.sort(eigsh(hess, k=args.k, which="LA", return_eigenvectors=False, tol=1e-3, v0=start))[::-1]
    low = np.sort(eigsh(hess, k=args.k, which="SA", return_eigenvectors=False, tol=1e-3,
                       v0=start))
    gtop = np.sort(eigsh(ggn, k=4 * args.k, which="LA", return_eigenvectors=False, tol=1e-3,
                        v0=start))[::-1]
    print(f"   H, largest: {fmt(top[:5])} ... {args.k}th {top[-1]:.1f}")
    print(f"   H, smallest: {fmt(low[:5])} ... {args.k}th {low[-1]:.1f}")
    above = int((gtop > 4).sum())
    print(f"   G, largest: {fmt(gtop[:5])}; above 4: {above if above < len(gtop) else f'>= {above}'}")
    counts = slq_counts(hess, (4, 16, 64), args.probes, np.random.default_rng(args.seed))
    print("   H, |eigenvalue| above 4 / 16 / 64 (stochastic Lanczos quadrature, "
          f"{args.probes} probes): " + " / ".join(f"{c:.0f}" for c in counts))

    print("\n2. where H's stiffest directions sit (share of each eigenvector, blocks >= 2%)")
    vals, vecs = eigsh(hess, k=3, which="LM", tol=1e-3, v0=start)
    for lam, vec in zip(vals, vecs.T, strict=True):
        pieces = np.split(vec, np.cumsum(sizes)[:-1])
        share = {n: float(np.square(v).sum()) for n, v in zip(names, pieces, strict=True)}
        print(f"   {lam:7.1f}: " + ", ".join(f"{n} {w:.2f}" for n, w in share.items() if w >= 0.02))

    print("\n3. draws of the linearised Laplace approximation θ + c M^½ ξ (undamped M)")
    base = energies(energy, params, u, s, data)
    print(f"   c = 0 (the draw itself): data energy {base[0]:.0f}, prior energy {base[1]:.0f}, "
          f"test e2 {base[2]:.2f}%")
    xi = metric.root({n: torch.randn(params[n].shape, generator=g) for n in names})
    for c in (0.03, 0.1, 0.3, 1.0):
        e = energies(energy, {n: params[n] + c * xi[n] for n in names}, u, s, data)
        print(f"   c = {c:<4}: data energy {e[0] - base[0]:+.0f}, prior energy {e[1] - base[1]:+.0f}, "
              f"test e2 {e[2]:.2f}%")

    metrics = json.loads((run.path / "metrics.json").read_text())
    damping = metrics.get("metric_damping")
    if damping is None:  # a run written before the damping was recorded: tame here
        tame(energy, metric, params, few, g)
        damping = metric.damping
    metric.set_damping(damping)
    step = metrics.get("langevin_step", float("nan"))
    print(f"\n4. stiffness along chain 0, the metric of 1. damped with the run's δ = {damping:.3g} "
          f"(step η = {step:.3g}; a step is stable while η λ < 2)")
    for j in sorted({0, per_chain // 4, per_chain // 2, per_chain - 1}):
        p = draw(j)
        lam = stiffness(energy, metric, p, few, g)
        prior = energies(energy, p, u, s, data)[1]
        print(f"   draw {j:4d}: stiffness {lam:6.2f} (η λ = {step * lam:.2f}), prior energy {prior:.0f}")

    print("\n5. latent directions (eigenvectors of the branch's and trunk's output second "
          "moments, each scaled to 1, summed) at chain 0's first draw")
    first = latent_amplitudes(energy.model, params, u, energy.y)
    last = latent_amplitudes(energy.model, draw(per_chain - 1), u, energy.y, first[0])
    dead = first[1] < 1e-3
    print(f"   {int(dead.sum())} of {len(dead)} carry under 1e-3 of the strongest's weight")
    for label, (_, _, b, tt) in (("first draw", first), (f"draw {per_chain - 1}", last)):
        print(f"   {label}: rms amplitude in those, branch {med(b[dead])}, trunk {med(tt[dead])}; "
              f"in the others, branch {med(b[~dead])}, trunk {med(tt[~dead])} (medians)")


def latent_amplitudes(model, params, u, y, basis=None):
    """``(basis, weight, |b|, |t|)``: the latent basis (from these parameters' outputs
    unless given), each direction's weight (its eigenvalue) and the rms amplitudes of the
    branch's outputs over the training functions and the trunk's over the query points."""
    def net(name, x):
        sub = {k[len(name) + 1 :]: v for k, v in params.items() if k.startswith(name + ".")}
        with torch.no_grad():
            return functional_call(getattr(model, name), sub, (x,)).double()

    b, t = net("branch", model.branch_input(u)), net("trunk", model.trunk_input(y))
    mb, mt = b.T @ b / len(b), t.T @ t / len(t)
    weight = torch.zeros(b.shape[1], dtype=torch.float64)
    if basis is None:
        weight, basis = torch.linalg.eigh(mb / mb.diagonal().sum() + mt / mt.diagonal().sum())
        weight = weight / weight.max()
    rms = lambda x: (x @ basis).square().mean(0).sqrt().numpy()  # noqa: E731
    return basis, weight.numpy(), rms(b), rms(t)


def med(x) -> str:
    return f"{np.median(x):.3g}" if len(x) else "-"


def gauss_newton(energy, metric, params, batches):
    """``v -> M^½ (Jᵀ J scale / σ² + prior) M^½ v``, the Gauss-Newton part of
    :func:`~bdeeponet.samplers.kfac.scaled_hessian`."""
    model = copy.deepcopy(energy.model).double().eval()
    names = list(params)
    primals = tuple(params[n].detach().double() for n in names)
    us = torch.cat([b[0] for b in batches]).double()
    y = energy.y.double()
    scale = energy.n_total / us.shape[0]
    model.trunk_input(y)  # the feature cache, filled outside the transforms

    def forward(*ts):
        return functional_call(model, dict(zip(names, ts, strict=True)), (us, y))

    _, pullback = torch.func.vjp(forward, *primals)

    def gv(v):
        _, jv = torch.func.jvp(forward, primals, tuple(v[n] for n in names))
        jt = pullback(jv * scale / energy.noise_std**2)
        return {n: a + energy.prior_precision(n) * v[n] for n, a in zip(names, jt, strict=True)}

    return lambda x: metric.root(gv(metric.root(x)))


def slq_counts(op, thresholds, probes, rng, steps=120):
    """How many eigenvalues of the symmetric ``op`` exceed each threshold in size, by
    stochastic Lanczos quadrature (Rademacher probes, full reorthogonalisation)."""
    d = op.shape[0]
    counts = np.zeros(len(thresholds))
    for _ in range(probes):
        q = rng.choice([-1.0, 1.0], size=d) / np.sqrt(d)
        basis, alpha, beta = [q], [], []
        w = op.matvec(q)
        for i in range(steps):
            alpha.append(basis[-1] @ w)
            w = w - alpha[-1] * basis[-1] - (beta[-1] * basis[-2] if i else 0)
            for b in basis:
                w -= (b @ w) * b
            beta.append(np.linalg.norm(w))
            basis.append(w / beta[-1])
            w = op.matvec(basis[-1])
        t = np.diag(alpha) + np.diag(beta[:-1], 1) + np.diag(beta[:-1], -1)
        theta, vecs = np.linalg.eigh(t)
        weights = vecs[0] ** 2
        counts += [d * weights[np.abs(theta) > th].sum() for th in thresholds]
    return counts / probes


def energies(energy, params, u, s, data):
    """The data energy (all training functions), the prior energy and the test e2 (%)."""
    model = energy.model
    with torch.no_grad():
        p = {n: t.float() for n, t in params.items()}
        pred = functional_call(model, p, (u, energy.y.float()))
        data_term = float((pred - s).double().square().sum()) / (2 * energy.noise_std**2)
        prior = sum(0.5 * energy.prior_precision(n) * float(t.double().square().sum())
                    for n, t in p.items())
        test = functional_call(model, p, (torch.as_tensor(data.u_test, dtype=torch.float32),
                                          energy.y.float())).double().numpy()
    return data_term, prior, relative_errors(test, data.s_test)[1]


def fmt(values) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


if __name__ == "__main__":
    main()
