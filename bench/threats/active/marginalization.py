"""Functional marginalization (Pasquini et al. 2023, §4.1.2, Eqs. 4–6 and Algorithm 2).

In D-PSGD an attacker ``A`` receives, each round, the local updates ``Θ_u^{t+1/2}`` of its
neighbours and has its own. Write ``N(A)`` for ``A``'s closed neighbourhood (``A`` included) and
``k = |N(A)|``. The next model of a neighbour mixes everyone's contributions (Eq. 4,
``Θ_v^t ≈ Θ̊_v^t + Θ_{V∖v}^t``); the attacker estimates the "rest of the system" by the mean of
the other updates it holds (Eq. 5) and isolates ``v``'s own contribution:

    Θ̊_v = k Θ_v − Σ_{u ∈ N(A)∖v} Θ_u                      (Eq. 6, ``include_self=True``)
         = Θ_v + (k − 1) (Θ_v − mean_{u ∈ N(A)∖v} Θ_u),

a linear extrapolation of ``v``'s update away from the others. Algorithm 2 (the echo attack)
normalizes without the attacker's own update:

    Θ̊_v = (k − 1) Θ_v − Σ_{u ∈ N(A)∖{v, A}} Θ_u             (``include_self=False``).

The paper states both; which one a result used is a parameter and is recorded. At consensus
(every update equal, consensus distance ``C = 0``) both return ``Θ_v`` exactly, so marginalization
can only change a membership attack when ``C > 0`` (Pasquini et al. C11: it helps at low
non-zero ``C`` and hurts at high ``C``, where the estimate of the rest is poor).

Computed for all victims at once from the sum ``S`` of the held updates:
``Θ̊_v = (k + 1) Θ_v − S`` (Eq. 6) and ``Θ̊_v = k Θ_v − S + Θ_A`` (Algorithm 2).
"""

from __future__ import annotations

import torch

from bench.core.errors import BenchInputError


def marginalize(
    updates: torch.Tensor, own: int, victims: torch.Tensor | list[int], include_self: bool = True
) -> torch.Tensor:
    """``[V, P]``: the marginalized models of ``victims`` (row indices of ``updates``).

    Parameters
    ----------
    updates:
        ``[k, P]``: every update the attacker holds this round — its own (row ``own``) and its
        neighbours' ``Θ_u^{t+1/2}``; ``k = |N(A)|``.
    own:
        The row of the attacker's own update.
    victims:
        Rows to marginalize (neighbours; not ``own``).
    include_self:
        ``True``: Eq. 6 (the rest includes the attacker's update); ``False``: Algorithm 2.
    """
    k = updates.shape[0]
    rows = torch.as_tensor(victims, dtype=torch.long, device=updates.device).reshape(-1)
    if not 0 <= own < k:
        raise BenchInputError("marginalization.own", own, reason=f"must be a row of the {k} updates")
    bad = [int(v) for v in rows if not 0 <= int(v) < k or int(v) == own]
    if bad:
        raise BenchInputError(
            "marginalization.victims",
            bad,
            reason=f"must be rows 0..{k - 1} other than the attacker's ({own})",
        )
    if k < 2:
        raise BenchInputError(
            "marginalization.updates", k, reason="needs the attacker's and a neighbour's update"
        )
    total = updates.sum(0, keepdim=True)
    victim = updates[rows]
    if include_self:
        return (k + 1) * victim - total
    return k * victim - total + updates[own : own + 1]
