"""iDLG's label rule (Zhao, Mopuri & Bilen 2020): the label of a one-sample gradient read from
the sign of its last layer, and the classification losses for which that sign says it.

DLG (:mod:`bench.attacks.inversion.dlg`), the first-layer inversion
(:mod:`bench.attacks.inversion.first_layer`) and
the label hypotheses of the batched inversions (:mod:`bench.attacks.inversion.problems`, with
the batch label counts of :mod:`bench.attacks.inversion.label_counts`) read labels this way.
"""

from __future__ import annotations

import torch

from bench.simulation.flat import FlatModel

#: losses whose last-layer gradient sign reveals the label of a single sample
LABEL_LOSSES = ("cross_entropy", "binary_cross_entropy")


def idlg_label(model: FlatModel, grad: torch.Tensor, loss: str) -> int | None:
    """The label of a one-sample gradient from the sign of the last layer's gradient (iDLG).

    For softmax cross-entropy ``∂ℓ/∂z_c = p_c − 1{c = y}`` is negative only for the true class,
    so ``y = argmin_c ∂ℓ/∂b_c`` (Zhao et al. 2020, §3; Yu et al., TIFS 2025, Eqs. 10–11). Without
    a last-layer bias the rows of the last weight gradient ``(∂ℓ/∂z_c) a_{L−1}`` are summed
    (the inversefed rule; ``a_{L−1} ≥ 0`` after a ReLU). With one logit and binary
    cross-entropy ``∂ℓ/∂z = σ(z) − y``, so ``y = 1`` iff ``∂ℓ/∂b < 0``. Returns ``None`` for
    other losses (regression), whose targets must be optimized.
    """
    if loss not in LABEL_LOSSES:
        return None
    last = model.slots[-1]
    g = grad.narrow(-1, last.offset, last.numel).reshape(last.shape)
    if g.dim() == 2:  # a weight [C, H] without a bias after it
        g = g.sum(1)
    if loss == "binary_cross_entropy" or g.numel() == 1:
        return int(g.reshape(-1)[0] < 0)
    return int(g.argmin())
