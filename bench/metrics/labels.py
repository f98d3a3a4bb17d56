"""Label-inference accuracy (iDLG, Zhao et al. 2020; Wainakh et al.'s batch label counts)."""

from __future__ import annotations

import torch

from bench.attacks.base import Reconstruction
from bench.metrics.base import METRICS, DataInfo, Metric, Truth
from bench.metrics.vector import check_pairs, clip01


def multiset_matches(guess: torch.Tensor, true: torch.Tensor, n_classes: int) -> int:
    """``Σ_c min(#{guess = c}, #{true = c})``: correct labels irrespective of order."""
    g = torch.bincount(guess.reshape(-1).long().cpu(), minlength=n_classes)
    t = torch.bincount(true.reshape(-1).long().cpu(), minlength=n_classes)
    n = max(len(g), len(t))
    g = torch.nn.functional.pad(g, (0, n - len(g)))
    t = torch.nn.functional.pad(t, (0, n - len(t)))
    return int(torch.minimum(g, t).sum())


@METRICS.register("label_accuracy", "fraction of true labels guessed (order-free within a batch)")
class LabelAccuracy(Metric):
    """Fraction of the true labels an attack guessed.

    Within one reconstruction (one node's batch of one round) the labels are compared as
    multisets, since gradient-based label inference (iDLG, Zhao et al. 2020; label counts,
    Wainakh et al. 2022) recovers which labels occur, not in which order:
    ``matches = Σ_c min(count_guess(c), count_true(c))``. ``headline`` = total matches / total
    true labels (``n_labels``); ``chance`` = ``1 / C``.

    Leakage
    -------
    ``clip((acc − 1/C) / (1 − 1/C), 0, 1)``: 0 at chance level (uniform guessing), 1 when every
    label is recovered.

    Raises
    ------
    ValueError
        If a reconstruction has no labels or the task is not a classification task.
    """

    def compute(self, recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> dict[str, float]:
        check_pairs(recs, truths)
        if info.n_classes < 2:
            raise ValueError(f"label accuracy needs a classification task; n_classes = {info.n_classes}")
        matches, total = 0, 0
        for rec, truth in zip(recs, truths, strict=True):
            if rec.y is None:
                raise ValueError(
                    f"the reconstruction of node {rec.node}, round {rec.round} has no labels (y is None)"
                )
            if rec.y.numel() != truth.y.numel():
                raise ValueError(
                    f"node {rec.node}, round {rec.round}: {rec.y.numel()} guessed labels for "
                    f"{truth.y.numel()} true ones"
                )
            matches += multiset_matches(rec.y, truth.y, info.n_classes)
            total += truth.y.numel()
        return {
            "headline": matches / total if total else 0.0,
            "n_labels": float(total),
            "chance": 1.0 / info.n_classes,
        }

    def leakage(self, values: dict[str, float]) -> float:
        chance = values["chance"]
        return clip01((values["headline"] - chance) / (1.0 - chance))
