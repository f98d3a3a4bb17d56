"""Secure aggregation (Bonawitz et al., CCS 2017): receivers learn only the weighted sum of what
their senders sent — a harness mechanism, so that what it reveals is bench's code, not a plugin's.

Its receivers cannot decode a single message: what one receiver holds about one sender's masked
``y_u`` is uniform given the sum it unmasks (``tests/defense/secagg/test_single_message.py``
checks it), so an insider's View holds the masked messages and the aggregates, and no decoded
single message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bench.core.errors import BenchInputError, require
from bench.core.params import require_choice
from bench.data.stacked import derive_seed
from bench.defense.hooks import Aggregator, RoundContext, RunInfo
from bench.defense.mechanisms.base import Mechanism, MechanismHooks
from bench.defense.secagg import SecureAggregator, check_sum_range, decode, encode
from bench.defense.secagg.fixed_point import MAX_K
from bench.defense.secagg.prg import PRGS
from bench.defense.secagg.protocol import Instance
from bench.simulation.messages import SERVER, MessageBatch

if TYPE_CHECKING:
    from bench.protocols import Protocol

FEDERATED = ("fedsgd", "fedavg")
GOSSIP = ("dpsgd", "gossip_averaging")
#: the message kind each protocol aggregates
KINDS = {"gradient": "fedsgd", "local_model": "fedavg", "model": "dpsgd", "value": "gossip_averaging"}
ON_FAILURE = ("error", "abort_round")


@dataclass(frozen=True)
class SecureAggregation(Mechanism):
    """Secure aggregation (Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving
    Machine Learning", CCS 2017, §4, Fig. 4): every aggregated message leaves its sender masked,

        y_u = enc(w_u m_u) + PRG(b_u) + Σ_{v>u} PRG(s_{u,v}) − Σ_{v<u} PRG(s_{u,v})   mod 2^k,

    and its receiver can remove the masks only from the sum over the group,
    ``Σ_{u∈U} y_u − Σ_{u∈U} PRG(b_u) − (masks shared with dropped users) = Σ_{u∈U} enc(w_u m_u)``
    (:mod:`bench.defense.secagg.protocol`). ``enc`` is the fixed-point encoding ``round(x · scale) mod 2^k``
    (:mod:`bench.defense.secagg.fixed_point`); ``s_{u,v}`` come from X25519 key agreement, the PRG is
    AES-256-CTR or ChaCha20 (:mod:`bench.defense.secagg.keys`, :mod:`bench.defense.secagg.prg`); ``b_u`` and
    the
    key-agreement secrets are Shamir-shared with threshold ``t`` (:mod:`bench.defense.secagg.shamir`).

    * **FedSGD / FedAvg**: the group is the round's sampled clients, the receiver the server,
      ``w_u`` the protocol's unnormalized weight (1, or ``n_u`` with ``weighting="samples"``); the
      server decodes ``Σ_U w_u m_u`` and divides by ``Σ_U w_u``: the protocol's weighted mean
      ``Σ_c p_c m_c`` over the clients that did not drop out.
    * **D-PSGD / gossip averaging** (the setting of Pasquini et al., S&P 2023, §6.1): every
      receiver ``v`` runs its own aggregation among its neighbours ``N(v) \\ {v}``, each sending
      ``v`` its own masked ``enc(W_vu m_u)``; ``v`` learns ``Σ_u W_vu m_u`` and sets
      ``x_v⁺ = W_vv x_v + Σ_u W_vu m_u`` — the mixing rule — never an individual ``m_u``. A
      neighbour that dropped out of ``v``'s aggregation leaves its weight on ``v``'s own value
      (``x_v⁺`` stays a convex combination). With a single neighbour the "sum" is its message:
      secure aggregation cannot hide it (Pasquini et al., footnote 2).

    What an adversary observes (the transcript) is the masked ``y_u`` — ring elements as
    ``int64`` — and what the protocol gives it: the server its next global model, a node its
    next state. The aggregate stays attackable (``source: server_aggregate`` /
    ``neighbor_aggregate`` of the gradient-inversion attacks). Not covered: active attacks on the
    protocol, e.g. Pasquini et al.'s two-Sybil differencing (§6.1).

    Error and failure. Each coordinate of the decoded sum is within ``m / (2·scale)`` of the real
    sum (``m`` terms rounded once each). A sum whose integer value leaves ``[−2^(k−1), 2^(k−1))``
    raises ``SecAggOverflow``; fewer than ``t`` survivors raise ``SecAggFailure`` — the job
    fails with that reason, or with ``on_failure="abort_round"`` the aggregation is skipped
    (no step / own model kept) and counted; never a wrong sum.

    Keys. Every aggregation instance (one receiver's group in one round and step) runs its own
    key agreement with fresh key pairs (Bonawitz et al.'s Round 0 per instance): the secret key
    of a dropped user that an unmasking reveals opens that instance only — two colluding
    receivers of one gossip step cannot combine it with the other's self-mask seed to read the
    user's message (:mod:`bench.defense.secagg.keys`).

    Cost. Per aggregation of ``m`` users: ``m`` key pairs and ``m(m−1)/2`` agreements,
    ``m(m−1)/2`` pairwise and ``m`` self-mask expansions of ``P`` elements, and
    ``|U| + |U|·|D|`` expansions to unmask. ``performance/secagg.py`` measures it.

    Parameters
    ----------
    k:
        Ring exponent, ``8 ≤ k ≤ 62`` (the wire cost is ``k`` bits per coordinate).
    scale:
        Fixed-point scale (a power of two keeps decoding exact): resolution ``1/scale``,
        range ``|Σ w_u m_u| < 2^(k−1) / scale``.
    threshold:
        ``τ`` in ``(0, 1)``: the Shamir threshold of a group of ``m`` is ``t = min(m, ⌊τ m⌋ + 1)``
        (``τ = 1/2``: a strict majority). Fewer than ``t`` colluding users learn nothing from
        their shares; more than ``m − t`` dropouts make the aggregation fail. Bonawitz et al.
        (§6) relate the safe ``t`` to ``n`` and to the number of corrupt users; the paper leaves
        the choice open, so it is a parameter.
    dropout:
        Probability that a user drops out of an aggregation after the keys were shared and
        before its masked input is delivered (per round for clients, per gossip step and edge
        for neighbours), drawn from the run's seeded stream.
    prg:
        ``"aes"`` (AES-256-CTR) or ``"chacha20"``.
    on_failure:
        ``"error"`` (the run fails) or ``"abort_round"`` (that aggregation is skipped).
    """

    k: int = 32
    scale: float = 65536.0
    threshold: float = 0.5
    dropout: float = 0.0
    prg: str = "aes"
    on_failure: str = "error"

    points: ClassVar[frozenset[str]] = frozenset({"outgoing", "decode"})

    def __post_init__(self) -> None:
        k, scale, threshold, dropout = self.k, self.scale, self.threshold, self.dropout
        require(isinstance(k, int) and not isinstance(k, bool) and 8 <= k <= MAX_K, "defense.k", k,
                f"must be an integer in 8 … {MAX_K}")  # fmt: skip
        ok = isinstance(scale, (int, float)) and not isinstance(scale, bool) and 0 < scale < 2.0 ** (k - 1)
        require(ok, "defense.scale", scale, f"must be in (0, 2^{k - 1})")
        require(
            isinstance(threshold, (int, float)) and 0 < threshold < 1,
            "defense.threshold",
            threshold,
            "must be in (0, 1)",
        )
        require(
            isinstance(dropout, (int, float)) and 0 <= dropout < 1,
            "defense.dropout",
            dropout,
            "must be in [0, 1)",
        )
        object.__setattr__(self, "k", int(k))
        object.__setattr__(self, "scale", float(scale))
        object.__setattr__(self, "threshold", float(threshold))
        object.__setattr__(self, "dropout", float(dropout))
        object.__setattr__(self, "prg", require_choice(self.prg, PRGS, "defense.prg"))
        object.__setattr__(
            self, "on_failure", require_choice(self.on_failure, ON_FAILURE, "defense.on_failure")
        )

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        both = FEDERATED + GOSSIP
        return None if name in both else f"applies to {', '.join(both)} only"

    def knowledge(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "scale": self.scale,
            "threshold": self.threshold,
            "t": "min(m, floor(threshold * m) + 1) for a group of m users",
            "dropout": self.dropout,
            "prg": self.prg,
            "reveals": "the weighted sum of each group's messages; individual messages are masked",
        }

    def build(self, run: RunInfo, seed: int) -> SecureAggregationHooks:
        return SecureAggregationHooks(self, run, seed)


class SecureAggregationHooks(MechanismHooks):
    """:class:`SecureAggregation` in one run: masking in ``outgoing``, unmasking in the wrapped
    aggregation."""

    def __init__(self, spec: SecureAggregation, run: RunInfo, seed: int) -> None:
        self.spec, self.run, self.seed = spec, run, int(seed)
        self.k, self.scale, self.threshold, self.dropout = spec.k, spec.scale, spec.threshold, spec.dropout
        self.prg, self.on_failure = spec.prg, spec.on_failure
        self.stats = {"aggregations": 0, "failures": 0, "dropped": 0}
        if run.protocol not in FEDERATED + GOSSIP:
            raise BenchInputError("defense", "secure_aggregation", reason=f"does not apply to {run.protocol}")
        self._agg = SecureAggregator(run.n_nodes, self.k, self.threshold, self._generator("secagg"), self.prg)
        self._drops = self._generator("secagg_dropout")
        if run.protocol in FEDERATED:
            samples = run.hyperparameters.get("weighting") == "samples"
            self._client_weight = torch.tensor(run.counts, dtype=torch.float64) if samples else None
        else:
            if run.mixing is None:
                raise BenchInputError("defense", "secure_aggregation", reason="the run has no mixing matrix")
            self._mixing = run.mixing.detach().to("cpu", torch.float64)

    def _generator(self, tag: str) -> torch.Generator:
        return torch.Generator(device="cpu").manual_seed(derive_seed(self.seed, f"defense:{tag}"))

    def accounting(self) -> dict[str, Any]:
        return {
            "epsilon": None,
            "mechanism": f"harness: {type(self.spec).__name__}",
            "secure_aggregation": dict(self.stats),
        }

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if KINDS.get(msgs.kind) != self.run.protocol:
            return msgs
        if self.run.protocol in FEDERATED:
            rows = msgs.edges[:, 0]
            senders = msgs.senders[rows].cpu()
            weights = self._weights(senders)
            groups = {SERVER: (senders, msgs.payload[rows], weights)}
        else:
            edges = msgs.per_edge()
            recv, senders = edges.receivers.cpu(), edges.senders.cpu()
            weights = self._mixing[recv, senders]
            groups = {}
            for v in torch.unique(recv).tolist():  # one aggregation per receiver's neighbourhood
                sel = (recv == v).nonzero().squeeze(1)
                sel = sel[torch.argsort(senders[sel])]
                groups[v] = (senders[sel], edges.payload[sel.to(edges.payload.device)], weights[sel])
        return self._mask_groups(msgs, ctx, groups)

    def _weights(self, clients: torch.Tensor) -> torch.Tensor:
        """The clients' unnormalized weights ``w_u`` (1, or ``n_u`` under sample weighting)."""
        if self._client_weight is None:
            return torch.ones(len(clients), dtype=torch.float64)
        return self._client_weight[clients]

    def _mask_groups(
        self,
        msgs: MessageBatch,
        ctx: RoundContext,
        groups: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    ) -> MessageBatch:
        """Encode ``w_u m_u`` of every group's members, mask them all at once (one instance per
        receiver), drop the users that drop out, and send each receiver, with the survivors'
        ``y_u``, what the survivors send in the paper's unmasking round (Round 3): their shares
        of the survivors' self-mask seeds ``b_u`` and of the dropped users' secret keys
        ``s_v^SK`` — never both for one user (:func:`_unmasking_round`)."""
        receivers = list(groups)
        members = torch.cat([groups[v][0] for v in receivers])
        payload = torch.cat([groups[v][1].detach().cpu().to(torch.float64) for v in receivers])
        weight = torch.cat([groups[v][2] for v in receivers])
        owner = torch.cat(
            [torch.full((len(groups[v][0]),), i, dtype=torch.long) for i, v in enumerate(receivers)]
        )
        enc = encode(payload * weight[:, None], self.scale, self.k)
        alive = torch.rand(len(members), generator=self._drops) >= self.dropout
        check_sum_range(enc[alive], self.k, owner[alive])  # the sums to unmask must not wrap around
        y, instances = self._agg.mask_many(
            [(groups[v][0].tolist(), v) for v in receivers], enc, msgs.round, msgs.step
        )
        # a dropped user's key the unmasking reveals is this session's only (fresh per instance)
        extra = [
            _unmasking_round(v, inst, alive[owner == i], groups[v][2])
            for i, (v, inst) in enumerate(zip(receivers, instances, strict=True))
        ]
        self.stats["dropped"] += int((~alive).sum())
        receiver_ids = torch.tensor(receivers, dtype=torch.long)[owner[alive]]
        payload_out = y[alive].to(msgs.payload.device)
        rows = torch.arange(payload_out.shape[0], device=payload_out.device)
        edges = torch.stack([rows, receiver_ids.to(payload_out.device)], dim=1)
        senders = members[alive].to(payload_out.device)
        return MessageBatch(
            msgs.round,
            msgs.step,
            msgs.kind,
            payload_out,
            senders,
            edges,
            msgs.secure,
            extra={"secagg": extra},
        )

    def wrap_aggregation(self, aggregate: Aggregator, ctx: RoundContext) -> Aggregator:
        def secure(own: torch.Tensor, delivered: MessageBatch) -> torch.Tensor:
            groups = (delivered.extra or {}).get("secagg")
            if groups is None:  # not a message this defense masked
                return aggregate(own, delivered)
            return self._unmask(own, delivered, groups)

        return secure

    def _unmask(
        self, own: torch.Tensor, delivered: MessageBatch, groups: list[dict[str, Any]]
    ) -> torch.Tensor:
        """Every receiver's sum from its survivors' ``y_u`` and the shares of Round 3 that came
        with them — what was delivered, nothing else."""
        rows, recv = delivered.edges[:, 0].cpu(), delivered.receivers.cpu()
        senders = delivered.senders.cpu()[rows]
        receivers = [int(g["receiver"]) for g in groups]
        instances = [_instance(g) for g in groups]
        picks = [rows[recv == v] for v in receivers]
        survivors = [senders[recv == v].tolist() for v in receivers]
        sums, failures = self._agg.unmask_many(instances, survivors, delivered.payload.cpu(), picks)
        self.stats["aggregations"] += len(receivers)
        federated = self.run.protocol in FEDERATED
        out = None if federated else own.clone()
        for g, v in enumerate(receivers):
            if failures[g] is not None:
                if self.on_failure == "error":
                    raise failures[g]
                self.stats["failures"] += 1
                if federated:  # no step: a zero gradient, or the model the clients received
                    out = torch.zeros_like(own[0]) if delivered.kind == "gradient" else own[0].clone()
                continue  # a node keeps its own value
            total = decode(sums[g], self.scale, self.k)
            alive = torch.tensor([u in set(survivors[g]) for u in instances[g].members])
            w = groups[g]["weight"]
            if federated:
                out = (total / w[alive].sum()).to(own.device, own.dtype)
            else:  # x_v⁺ = (W_vv + Σ_{dropped} W_vu) x_v + Σ_{survivors} W_vu m_u
                keep = float(self._mixing[v, v]) + float(w[~alive].sum())
                out[v] = keep * own[v] + total.to(own.device, own.dtype)
        assert out is not None
        return out


def _unmasking_round(
    receiver: int, inst: Instance, survived: torch.Tensor, weight: torch.Tensor
) -> dict[str, Any]:
    """What receiver ``receiver`` holds of instance ``inst`` once its survivors answered the
    unmasking round (Bonawitz et al., Fig. 4, Round 3), as plain data: the group, its threshold,
    nonces and public keys, the members' weights, the shares held by ``t`` survivors of every
    survivor's ``b_u`` and of every dropped user's ``s_v^SK`` — the other shares zero. (With fewer
    than ``t`` survivors nothing is shared, and the receiver fails.)"""
    holders = survived.nonzero().squeeze(1)[: inst.t]
    self_shares = torch.zeros_like(inst.self_shares)
    key_shares = torch.zeros_like(inst.key_shares)
    if len(holders) >= inst.t:
        cols = holders[:, None]
        self_shares[survived.nonzero().squeeze(1)[:, None], cols.T] = inst.self_shares[survived][:, holders]
        dropped = (~survived).nonzero().squeeze(1)
        if len(dropped):
            key_shares[dropped[:, None], cols.T] = inst.key_shares[dropped][:, holders]
    return {
        "receiver": int(receiver),
        "members": list(inst.members),
        "t": int(inst.t),
        "nonce_pair": _tensor(inst.nonce_pair),
        "nonce_self": _tensor(inst.nonce_self),
        "self_shares": self_shares,
        "key_shares": key_shares,
        "public": torch.stack([_tensor(p) for p in inst.public]),
        "weight": weight.detach().cpu().to(torch.float64),
    }


def _instance(group: dict[str, Any]) -> Instance:
    return Instance(
        members=[int(u) for u in group["members"]],
        t=int(group["t"]),
        nonce_pair=_bytes(group["nonce_pair"]),
        nonce_self=_bytes(group["nonce_self"]),
        self_shares=group["self_shares"],
        key_shares=group["key_shares"],
        public=[_bytes(p) for p in group["public"]],
    )


def _tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _bytes(t: torch.Tensor) -> bytes:
    return bytes(t.to(torch.uint8).tolist())
