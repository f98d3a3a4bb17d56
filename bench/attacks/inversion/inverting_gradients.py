"""Inverting Gradients (Geiping, Bauermeister, Dröge & Moeller, NeurIPS 2020), batched."""

from __future__ import annotations

from typing import Any

import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.dlg import SOURCES
from bench.attacks.gradients import architecture, loss_function
from bench.attacks.inversion.batched import (
    LABEL_STRATEGIES,
    attack_targets,
    batched_adam,
    best_per_victim,
    build_problems,
    matching_fn,
    source_kinds,
    step_decay_milestones,
)
from bench.errors import require_number, require_positive_int
from bench.registry_utils import require_choice
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


def pixel_box(
    arch: dict[str, Any],
    mean: list[float] | float | None,
    std: list[float] | float | None,
    dtype: torch.dtype,
    channels: int,
    who: str = "the attack",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The valid normalized pixel range ``[(0 − μ)/σ, (1 − μ)/σ]`` (per channel ``[C, 1, 1]`` or
    scalar) of the box of Inverting Gradients.

    ``mean``/``std`` given by the attack's parameters, else read from
    ``arch["normalization"] = (mean, std)``; without either an :class:`AttackError` naming
    ``who``."""
    if mean is None or std is None:
        norm = arch.get("normalization")
        if norm is None:
            raise AttackError(
                f"{who} is boxed to the valid pixel range and needs the normalization "
                "constants: pass mean/std (or boxed=False)"
            )
        mean, std = norm
    m = torch.as_tensor(mean, dtype=dtype).reshape(-1)
    s = torch.as_tensor(std, dtype=dtype).reshape(-1)
    shape = (-1, 1, 1) if m.numel() > 1 else ()
    if m.numel() > 1 and m.numel() != channels:
        raise AttackError(f"{m.numel()} normalization constants for {channels} channels")
    return ((0 - m) / s).reshape(shape), ((1 - m) / s).reshape(shape)


@ATTACKS.register(
    "inverting_gradients",
    "Inverting Gradients: cosine matching + TV, signed Adam, boxed, step decay; batched restarts/labels",
)
class InvertingGradients(Attack):
    """Inverting Gradients (Geiping et al. 2020, Eq. 4):

        x* = argmin_{x ∈ [0,1]ⁿ}  1 − ⟨∇_θ L(θ; x, y), g⟩ / (‖∇_θ L(θ; x, y)‖ ‖g‖) + λ_TV TV(x)

    with the cosine over the concatenated gradient of all layers (inversefed's
    ``cost_fn = "sim"``, ``indices = "def"``, ``weights = "equal"``) and the anisotropic total
    variation ``TV`` of :func:`~bench.attacks.inversion.regularizers.total_variation`. As inversefed:
    Adam with step size ``lr = 0.1`` on the *signed* gradient, learning rate ×0.1 at
    ``T // 2.667``, ``T // 1.6`` and ``T // 1.142`` (≈ 3/8, 5/8, 7/8 of the ``T`` iterations),
    after every step ``x`` clamped to the valid normalized range ``[(0 − μ)/σ, (1 − μ)/σ]``
    (boxed), initialization ``N(0, 1)``, and the restart with the lowest final objective kept
    (``scoring_choice = "loss"``). Labels come from iDLG for one-sample classification
    gradients or by enumeration of every class (the best fit kept). All victims × restarts ×
    label hypotheses run as one batched Adam optimization (exactly equivalent to separate
    runs; :mod:`bench.attacks.inversion.batched`).

    Parameters
    ----------
    preset:
        ``"cpu"`` or ``"paper"`` (:data:`PRESETS`); ``iterations``, ``restarts`` and
        ``tv_weight`` left at ``None`` take the preset's values.
    mean, std:
        Per-channel normalization constants of the inputs (public data statistics) for the
        box; ``None`` reads ``architecture["normalization"] = (mean, std)`` from the view's
        knowledge. Without them the attack refuses to run boxed; ``boxed = False`` drops the box.
    labels, rounds, source, batch_size, seed:
        As :class:`~bench.attacks.inversion.batched.BatchedDLG`.
    """

    threats = ("server", "eavesdropper", "neighbors")
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
        seed: int = 0,
    ) -> None:
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

    def requirements(self) -> Requirement:
        return Requirement(rounds=tuple(self.rounds), kinds=source_kinds(self.source))

    def bounds(
        self, arch: dict[str, Any], dtype: torch.dtype, channels: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return pixel_box(arch, self.mean, self.std, dtype, channels, "Inverting Gradients")

    def run(self, view: View) -> list[Reconstruction]:
        arch = architecture(view)
        model = arch["flat_model"]
        loss = arch["loss"] if isinstance(arch["loss"], str) else ""
        input_shape = tuple(int(s) for s in arch["input_shape"])
        targets = [tg for t in self.rounds for tg in attack_targets(view, t, self.source)]
        probs = build_problems(
            targets, model, loss, input_shape, self.batch_size, self.restarts, self.labels, self.seed
        )
        fn = matching_fn(
            model, loss_function(view), probs.y, probs.theta, probs.grad, "cosine", self.tv_weight
        )
        bounds = None
        if self.boxed:
            channels = input_shape[0] if len(input_shape) == 3 else 1
            lo, hi = self.bounds(arch, probs.x0.dtype, channels)
            bounds = (lo.to(probs.x0.device), hi.to(probs.x0.device))
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
