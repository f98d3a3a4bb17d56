"""The Channel: every transmitted message passes through it.

``send`` applies, in order: the defense's ``outgoing`` hook (messages sent by nodes; the
server's messages are not passed to it), the active adversary's substitution (the adversary's
own messages), and the transcript recorder (what observers see is what is delivered). The
returned batch is what receivers get. ``aggregate`` runs a protocol's aggregation rule as
wrapped by the defense, and logs the call in the :class:`~.aggregation_log.AggregationLog`, from
which the channel audit (:mod:`bench.runner.audit`) recomputes it with a fresh defense in a
fresh process: the only way from a sender's hooks to a receiver's is a delivered message.
"""

from __future__ import annotations

import torch

from bench.simulation.aggregation_log import AggregationLog
from bench.simulation.hooks import AdversaryPolicy, Aggregator, DefenseHooks, RoundContext, overridden_hooks
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
        #: the aggregations the audit replays; only defense code is logged (bench's own rule is not)
        self.audit = audit if "wrap_aggregation" in overridden_hooks(self.hooks) else None
        self.adversary = adversary
        self.transcript = transcript
        self.delivered = 0  # number of deliveries, for cost accounting

    def send(self, msgs: MessageBatch, ctx: RoundContext, from_server: bool = False) -> MessageBatch:
        """Deliver ``msgs``; returns what the receivers actually get.

        ``from_server``: the batch is the server's (federated protocols); the defense's
        ``outgoing`` hook acts on the nodes' messages only."""
        if not from_server:
            msgs = self.hooks.outgoing(msgs, ctx)
        if self.adversary is not None:
            msgs = self.adversary.substitute(msgs, ctx)
        if self.transcript is not None:
            self.transcript.record(msgs)
        self.delivered += len(msgs)
        return msgs

    def aggregate(
        self, aggregate: Aggregator, own: torch.Tensor, delivered: MessageBatch, ctx: RoundContext
    ) -> torch.Tensor:
        """``aggregate(own, delivered)`` as wrapped by the defense's ``wrap_aggregation``."""
        out = self.hooks.wrap_aggregation(aggregate, ctx)(own, delivered)
        if self.audit is not None:
            self.audit.record(delivered.kind, ctx, own, delivered, out)
        return out
