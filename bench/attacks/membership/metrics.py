"""Membership-inference metrics from scores (larger = "member") and membership labels.

* ``auc`` — area under the ROC curve, ``torchmetrics`` ``binary_auroc`` (ties count one half;
  equal to scikit-learn's ``roc_auc_score``, tested).
* ``tpr_at_fpr(α)`` — the true-positive rate at false-positive rate ``α`` (Carlini et al. 2022
  argue for reporting TPR at 0.1% and 1% FPR, on a log-scale ROC). Rule ``"step"`` (default): the
  largest TPR of a threshold whose empirical FPR is at most ``α``, i.e. ``max{TPR(t) : FPR(t) ≤
  α}`` — achievable by a deterministic threshold, no interpolation; with ``N`` non-members and
  ``α < 1/N`` this is the TPR at zero false positives. Rule ``"linear"``: the ROC linearly
  interpolated at ``α`` between the last point with ``FPR ≤ α`` and the next one (achievable by
  randomizing between the two thresholds).
* ``advantage`` — the balanced-accuracy advantage of the oracle threshold attack, Pasquini et
  al.'s ``M − 0.5`` (``bench.attacks.membership.threshold_choice``), in ``[0, 0.5]``; also
  ``max_t (TPR(t) − FPR(t)) / 2``.
* ``leakage`` — the normalization into ``[0, 1]``: ``max(0, 2·AUC − 1)``. Chance (AUC ½, the
  data-independent guess) maps to 0 and a perfect separation to 1, linearly in the probability
  that a random member outscores a random non-member; an AUC below ½ means the score ranks
  non-members above members on these sets, which an attacker who does not see the labels
  cannot exploit, so it counts as no leakage. It uses the whole curve (stable at small sample
  sizes, unlike TPR at 0.1% FPR, which needs ≥ 1000 non-members to mean anything).
"""

from __future__ import annotations

import torch

from bench.attacks.membership.roc import Roc, auroc, roc_curve
from bench.attacks.membership.threshold_choice import oracle_threshold
from bench.core.errors import BenchInputError

TPR_RULES = ("step", "linear")
#: the FPRs at which TPR is reported by default (0.1% and 1%)
REPORTED_FPRS = (0.001, 0.01)
#: the log-spaced FPR grid at which the benchmark keeps each attack's ROC (the page draws it on
#: log-log axes, as Carlini et al. 2022 ask); it contains :data:`REPORTED_FPRS`
ROC_FPRS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def tpr_at_fpr(roc: Roc, fpr: float, rule: str = "step") -> float:
    """TPR of the ROC ``roc`` at false-positive rate ``fpr`` (rule ``"step"`` or ``"linear"``)."""
    if rule not in TPR_RULES:
        raise BenchInputError("rule", rule, choices=TPR_RULES)
    if not 0.0 <= float(fpr) <= 1.0:
        raise BenchInputError("fpr", fpr, reason="must be in [0, 1]")
    target = torch.tensor([float(fpr)], dtype=torch.float64)
    i = int(torch.searchsorted(roc.fpr, target, right=True)) - 1  # last point with FPR ≤ fpr
    tpr = float(roc.tpr[i])
    if rule == "linear" and i + 1 < roc.fpr.numel() and roc.fpr[i + 1] > roc.fpr[i]:
        slope = (roc.tpr[i + 1] - roc.tpr[i]) / (roc.fpr[i + 1] - roc.fpr[i])
        tpr += float(slope * (fpr - roc.fpr[i]))
    return tpr


def leakage_from_auc(auc: float) -> float:
    """``max(0, 2·AUC − 1)`` in ``[0, 1]`` (see the module docstring)."""
    return max(0.0, min(1.0, 2.0 * float(auc) - 1.0))


def membership_metrics(
    scores: torch.Tensor, members: torch.Tensor, fprs: tuple[float, ...] = REPORTED_FPRS, rule: str = "step"
) -> dict[str, float]:
    """``auc``, ``tpr@<fpr>`` for each of ``fprs`` (e.g. ``tpr@0.001``), ``advantage`` (oracle
    ``M − 0.5``) and ``leakage`` of one attack's scores."""
    roc = roc_curve(scores, members)
    auc = auroc(scores, members)
    out = {"auc": auc}
    for f in fprs:
        out[f"tpr@{f:g}"] = tpr_at_fpr(roc, f, rule)
    out["advantage"] = oracle_threshold(scores, members).advantage
    out["leakage"] = leakage_from_auc(auc)
    return out
