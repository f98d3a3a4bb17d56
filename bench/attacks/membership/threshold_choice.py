"""The threshold attack: predict "member" when the score is at least ``t``, and its balanced
accuracy.

Pasquini et al. (2023, §2.2.1) measure the vulnerability of parameters ``Θ`` on a member set
``X`` and an equal-size non-member set ``O`` as the accuracy of the threshold attack,

    M(Θ, X, O) = (1 / 2m) Σ_i [ MIA_Θ(X_i) + ¬MIA_Θ(O_i) ],

and report ``M − 0.5``; with unequal sets the same quantity is the balanced accuracy
``(TPR + TNR) / 2``. Their threshold is the **oracle** one: the ``t`` that maximizes ``M`` on the
evaluated sets themselves (it uses the membership labels, so it is an upper bound on what a
threshold attacker achieves, and is labelled "oracle" wherever it is reported).

Two thresholds an attacker can really pick, from data it holds:

* :func:`quantile_threshold` — from scores of samples it knows are non-members (its own held-out
  data): the smallest ``t`` whose false-positive rate on them is at most ``fpr``;
* :func:`calibrated_threshold` — the oracle threshold of a calibration split with known
  membership (e.g. the attacker's own training data against its held-out data), then applied to
  the evaluated sets.

Several victims at once (Pasquini et al.'s Eq. 2, ``(1/m) Σ_v M(Θ_v, X_v, O) − 0.5``):
:func:`oracle_advantages` computes every victim's oracle ``M − 0.5`` from ``[V, n]`` scores in one
sort, without a loop over victims.

Scores are oriented: larger means "member" (see ``bench.attacks.membership.signals.MEMBER_SIGN``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.attacks.membership.roc import check_scores, roc_curve
from bench.core.errors import BenchInputError


@dataclass(frozen=True)
class ThresholdResult:
    """A threshold and the attack's rates and balanced accuracy on the evaluated sets."""

    threshold: float
    balanced_accuracy: float
    tpr: float
    fpr: float
    rule: str

    @property
    def advantage(self) -> float:
        """Pasquini et al.'s reported value ``M − 0.5`` (0 = chance, 0.5 = perfect)."""
        return self.balanced_accuracy - 0.5


def apply_threshold(
    scores: torch.Tensor, members: torch.Tensor, threshold: float, rule: str
) -> ThresholdResult:
    """The rates of the decision ``score ≥ threshold`` on the evaluated sets."""
    s, m = check_scores(scores, members)
    pred = s >= threshold
    tpr = float((pred & m).sum()) / int(m.sum())
    fpr = float((pred & ~m).sum()) / int((~m).sum())
    return ThresholdResult(float(threshold), 0.5 * (tpr + 1.0 - fpr), tpr, fpr, rule)


def oracle_threshold(scores: torch.Tensor, members: torch.Tensor) -> ThresholdResult:
    """The threshold maximizing the balanced accuracy on these very sets (Pasquini et al.'s
    "optimal threshold"; uses the labels — report it as "oracle"). Among equal maxima the
    highest threshold is taken."""
    roc = roc_curve(scores, members)
    ba = 0.5 * (roc.tpr + 1.0 - roc.fpr)
    best = int(torch.argmax(ba))
    return ThresholdResult(
        float(roc.thresholds[best]), float(ba[best]), float(roc.tpr[best]), float(roc.fpr[best]), "oracle"
    )


def quantile_threshold(nonmember_scores: torch.Tensor, fpr: float) -> float:
    """The smallest threshold ``t`` with ``#{s ≥ t} ≤ ⌊fpr · n⌋`` among ``n`` known non-member
    scores (an attacker's own held-out data), i.e. empirical false-positive rate at most ``fpr``."""
    if not 0.0 <= float(fpr) < 1.0:
        raise BenchInputError("fpr", fpr, reason="must be in [0, 1)")
    s = torch.as_tensor(nonmember_scores).detach().reshape(-1).to(torch.float64)
    if s.numel() == 0:
        raise BenchInputError("nonmember_scores", 0, reason="no calibration scores")
    desc = torch.sort(s, descending=True).values
    k = int(fpr * s.numel())
    # every score strictly above desc[k] is one of the k largest: the next float above desc[k]
    return float(torch.nextafter(desc[k], torch.tensor(float("inf"), dtype=torch.float64)))


def calibrated_threshold(calibration_scores: torch.Tensor, calibration_members: torch.Tensor) -> float:
    """The balanced-accuracy-optimal threshold of a calibration split whose membership the
    attacker knows (disjoint from the evaluated sets)."""
    return oracle_threshold(calibration_scores, calibration_members).threshold


def threshold_attack(
    scores: torch.Tensor,
    members: torch.Tensor,
    *,
    calibration_scores: torch.Tensor | None = None,
    calibration_members: torch.Tensor | None = None,
    calibration_fpr: float | None = None,
) -> ThresholdResult:
    """Balanced accuracy of the threshold attack on ``(scores, members)``.

    Without calibration data: the oracle threshold. With ``calibration_scores`` and
    ``calibration_members``: the calibrated threshold (rule ``"calibrated"``). With
    ``calibration_scores`` of known non-members and ``calibration_fpr``: the quantile threshold
    (rule ``"quantile"``)."""
    if calibration_scores is None:
        return oracle_threshold(scores, members)
    if calibration_fpr is not None:
        t = quantile_threshold(calibration_scores, calibration_fpr)
        return apply_threshold(scores, members, t, "quantile")
    if calibration_members is None:
        raise BenchInputError(
            "calibration_members", None, reason="give the calibration split's membership or calibration_fpr"
        )
    t = calibrated_threshold(calibration_scores, calibration_members)
    return apply_threshold(scores, members, t, "calibrated")


def oracle_advantages(scores: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
    """Oracle ``M − 0.5`` of each row of ``scores [V, n]`` against ``members [V, n]`` (every
    row needs both classes), vectorized: sort each row by decreasing score, accumulate the
    member and non-member counts, and take the best balanced accuracy over the cut points that
    fall between distinct scores (and "nothing predicted", 0). Equal to
    :func:`oracle_threshold` row by row (tested); average over victims for Pasquini's Eq. 2."""
    s = torch.as_tensor(scores).detach().to(torch.float64)
    m = torch.as_tensor(members).detach().bool()
    if s.dim() != 2 or m.shape != s.shape:
        raise BenchInputError("members", tuple(m.shape), reason=f"need [V, n] like scores {tuple(s.shape)}")
    n_in = m.sum(1, keepdim=True).to(torch.float64)
    n_out = m.shape[1] - n_in
    if bool(((n_in == 0) | (n_out == 0)).any()):
        raise BenchInputError("members", "one class", reason="every victim needs members and non-members")
    sorted_s, order = torch.sort(s, dim=1, descending=True)
    mm = m.gather(1, order).to(torch.float64)
    tpr = mm.cumsum(1) / n_in
    fpr = (1.0 - mm).cumsum(1) / n_out
    # a cut after position j is a threshold only if the next score is strictly smaller
    valid = torch.ones_like(mm, dtype=torch.bool)
    valid[:, :-1] = sorted_s[:, :-1] > sorted_s[:, 1:]
    gap = torch.where(valid, 0.5 * (tpr - fpr), torch.zeros_like(tpr))
    return gap.max(1).values.clamp_min(0.0)
