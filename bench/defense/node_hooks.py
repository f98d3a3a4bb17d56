"""The per-node hooks of a defense plugin: what each receives, when it is called, what it returns.

:class:`NodeHooks` holds the identities a plugin (:class:`bench.defense.plugin.Defense`)
overrides, each written for **one node**; the harness runs them over all nodes with ``vmap``
(:mod:`bench.defense.runner`). Their docstrings are the hook table of ``docs/hooks.md``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from bench.defense.hooks import POINT_OF
from bench.defense.node import MessageContext, NodeContext

#: the per-node hooks of :class:`~bench.defense.plugin.Defense`, in the order a round meets them,
#: each with the protocols' hook point it acts at (:data:`bench.defense.hooks.HOOK_NAMES`)
NODE_HOOKS: dict[str, str] = {name: point for name, point in POINT_OF.items() if name != "wrap_aggregation"}


class NodeHooks:
    """The per-node hooks, identities by default (module docstring)."""

    #: ask protocols for per-sample gradients (:meth:`per_sample_gradients`)
    per_sample = False
    #: the per-sample reduction is ``sample_sum(Σ_j w_j g_j)``, ``w = sample_weights(‖g_j‖)``
    weighted_per_sample = False

    def init_state(self, node: NodeContext) -> dict[str, torch.Tensor]:
        """One node's persistent state at the start of the run (``node.state`` is empty here).

        Called
        ------
        Once per node after :meth:`bind`, vmapped over the nodes (randomness drawn here is each
        node's own: a key it keeps).

        Returns
        -------
        ``{name: tensor}``; default: no state.
        """
        return {}

    # ------------------------------------------------------------------------- node hooks
    def per_sample_gradients(
        self, grads: torch.Tensor, mask: torch.Tensor, node: NodeContext
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Reduce one node's per-sample gradients ``grads [B, P]`` (``mask [B]``: real samples)
        to its gradient.

        Called
        ------
        At every gradient evaluation of a protocol that trains (each local step, each inner
        solver step, each FedSGD upload), only when the defense sets ``per_sample = True``;
        before :meth:`local_gradients`.

        Returns
        -------
        ``[P]`` (or ``([P], new_state)``). Default: the masked mean ``Σ_j m_j g_j / max(1, Σ_j m_j)``
        (with :attr:`weighted_per_sample`, ``sample_sum(Σ_j w_j g_j)``,
        ``w = sample_weights(‖g_j‖₂)``).
        """
        if self.weighted_per_sample:
            weights = self.sample_weights(torch.linalg.vector_norm(grads, dim=-1), mask, node)
            return self.sample_sum(weights.to(grads.dtype) @ grads, mask, node)
        w = mask.to(grads.dtype)
        return (w @ grads) / w.sum().clamp_min(1.0)

    def sample_weights(self, norms: torch.Tensor, mask: torch.Tensor, node: NodeContext) -> torch.Tensor:
        """Weigh one node's per-sample gradients by their L2 norms ``norms [B]`` (``mask [B]``):
        the first part of a weighted per-sample reduction.

        Called
        ------
        In place of :meth:`per_sample_gradients` under ``per_sample`` and
        :attr:`weighted_per_sample`.

        Returns
        -------
        ``[B]``. Default: ``m_j / max(1, Σ_j m_j)``.
        """
        w = mask.to(norms.dtype)
        return w / w.sum().clamp_min(1.0)

    def sample_sum(
        self, total: torch.Tensor, mask: torch.Tensor, node: NodeContext
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Turn one node's weighted sum ``total = Σ_j w_j g_j [P]`` into its gradient, the second
        part of a weighted per-sample reduction.

        Called
        ------
        After :meth:`sample_weights`, with the same ``mask``.

        Returns
        -------
        ``[P]`` (or ``([P], new_state)``). Default: ``total``.
        """
        return total

    def local_gradients(
        self, grad: torch.Tensor, node: NodeContext
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Transform one node's gradient ``grad [P]`` of its mean minibatch loss before it is
        used (e.g. clipping, sparsification).

        Called
        ------
        At every gradient evaluation of a protocol that trains (after
        :meth:`per_sample_gradients`, if used).

        Returns
        -------
        ``[P]`` (or ``([P], new_state)``). Default: ``grad``.
        """
        return grad

    def local_update(
        self, new: torch.Tensor, old: torch.Tensor, node: NodeContext
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Transform one node's model after local training, ``new [P]``, given the model it
        started from, ``old [P]`` (e.g. clip the update ``new − old``).

        Called
        ------
        After each round's local training or local solve, before anything derived from the
        new model is sent.

        Returns
        -------
        The model to continue with, ``[P]`` (or ``([P], new_state)``). Default: ``new``.
        """
        return new

    def outgoing(self, payload: torch.Tensor, msg: MessageContext) -> torch.Tensor:
        """Transform one message row ``payload [P]`` as it leaves its sender (e.g. noise,
        quantization, an encoding its receivers undo in :meth:`decode`).

        Called
        ------
        On every row of every batch of messages nodes send, plaintext or secure, before the
        active adversary's substitution and the transcript; never on the server's messages.
        Once per delivery with :attr:`per_delivery`.

        Returns
        -------
        ``[P]``, real numbers. Default: ``payload``.
        """
        return payload

    def receive_statistic(
        self, own: torch.Tensor, payloads: torch.Tensor, mask: torch.Tensor, node: NodeContext
    ) -> torch.Tensor:
        """A summary of everything delivered to one receiver in one aggregation: its own row
        ``own [P]`` and its deliveries ``payloads [D, P]`` (``mask [D]``: real deliveries; the
        rows are padded to the busiest receiver), e.g. a clipping radius from the spread of
        its neighbours' models.

        Called
        ------
        At every aggregation, before :meth:`decode`, only when the defense overrides it.

        Returns
        -------
        A small tensor, handed to every :meth:`decode` of this receiver in this aggregation
        (``msg.statistic``). Default: an empty tensor.
        """
        return own.new_zeros(0)

    def decode(self, payload: torch.Tensor, msg: MessageContext) -> torch.Tensor:
        """What the receiver makes of one delivered message ``payload [P]`` before the protocol
        aggregates it (undo an encoding, clip towards ``msg.own``). The protocol's own rule then
        combines the decoded messages; a threat whose adversary takes part in the protocol sees
        each delivery to its nodes as this hook decodes it (``View.decoded``).

        Called
        ------
        At every aggregation (the server's mean, the gossip mix, PDMM's ``z ← z + Δz``), once per
        delivered message, with the receiver's own row and state.

        Returns
        -------
        ``[P]``, real numbers. Default: ``payload``.
        """
        return payload

    def should_stop(self, round: int, history: Mapping[str, tuple[float, ...]]) -> bool:
        """Whether training stops after round ``round``, from the public validation metrics
        evaluated so far (``history["val_acc"]``: one value per evaluation, oldest first;
        ``history["round"]``: the round each was taken at).

        Called
        ------
        After every round, with plain numbers only.

        Returns
        -------
        ``True`` to stop. Default: ``False``.
        """
        return False
