"""The hook points of the defense contract, and the active-adversary hook.

Every protocol calls the same hooks at the same points of a round (the table below and
``docs/architecture.md``); a defense overrides the ones it needs. Hooks run in the simulation
process only, on stacked tensors of all (sampled) nodes at once.

================================  =====================================================  ===========
hook                              where                                                  protocols
================================  =====================================================  ===========
``per_sample_gradients``          per-sample gradients ``[n, B, P]`` of each gradient    every
                                  evaluation, reduced to per-node gradients ``[n, P]``   protocol
                                  (only when the defense sets ``per_sample = True``)     that trains
``local_gradients``               per-node gradients ``[n, P]`` of the mean minibatch    same
                                  loss, before they are used (every local step, inner
                                  solver step and FedSGD upload)
``local_update``                  a node's new local model ``[n, P]`` after its local    FedAvg,
                                  training / solve, before anything derived from it      D-PSGD, PDMM,
                                  is sent (with the model it started from)               centr. PDMM
``outgoing``                      every message batch sent by *nodes* (clients), on      every
                                  plaintext and secure channels alike; the server's
                                  messages are not passed (it holds no data)
``wrap_aggregation``              the rule by which receivers combine what was           every
                                  delivered: ``aggregate(own, delivered) -> new``
``should_stop``                   after every round                                      every
================================  =====================================================  ===========

A second hook point for *active adversaries* (:class:`AdversaryPolicy`) substitutes the
messages of corrupt nodes after the defense ran (an attacker does not apply the defense).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from bench.simulation.messages import MessageBatch

#: ``aggregate(own, delivered) -> new``: how receivers combine the delivered messages with
#: their own state (each protocol documents its rule; see :data:`HOOK_POINTS`).
Aggregator = Callable[[torch.Tensor, MessageBatch], torch.Tensor]

#: the hook names of :class:`DefenseHooks` (what a protocol declares it calls)
HOOK_NAMES: tuple[str, ...] = (
    "per_sample_gradients",
    "local_gradients",
    "local_update",
    "outgoing",
    "wrap_aggregation",
    "should_stop",
)


@dataclass(frozen=True)
class RunInfo:
    """What a defense is told about the run when it is bound (all public facts of the run).

    Attributes
    ----------
    seed:
        The run's seed (derive the defense's own random streams from it, e.g. with
        :func:`bench.data.stacked.derive_seed`).
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

    seed: int
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


@dataclass(frozen=True)
class RoundContext:
    """Where a hook is called: the round, the local (or gossip) step within it, and the node ids
    of the rows of the tensors passed (``None``: every node, in order)."""

    round: int
    step: int = 0
    nodes: torch.Tensor | None = None


