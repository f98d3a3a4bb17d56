"""Row-locality of the stacked send-side hooks, probed: a test of the harness.

The harness runs a defense's hooks per node (:mod:`bench.defense.runner`), so node ``v``'s output
depends on node ``v``'s rows only by construction. This probe checks the construction from the
outside, as the jobs once did by sampling: before a call, a copy of the hooks (``copy.deepcopy``:
the runner copies its state, the plugin is frozen) runs the hook with every row but ``v``'s
replaced by random values, and ``v``'s output must equal the real call's. With ``rate=1`` every
call is checked (``tests/defenses/test_contract.py`` runs every committed defense so).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import torch

from bench.defense.hooks import DefenseHooks, RoundContext
from bench.simulation.messages import MessageBatch

#: send-side hooks whose leading tensor arguments are ``[n, ...]`` rows of nodes
TENSOR_HOOKS = ("per_sample_gradients", "sample_weights", "sample_sum", "local_gradients", "local_update")
#: relative tolerance of the comparison (the same kernels on the same row give the same bits; the
#: slack absorbs reductions whose blocking depends on the other rows)
RTOL = 1e-5


class RowLocality:
    """Installs the check on the overridden send-side hooks of ``hooks`` (an instance attribute
    wrapping each; the class is unchanged, so :func:`overridden_hooks` still reads the plugin).

    Parameters
    ----------
    hooks:
        The defense.
    rate:
        Probability that a call is checked (``1``: every call, as in the tests); the first call of
        each hook is always checked.
    """

    def __init__(self, hooks: DefenseHooks, rate: float) -> None:
        self.hooks, self.rate = hooks, float(rate)
        self.violations: list[str] = []
        self.checked = 0
        self._draw = random.SystemRandom()
        self._wrapped: list[str] = []
        active = hooks.active_hooks()
        for name in (*TENSOR_HOOKS, "outgoing"):
            point = "per_sample_gradients" if name in ("sample_weights", "sample_sum") else name
            if point in active:
                setattr(hooks, name, self._wrap(name))
                self._wrapped.append(name)

    def _wrap(self, name: str) -> Callable[..., Any]:
        real = getattr(self.hooks, name)
        first = [True]

        def checked(*args: Any) -> Any:
            if self.violations or not (first[0] or self._draw.random() < self.rate):
                return real(*args)
            first[0] = False
            probe = self._probe(name, args)
            out = real(*args)
            if probe is not None:
                self._compare(name, args, probe, out)
            return out

        return checked

    def _probe(self, name: str, args: tuple[Any, ...]) -> tuple[int, Any] | None:
        ctx = args[-1]
        rows = _rows_of(name, args)
        if rows < 2:
            return None
        v = self._draw.randrange(rows)
        try:
            clone = copy.deepcopy(self.hooks)
        except Exception as exc:  # a defense that cannot be copied cannot be checked: refused
            self.violations.append(
                f"the defense cannot be copied to check its {name} hook ({_one_line(exc)})"
            )
            return None
        for wrapped in self._wrapped:
            clone.__dict__.pop(wrapped, None)
        gen = torch.Generator().manual_seed(self._draw.randrange(2**62))
        perturbed = _perturb(name, args, v, gen)
        try:
            out = getattr(type(self.hooks), name)(clone, *perturbed)
        except Exception as exc:
            where = _where(name, v, ctx)
            self.violations.append(f"{where} fails when the other nodes' rows change ({_one_line(exc)})")
            return None
        return v, out

    def _compare(self, name: str, args: tuple[Any, ...], probe: tuple[int, Any], out: Any) -> None:
        self.checked += 1
        v, alt = probe
        if name == "outgoing":
            mine, theirs = _sent_by(out, args[0], v), _sent_by(alt, args[0], v)
        else:
            mine, theirs = out[v], alt[v]
        if mine.shape != theirs.shape or not _close(mine, theirs):
            self.violations.append(f"{_where(name, v, args[-1])} depends on other nodes' rows")


def _rows_of(name: str, args: tuple[Any, ...]) -> int:
    first = args[0]
    if name == "outgoing":
        return int(torch.unique(first.senders).numel())
    return int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() >= 1 else 0


def _perturb(name: str, args: tuple[Any, ...], v: int, gen: torch.Generator) -> tuple[Any, ...]:
    if name == "outgoing":
        msgs: MessageBatch = args[0]
        payload = msgs.payload.clone()
        other = msgs.senders != msgs.senders.unique()[v]
        payload[other] = _random_like(payload[other], gen)
        return (msgs.with_payload(payload), *args[1:])
    out: list[Any] = []
    n = args[0].shape[0]
    for i, a in enumerate(args):
        data = i == 0 or (name == "local_update" and i == 1)  # the rows of data; masks stay
        if data and isinstance(a, torch.Tensor) and a.dim() >= 1 and a.shape[0] == n:
            b = a.clone()
            keep = torch.arange(n, device=a.device) == v
            b[~keep] = _random_like(a[~keep], gen)
            out.append(b)
        else:
            out.append(a)
    return tuple(out)


def _sent_by(out: MessageBatch, sent: MessageBatch, v: int) -> torch.Tensor:
    """The payload rows node ``v`` sent in ``out``, one per delivery, ordered by receiver."""
    node = sent.senders.unique()[v]
    edges = out.per_edge()
    sel = (edges.senders == node).nonzero().squeeze(1)
    sel = sel[torch.argsort(edges.receivers[sel], stable=True)]
    return edges.payload[sel]


def _random_like(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    if x.numel() == 0:
        return x.clone()
    if x.is_floating_point():
        scale = float(x.abs().max().clamp_min(1e-3))
        return (torch.randn(x.shape, generator=gen, dtype=torch.float64) * scale).to(x.dtype).to(x.device)
    if x.dtype == torch.bool:
        return torch.randint(0, 2, x.shape, generator=gen).bool().to(x.device)
    low, high = int(x.min()), int(x.max()) + 1
    return torch.randint(low, max(high, low + 2), x.shape, generator=gen, dtype=x.dtype).to(x.device)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not a.is_floating_point():
        return bool(torch.equal(a, b))
    return bool(((a - b).abs() <= RTOL * (1.0 + b.abs())).all() and torch.equal(a.isnan(), b.isnan()))


def _where(name: str, v: int, ctx: Any) -> str:
    r = f" in round {ctx.round}" if isinstance(ctx, RoundContext) else ""
    return f"the {name} hook of row {v}{r}"


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
