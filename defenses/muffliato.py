"""Muffliato: private gossip averaging (Cyffers, Even, Bellet & Massoulié, NeurIPS 2022)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from bench.defense.base import DEFENSES, Aggregator, Defense, MessageBatch, RoundContext, require_number
from bench.defense.privacy.muffliato import pairwise_network_dp, pndp_report


@DEFENSES.register(
    "muffliato", "private gossip averaging: local Gaussian noise once, then gossip (Cyffers et al.)"
)
class Muffliato(Defense):
    """Private gossip averaging (Muffliato, Cyffers et al. 2022, Algorithm "private gossip"):
    every node adds Gaussian noise **once** to its private value, ``x̃_v = x_v + η_v``,
    ``η_v ~ N(0, σ² I)``, and the ``K`` gossip steps then average the noisy values,
    ``X^K = W^K (X + η)``. Implemented on the first gossip step of round 0: the noise is drawn
    there, added to the value each node broadcasts and to the value it keeps (the aggregation
    of its own state), so every later message is ``(W^k)_{w,:}(X + η)`` exactly.

    Accounting (:mod:`bench.defense.privacy.muffliato`): the exact pairwise Network-DP losses ``f(u, v)``
    of all pairs from ``W`` and ``K`` = rounds × gossip steps, reported as the largest and mean
    ``ε̄_v`` (the paper's summary statistic, not a guarantee: ``"epsilon"`` stays empty), the
    largest loss towards a direct neighbour (the local-DP level) and the mean ``f`` at each
    graph distance ``f@d``.

    Parameters
    ----------
    sigma:
        Noise standard deviation per coordinate (absolute, > 0).
    sensitivity:
        ``Δ``: how much one user's private value can change (replace-one adjacency; values are
        not clipped here, so the accounting holds for data whose values differ by at most ``Δ``).
    alpha:
        Rényi order of the reported losses (> 1).
    """

    source = "cyffers2022"
    summary = (
        "Each node adds Gaussian noise once to its private value before gossip averaging, and the "
        "gossip then spreads and dilutes that noise. It gives pairwise network differential privacy"
        " against the other nodes, stronger the farther apart they are in the graph."
    )
    protocols: ClassVar[tuple[str, ...]] = ("gossip_averaging",)
    examples = ({"sigma": 0.1},)

    def __init__(self, sigma: float = 0.1, sensitivity: float = 1.0, alpha: float = 2.0) -> None:
        self.sigma = require_number(sigma, "defense.sigma")
        self.sensitivity = require_number(sensitivity, "defense.sensitivity")
        self.alpha = require_number(alpha, "defense.alpha")
        self._eta: torch.Tensor | None = None

    @staticmethod
    def _first(ctx: RoundContext) -> bool:
        return ctx.round == 0 and ctx.step == 0

    def _noise(self, like: torch.Tensor) -> torch.Tensor:
        """``η [N, P]``, drawn once per run."""
        if self._eta is None:
            gen = self.generator("muffliato", like.device)
            self._eta = self.sigma * torch.randn(
                (self.run.n_nodes, like.shape[1]), generator=gen, device=like.device, dtype=like.dtype
            )
        return self._eta

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if not self._first(ctx):
            return msgs
        eta = self._noise(msgs.payload)
        return msgs.with_payload(msgs.payload + eta[msgs.senders])

    def wrap_aggregation(self, aggregate: Aggregator, ctx: RoundContext) -> Aggregator:
        if not self._first(ctx):
            return aggregate

        def noisy_own(own: torch.Tensor, delivered: MessageBatch) -> torch.Tensor:
            rows = ctx.nodes if ctx.nodes is not None else slice(None)
            return aggregate(own + self._noise(own)[rows], delivered)

        return noisy_own

    def accounting(self) -> dict[str, Any]:
        if self.run.mixing is None:
            return {"epsilon": None, "note": "no mixing matrix: no pairwise network DP accounting"}
        w = self.run.mixing.detach().cpu().double().numpy()
        steps = self.run.rounds * int(self.run.hyperparameters.get("gossip_steps", 1))
        f = pairwise_network_dp(w, steps, self.sigma, self.sensitivity, self.alpha)
        return pndp_report(f, w, self.alpha, gossip_steps_total=steps)
