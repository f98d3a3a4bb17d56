"""``membership_threshold``: the metric-based membership attack on the models a view holds.

The attacker evaluates a per-sample signal of an observed model on every candidate and calls
a candidate a member of the model's owner when the signal says "fits well" (Yeom et al. 2018:
the loss; Song & Mittal 2021: the modified entropy ``Mentr``, which Pasquini et al. 2023 use,
§2.2.1). The threshold is not the attack's business: the scorer sweeps every threshold (ROC,
AUC, TPR at low FPR) and reports Pasquini's oracle ``M − 0.5`` (:mod:`bench.metrics.membership`).

Which model (``source``): :mod:`bench.attacks.membership.observed`.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.gradients import flat_model
from bench.attacks.membership.observed import (
    SOURCES,
    check_rounds,
    requirement,
    resolve_rounds,
    stacked_targets,
)
from bench.membership.signals import SIGNALS, membership_score
from bench.registry_utils import require_choice
from bench.threats import View


@ATTACKS.register(
    "membership_threshold",
    "metric-based MIA (loss, Mentr …) on the FL global model or D-PSGD received/marginalized updates",
)
class MembershipThreshold(Attack):
    """Score every candidate by ``signal`` on the observed model of each victim (module docstring).

    Parameters
    ----------
    rounds:
        Rounds whose models are attacked (one answer per victim and round), or ``"last"``:
        the last round the run ran (:mod:`bench.attacks.membership.observed`).
    source:
        ``"global_model"``, ``"received"`` or ``"marginalized"``.
    signal:
        A registered signal of :data:`bench.membership.signals.SIGNALS` (``"mentr"``: Pasquini
        et al.; ``"loss"``: Yeom et al.).
    include_self:
        Marginalization: Eq. 6 (``True``) or Algorithm 2's normalization (``False``).
    """

    threats: ClassVar[tuple[str, ...]] = ("fl_user", "neighbors")
    metrics: ClassVar[tuple[str, ...]] = ("membership_auc",)
    #: the harness passes the candidate pool to :meth:`run`
    needs_candidates: ClassVar[bool] = True

    def __init__(
        self,
        rounds: list[int | str] | str = (0,),
        source: str = "global_model",
        signal: str = "mentr",
        include_self: bool = True,
    ) -> None:
        self.rounds = check_rounds(rounds)
        self.source = require_choice(source, SOURCES, "attack.source")
        self.signal = require_choice(signal, tuple(SIGNALS.names()), "attack.signal")
        self.include_self = bool(include_self)

    def requirements(self) -> Requirement:
        return requirement(self.rounds, self.source, self.include_self)

    def run(  # type: ignore[override]
        self, view: View, x: torch.Tensor | None = None, y: torch.Tensor | None = None
    ) -> list[Reconstruction]:
        if x is None or y is None:
            raise AttackError("a membership attack needs the harness' candidate pool")
        model = flat_model(view)
        out = []
        for t in resolve_rounds(view, self.rounds, self.source):
            victims, theta = stacked_targets(view, t, self.source, self.include_self)
            scores = membership_score(self.signal, model, theta.to(x.dtype), x, y)  # [V, C]
            out += [Reconstruction(node=v, round=t, scores=s) for v, s in zip(victims, scores, strict=True)]
        return out
