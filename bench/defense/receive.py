"""The receive side of a defense as the harness runs it: one delivered message at a time.

:class:`ReceiveSide` is the part of :class:`~bench.defense.runner.NodeRunner` that runs a plugin's
``receive_statistic`` (once per receiver, on all of its deliveries padded to the busiest
receiver) and ``decode`` (once per delivery, with the receiver's own row, state and statistic),
each vmapped: what a receiver makes of a message depends on that message, its own row and state
and its own deliveries only — and a participant adversary's View holds exactly these decoded
messages (:mod:`bench.simulation.channel`).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import torch

from bench.defense.contract import HookContractError, check_tensor
from bench.defense.hooks import RoundContext
from bench.defense.node import MessageContext, NodeContext
from bench.simulation.messages import MessageBatch

if TYPE_CHECKING:
    from bench.defense.plugin import Defense


class ReceiveSide:
    """``decode`` of the stacked hooks, from the plugin's per-message ``decode``."""

    plugin: Defense
    node_hooks: frozenset[str]

    def _state_rows(self, ids: torch.Tensor) -> tuple[tuple[str, ...], tuple[torch.Tensor, ...]]:
        raise NotImplementedError

    def _vmapped(self, hook: str, fn: Any, args: tuple[Any, ...], round_: int, step: int) -> Any:
        raise NotImplementedError

    def decode(
        self, delivered: MessageBatch, own: torch.Tensor, rows: torch.Tensor, ctx: RoundContext
    ) -> torch.Tensor:
        """Every delivery as its receiver's code decodes it, one message per vmapped call, with
        the receiver's own row, state and (with ``receive_statistic``) the summary of all its
        deliveries."""
        payload = delivered.payload
        if not self.node_hooks & {"decode", "receive_statistic"} or not payload.is_floating_point():
            return payload
        receivers = delivered.receivers.to(torch.long)
        senders = delivered.edge_senders.to(torch.long)
        own_rows = (own.reshape(1, -1) if own.dim() == 1 else own).index_select(0, rows.to(own.device).long())
        stats = self._statistics(delivered, own_rows, receivers, ctx)
        keys, states = self._state_rows(receivers)
        plugin, has_stat = self.plugin, stats is not None

        def one(
            row: torch.Tensor, sender: torch.Tensor, to: torch.Tensor, mine: torch.Tensor, *rest: torch.Tensor
        ) -> torch.Tensor:
            stat = rest[0] if has_stat else None
            svals = rest[1:] if has_stat else rest
            state = MappingProxyType(dict(zip(keys, svals, strict=True)))
            c = MessageContext(delivered.round, delivered.step, delivered.kind, sender, to, state, mine, stat)
            return plugin.decode(row, c)

        extra = (stats,) if has_stat else ()
        out = self._vmapped(
            "decode", one, (payload, senders, receivers, own_rows, *extra, *states), ctx.round, ctx.step
        )
        if not isinstance(out, torch.Tensor) or not out.is_floating_point():
            raise HookContractError("the defense's decode hook returned no real-valued payload")
        check_tensor("the defense's decode hook", out, payload, tuple(payload.shape))
        return out

    def _statistics(
        self, delivered: MessageBatch, own_rows: torch.Tensor, receivers: torch.Tensor, ctx: RoundContext
    ) -> torch.Tensor | None:
        """``receive_statistic`` per receiver over its padded deliveries, gathered per delivery."""
        if "receive_statistic" not in self.node_hooks:
            return None
        ids, slot = torch.unique(receivers, return_inverse=True)
        counts = torch.bincount(slot, minlength=len(ids))
        order = torch.argsort(slot, stable=True)
        start = torch.cumsum(counts, 0) - counts
        pos = torch.empty_like(slot)
        pos[order] = torch.arange(len(slot), device=slot.device) - start.index_select(0, slot[order])
        payload = delivered.payload
        padded = payload.new_zeros(len(ids), int(counts.max()) if len(counts) else 0, payload.shape[1])
        padded[slot, pos] = payload
        mask = torch.zeros(padded.shape[:2], dtype=torch.bool, device=payload.device)
        mask[slot, pos] = True
        # the receiver's own row of its first delivery (one row per receiver in gossip and FL)
        mine = own_rows.index_select(0, order.index_select(0, start))
        keys, states = self._state_rows(ids)
        plugin = self.plugin

        def one(
            o: torch.Tensor, got: torch.Tensor, m: torch.Tensor, node: torch.Tensor, *svals: torch.Tensor
        ) -> torch.Tensor:
            state = MappingProxyType(dict(zip(keys, svals, strict=True)))
            return plugin.receive_statistic(o, got, m, NodeContext(ctx.round, ctx.step, node, state))

        stat = self._vmapped(
            "receive_statistic", one, (mine, padded, mask, ids, *states), ctx.round, ctx.step
        )
        if not isinstance(stat, torch.Tensor):
            raise HookContractError("the defense's receive_statistic hook returned no tensor")
        return stat.index_select(0, slot)
