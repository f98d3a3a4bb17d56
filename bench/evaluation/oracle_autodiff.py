"""The differentiation of the defense oracle (:mod:`bench.evaluation.oracle`): the per-sample
gradients ``G`` an input query forms from ``x̂``, the pullback of a cotangent through ``D`` by
autograd with Backward Pass Differentiable Approximation where ``D`` has no useful derivative
(BPDA with the identity; Athalye, Carlini & Wagner, ICML 2018, §4.1), and the grouping of an
attack's problems into one hook call per round.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.func import grad, vmap


def input_gradients(
    model: Any, loss_fn: Any, x: torch.Tensor, y: torch.Tensor, theta: torch.Tensor, per_sample: bool
) -> torch.Tensor:
    """``G`` of an input query, differentiable wrt ``x``: per-sample gradients ``[K, B, P]``
    (``torch.func.grad`` vmapped over problems and samples) or, without ``per_sample``, the
    gradient of each problem's mean loss ``[K, 1, P]`` (the forward vmapped over problems, one
    ``autograd.grad`` with ``create_graph``; row ``k`` depends on ``θ_k`` alone)."""
    if per_sample:

        def sample_loss(th: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            return loss_fn(model.forward(th, xb.unsqueeze(0)), yb.unsqueeze(0)).sum()

        return vmap(vmap(grad(sample_loss), in_dims=(None, 0, 0)))(theta.detach(), x, y)
    th = theta.detach().clone().requires_grad_(True)
    out = vmap(model.forward)(th, x)
    losses = loss_fn(out.flatten(0, 1), y.flatten(0, 1)).reshape(x.shape[0], -1)
    (g,) = torch.autograd.grad(losses.mean(1).sum(), th, create_graph=True)
    return g.unsqueeze(1)


def pullback(gs: list[torch.Tensor], ys: list[torch.Tensor], u: torch.Tensor) -> list[torch.Tensor]:
    """``J_D(g_m)ᵀ u`` for each draw ``m`` by autograd (one backward pass for all draws), with
    the batch mean's ``u / B`` (BPDA) for rows where it is zero while ``u`` is not, or
    everywhere when ``D`` left the graph."""
    surrogate = u.unsqueeze(1).expand_as(gs[0]) / gs[0].shape[1]
    live = [m for m, y in enumerate(ys) if y.requires_grad]
    found: dict[int, torch.Tensor | None] = {}
    if live:
        grads = torch.autograd.grad(
            [ys[m] for m in live], [gs[m] for m in live], [u] * len(live), allow_unused=True
        )
        found = dict(zip(live, grads, strict=True))
    out = []
    for m in range(len(gs)):
        vj = found.get(m)
        if vj is None:
            out.append(surrogate)
            continue
        dead = (vj.flatten(1).abs().sum(1) == 0) & (u.abs().sum(1) > 0)
        out.append(torch.where(dead.view(-1, *([1] * (vj.dim() - 1))), surrogate, vj).detach())
    return out


def round_groups(rounds: torch.Tensor) -> list[Any]:
    """The problems of each round (one hook call each): ``slice(None)`` when all share one."""
    if len(rounds) == 0 or bool((rounds == rounds[0]).all()):
        return [slice(None)]
    return [torch.nonzero(rounds == t).flatten() for t in torch.unique(rounds).tolist()]
