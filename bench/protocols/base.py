"""The protocol interface, its narrow context, and the registry.

A protocol advances the stacked state of all nodes by one communication round. It sees the run
only through a :class:`ProtocolContext` (objective, channel, graph, local dataset sizes), so it
can be built and tested without a whole simulation. It computes gradients through
:meth:`Protocol.gradients` (the defense's gradient hooks), sends every message through the
:class:`~bench.simulation.channel.Channel` (``outgoing`` hook, adversary, transcript) and
combines what was delivered through :meth:`~bench.simulation.channel.Channel.aggregate`
(``decode`` and the mechanisms' wrapped rule): the defense contract of :mod:`bench.defense.hooks`, honoured
at the same points by every protocol.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bench.core.errors import require, require_number, require_positive_int
from bench.core.registry import Registry
from bench.defense.hooks import Aggregator, DefenseHooks, RoundContext
from bench.simulation.messages import MessageBatch

if TYPE_CHECKING:
    from bench.data.stacked import NodeBatch, NodeData
    from bench.simulation.channel import Channel
    from bench.simulation.mixing_op import GossipMixer
    from bench.simulation.objective import NodeObjective

PROTOCOLS: Registry = Registry("protocol")

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class BatchPlan:
    """How many samples a node uses per round: ``batch_size`` (``None`` = full batch) for
    ``local_steps`` steps, or ``local_epochs`` passes over the local set."""

    batch_size: int | None = None
    local_steps: int = 1
    local_epochs: int | None = None


@dataclass
class ProtocolContext:
    """Everything a protocol may use of the run.

    Attributes
    ----------
    n_nodes, seed, dtype:
        Number of nodes, the run's seed, the state's dtype.
    objective:
        The vectorized per-node loss and gradients.
    channel:
        Sends messages (defense ``outgoing``, adversary, transcript) and runs aggregation rules
        (the defense's ``decode`` and mechanisms); ``channel.hooks`` are the defense's hooks.
    node_data:
        The stacked local datasets (sizes ``counts`` for weighting; the values themselves for
        gossip averaging of local means).
    edges:
        ``[E, 2]`` directed edges of the communication graph, lexicographic (empty for
        federated protocols).
    mixer:
        The gossip mixing operator of the graph's mixing matrix (``None`` when federated).
    compile:
        Whether the protocol's fused round kernels run compiled (:mod:`bench.simulation.kernels`).
    """

    n_nodes: int
    seed: int
    dtype: torch.dtype
    objective: NodeObjective
    channel: Channel
    node_data: NodeData
    edges: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 2, dtype=torch.long))
    mixer: GossipMixer | None = None
    compile: bool = False

    @property
    def hooks(self) -> DefenseHooks:
        return self.channel.hooks

    @property
    def counts(self) -> torch.Tensor:
        return self.node_data.counts


class Protocol(ABC):
    """Base class. Subclasses set :attr:`federated`, :attr:`MESSAGE_KINDS`, :attr:`hook_points`
    and implement :meth:`round`."""

    #: a federated protocol has a server (node id ``SERVER``); a decentralized one a graph
    federated: ClassVar[bool] = False
    #: whether nodes train on data (gossip averaging of fixed vectors does not)
    uses_data: ClassVar[bool] = True
    #: ``kind -> what it is``: every kind of message nodes may send under this protocol
    MESSAGE_KINDS: ClassVar[dict[str, str]] = {}
    #: the defense hooks the protocol calls (:data:`bench.defense.hooks.HOOK_NAMES`)
    hook_points: ClassVar[frozenset[str]] = frozenset(
        {"per_sample_gradients", "local_gradients", "outgoing", "decode", "should_stop"}
    )

    def __init__(self) -> None:
        self._ctx: ProtocolContext | None = None

    # ---------------------------------------------------------------------------- set-up
    def bind(self, ctx: ProtocolContext) -> None:
        """Attach to a run's context (objective, channel, graph, data sizes)."""
        self._ctx = ctx

    @property
    def context(self) -> ProtocolContext:
        if self._ctx is None:
            raise RuntimeError(f"{type(self).__name__} is not bound to a run (call bind first)")
        return self._ctx

    @property
    def batch_plan(self) -> BatchPlan:
        return BatchPlan()

    def message_kinds(self) -> dict[str, str]:
        """``kind -> what it is`` for the kinds of message the *nodes* send in this configuration
        (the ones the defense's ``outgoing`` hook sees); server messages are not listed.
        Default: every kind of :attr:`MESSAGE_KINDS`."""
        return dict(self.MESSAGE_KINDS)

    def init_state(self, theta0: torch.Tensor) -> State:
        """State at round 0 from the stacked initial parameters ``[N, P]``."""
        return {"theta": theta0.clone()}

    def aggregation_rule(self, kind: str, ctx: RoundContext) -> Aggregator:
        """The receivers' rule ``aggregate(own, delivered) -> new`` for delivered messages of
        ``kind`` at ``ctx`` (what the protocol hands the channel, which runs it on the decoded
        deliveries)."""
        raise NotImplementedError(f"{type(self).__name__} has no aggregation of {kind} messages")

    def delivery_slots(self, delivered: MessageBatch, ctx: RoundContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Where each delivery of ``delivered`` enters the undefended rule
        :meth:`aggregation_rule`, which is linear in every delivered message: the row of the
        rule's output it lands in ``[E]`` (``0`` for a server's single output) and its coefficient
        ``c_e`` ``[E]``, so that ``aggregate(own, D) − aggregate(own, D with m_e = 0)`` is
        ``c_e m_e`` in that row. The rows say which row of the rule's own state each delivery is
        combined with (``msg.own`` of the defense's ``decode``, :mod:`bench.simulation.channel`)."""
        raise NotImplementedError(f"{type(self).__name__} does not declare its delivery slots")

    def observed_gradient(
        self,
        hooks: DefenseHooks,
        theta: torch.Tensor,
        per_sample: torch.Tensor,
        ctx: RoundContext,
        receiver: int,
    ) -> torch.Tensor:
        """What an observer at ``receiver`` reads as the gradient of the nodes ``ctx.nodes``
        (one row each) in round ``ctx.round``, had their per-sample gradients at ``theta [n, P]``
        been ``per_sample [n, B, P]``: the node's send pipeline through the defense's ``hooks`` —
        :meth:`reduce_gradients`, then the protocol's own steps and ``outgoing`` — mapped back
        to gradient space the way the gradient attacks read the message
        (:mod:`bench.attacks.observe.targets`). The defense oracle runs it on attacker-chosen inputs
        (:mod:`bench.evaluation.oracle`); protocols without it have no generic defense-aware
        attack."""
        raise NotImplementedError(f"{type(self).__name__} has no observed gradient")

    def has_observed_gradient(self) -> bool:
        """Whether :meth:`observed_gradient` is defined for this configuration."""
        return False

    def observed_gradient_covers(self, hooks: frozenset[str]) -> bool:
        """Whether :meth:`observed_gradient` reproduces what a defense overriding ``hooks`` (the
        send-side ones) does to the observed gradient: all of them by default; a protocol whose
        message depends on more than the node's gradient (state the oracle does not have) says
        which it covers."""
        return True

    def observed_update(
        self, hooks: DefenseHooks, theta: torch.Tensor, update: torch.Tensor, ctx: RoundContext, receiver: int
    ) -> torch.Tensor:
        """What an observer at ``receiver`` reads as the local update of the nodes ``ctx.nodes``
        (one row each) in round ``ctx.round``, had their local training taken them from ``theta
        [n, P]`` to ``theta + update``: the hooks that act on the trained model and its message
        (``local_update``, ``outgoing``), mapped back to update space the way the update attacks
        read the message. Defined where a protocol's uploads are local models (FedAvg); the
        per-step hooks are not in it
        (:data:`~bench.attacks.inversion.oracle_transform.PER_STEP_HOOKS`)."""
        raise NotImplementedError(f"{type(self).__name__} has no observed update")

    def has_observed_update(self) -> bool:
        """Whether :meth:`observed_update` is defined for this configuration."""
        return False

    def reduce_gradients(
        self, hooks: DefenseHooks, per_sample: torch.Tensor, ctx: RoundContext
    ) -> torch.Tensor:
        """Per-node gradients ``[n, P]`` from per-sample gradients ``[n, B, P]`` (every sample
        real) as :meth:`gradients` forms them: ``per_sample_gradients`` (by its two parts under
        ``weighted_per_sample``) when the defense asks for per-sample gradients, else the mean;
        then ``local_gradients``."""
        mask = torch.ones(per_sample.shape[:2], dtype=torch.bool, device=per_sample.device)
        if hooks.per_sample:
            grads = hooks.per_sample_gradients(per_sample, mask, ctx)
        else:
            grads = per_sample.mean(1)
        return hooks.local_gradients(grads, ctx)

    @abstractmethod
    def round(self, t: int, state: State, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        """Run round ``t`` in place on ``state``; return per-round metrics (e.g. ``loss``)."""

    def hyperparameters(self) -> dict[str, Any]:
        """Public hyperparameters (what the task may declare known to the attacker)."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    # ---------------------------------------------------- the defense contract's gradient path
    def gradients(
        self,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        ctx: RoundContext,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-node gradients ``[n, P]`` of the mean minibatch loss at ``theta [n, P]`` and the
        losses ``[n]``, through the defense's hooks: per-sample gradients reduced by
        ``per_sample_gradients`` when the defense asks for them (by its two parts
        ``sample_weights``/``sample_sum`` on the objective's weighted sum when it declares
        ``weighted_per_sample``), then ``local_gradients``."""
        c = self.context
        hooks = c.hooks
        if hooks.per_sample and hooks.weighted_per_sample:  # the same reduction, g never formed
            total, losses = c.objective.weighted_sample_sum(
                theta, x, y, mask, lambda norms: hooks.sample_weights(norms, mask, ctx)
            )
            grads = hooks.sample_sum(total, mask, ctx)
        elif hooks.per_sample:
            per_sample, losses = c.objective.sample_grads(theta, x, y, mask)
            grads = hooks.per_sample_gradients(per_sample, mask, ctx)
        else:
            grads, losses = c.objective.node_grads(theta, x, y, mask)
        return hooks.local_gradients(grads, ctx), losses

    # helpers shared by the learning protocols ---------------------------------------------
    def local_sgd(
        self,
        t: int,
        state: State,
        theta: torch.Tensor,
        batch: NodeBatch,
        lr: float,
        momentum: float = 0.0,
        nodes: torch.Tensor | None = None,
        own: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``S`` local SGD steps of the nodes in ``theta [n, P]`` on ``batch`` (``[N, S, B, …]``),
        then the defense's ``local_update`` hook.

        ``θ ← θ − η (μ m + g)`` with heavy-ball momentum ``m ← μ m + g`` kept in
        ``state["momentum"]`` (PyTorch's SGD convention); a step whose minibatch is fully
        masked is skipped. Returns the updated parameters and the mean loss of the first step.

        Without momentum and with no defense hook on the gradients, ``g`` is seen by nobody, and
        each step is :meth:`~bench.simulation.objective.NodeObjective.descend` (the step folded
        into the gradient's products; a fully masked node has ``g = 0`` and does not move).
        ``own`` says that ``theta`` is the protocol's state, replaced by what this round
        returns, and that nobody keeps it (the engine's snapshots and the transcript copy what
        they record): the steps then overwrite it unless ``local_update`` needs the start.
        Later fused steps overwrite the previous step's fresh output in any case.
        """
        x, y, mask = batch.x, batch.y, batch.mask
        if nodes is not None:
            x, y, mask = x[nodes], y[nodes], mask[nodes]
        hooks = self.context.hooks
        overridden = hooks.active_hooks()
        fused = not momentum and not hooks.per_sample and "local_gradients" not in overridden
        in_place = own and nodes is None and "local_update" not in overridden
        start = theta
        first_loss = None
        for s in range(x.shape[1]):
            if fused:
                theta, losses = self.context.objective.descend(
                    theta, x[:, s], y[:, s], mask[:, s], lr, in_place=in_place or s > 0
                )
                first_loss = losses.mean() if first_loss is None else first_loss
                continue
            grads, losses = self.gradients(theta, x[:, s], y[:, s], mask[:, s], RoundContext(t, s, nodes))
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
            if bool(active.all()):  # θ − η g: an axpy, faster than the broadcast addcmul
                theta = torch.add(theta, grads, alpha=-lr)
            else:
                theta = torch.addcmul(theta, active, grads, value=-lr)  # θ − η·active·g
            if first_loss is None:
                first_loss = losses.mean()
        assert first_loss is not None
        return self.context.hooks.local_update(theta, start, RoundContext(t, 0, nodes)), first_loss


def check_lr(lr: Any, field: str = "protocol.lr") -> float:
    return require_number(lr, field)


def check_batch(batch_size: int | None, field: str = "protocol.batch_size") -> int | None:
    return None if batch_size is None else require_positive_int(batch_size, field)


def check_fraction(value: Any, field: str, *, closed_low: bool = False) -> float:
    """A number in ``(0, 1]`` (``[0, 1]`` with ``closed_low``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = ok and (0 <= value <= 1 if closed_low else 0 < value <= 1)
    require(ok, field, value, "must be in [0, 1]" if closed_low else "must be in (0, 1]")
    return float(value)
