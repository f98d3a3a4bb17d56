"""Per-node losses and gradients, vectorized over nodes with ``torch.func``.

For node ``v`` with minibatch ``ξ_v`` (mask ``m_v``) the local objective is the masked mean

    L_v(θ) = Σ_j m_vj ℓ(f_θ(x_vj), y_vj) / max(1, Σ_j m_vj),

and :meth:`NodeObjective.node_grads` returns ``∇L_v(θ_v)`` for every ``v`` at once.

How: the rows of ``θ: [N, P]`` are viewed as named parameter leaves ``[N, *shape]``, the losses
of all nodes are evaluated with ``vmap`` over ``functional_call`` and one reverse pass of
``Σ_v L_v`` gives every ``∇L_v`` (node ``v``'s loss depends on row ``v`` only, so the gradient of
the sum with respect to row ``v`` is ``∇L_v(θ_v)``). Differentiating with respect to named
leaves, not the flat vector, avoids one zero-filled ``[N, P]`` buffer per parameter tensor in
the backward pass of the slicing; it is the same arithmetic as ``vmap(grad(L))`` with less
transform overhead (``tests/simulation/test_equivalences.py`` checks it against per-node modules).

Two interchangeable forward paths evaluate all nodes' losses:

* ``"vmap"`` — ``torch.func.vmap`` over ``functional_call``: works for any buffer-free module.
* ``"stacked"`` — for an ``nn.Sequential`` of ``Flatten``/``Linear``/elementwise activations,
  the batched matrix products that ``vmap`` would produce (``baddbmm`` over the node dimension),
  written directly. torch.func's per-operator dispatch costs several times the arithmetic of
  small models (see performance/README.md), so ``"auto"`` uses this path whenever the
  architecture allows it. Both paths are tested to agree
  in float64.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from bench.core.errors import BenchInputError
from bench.core.registry import Registry
from bench.simulation.flat import FlatModel
from bench.simulation.per_sample import stacked_node_grads, stacked_sample_grads, stacked_weighted_sum

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


#: ``dℓ/dout`` of the registered losses in closed form (``(out [n, C], y [n]) -> [n, C]``), used by
#: the hand-written backward pass of stackable models (:mod:`bench.simulation.per_sample`)
LOSS_GRADIENTS: dict[LossFn, LossFn] = {
    cross_entropy: lambda out, y: torch.softmax(out, -1) - F.one_hot(y, out.shape[-1]).to(out.dtype),
    binary_cross_entropy: lambda out, y: torch.sigmoid(out) - y.to(out.dtype)[:, None],
    squared: lambda out, y: 2.0 * (out - y.to(out.dtype)[:, None]),
}


def default_loss(n_classes: int, n_outputs: int) -> str:
    """The loss matching a task: squared error for regression, BCE for one logit, else CE."""
    if n_classes == 0:
        return "squared"
    return "binary_cross_entropy" if n_outputs == 1 else "cross_entropy"


def predict_labels(out: torch.Tensor) -> torch.Tensor:
    """Class predictions from logits (one logit: ``z > 0``)."""
    return (out.squeeze(-1) > 0).long() if out.shape[-1] == 1 else out.argmax(-1)


_ELEMENTWISE = (nn.ReLU, nn.Sigmoid, nn.Tanh, nn.Identity, nn.LeakyReLU, nn.ELU, nn.GELU, nn.Softplus)
VECTORIZE = ("auto", "vmap", "stacked")


def stackable(module: nn.Module) -> bool:
    """Whether ``module`` is a Sequential of Flatten(1, -1), Linear and elementwise activations."""
    if not isinstance(module, nn.Sequential):
        return False
    for layer in module:
        if isinstance(layer, nn.Flatten):
            if layer.start_dim != 1 or layer.end_dim != -1:
                return False
        elif not isinstance(layer, (nn.Linear, *_ELEMENTWISE)):
            return False
    return True


def stacked_forward(module: nn.Sequential, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Outputs ``[N, B, out]`` of ``N`` stacked models on their own inputs ``x [N, B, ...]``.

    ``Linear`` with stacked ``W [N, out, in]``, ``b [N, out]``: ``h ← b + h Wᵀ`` per node
    (``torch.baddbmm``); ``Flatten`` flattens the per-sample dims; activations act elementwise.
    """
    h = x
    for name, layer in module.named_children():
        if isinstance(layer, nn.Flatten):
            h = h.flatten(2)
        elif isinstance(layer, nn.Linear):
            weight = params[f"{name}.weight"].transpose(1, 2)
            bias = params.get(f"{name}.bias")
            h = torch.bmm(h, weight) if bias is None else torch.baddbmm(bias.unsqueeze(1), h, weight)
        else:
            h = layer(h)
    return h


