"""Secure aggregation: receivers learn only the weighted sum of what their senders sent."""

from __future__ import annotations

from bench.defense.base import DEFENSES, Defense
from bench.defense.base import SecureAggregation as Masking


@DEFENSES.register(
    "secure_aggregation",
    "Bonawitz et al. 2017 secure aggregation: pairwise + self masks in Z_2^k, only the sum is unmasked",
)
class SecureAggregation(Defense):
    """Secure aggregation (Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving
    Machine Learning", CCS 2017, §4, Fig. 4), run by the harness
    (:class:`~bench.defense.mechanisms.secure_aggregation.SecureAggregation`, where the masking,
    the key agreement, the Shamir-shared dropout recovery and their equations are): every
    aggregated message leaves its sender masked,

        y_u = enc(w_u m_u) + PRG(b_u) + Σ_{v>u} PRG(s_{u,v}) − Σ_{v<u} PRG(s_{u,v})   mod 2^k,

    and its receiver can remove the masks only from the sum over the group. FedSGD/FedAvg: the
    group is the round's sampled clients and the receiver the server; D-PSGD / gossip averaging
    (Pasquini et al., S&P 2023, §6.1): every receiver runs its own aggregation among its
    neighbours and learns ``Σ_u W_vu m_u``, never an individual ``m_u``. What an adversary
    observes is the masked ``y_u`` and what the protocol gives it (its next model); the aggregate
    stays attackable (``source: server_aggregate`` / ``neighbor_aggregate``).

    Parameters
    ----------
    k:
        Ring exponent, ``8 ≤ k ≤ 62``.
    scale:
        Fixed-point scale: resolution ``1/scale``, range ``|Σ w_u m_u| < 2^(k−1) / scale``.
    threshold:
        ``τ`` in ``(0, 1)``: the Shamir threshold of a group of ``m`` is ``t = min(m, ⌊τ m⌋ + 1)``.
    dropout:
        Probability that a user drops out of an aggregation after the keys were shared.
    prg:
        ``"aes"`` (AES-256-CTR) or ``"chacha20"``.
    on_failure:
        ``"error"`` (the run fails) or ``"abort_round"`` (that aggregation is skipped).
    """

    source = "bonawitz2017"
    summary = (
        "Each aggregated message is masked with pairwise and self masks so that its receiver can "
        "unmask only the sum over the group, with dropout recovery by secret sharing. It hides "
        "individual messages from the server, receivers and eavesdroppers, who learn only the "
        "aggregate."
    )
    protocols = ("fedsgd", "fedavg", "dpsgd", "gossip_averaging")
    examples = (
        {},
        {"k": 48, "scale": 16777216.0, "prg": "chacha20"},
        {"dropout": 0.2, "threshold": 0.3, "on_failure": "abort_round"},
    )

    def __init__(
        self,
        k: int = 32,
        scale: float = 65536.0,
        threshold: float = 0.5,
        dropout: float = 0.0,
        prg: str = "aes",
        on_failure: str = "error",
    ) -> None:
        self.secagg = Masking(
            k=k, scale=scale, threshold=threshold, dropout=dropout, prg=prg, on_failure=on_failure
        )

    def mechanisms(self) -> tuple[Masking]:
        return (self.secagg,)
