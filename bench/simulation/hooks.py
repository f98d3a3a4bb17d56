"""Hook points through which defenses and active adversaries act on a simulation.

* :class:`DefenseHooks` — transform local gradients, outgoing messages and aggregation, and
  ask to stop. Defenses (``defenses/``) subclass it; a :class:`HookChain` composes several.
* :class:`AdversaryPolicy` — an active (malicious) node policy: substitutes the messages that
  its nodes send, after honest defenses ran (an attacker does not apply the defense).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bench.simulation.messages import MessageBatch

Aggregator = Callable[..., torch.Tensor]


@dataclass
class RoundContext:
    """What a hook may look at: the round, the protocol's state and the simulation."""

    round: int
    state: dict[str, torch.Tensor]
    sim: Any


class DefenseHooks:
    """Identity hooks; a defense overrides the ones it needs."""

    def bind(self, sim: Any) -> None:
        """Called once by the simulation after it is built (seed, device and dtype are known)."""

    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Per-node gradients ``[N, P]`` before the local update (e.g. clipping, noise)."""
        return grads

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        """Messages as they leave honest nodes (e.g. noise, quantization, masking)."""
        return msgs

    def wrap_aggregation(self, aggregate: Aggregator) -> Aggregator:
        """Replace or wrap an aggregation rule (e.g. secure or robust aggregation)."""
        return aggregate

    def should_stop(self, ctx: RoundContext) -> bool:
        """Whether training stops after this round (e.g. a round budget)."""
        return False


class HookChain(DefenseHooks):
    """Apply several hooks in order."""

    def __init__(self, hooks: Sequence[DefenseHooks] = ()) -> None:
        self.hooks = list(hooks)

    def bind(self, sim: Any) -> None:
        for h in self.hooks:
            h.bind(sim)

    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        for h in self.hooks:
            grads = h.local_gradients(grads, ctx)
        return grads

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        for h in self.hooks:
            msgs = h.outgoing(msgs, ctx)
        return msgs

    def wrap_aggregation(self, aggregate: Aggregator) -> Aggregator:
        for h in self.hooks:
            aggregate = h.wrap_aggregation(aggregate)
        return aggregate

    def should_stop(self, ctx: RoundContext) -> bool:
        return any(h.should_stop(ctx) for h in self.hooks)


class AdversaryPolicy:
    """An active adversary controlling ``nodes``; substitutes what they send.

    Subclasses implement :meth:`substitute`. The default leaves messages unchanged (a passive,
    honest-but-curious node).
    """

    def __init__(self, nodes: Sequence[int]) -> None:
        self.nodes = tuple(int(v) for v in nodes)

    def substitute(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        return msgs

    def sent_by_adversary(self, msgs: MessageBatch) -> torch.Tensor:
        """Edge mask ``[E]`` of deliveries whose sender is one of the adversary's nodes."""
        nodes = torch.tensor(self.nodes, device=msgs.senders.device)
        return torch.isin(msgs.edge_senders, nodes)
