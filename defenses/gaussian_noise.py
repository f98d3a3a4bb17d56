"""Gaussian noise on outgoing messages."""

from __future__ import annotations

from bench.defense.base import DEFENSES, Defense, MessageNoise


@DEFENSES.register(
    "gaussian_noise", "i.i.d. Gaussian noise N(0, sigma^2) added to every message a node sends"
)
class GaussianNoise(Defense):
    """Additive Gaussian noise on the messages nodes send: each transmitted payload row ``m`` is
    replaced by ``m + σ ξ``, ``ξ ~ N(0, I)`` drawn fresh per message row and round — the
    harness's :class:`~bench.defense.mechanisms.message.MessageNoise`, configured here.

    In D-PSGD a node broadcasts one noisy model to all its neighbours (Muffliato's
    noise-then-gossip, Cyffers et al. 2022); in FedSGD/FedAvg a client's upload is noised (the
    server's broadcast is not: the ``outgoing`` hook sees nodes' messages only); in PDMM every
    ``z0`` and ``Δz`` message. Receivers aggregate the noisy messages; a node keeps its own
    exact state.

    There is no clipping here, so the sensitivity is unbounded and no differential-privacy
    guarantee follows (the mechanism's accounting says so).

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
        self.noise = MessageNoise(sigma=sigma, kinds=kinds)
        self.sigma = self.noise.sigma
        self.kinds = None if self.noise.kinds is None else list(self.noise.kinds)

    def mechanisms(self) -> tuple[MessageNoise]:
        return (self.noise,)
