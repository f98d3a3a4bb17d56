"""What a defense's per-node hook is told: the node's context, a message's context.

A defense plugin writes each hook for **one** node (:class:`bench.defense.plugin.Defense`); the
harness runs it over all nodes at once with ``torch.func.vmap`` (:mod:`bench.defense.runner`).
Inside the call, every tensor the hook sees is that node's row: its gradient ``[P]``, its
per-sample gradients ``[B, P]``, one message ``[P]``, its persistent state. The node's id is a
0-d tensor (batched like the data): a hook may compute with it, never branch on it in Python.

The contexts are plain frozen records built by the harness inside the vmapped call; they hold no
object of bench (no simulation, channel, transcript or view), so nothing a hook receives leads
to the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

#: the receiver id of a message row that goes to every neighbour of its sender (a broadcast row)
BROADCAST = -2

#: a node's persistent state: ``name -> tensor`` (one node's rows under the hook's call)
NodeState = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class NodeContext:
    """Where a per-node hook runs.

    Attributes
    ----------
    round, step:
        The communication round and the local (or solver) step within it.
    node:
        This row's node id, a 0-d ``int64`` tensor.
    state:
        This node's persistent state (:meth:`~bench.defense.plugin.Defense.init_state`), read
        only: a hook that changes it returns ``(output, new_state)``.
    """

    round: int
    step: int
    node: torch.Tensor
    state: NodeState


@dataclass(frozen=True)
class MessageContext:
    """Where a per-message hook runs (``outgoing`` at the sender, ``decode`` at the receiver).

    Attributes
    ----------
    round, step, kind:
        The message's round, sub-step and kind (``"gradient"``, ``"model"``, ``"delta_z"`` …).
    sender, receiver:
        Node ids, 0-d ``int64`` tensors (``-1``: the server; :data:`BROADCAST`: a row every
        neighbour of the sender receives).
    state:
        The state of the node running the hook (the sender's in ``outgoing``, the receiver's in
        ``decode``), read only.
    own:
        ``decode`` only: the receiver's own row this message is combined with (its model in
        gossip, the model the server sent in FedSGD/FedAvg, the edge variable in PDMM).
    statistic:
        ``decode`` only: what :meth:`~bench.defense.plugin.Defense.receive_statistic` computed
        for this receiver from all of its deliveries (``None`` without it).
    """

    round: int
    step: int
    kind: str
    sender: torch.Tensor
    receiver: torch.Tensor
    state: NodeState
    own: torch.Tensor | None = None
    statistic: torch.Tensor | None = None
