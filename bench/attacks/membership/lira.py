"""``membership_lira``: LiRA (Carlini et al. 2022), offline (§IV-C) or online (Algorithm 1),
with reference worlds trained as stacked nodes of the engine.

For each candidate ``n`` the attacker computes the logit-scaled confidence
``φ = log(p_y / (1 − p_y))`` of the observed target model and of the ``M`` reference models
(none of which trained on a candidate), fits ``N(μ_out,n, σ²_out,n)`` to the references and
scores ``log Φ((φ_n − μ_out,n) / σ_out,n)`` — the one-sided likelihood test of the offline attack
(:func:`bench.attacks.membership.likelihood_ratio.lira_offline`).

Online (``online: true``): every candidate is in half of the worlds — the attacker trains on
the candidates it was given, not knowing which are members (filled up from the population) — and
the score is the log-likelihood ratio of ``N(μ_in,n, σ²_in,n)`` and ``N(μ_out,n, σ²_out,n)``
(:func:`bench.attacks.membership.likelihood_ratio.lira_online`). It costs the worlds' training the attacker
could
reuse offline for every target; it is the stronger attack at low FPR in Carlini et al.
"""

from __future__ import annotations

import torch

from bench.attacks.base import ATTACKS
from bench.attacks.membership.likelihood_ratio import VARIANCES, lira_offline, lira_online
from bench.attacks.membership.reference_base import ReferenceAttack, ScoreInputs
from bench.attacks.membership.signals import signal
from bench.core.errors import require
from bench.core.params import require_choice


@ATTACKS.register(
    "membership_lira",
    "LiRA (Carlini et al. 2022), offline or online, against reference worlds trained as stacked engine nodes",
)
class MembershipLiRA(ReferenceAttack):
    """LiRA (module docstring). ``online``: online worlds (default: offline); ``variance``:
    ``"per_sample"`` (each candidate's own spread over the references) or ``"global"``
    (Carlini et al.'s fixed variance, advised for few reference models); the other parameters:
    :class:`ReferenceAttack`."""

    def __init__(self, *args, variance: str = "per_sample", online: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.variance = require_choice(variance, VARIANCES, "attack.variance")
        require(isinstance(online, bool), "attack.online", online, "must be true or false")
        self.online = online

    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        x, y = inputs.x, inputs.y
        phi_target = signal("logit_confidence", inputs.model, inputs.targets, x, y)  # [V, C]
        phi_ref = signal("logit_confidence", inputs.model, inputs.refs.theta.to(x.dtype), x, y)  # [M, C]
        if self.online:
            ref_in = inputs.refs.in_mask()[:, : len(y)]
            return lira_online(phi_target, phi_ref, ref_in, self.variance)
        return lira_offline(phi_target, phi_ref, None, self.variance)
