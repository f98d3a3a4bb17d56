"""What an insider's own code makes of the messages delivered to it (Kerckhoffs' principle for
participants).

A threat whose adversary is a participant — a curious server, curious neighbours, the corrupt
nodes of an active coalition, an eavesdropper's colluders — runs the defense's receive side on
what is delivered to its own nodes, with its own keys. A transform that every receiver undoes
(a secret sign pattern, a permutation, a scaling that all nodes share) therefore hides nothing
from it, and the View must hold the messages as its nodes decode them, not only as they travelled.

The receive side is ``wrap_aggregation``, a black box around the protocol's rule, and the rule is
linear in every delivered message (:meth:`bench.protocols.base.Protocol.delivery_slots`: delivery
``e`` lands in output row ``r_e`` with coefficient ``c_e``). So the message the receiver's code
effectively aggregated is read off the receiver's own code by a difference:

    d_e = ( A(own, D)[r_e] − A(own, D with m_e := 0)[r_e] ) / c_e ,

exact for every defense whose decoding is linear (``d_e = m_e`` without a defense; ``d_e = S⁻¹ m_e``
for a shared invertible ``S``), and a harmless guess otherwise (a receiver that can only unmask a
sum — secure aggregation — gives noise for each message). Deliveries whose output rows differ are
probed in one call, so a round costs one call per delivery to the busiest receiver, on recorded
rounds only, and only under a defense that overrides ``wrap_aggregation``. A receive side that
fails on a probe leaves that message as it travelled.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.simulation.messages import MessageBatch

#: a decoded message equal to the transmitted one within this relative tolerance is not kept
SAME_RTOL = 1e-6


def decode_deliveries(
    aggregate: Callable[[torch.Tensor, MessageBatch], torch.Tensor],
    own: torch.Tensor,
    delivered: MessageBatch,
    slots: tuple[torch.Tensor, torch.Tensor],
    targets: torch.Tensor,
) -> torch.Tensor | None:
    """The per-edge payload ``[E, P]`` of ``delivered.per_edge()`` with every delivery in
    ``targets`` (a boolean mask ``[E]``) replaced by what ``aggregate`` — the receivers' wrapped
    rule — decodes it to; ``None`` when no target decodes to anything but what was sent.

    ``slots``: ``(rows [E], coef [E])`` of the per-edge deliveries
    (:meth:`~bench.protocols.base.Protocol.delivery_slots`)."""
    rows, coef = slots
    raw = delivered.payload
    if not bool(targets.any()):
        return None
    dtype = own.dtype if own.is_floating_point() else torch.get_default_dtype()
    base = _rows(aggregate(own.clone(), delivered)).to(dtype)
    decoded = raw.to(dtype, copy=True)  # ring elements (secure aggregation) decode to reals
    picked = targets.nonzero().squeeze(1)
    # the k-th target of each output row is probed in call k (row-disjoint probes, one call each)
    order = torch.argsort(rows[picked], stable=True)
    picked = picked[order]
    r = rows[picked]
    first = torch.searchsorted(r, r, right=False)
    rank = torch.arange(len(r), device=r.device) - first
    for k in range(int(rank.max()) + 1 if len(rank) else 0):
        sel = picked[rank == k]
        payload = raw.clone()
        payload[sel] = 0
        try:
            probe = _rows(aggregate(own.clone(), delivered.with_payload(payload)))
        except Exception:  # the receive side cannot aggregate the probe: keep what travelled
            continue
        decoded[sel] = (base[rows[sel]] - probe[rows[sel]].to(dtype)) / coef[sel, None].to(dtype)
    if not raw.is_floating_point():
        return decoded
    same = (decoded - raw).abs() <= SAME_RTOL * (1.0 + raw.abs())
    return None if bool(same.all()) else decoded


def _rows(out: torch.Tensor) -> torch.Tensor:
    return out.reshape(1, -1) if out.dim() == 1 else out.reshape(out.shape[0], -1)
