"""What the PDMM inversion attacks share: the observables they read, their parameters, and how
their batched problems are optimized.

The three inversion attacks on differential-PDMM traffic (Yu et al., TIFS 2025, Prop. 1) differ
only in their target and objective:

* noisy gradients (i), Eq. 21/31 — :mod:`.noisy_gradient`;
* gradient differences (ii), Eq. 22, thesis Eq. 5.11 — :mod:`.difference`;
* honest-component gradient sums (iii), Eq. 23/30, and the combined diff + sum objective —
  :mod:`.component`.

Each reads :class:`~bench.attacks.observe.pdmm_observables.PDMMObservables` rebuilt from
the eavesdropped ``Δz`` (or, harness side, the :class:`OracleObservables` of the run, to separate
estimation error from inversion error) and optimizes all victims × restarts × label hypotheses
as one batched problem, with either

* ``optimizer="lbfgs"`` — DLG (Zhu et al. 2019; the TIFS experiments: L2 objective, L-BFGS), the
  per-problem batched L-BFGS of :func:`~bench.attacks.inversion.optimizers.batched_lbfgs`; or
* ``optimizer="adam"`` — the Inverting Gradients recipe (Geiping et al. 2020; TIFS App. F:
  ``objective="cosine"``, ``tv_weight``, Adam ``lr`` on the ``signed`` gradient, ``boxed`` to
  the valid pixel range, ``lr_decay`` ×0.1 at 3/8, 5/8, 7/8 of the iterations).

The papers' PDMM uses ``f_i`` = the *sum* of the local losses (``loss_reduction: sum``); the
dummy gradients are of the batch *mean*, so targets are divided by the batch size ``n_i`` first.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from bench.attacks.base import Attack, AttackError, Requirement
from bench.attacks.inversion.matching import OBJECTIVES, BatchedFn
from bench.attacks.inversion.optimizers import (
    OPTIMIZERS,
    BatchedResult,
    batched_adam,
    batched_lbfgs,
    step_decay_milestones,
)
from bench.attacks.inversion.regularizers import pixel_box
from bench.attacks.observe.gradients import architecture, input_shape
from bench.attacks.observe.pdmm_observables import (
    MODELLED,
    Observables,
    PDMMObservables,
    assumed_solver,
    honest_nodes,
    inexact_adaptation,
)
from bench.core.errors import require, require_number, require_positive_int
from bench.core.params import require_choice
from bench.threats import View

ANCHORS = ("coalition", "zeros")


class PDMMInversion(Attack):
    """Base of the inversion attacks on PDMM observables (see the module docstring).

    Parameters
    ----------
    rounds:
        Indices ``k`` of the observables attacked (early rounds: differences fade as training
        converges, TIFS Fig. 4).
    anchor:
        The weights anchor ``ŵ^(T−1)`` (``"coalition"``: a corrupt node's final model, the
        consensus estimate; ``"zeros"``).
    victims:
        Honest nodes attacked (``None``: every honest node; components: those containing one).
    restarts, iterations:
        Initializations ``N(0, init_scale²)`` per victim and label hypothesis; optimizer
        iterations.
    optimizer:
        ``"lbfgs"`` (DLG) or ``"adam"`` (``lr``; with ``signed``, ``boxed``, ``lr_decay``: the
        Inverting Gradients recipe).
    objective, tv_weight:
        ``"l2"`` or ``"cosine"`` matching; total-variation weight ``λ_TV``.
    mean, std:
        Normalization constants for the box (``None``: the declared architecture's).
    assume, mu:
        The local solver the attacker assumes and its μ (``None``: the public ones; a public
        solver without a closed-form leakage — the inexact-update defense — is taken as
        ``exact``, which is wrong, as in ``pdmm_analytic_logreg``). ``"inexact"`` is the
        defense-aware observer of ``k_max`` inner steps
        (:meth:`~bench.attacks.observe.pdmm_observables.SolverModel.inexact_gradient`).
    k_max, alpha:
        The inner steps and step size ``assume="inexact"`` models (``None``: the public ones).
    batch_size:
        ``n_i``, the samples of each victim's local set.
    seed:
        Initialization stream.
    """

    threats: ClassVar[tuple[str, ...]] = ("eavesdropper",)
    metrics: ClassVar[tuple[str, ...]] = ("image_ssim", "image_psnr", "label_accuracy")
    protocols: ClassVar[tuple[str, ...]] = ("pdmm", "pdmm_centralized")

    def __init__(
        self,
        rounds: list[int] | tuple[int, ...] = (0,),
        anchor: str = "coalition",
        victims: list[int] | tuple[int, ...] | None = None,
        restarts: int = 2,
        iterations: int = 200,
        optimizer: str = "lbfgs",
        objective: str = "l2",
        tv_weight: float = 0.0,
        lr: float = 0.1,
        signed: bool = False,
        boxed: bool = False,
        lr_decay: bool = False,
        mean: list[float] | float | None = None,
        std: list[float] | float | None = None,
        assume: str | None = None,
        mu: float | None = None,
        k_max: int | None = None,
        alpha: float | None = None,
        init_scale: float = 1.0,
        batch_size: int = 1,
        seed: int = 0,
    ) -> None:
        require(
            isinstance(rounds, (list, tuple)) and all(isinstance(r, int) and r >= 0 for r in rounds),
            "attack.rounds",
            rounds,
            "must be a list of non-negative round indices",
        )
        self.rounds = [int(r) for r in rounds]
        self.anchor = require_choice(anchor, ANCHORS, "attack.anchor")
        require(
            victims is None
            or (isinstance(victims, (list, tuple)) and all(isinstance(v, int) and v >= 0 for v in victims)),
            "attack.victims",
            victims,
            "must be null or a list of node ids",
        )
        self.victims = None if victims is None else [int(v) for v in victims]
        self.restarts = require_positive_int(restarts, "attack.restarts")
        self.iterations = require_positive_int(iterations, "attack.iterations")
        self.optimizer = require_choice(optimizer, OPTIMIZERS, "attack.optimizer")
        self.objective = require_choice(objective, OBJECTIVES, "attack.objective")
        self.tv_weight = require_number(tv_weight, "attack.tv_weight", positive=False)
        self.lr = require_number(lr, "attack.lr")
        self.signed, self.boxed, self.lr_decay = bool(signed), bool(boxed), bool(lr_decay)
        self.mean, self.std = mean, std
        self.assume = None if assume is None else require_choice(assume, MODELLED, "attack.assume")
        self.mu = None if mu is None else require_number(mu, "attack.mu")
        self.k_max = None if k_max is None else require_positive_int(k_max, "attack.k_max")
        self.alpha = None if alpha is None else require_number(alpha, "attack.alpha")
        self.init_scale = require_number(init_scale, "attack.init_scale")
        self.batch_size = require_positive_int(batch_size, "attack.batch_size")
        self.seed = int(seed)

    @property
    def lag_needed(self) -> int:
        """How many rounds past an attacked round ``k`` the observable reaches (ℓ of a difference)."""
        return 0

    def requirements(self) -> Requirement:
        """Every Δz of rounds ``0 .. k + lag + 1`` (row ``k`` of a one-step solver's observables
        comes from round ``k + 1``), plus the running totals of Δz and the coalition's final
        model, from which the weights of those rounds are anchored
        (:meth:`~bench.attacks.observe.pdmm_observables.PDMMObservables.weights`) — a
        transcript bounded in the attacked rounds, not in the run's length."""
        last = max(self.rounds, default=0) + self.lag_needed + 1
        return Requirement(rounds=tuple(range(last + 1)), kinds=("z0", "delta_z"), totals=("delta_z",))

    # ------------------------------------------------------------------------------ helpers
    def observables(self, view: View, observables: Observables | None) -> Observables:
        """``observables`` if given (harness side), else rebuilt from the view's traffic under
        the assumed solver."""
        if observables is not None:
            return observables
        solver = assumed_solver(view, self.assume)
        return PDMMObservables(view, solver=solver, mu=self.mu, k_max=self.k_max, alpha=self.alpha)

    def adapt(self, defense: str, knowledge: dict[str, Any]) -> dict[str, Any] | None:
        """Against inexact local solves (a defense that declares ``k_max`` and ``alpha``), model
        them (``assume="inexact"``) instead of assuming exact ones."""
        return inexact_adaptation(knowledge)

    def target_scale(self, view: View) -> float:
        """``1 / n_i`` for the papers' sum-reduced ``f_i`` (the dummy gradient is of the mean)."""
        hp = view.knowledge["hyperparameters"]
        return 1.0 / self.batch_size if hp.get("loss_reduction", "sum") == "sum" else 1.0

    def attacked_nodes(self, view: View) -> list[int]:
        """The honest nodes attacked: ``victims`` (each must be honest) or all honest nodes."""
        honest = honest_nodes(view)
        if self.victims is None:
            return honest
        bad = sorted(set(self.victims) - set(honest))
        if bad:
            raise AttackError(f"victims {bad} are not honest nodes of this view (honest: {honest})")
        return sorted(set(self.victims))

    def check_round(self, k: int, available: int, what: str) -> None:
        if not 0 <= k < available:
            raise AttackError(f"{what} {k} is not available (0..{available - 1})")

    def optimize(self, fn: BatchedFn, x0: torch.Tensor, view: View) -> BatchedResult:
        """Run the batched problems ``fn`` from ``x0`` with the configured optimizer (the box of
        Adam from the normalization and input shape of ``view``'s architecture)."""
        if self.optimizer == "lbfgs":
            return batched_lbfgs(fn, x0, self.iterations)
        bounds = None
        if self.boxed:
            arch = architecture(view)
            bounds = pixel_box(arch, self.mean, self.std, x0, input_shape(view), type(self).__name__)
        return batched_adam(
            fn,
            x0,
            self.iterations,
            lr=self.lr,
            signed=self.signed,
            milestones=step_decay_milestones(self.iterations) if self.lr_decay else [],
            bounds=bounds,
        )
