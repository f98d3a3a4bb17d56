"""The Channel: every transmitted message passes through it.

``send`` applies, in order: the defense's ``outgoing`` hook (messages sent by nodes; the
server's messages are not passed to it), the active adversary's substitution (the adversary's
own messages), and the transcript recorder (what observers see is what is delivered). The
returned batch is what receivers get. ``aggregate`` runs a protocol's aggregation rule as
wrapped by the defense, and logs the call in the :class:`~.aggregation_log.AggregationLog`, from
which the channel audit (:mod:`bench.evaluation.audit`) recomputes it with a fresh defense in a
fresh process: the only way from a sender's hooks to a receiver's is a delivered message.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.defense.hooks import AdversaryPolicy, Aggregator, DefenseHooks, RoundContext, overridden_hooks
from bench.simulation.aggregation_log import AggregationLog
from bench.simulation.decoding import decode_deliveries
from bench.simulation.messages import MessageBatch
from bench.simulation.transcript import Transcript


class Channel:
    def __init__(
        self,
        hooks: DefenseHooks | None = None,
        adversary: AdversaryPolicy | None = None,
        transcript: Transcript | None = None,
        audit: AggregationLog | None = None,
    ) -> None:
        self.hooks = hooks or DefenseHooks()
        #: whether the defense has a receive side of its own (else bench's rule runs as it is)
        self.receive_side = "wrap_aggregation" in overridden_hooks(self.hooks)
        #: the aggregations the audit replays; only defense code is logged (bench's own rule is not)
        self.audit = audit if self.receive_side else None
        self.adversary = adversary
        self.transcript = transcript
        self.delivered = 0  # number of deliveries, for cost accounting
        self._stored: tuple[MessageBatch, dict[str, int]] | None = None  # the last batch recorded

    #: ``(delivered, rows, coef)`` of a protocol's linear rule (``Protocol.delivery_slots``), set
    #: by the simulation: how the insiders' decoding reads a delivery (:mod:`.decoding`)
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
        """``aggregate(own, delivered)`` as wrapped by the defense's ``wrap_aggregation``."""
        wrapped = self.hooks.wrap_aggregation(aggregate, ctx)
        out = wrapped(own, delivered)
        if self.audit is not None:
            self.audit.record(delivered.kind, ctx, own, delivered, out)
        if self.receive_side:
            self._decode(wrapped, own, delivered, ctx)
        return out

    def _decode(
        self, wrapped: Aggregator, own: torch.Tensor, delivered: MessageBatch, ctx: RoundContext
    ) -> None:
        """Record what the insiders' own code decodes the deliveries to them to (the batch was
        just recorded; :mod:`.decoding`). Only under a defense with a receive side of its own."""
        stored, self._stored = self._stored, None
        if stored is None or stored[0] is not delivered or self.slots is None or self.transcript is None:
            return
        observers = self.transcript.observers
        insiders = sorted({v for name in stored[1] for v in observers[name].insiders})
        if not insiders:
            return
        per_edge = delivered.per_edge()
        targets = torch.isin(per_edge.receivers, torch.tensor(insiders, device=per_edge.receivers.device))
        try:
            slots = self.slots(per_edge, ctx)
        except NotImplementedError:
            return
        payload = decode_deliveries(wrapped, own, per_edge, slots, targets)
        if payload is not None:
            self.transcript.record_decoded(per_edge.with_payload(payload), stored[1])
