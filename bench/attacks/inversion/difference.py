"""Gradient-difference inversion for PDMM ("differential gradient attack"; thesis Eq. 5.11 and
Algorithm 6, TIFS §3.2).

The target is an honest node's gradient difference ``∇f_i(w^(k+ℓ)) − ∇f_i(w^(k))`` recovered
from eavesdropped Δz (:class:`~bench.attacks.observe.pdmm_observables.PDMMObservables`),
and the dummy data ``x′`` is matched with **both models in the graph**:

    min_{x′}  D( ∇f(w^(k+ℓ), x′, ℓ′) − ∇f(w^(k), x′, ℓ′),  target ) + λ_TV TV(x′)

with ``D`` the squared L2 distance (DLG) or ``1 − cos`` (Inverting Gradients; TIFS App. F).
The authors' released code computes the second model's gradient detached and, in the cosine
cost, with a ``+`` where the difference needs a ``−``; here both terms are differentiated
through (``create_graph`` via ``torch.func``) and the sign matches the target — the correct
form of Eq. 5.11. Labels carry no sign information in a gradient difference (thesis C10), so
every class (every label multiset for ``n_i > 1``) is enumerated and the best fit kept
(Algorithm 6); restarts × labels × victims are one batched optimization.
"""

from __future__ import annotations

import torch
from torch.func import grad

from bench.attacks.base import ATTACKS, Reconstruction
from bench.attacks.inversion.gram import GramMatching, gram_applicable
from bench.attacks.inversion.matching import (
    MATCHING_METHODS,
    BatchedFn,
    mean_loss,
    problems_fn,
    regularized_distance,
    vmap_problems,
)
from bench.attacks.inversion.pdmm_base import PDMMInversion
from bench.attacks.inversion.problems import best_per_victim, build_problems
from bench.attacks.observe.gradients import GradientTarget, flat_model, input_shape, loss_function, loss_name
from bench.attacks.observe.pdmm_observables import Observables
from bench.core.errors import require_positive_int
from bench.core.params import require_choice
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn
from bench.threats import View


def difference_fn(
    model: FlatModel,
    loss_fn: LossFn,
    y: torch.Tensor,
    theta2: torch.Tensor,
    target: torch.Tensor,
    objective: str,
    tv_weight: float = 0.0,
    method: str = "auto",
) -> BatchedFn:
    """Batched objective of K problems: ``theta2 [K, 2P]`` = (early, late) models, ``target [K, P]``
    the observed differences, ``y [K, B]`` the label hypotheses.

    ``method``: ``"gram"`` — the rank-one expansion of the difference of two Linear-layer
    gradients (:class:`~bench.attacks.inversion.gram.GramMatching` with terms (early, late) and
    coefficients (−1, +1)); ``"vmap"`` — ``vmap`` of the second-order objective (any model);
    ``"auto"`` — ``gram`` where it applies. Both compute the same objective and gradient."""
    require_choice(method, MATCHING_METHODS, "matching method")
    if method == "gram" or (method == "auto" and gram_applicable(model)):
        return GramMatching(
            model, loss_fn, y, theta2, target, objective, tv_weight, terms=2, coefficients=(-1.0, 1.0)
        )
    p = target.shape[1]

    train_loss = mean_loss(model, loss_fn)

    def one(x: torch.Tensor, yy: torch.Tensor, th: torch.Tensor, tg: torch.Tensor) -> torch.Tensor:
        g = grad(train_loss)(th[p:], x, yy) - grad(train_loss)(th[:p], x, yy)
        return regularized_distance(g, tg, x, objective, tv_weight)

    return problems_fn(vmap_problems(one, 2 * p, target), y, theta2, target)


@ATTACKS.register(
    "pdmm_difference_inversion",
    "Inversion of PDMM gradient differences (thesis Eq. 5.11, both models differentiated; labels enumerated)",
)
class GradientDifferenceInversion(PDMMInversion):
    """Invert honest nodes' gradient differences from eavesdropped PDMM traffic.

    Parameters
    ----------
    lag:
        ℓ (the thesis uses 2, TIFS any ℓ ≥ 1).
    rounds, anchor, victims, restarts, iterations, optimizer, objective, tv_weight, lr, signed,
    boxed, lr_decay, mean, std, assume, mu, init_scale, batch_size, seed:
        As :class:`~bench.attacks.inversion.pdmm_base.PDMMInversion`. Labels are always
        enumerated (thesis C10: a difference has no informative sign).
    """

    def __init__(self, lag: int = 1, **params: object) -> None:
        super().__init__(**params)  # type: ignore[arg-type]
        self.lag = require_positive_int(lag, "attack.lag")

    @property
    def lag_needed(self) -> int:
        return self.lag

    def run(self, view: View, observables: Observables | None = None) -> list[Reconstruction]:
        """Attack ``view``; ``observables`` replaces the ones rebuilt from its traffic (harness
        side: :class:`~bench.attacks.observe.pdmm_observables.OracleObservables`)."""
        model = flat_model(view)
        obs = self.observables(view, observables)
        dg, w_early, w_late = obs.gradient_differences(self.lag, "delta_z", anchor=self.anchor)
        scale = self.target_scale(view)
        targets = []
        for k in self.rounds:
            self.check_round(k, dg.shape[0], "gradient difference")
            for v in self.attacked_nodes(view):
                theta2 = torch.cat([w_early[k, v], w_late[k, v]])
                targets.append(GradientTarget(v, k, theta2, dg[k, v] * scale))
        shape = input_shape(view)
        probs = build_problems(
            targets, model, loss_name(view), shape, self.batch_size, self.restarts, "enumerate", self.seed,
            self.init_scale,
        )  # fmt: skip
        fn = difference_fn(
            model, loss_function(view), probs.y, probs.theta, probs.grad, self.objective, self.tv_weight
        )
        result = self.optimize(fn, probs.x0, view)
        return best_per_victim(probs, result, {"problems": float(probs.x0.shape[0])})
