"""``membership_lira``: offline LiRA (Carlini et al. 2022, §IV-C) with reference worlds trained
as stacked nodes of the engine.

For each candidate ``n`` the attacker computes the logit-scaled confidence
``φ = log(p_y / (1 − p_y))`` of the observed target model and of the ``M`` reference models
(none of which trained on a candidate), fits ``N(μ_out,n, σ²_out,n)`` to the references and
scores ``log Φ((φ_n − μ_out,n) / σ_out,n)`` — the one-sided likelihood test of the offline attack
(:func:`bench.membership.lira.lira_offline`). The online attack (reference models trained on
half of the candidates) is in the library but not yet a harness attack.
"""

from __future__ import annotations

import torch

from bench.attacks.base import ATTACKS
from bench.attacks.membership.reference_base import ReferenceAttack, ScoreInputs
from bench.membership.lira import VARIANCES, lira_offline
from bench.membership.signals import signal
from bench.registry_utils import require_choice


@ATTACKS.register(
    "membership_lira",
    "offline LiRA (Carlini et al. 2022) against reference worlds trained as stacked engine nodes",
)
class MembershipLiRA(ReferenceAttack):
    """Offline LiRA (module docstring). ``variance``: ``"per_sample"`` (each candidate's own
    spread over the references) or ``"global"`` (Carlini et al.'s fixed variance, advised for
    few reference models); the other parameters: :class:`ReferenceAttack`."""

    def __init__(self, *args, variance: str = "per_sample", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.variance = require_choice(variance, VARIANCES, "attack.variance")

    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        x, y = inputs.x, inputs.y
        phi_target = signal("logit_confidence", inputs.model, inputs.targets, x, y)  # [V, C]
        phi_ref = signal("logit_confidence", inputs.model, inputs.refs.theta.to(x.dtype), x, y)  # [M, C]
        return lira_offline(phi_target, phi_ref, None, self.variance)
