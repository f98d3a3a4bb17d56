"""Decentralized protocols on a communication graph: D-PSGD and plain gossip averaging.

Messages are node broadcasts of kind ``model`` (D-PSGD) or ``value`` (gossip averaging), one
batch per gossip step, plaintext, delivered along every directed edge of the graph.

Defense contract: D-PSGD's gradients pass ``per_sample_gradients``/``local_gradients`` and its
half-step models ``local_update``; every gossip step's broadcast passes ``outgoing``; the mixing
``x_v⁺ = W_vv x_v + Σ_u W_vu m_{u→v}`` is the aggregation rule (``decode`` per delivered message,
then the rule, with ``own`` = the receivers' own vectors).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from bench.core.errors import require, require_positive_int
from bench.defense.hooks import Aggregator, DefenseHooks, RoundContext
from bench.protocols.base import PROTOCOLS, BatchPlan, Protocol, State, check_batch, check_lr
from bench.simulation.messages import MessageBatch

if TYPE_CHECKING:
    from bench.data.stacked import NodeBatch


class _Gossiping(Protocol):
    def gossip(self, t: int, state: State, x: torch.Tensor, steps: int, kind: str) -> torch.Tensor:
        """``steps`` synchronous gossip steps ``x ← W x`` through the channel (Boyd et al. 2006)."""
        c = self.context
        assert c.mixer is not None
        for k in range(steps):
            ctx = RoundContext(t, k)
            delivered = c.channel.send(MessageBatch.broadcast(t, k, kind, x, c.edges), ctx)
            x = c.channel.aggregate(self.aggregation_rule(kind, ctx), x, delivered, ctx)
        return x

    def aggregation_rule(self, kind: str, ctx: RoundContext) -> Aggregator:
        """Gossip mixing ``x_v⁺ = W_vv x_v + Σ_u W_vu m_{u→v}``."""
        assert self.context.mixer is not None
        return self.context.mixer.mix

    def delivery_slots(self, delivered: MessageBatch, ctx: RoundContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Delivery ``u → v`` lands in row ``v`` with coefficient ``W_vu``."""
        assert self.context.mixer is not None
        recv, send = delivered.receivers, delivered.edge_senders
        return recv, self.context.mixer.W.to(delivered.payload.device)[recv, send]


