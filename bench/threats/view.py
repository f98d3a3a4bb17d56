"""What an adversary gets: a :class:`View` of the transcript plus declared public knowledge.

Attacks receive only a View — never ground truth and never other nodes' data (the "narrow
attacker contract" of breaching). A View is plain data: it is serialized in the simulation
process (:meth:`View.to_wire`) and rebuilt in the attack process (:meth:`View.from_wire`), one
fresh copy per attack, so an attack can neither reach the simulation's objects nor change what
the next attack sees. Knowledge the task declares private is absent from the View (its name is
listed as withheld, its value never serialized); the model is described by its registered name
and constructor arguments and rebuilt on the attacker's side (:attr:`View.model`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np
import torch

from bench.core.wire import WireError, dumps, loads
from bench.simulation.messages import MessageBatch
from bench.simulation.transcript import RunningTotal

if TYPE_CHECKING:
    from bench.simulation.flat import FlatModel

KNOWLEDGE_ITEMS = ("graph", "mixing", "architecture", "hyperparameters", "n_nodes", "protocol")


class KnowledgeError(LookupError):
    """An attack asked for something its View does not contain."""


def _graph_to_wire(graph: nx.Graph) -> dict[str, Any]:
    edges = sorted((int(u), int(v)) for u, v in graph.edges() if u != v)
    return {"n_nodes": graph.number_of_nodes(), "edges": torch.tensor(edges, dtype=torch.long).reshape(-1, 2)}


def _graph_from_wire(data: dict[str, Any]) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from(range(int(data["n_nodes"])))
    graph.add_edges_from(data["edges"].tolist())
    return graph


def _mixing_to_wire(w: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(w, dtype=np.float64))


def _mixing_from_wire(w: torch.Tensor) -> np.ndarray:
    return w.numpy()


#: ``item -> (to plain data, from plain data)`` for knowledge values that are not plain data
_CODECS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "graph": (_graph_to_wire, _graph_from_wire),
    "mixing": (_mixing_to_wire, _mixing_from_wire),
}


@dataclass(frozen=True)
class PublicKnowledge:
    """The facts about the run the task declares public.

    ``values`` maps public items of :data:`KNOWLEDGE_ITEMS` to their values; ``withheld`` names
    the items the run has but the task keeps private (their values are not here).
    """

    values: dict[str, Any]
    withheld: frozenset[str] = frozenset()

    @classmethod
    def declare(cls, values: dict[str, Any], public: Iterable[str] | None = None) -> PublicKnowledge:
        """Keep the ``public`` items of ``values`` (all when ``None``); the rest are withheld."""
        keep = set(values) if public is None else set(public)
        return cls(
            {k: v for k, v in values.items() if k in keep},
            frozenset(k for k in values if k not in keep),
        )

    def __getitem__(self, item: str) -> Any:
        if item in self.values:
            return self.values[item]
        if item in self.withheld:
            raise KnowledgeError(
                f"the task declares '{item}' private; an attack that needs it cannot run here"
            )
        raise KnowledgeError(f"'{item}' is not part of this run's knowledge (known: {sorted(self.values)})")

    def __contains__(self, item: object) -> bool:
        return item in self.values

    def to_wire(self) -> dict[str, Any]:
        values = {k: _CODECS[k][0](v) if k in _CODECS else v for k, v in self.values.items()}
        return {"values": values, "withheld": sorted(self.withheld)}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> PublicKnowledge:
        values = {k: _CODECS[k][1](v) if k in _CODECS else v for k, v in data["values"].items()}
        return cls(values, frozenset(data["withheld"]))


@dataclass(frozen=True)
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
    decoded:
        ``index in messages -> batch``: the same deliveries as the adversary's own nodes decode
        them with their own defense code and keys, where that differs from what travelled
        (participants only, :mod:`bench.simulation.channel`); :meth:`as_decoded` is the View
        with those batches in place.
    """

    threat: str
    coalition: tuple[int, ...]
    messages: list[MessageBatch]
    own_data: dict[int, tuple[torch.Tensor, torch.Tensor]]
    own_states: dict[int, torch.Tensor]
    knowledge: PublicKnowledge
    totals: dict[str, RunningTotal] = field(default_factory=dict)
    decoded: dict[int, MessageBatch] = field(default_factory=dict)

    def as_decoded(self) -> View:
        """This View with every observed batch its nodes decoded replaced by the decoded one."""
        messages = [self.decoded.get(i, m) for i, m in enumerate(self.messages)]
        return replace(self, messages=messages, decoded={})

    def sanitized(self) -> View:
        """This View with every absurd coordinate of a real-valued payload set to zero
        (:func:`absurd_coordinates`): what an attack reads, so that bait values a defense sends
        and its receivers drop cannot make the attacks' objectives overflow."""
        messages = [_sanitized(m) for m in self.messages]
        decoded = {i: _sanitized(m) for i, m in self.decoded.items()}
        return replace(self, messages=messages, decoded=decoded)

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

    @cached_property
    def model(self) -> FlatModel:
        """The declared architecture rebuilt from its name and constructor arguments
        (``knowledge["architecture"]``), once per View."""
        from bench.simulation.config import DTYPES
        from bench.simulation.flat import build_flat_model

        arch = self.knowledge["architecture"]
        return build_flat_model(
            arch["model"],
            tuple(arch["input_shape"]),
            int(arch["n_classes"]),
            DTYPES[arch["dtype"]],
            arch["params"],
        )

    # ------------------------------------------------------------------------- plain data
    def to_wire(self) -> dict[str, Any]:
        """Plain data (:mod:`bench.core.wire`): what crosses from the simulation to an attack."""
        return {
            "threat": self.threat,
            "coalition": list(self.coalition),
            "messages": [m.to_wire() for m in self.messages],
            "own_data": {int(v): [x, y] for v, (x, y) in self.own_data.items()},
            "own_states": {int(t): s for t, s in self.own_states.items()},
            "knowledge": self.knowledge.to_wire(),
            "totals": {k: r.to_wire() for k, r in self.totals.items()},
            "decoded": {int(i): m.to_wire() for i, m in self.decoded.items()},
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> View:
        try:
            return cls(
                threat=str(data["threat"]),
                coalition=tuple(int(v) for v in data["coalition"]),
                messages=[MessageBatch.from_wire(m) for m in data["messages"]],
                own_data={int(v): (xy[0], xy[1]) for v, xy in data["own_data"].items()},
                own_states={int(t): s for t, s in data["own_states"].items()},
                knowledge=PublicKnowledge.from_wire(data["knowledge"]),
                totals={str(k): RunningTotal.from_wire(r) for k, r in data["totals"].items()},
                decoded={int(i): MessageBatch.from_wire(m) for i, m in data.get("decoded", {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise WireError(f"not a View: {type(exc).__name__}: {exc}") from None

    def to_bytes(self) -> bytes:
        return dumps(self.to_wire())

    @classmethod
    def from_bytes(cls, data: bytes | torch.Tensor) -> View:
        """A fresh, independent View from serialized bytes or their :func:`~bench.core.wire.blob`
        (every tensor newly allocated)."""
        return cls.from_wire(loads(data))


#: a coordinate whose magnitude exceeds this multiple of the median magnitude of its row's
#: nonzero coordinates is absurd (a message carries no such outlier that an attack could use)
ABSURD_RATIO = 1e8
#: coordinates of a row whose median is taken (a strided sample of larger rows)
MEDIAN_SAMPLE = 65536


def absurd_coordinates(x: torch.Tensor) -> torch.Tensor:
    """``[S, P]`` mask of the coordinates of payload rows ``x`` an attack ignores: non-finite;
    beyond what a sum of squares over the row can hold in the payload's dtype
    (``|x| > √(max / P)``: the L2 objectives would overflow); or more than :data:`ABSURD_RATIO`
    times the median magnitude of the row's nonzero coordinates. A choice of bench (the papers'
    attacks assume honest messages), made so that a defense cannot buy privacy with bait values
    that its receivers drop and the attacks diverge on."""
    rows = x.reshape(x.shape[0], -1) if x.dim() > 1 else x.reshape(1, -1)
    bad = ~torch.isfinite(rows)
    limit = math.sqrt(torch.finfo(rows.dtype).max / max(rows.shape[1], 1))
    mag = torch.where(bad, torch.zeros_like(rows), rows.abs())
    bad |= mag > limit
    sample = mag[:, :: max(1, mag.shape[1] // MEDIAN_SAMPLE)]  # the median of a strided sample
    nonzero = torch.where(sample > 0, sample, torch.full_like(sample, float("nan")))
    median = torch.nanmedian(nonzero, dim=1, keepdim=True).values
    bad |= torch.nan_to_num(mag / median, nan=0.0) > ABSURD_RATIO
    return bad.reshape(x.shape)


def _sanitized(m: MessageBatch) -> MessageBatch:
    p = m.payload
    if not p.is_floating_point() or p.numel() == 0:
        return m
    bad = absurd_coordinates(p)
    return m if not bool(bad.any()) else m.with_payload(torch.where(bad, torch.zeros_like(p), p))