class NodeObjective:
    """Masked minibatch loss of an architecture, with vectorized per-node gradients.

    Parameters
    ----------
    model:
        The architecture on flat parameters.
    loss:
        A registered loss name or a per-sample loss function ``(out, y) -> [B]``.
    vectorize:
        ``"auto"`` (stacked matrix products when the architecture allows, else vmap),
        ``"vmap"`` or ``"stacked"``.
    """

    def __init__(self, model: FlatModel, loss: str | LossFn, vectorize: str = "auto") -> None:
        self.model = model
        #: the registered loss name (``None`` when a function was given)
        self.loss_name = loss if isinstance(loss, str) else None
        self.loss_fn: LossFn = LOSSES.get(loss, field="loss") if isinstance(loss, str) else loss
        if vectorize not in VECTORIZE:
            raise BenchInputError("vectorize", vectorize, choices=VECTORIZE)
        can_stack = stackable(model.module)
        if vectorize == "stacked" and not can_stack:
            raise BenchInputError(
                "vectorize",
                vectorize,
                reason=f"{type(model.module).__name__} is not a Sequential of Linear layers",
            )
        self.vectorize = (
            "stacked" if vectorize == "stacked" or (vectorize == "auto" and can_stack) else "vmap"
        )
        self._losses = self._stacked_losses if self.vectorize == "stacked" else vmap(self._named_loss)
        #: the loss's closed-form derivative (``None`` for a loss given as a function)
        self.loss_grad = LOSS_GRADIENTS.get(self.loss_fn)

    def _stacked_losses(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        out = stacked_forward(self.model.module, params, x)  # [N, B, out]
        n, b = out.shape[:2]
        losses = self.loss_fn(out.reshape(n * b, -1), y.reshape(n * b)).reshape(n, b)
        w = mask.to(losses.dtype)
        return (losses * w).sum(1) / w.sum(1).clamp_min(1.0)

    def _named_loss(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        losses = self.loss_fn(functional_call(self.model.module, params, (x,)), y)
        w = mask.to(losses.dtype)
        return (losses * w).sum() / w.sum().clamp_min(1.0)

    def node_grads(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-node gradients ``[N, P]`` and losses ``[N]`` (nodes stacked on dim 0). Stackable
        models write each layer's products into their slots
        (:func:`~bench.simulation.per_sample.stacked_node_grads`)."""
        if self.vectorize == "stacked":
            return stacked_node_grads(self.model, self.loss_fn, theta, x, y, mask, self.loss_grad)
        with torch.enable_grad():
            leaves = {k: v.detach().requires_grad_(True) for k, v in self.model.unflatten(theta).items()}
            losses = self._losses(leaves, x, y, mask)
            grads = torch.autograd.grad(losses.sum(), list(leaves.values()))
        n = theta.shape[0]
        return torch.cat([g.reshape(n, -1) for g in grads], dim=1), losses.detach()

    def descend(
        self,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        lr: float,
        in_place: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One SGD step of every node, ``θ_v − η ∇L_v(θ_v)`` ``[N, P]``, and the losses ``[N]``;
        with ``in_place``, written over ``theta`` (and returned). Stackable models fold the step
        into the gradient's products (:func:`~bench.simulation.per_sample.stacked_node_grads`
        with ``step``: ``g`` is never written); others compute :meth:`node_grads`, then the
        axpy."""
        if self.vectorize == "stacked":
            return stacked_node_grads(
                self.model, self.loss_fn, theta, x, y, mask, self.loss_grad, step=lr, in_place=in_place
            )
        grads, losses = self.node_grads(theta, x, y, mask)
        if in_place:
            return theta.add_(grads, alpha=-lr), losses
        return torch.add(theta, grads, alpha=-lr), losses

    @torch.no_grad()
    def node_losses(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Per-node mean minibatch losses ``[N]`` (no gradient)."""
        return self._losses(self.model.unflatten(theta), x, y, mask)

    def sample_grads(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample gradients ``[N, B, P]`` of ``ℓ(f_θv(x_vj), y_vj)`` (zero for masked slots)
        and the per-node mean losses ``[N]``: ``vmap`` over nodes of ``vmap`` over samples of
        ``grad`` (the per-sample gradients DP-SGD clips; Abadi et al. 2016). Their masked mean is
        :meth:`node_grads`. Stackable models take the outer-product path of
        :mod:`bench.simulation.per_sample` instead (same numbers). As in :meth:`node_grads`,
        the gradients are taken with respect to the named leaves and concatenated once, not
        with respect to the flat row (whose slicing backward would fill and add one zero
        ``[N, B, P]`` buffer per parameter tensor)."""
        if self.vectorize == "stacked":
            return stacked_sample_grads(self.model, self.loss_fn, theta, x, y, mask, self.loss_grad)
        module = self.model.module

        def sample_loss(params: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            return self.loss_fn(functional_call(module, params, (xi.unsqueeze(0),)), yi.unsqueeze(0)).sum()

        per_node = vmap(vmap(grad(sample_loss), in_dims=(None, 0, 0)))
        with torch.enable_grad():
            named = per_node(self.model.unflatten(theta.detach()), x, y)
        n, b = x.shape[:2]
        grads = torch.cat([named[s.name].reshape(n, b, s.numel) for s in self.model.slots], dim=2)
        grads.mul_(mask.unsqueeze(-1).to(grads.dtype))
        return grads, self.node_losses(theta, x, y, mask)

    def weighted_sample_sum(
        self,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        weigh: Callable[[torch.Tensor], torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``Σ_j w_j g_j`` ``[N, P]`` of the per-sample gradients of :meth:`sample_grads` with
        weights ``w = weigh(‖g_j‖₂ [N, B])``, and the per-node mean losses ``[N]``. Stackable
        models never form ``g`` (:func:`~bench.simulation.per_sample.stacked_weighted_sum`)."""
        if self.vectorize == "stacked":
            return stacked_weighted_sum(self.model, self.loss_fn, theta, x, y, mask, weigh, self.loss_grad)
        grads, losses = self.sample_grads(theta, x, y, mask)
        w = weigh(torch.linalg.vector_norm(grads, dim=-1)).to(grads.dtype)
        return torch.bmm(w.unsqueeze(1), grads).squeeze(1), losses
