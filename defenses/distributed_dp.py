"""Distributed DP: DP-SGD whose noise is shared among the participants of each aggregation."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from bench.defense.base import DEFENSES, PerSampleDP, RoundContext, RunInfo
from bench.defense.privacy import plan
from bench.defense.privacy.accounting import worst_epsilon_spent
from bench.defense.privacy.distributed import aggregate_noise_multiplier, share_sizes

FEDERATED = ("fedsgd", "fedavg")


@DEFENSES.register(
    "distributed_dp",
    "DP-SGD with noise shares N(0, sigma^2 C^2 / m): m participants per aggregation (Opacus accounting)",
)
class DistributedDP(PerSampleDP):
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
      every D-PSGD neighbour, an eavesdropper. bench has no secure aggregation, so these are the
      threat models of its tasks. Each message carries noise multiplier ``σ / √m_v`` only, so ε
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
    TAG = "distributed_dp"
    GUARANTEE = (
        "sample-level DP against a recipient of the node's individual messages (noise multiplier "
        "sigma/sqrt(m)); epsilon_aggregate: against an observer of aggregates only"
    )

    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        return {"weighting": "uniform"} if protocol in FEDERATED else {}

    def bind(self, run: RunInfo) -> None:
        super().bind(run)
        self._federated = run.edges is None
        self._shares = None if self._federated else share_sizes(run.n_nodes, run.edges)
        self._scales = None if self._shares is None else self._shares.to(run.device, run.dtype).rsqrt()
        self._fl_participants = run.n_nodes  # the fewest clients seen in one aggregation

    def noise_scale(self, ctx: RoundContext, n: int, device: torch.device) -> float | torch.Tensor:
        if self._scales is None:  # federated: the n rows are the sampled clients
            self._fl_participants = min(self._fl_participants, n)
            return 1.0 / math.sqrt(n)
        if self._scales.device != device:
            self._scales = self._scales.to(device)
        return self._scales if ctx.nodes is None else self._scales[ctx.nodes]

    def shares(self) -> torch.Tensor:
        """``m_v`` ``[N]``: participants each node's noise share is sized for."""
        if self._shares is not None:
            return self._shares
        return torch.full((self.run.n_nodes,), self._fl_participants, dtype=torch.int64)

    def node_multipliers(self) -> torch.Tensor:
        assert self.sigma is not None
        return self.sigma / self.shares().to(torch.float64).sqrt()

    def aggregate_multiplier(self) -> float:
        assert self.sigma is not None
        d = self._divisors.cpu().to(torch.float64)
        if self._federated:  # uniform mean over k clients: z ≥ σ d_v / d_max ≥ σ d_min / d_max
            return self.sigma * float(d.min() / d.max())
        assert self.run.mixing is not None
        return aggregate_noise_multiplier(self.sigma, self.run.mixing, self.shares(), d)

    def accounting_extra(self) -> dict[str, Any]:
        z = self.aggregate_multiplier()
        steps = plan.accounted_steps(self.run, self._steps).tolist()
        rows = [(z, q, t) for q, t in zip(self._rates.tolist(), steps, strict=True)]
        eps, _, used = worst_epsilon_spent(rows, self.delta, self.accountant, self.relation)
        m = self.shares()
        return {
            "epsilon_aggregate": eps,
            "accountant_aggregate": used,
            "aggregate_noise_multiplier": z,
            "participants": {"min": int(m.min()), "max": int(m.max())},
        }

    def adaptive_knowledge(self) -> dict[str, Any]:
        out = super().adaptive_knowledge()
        out["mechanism"] = "distributed DP-SGD: noise N(0, sigma^2 C^2 / m) per node, m participants"
        return out
