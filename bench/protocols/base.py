"""The protocol interface and registry.

A protocol advances the stacked state of all nodes by one communication round. It computes
local work with the simulation's vectorized objective, sends every message through the
:class:`~bench.simulation.channel.Channel` (so defenses, adversaries and the transcript see it)
and aggregates what was delivered.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bench.errors import require, require_positive_int
from bench.registry import Registry
from bench.simulation.hooks import RoundContext

if TYPE_CHECKING:
    from bench.data.stacked import NodeBatch
    from bench.simulation.engine import Simulation

PROTOCOLS: Registry = Registry("protocol")

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class BatchPlan:
    """How many samples a node uses per round: ``batch_size`` (``None`` = full batch) for
    ``local_steps`` steps, or ``local_epochs`` passes over the local set."""

    batch_size: int | None = None
    local_steps: int = 1
    local_epochs: int | None = None


class Protocol(ABC):
    """Base class. Subclasses set :attr:`federated` and implement :meth:`round`."""

    #: a federated protocol has a server (node id ``SERVER``); a decentralized one a graph
    federated: ClassVar[bool] = False
    #: whether nodes train on data (gossip averaging of fixed vectors does not)
    uses_data: ClassVar[bool] = True

    def __init__(self) -> None:
        self.sim: Simulation | None = None

    def bind(self, sim: Simulation) -> None:
        """Attach to a simulation (its objective, topology, channel and hooks)."""
        self.sim = sim

    @property
    def batch_plan(self) -> BatchPlan:
        return BatchPlan()

    def init_state(self, theta0: torch.Tensor) -> State:
        """State at round 0 from the stacked initial parameters ``[N, P]``."""
        return {"theta": theta0.clone()}

    @abstractmethod
    def round(self, t: int, state: State, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        """Run round ``t`` in place on ``state``; return per-round metrics (e.g. ``loss``)."""

    def hyperparameters(self) -> dict[str, Any]:
        """Public hyperparameters (what the task may declare known to the attacker)."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "sim"}

    # helpers shared by the learning protocols ---------------------------------------------
    def ctx(self, t: int, state: State) -> RoundContext:
        return RoundContext(t, state, self.sim)

    def local_sgd(
        self,
        t: int,
        state: State,
        theta: torch.Tensor,
        batch: NodeBatch,
        lr: float,
        momentum: float = 0.0,
        nodes: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``S`` local SGD steps of the nodes in ``theta [n, P]`` on ``batch`` (``[N, S, B, …]``).

        ``θ ← θ − η (μ m + g)`` with heavy-ball momentum ``m ← μ m + g`` kept in
        ``state["momentum"]`` (PyTorch's SGD convention); a step whose minibatch is fully
        masked is skipped. Returns the updated parameters and the mean loss of the first step.
        """
        assert self.sim is not None
        x, y, mask = batch.x, batch.y, batch.mask
        if nodes is not None:
            x, y, mask = x[nodes], y[nodes], mask[nodes]
        first_loss = None
        for s in range(x.shape[1]):
            grads, losses = self.sim.objective.node_grads(theta, x[:, s], y[:, s], mask[:, s])
            grads = self.sim.hooks.local_gradients(grads, self.ctx(t, state))
            # a node whose minibatch of this step is empty does not move
            active = mask[:, s].any(dim=1, keepdim=True).to(theta.dtype)
            if momentum:
                buf = state["momentum"] if nodes is None else state["momentum"][nodes]
                buf = torch.addcmul(buf, active, (momentum - 1.0) * buf + grads)  # m ← μ m + g where active
                if nodes is None:
                    state["momentum"] = buf
                else:
                    state["momentum"][nodes] = buf
                grads = buf
            theta = torch.addcmul(theta, active, grads, value=-lr)  # θ − η·active·g, no temporaries
            if first_loss is None:
                first_loss = losses.mean()
        assert first_loss is not None
        return theta, first_loss


def check_lr(lr: float, field: str = "protocol.lr") -> float:
    require(isinstance(lr, (int, float)) and lr > 0, field, lr, "must be a positive number")
    return float(lr)


def check_batch(batch_size: int | None, field: str = "protocol.batch_size") -> int | None:
    return None if batch_size is None else require_positive_int(batch_size, field)
