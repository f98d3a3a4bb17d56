"""The hook points every protocol calls, on stacked tensors: the harness side of the defense
contract, and the active-adversary hook.

Every protocol calls the same hooks at the same points of a round, on the stacked tensors of all
(sampled) nodes at once: :class:`DefenseHooks`. This is bench's own interface, not a plugin's: a
defense plugin writes its hooks for one node (:class:`bench.defense.plugin.Defense`) and the
harness's :class:`~bench.defense.runner.NodeRunner` implements these stacked hooks by running the
plugin's over every node with ``torch.func.vmap`` and then the harness's mechanisms
(:mod:`bench.defense.mechanisms`). The protocols, the defense oracle and the reference worlds
see only this interface. ``docs/hooks.md`` is the table of the plugin's hooks, generated from
their docstrings (``python -m bench.leaderboard.site.docs``).

A second hook point for *active adversaries* (:class:`AdversaryPolicy`) substitutes the
messages of corrupt nodes after the defense ran (an attacker does not apply the defense).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from bench.simulation.messages import MessageBatch

#: ``aggregate(own, delivered) -> new``: how receivers combine the delivered messages with
#: their own state (each protocol documents its rule in its ``Hooks`` section; ``docs/hooks.md``).
Aggregator = Callable[[torch.Tensor, MessageBatch], torch.Tensor]

#: the hook points a protocol declares it calls (``decode``: the receive side of every
#: aggregation — a plugin's per-message decoding and a mechanism's wrapped rule)
HOOK_NAMES: tuple[str, ...] = (
    "per_sample_gradients",
    "local_gradients",
    "local_update",
    "outgoing",
    "decode",
    "should_stop",
)


@dataclass(frozen=True)
class RunInfo:
    """What a defense is told about the run when it is bound (all public facts of the run).

    The seed is not among them: a defense's randomness comes from streams the harness seeds
    (:mod:`bench.defense.runner`), so no call can tell the run from a check or the defense oracle
    by its seed.

    Attributes
    ----------
    n_nodes, n_params:
        Number of nodes and of model parameters ``P``.
    protocol:
        The registered protocol name.
    kinds:
        Message kinds nodes send in this run (:meth:`bench.protocols.Protocol.message_kinds`).
    rounds:
        Rounds the run is configured for.
    batch_size, local_steps, local_epochs:
        The protocol's batch plan (``batch_size=None``: full local batch).
    counts:
        Local dataset sizes ``n_i`` (sampling rates for privacy accounting).
    dtype, device:
        Of the stacked state.
    param_sizes:
        Number of elements of each parameter tensor of the architecture, in the order of the
        flat layout ``[P]`` (a defense drawing noise per parameter tensor, as Opacus does).
    edges, mixing:
        The directed edges ``[E, 2]`` of the communication graph and its mixing matrix
        ``W [N, N]`` (``None`` for federated protocols): who aggregates whose messages.
    hyperparameters:
        The protocol's public hyperparameters (:meth:`bench.protocols.Protocol.hyperparameters`,
        e.g. FedAvg's ``client_fraction``).
    """

    n_nodes: int
    n_params: int
    protocol: str
    kinds: tuple[str, ...]
    rounds: int
    batch_size: int | None
    local_steps: int
    local_epochs: int | None
    counts: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    param_sizes: tuple[int, ...] = ()
    edges: torch.Tensor | None = None
    mixing: torch.Tensor | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)


def run_info_to_wire(run: RunInfo) -> dict[str, Any]:
    """``run`` as plain data (:mod:`bench.core.wire`): what crosses from the simulation process
    to the defense oracle, which binds its defense instances with the very same facts."""
    out: dict[str, Any] = {f: getattr(run, f) for f in run.__dataclass_fields__}
    out["dtype"], out["device"] = str(run.dtype).removeprefix("torch."), str(run.device)
    out["kinds"], out["counts"] = list(run.kinds), list(run.counts)
    out["param_sizes"], out["hyperparameters"] = list(run.param_sizes), dict(run.hyperparameters)
    return out


def run_info_from_wire(data: dict[str, Any]) -> RunInfo:
    """The :class:`RunInfo` of :func:`run_info_to_wire`'s plain data."""
    fields = dict(data)
    fields["dtype"], fields["device"] = getattr(torch, str(data["dtype"])), torch.device(str(data["device"]))
    fields["kinds"], fields["counts"] = tuple(data["kinds"]), tuple(int(c) for c in data["counts"])
    fields["param_sizes"] = tuple(int(c) for c in data["param_sizes"])
    return RunInfo(**fields)


@dataclass(frozen=True)
class RoundContext:
    """Where a hook is called: the round, the local (or gossip) step within it, and the node ids
    of the rows of the tensors passed (``None``: every node, in order)."""

    round: int
    step: int = 0
    nodes: torch.Tensor | None = None


