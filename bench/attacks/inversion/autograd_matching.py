"""The matching objective of K problems with only the forward pass vmapped: the small-problem
fast path of :func:`~bench.attacks.inversion.matching.matching_fn`.

The generic path ``vmap(grad_and_value(F))`` of :mod:`~bench.attacks.inversion.matching` runs
``torch.func``'s second-order transforms (a ``grad`` inside a ``grad``, both inside a ``vmap``)
on every call. For the problems of one victim (a few restarts and label hypotheses, a model of
10⁴–10⁵ parameters) that bookkeeping costs more than the arithmetic, and a plain
``torch.autograd`` evaluation of the same objective is cheaper (see performance/README.md).

Here the K problems' parameters ``θ [K, P]`` are a leaf of the ordinary autograd graph, the
forward pass ``f_{θ_k}(x_k)`` is ``vmap``-ed over ``k`` (``torch.func`` lowers it to batched
operators, e.g. a grouped convolution, which record an ordinary graph), and then

    G = ∂/∂θ Σ_k L(θ_k; x_k, y_k)   (create_graph; row k is ∇_θ L(θ_k; x_k, y_k), since
                                      L_k depends on θ_k alone)
    F_k = D(G_k, g_k) + λ_TV TV(x_k),    ∇_x Σ_k F_k = (∇_{x_k} F_k)_k

by two calls of :func:`torch.autograd.grad` — the same objective and gradient as
:func:`~bench.attacks.inversion.matching.problem_objective`
(``tests/attacks/inversion/test_autograd_matching.py`` checks the two to 1e-10 in float64),
faster per call for a few problems and slower for many (see
:data:`~bench.attacks.inversion.matching.AUTOGRAD_MAX_PROBLEMS`, where ``matching_fn``'s ``auto``
switches). On a CPU the problems are evaluated in chunks of
:func:`~bench.attacks.inversion.chunking.problem_chunk` problems (a loop over chunks of
problems, never over single problems), as the generic path.
"""

from __future__ import annotations

import torch
from torch.func import grad, vmap

from bench.attacks.inversion.chunking import problem_chunk
from bench.attacks.inversion.distance import gradient_distance
from bench.attacks.inversion.oracle_transform import DefenseTransform
from bench.attacks.inversion.regularizers import total_variation
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn


class AutogradMatching:
    """:data:`~bench.attacks.inversion.matching.BatchedFn` of the K problems ``(y, theta,
    target)``: ``x [K', B, ...], idx -> (values [K'], grads [K', B, ...])``.

    ``kept_only``: match only where the observed gradient is non-zero, as
    :func:`~bench.attacks.inversion.matching.problem_objective`. ``offsets [K, P]``: a term added
    to each problem's gradient before the distance, ``dist(∇_θ L_k + c_k, g_k)`` (a defense that
    adds a gradient-independent term: :func:`~bench.attacks.inversion.matching.matching_fn`).
    """

    def __init__(
        self,
        model: FlatModel,
        loss_fn: LossFn,
        y: torch.Tensor,
        theta: torch.Tensor,
        target: torch.Tensor,
        objective: str = "l2",
        tv_weight: float = 0.0,
        kept_only: bool = False,
        transform: DefenseTransform | None = None,
        offsets: torch.Tensor | None = None,
    ) -> None:
        self.model, self.loss_fn = model, loss_fn
        self.transform, self.offsets = transform, offsets
        self.y, self.theta, self.target = y, theta, target
        self.objective, self.tv_weight, self.kept_only = objective, float(tv_weight), bool(kept_only)
        self.chunk = problem_chunk(target.shape[-1], target)

    def __call__(self, x: torch.Tensor, idx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        y, theta, target = (self.y, self.theta, self.target) if idx is None else (
            self.y[idx], self.theta[idx], self.target[idx]
        )  # fmt: skip
        offsets = self.offsets if self.offsets is None or idx is None else self.offsets[idx]
        k = x.shape[0]
        step = k if self.chunk is None else self.chunk
        values, grads = [], []
        for lo in range(0, k, step):
            sl = slice(lo, min(k, lo + step))
            rows = None if self.transform is None else _rows(idx, sl, x.shape[0])
            v, g = self._evaluate(
                x[sl], y[sl], theta[sl], target[sl], rows, None if offsets is None else offsets[sl]
            )
            values.append(v)
            grads.append(g)
        if len(values) == 1:
            return values[0], grads[0]
        return torch.cat(values), torch.cat(grads)

    def _evaluate(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        theta: torch.Tensor,
        target: torch.Tensor,
        rows: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.enable_grad():
            xl = x.detach().requires_grad_(True)
            if self.transform is not None and self.transform.reads_inputs:
                values = self.transform.of_inputs(xl, y, theta, target, rows)  # G formed by the oracle
            elif self.transform is not None and self.transform.per_sample and x.shape[1] > 1:
                values = self.transform(self._per_sample(xl, y, theta), theta, target, rows)
            else:
                th = theta.detach().clone().requires_grad_(True)  # a leaf of its own, [K, P]
                out = vmap(self.model.forward)(th, xl)  # [K, B, outputs]
                # per-sample losses of all K·B samples; each problem's mean, as mean_loss's ``.mean()``
                losses = self.loss_fn(out.flatten(0, 1), y.flatten(0, 1)).reshape(x.shape[0], -1)
                (g,) = torch.autograd.grad(losses.mean(1).sum(), th, create_graph=True)
                if self.transform is not None:  # one sample, or a defense that reads the mean only
                    values = self.transform(g.unsqueeze(1), theta, target, rows)
                else:
                    if offsets is not None:
                        g = g + offsets
                    if self.kept_only:
                        g = torch.where(target != 0, g, torch.zeros_like(g))
                    values = gradient_distance(g, target, self.objective)  # per row
            if self.tv_weight:
                values = values + self.tv_weight * vmap(total_variation)(xl)
            (gx,) = torch.autograd.grad(values.sum(), xl)
        return values.detach(), gx

    def _per_sample(self, x: torch.Tensor, y: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        """``∇_θ ℓ(θ_k; x_kb, y_kb)`` ``[K, B, P]``, differentiable wrt ``x`` (``torch.func.grad``
        under plain autograd)."""

        def sample_loss(th: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            return self.loss_fn(self.model.forward(th, xb.unsqueeze(0)), yb.unsqueeze(0)).sum()

        return vmap(vmap(grad(sample_loss), in_dims=(None, 0, 0)))(theta.detach(), x, y)


def _rows(idx: torch.Tensor | None, sl: slice, k: int) -> torch.Tensor:
    """The problem indices of chunk ``sl`` of a call on problems ``idx`` (all when ``None``)."""
    full = torch.arange(k) if idx is None else idx.cpu()
    return full[sl]
