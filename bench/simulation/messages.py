"""Batches of transmitted messages.

A :class:`MessageBatch` holds every message of one kind sent in one (sub-)round, in a form that
avoids copying payloads per edge: ``payload[S, P]`` holds distinct message contents and each
directed edge ``(row, receiver)`` says which row a receiver gets. A broadcast (every node sends
its row to all its neighbours) has ``S = N``; per-edge (unicast) messages have one row per edge.
The server of a federated protocol is node id :data:`SERVER` (``-1``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

SERVER = -1


@dataclass
class MessageBatch:
    """Messages of one kind sent in round ``round``, sub-step ``step``.

    Attributes
    ----------
    round, step:
        Communication round and sub-step within it (gossip step, protocol phase).
    kind:
        What the payload is: ``"model"``, ``"gradient"``, ``"global_model"``, ``"value"`` …
    payload:
        ``[S, P]`` message contents.
    senders:
        ``[S]`` node id that sent each payload row.
    edges:
        ``[E, 2]`` pairs ``(payload row, receiver id)``: one entry per delivered message.
    secure:
        ``True`` for a secure (encrypted, authenticated) channel: invisible to eavesdroppers.
    node_broadcast:
        ``True`` when row ``i`` is node ``i``'s message to all of its neighbours in the
        communication graph (the layout gossip mixing can use as one matrix product).
    extra:
        Plain data (:mod:`bench.core.wire`) a defense sends along with the batch and its receivers
        read (e.g. the unmasking shares of secure aggregation): part of what is delivered.
    """

    round: int
    step: int
    kind: str
    payload: torch.Tensor
    senders: torch.Tensor
    edges: torch.Tensor
    secure: bool = False
    node_broadcast: bool = False
    extra: dict[str, Any] | None = None

    @classmethod
    def broadcast(
        cls,
        round_: int,
        step: int,
        kind: str,
        payload: torch.Tensor,
        edges: torch.Tensor,
        secure: bool = False,
    ) -> MessageBatch:
        """Every node ``i`` sends ``payload[i]`` over the directed ``edges [E, 2]`` ``(i, j)``."""
        senders = torch.arange(payload.shape[0], device=payload.device)
        return cls(round_, step, kind, payload, senders, edges, secure, node_broadcast=True)

    @classmethod
    def from_one(
        cls,
        round_: int,
        step: int,
        kind: str,
        sender: int,
        payload: torch.Tensor,
        receivers: torch.Tensor,
        secure: bool = False,
    ) -> MessageBatch:
        """One sender sends the same ``payload [P]`` to every id in ``receivers``."""
        edges = torch.stack([torch.zeros_like(receivers), receivers], dim=1)
        senders = torch.tensor([sender], device=payload.device)
        return cls(round_, step, kind, payload.unsqueeze(0), senders, edges, secure)

    @classmethod
    def to_one(
        cls,
        round_: int,
        step: int,
        kind: str,
        senders: torch.Tensor,
        payload: torch.Tensor,
        receiver: int,
        secure: bool = False,
    ) -> MessageBatch:
        """Each of ``senders`` sends its row of ``payload [S, P]`` to ``receiver``."""
        rows = torch.arange(len(senders), device=payload.device)
        edges = torch.stack([rows, torch.full_like(rows, receiver)], dim=1)
        return cls(round_, step, kind, payload, senders, edges, secure)

    @property
    def receivers(self) -> torch.Tensor:
        return self.edges[:, 1]

    @property
    def edge_senders(self) -> torch.Tensor:
        return self.senders[self.edges[:, 0]]

    def __len__(self) -> int:
        return int(self.edges.shape[0])

    def with_payload(self, payload: torch.Tensor) -> MessageBatch:
        """The same deliveries with new contents (what a transforming defense returns)."""
        return replace(self, payload=payload)

    def per_edge(self) -> MessageBatch:
        """Unicast layout: one payload row per delivered message (so each can be changed)."""
        rows = self.edges[:, 0]
        edges = torch.stack([torch.arange(len(rows), device=rows.device), self.edges[:, 1]], dim=1)
        return replace(
            self, payload=self.payload[rows], senders=self.senders[rows], edges=edges, node_broadcast=False
        )

    def restrict(self, edge_mask: torch.Tensor) -> MessageBatch:
        """Only the deliveries where ``edge_mask`` is true, with the payload rows they use."""
        edges = self.edges[edge_mask]
        rows, inverse = torch.unique(edges[:, 0], return_inverse=True)
        new_edges = torch.stack([inverse.reshape(-1), edges[:, 1]], dim=1)
        return replace(
            self,
            payload=self.payload[rows],
            senders=self.senders[rows],
            edges=new_edges,
            node_broadcast=False,
        )

    def received_by(self, node: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sender ids [k], payloads [k, P])`` of the messages delivered to ``node``."""
        sel = self.edges[self.edges[:, 1] == node]
        return self.senders[sel[:, 0]], self.payload[sel[:, 0]]

    def detached(self, device: torch.device | str = "cpu") -> MessageBatch:
        """A copy that owns its memory (for the transcript)."""
        return replace(
            self,
            payload=self.payload.detach().to(device, copy=True),
            senders=self.senders.to(device, copy=True),
            edges=self.edges.to(device, copy=True),
        )

    def to_wire(self) -> dict[str, Any]:
        """Plain data (:mod:`bench.core.wire`)."""
        return {
            "round": int(self.round),
            "step": int(self.step),
            "kind": str(self.kind),
            "payload": self.payload.detach(),
            "senders": self.senders,
            "edges": self.edges,
            "secure": bool(self.secure),
            "node_broadcast": bool(self.node_broadcast),
            "extra": self.extra,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> MessageBatch:
        return cls(**data)
