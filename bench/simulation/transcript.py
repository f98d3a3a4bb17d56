"""The transcript recorder: keeps exactly what the configured observers see, in declared rounds.

Observers (one per threat model) are declared up front together with the rounds to record, so
memory stays bounded: a 1,000-round run that records 3 rounds holds 3 rounds. Each observer
stores only the deliveries it can see (:meth:`Observer.visible`) and, for corrupt nodes, their
own states at the start of each recorded round.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from bench.simulation.messages import MessageBatch


class Observer:
    """Which deliveries an adversary sees. Subclasses override :meth:`visible`."""

    #: nodes whose own states the observer holds (corrupt nodes); empty for outsiders
    state_nodes: tuple[int, ...] = ()
    #: receivers whose own defense code the observer runs — a participant holds its keys
    #: (:mod:`bench.simulation.channel`); the server is :data:`~bench.simulation.messages.SERVER`
    insiders: tuple[int, ...] = ()

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
            from bench.core.errors import BenchInputError

            raise BenchInputError("record.rounds", rounds, reason="give a list of rounds or 'all'")
        return cls(frozenset(int(r) for r in rounds))

    def __contains__(self, t: int) -> bool:
        return self.every or t in self.indices


@dataclass
class RunningTotal:
    """The sum, over every round of a run, of the payloads of one message kind delivered along
    each observed ``(sender, receiver)`` pair, with the last round's batch.

    This is what a receiver of differential messages integrates anyway (PDMM's
    ``z^(t) = z^(0) + Σ_τ Δz^(τ)``), kept in ``O(pairs × P)`` memory whatever the run's length, so
    that attacks needing a whole transcript only through such sums (the telescoped weight
    increments of :mod:`bench.attacks.observe.pdmm_observables`) can record a few rounds
    explicitly instead of all of them.

    Attributes
    ----------
    senders, receivers:
        ``[E]`` the observed pairs, sorted by ``(sender, receiver)``.
    total:
        ``[E, P]`` the summed payloads per pair.
    rounds:
        The number of distinct rounds summed (``last_round + 1`` when every round was seen).
    last_round:
        The latest round summed.
    last:
        That round's observed batch (restricted to the observer's deliveries).
    """

    senders: torch.Tensor
    receivers: torch.Tensor
    total: torch.Tensor
    rounds: int
    last_round: int
    last: MessageBatch

    @classmethod
    def start(cls, msgs: MessageBatch) -> RunningTotal:
        empty = torch.zeros(0, dtype=torch.long, device=msgs.payload.device)
        total = msgs.payload.new_zeros(0, msgs.payload.shape[1])
        return cls(empty, empty.clone(), total, 0, -1, msgs).add(msgs)

    def add(self, msgs: MessageBatch) -> RunningTotal:
        """Add the deliveries of ``msgs`` (already restricted to what the observer sees)."""
        senders, receivers = msgs.edge_senders, msgs.receivers
        offset = int(max(int(receivers.max()), int(self.receivers.max()) if len(self.receivers) else 0)) + 2
        keys = (self.senders + 1) * offset + self.receivers + 1  # the server (-1) sorts first
        new = (senders + 1) * offset + receivers + 1
        merged = torch.unique(torch.cat([keys, new]))
        if merged.numel() != keys.numel():  # new pairs: widen the table
            total = self.total.new_zeros(merged.numel(), self.total.shape[1])
            total[torch.searchsorted(merged, keys)] = self.total
            self.total = total
            self.senders, self.receivers = merged // offset - 1, merged % offset - 1
        rows = torch.searchsorted(merged, new)
        self.total.index_add_(0, rows, msgs.payload[msgs.edges[:, 0]].to(self.total.dtype))
        if msgs.round != self.last_round:
            self.rounds += 1
            self.last_round = msgs.round
            self.last = msgs
        else:  # a second batch of the same kind in the same round
            self.last = _concat(self.last, msgs)
        return self

    def to(self, device: torch.device | str) -> RunningTotal:
        return RunningTotal(
            self.senders.to(device),
            self.receivers.to(device),
            self.total.to(device, copy=True),
            self.rounds,
            self.last_round,
            self.last.detached(device),
        )

    def to_wire(self) -> dict[str, Any]:
        """Plain data (:mod:`bench.core.wire`)."""
        return {
            "senders": self.senders,
            "receivers": self.receivers,
            "total": self.total,
            "rounds": int(self.rounds),
            "last_round": int(self.last_round),
            "last": self.last.to_wire(),
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> RunningTotal:
        return cls(**{**data, "last": MessageBatch.from_wire(data["last"])})


def _concat(a: MessageBatch, b: MessageBatch) -> MessageBatch:
    edges = torch.cat([a.edges, b.edges + torch.tensor([a.payload.shape[0], 0], device=b.edges.device)])
    return MessageBatch(
        a.round,
        a.step,
        a.kind,
        torch.cat([a.payload, b.payload]),
        torch.cat([a.senders, b.senders]),
        edges,
        a.secure,
    )


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
    totals:
        Message kinds whose observed deliveries are also summed over *every* round, recorded
        or not (:class:`RunningTotal`); the corrupt nodes' final states are then kept as well.
    """

    observers: dict[str, Observer]
    rounds: Rounds = field(default_factory=Rounds)
    kinds: frozenset[str] | None = None
    device: str = "cpu"
    messages: dict[str, list[MessageBatch]] = field(default_factory=dict)
    states: dict[str, dict[int, torch.Tensor]] = field(default_factory=dict)
    totals: frozenset[str] = frozenset()
    running: dict[str, dict[str, RunningTotal]] = field(default_factory=dict)
    #: ``observer -> {index in messages -> the same deliveries as the observer's nodes decode
    #: them}`` (participants only, where decoding changes something; :meth:`record_decoded`)
    decoded: dict[str, dict[int, MessageBatch]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.observers:
            self.decoded.setdefault(name, {})
            self.messages.setdefault(name, [])
            self.states.setdefault(name, {})
            self.running.setdefault(name, {})

    def wants(self, round_: int) -> bool:
        return bool(self.observers) and round_ in self.rounds

    def record(self, msgs: MessageBatch) -> dict[str, int]:
        """Store, for every observer, the deliveries of ``msgs`` it can see (in declared rounds
        and kinds), and add them to its running totals (every round, kinds ``totals``). Returns
        ``observer -> index`` of the batches stored."""
        keep = self.wants(msgs.round) and (self.kinds is None or msgs.kind in self.kinds)
        total = bool(self.observers) and msgs.kind in self.totals
        stored: dict[str, int] = {}
        if not (keep or total):
            return stored
        for name, obs in self.observers.items():
            mask = obs.visible(msgs)
            if not bool(mask.any()):
                continue
            seen = msgs.restrict(mask)
            if keep:
                stored[name] = len(self.messages[name])
                self.messages[name].append(seen.detached(self.device))
            if total:  # restrict() gathered fresh rows: detaching them needs no copy
                run = self.running[name].get(msgs.kind)
                seen = replace(seen, payload=seen.payload.detach())
                self.running[name][msgs.kind] = RunningTotal.start(seen) if run is None else run.add(seen)
        return stored

    def record_decoded(self, decoded: MessageBatch, stored: dict[str, int]) -> None:
        """For the observers of ``stored`` (:meth:`record`'s answer for the same batch), keep the
        deliveries they saw as ``decoded`` (the batch in per-edge layout, each delivery to an
        insider as that insider's code decodes it, :mod:`bench.simulation.channel`)."""
        for name, index in stored.items():
            obs = self.observers[name]
            if not obs.insiders:
                continue
            mask = obs.visible(decoded)
            self.decoded[name][index] = decoded.restrict(mask).detached(self.device)

    def record_states(self, round_: int, theta: torch.Tensor, final: bool = False) -> None:
        """Store the corrupt nodes' own states ``theta[state_nodes]`` at the start of a round
        (``final``: after the last round, kept whenever running totals are)."""
        if not (self.wants(round_) or (final and self.totals and self.observers)):
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
        tot = sum(r.total.numel() * r.total.element_size() for v in self.running.values() for r in v.values())
        return msg + st + tot
