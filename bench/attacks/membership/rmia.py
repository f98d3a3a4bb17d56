"""``membership_rmia``: offline RMIA (Zarifzadeh et al. 2024, §3) with reference worlds trained
as stacked nodes of the engine.

``Score(x) = Pr_z[ (p_θ(x)/Pr(x)) / (p_θ(z)/Pr(z)) > γ ]`` over population samples ``z`` that no
reference world trained on (``z_samples`` of the population, held out), with ``p_θ`` the
target's probability of the true label and ``Pr(·)`` the offline marginal
``½(1 + a)·mean_ref p + ½(1 − a)`` (:mod:`bench.attacks.membership.pairwise_likelihood`). ``a`` is chosen as
ml_privacy_meter does, without the target: one reference model plays the target and the others
attack it on the population samples the worlds drew, whose membership the attacker knows
(:func:`bench.attacks.membership.pairwise_likelihood.tune_offline_a`); or fixed by the parameter ``a``.
"""

from __future__ import annotations

import torch

from bench.attacks.base import ATTACKS
from bench.attacks.membership.pairwise_likelihood import rmia_scores, tune_offline_a
from bench.attacks.membership.reference_base import ReferenceAttack, ScoreInputs
from bench.attacks.membership.signals import signal
from bench.core.errors import require


@ATTACKS.register(
    "membership_rmia",
    "offline RMIA (Zarifzadeh et al. 2024) against reference worlds trained as stacked engine nodes",
)
class MembershipRMIA(ReferenceAttack):
    """Offline RMIA (module docstring). ``z_samples``: population samples held out of every
    world as the comparison set; ``gamma``: the ratio threshold ``γ ≥ 1``; ``a``: the offline
    interpolation in ``[0, 1]``, or ``None`` to tune it on the references; the other parameters:
    :class:`ReferenceAttack`."""

    def __init__(
        self, *args, z_samples: int = 256, gamma: float = 1.0, a: float | None = None, **kwargs
    ) -> None:
        super().__init__(*args, **kwargs)
        require(isinstance(z_samples, int) and z_samples > 0, "attack.z_samples", z_samples, "must be > 0")
        require(isinstance(gamma, (int, float)) and gamma >= 1, "attack.gamma", gamma, "must be ≥ 1")
        require(a is None or 0 <= float(a) <= 1, "attack.a", a, "must be in [0, 1] or null")
        self.reserve = z_samples
        self.gamma = float(gamma)
        self.a = a

    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        model, refs, x, y = inputs.model, inputs.refs, inputs.x, inputs.y
        ref_theta = refs.theta.to(x.dtype)
        zx, zy = inputs.held
        ref_z = signal("confidence", model, ref_theta, zx, zy)  # [M, Z]
        a = self.a
        if a is None:
            # population samples some other reference model did not train on (with few worlds
            # a sample can be in every one of them: no out model to compare with)
            in_mask = refs.in_mask()
            keep = (~in_mask[1:]).any(0)
            ref_pop = signal(
                "confidence", model, ref_theta, inputs.trained[0][keep], inputs.trained[1][keep]
            )  # [M, Q']
            a, _ = tune_offline_a(ref_pop, ref_z, in_mask[:, keep], stand_in=0, gamma=self.gamma)
        return rmia_scores(
            signal("confidence", model, inputs.targets, x, y),
            signal("confidence", model, ref_theta, x, y),
            signal("confidence", model, inputs.targets, zx, zy),
            ref_z,
            a=float(a),
            gamma=self.gamma,
        )
