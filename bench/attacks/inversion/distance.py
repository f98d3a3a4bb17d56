"""The distance ``D`` between a dummy gradient and the observed one, which every
gradient-matching objective minimizes: the squared L2 distance of DLG or the ``1 − cos`` of
Inverting Gradients, over the concatenated gradient of all layers.

Each evaluation path of the matching objective applies it (:mod:`.matching`'s ``vmap``,
:mod:`.autograd_matching`, the gradient sums of :mod:`.component`) and so does the defense
oracle (:mod:`bench.evaluation.oracle`); the Gram expansion of :mod:`.gram` computes the same
numbers without forming the gradient.
"""

from __future__ import annotations

import torch


def gradient_distance(g: torch.Tensor, target: torch.Tensor, objective: str) -> torch.Tensor:
    """``D(g, target)``: the squared L2 distance ``‖g − target‖²`` (DLG, Zhu et al. 2019, Eq. 4)
    or ``1 − ⟨g, target⟩ / (‖g‖ ‖target‖)`` over the concatenated gradient of all layers
    (Inverting Gradients, Geiping et al. 2020, Eq. 4); over the last dimension, so ``[K, P]``
    rows give ``[K]`` distances."""
    if objective == "l2":
        return (g - target).pow(2).sum(-1)
    norms = (g.norm(dim=-1) * target.norm(dim=-1)).clamp_min(torch.finfo(g.dtype).tiny)
    return 1.0 - (g * target).sum(-1) / norms
