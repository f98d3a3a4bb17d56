"""The Channel: every transmitted message passes through it.

``send`` applies, in order: the defense's ``outgoing`` hook (messages sent by nodes; the
server's messages are not passed to it), the active adversary's substitution (the adversary's
own messages), and the transcript recorder (what observers see is what is delivered). The
returned batch is what receivers get. ``aggregate`` runs the receive side: each delivered
message decoded by its receiver's code, one message at a time (the defense's per-message
``decode``, :mod:`bench.defense.runner`), then the protocol's own rule as the harness's
mechanisms wrap it (secure aggregation's unmasking, DP-FedAvg's server noise).

Insiders hold their keys (Kerckhoffs' principle for participants): a threat whose adversary
takes part in the protocol — the server, a neighbour coalition, an active coalition, an
eavesdropper's colluders (``Observer.insiders``) — sees each delivery to its own nodes as their
code decoded it (``View.decoded``), by construction: the decoded message is exactly what entered
the receiver's aggregation. A transform every receiver undoes with a secret all nodes share
therefore hides nothing from such an adversary. Only what the adversary cannot decode — masks
of secure aggregation, whose receivers decode no single message; noise it never saw — earns
privacy against it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.defense.hooks import AdversaryPolicy, Aggregator, DefenseHooks, RoundContext
from bench.simulation.messages import MessageBatch
from bench.simulation.transcript import Transcript


class Channel:
    def __init__(
        self,
        hooks: DefenseHooks | None = None,
        adversary: AdversaryPolicy | None = None,
        transcript: Transcript | None = None,
    ) -> None:
        self.hooks = hooks or DefenseHooks()
        #: whether the defense decodes delivered messages itself (else they enter the rule as sent)
        self.decodes = bool(getattr(self.hooks, "decodes", False))
        self.adversary = adversary
        self.transcript = transcript
        self.delivered = 0  # number of deliveries, for cost accounting
        self._stored: tuple[MessageBatch, dict[str, int]] | None = None  # the last batch recorded

    #: ``(delivered, rows, coef)`` of a protocol's linear rule (``Protocol.delivery_slots``), set
    #: by the simulation: which row of the rule's own state each delivery is combined with
    slots: Callable[[MessageBatch, RoundContext], tuple[torch.Tensor, torch.Tensor]] | None = None

    def send(self, msgs: MessageBatch, ctx: RoundContext, from_server: bool = False) -> MessageBatch:
        """Deliver ``msgs``; returns what the receivers actually get.

        ``from_server``: the batch is the server's (federated protocols); the defense's
        ``outgoing`` hook acts on the nodes' messages only."""
        if not from_server:
            msgs = self.hooks.outgoing(msgs, ctx)
        if self.adversary is not None:
            msgs = self.adversary.substitute(msgs, ctx)
        if self.transcript is not None:
            stored = self.transcript.record(msgs)
            self._stored = (msgs, stored) if stored else None
        self.delivered += len(msgs)
        return msgs

    def aggregate(
        self, aggregate: Aggregator, own: torch.Tensor, delivered: MessageBatch, ctx: RoundContext
    ) -> torch.Tensor:
        """``aggregate(own, delivered)`` on the deliveries as their receivers decode them, as
        the harness's mechanisms wrap it."""
        stored, self._stored = self._stored, None
        if (
            self.decodes
            and self.slots is not None
            and len(delivered)
            and delivered.payload.is_floating_point()
        ):
            per_edge = delivered.per_edge()
            rows, _ = self.slots(per_edge, ctx)
            decoded = self.hooks.decode(per_edge, own, rows, ctx)
            if stored is not None and stored[0] is delivered:
                self._record_decoded(per_edge, decoded, stored[1])
            if not torch.equal(decoded, per_edge.payload):  # an identity decoding keeps the layout:
                delivered = per_edge.with_payload(decoded)  # the rule's sums stay bit-identical
        return self.hooks.wrap_aggregation(aggregate, ctx)(own, delivered)

    def _record_decoded(self, per_edge: MessageBatch, decoded: torch.Tensor, stored: dict[str, int]) -> None:
        """Keep, for every observer of the batch with insiders, the deliveries it saw — those to
        its insiders as they were decoded, the others as they travelled."""
        if self.transcript is None or torch.equal(decoded, per_edge.payload):
            return
        observers = self.transcript.observers
        for name in stored:
            insiders = observers[name].insiders
            if not insiders:
                continue
            mine = torch.isin(
                per_edge.receivers, torch.tensor(sorted(insiders), device=per_edge.receivers.device)
            )
            if not bool(mine.any()):
                continue
            payload = torch.where(mine[:, None], decoded, per_edge.payload)
            self.transcript.record_decoded(per_edge.with_payload(payload), {name: stored[name]})
