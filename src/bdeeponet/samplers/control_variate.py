"""Control-variate gradients anchored at the warm start (Baker, Fearnhead, Fox & Nemeth 2019).

Why. Near the mode the minibatch gradient ``∇Û(θ) = ∇prior + (N/n) Σ_batch ∇L_f(θ)`` is
dominated by the per-function noise ``∇L_f(θ̂)``, not by the posterior's curvature: at the
paper's scale its variance in a Langevin step is ~``η (N/n) / 2`` times the injected noise,
which makes the band several times too wide. Subtracting the same functions' gradients at a
fixed anchor ``θ̂`` and adding back their exact full-data sum,

    ĝ(θ) = ∇Û_batch(θ) − (1/n) Σ_{f ∈ batch} c_f + (1/N) Σ_{all f} c_f,
    c_f = ∇Û_{f}(θ̂) = ∇prior(θ̂) + N ∇L_f(θ̂),

keeps the estimator unbiased for any fixed vectors ``c_f`` (each function is in the batch
with probability n/N) and leaves only ``(N/n) Σ_batch [∇L_f(θ) − ∇L_f(θ̂)]`` as noise, which
vanishes as θ → θ̂. The ``c_f`` are stored (N rows of the chain's flat layout, float32:
92 MB for the DeepONet at N = 1000) so a step costs one gather of n rows, not a second
backward pass.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from .langevin import Chain, energy_and_grads


class ControlVariate:
    """``rows`` (C, N, p): each chain's ``c_f`` in the chain's flat layout, anchored at that
    chain's own warm start; ``total`` (C, p): their mean over the N functions."""

    def __init__(self, rows: torch.Tensor):
        # float32: bfloat16 rows (half the memory traffic) keep the estimator unbiased but
        # their rounding, ~0.4% of each N-scaled row, is new noise: the closed-form
        # check's band came out 1.7x too wide with them
        self.rows = rows
        self.total = rows.mean(dim=1)

    def _rows(self, span: slice) -> torch.Tensor:
        """The rows' columns ``span``, as one (C·N, width) matrix."""
        C, N, p = self.rows.shape
        if span.start == 0 and span.stop == p:
            return self.rows.view(C * N, p)
        key = (span.start, span.stop)
        columns = self.__dict__.setdefault("_columns", {})  # a cache: not checkpointed
        if key not in columns:  # m-reSGLD's groups: one contiguous copy each, made once
            columns[key] = self.rows[:, :, span].reshape(C * N, -1)
        return columns[key]

    @classmethod
    def at(cls, energy, chain: Chain, data) -> ControlVariate:
        """Anchor each chain at its current parameters; ``data = (u, s)`` all N functions."""
        u, s = data
        C, p = chain.flat.shape
        rows = torch.empty(C, u.shape[0], p, dtype=chain.flat.dtype, device=chain.flat.device)
        names = sorted(chain.params, key=lambda n: chain.offsets[n][0])  # the layout's order
        for c in range(C):
            params = {n: t[c] for n, t in chain.params.items()}
            for f in range(u.shape[0]):  # one function per call: its own gradient c_f
                _, grads = energy_and_grads(energy, params, (u[f : f + 1], s[f : f + 1]), names)
                rows[c, f] = torch.cat([grads[n].detach().reshape(-1) for n in names])
        return cls(rows)

    def correct(self, chain: Chain, grads: dict[str, torch.Tensor], index: torch.Tensor
                ) -> dict[str, torch.Tensor]:
        """``ĝ`` for the tensors in ``grads`` (a contiguous span of the layout), from the
        minibatch gradient and the batch's row numbers ``index``: (n,), one batch every
        chain shares, or (C, n), each chain's own."""
        span, g = chain.flat_grad(grads)
        C, N = self.rows.shape[:2]
        # chain c's rows are rows c·N to c·N + N − 1 of the matrix
        bags = index.expand(C, index.shape[-1]) + N * torch.arange(C, device=index.device)[:, None]
        # a fused gather-and-average of each chain's n rows (10x faster than indexing, then
        # a mean)
        g.sub_(F.embedding_bag(bags, self._rows(span), mode="mean")).add_(self.total[:, span])
        out, start = {}, span.start
        for name in sorted(grads, key=lambda n: chain.offsets[n][0]):
            a, b = chain.offsets[name]
            out[name] = g[:, a - start : b - start].view(C, *chain.shapes[name])
        return out
