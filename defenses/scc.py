"""Self-centered clipping (ClippedGossip): gossip that clips each neighbour's model around one's own."""

from __future__ import annotations

from typing import Any, Literal

import torch

from bench.defense.base import (
    ALL_THREATS,
    DEFENSES,
    Defense,
    MessageContext,
    NodeContext,
    Protocol,
    norm_scale,
    require,
    require_number,
    require_positive_int,
)


@DEFENSES.register(
    "scc", "self-centered clipping: gossip clips each neighbour's model to radius tau around one's own"
)
class SelfCenteredClipping(Defense):
    """Self-centered clipping (He, Karimireddy & Jaggi 2022, ClippedGossip), in the form of
    Pasquini et al. 2023, App. A.1, Eq. 12: node ``v`` mixes the delivered models ``m_u`` as

        x_v⁺ = Σ_{u ∈ N(v) ∪ {v}} W_vu · ( x_v + CLIP(m_u − x_v, τ_v) ),
        CLIP(z, τ) = z · min(1, τ / ‖z‖₂),

    which for a row-stochastic ``W`` (every mixing rule here) is
    ``x_v⁺ = x_v + Σ_{u ∈ N(v)} W_vu CLIP(m_u − x_v, τ_v)``; ``τ = ∞`` is plain gossip
    ``x⁺ = W x``. Implemented as the receive side's per-message decoding (:meth:`decode`): each
    delivery ``u → v`` becomes ``x_v + CLIP(m_u − x_v, τ_v)`` (``x_v``: the receiver's own row,
    ``msg.own``) and the protocol's own mixing rule combines them, so the weights ``W`` stay the
    protocol's; the adaptive radius is the receiver's statistic of all its deliveries
    (:meth:`receive_statistic`).

    A robust-aggregation defense against *active* neighbours (a Byzantine message moves node ``v`` by
    at most ``W_vu τ`` per gossip step). It changes no transmitted message: what a passive neighbour or an
    eavesdropper sees in round 0 is unchanged, and later messages carry more of each node's own
    training (Pasquini et al. App. A.1 find SCC amplifies their attacks; ``τ → 0`` is local
    training).

    ``tau="adaptive"`` chooses ``τ_v`` per node and gossip step from the distances
    ``‖m_u − x_v‖`` to its neighbours: the ``(b+1)``-th largest, so that the ``b`` farthest
    neighbours (``clipped``, default 1; at most ``deg(v) − 1``) are clipped to the distance of the
    next one. He et al.'s convergence analysis chooses ``τ_v`` from quantities a node cannot observe
    (which of its neighbours are honest, and their expected distances); their public implementation
    (epfml/byzantine-robust-decentralized-optimizer, ``SelfCenteredClipping`` without a fixed
    ``tau``) uses the second-largest neighbour distance, which is ``clipped=1``.

    Applies to the gossip protocols only (D-PSGD, gossip averaging), see :meth:`applies_to`.

    Parameters
    ----------
    tau:
        The clipping radius τ (> 0), or ``"adaptive"``.
    clipped:
        With ``tau="adaptive"``: how many of each node's farthest neighbours are clipped.
    """

    source = "he2022"
    summary = (
        "Self-centered clipping: each node clips the difference between a neighbour's model and its"
        " own to a radius before gossip averaging. It is a robust aggregation defense against "
        "active neighbours that deviate from the protocol, and it changes no transmitted message."
    )
    protocols = ("dpsgd", "gossip_averaging")
    threats = ALL_THREATS  # robust aggregation is aimed at deviating neighbours
    examples = ({"tau": 0.1}, {"tau": "adaptive"})

    def __init__(self, tau: float | Literal["adaptive"] = 1.0, clipped: int | None = None) -> None:
        if isinstance(tau, str):
            require(tau == "adaptive", "defense.tau", tau, "must be a positive number or 'adaptive'")
            self.tau: float | str = tau
        else:
            self.tau = require_number(tau, "defense.tau")
        require(
            clipped is None or tau == "adaptive",
            "defense.clipped",
            clipped,
            "the number of clipped neighbours sets the adaptive radius: give it only with tau=adaptive",
        )
        self.clipped = (
            None
            if tau != "adaptive"
            else require_positive_int(1 if clipped is None else clipped, "defense.clipped")
        )

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        if name in self.protocols:
            return super().applies_to(name, protocol)
        if protocol.federated:
            return (
                "a server aggregates under this protocol: self-centered clipping clips neighbours' "
                "models around the receiver's own, a gossip rule (D-PSGD, gossip averaging)"
            )
        return (
            f"{name}'s receivers integrate dual variables (z <- z + Δz) rather than average their "
            "neighbours' models: self-centered clipping is a gossip rule (D-PSGD, gossip averaging)"
        )

    def receive_statistic(
        self, own: torch.Tensor, payloads: torch.Tensor, mask: torch.Tensor, node: NodeContext
    ) -> torch.Tensor:
        """``τ_v`` ``[1]``: the fixed τ, or the ``(b+1)``-th largest distance ``‖m_u − x_v‖`` of
        the receiver's deliveries (``b = min(clipped, deg − 1)``)."""
        if self.tau != "adaptive":
            return torch.full((1,), float(self.tau), dtype=own.dtype, device=own.device)
        assert self.clipped is not None
        dist = torch.linalg.vector_norm(payloads - own, dim=-1)
        dist = torch.where(mask, dist, torch.full_like(dist, -torch.inf))
        rank = (mask.sum() - 1).clamp(min=0, max=self.clipped)
        return dist.sort(descending=True).values.gather(0, rank.reshape(1))

    def decode(self, payload: torch.Tensor, msg: MessageContext) -> torch.Tensor:
        assert msg.own is not None and msg.statistic is not None
        diff = payload - msg.own
        scale = norm_scale(torch.linalg.vector_norm(diff, dim=-1, keepdim=True), msg.statistic)
        # x_v + s (m − x_v) written as m + (s − 1)(m − x_v): m exactly where s = 1
        return payload + (scale - 1) * diff

    def adaptive_knowledge(self) -> dict[str, Any]:
        return {
            "tau": self.tau,
            "clipped": self.clipped,
            "rule": "x_v <- sum_u W_vu (x_v + CLIP(m_u - x_v, tau_v)), CLIP(z, t) = z min(1, t/||z||)",
            "tau_rule": "fixed"
            if self.tau != "adaptive"
            else "tau_v = the (clipped+1)-th largest ||m_u - x_v|| over v's neighbours",
            "messages_changed": False,
        }
