"""Secure-aggregation evasion with two Sybils (Pasquini, Raynal & Troncoso, S&P 2023, §6.1).

Under secure aggregation a D-PSGD node learns only the weighted sum of its neighbours' models,
through its own next model: ``agg_x = Θ_x^{t+1} − W_xx Θ_x^{t+½} = Σ_{u≠x} W_xu Θ_u^{t+½}``. Two
Sybils ``A_a``, ``A_b`` that chose ``N(A_b) = N(A_a) \\ {v}`` (outside the coalition) get the
victim's individual model as the difference of their aggregates:

    Θ_v^{t+½} = (agg_a − c · agg_b) / W_{a,v},   c = W_{a,u} / W_{b,u} for every shared u,

after removing what the Sybils themselves contributed to each other's sums. With uniform mixing
``c = |N(A_b)| / |N(A_a)|`` (the paper's "difference of sums, rescaled"). It works whatever the
secure-aggregation protocol, because it only uses what any protocol must reveal. The Sybils'
own half-steps are computed from their own data (full local batches: with minibatches the
coalition would need its own sampled batches, which the view does not hold — refused).
"""

from __future__ import annotations

import numpy as np
import torch

from bench.attacks.base import AttackError
from bench.attacks.observe.common_model import common_model
from bench.attacks.observe.gradients import knowledge
from bench.attacks.observe.system_knowledge import own_half_steps
from bench.threats import View


def sybil_victim(w: np.ndarray, coalition: tuple[int, ...]) -> tuple[int, int, int, float]:
    """``(a, b, v, c)``: the Sybil ``a`` adjacent to the victim ``v``, the other Sybil ``b`` and
    the weight ratio ``c`` — or an :class:`AttackError` when the coalition is not two Sybils with
    ``N(A_b) = N(A_a) \\ {v}`` and proportional weights on the shared neighbours."""
    if len(coalition) != 2:
        raise AttackError(f"the Sybil attack needs a coalition of two nodes; got {list(coalition)}")
    members = set(coalition)
    nbrs = {x: {int(u) for u in np.flatnonzero(w[x])} - members for x in coalition}
    for a, b in (coalition, coalition[::-1]):
        extra = nbrs[a] - nbrs[b]
        if nbrs[b] <= nbrs[a] and len(extra) == 1 and nbrs[b]:
            (v,) = extra
            ratios = {float(w[a, u] / w[b, u]) for u in nbrs[b]}
            if max(ratios) - min(ratios) > 1e-12 * max(ratios):
                raise AttackError(
                    "the Sybils weigh their shared neighbours unequally: the sums do not cancel"
                )
            return int(a), int(b), v, ratios.pop()
    raise AttackError(
        f"the Sybils' neighbourhoods {sorted(nbrs[coalition[0]])} and {sorted(nbrs[coalition[1]])} do not "
        f"differ by exactly one node (N(A_b) = N(A_a) \\ {{v}})"
    )


def sybil_models(view: View, round_: int) -> dict[int, torch.Tensor]:
    """``{v: Θ_v^{t+½}}``: the victim's model of ``round_`` from the Sybils' aggregates."""
    hyper = knowledge(view, "hyperparameters")
    if hyper.get("batch_size") is not None or int(hyper.get("local_steps", 1)) != 1:
        raise AttackError(
            "the Sybils' own updates are recomputed from their data: full batches, one local step"
        )
    if round_ + 1 not in view.own_states:
        raise AttackError(f"the Sybils' states at the start of round {round_ + 1} are not in the view")
    w = np.asarray(knowledge(view, "mixing"), dtype=np.float64)
    coalition = tuple(view.coalition)
    a, b, v, c = sybil_victim(w, coalition)
    theta0 = common_model(view, 0)
    base = theta0.detach().cpu().double()
    half = torch.from_numpy(own_half_steps(view, [round_], float(hyper["lr"]), theta0)[0]) + base
    nxt = view.own_states[round_ + 1].detach().cpu().double()
    agg = {}
    for j, x in enumerate(coalition):
        own = sum(float(w[x, y]) * half[k] for k, y in enumerate(coalition))  # W_xx and the other Sybil
        agg[x] = nxt[j] - own
    return {v: ((agg[a] - c * agg[b]) / float(w[a, v])).to(theta0.dtype)}
