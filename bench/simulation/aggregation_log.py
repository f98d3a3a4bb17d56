"""The aggregation log: what the channel audit replays.

The channel logs every aggregation that runs defense code (a defense that overrides
``wrap_aggregation``): the message kind, the call's :class:`~bench.defense.hooks.RoundContext`,
the receivers' own state, the delivered messages exactly as the receivers got them, and what the
wrapped aggregation returned. Everything is plain data (:mod:`bench.core.wire`), copied to the CPU, so
the simulation process can hand it to the audit process (:mod:`bench.evaluation.audit`), which
recomputes each output from a fresh defense.

The log keeps at most ``max_calls`` calls and ``budget`` bytes: while the run's calls fit, every
call is kept; beyond, a uniform sample of them (reservoir sampling, Vitter's Algorithm R) whose
draws come from the operating system's entropy, not from any seeded stream — so the defense, which
runs in the same process, cannot know when it aggregates whether that call will be audited. A
receive side that cheats in a fraction ``f`` of ``n`` calls escapes a sample of ``k`` with
probability about ``(1 − f)^k``: every cheating call is caught at ``f = 1``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import torch

from bench.defense.hooks import RoundContext
from bench.simulation.messages import MessageBatch

#: default byte budget of a run's log (the calls kept for the audit)
DEFAULT_BUDGET = 256 * 2**20
#: calls kept at least, whatever their size
MIN_CALLS = 4


@dataclass
class AggregationLog:
    """Logged aggregations of one run: at most ``max_calls`` of them within ``budget`` bytes
    (module docstring; ``max_calls=None``: as many as fit)."""

    budget: int = DEFAULT_BUDGET
    max_calls: int | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    seen: int = 0
    _capacity: int | None = None
    _draw: random.SystemRandom = field(default_factory=random.SystemRandom, repr=False)

    @classmethod
    def of(cls, budget: int | None, max_calls: int | None = None) -> AggregationLog | None:
        """``None`` (no log) for ``None``; else a log of ``budget`` bytes and ``max_calls`` calls."""
        return None if budget is None else cls(int(budget), max_calls)

    def record(
        self, kind: str, ctx: RoundContext, own: torch.Tensor, delivered: MessageBatch, out: Any
    ) -> None:
        """Keep this call (while the budget lasts; then with probability ``capacity / seen``)."""
        self.seen += 1
        if self._capacity is not None and len(self.calls) >= self._capacity:
            slot = self._draw.randrange(self.seen)
            if slot >= self._capacity:
                return
            self.calls[slot] = self._entry(kind, ctx, own, delivered, out)
            return
        entry = self._entry(kind, ctx, own, delivered, out)
        if self._capacity is None:
            size = _nbytes(entry)
            self._capacity = max(MIN_CALLS, self.budget // max(1, size))
            if self.max_calls is not None:
                self._capacity = min(self._capacity, max(1, int(self.max_calls)))
        self.calls.append(entry)

    @staticmethod
    def _entry(
        kind: str, ctx: RoundContext, own: torch.Tensor, delivered: MessageBatch, out: Any
    ) -> dict[str, Any]:
        return {
            "kind": kind,
            "round": int(ctx.round),
            "step": int(ctx.step),
            "nodes": None if ctx.nodes is None else ctx.nodes.detach().cpu().clone(),
            "own": own.detach().cpu().clone(),
            "delivered": delivered.detached("cpu").to_wire(),
            "out": out.detach().cpu().clone() if isinstance(out, torch.Tensor) else out,
        }


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 8
