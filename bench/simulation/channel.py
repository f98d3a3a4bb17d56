"""The Channel: every transmitted message passes through it.

``send`` applies, in order: the defense's ``outgoing`` hook (honest nodes' messages), the active
adversary's substitution (the adversary's own messages), and the transcript recorder (what
observers see is what is delivered). The returned batch is what receivers get and aggregate.
"""

from __future__ import annotations

import torch

from bench.simulation.hooks import AdversaryPolicy, Aggregator, DefenseHooks, RoundContext
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
        self.adversary = adversary
        self.transcript = transcript
        self.delivered = 0  # number of deliveries, for cost accounting

    def send(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        """Deliver ``msgs``; returns what the receivers actually get."""
        msgs = self.hooks.outgoing(msgs, ctx)
        if self.adversary is not None:
            msgs = self.adversary.substitute(msgs, ctx)
        if self.transcript is not None:
            self.transcript.record(msgs)
        self.delivered += len(msgs)
        return msgs

    def aggregate(self, aggregate: Aggregator, *args: object, **kwargs: object) -> torch.Tensor:
        """Run an aggregation rule, as wrapped by the defense hooks."""
        return self.hooks.wrap_aggregation(aggregate)(*args, **kwargs)
