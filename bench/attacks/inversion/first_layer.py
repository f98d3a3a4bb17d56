"""Analytic input recovery through a biased first layer from one node's one-sample gradient.

For a first layer ``z = W x + b`` on the (flattened) input and one sample, the gradient rows are
``(∇W_j, ∇b_j) = δ_j (xᵀ, 1)`` with ``δ_j = ∂ℓ/∂z_j``, whatever follows the layer: the input is
``∇W_j / ∇b_j`` for any unit with ``∇b_j ≠ 0`` (Phong, Aono, Hayashi, Wang & Moriai, "Privacy-
preserving deep learning via additively homomorphic encryption", IEEE TIFS 2018, §3.2, the
single-neuron and multi-layer cases). It needs no optimization and no prior, and reads the same
quantity as DLG and Inverting Gradients — one node's gradient of one round
(:func:`~bench.attacks.observe.targets.gradient_targets`: a FedSGD upload, or a D-PSGD neighbour's
update turned into its gradient) — so it applies to every track of a model with a biased first
layer and one sample per gradient (declared once for that model family:
:mod:`bench.attacks.applicability`).

The layer's gradient ``[∇W | ∇b]`` is the rank-one matrix ``δ (xᵀ, 1)`` ``[H, D + 1]``, its last
column fixing the scale. The estimate is the least-squares rank-one fit over the *observed*
entries (``observed="nonzero"``: the non-zero ones),

    min_{δ, x̂}  Σ_{(j, i) observed} (M_ji − δ_j x̃_i)²,   M = [∇W | ∇b],  x̃ = (x̂, 1),

by alternating least squares (``iterations`` sweeps of ``δ_j = Σ_i M_ji x̃_i / Σ_i x̃_i²`` and
``x̂_i = Σ_j M_ji δ_j / Σ_j δ_j²``, each sum over the observed entries) from Phong et al.'s
ratio ``x̂_i = Σ_j ∇b_j ∇W_ji / Σ_j ∇b_j²`` over the units whose both entries were observed.
On an undefended gradient the ratio is exact and a fixed point of the sweeps; under additive noise
the fit averages the noise over every unit; under a sparsification (a dropped coordinate is an
exact zero) a dropped entry is *missing*, not ``x_i = 0``: a pixel is recovered as soon as one
active unit kept its entry — the ratio ``W_ji / W_jk`` of two kept entries of one row links the
pixels of that row, and the sweeps carry the scale from the units whose bias was kept (rank-one
matrix completion; our extension of the ratio, so that keeping a random or largest fraction of
the coordinates does not hide the input). ``observed="all"`` fits every entry (the plain least
squares). A pixel no kept entry reaches stays 0. The label is read by iDLG (Zhao et al. 2020)
from the same gradient.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.inversion.idlg import idlg_label
from bench.attacks.observe import gradients
from bench.attacks.observe.targets import (
    NODE_SOURCES,
    gradient_targets,
    server_window_params,
    source_kinds,
    source_rounds,
)
from bench.core.errors import require
from bench.core.params import require_choice
from bench.simulation.flat import ParamSlot
from bench.threats import View

#: the entries a ratio is taken over (module docstring)
OBSERVED = ("nonzero", "all")


def first_linear(view: View) -> tuple[ParamSlot, ParamSlot]:
    """The weight ``[H, D]`` and bias ``[H]`` slots of the model's first layer, which must be a
    ``Linear`` with bias on the flattened input (its parameters first in the flat vector)."""
    model, shape = gradients.flat_model(view), gradients.input_shape(view)
    if len(model.slots) < 2:
        raise AttackError("first_layer_inversion needs a first Linear layer with a bias")
    w, b = model.slots[:2]
    if len(w.shape) != 2 or tuple(b.shape) != tuple(w.shape[:1]) or w.shape[1] != math.prod(shape):
        raise AttackError(
            "first_layer_inversion needs a model whose first layer is a Linear with bias on the "
            f"flattened input; its first parameters have shapes {tuple(w.shape)} and {tuple(b.shape)}"
        )
    return w, b


def first_layer_estimate(
    g_w: torch.Tensor, g_b: torch.Tensor, observed: str = "nonzero", iterations: int = 50
) -> torch.Tensor:
    """``x̂ [V, D]`` from first-layer gradients ``g_w [V, H, D]`` and ``g_b [V, H]``: the
    least-squares rank-one fit ``[∇W | ∇b] ≈ δ (x̂ᵀ, 1)`` over the observed entries (module
    docstring), by alternating least squares from the ratio estimate."""
    m = torch.cat([g_w, g_b.unsqueeze(-1)], dim=-1)  # [V, H, D + 1]: the rank-one δ (xᵀ, 1)
    mask = (m != 0) if observed == "nonzero" else torch.ones_like(m, dtype=torch.bool)
    m = torch.where(mask, m, 0)
    tiny = torch.finfo(m.dtype).tiny

    def ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
        return torch.where(den > 0, num / den.clamp_min(tiny), 0)

    b = m[..., -1:]  # the ratio over the units whose bias entry was observed: x̂_i = Σ b W / Σ b²
    keep = mask[..., :-1] & mask[..., -1:]
    x = ratio(torch.where(keep, b * m[..., :-1], 0).sum(1), torch.where(keep, b * b, 0).sum(1))
    one = torch.ones_like(x[..., :1])
    for _ in range(iterations):
        xt = torch.cat([x, one], dim=-1).unsqueeze(1)  # [V, 1, D + 1]
        delta = ratio((m * xt).sum(-1), (mask * xt * xt).sum(-1))  # [V, H]
        d = delta.unsqueeze(-1)
        x = ratio((m[..., :-1] * d).sum(1), (mask[..., :-1] * d * d).sum(1))
    return x


@ATTACKS.register(
    "first_layer_inversion",
    "x = ∇W_j / ∇b_j of a biased first layer from one node's one-sample gradient (Phong et al. 2018)",
)
class FirstLayerInversion(Attack):
    """Recover each victim's sample from the first-layer rows of its one-sample gradient
    (module docstring: Phong et al. 2018, §3.2), all victims at once; labels by iDLG.

    Parameters
    ----------
    rounds:
        Rounds whose gradients are attacked.
    source:
        Where the gradients are read (:data:`~bench.attacks.observe.targets.NODE_SOURCES`; ``"auto"``: a
        FedSGD upload, or a D-PSGD neighbour's recovered gradient for a ``neighbors`` view).
    observed:
        ``"nonzero"`` (default) or ``"all"``: the entries the rank-one fit is taken over.
    iterations:
        Alternating least-squares sweeps (0: Phong et al.'s ratio alone).
    """

    threats = ("server", "eavesdropper", "neighbors")
    per_round = True
    metrics = ("image_ssim", "image_psnr", "label_accuracy")
    protocols = ("fedsgd", "dpsgd")
    one_sample = True
    first_layer = True

    def __init__(
        self,
        rounds: list[int] | tuple[int, ...] = (0,),
        source: str = "auto",
        observed: str = "nonzero",
        iterations: int = 50,
    ) -> None:
        ok = isinstance(rounds, (list, tuple)) and all(isinstance(t, int) and t >= 0 for t in rounds)
        require(ok and len(rounds) > 0, "attack.rounds", rounds, "must be a non-empty list of round indices")
        self.rounds = [int(t) for t in rounds]
        self.source = require_choice(source, NODE_SOURCES, "attack.source")
        self.observed = require_choice(observed, OBSERVED, "attack.observed")
        ok = isinstance(iterations, int) and not isinstance(iterations, bool) and iterations >= 0
        require(ok, "attack.iterations", iterations, "must be an integer ≥ 0")
        self.iterations = int(iterations)

    def window_params(self, threat: str, protocol: str) -> dict[str, Any] | None:
        return server_window_params(self.source, threat, protocol)

    def requirements(self) -> Requirement:
        return Requirement(rounds=source_rounds(self.source, self.rounds), kinds=source_kinds(self.source))

    def run(self, view: View) -> list[Reconstruction]:
        batch = gradients.knowledge(view, "hyperparameters").get("batch_size")
        if isinstance(batch, int) and batch > 1:
            raise AttackError(f"first_layer_inversion needs one sample per gradient, not batches of {batch}")
        targets = [tg for t in self.rounds for tg in gradient_targets(view, t, self.source)]
        if not targets:
            raise AttackError("no gradient of the attacked rounds in the View")
        w, b = first_linear(view)
        shape = gradients.input_shape(view)
        g = torch.stack([tg.grad for tg in targets])  # [V, P]: every victim at once
        g_w = g[:, w.offset : w.offset + w.numel].reshape(len(targets), *w.shape)
        g_b = g[:, b.offset : b.offset + b.numel]
        x = first_layer_estimate(g_w, g_b, self.observed, self.iterations).reshape(len(targets), 1, *shape)
        model, loss = gradients.flat_model(view), gradients.loss_name(view)
        labels = [idlg_label(model, tg.grad, loss) for tg in targets]
        out = []
        for i, tg in enumerate(targets):
            y = None if labels[i] is None else torch.tensor([int(labels[i])])
            units = float((g_b[i] != 0).sum())
            out.append(Reconstruction(tg.node, tg.round, x=x[i], y=y, extra={"units": units}))
        return out