class DefenseHooks:
    """Identity hooks; a defense overrides the ones it needs.

    Class attributes
    ----------------
    per_sample:
        Ask protocols for per-sample gradients (costs a second ``vmap`` per gradient
        evaluation), passed to :meth:`per_sample_gradients`.
    """

    per_sample: ClassVar[bool] = False
    #: The defense's reduction is a weighted sum with weights from the per-sample gradient
    #: norms, ``per_sample_gradients(g) = sample_sum(Σ_j w_j g_j)``, ``w = sample_weights(‖g‖)``
    #: (per-sample clipping): the engine may then compute it without forming ``g``
    #: (``bench.simulation.per_sample``); the defense overrides the two parts, not the whole.
    weighted_per_sample: ClassVar[bool] = False

    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        """Protocol parameters the defense sets (e.g. PDMM's ``solver``/``k_max``), merged into the
        task's ``protocol_params`` before the protocol is built, so the protocol's own
        validation applies. Never assign a protocol's attributes directly."""
        return {}

    def bind(self, run: RunInfo) -> None:
        """Called once when the simulation is built, before the first round."""

    def per_sample_gradients(
        self, grads: torch.Tensor, mask: torch.Tensor, ctx: RoundContext
    ) -> torch.Tensor:
        """Reduce per-sample gradients ``[n, B, P]`` (``mask [n, B]``: real samples) to per-node
        gradients ``[n, P]``. Default: the masked mean ``Σ_j m_j g_j / max(1, Σ_j m_j)`` (the
        gradient of the mean minibatch loss); with :attr:`weighted_per_sample`,
        ``sample_sum(Σ_j w_j g_j, …)`` with ``w = sample_weights(‖g_j‖₂, …)``."""
        if self.weighted_per_sample:
            weights = self.sample_weights(torch.linalg.vector_norm(grads, dim=-1), mask, ctx)
            return self.sample_sum(
                torch.bmm(weights.to(grads.dtype).unsqueeze(1), grads).squeeze(1), mask, ctx
            )
        w = mask.to(grads.dtype)
        return torch.einsum("nb,nbp->np", w, grads) / w.sum(1, keepdim=True).clamp_min(1.0)

    def sample_weights(self, norms: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Weights ``[n, B]`` of the per-sample gradients from their L2 norms ``[n, B]`` (used
        with :attr:`weighted_per_sample`). Default: the masked mean's ``m_j / max(1, Σ_j m_j)``."""
        w = mask.to(norms.dtype)
        return w / w.sum(1, keepdim=True).clamp_min(1.0)

    def sample_sum(self, total: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """The per-node gradients ``[n, P]`` from the weighted sums ``Σ_j w_j g_j`` (used with
        :attr:`weighted_per_sample`; e.g. noise). Default: unchanged."""
        return total

    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Per-node gradients ``[n, P]`` before they are used (e.g. clipping, noise)."""
        return grads

    def local_update(self, new: torch.Tensor, old: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """A node's model after local training ``new [n, P]``, from ``old [n, P]`` (e.g. clip
        the update ``new − old``)."""
        return new

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        """Messages as they leave the nodes (e.g. noise, quantization, masking)."""
        return msgs

    def wrap_aggregation(self, aggregate: Aggregator, ctx: RoundContext) -> Aggregator:
        """Replace or wrap an aggregation rule (e.g. secure or robust aggregation)."""
        return aggregate

    def should_stop(self, ctx: RoundContext) -> bool:
        """Whether training stops after this round (e.g. a round budget)."""
        return False


#: the hooks that act on a gradient inside local training (at every step that evaluates one)
GRADIENT_HOOKS = frozenset({"per_sample_gradients", "local_gradients"})


def overridden_hooks(hooks: DefenseHooks) -> frozenset[str]:
    """The hook names whose implementation differs from the identity of :class:`DefenseHooks`."""
    out = {n for n in HOOK_NAMES if getattr(type(hooks), n) is not getattr(DefenseHooks, n)}
    if hooks.weighted_per_sample and any(
        getattr(type(hooks), n) is not getattr(DefenseHooks, n) for n in ("sample_weights", "sample_sum")
    ):
        out.add("per_sample_gradients")  # overridden through its two parts
    if not hooks.per_sample:
        out.discard("per_sample_gradients")
    return frozenset(out)


def overridden_callables(hooks: DefenseHooks) -> frozenset[str]:
    """:func:`overridden_hooks` and the two parts of a weighted per-sample rule
    (``sample_weights``, ``sample_sum``) the defense overrides: every method of ``hooks`` whose
    code is the defense's own (what the hook contract and the row-locality check wrap)."""
    parts = {
        n for n in ("sample_weights", "sample_sum") if getattr(type(hooks), n) is not getattr(DefenseHooks, n)
    }
    return overridden_hooks(hooks) | parts


class AdversaryPolicy:
    """An active adversary controlling ``nodes``; substitutes what they send.

    Subclasses implement :meth:`substitute`. The default leaves messages unchanged (a passive,
    honest-but-curious node).
    """

    def __init__(self, nodes: Sequence[int]) -> None:
        self.nodes = tuple(int(v) for v in nodes)

    def bind(
        self, run: RunInfo, flat: Any, normalization: tuple[tuple[float, ...], tuple[float, ...]]
    ) -> None:
        """Told the run's public facts before the first round: :class:`RunInfo`, the architecture
        as a :class:`~bench.simulation.flat.FlatModel` and the inputs' ``(mean, std)``."""

    def substitute(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        return msgs

    def sent_by_adversary(self, msgs: MessageBatch) -> torch.Tensor:
        """Edge mask ``[E]`` of deliveries whose sender is one of the adversary's nodes."""
        nodes = torch.tensor(self.nodes, device=msgs.senders.device)
        return torch.isin(msgs.edge_senders, nodes)
