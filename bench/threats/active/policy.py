"""The active-adversary contract: a policy that rewrites what its coalition sends in D-PSGD.

A policy is an :class:`~bench.defense.hooks.AdversaryPolicy` the channel calls on every
message batch after the defense's ``outgoing`` hook (:class:`~bench.simulation.channel.Channel`).
It acts on D-PSGD's ``"model"`` broadcasts (gossip step 0): the batch is laid out per edge and
the rows its coalition sends are replaced, each receiver possibly getting a different forgery
(Pasquini et al.'s Ā^DL "sends arbitrary and different updates to each neighbour every round").

Schedule (the issue's and the paper's App. C distinction):

* ``"rushing"`` — the coalition sends last: it forges from the messages of the same round
  (exactly what it receives; what its victims send to *other* nodes it does not see);
* ``"synchronous"`` — it must send before seeing the round's messages, so it forges from the
  previous round's (the first round it sends honestly): each node's current half-step is
  predicted by its current model ``Θ_u^t = Σ_w W_uw m_{w→u}^{t−1}`` when the coalition saw every
  message ``u`` mixed (``N(u) ⊆ N(A) ∪ A``, with what the coalition itself delivered to ``u`` —
  its forgeries included), else by ``u``'s previous update ``Θ_u^{t−½}`` (the paper's App. C
  rule); the error left is ``u``'s unseen gradient step ``η ∇L``.

The policy only reads what its coalition receives and sends — never another node's state.
"""

from __future__ import annotations

from typing import Any

import torch

from bench.core.errors import BenchInputError
from bench.core.params import require_choice
from bench.core.registry import Registry
from bench.defense.hooks import AdversaryPolicy, RoundContext, RunInfo
from bench.simulation.flat import FlatModel
from bench.simulation.messages import MessageBatch

POLICIES: Registry = Registry("active policy")
#: the inputs' ``(mean, std)`` per channel
Normalization = tuple[tuple[float, ...], tuple[float, ...]]
SCHEDULES = ("rushing", "synchronous")
MODEL_KIND = "model"


class ActivePolicy(AdversaryPolicy):
    """Base of registered policies: binding to the run, the schedule and the coalition's view of
    each round's models (``seen[t]``: ``sender -> Θ_u^{t+½}`` for every model delivered to a
    coalition member, plus the members' own honest half-steps)."""

    protocols: tuple[str, ...] = ("dpsgd",)

    def __init__(self, nodes: tuple[int, ...] | list[int], schedule: str = "rushing") -> None:
        super().__init__(nodes)
        self.schedule = require_choice(schedule, SCHEDULES, "threat.policy_params.schedule")
        self.run: RunInfo | None = None
        self.flat: FlatModel | None = None
        self.normalization: Normalization = ((0.0,), (1.0,))
        #: the run's seed (the adversary is bench's code: it is told the seed a defense is not)
        self.seed = 0
        self.seen: dict[int, dict[int, torch.Tensor]] = {}
        #: ``(member, receiver) -> model`` the coalition delivered in the last round
        self.sent_to: dict[tuple[int, int], torch.Tensor] = {}

    def bind(self, run: RunInfo, flat: FlatModel, normalization: Normalization, seed: int = 0) -> None:
        if run.protocol not in self.protocols or run.mixing is None:
            raise BenchInputError(
                "threat.policy",
                type(self).__name__,
                reason=f"active policies act on {', '.join(self.protocols)}; the run is {run.protocol}",
            )
        self.run, self.flat, self.normalization, self.seed = run, flat, normalization, int(seed)

    @property
    def mixing(self) -> torch.Tensor:
        assert self.run is not None and self.run.mixing is not None
        return self.run.mixing

    def neighbours(self, v: int) -> list[int]:
        """``N(v)`` without ``v`` (from the public mixing matrix)."""
        row = self.mixing[v]
        return [int(u) for u in torch.nonzero(row).flatten().tolist() if u != v]

    def observe(self, msgs: MessageBatch) -> dict[int, torch.Tensor]:
        """``sender -> payload`` of every message of ``msgs`` delivered to a coalition member,
        and the members' own rows."""
        out: dict[int, torch.Tensor] = {}
        mine = torch.tensor(self.nodes, device=msgs.edges.device)
        hit = torch.isin(msgs.receivers, mine) | torch.isin(msgs.edge_senders, mine)
        for row in msgs.edges[hit, 0].tolist():
            out.setdefault(int(msgs.senders[row]), msgs.payload[row].detach().clone())
        return out

    def substitute(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if msgs.kind != MODEL_KIND or msgs.step != 0 or not msgs.payload.is_floating_point():
            return msgs  # not a model broadcast, or masked by secure aggregation: nothing to forge from
        current = self.observe(msgs)
        self.seen[msgs.round] = current
        self.seen.pop(msgs.round - 2, None)
        basis = current if self.schedule == "rushing" else self.predicted(msgs.round)
        forged = self.forge(msgs.round, basis) if basis is not None else {}
        out = msgs.per_edge()
        senders, receivers = out.edge_senders.tolist(), out.receivers.tolist()
        payload = out.payload.clone()
        sent: dict[tuple[int, int], torch.Tensor] = {}
        for i, (a, v) in enumerate(zip(senders, receivers, strict=True)):
            if (a, v) in forged:
                payload[i] = forged[(a, v)].to(payload.dtype)
            if a in self.nodes:
                sent[(a, v)] = payload[i].detach().clone()
        self.sent_to = sent
        return out.with_payload(payload) if forged else msgs

    def predicted(self, round_: int) -> dict[int, torch.Tensor] | None:
        """Each known node's current model, predicted from round ``t − 1`` (``synchronous``)."""
        previous = self.seen.get(round_ - 1)
        if previous is None:
            return None
        w = self.mixing
        out = dict(previous)
        for u in previous:
            if u in self.nodes:
                continue
            terms = []
            for x in [u, *self.neighbours(u)]:
                msg = self.sent_to.get((x, u)) if x in self.nodes else previous.get(x)
                if msg is None:
                    break
                terms.append(float(w[u, x]) * msg.to(torch.float64))
            else:
                out[u] = sum(terms).to(previous[u].dtype)
        return out

    def forge(self, round_: int, models: dict[int, torch.Tensor]) -> dict[tuple[int, int], torch.Tensor]:
        """``(member, receiver) -> forged model`` for round ``round_`` from ``models`` (this
        round's under ``rushing``, the previous round's under ``synchronous``)."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"policy": type(self).__name__, "schedule": self.schedule, "nodes": list(self.nodes)}


def build_policy(name: str, nodes: tuple[int, ...], **params: Any) -> ActivePolicy:
    """Instantiate policy ``name`` for ``nodes`` (errors name the field and the choices)."""
    from bench.core.params import call_with_params

    return call_with_params(POLICIES, name, "threat.policy", nodes=nodes, **params)
