"""``dlg_batched``: DLG gradient matching (Zhu et al. 2019, Eq. 4) over victims × restarts ×
label hypotheses as one batched L-BFGS or Adam optimization.

Each problem is ``min_x ‖∇_θ L(θ; x, y_h) − g‖²`` for an observed gradient ``g`` at ``θ``
(:mod:`bench.attacks.observe.targets`), built by :mod:`bench.attacks.inversion.problems`, evaluated by
:mod:`bench.attacks.inversion.matching` and optimized by :mod:`bench.attacks.inversion.optimizers`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.attacks.base import ATTACKS, Attack, Reconstruction, Requirement
from bench.attacks.inversion.adaptive import matching_adaptation
from bench.attacks.inversion.matching import MATCHES, OBJECTIVES, matching_fn
from bench.attacks.inversion.optimizers import OPTIMIZERS, batched_adam, batched_lbfgs
from bench.attacks.inversion.oracle_transform import node_gradient_variant, problems_transform
from bench.attacks.inversion.problems import LABEL_STRATEGIES, Problems, best_per_victim, build_problems
from bench.attacks.observe.gradients import flat_model, input_shape, loss_function, loss_name
from bench.attacks.observe.targets import (
    SOURCES,
    gradient_targets,
    server_window_params,
    source_kinds,
    source_rounds,
)
from bench.attacks.oracle import OracleClient
from bench.core.errors import require_number, require_positive_int
from bench.core.params import require_choice
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LossFn
from bench.threats import View

if TYPE_CHECKING:
    from bench.protocols import Protocol


@ATTACKS.register(
    "dlg_batched",
    "DLG with label enumeration/iDLG; victims × restarts × labels as one batched L-BFGS/Adam run",
)
class BatchedDLG(Attack):
    """DLG gradient matching (Zhu et al. 2019, Eq. 4; Yu et al., TIFS 2025, Eq. 8) over many
    hypotheses at once.

    For every victim gradient ``g`` at parameters ``θ``, every restart ``r`` and every label
    hypothesis ``y_h`` the problem ``min_x ‖∇_θ L(θ; x, y_h) − g‖²`` is one of K problems of a
    single batched optimization (:func:`~bench.attacks.inversion.matching.matching_fn`,
    :func:`~bench.attacks.inversion.optimizers.batched_lbfgs` or
    :func:`~bench.attacks.inversion.optimizers.batched_adam`); per victim the (restart,
    hypothesis) with the lowest final objective is returned — label enumeration "try every
    class, keep the best fit" where no analytic rule is wanted, iDLG's analytic label (Zhao et
    al. 2020) for one-sample classification gradients, or the label multiset of a batch from its
    label counts (``n_c = B (p̄_c − ∂L/∂b_c)``; Geng et al. 2021, Wainakh et al. 2022;
    :mod:`~bench.attacks.inversion.label_counts`) for ``B > 1``.

    Parameters
    ----------
    rounds, source, init_scale, batch_size, seed:
        As :class:`~bench.attacks.inversion.dlg.DLG`.
    restarts:
        Initializations per victim (shared by its label hypotheses).
    labels:
        ``"idlg"``, ``"counts"``, ``"enumerate"`` or ``"auto"`` (``idlg`` for ``batch_size = 1``,
        ``counts`` for ``batch_size > 1``); see
        :func:`~bench.attacks.inversion.problems.label_hypotheses`.
    iterations:
        L-BFGS iterations (Armijo backtracking may add evaluations) or Adam steps.
    optimizer:
        ``"lbfgs"`` (per-problem batched L-BFGS, ``history`` pairs) or ``"adam"`` (``lr``).
    lr:
        Adam's step size (ignored by L-BFGS, whose line search starts at 1).
    objective:
        ``"l2"`` (DLG) or ``"cosine"`` (direction only; the adaptive variant against clipping).
    match:
        ``"all"`` coordinates, or ``"kept"``: only where the observed gradient is non-zero (the
        adaptive variant against sparsification; :mod:`bench.attacks.inversion.adaptive`).

    Extra
    -----
    ``final_loss``, ``rel_loss``, ``label_inferred``, ``hypotheses`` (per victim), ``restart``,
    ``hypothesis`` (index of the kept ones), ``evaluations``, ``problems`` (K).
    """

    threats = ("server", "eavesdropper", "neighbors")
    per_round = True
    protocols = ("fedsgd", "dpsgd")
    metrics = ("image_ssim", "image_psnr", "label_accuracy")

    def __init__(
        self,
        rounds: list[int] | tuple[int, ...] = (0,),
        source: str = "auto",
        restarts: int = 1,
        labels: str = "auto",
        iterations: int = 100,
        optimizer: str = "lbfgs",
        lr: float = 0.1,
        history: int = 100,
        init_scale: float = 1.0,
        batch_size: int = 1,
        objective: str = "l2",
        match: str = "all",
        seed: int = 0,
    ) -> None:
        self.objective = require_choice(objective, OBJECTIVES, "attack.objective")
        self.match = require_choice(match, MATCHES, "attack.match")
        self.rounds = [int(t) for t in rounds]
        self.source = require_choice(source, SOURCES, "attack.source")
        self.restarts = require_positive_int(restarts, "attack.restarts")
        self.labels = require_choice(labels, LABEL_STRATEGIES, "attack.labels")
        self.iterations = require_positive_int(iterations, "attack.iterations")
        self.optimizer = require_choice(optimizer, OPTIMIZERS, "attack.optimizer")
        self.lr = require_number(lr, "attack.lr")
        self.history = require_positive_int(history, "attack.history")
        self.init_scale = require_number(init_scale, "attack.init_scale")
        self.batch_size = require_positive_int(batch_size, "attack.batch_size")
        self.seed = int(seed)

    def adapt(self, defense: str, knowledge: dict[str, Any]) -> dict[str, Any] | None:
        """Match the kept coordinates of a sparsified gradient, directions of a clipped one
        (:func:`~bench.attacks.inversion.adaptive.matching_adaptation`)."""
        return matching_adaptation(knowledge, self.objective)

    def window_params(self, threat: str, protocol: str) -> dict[str, Any] | None:
        return server_window_params(self.source, threat, protocol)

    def requirements(self) -> Requirement:
        return Requirement(rounds=source_rounds(self.source, self.rounds), kinds=source_kinds(self.source))

    def uses_defense_oracle(self, protocol: Protocol, hooks: frozenset[str]) -> bool:
        """:func:`~bench.attacks.inversion.oracle_transform.node_gradient_variant`."""
        return node_gradient_variant(self.source, protocol, hooks)

    def problems(self, view: View) -> tuple[Problems, FlatModel, LossFn]:
        """The K problems of ``view`` with the model and loss they are matched with."""
        model = flat_model(view)
        targets = [tg for t in self.rounds for tg in gradient_targets(view, t, self.source)]
        probs = build_problems(
            targets, model, loss_name(view), input_shape(view), self.batch_size, self.restarts, self.labels,
            self.seed, self.init_scale,
        )  # fmt: skip
        return probs, model, loss_function(view)

    def run(self, view: View, oracle: OracleClient | None = None) -> list[Reconstruction]:
        """Invert ``view``'s gradients; with ``oracle``, the generic defense-aware variant (the
        defense's pipeline in the objective, :mod:`~bench.attacks.inversion.oracle_transform`)."""
        probs, model, loss_fn = self.problems(view)
        fn = matching_fn(
            model,
            loss_fn,
            probs.y,
            probs.theta,
            probs.grad,
            self.objective,
            kept_only=self.match == "kept",
            transform=problems_transform(oracle, view, probs.targets, probs.victim, self.objective),
        )
        if self.optimizer == "lbfgs":
            result = batched_lbfgs(fn, probs.x0, self.iterations, history=self.history)
        else:
            result = batched_adam(fn, probs.x0, self.iterations, lr=self.lr)
        return best_per_victim(probs, result, {"problems": float(probs.x0.shape[0])})
