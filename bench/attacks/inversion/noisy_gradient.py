"""Inversion of PDMM's noisy gradients (Yu et al., TIFS 2025, Prop. 1 (i), Eq. 21/31; Fig. 3).

From the eavesdropped ``Δz`` (and the coalition's ``z^(0)``) the optimality condition of each
honest node's local update gives its gradient up to a constant:

    g̃_i^(k) = ∇f_i(w_i^(k)) + Σ_{j∈N_i honest} B_{i|j} z_{i|j}^(0)       (Eq. 21, corrected)

(:meth:`~bench.attacks.observe.pdmm_observables.PDMMObservables.noisy_gradients`). The
attack treats ``g̃`` as if it were the gradient and runs DLG (or the Inverting Gradients
recipe) on it. With σ_z² = 0 it *is* the gradient (TIFS Theorem 1 (a): DFL leaks what CFL
leaks); as σ_z² grows the ``z^(0)`` term buries the gradient and the reconstruction collapses
while training is unaffected (the noise lies in Ψ⊥; TIFS C5, Fig. 3a).

Labels come from the noisy gradient itself (``labels="auto"``: iDLG for ``n_i = 1``, label
counts for ``n_i > 1``) — what an attacker who takes ``g̃`` at face value would do; the noise
corrupts the analytic rules too — or by enumeration (``"enumerate"``, the best fit kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.attacks.base import ATTACKS, Reconstruction
from bench.attacks.inversion.matching import matching_fn
from bench.attacks.inversion.oracle_transform import (
    node_gradient_variant,
    problems_transform,
    variant_labels,
)
from bench.attacks.inversion.pdmm_base import PDMMInversion
from bench.attacks.inversion.problems import LABEL_STRATEGIES, best_per_victim, build_problems
from bench.attacks.observe.gradients import GradientTarget, flat_model, input_shape, loss_function, loss_name
from bench.attacks.observe.pdmm_observables import Observables
from bench.core.params import require_choice
from bench.threats import View

if TYPE_CHECKING:
    from bench.attacks.oracle import OracleClient
    from bench.protocols import Protocol


@ATTACKS.register(
    "pdmm_noisy_gradient_inversion",
    "DLG on PDMM noisy gradients ∇f_i + Σ B z⁽⁰⁾ (TIFS Eq. 21/31): exact at σ_z² = 0, fades as σ_z² grows",
)
class NoisyGradientInversion(PDMMInversion):
    """Invert every honest node's noisy gradient ``g̃_i^(k)`` of rounds ``rounds``.

    Parameters
    ----------
    labels:
        ``"auto"`` (iDLG / label counts from ``g̃``), ``"idlg"``, ``"counts"`` or
        ``"enumerate"`` (:func:`~bench.attacks.inversion.problems.label_hypotheses`).
    rounds, anchor, victims, restarts, iterations, optimizer, objective, tv_weight, lr, signed,
    boxed, lr_decay, mean, std, assume, mu, init_scale, batch_size, seed:
        As :class:`~bench.attacks.inversion.pdmm_base.PDMMInversion`.
    """

    def __init__(self, labels: str = "auto", **params: object) -> None:
        super().__init__(**params)  # type: ignore[arg-type]
        self.labels = require_choice(labels, LABEL_STRATEGIES, "attack.labels")

    def uses_defense_oracle(self, protocol: Protocol, hooks: frozenset[str]) -> bool:
        """The generic variant: each target is one node's decoded gradient, so it matches
        ``D(∇L(x̂))`` with ``D`` the node's gradient hooks where the protocol reproduces them
        (:meth:`~bench.protocols.PDMM.observed_gradient`: one-gradient solvers, defenses on the
        gradient only; :func:`~bench.attacks.inversion.oracle_transform.node_gradient_variant`)."""
        return node_gradient_variant("auto", protocol, hooks)

    def run(
        self, view: View, observables: Observables | None = None, oracle: OracleClient | None = None
    ) -> list[Reconstruction]:
        """Attack ``view``; ``observables`` replaces the ones rebuilt from its traffic (harness
        side: :class:`~bench.attacks.observe.pdmm_observables.OracleObservables`); with
        ``oracle``, the generic defense-aware variant (module
        :mod:`~bench.attacks.inversion.oracle_transform`)."""
        model = flat_model(view)
        obs = self.observables(view, observables)
        g_noisy, w_eval = obs.noisy_gradients(self.anchor)
        scale = self.target_scale(view)
        targets = []
        for k in self.rounds:
            self.check_round(k, g_noisy.shape[0], "noisy gradient")
            targets += [
                GradientTarget(v, k, w_eval[k, v], g_noisy[k, v] * scale) for v in self.attacked_nodes(view)
            ]
        shape = input_shape(view)
        labels = variant_labels(self.labels, oracle)
        probs = build_problems(
            targets, model, loss_name(view), shape, self.batch_size, self.restarts, labels, self.seed,
            self.init_scale,
        )  # fmt: skip
        transform = problems_transform(oracle, view, probs.targets, probs.victim, self.objective)
        fn = matching_fn(
            model, loss_function(view), probs.y, probs.theta, probs.grad, self.objective, self.tv_weight,
            transform=transform,
        )  # fmt: skip
        result = self.optimize(fn, probs.x0, view)
        return best_per_victim(probs, result, {"problems": float(probs.x0.shape[0])})
