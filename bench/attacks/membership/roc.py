"""The ROC curve of a membership score, with torchmetrics, in score units.

A sample is predicted "member" when its score is at least the threshold ``t``; the curve lists,
for every distinct score (plus ``t = +inf``, nothing predicted), ``FPR(t) = FP/N`` and
``TPR(t) = TP/P`` with ``P`` members and ``N`` non-members.

``torchmetrics.functional.classification.binary_roc`` treats predictions outside ``[0, 1]`` as
logits and passes them through a sigmoid, which in float32 maps every score above ≈ 17 to 1.0
and would merge distinct scores into ties. The scores are therefore first replaced by their
dense ranks scaled into ``(0, 1)`` (``(r + 1) / (U + 1)`` for the ``r``-th of ``U`` distinct
values): an order-preserving map that keeps ties and changes neither the curve nor the AUC, and
the thresholds are mapped back to score values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchmetrics.functional.classification import binary_auroc, binary_roc

from bench.core.errors import BenchInputError


@dataclass(frozen=True)
class Roc:
    """ROC points in order of decreasing threshold (``fpr``, ``tpr`` non-decreasing, float64)."""

    fpr: torch.Tensor
    tpr: torch.Tensor
    thresholds: torch.Tensor  # score units; the first is +inf (the point (0, 0))
    n_members: int
    n_nonmembers: int

    @property
    def true_positives(self) -> torch.Tensor:
        return torch.round(self.tpr * self.n_members).long()

    @property
    def false_positives(self) -> torch.Tensor:
        return torch.round(self.fpr * self.n_nonmembers).long()


def check_scores(scores: torch.Tensor, members: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flattened ``(scores float64, members bool)``; both classes present, scores finite."""
    s = torch.as_tensor(scores).detach().reshape(-1).to(torch.float64)
    m = torch.as_tensor(members).detach().reshape(-1).bool()
    if s.shape != m.shape:
        raise BenchInputError("members", tuple(m.shape), reason=f"scores have shape {tuple(s.shape)}")
    if not torch.isfinite(s).all():
        raise BenchInputError("scores", "non-finite", reason="membership scores must be finite")
    n_in = int(m.sum())
    if n_in == 0 or n_in == m.numel():
        raise BenchInputError("members", n_in, reason="both members and non-members are needed")
    return s, m


def _ranks(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, inverse = torch.unique(s, sorted=True, return_inverse=True)
    return (inverse + 1).to(torch.float64) / (values.numel() + 1), values


def roc_curve(scores: torch.Tensor, members: torch.Tensor) -> Roc:
    """The exact ROC curve (``torchmetrics`` ``binary_roc`` with ``thresholds=None``)."""
    s, m = check_scores(scores, members)
    ranks, values = _ranks(s)
    fpr, tpr, thr = binary_roc(ranks, m.long())
    index = torch.round(thr.to(torch.float64) * (values.numel() + 1)).long() - 1
    inf = torch.tensor(float("inf"), dtype=torch.float64)
    thresholds = torch.where(index >= values.numel(), inf, values[index.clamp_max(values.numel() - 1)])
    n_in, n_out = int(m.sum()), m.numel() - int(m.sum())
    # exact rates from the integer counts (torchmetrics returns float32 rates)
    tpr = torch.round(tpr.to(torch.float64) * n_in) / n_in
    fpr = torch.round(fpr.to(torch.float64) * n_out) / n_out
    return Roc(fpr, tpr, thresholds, n_in, n_out)


def auroc(scores: torch.Tensor, members: torch.Tensor) -> float:
    """Area under the ROC curve (``torchmetrics`` ``binary_auroc``; ties count one half)."""
    s, m = check_scores(scores, members)
    return float(binary_auroc(_ranks(s)[0], m.long()))
