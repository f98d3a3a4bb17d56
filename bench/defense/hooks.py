"""The hook points of the defense contract, and the active-adversary hook.

Every protocol calls the same hooks at the same points of a round; a defense overrides the ones
it needs. Hooks run in the simulation process only, on stacked tensors of all (sampled) nodes at
once. Each hook's docstring says when it is called (``Called``) and what it returns
(``Returns``); ``docs/hooks.md`` is the table generated from them (``python -m bench.leaderboard.site.docs``).

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
#: their own state (each protocol documents its rule in its ``Hooks`` section; ``docs/hooks.md``).
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
    weighted_per_sample:
        The defense's reduction is a weighted sum with weights from the per-sample gradient
        norms, ``per_sample_gradients(g) = sample_sum(Σ_j w_j g_j)``, ``w = sample_weights(‖g‖)``
        (per-sample clipping): the engine may then compute it without forming ``g``
        (``bench.simulation.per_sample``); the defense overrides the two parts, not the whole.
    """

    per_sample: ClassVar[bool] = False
    weighted_per_sample: ClassVar[bool] = False

    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        """Protocol parameters the defense sets (e.g. PDMM's ``solver``/``k_max``), merged into the
        task's ``protocol_params`` before the protocol is built, so the protocol's own
        validation applies. Never assign a protocol's attributes directly.

        Called
        ------
        With the protocol's registered name: by the probe (the parent learns the run's real
        parameters) and by the simulation before it builds the protocol.

        Returns
        -------
        ``{parameter: value}``; default: empty.
        """
        return {}

    def bind(self, run: RunInfo) -> None:
        """Told the run's public facts (:class:`RunInfo`: seed, sizes, protocol, message kinds,
        batch plan, local set sizes, graph and mixing matrix) to plan noise and accounting.

        Called
        ------
        Once, when the simulation is built, before the first round.

        Returns
        -------
        Nothing (:class:`~bench.defense.plugin.Defense` keeps ``run`` as ``self.run``).
        """

    def per_sample_gradients(
        self, grads: torch.Tensor, mask: torch.Tensor, ctx: RoundContext
    ) -> torch.Tensor:
        """Reduce per-sample gradients ``grads [n, B, P]`` (``mask [n, B]``: real samples) to
        per-node gradients.

        Called
        ------
        At every gradient evaluation of a protocol that trains (each local step, each inner
        solver step, each FedSGD upload), only when the defense sets ``per_sample = True``;
        before :meth:`local_gradients`.

        Returns
        -------
        ``[n, P]``. Default: the masked mean ``Σ_j m_j g_j / max(1, Σ_j m_j)`` (the gradient of
        the mean minibatch loss); with :attr:`weighted_per_sample`, ``sample_sum(Σ_j w_j g_j, …)``
        with ``w = sample_weights(‖g_j‖₂, …)``.
        """
        if self.weighted_per_sample:
            weights = self.sample_weights(torch.linalg.vector_norm(grads, dim=-1), mask, ctx)
            return self.sample_sum(
                torch.bmm(weights.to(grads.dtype).unsqueeze(1), grads).squeeze(1), mask, ctx
            )
        w = mask.to(grads.dtype)
        return torch.einsum("nb,nbp->np", w, grads) / w.sum(1, keepdim=True).clamp_min(1.0)

    def sample_weights(self, norms: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Weigh the per-sample gradients by their L2 norms ``norms [n, B]`` (``mask [n, B]``),
        the first part of a weighted per-sample reduction (e.g. clipping factors).

        Called
        ------
        In place of :meth:`per_sample_gradients` when the defense sets ``per_sample`` and
        :attr:`weighted_per_sample`; the engine may then never form the per-sample gradients.

        Returns
        -------
        Weights ``[n, B]``. Default: the masked mean's ``m_j / max(1, Σ_j m_j)``.
        """
        w = mask.to(norms.dtype)
        return w / w.sum(1, keepdim=True).clamp_min(1.0)

    def sample_sum(self, total: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Turn the weighted sums ``total = Σ_j w_j g_j [n, P]`` into per-node gradients, the
        second part of a weighted per-sample reduction (e.g. noise).

        Called
        ------
        After :meth:`sample_weights`, with the same ``mask`` and ``ctx``.

        Returns
        -------
        ``[n, P]``. Default: ``total`` unchanged.
        """
        return total

    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Transform per-node gradients ``grads [n, P]`` of the mean minibatch loss before they
        are used (e.g. clipping, noise).

        Called
        ------
        At every gradient evaluation of a protocol that trains: each local step, each inner
        solver step, each FedSGD upload (after :meth:`per_sample_gradients`, if used).

        Returns
        -------
        ``[n, P]``. Default: ``grads`` unchanged.
        """
        return grads

    def local_update(self, new: torch.Tensor, old: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """Transform a node's model after local training, ``new [n, P]``, given the model it
        started from, ``old [n, P]`` (e.g. clip the update ``new − old``).

        Called
        ------
        After each round's local training or local solve, before anything derived from the
        new model is sent.

        Returns
        -------
        The model to continue with, ``[n, P]``. Default: ``new`` unchanged.
        """
        return new

    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        """Transform a batch of messages ``msgs`` as it leaves the nodes (e.g. noise,
        quantization, masking).

        Called
        ------
        On every batch of messages sent by nodes, plaintext or secure, before the active
        adversary's substitution and the transcript; never on the server's messages (it holds
        no data).

        Returns
        -------
        A :class:`~bench.simulation.messages.MessageBatch` of the same kind, round and step with
        one payload row per sender (the payload may be integers). Default: ``msgs`` unchanged.
        """
        return msgs

    def wrap_aggregation(self, aggregate: Aggregator, ctx: RoundContext) -> Aggregator:
        """Replace or wrap the receivers' aggregation rule ``aggregate(own, delivered) -> new``
        (e.g. secure or robust aggregation); it may use only the receivers' own states and what
        was delivered (the channel audit recomputes it in a fresh process).

        Called
        ------
        At every aggregation: the server's weighted mean (FedSGD, FedAvg, centralized PDMM),
        the gossip mix ``W`` (D-PSGD, gossip averaging), PDMM's ``z ← z + Δz``.

        Returns
        -------
        The rule to run instead; its output has ``own``'s shape (or one of its rows). Default:
        ``aggregate`` unchanged.
        """
        return aggregate

    def should_stop(self, ctx: RoundContext) -> bool:
        """Decide whether training stops (e.g. a round budget).

        Called
        ------
        After every round.

        Returns
        -------
        ``True`` to stop. Default: ``False``.
        """
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
