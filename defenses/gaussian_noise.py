"""Gaussian noise on outgoing messages."""

from __future__ import annotations

from typing import Any

import torch

from bench.defense.base import (
    DEFENSES,
    Defense,
    MessageBatch,
    Protocol,
    RoundContext,
    check_kinds,
    kinds_reason,
    require_number,
)


@DEFENSES.register(
    "gaussian_noise", "i.i.d. Gaussian noise N(0, sigma^2) added to every message a node sends"
)
class GaussianNoise(Defense):
    """Additive Gaussian noise on the messages nodes send: each transmitted payload row ``m`` is
    replaced by ``m + σ ξ``, ``ξ ~ N(0, I)`` drawn fresh per message row and round.

    In D-PSGD a node broadcasts one noisy model to all its neighbours (Muffliato's
    noise-then-gossip, Cyffers et al. 2022); in FedSGD/FedAvg a client's upload is noised (the
    server's broadcast is not: the ``outgoing`` hook sees nodes' messages only); in PDMM every
    ``z0`` and ``Δz`` message. Receivers aggregate the noisy messages; a node keeps its own
    exact state.

    There is no clipping here, so the sensitivity is unbounded and no differential-privacy
    guarantee follows (:meth:`accounting` says so).

    Parameters
    ----------
    sigma:
        Noise standard deviation per coordinate (> 0).
    kinds:
        Message kinds to perturb (default: every kind the protocol's nodes send).
    """

    source = "cyffers2022"
    summary = (
        "Every message a node sends gets fresh Gaussian noise, without clipping. It is aimed at "
        "passive observers of messages (the server, neighbours and eavesdroppers) but gives no "
        "differential privacy guarantee, since the sensitivity is unbounded."
    )
    examples = ({"sigma": 0.1}, {"sigma": 1.0})

    def __init__(self, sigma: float = 0.1, kinds: list[str] | None = None) -> None:
        self.sigma = require_number(sigma, "defense.sigma")
        self.kinds = check_kinds(kinds, "defense.kinds")
        self._gen: torch.Generator | None = None

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        return super().applies_to(name, protocol) or kinds_reason(self.kinds, protocol)

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if self.kinds is not None and msgs.kind not in self.kinds:
            return msgs
        p = msgs.payload
        if self._gen is None or self._gen.device != p.device:
            self._gen = self.generator("gaussian_noise", p.device)
        noise = torch.randn(p.shape, generator=self._gen, device=p.device, dtype=p.dtype)
        return msgs.with_payload(torch.add(p, noise, alpha=self.sigma))

    def accounting(self) -> dict[str, Any]:
        return {"epsilon": None, "note": "no clipping: unbounded sensitivity, no DP guarantee"}
