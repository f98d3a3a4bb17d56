"""Threat models: which deliveries an adversary observes and what else it holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from bench.core.errors import BenchInputError
from bench.core.registry import Registry
from bench.simulation.messages import MessageBatch
from bench.simulation.transcript import Observer, Transcript
from bench.threats.view import PublicKnowledge, View

if TYPE_CHECKING:
    from bench.data.stacked import NodeData

THREATS: Registry = Registry("threat")


class Threat(Observer):
    """A threat model: an :class:`Observer` plus the construction of its :class:`View`.

    Parameters
    ----------
    coalition:
        Corrupt nodes (their data, states and received messages are the adversary's).
    """

    name = "threat"

    def __init__(self, coalition: Sequence[int] = ()) -> None:
        self.coalition = tuple(int(v) for v in coalition)
        self.state_nodes = self.coalition
        #: the coalition's nodes decode what is delivered to them with their own keys
        self.insiders = self.coalition
        self._coalition_t: torch.Tensor | None = None

    def bind(self, n_nodes: int) -> Threat:
        """Check the coalition against the run's nodes."""
        for v in self.coalition:
            if not 0 <= v < n_nodes:
                raise BenchInputError(
                    f"threat.{self.name}.coalition",
                    list(self.coalition),
                    reason=f"node {v} does not exist; nodes are 0..{n_nodes - 1}",
                )
        if len(set(self.coalition)) != len(self.coalition):
            raise BenchInputError(
                f"threat.{self.name}.coalition", list(self.coalition), reason="repeated node"
            )
        return self

    def _in_coalition(self, ids: torch.Tensor) -> torch.Tensor:
        if self._coalition_t is None or self._coalition_t.device != ids.device:
            self._coalition_t = torch.tensor(self.coalition, dtype=torch.long, device=ids.device)
        return torch.isin(ids, self._coalition_t)

    def visible(self, msgs: MessageBatch) -> torch.Tensor:
        raise NotImplementedError

    def view(self, transcript: Transcript, key: str, knowledge: PublicKnowledge, node_data: NodeData) -> View:
        """The View of observer ``key`` of ``transcript``: observations, own data and states."""
        own = {}
        for v in self.coalition:
            n = int(node_data.counts[v])
            own[v] = (node_data.x[v, :n].clone(), node_data.y[v, :n].clone())
        return View(
            threat=self.name,
            coalition=self.coalition,
            messages=list(transcript.messages[key]),
            own_data=own,
            own_states=dict(transcript.states[key]),
            knowledge=knowledge,
            totals={kind: run.to(transcript.device) for kind, run in transcript.running[key].items()},
            decoded=dict(transcript.decoded.get(key, {})),
        )
