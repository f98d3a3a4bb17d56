"""Inverting Gradients (Geiping, Bauermeister, Dröge & Moeller, NeurIPS 2020), batched."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.attacks.base import ATTACKS, Attack, Reconstruction, Requirement
from bench.attacks.inversion.adaptive import matching_adaptation
from bench.attacks.inversion.matching import MATCHES, matching_fn
from bench.attacks.inversion.optimizers import batched_adam, step_decay_milestones
from bench.attacks.inversion.oracle_transform import node_gradient_variant, problems_transform
from bench.attacks.inversion.problems import LABEL_STRATEGIES, best_per_victim, build_problems
from bench.attacks.inversion.regularizers import pixel_box
from bench.attacks.observe.gradients import (
    GradientTarget,
    architecture,
    flat_model,
    input_shape,
    loss_function,
    loss_name,
)
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
from bench.threats import View

#: ``iterations``, ``restarts`` and ``tv_weight`` of the presets. ``paper``: the settings of
#: inversefed (github.com/JonasGeiping/invertinggradients): ``max_iterations = 24_000`` in
#: ``reconstruct_image.py`` and the paper's experiments (§5), ``restarts = 8`` of its ResNet
#: notebooks, and ``--tv 1e-4``, the default of ``reconstruct_image.py`` (its notebooks use 1e-1
#: to 1e-6 depending on the model). ``cpu``: 500 iterations and 2 restarts — on the 8×8 digits
#: and the 64-100-10 MLP a few seconds on 2 CPU cores.
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {"iterations": 24_000, "restarts": 8, "tv_weight": 1e-4},
    "cpu": {"iterations": 500, "restarts": 2, "tv_weight": 1e-4},
}

if TYPE_CHECKING:
    from bench.protocols import Protocol


@ATTACKS.register(
    "inverting_gradients",
    "Inverting Gradients: cosine matching + TV, signed Adam, boxed, step decay; batched restarts/labels",
)
class InvertingGradients(Attack):
    """Inverting Gradients (Geiping et al. 2020, Eq. 4):

        x* = argmin_{x ∈ [0,1]ⁿ}  1 − ⟨∇_θ L(θ; x, y), g⟩ / (‖∇_θ L(θ; x, y)‖ ‖g‖) + λ_TV TV(x)

    with the cosine over the concatenated gradient of all layers (inversefed's
    ``cost_fn = "sim"``, ``indices = "def"``, ``weights = "equal"``) and the anisotropic total
    variation ``TV`` of :func:`~bench.attacks.inversion.regularizers.total_variation`; the box is
    :func:`~bench.attacks.inversion.regularizers.pixel_box`. As inversefed:
    Adam with step size ``lr = 0.1`` on the *signed* gradient, learning rate ×0.1 at
    ``T // 2.667``, ``T // 1.6`` and ``T // 1.142`` (≈ 3/8, 5/8, 7/8 of the ``T`` iterations),
    after every step ``x`` clamped to the valid normalized range ``[(0 − μ)/σ, (1 − μ)/σ]``
    (boxed), initialization ``N(0, 1)``, and the restart with the lowest final objective kept
    (``scoring_choice = "loss"``). Labels come from iDLG for one-sample classification
    gradients or by enumeration of every class (the best fit kept). All victims × restarts ×
    label hypotheses run as one batched Adam optimization (exactly equivalent to separate
    runs; :mod:`bench.attacks.inversion.optimizers`).

    Parameters
    ----------
    preset:
        ``"cpu"`` or ``"paper"`` (:data:`PRESETS`); ``iterations``, ``restarts`` and
        ``tv_weight`` left at ``None`` take the preset's values.
    mean, std:
        Per-channel normalization constants of the inputs (public data statistics) for the
        box; ``None`` reads ``architecture["normalization"] = (mean, std)`` from the view's
        knowledge. Without them the attack refuses to run boxed; ``boxed = False`` drops the box.
    labels, rounds, source, batch_size, match, seed:
        As :class:`~bench.attacks.inversion.dlg_batched.BatchedDLG`.
    """

    threats = ("server", "eavesdropper", "neighbors")
    per_round = True
    protocols = ("fedsgd", "dpsgd")
    metrics = ("image_ssim", "image_psnr", "label_accuracy")

    def __init__(
        self,
        rounds: list[int] | tuple[int, ...] = (0,),
        source: str = "auto",
        preset: str = "cpu",
        iterations: int | None = None,
        restarts: int | None = None,
        tv_weight: float | None = None,
        lr: float = 0.1,
        signed: bool = True,
        boxed: bool = True,
        lr_decay: bool = True,
        mean: list[float] | float | None = None,
        std: list[float] | float | None = None,
        labels: str = "auto",
        batch_size: int = 1,
        match: str = "all",
        seed: int = 0,
    ) -> None:
        self.match = require_choice(match, MATCHES, "attack.match")
        self.rounds = [int(t) for t in rounds]
        self.source = require_choice(source, SOURCES, "attack.source")
        self.preset = require_choice(preset, tuple(PRESETS), "attack.preset")
        p = PRESETS[preset]
        self.iterations = require_positive_int(
            p["iterations"] if iterations is None else iterations, "attack.iterations"
        )
        self.restarts = require_positive_int(
            p["restarts"] if restarts is None else restarts, "attack.restarts"
        )
        self.tv_weight = require_number(
            p["tv_weight"] if tv_weight is None else tv_weight, "attack.tv_weight", positive=False
        )
        self.lr = require_number(lr, "attack.lr")
        self.signed, self.boxed, self.lr_decay = bool(signed), bool(boxed), bool(lr_decay)
        self.mean, self.std = mean, std
        self.labels = require_choice(labels, LABEL_STRATEGIES, "attack.labels")
        self.batch_size = require_positive_int(batch_size, "attack.batch_size")
        self.seed = int(seed)

    def adapt(self, defense: str, knowledge: dict[str, Any]) -> dict[str, Any] | None:
        """Against sparsification, match the kept coordinates only (the cosine objective is
        already blind to clipping's rescaling; :mod:`bench.attacks.inversion.adaptive`)."""
        return matching_adaptation(knowledge, "cosine")

    def window_params(self, threat: str, protocol: str) -> dict[str, Any] | None:
        return server_window_params(self.source, threat, protocol)

    def requirements(self) -> Requirement:
        return Requirement(rounds=source_rounds(self.source, self.rounds), kinds=source_kinds(self.source))

    def uses_defense_oracle(self, protocol: Protocol, hooks: frozenset[str]) -> bool:
        """:func:`~bench.attacks.inversion.oracle_transform.node_gradient_variant`."""
        return node_gradient_variant(self.source, protocol, hooks)

    def run(self, view: View, oracle: OracleClient | None = None) -> list[Reconstruction]:
        """Invert ``view``'s gradients; with ``oracle``, the generic defense-aware variant."""
        targets = [tg for t in self.rounds for tg in gradient_targets(view, t, self.source)]
        return self.invert(view, targets, oracle)

    def invert(
        self, view: View, targets: list[GradientTarget], oracle: OracleClient | None = None
    ) -> list[Reconstruction]:
        """Invert the given gradients (each at its own parameters ``theta``), all victims,
        restarts and label hypotheses in one batched optimization; the View gives only the
        architecture, loss and normalization. Used by attacks that first recover gradients
        (e.g. :mod:`bench.attacks.knowledge.dgd_knowledge`)."""
        model = flat_model(view)
        shape = input_shape(view)
        probs = build_problems(
            targets, model, loss_name(view), shape, self.batch_size, self.restarts, self.labels, self.seed
        )
        fn = matching_fn(
            model,
            loss_function(view),
            probs.y,
            probs.theta,
            probs.grad,
            "cosine",
            self.tv_weight,
            kept_only=self.match == "kept",
            transform=problems_transform(oracle, view, probs.targets, probs.victim, "cosine"),
        )
        bounds = None
        if self.boxed:
            arch = architecture(view)
            bounds = pixel_box(arch, self.mean, self.std, probs.x0, shape, "Inverting Gradients")
        milestones = step_decay_milestones(self.iterations) if self.lr_decay else []
        result = batched_adam(
            fn,
            probs.x0,
            self.iterations,
            lr=self.lr,
            signed=self.signed,
            milestones=milestones,
            bounds=bounds,
        )
        return best_per_victim(probs, result, {"problems": float(probs.x0.shape[0])})
