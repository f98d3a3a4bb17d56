"""What an adversary gets: a :class:`View` of the transcript plus declared public knowledge.

Attacks receive only a View — never ground truth and never other nodes' data (the "narrow
attacker contract" of breaching). Anything a task declares private raises a clear error when an
attack asks for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from bench.simulation.messages import MessageBatch
from bench.simulation.transcript import RunningTotal

KNOWLEDGE_ITEMS = ("graph", "mixing", "architecture", "hyperparameters", "n_nodes", "protocol")


class KnowledgeError(LookupError):
    """An attack asked for something its View does not contain."""


@dataclass(frozen=True)
class PublicKnowledge:
    """Facts about the run the task declares public.

    ``values`` maps each item of :data:`KNOWLEDGE_ITEMS` to its value; ``public`` lists the
    items the adversary may read.
    """

    values: dict[str, Any]
    public: frozenset[str] = frozenset(KNOWLEDGE_ITEMS)

    def __getitem__(self, item: str) -> Any:
        if item not in self.values:
            raise KnowledgeError(
                f"'{item}' is not part of this run's knowledge (known: {sorted(self.values)})"
            )
        if item not in self.public:
            raise KnowledgeError(
                f"the task declares '{item}' private; an attack that needs it cannot run here"
            )
        return self.values[item]

    def restricted(self, public: Iterable[str]) -> PublicKnowledge:
        return PublicKnowledge(self.values, frozenset(public))


@dataclass
class View:
    """An adversary's observations.

    Attributes
    ----------
    threat:
        Threat-model name.
    coalition:
        Corrupt nodes whose data and states the adversary holds (empty for outsiders).
    messages:
        Observed deliveries, in the order they were sent.
    own_data:
        ``node -> (x, y)`` local data of the corrupt nodes only.
    own_states:
        ``round -> [|coalition|, P]`` corrupt nodes' states at the start of recorded rounds.
    knowledge:
        Declared public knowledge.
    totals:
        ``kind -> RunningTotal``: observed payloads of that kind summed over every round of the
        run (only for the kinds an attack declared in
        :attr:`~bench.attacks.base.Requirement.totals`).
    """

    threat: str
    coalition: tuple[int, ...]
    messages: list[MessageBatch]
    own_data: dict[int, tuple[torch.Tensor, torch.Tensor]]
    own_states: dict[int, torch.Tensor]
    knowledge: PublicKnowledge
    meta: dict[str, Any] = field(default_factory=dict)
    totals: dict[str, RunningTotal] = field(default_factory=dict)

    def rounds(self) -> list[int]:
        return sorted({m.round for m in self.messages} | set(self.own_states))

    def select(
        self, round_: int | None = None, kind: str | None = None, step: int | None = None
    ) -> list[MessageBatch]:
        """Observed batches filtered by round, kind and sub-step."""
        return [
            m
            for m in self.messages
            if (round_ is None or m.round == round_)
            and (kind is None or m.kind == kind)
            and (step is None or m.step == step)
        ]

    def received(
        self, node: int, round_: int, kind: str | None = None, step: int = 0
    ) -> dict[int, torch.Tensor]:
        """``sender -> payload`` of what ``node`` received in ``round_`` (if observed)."""
        out: dict[int, torch.Tensor] = {}
        for m in self.select(round_, kind, step):
            senders, payloads = m.received_by(node)
            out.update({int(s): p for s, p in zip(senders, payloads, strict=True)})
        return out
