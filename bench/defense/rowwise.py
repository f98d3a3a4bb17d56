"""Row-wise operators shared by defenses, and a base class for defenses that apply one row-wise
map at a chosen hook point.

Every operator acts on the last dimension, each row on its own: one node's gradient or update
``[P]`` inside a per-node hook, one sample's gradient ``[B, P]``, or stacked rows ``[n, P]`` in
the harness's mechanisms. No loop over rows.

Clipping and top-k selection are written here rather than taken from a library: Opacus clips
per-sample gradients only inside its optimizer, per parameter tensor and with a ``+1e-6`` in the
denominator, while the defenses need the exact map ``x · min(1, C/‖x‖)`` on flat stacked rows
(also messages and per-node gradients); both are one ``torch`` expression.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from bench.core.errors import require
from bench.core.params import require_choice
from bench.defense.kinds import check_kinds, kinds_reason
from bench.defense.node import MessageContext, NodeContext
from bench.defense.plugin import Defense

if TYPE_CHECKING:
    from bench.protocols import Protocol

#: where a :class:`RowwiseDefense` acts: ``on`` value -> the hook it uses
TARGETS: dict[str, str] = {"gradients": "local_gradients", "update": "local_update", "messages": "outgoing"}


def clip_scale(x: torch.Tensor, max_norm: float | torch.Tensor) -> torch.Tensor:
    """``min(1, C / ‖x_i‖)`` for each row ``x_i`` of ``x [..., P]``, shape ``[..., 1]``: exactly 1
    where ``‖x_i‖ ≤ C`` (a zero row included), so clipping leaves such rows bit-identical.
    ``max_norm`` is a number or a tensor broadcastable to ``[..., 1]`` (a radius per row)."""
    return norm_scale(torch.linalg.vector_norm(x, dim=-1, keepdim=True), max_norm)


def norm_scale(norm: torch.Tensor, max_norm: float | torch.Tensor) -> torch.Tensor:
    """``min(1, C / norm)`` elementwise, exactly 1 where ``norm ≤ C`` (never NaN, also for
    ``norm = C = 0``)."""
    c = torch.as_tensor(max_norm, dtype=norm.dtype, device=norm.device)
    return torch.where(norm > c, c / norm, torch.ones_like(norm))


def clip_rows(x: torch.Tensor, max_norm: float | torch.Tensor) -> torch.Tensor:
    """``CLIP(x_i, C) = x_i · min(1, C / ‖x_i‖)`` for every row (Abadi et al. 2016, Alg. 1;
    He et al. 2022's CLIP)."""
    return x * clip_scale(x, max_norm)


def column_blocks(width: int, rows: int, elements: int = 1 << 20) -> list[slice]:
    """Column slices of a ``[rows, width]`` computation, each of about ``elements`` entries: big
    row-wise temporaries (one per message delivery) are made a block at a time, so they stay
    small and are reused instead of freshly allocated at full size."""
    step = max(1, elements // max(rows, 1))
    return [slice(c, min(c + step, width)) for c in range(0, max(width, 1), step)]


def top_k_count(width: int, k: int | None, fraction: float | None) -> int:
    """Coordinates kept per row: ``k`` (at most ``width``), or ``⌈fraction · width⌉`` (at least 1)."""
    if k is not None:
        return min(k, width)
    assert fraction is not None
    return max(1, min(width, math.ceil(fraction * width - 1e-9)))


def top_k_rows(x: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` entries of largest magnitude of each row of ``x [..., P]``, zero the others
    (ties broken by ``torch.topk``; exactly ``k`` entries kept per row). ``k ≥ P`` keeps all."""
    if k >= x.shape[-1]:
        return x
    keep = x.abs().topk(k, dim=-1, sorted=False).indices
    return torch.zeros_like(x).scatter(-1, keep, x.gather(-1, keep))


class RowwiseDefense(Defense):
    """A defense that applies one row-wise map ``f`` (:meth:`transform`) at the hook point chosen
    by ``on`` (:data:`TARGETS`), to one node's row at a time:

    * ``gradients`` — ``local_gradients``: the node's gradient ``g ← f(g)`` before it is used
      (FedSGD's upload; each local step of FedAvg and D-PSGD; each solver step of PDMM);
    * ``update`` — ``local_update``: the local update ``d = new − old`` becomes ``f(d)``
      (returned as ``new − (d − f(d))``, so a row ``f`` leaves unchanged stays bit-identical);
    * ``messages`` — ``outgoing``: every message row the node sends (of ``kinds``, default all),
      ``m ← f(m)``; receivers aggregate what they get, a node keeps its own exact state.

    Subclasses call :meth:`set_target` in their constructor and implement :meth:`transform`,
    which may return ``(f(x), new_state)`` on ``gradients`` and ``update`` (a node's residual).
    """

    on: str
    kinds: list[str] | None

    def set_target(self, on: str, kinds: list[str] | None) -> None:
        self.on = require_choice(on, tuple(TARGETS), "defense.on")
        self.kinds = check_kinds(kinds, "defense.kinds")
        require(
            self.kinds is None or self.on == "messages",
            "defense.kinds",
            kinds,
            "message kinds select messages: give kinds only with on=messages",
        )

    def hooks_used(self) -> frozenset[str]:
        """Only the hook of ``on`` (and the per-sample ones a subclass asks for)."""
        return (super().hooks_used() - set(TARGETS.values())) | {TARGETS[self.on]}

    def transform(
        self, x: torch.Tensor, node: NodeContext | MessageContext
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``f`` on one row ``x [P]`` of the node ``node.node`` (or the sender of message ``node``)."""
        raise NotImplementedError

    def local_gradients(
        self, grad: torch.Tensor, node: NodeContext
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.transform(grad, node) if self.on == "gradients" else grad

    def local_update(
        self, new: torch.Tensor, old: torch.Tensor, node: NodeContext
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if self.on != "update":
            return new
        d = new - old
        out = self.transform(d, node)
        if isinstance(out, tuple):
            return new - (d - out[0]), out[1]
        return new - (d - out)

    def outgoing(self, payload: torch.Tensor, msg: MessageContext) -> torch.Tensor:
        if self.on != "messages" or (self.kinds is not None and msg.kind not in self.kinds):
            return payload
        out = self.transform(payload, msg)
        if isinstance(out, tuple):
            raise TypeError("a message transform keeps no state (only on=gradients or on=update may)")
        return out

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        hook = TARGETS[self.on]
        if self.protocols and name not in self.protocols:
            return super().applies_to(name, protocol)
        if hook not in protocol.hook_points:
            return f"{name} has no {self.on} to act on (it calls no {hook} hook); choose another 'on'"
        return kinds_reason(self.kinds, protocol)

    def target_knowledge(self) -> dict[str, Any]:
        """The public facts of where the map acts (for :meth:`adaptive_knowledge`)."""
        return {"on": self.on, "hook": TARGETS[self.on], "kinds": self.kinds}