@PROTOCOLS.register("dpsgd", "D-PSGD: local SGD step(s) then K gossip steps of full models (Lian et al.)")
class DPSGD(_Gossiping):
    """D-PSGD (Lian et al. 2017; Pasquini et al. 2023, Algorithm 1).

    Round ``t``: every node takes ``local_steps`` SGD steps (optional momentum ``μ``),
    ``Θ_v^{t+½} = Θ_v^t − η ∇L(ξ_v^t, Θ_v^t)``, sends ``Θ_v^{t+½}`` to its neighbours and
    sets ``Θ_v^{t+1} = Σ_u W_vu Θ_u^{t+½}``, repeated for ``gossip_steps`` (K) steps. With the
    ``uniform`` mixing matrix ``W_vu = 1/|N(v)|`` (self-inclusive), as in Pasquini et al.

    Parameters
    ----------
    lr, momentum:
        Local SGD step ``η`` and heavy-ball momentum ``μ`` (0 disables it).
    batch_size, local_steps:
        Minibatch size (``None`` = full batch: D-GD) and local steps per round.
    gossip_steps:
        Gossip steps K after the local update.
    lr_milestones, lr_gamma:
        Step decay: the learning rate of round ``t`` is ``η γ^{#{m ∈ milestones : m ≤ t}}``
        (Pasquini et al. App. B: ×0.1 at rounds 200, 350 and 450 "to speed up consensus");
        public like ``η``, so an attacker follows it (:func:`lr_at`).

    Hooks
    -----
    per_sample_gradients, local_gradients: each local step
    local_update: the half-step model ``Θ_v^{t+½}``
    decode: the mix ``x_v⁺ = W_vv x_v + Σ_u W_vu m_{u→v}``
    """

    def __init__(
        self,
        lr: float = 0.1,
        batch_size: int | None = None,
        local_steps: int = 1,
        gossip_steps: int = 1,
        momentum: float = 0.0,
        lr_milestones: list[int] | tuple[int, ...] = (),
        lr_gamma: float = 0.1,
    ) -> None:
        super().__init__()
        self.lr = check_lr(lr)
        self.batch_size = check_batch(batch_size)
        self.local_steps = require_positive_int(local_steps, "protocol.local_steps")
        self.gossip_steps = require_positive_int(gossip_steps, "protocol.gossip_steps")
        require(
            isinstance(momentum, (int, float)) and not isinstance(momentum, bool) and 0 <= momentum < 1,
            "protocol.momentum",
            momentum,
            "must be a number in [0, 1)",
        )
        self.momentum = float(momentum)
        require(
            isinstance(lr_milestones, (list, tuple))
            and all(isinstance(m, int) and not isinstance(m, bool) and m > 0 for m in lr_milestones),
            "protocol.lr_milestones",
            lr_milestones,
            "must be a list of positive round indices",
        )
        self.lr_milestones = sorted(int(m) for m in lr_milestones)
        self.lr_gamma = check_lr(lr_gamma, "protocol.lr_gamma")

    hook_points = Protocol.hook_points | {"local_update"}

    @property
    def batch_plan(self) -> BatchPlan:
        return BatchPlan(self.batch_size, self.local_steps)

    MESSAGE_KINDS: ClassVar[dict[str, str]] = {
        "model": "node → neighbours: the half-step model Θ_v^{t+½} (then the mixed model, K > 1)"
    }

    def init_state(self, theta0: torch.Tensor) -> State:
        state = {"theta": theta0.clone()}
        if self.momentum:
            state["momentum"] = torch.zeros_like(theta0)
        return state

    def has_observed_gradient(self) -> bool:
        return self.local_steps == 1 and not self.momentum

    def observed_gradient(
        self,
        hooks: DefenseHooks,
        theta: torch.Tensor,
        per_sample: torch.Tensor,
        ctx: RoundContext,
        receiver: int,
    ) -> torch.Tensor:
        """``(Θ − m)/η`` of the model message ``m = outgoing(local_update(Θ − η g, Θ))`` that
        ``receiver`` gets after one local SGD step without momentum (Pasquini et al. §3.4: what
        the neighbour-recovery source reads); other local schedules have none."""
        if self.local_steps != 1 or self.momentum:
            raise NotImplementedError("the observed gradient is defined for one local step without momentum")
        assert ctx.nodes is not None
        lr = lr_at(self.hyperparameters(), ctx.round)
        grads = self.reduce_gradients(hooks, per_sample, RoundContext(ctx.round, 0, ctx.nodes))
        half = hooks.local_update(theta - lr * grads, theta, RoundContext(ctx.round, 0, ctx.nodes))
        rows = torch.arange(len(ctx.nodes), device=half.device)
        edges = torch.stack([rows, torch.full_like(rows, int(receiver))], dim=1)
        msgs = MessageBatch(ctx.round, 0, "model", half, ctx.nodes, edges)
        sent = hooks.outgoing(msgs, RoundContext(ctx.round, 0, ctx.nodes)).per_edge().payload
        return (theta - sent) / lr

    def round(self, t: int, state: State, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        assert batch is not None
        lr = lr_at(self.hyperparameters(), t)
        half, loss = self.local_sgd(t, state, state["theta"], batch, lr, self.momentum, own=True)
        state["theta"] = self.gossip(t, state, half, self.gossip_steps, "model")
        return {"loss": loss}


@PROTOCOLS.register("gossip_averaging", "synchronous gossip averaging x <- W x of fixed private vectors")
class GossipAveraging(_Gossiping):
    """Gossip averaging (Boyd et al. 2006; the El Mrini et al. 2024 attack setting).

    Node ``v``'s private vector ``x_v`` is the mean of its local samples (flattened; with one
    sample per node, the sample itself). Every round each node broadcasts its current value and
    averages: ``X^{k+1} = W X^k``, so ``X^k = W^k X^0 → x̄`` at rate ``(1 − γ)^k`` where ``γ`` is
    the spectral gap of a symmetric doubly-stochastic ``W``.

    Parameters
    ----------
    gossip_steps:
        Gossip steps per round (each is recorded as one message batch).

    Hooks
    -----
    decode: the mix ``x_v⁺ = W_vv x_v + Σ_u W_vu m_{u→v}``
    """

    uses_data = False
    hook_points = frozenset({"outgoing", "decode", "should_stop"})

    def __init__(self, gossip_steps: int = 1) -> None:
        super().__init__()
        self.gossip_steps = require_positive_int(gossip_steps, "protocol.gossip_steps")

    MESSAGE_KINDS: ClassVar[dict[str, str]] = {"value": "node → neighbours: its current value x_v^k"}

    def init_state(self, theta0: torch.Tensor) -> State:
        data = self.context.node_data
        x = data.x.flatten(2).to(device=theta0.device, dtype=theta0.dtype)
        valid = torch.arange(data.max_local, device=x.device)[None, :] < data.counts.to(x.device)[:, None]
        values = (x * valid[..., None]).sum(1) / data.counts.to(x.device, x.dtype)[:, None]
        return {"theta": values, "private": values.clone()}

    def round(self, t: int, state: State, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        state["theta"] = self.gossip(t, state, state["theta"], self.gossip_steps, "value")
        err = (state["theta"] - state["private"].mean(0)).pow(2).sum(1).mean()
        return {"loss": err}


def lr_at(hyperparameters: dict, t: int) -> float:
    """The learning rate of round ``t`` from public hyperparameters: ``lr · lr_gamma^k`` with
    ``k`` the number of ``lr_milestones`` at or before ``t`` (a constant ``lr`` without them)."""
    passed = sum(int(m) <= t for m in hyperparameters.get("lr_milestones", ()))
    return float(hyperparameters["lr"]) * float(hyperparameters.get("lr_gamma", 0.1)) ** passed
