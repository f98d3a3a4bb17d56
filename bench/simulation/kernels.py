"""Fused elementwise round kernels: eager, or compiled by ``torch.compile`` (opt-in).

A round of the stacked engine is memory-bound: each eager elementwise op reads and writes whole
``[N, P]`` or ``[|E|, P]`` tensors, so a chain of ``k`` ops moves its operands ``k`` times. The
kernels here are the chains of the protocols' hot paths that no defense hook interrupts; inductor
fuses each into one loop over the data (one read of every input, one write of the output):

* :func:`prox_step` — PDMM's linearized primal update ``w − s (g + a + ρ d w)`` (Eq. 4 with one
  gradient step; also every inner step of ``inexact``);
* :func:`quadratic_step` — QA-PDMM's ``(μ w − g − a) / (μ + ρ d)``;
* :func:`pair_increments` — the lean PDMM increments ``±θ (D + 2ρ w_{i|j})`` of both directions,
  gathering the node rows inside the loop (eager: a gather, then an add, per half);
* :func:`integrate_pairs` — ``D ← D + δ_b − δ_f`` in place (eager: two passes).

Each kernel is a plain function (the eager path: written with as few passes and temporaries as
ATen allows) and :func:`kernel` returns it or its compiled twin, compiled once per process and
shape (``dynamic=False``: a simulation's shapes are fixed; a new shape recompiles). Compiled ≡
eager to float tolerance (``tests/simulation/test_kernels.py``, float64). The first call of each
compiled kernel compiles it, which takes seconds (see performance/README.md) and pays for itself
only on long runs: compilation is off unless the run config says ``compile: true``.

Where compilation is skipped, and why:

* D-PSGD and FedSGD rounds: every pass is already one ATen op (a batched matrix product, one SGD
  axpy, one ``embedding_bag`` gossip, one weighted sum), and what lies between them is a defense
  hook (``local_update``, ``outgoing``, the aggregation rule). A kernel spanning the hooks would
  skip them, so there is nothing to fuse;
* tensors smaller than :data:`MIN_COMPILED_NUMEL` elements, whose rounds are dispatch-bound;
* PDMM's full edge state (``edge_state: full``): it exists for observers (the trajectory) and
  defenses that wrap the aggregation, not for speed;
* the receivers' ``a`` updates (two ``index_add_``): a scatter-add, which inductor on CPU lowers
  to atomic adds, slower than ATen's serial ``index_add_``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable[..., torch.Tensor | None])

_COMPILED: dict[Callable, Callable] = {}


#: below this many elements per operand a compiled kernel is slower than eager: the call's guard
#: checks and dispatch exceed the eager ops' cost (measured by ``performance/pdmm.py``; see
#: performance/README.md)
MIN_COMPILED_NUMEL = 1 << 16


def kernel(fn: F, compiled: bool, numel: int | None = None) -> F:
    """``fn`` itself (eager), or its ``torch.compile`` twin (inductor, whole graph, static shapes)
    when ``compiled`` and the operands (``numel`` elements, if given) are large enough to gain."""
    if not compiled or (numel is not None and numel < MIN_COMPILED_NUMEL):
        return fn
    if fn not in _COMPILED:
        _COMPILED[fn] = torch.compile(fn, dynamic=False, fullgraph=True)
    return _COMPILED[fn]  # type: ignore[return-value]


def prox_step(
    w: torch.Tensor, g: torch.Tensor, a: torch.Tensor, rd: torch.Tensor, step: float
) -> torch.Tensor:
    """``w − s (g + a + ρ d ⊙ w)`` with ``rd = ρ d`` ``[N, 1]`` (PDMM Eq. 4 linearized at ``w``)."""
    return w - step * (g + a + rd * w)


def quadratic_step(
    w: torch.Tensor, g: torch.Tensor, a: torch.Tensor, rd: torch.Tensor, mu: float
) -> torch.Tensor:
    """``(μ w − g − a) / (μ + ρ d)`` (QA-PDMM, thesis Eq. 4.9)."""
    return (mu * w - g - a) / (mu + rd)


def pair_increments(
    w: torch.Tensor, d: torch.Tensor, i: torch.Tensor, j: torch.Tensor, rho: float, theta: float
) -> torch.Tensor:
    """The lean PDMM increments ``[2|E|, P]`` pair-major: ``+θ (D + 2ρ w_i)`` along ``i → j``,
    then ``−θ (D + 2ρ w_j)`` along ``j → i`` (:mod:`bench.protocols.pdmm_edges`).

    Eager, each half is one gather of pre-scaled node rows into the output and one in-place add
    of ``D`` (no temporary of the output's size)."""
    n_pairs, width = d.shape
    out = torch.empty(2, n_pairs, width, dtype=d.dtype, device=d.device)
    scale = 2.0 * rho * theta
    if torch.compiler.is_compiling():  # one loop: out = ±(θ D + s w_row)
        out[0] = theta * d + scale * w[i]
        out[1] = -(theta * d) - scale * w[j]
        return out.view(2 * n_pairs, width)
    torch.index_select(w * scale, 0, i, out=out[0])
    out[0].add_(d, alpha=theta)
    torch.index_select(w * -scale, 0, j, out=out[1])
    out[1].sub_(d, alpha=theta)
    return out.view(2 * n_pairs, width)


def integrate_pairs(d: torch.Tensor, delivered: torch.Tensor) -> None:
    """``D ← D + δ_b − δ_f`` in place, with ``delivered = [δ_f; δ_b]`` ``[2|E|, P]``."""
    halves = delivered.view(2, d.shape[0], d.shape[1])
    if torch.compiler.is_compiling():  # one loop
        d.copy_(d + halves[1] - halves[0])
        return
    d.add_(halves[1]).sub_(halves[0])
