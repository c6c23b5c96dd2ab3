"""How much faster is the aligned DeepONet (``B @ T^T``: the branch on the N functions, the
trunk on the P shared points) than the per-point replicated form (one (function, point)
pair per row, N*P rows through both nets)?

Forward and backward (loss and every parameter's gradient) of the library's ``DeepONet``
at N = 1000 anti-derivative functions, P = 100, after checking that both forms give the
same outputs and gradients. The replicated inputs are built once, outside the timing.

Run: python benchmarks/aligned_forward.py [--quick]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from common import fmt_ms, header, interleaved, problem_data, ratio

from bdeeponet import DeepONet, ModelConfig


def replicated(model: DeepONet, u_rep: torch.Tensor, y_rep: torch.Tensor) -> torch.Tensor:
    """The unaligned DeepONet, (N*P,): a row-wise dot product of branch and trunk outputs."""
    c = model.config
    z = (model.branch(model.branch_input(u_rep)) * model.trunk(model.trunk_input(y_rep))).sum(1)
    return c.s_shift + c.s_scale * (z + model.bias)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.5 s per form")
    args = parser.parse_args()
    header(" ".join(__doc__.split("\n\n")[0].split()))
    data = problem_data("antiderivative")
    u, s, y = (torch.as_tensor(np.asarray(a), dtype=torch.float32)
               for a in (data.u_train, data.s_train, data.y))
    n, n_points = s.shape
    torch.manual_seed(0)
    model = DeepONet(ModelConfig(n_sensors=u.shape[1], dim_y=y.shape[1]))
    params = list(model.parameters())
    u_rep, y_rep = u.repeat_interleave(n_points, dim=0), y.repeat(n, 1)  # (N*P, m), (N*P, d)
    s_rep = s.reshape(-1)

    def aligned_pass():
        loss = 0.5 * ((model(u, y) - s) ** 2).sum()
        return loss, torch.autograd.grad(loss, params)

    def replicated_pass():
        loss = 0.5 * ((replicated(model, u_rep, y_rep) - s_rep) ** 2).sum()
        return loss, torch.autograd.grad(loss, params)

    with torch.no_grad():
        out_diff = float((model(u, y) - replicated(model, u_rep, y_rep).reshape(n, n_points))
                         .abs().max())
    (_, grad_a), (_, grad_r) = aligned_pass(), replicated_pass()
    grad_diff = max(float((a - b).abs().max() / b.abs().max())
                    for a, b in zip(grad_a, grad_r, strict=True))
    rounds, min_run_time = (3, 0.5) if args.quick else (7, 2.0)
    times = interleaved({"aligned": aligned_pass, "replicated": replicated_pass}, rounds,
                        min_run_time)
    print(f"\nN = {n} functions, P = {n_points} points, m = {u.shape[1]}, default model; "
          f"{rounds} rounds")
    print(f"same numbers: max |output difference| {out_diff:.1e}, max relative gradient "
          f"difference {grad_diff:.1e}")
    head = f"{'form':<42}{'ms per pass [IQR]':>30}"
    print(head)
    print("-" * len(head))
    print(f"{'aligned: (N, m) and (P, d) inputs':<42}{fmt_ms(times['aligned']):>30}")
    print(f"{'replicated: (N*P, m) and (N*P, d) inputs':<42}{fmt_ms(times['replicated']):>30}")
    speed = ratio(times["replicated"], times["aligned"])
    print(f"speed-up, replicated / aligned: {speed[0]:.0f}x [{speed[1]:.0f}, {speed[2]:.0f}] "
          f"(replicated inputs {u_rep.numel() * 4 / 2**20:.0f} MiB against "
          f"{u.numel() * 4 / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
