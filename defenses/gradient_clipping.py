"""Gradient clipping alone: each node's (or each sample's) gradient scaled to norm at most C."""

from __future__ import annotations

from typing import Any, Literal

import torch

from bench.defense.base import (
    DEFENSES,
    MessageContext,
    NodeContext,
    RowwiseDefense,
    clip_rows,
    clip_scale,
    require,
    require_number,
)


@DEFENSES.register(
    "gradient_clipping", "scale each node's (or each sample's) gradient to L2 norm at most C; no noise"
)
class GradientClipping(RowwiseDefense):
    """Clipping without noise: a vector ``g`` becomes

        CLIP(g, C) = g · min(1, C / ‖g‖₂),

    the clipping step of DP-SGD (Abadi et al. 2016, Alg. 1, "clip gradient":
    ``g / max(1, ‖g‖₂/C)``, the same map) applied to each node's gradient (per-node clipping, as
    DP-FedAvg clips each client's contribution, McMahan et al. 2018, Alg. 1) or, with
    ``per_sample=True``, to each sample's gradient before the node averages them,
    ``ḡ = (1/|B|) Σ_{j∈B} CLIP(∇ℓ(x_j), C)`` over the real samples of the minibatch (DP-SGD's
    per-example clipping; the mean is over the samples actually drawn, not DP-SGD's expected batch
    size). Rows of norm ≤ C are left bit-identical.

    **No privacy guarantee by itself.** Clipping bounds the sensitivity, which is what makes
    *added noise* calibrate to a differential-privacy guarantee; without noise the output is a
    deterministic function of the data and nothing is guaranteed (:meth:`accounting` says so).
    Against inversion it only rescales: an attack that is invariant to the gradient's scale
    (the analytic logistic-regression inversion ``x = ∇_w f / ∂_b f``, cosine matching) loses
    nothing from per-node clipping; per-sample clipping changes the relative weights of the
    samples of a batch (with batch size 1 it equals per-node clipping).

    Where it acts (``on``; per-sample clipping needs ``gradients``):

    * ``gradients`` (default): every per-node gradient before it is used (FedSGD's upload; each
      local step of FedAvg / D-PSGD; each solver step of PDMM, before PDMM's sum reduction
      multiplies it by ``n_i``);
    * ``update``: the local update ``new − old`` of FedAvg, D-PSGD and PDMM (DP-FedAvg's clipped
      update);
    * ``messages``: each transmitted row (for D-PSGD the broadcast model's norm, for PDMM each
      ``z0`` / ``Δz`` / ``z`` message).

    Parameters
    ----------
    max_norm:
        The clipping norm C (> 0).
    per_sample:
        Clip each sample's gradient (through the ``per_sample_gradients`` hook) instead of each
        node's.
    on:
        ``gradients``, ``update`` or ``messages``.
    kinds:
        With ``on=messages``: the message kinds clipped (default: all the nodes send).
    """

    source = "abadi2016"
    summary = (
        "Each node's gradient, or each sample's gradient, is scaled down to a norm bound, without "
        "added noise. It is the clipping step of DP-SGD on its own and gives no privacy guarantee "
        "against the server, neighbours or eavesdroppers."
    )
    examples = (
        {"max_norm": 0.05},
        {"max_norm": 0.05, "per_sample": True},
        {"max_norm": 0.5, "on": "messages"},
    )

    def __init__(
        self,
        max_norm: float = 1.0,
        per_sample: bool = False,
        on: Literal["gradients", "update", "messages"] = "gradients",
        kinds: list[str] | None = None,
    ) -> None:
        self.max_norm = require_number(max_norm, "defense.max_norm")
        require(isinstance(per_sample, bool), "defense.per_sample", per_sample, "must be true or false")
        self.set_target(on, kinds)
        require(
            not per_sample or self.on == "gradients",
            "defense.per_sample",
            per_sample,
            "per-sample clipping acts on gradients: give per_sample only with on=gradients",
        )
        self.per_sample = per_sample  # the protocols then compute per-sample gradients

    def per_sample_gradients(
        self, grads: torch.Tensor, mask: torch.Tensor, node: NodeContext
    ) -> torch.Tensor:
        # the masked mean of clipped rows, each row's scale folded into the mean's weights (no
        # clipped copy of the [B, P] per-sample gradients is made)
        w = mask.to(grads.dtype)
        return ((w * clip_scale(grads, self.max_norm)[..., 0]) @ grads) / w.sum().clamp_min(1.0)

    def hooks_used(self) -> frozenset[str]:
        used = super().hooks_used()
        return (
            (used - {"local_gradients"}) | {"per_sample_gradients"}
            if self.per_sample
            else used - {"per_sample_gradients"}
        )

    def transform(self, x: torch.Tensor, node: NodeContext | MessageContext) -> torch.Tensor:
        return clip_rows(x, self.max_norm)

    def accounting(self) -> dict[str, Any]:
        return {"epsilon": None, "note": "clipping without noise: bounded sensitivity, but no DP guarantee"}

    def adaptive_knowledge(self) -> dict[str, Any]:
        return {
            "max_norm": self.max_norm,
            "per_sample": self.per_sample,
            "rule": "x * min(1, max_norm / ||x||_2) per "
            + ("sample gradient, then the mean over the batch" if self.per_sample else "row"),
            **self.target_knowledge(),
        }