class DefenseHooks:
    """The stacked hooks every protocol calls, identities by default (bench's side: a plugin's
    per-node hooks are run through :class:`~bench.defense.runner.NodeRunner`, the harness's
    mechanisms are subclasses of :class:`~bench.defense.mechanisms.base.MechanismHooks`).

    Rows of the tensors are the nodes of ``ctx.nodes`` (all nodes, in order, when ``None``).

    Class attributes
    ----------------
    per_sample:
        Ask protocols for per-sample gradients ``[n, B, P]`` (:meth:`per_sample_gradients`).
    weighted_per_sample:
        The reduction is ``sample_sum(Σ_j w_j g_j)`` with ``w = sample_weights(‖g_j‖)``
        (per-sample clipping): the engine may compute it without forming the per-sample
        gradients (``bench.simulation.per_sample``).
    """

    per_sample: ClassVar[bool] = False
    weighted_per_sample: ClassVar[bool] = False

    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        """Protocol parameters to merge into the task's ``protocol_params`` before the protocol
        is built (the protocol validates them). Default: none."""
        return {}

    def bind(self, run: RunInfo, seed: int = 0) -> None:
        """Told the run's public facts and its seed (the seed stays on bench's side: a plugin is
        bound with ``run`` only), once, before the first round."""

    def active_hooks(self) -> frozenset[str]:
        """The hook points (:data:`HOOK_NAMES`) where these hooks do anything: where the engine
        must call them (a fused local step or PDMM's lean edge state are used elsewhere)."""
        return overridden_hooks(self)

    def per_sample_gradients(
        self, grads: torch.Tensor, mask: torch.Tensor, ctx: RoundContext
    ) -> torch.Tensor:
        """Per-sample gradients ``[n, B, P]`` (``mask [n, B]``: real samples) to per-node
        gradients ``[n, P]``; default the masked mean (with :attr:`weighted_per_sample`,
        ``sample_sum(Σ_j w_j g_j)``)."""
        if self.weighted_per_sample:
            weights = self.sample_weights(torch.linalg.vector_norm(grads, dim=-1), mask, ctx)
            return self.sample_sum(
                torch.bmm(weights.to(grads.dtype).unsqueeze(1), grads).squeeze(1), mask, ctx
            )
        w = mask.to(grads.dtype)
        return torch.einsum("nb,nbp->np", w, grads) / w.sum(1, keepdim=True).clamp_min(1.0)

    def sample_weights(self, norms: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Weights ``[n, B]`` from the per-sample gradient norms; default the masked mean's."""
        w = mask.to(norms.dtype)
        return w / w.sum(1, keepdim=True).clamp_min(1.0)

    def sample_sum(self, total: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Per-node gradients ``[n, P]`` from the weighted sums ``Σ_j w_j g_j``; default ``total``."""
        return total

    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Per-node gradients ``[n, P]`` before they are used; default unchanged."""
        return grads

    def local_update(self, new: torch.Tensor, old: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Models after local training ``new [n, P]`` (from ``old``); default unchanged."""
        return new

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        """A batch of messages as it leaves the nodes (never the server's); default unchanged."""
        return msgs

    def decode(
        self, delivered: MessageBatch, own: torch.Tensor, rows: torch.Tensor, ctx: RoundContext
    ) -> torch.Tensor:
        """Each delivery of ``delivered`` (per-edge layout) as its receiver decodes it,
        ``[E, P]``; ``own`` is the rule's own state, ``rows [E]`` the row of it each delivery is
        combined with (:meth:`~bench.protocols.base.Protocol.delivery_slots`). Default: the
        payload as delivered."""
        return delivered.payload

    def wrap_aggregation(self, aggregate: Aggregator, ctx: RoundContext) -> Aggregator:
        """The receivers' rule ``aggregate(own, delivered) -> new`` as a mechanism runs it
        (secure aggregation's unmasking, DP-FedAvg's noise on the server's mean); default
        unchanged."""
        return aggregate

    def should_stop(self, ctx: RoundContext, history: Mapping[str, tuple[float, ...]]) -> bool:
        """Whether training stops after round ``ctx.round``, from the validation metrics so far."""
        return False


#: the hooks that act on a gradient inside local training (at every step that evaluates one)
GRADIENT_HOOKS = frozenset({"per_sample_gradients", "local_gradients"})

#: each stacked method (and each per-node hook of a plugin, :data:`bench.defense.node_hooks.NODE_HOOKS`)
#: and the hook point it belongs to
POINT_OF = {
    "per_sample_gradients": "per_sample_gradients",
    "sample_weights": "per_sample_gradients",
    "sample_sum": "per_sample_gradients",
    "local_gradients": "local_gradients",
    "local_update": "local_update",
    "outgoing": "outgoing",
    "receive_statistic": "decode",
    "decode": "decode",
    "wrap_aggregation": "decode",
    "should_stop": "should_stop",
}


def overridden_hooks(hooks: DefenseHooks) -> frozenset[str]:
    """The hook points whose stacked implementation differs from the identity of
    :class:`DefenseHooks` (by class); the per-sample point only under ``per_sample``."""
    out = {
        point
        for name, point in POINT_OF.items()
        if hasattr(DefenseHooks, name) and getattr(type(hooks), name) is not getattr(DefenseHooks, name)
    }
    if not hooks.per_sample:
        out.discard("per_sample_gradients")
    return frozenset(out)


class AdversaryPolicy:
    """An active adversary controlling ``nodes``; substitutes what they send.

    Subclasses implement :meth:`substitute`. The default leaves messages unchanged (a passive,
    honest-but-curious node).
    """

    def __init__(self, nodes: Sequence[int]) -> None:
        self.nodes = tuple(int(v) for v in nodes)

    def bind(
        self,
        run: RunInfo,
        flat: Any,
        normalization: tuple[tuple[float, ...], tuple[float, ...]],
        seed: int = 0,
    ) -> None:
        """Told the run's public facts before the first round: :class:`RunInfo`, the architecture
        as a :class:`~bench.simulation.flat.FlatModel`, the inputs' ``(mean, std)`` and the run's
        seed (bench's own code: :class:`RunInfo` holds no seed, which defenses must not see)."""

    def substitute(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        return msgs

    def sent_by_adversary(self, msgs: MessageBatch) -> torch.Tensor:
        """Edge mask ``[E]`` of deliveries whose sender is one of the adversary's nodes."""
        nodes = torch.tensor(self.nodes, device=msgs.senders.device)
        return torch.isin(msgs.edge_senders, nodes)
