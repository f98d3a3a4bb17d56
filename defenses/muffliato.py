"""Muffliato: private gossip averaging (Cyffers, Even, Bellet & Massoulié, NeurIPS 2022)."""

from __future__ import annotations

from typing import ClassVar

from bench.defense.base import DEFENSES, Defense, PrivateGossip


@DEFENSES.register(
    "muffliato", "private gossip averaging: local Gaussian noise once, then gossip (Cyffers et al.)"
)
class Muffliato(Defense):
    """Private gossip averaging (Muffliato, Cyffers et al. 2022, Algorithm "private gossip"):
    every node adds Gaussian noise **once** to its private value, ``x̃_v = x_v + η_v``,
    ``η_v ~ N(0, σ² I)``, and the ``K`` gossip steps then average the noisy values,
    ``X^K = W^K (X + η)``. Implemented on the first gossip step of round 0: the noise is drawn
    there, added to the value each node broadcasts and to the value it keeps (the aggregation
    of its own state), so every later message is ``(W^k)_{w,:}(X + η)`` exactly. The noise and the
    accounting are the harness's (:class:`~bench.defense.mechanisms.gossip.PrivateGossip`).

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
        self.gossip = PrivateGossip(sigma=sigma, sensitivity=sensitivity, alpha=alpha)
        self.sigma, self.sensitivity, self.alpha = (
            self.gossip.sigma,
            self.gossip.sensitivity,
            self.gossip.alpha,
        )

    def mechanisms(self) -> tuple[PrivateGossip]:
        return (self.gossip,)
