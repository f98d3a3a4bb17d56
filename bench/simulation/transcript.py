"""The transcript recorder: keeps exactly what the configured observers see, in declared rounds.

Observers (one per threat model) are declared up front together with the rounds to record, so
memory stays bounded: a 1,000-round run that records 3 rounds holds 3 rounds. Each observer
stores only the deliveries it can see (:meth:`Observer.visible`) and, for corrupt nodes, their
own states at the start of each recorded round.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from bench.simulation.messages import MessageBatch


class Observer:
    """Which deliveries an adversary sees. Subclasses override :meth:`visible`."""

    #: nodes whose own states the observer holds (corrupt nodes); empty for outsiders
    state_nodes: tuple[int, ...] = ()

    def visible(self, msgs: MessageBatch) -> torch.Tensor:
        """Boolean mask ``[E]`` over ``msgs.edges``."""
        raise NotImplementedError


@dataclass
class Rounds:
    """A declared set of rounds: explicit indices, or every round (``every=True``).

    ``every=True`` is for small runs only; it is memory-unbounded by construction.
    """

    indices: frozenset[int] = frozenset()
    every: bool = False

    @classmethod
    def of(cls, rounds: Iterable[int] | str | None) -> Rounds:
        if rounds is None:
            return cls()
        if rounds == "all":
            return cls(every=True)
        if isinstance(rounds, str):
            from bench.errors import BenchInputError

            raise BenchInputError("record.rounds", rounds, reason="give a list of rounds or 'all'")
        return cls(frozenset(int(r) for r in rounds))

    def __contains__(self, t: int) -> bool:
        return self.every or t in self.indices


@dataclass
class Transcript:
    """Recorded observations per observer.

    Parameters
    ----------
    observers:
        ``name -> Observer``.
    rounds:
        Rounds to record.
    kinds:
        Message kinds to keep (``None``: all).
    """

    observers: dict[str, Observer]
    rounds: Rounds = field(default_factory=Rounds)
    kinds: frozenset[str] | None = None
    device: str = "cpu"
    messages: dict[str, list[MessageBatch]] = field(default_factory=dict)
    states: dict[str, dict[int, torch.Tensor]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.observers:
            self.messages.setdefault(name, [])
            self.states.setdefault(name, {})

    def wants(self, round_: int) -> bool:
        return bool(self.observers) and round_ in self.rounds

    def record(self, msgs: MessageBatch) -> None:
        """Store, for every observer, the deliveries of ``msgs`` it can see."""
        if not self.wants(msgs.round) or (self.kinds is not None and msgs.kind not in self.kinds):
            return
        for name, obs in self.observers.items():
            mask = obs.visible(msgs)
            if bool(mask.any()):
                self.messages[name].append(msgs.restrict(mask).detached(self.device))

    def record_states(self, round_: int, theta: torch.Tensor) -> None:
        """Store the corrupt nodes' own states ``theta[state_nodes]`` at the start of a round."""
        if not self.wants(round_):
            return
        for name, obs in self.observers.items():
            if obs.state_nodes:
                idx = torch.tensor(obs.state_nodes, device=theta.device)
                self.states[name][round_] = theta[idx].detach().to(self.device, copy=True)

    def recorded_rounds(self, observer: str | None = None) -> list[int]:
        names = [observer] if observer else list(self.observers)
        found = {m.round for n in names for m in self.messages[n]}
        found |= {t for n in names for t in self.states[n]}
        return sorted(found)

    def num_deliveries(self, observer: str) -> int:
        return sum(len(m) for m in self.messages[observer])

    def payload_bytes(self) -> int:
        """Memory held by recorded payloads and states (bytes)."""
        msg = sum(m.payload.numel() * m.payload.element_size() for v in self.messages.values() for m in v)
        st = sum(s.numel() * s.element_size() for v in self.states.values() for s in v.values())
        return msg + st
