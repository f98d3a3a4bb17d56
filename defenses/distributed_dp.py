"""Distributed DP: DP-SGD whose noise is shared among the participants of each aggregation."""

from __future__ import annotations

from typing import ClassVar, Literal

from bench.defense.base import DEFAULT_DELTA, DEFENSES, Defense, PerSampleGaussian


@DEFENSES.register(
    "distributed_dp",
    "DP-SGD with noise shares N(0, sigma^2 C^2 / m): m participants per aggregation (Opacus accounting)",
)
class DistributedDP(Defense):
    """Distributed DP (Pasquini et al. 2023, §6 "Differential privacy"; Kairouz, Liu & Steinke
    2021): every node runs the DP-SGD step of ``dp_sgd`` (per-sample clipping to C, division by
    the expected batch size ``d_v``) but adds only a share of the noise,

        g̃_v = ( Σ_{j ∈ L_v} ḡ_j + N(0, σ² C² / m_v · I) ) / d_v,

    where ``m_v`` is the number of participants of the aggregation it contributes to: the ``k``
    sampled clients under FedSGD/FedAvg (the server's mean; ``weighting`` is set to
    ``"uniform"``), the self-inclusive neighbourhood ``|N(u)| = deg(u) + 1`` of its receivers
    in D-PSGD — the smallest of them, ``m_v = min_{u ∈ N(v)} |N(u)|``
    (``bench.defense.privacy.distributed``). The ``m`` shares of an aggregate add up to ``N(0, σ²C²)``:
    the aggregate carries the noise of one central DP-SGD step with multiplier σ.

    Whom it protects against (both are recorded by :meth:`accounting`):

    * ``epsilon`` — against anyone who receives the node's *individual* messages: the FL server,
      every D-PSGD neighbour, an eavesdropper. These are the
      threat models of its tasks unless secure aggregation is also in use. Each message carries
      noise multiplier ``σ / √m_v`` only, so ε
      is that of DP-SGD with ``σ/√m_v`` — on a graph of degree d, ``σ/√(d+1)``: the sparser the
      graph, the less noise the aggregate can spare per node (Pasquini et al.'s argument).
    * ``epsilon_aggregate`` — against an observer of aggregates only (behind secure aggregation,
      which distributed DP assumes): the smallest effective multiplier of any node's sample in
      any aggregate (``σ`` for uniform mixing/weights and equal batch sizes). Exact per local
      step; with several local steps before an aggregation it treats each step's aggregate as
      released.

    ``noise_multiplier``/``target_epsilon`` set σ of the aggregate (the central mechanism).
    Parameters as for ``dp_sgd``.
    """

    source = "pasquini2023"
    summary = (
        "Every node runs DP-SGD but adds only its share of the Gaussian noise, so that the shares "
        "of the participants of an aggregation add up to the noise of one central DP-SGD step. It "
        "gives sample-level differential privacy at a reduced noise multiplier against whoever "
        "receives a node's individual messages, and the full guarantee against an observer of "
        "aggregates only."
    )
    examples: ClassVar = ({"noise_multiplier": 2.0, "clip_norm": 1.0},)

    def __init__(
        self,
        clip_norm: float = 1.0,
        noise_multiplier: float | None = None,
        target_epsilon: float | None = None,
        delta: float = DEFAULT_DELTA,
        sampling: Literal["fixed", "poisson"] = "fixed",
        sample_rate: float = 1.0,
        accountant: Literal["rdp", "prv"] = "rdp",
    ) -> None:
        self.dp = PerSampleGaussian(
            clip_norm=clip_norm,
            noise_multiplier=noise_multiplier,
            target_epsilon=target_epsilon,
            delta=delta,
            sampling=sampling,
            sample_rate=sample_rate,
            accountant=accountant,
            shares="aggregation",
        )

    def mechanisms(self) -> tuple[PerSampleGaussian]:
        return (self.dp,)
