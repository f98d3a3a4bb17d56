"""Top-k sparsification (gradient pruning): keep each node's k largest-magnitude coordinates."""

from __future__ import annotations

from typing import Any, Literal

import torch

from bench.defense.base import (
    DEFENSES,
    MessageContext,
    NodeContext,
    RowwiseDefense,
    RunInfo,
    require,
    require_positive_int,
    top_k_count,
    top_k_rows,
)


@DEFENSES.register(
    "top_k",
    "gradient sparsification: keep the k (or a fraction) largest-magnitude coordinates, zero the rest",
)
class TopK(RowwiseDefense):
    """Top-k sparsification: each row ``g ∈ R^P`` (a node's gradient, update or message) keeps its
    ``k`` coordinates of largest magnitude and the others are set to zero,

        TOPK(g)_j = g_j  if |g_j| is among the k largest of |g_1|, …, |g_P|,  else 0,

    with ``k`` given, or ``k = ⌈p · P⌉`` for a kept fraction ``p`` (exactly ``k`` coordinates per
    row; ties broken by ``torch.topk``). This is the "gradient compression and sparsification"
    defense of Zhu, Liu & Han 2019 (Deep Leakage from Gradients, §5: gradients of small magnitude
    pruned to zero; their pruning ratio is ``1 − p``), with the selection rule of Lin et al. 2018
    (Deep Gradient Compression, §3.1 and Alg. 1: only coordinates above the magnitude threshold of
    the top ``p`` are sent; the threshold is taken exactly here, not from DGC's sample).

    With ``accumulate=True`` the pruned coordinates are not lost but carried over (DGC's local
    gradient accumulation, §3.1 and Alg. 1): node ``v`` keeps a residual ``r_v`` (0 at the start;
    its state, held by the harness), uses ``s = TOPK(g + r_v)`` and sets ``r_v ← g + r_v − s``.
    The first round is identical with or without accumulation (the residual is zero).

    Where it acts (``on``):

    * ``gradients`` (default): FedSGD's uploaded gradient (DLG's setting); under FedAvg, D-PSGD
      and PDMM every local / solver step uses the sparse gradient, so one D-PSGD step moves a model
      in at most ``k`` coordinates and a neighbour's recovered gradient ``(Θ⁰ − Θ_v^{½})/η`` is the
      sparse one; PDMM's messages (``z``, ``Δz``) stay dense, only the solver's steps are sparse.
    * ``update``: the local update ``new − old`` (FedAvg's, D-PSGD's half-step, PDMM's ``w``
      step), DGC's sparsified update.
    * ``messages``: each transmitted row. For FedSGD this equals ``gradients``; for D-PSGD it
      prunes the broadcast *model* itself to its ``k`` largest weights (model pruning: receivers
      mix pruned models, the sender keeps its exact one); for PDMM every ``z0`` / ``Δz`` / ``z``
      message is sparsified per directed edge (receivers integrate sparse increments, like the
      quantized PDMM of the thesis §6); for gossip averaging the broadcast values.

    Parameters
    ----------
    k:
        Coordinates kept per row (``k ≥ P`` keeps all). Give ``k`` or ``fraction``.
    fraction:
        Fraction ``p ∈ (0, 1]`` of each row's coordinates kept, ``k = ⌈p · P⌉``.
    on:
        ``gradients``, ``update`` or ``messages`` (above).
    kinds:
        With ``on=messages``: the message kinds sparsified (default: all the nodes send).
    accumulate:
        DGC's residual accumulation (``on`` = ``gradients`` or ``update`` only).
    """

    source = "zhu2019"
    summary = (
        "Each node keeps only the k largest-magnitude coordinates of its gradient, update or "
        "messages and sets the rest to zero, optionally carrying the pruned part over. It is the "
        "gradient pruning defense of Deep Leakage from Gradients, aimed at passive observers such "
        "as the server, and gives no formal guarantee."
    )
    examples = ({"fraction": 0.5}, {"k": 1, "on": "messages"}, {"k": 1, "on": "update", "accumulate": True})

    def __init__(
        self,
        k: int | None = None,
        fraction: float | None = None,
        on: Literal["gradients", "update", "messages"] = "gradients",
        kinds: list[str] | None = None,
        accumulate: bool = False,
    ) -> None:
        require((k is None) != (fraction is None), "defense.k", k, "give exactly one of k and fraction")
        self.k = None if k is None else require_positive_int(k, "defense.k")
        if fraction is not None:
            ok = isinstance(fraction, (int, float)) and not isinstance(fraction, bool) and 0 < fraction <= 1
            require(ok, "defense.fraction", fraction, "must be a number in (0, 1]")
        self.fraction = None if fraction is None else float(fraction)
        self.set_target(on, kinds)
        require(isinstance(accumulate, bool), "defense.accumulate", accumulate, "must be true or false")
        require(
            not accumulate or self.on != "messages",
            "defense.accumulate",
            accumulate,
            "the residual is a node's own: accumulate only with on=gradients or on=update",
        )
        self.accumulate = accumulate

    def bind(self, run: RunInfo) -> None:
        super().bind(run)
        self.width = run.n_params

    def init_state(self, node: NodeContext) -> dict[str, torch.Tensor]:
        if not self.accumulate:
            return {}
        return {"residual": torch.zeros(self.width, dtype=self.run.dtype, device=self.run.device)}

    def transform(
        self, x: torch.Tensor, node: NodeContext | MessageContext
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        k = top_k_count(x.shape[-1], self.k, self.fraction)
        if not self.accumulate:
            return top_k_rows(x, k)
        v = x + node.state["residual"]
        sent = top_k_rows(v, k)
        return sent, {"residual": v - sent}

    def adaptive_knowledge(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "fraction": self.fraction,
            "rule": "per row: keep the k largest |x_j| (k = ceil(fraction * P)), zero the others",
            "sparsified": True,
            "accumulate": self.accumulate,
            **self.target_knowledge(),
        }
