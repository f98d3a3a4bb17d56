"""Gaussian noise on outgoing messages."""

from __future__ import annotations

from typing import Any

import torch

from bench.defenses_api import DEFENSES, Defense
from bench.errors import require
from bench.simulation.hooks import RoundContext
from bench.simulation.messages import SERVER, MessageBatch


@DEFENSES.register(
    "gaussian_noise", "i.i.d. Gaussian noise N(0, sigma^2) added to every message a node sends"
)
class GaussianNoise(Defense):
    """Additive Gaussian noise on the messages honest nodes send.

    Each transmitted payload row ``m`` is replaced by ``m + σ ξ`` with ``ξ ~ N(0, I)`` drawn fresh
    per message and round (in D-PSGD a node broadcasts one noisy model to all its neighbours, as
    in Muffliato's noise-then-gossip; in FedSGD/FedAvg a client's upload is noised; the server's
    broadcast is not). Receivers aggregate the noisy messages; a node keeps its own exact state.

    There is no clipping here, so the sensitivity is unbounded and no differential-privacy
    guarantee follows (:meth:`accounting` says so); DP-SGD with Opacus accounting is a separate
    defense.

    Parameters
    ----------
    sigma:
        Noise standard deviation per coordinate.
    kinds:
        Message kinds to perturb (default: every kind).
    """

    def __init__(self, sigma: float = 0.1, kinds: list[str] | None = None) -> None:
        require(isinstance(sigma, (int, float)) and sigma >= 0, "defense.sigma", sigma, "must be >= 0")
        self.sigma = float(sigma)
        self.kinds = list(kinds) if kinds is not None else None
        self._gen: torch.Generator | None = None

    def _generator(self, device: torch.device) -> torch.Generator:
        if self._gen is None or self._gen.device != device:
            from bench.simulation.engine import derive_seed

            self._gen = torch.Generator(device=device).manual_seed(
                derive_seed(self.sim.seed, "gaussian_noise")
            )
        return self._gen

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if self.sigma == 0 or (self.kinds is not None and msgs.kind not in self.kinds):
            return msgs
        honest = (msgs.senders != SERVER).to(msgs.payload.dtype)[:, None]
        noise = torch.randn(
            msgs.payload.shape,
            generator=self._generator(msgs.payload.device),
            device=msgs.payload.device,
            dtype=msgs.payload.dtype,
        )
        return msgs.with_payload(torch.addcmul(msgs.payload, honest, noise, value=self.sigma))

    def accounting(self) -> dict[str, Any]:
        return {"epsilon": None, "note": "no clipping: unbounded sensitivity, no DP guarantee"}
