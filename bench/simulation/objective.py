"""Per-node losses and gradients, vectorized over nodes with ``torch.func``.

For node ``v`` with minibatch ``ξ_v`` (mask ``m_v``) the local objective is the masked mean

    L_v(θ) = Σ_j m_vj ℓ(f_θ(x_vj), y_vj) / max(1, Σ_j m_vj),

and :meth:`NodeObjective.node_grads` returns ``∇L_v(θ_v)`` for every ``v`` at once with
``vmap(grad_and_value(L))`` over the stacked parameters ``θ: [N, P]``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.func import grad_and_value, vmap

from bench.registry import Registry
from bench.simulation.flat import FlatModel

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
LOSSES: Registry = Registry("loss")


@LOSSES.register("cross_entropy", "softmax cross-entropy over C logits")
def cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y, reduction="none")


@LOSSES.register("binary_cross_entropy", "logistic loss on one logit: -y log σ(z) - (1-y) log(1-σ(z))")
def binary_cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(out.squeeze(-1), y.to(out.dtype), reduction="none")


@LOSSES.register("squared", "squared error (f(x) - y)² (Xu & Neglia Eq. 2, without the 1/2)")
def squared(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (out.squeeze(-1) - y.to(out.dtype)) ** 2


def default_loss(n_classes: int, n_outputs: int) -> str:
    """The loss matching a task: squared error for regression, BCE for one logit, else CE."""
    if n_classes == 0:
        return "squared"
    return "binary_cross_entropy" if n_outputs == 1 else "cross_entropy"


def predict_labels(out: torch.Tensor) -> torch.Tensor:
    """Class predictions from logits (one logit: ``z > 0``)."""
    return (out.squeeze(-1) > 0).long() if out.shape[-1] == 1 else out.argmax(-1)


class NodeObjective:
    """Masked minibatch loss of an architecture, with vectorized per-node gradients."""

    def __init__(self, model: FlatModel, loss: str | LossFn) -> None:
        self.model = model
        self.loss_fn: LossFn = LOSSES.get(loss, field="loss") if isinstance(loss, str) else loss
        self._grad = vmap(grad_and_value(self.batch_loss))

    def batch_loss(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """``L(θ) = Σ_j m_j ℓ(f_θ(x_j), y_j) / max(1, Σ_j m_j)`` for one node."""
        losses = self.loss_fn(self.model.forward(theta, x), y)
        w = mask.to(losses.dtype)
        return (losses * w).sum() / w.sum().clamp_min(1.0)

    def node_grads(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-node gradients ``[N, P]`` and losses ``[N]`` (nodes stacked on dim 0)."""
        return self._grad(theta, x, y, mask)

    def node_outputs(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Outputs of every node's model on shared inputs ``x``: ``[N, n, out]``."""
        return vmap(self.model.forward, in_dims=(0, None))(theta, x)
