"""Analytic input recovery through the first layer of a network from eavesdropped PDMM traffic.

The ratio attack of logistic regression (:mod:`bench.attacks.inversion.pdmm_analytic`) needs only one
property of the gradient: the rows of a Linear layer with bias on the input are
``(∇W_j, ∇b_j) = δ_j (xᵀ, 1)`` for one sample, with ``δ_j = ∂ℓ/∂(W x + b)_j`` (Phong et al.
2018, "Privacy-preserving deep learning via additively homomorphic encryption", §3: the input
is ``∇W_j / ∇b_j`` for any unit with ``∇b_j ≠ 0``). The first layer of an MLP has it, whatever
follows. Every quantity the PDMM observables give is a linear combination of the victim's
one-sample gradients at several points plus the constant ``Σ_j B z^(0)`` term (TIFS Eq. 21),
so after a difference (TIFS Eq. 22) — or the centring of a window of noisy gradients — the
first-layer rows are again ``δ'_j (xᵀ, 1)``:

* one-step solvers: ``Δg = ∇f(w^(k+ℓ)) − ∇f(w^(k))`` (TIFS Eq. 22);
* inexact local solves of ``k_max`` inner steps (the inexact-update defense): the observer of
  :meth:`~bench.attacks.observe.pdmm_observables.SolverModel.inexact_gradient` returns
  ``Σ_k β_k ∇f(w_k) + Σ_j B z^(0)`` *exactly* — the inner steps are linear in the inner
  gradients — and the inner gradients of one sample share ``x``, so the same ratio holds
  however far the inner iterates move.

The estimate is the least-squares ``x̂ = Σ_j ∇b_j ∇W_j / Σ_j ∇b_j²`` over the units
(``combine="each"``) or the top right singular vector of all units' rows over a window of
rounds (``combine="rank1"``, the noise-aware variant). The label is not identifiable from a
difference (its ``e_y`` term cancels; thesis C10), so only the image is scored.
"""

from __future__ import annotations

from torch import nn

from bench.attacks.base import ATTACKS, AttackError
from bench.attacks.inversion.pdmm_analytic import PDMMAnalyticLogReg
from bench.attacks.observe.gradients import flat_model, input_shape
from bench.threats import View

#: noisy gradients a ``rank1`` fit uses by default: each costs the transcript one round of Δz
#: of every parameter, so the window is shorter than logistic regression's
FIRST_LAYER_WINDOW = 20


@ATTACKS.register(
    "pdmm_analytic_first_layer",
    "x = ∇W_j / ∇b_j of the first Linear layer in PDMM gradient differences (any MLP; Phong et al. 2018)",
)
class PDMMAnalyticFirstLayer(PDMMAnalyticLogReg):
    """Recover each honest node's single sample from the first-layer rows of its PDMM gradient
    differences (module docstring).

    Parameters
    ----------
    rounds, lag, estimator, anchor, assume, mu, k_max, alpha, combine:
        As :class:`~bench.attacks.inversion.pdmm_analytic.PDMMAnalyticLogReg`.
    window:
        Rounds fitted by ``combine="rank1"`` (default :data:`FIRST_LAYER_WINDOW`).
    """

    metrics = ("image_ssim", "image_psnr")
    models = ()
    first_layer = True

    def __init__(self, window: int = FIRST_LAYER_WINDOW, **params: object) -> None:
        super().__init__(window=window, **params)  # type: ignore[arg-type]

    def layer(self, view: View) -> tuple[int, int]:
        """``(d, h)`` of the model's first layer, which must be ``Linear(d, h)`` with bias on the
        flattened input (``nn.Sequential(Flatten(), Linear, …)``)."""
        model = flat_model(view)
        module = model.module
        what = "pdmm_analytic_first_layer needs a model whose first layer is a Linear with bias"
        layers = (
            [m for m in module.children() if not isinstance(m, nn.Identity)]
            if isinstance(module, nn.Sequential)
            else []
        )
        if len(input_shape(view)) > 1:
            layers = layers[1:] if layers and isinstance(layers[0], nn.Flatten) else []
        if not layers or not isinstance(layers[0], nn.Linear) or layers[0].bias is None:
            raise AttackError(f"{what} on the flattened input; the model is {type(module).__name__}")
        first = layers[0]
        slots = model.slots
        if slots[0].shape != tuple(first.weight.shape) or slots[1].shape != tuple(first.bias.shape):
            raise AttackError(f"{what}; its parameters are not the first in the flat vector")
        return int(first.in_features), int(first.out_features)
