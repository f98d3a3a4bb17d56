"""Empirical lower bound on ε from a membership threshold attack (Jagielski et al. 2020;
Nasr et al. 2021).

If a mechanism is (ε, δ)-differentially private, every test that tells "member" from
"non-member" has false-positive and false-negative rates with

    FPR + e^ε · FNR ≥ 1 − δ   and   FNR + e^ε · FPR ≥ 1 − δ

(the hypothesis-testing view of DP, Kairouz et al. 2015, Thm. 2.1). So measured rates give

    ε ≥ max( log((1 − δ − FPR) / FNR), log((1 − δ − FNR) / FPR) ).

To make this a statement at confidence ``1 − α`` the rates are replaced by their
**Clopper–Pearson upper bounds** (Jagielski et al. 2020, their ε-estimation procedure; Nasr et
al. 2021, the same estimate for every adversary they instantiate): for ``k`` errors out of ``n``
trials, ``hi(k, n) = Beta⁻¹(1 − α/2; k + 1, n − k)``, the upper end of the two-sided exact
interval at level ``1 − α`` (``= 1`` when ``k = n``; ``scipy.stats.beta``), with
``FPR_hi = hi(FP, N)`` over the ``N`` non-members and ``FNR_hi = hi(P − TP, P)`` over the ``P``
members. Implemented, per threshold ``t`` of the attack:

    ε_lb(t) = max( log((1 − δ − FPR_hi) / FNR_hi), log((1 − δ − FNR_hi) / FPR_hi) ),

a term whose numerator is ≤ 0 gives no evidence, and the reported bound is
``max(0, max_t ε_lb(t))`` over every threshold of the ROC curve (0 when no threshold gives
evidence).

Caveats (documented, not hidden): maximizing over thresholds on the same data the bound is
computed from is what Jagielski et al. and Nasr et al. do, but it makes the confidence level
nominal (a threshold chosen on a separate split keeps it exact: pass ``threshold``). And the
DP test is about one sample's presence in independent trainings; counting many samples of one
trained model as trials (as membership audits of a single run do) treats them as independent.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import beta

from bench.attacks.membership.roc import check_scores, roc_curve
from bench.core.errors import BenchInputError


def clopper_pearson_upper(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    """Upper end of the two-sided Clopper–Pearson interval at level ``1 − α`` for ``k`` of ``n``."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        hi = beta.ppf(1.0 - alpha / 2.0, k + 1.0, n - k)
    return np.where(k >= n, 1.0, hi)


def _check(delta: float, alpha: float) -> None:
    if not 0.0 <= float(delta) < 1.0:
        raise BenchInputError("delta", delta, reason="must be in [0, 1)")
    if not 0.0 < float(alpha) < 1.0:
        raise BenchInputError("alpha", alpha, reason="must be in (0, 1)")


def epsilon_from_counts(
    tp: np.ndarray | int,
    fp: np.ndarray | int,
    n_members: int,
    n_nonmembers: int,
    delta: float = 0.0,
    alpha: float = 0.05,
) -> float:
    """``max(0, max_i ε_lb_i)`` over the threshold(s) with counts ``tp``, ``fp`` (scalars or
    arrays of the same length), ``P = n_members``, ``N = n_nonmembers``."""
    _check(delta, alpha)
    tp, fp = np.atleast_1d(np.asarray(tp, dtype=np.float64)), np.atleast_1d(np.asarray(fp, dtype=np.float64))
    if np.any(tp < 0) or np.any(tp > n_members) or np.any(fp < 0) or np.any(fp > n_nonmembers):
        raise BenchInputError("counts", (tp.tolist(), fp.tolist()), reason="need 0 ≤ TP ≤ P and 0 ≤ FP ≤ N")
    fpr_hi = clopper_pearson_upper(fp, n_nonmembers, alpha)
    fnr_hi = clopper_pearson_upper(n_members - tp, n_members, alpha)
    best = 0.0
    for num, den in ((1.0 - delta - fpr_hi, fnr_hi), (1.0 - delta - fnr_hi, fpr_hi)):
        ok = (num > 0) & (den > 0)
        if ok.any():
            best = max(best, float(np.max(np.log(num[ok] / den[ok]))))
    return best


def epsilon_lower_bound(
    scores: torch.Tensor,
    members: torch.Tensor,
    delta: float = 0.0,
    alpha: float = 0.05,
    threshold: float | None = None,
) -> float:
    """The empirical ε lower bound of the threshold attack on ``scores`` (larger = "member"):
    maximized over every threshold of its ROC curve, or at the given ``threshold`` only."""
    if threshold is not None:
        s, m = check_scores(scores, members)
        pred = s >= threshold
        tp, fp = int((pred & m).sum()), int((pred & ~m).sum())
        return epsilon_from_counts(tp, fp, int(m.sum()), int((~m).sum()), delta, alpha)
    roc = roc_curve(scores, members)
    return epsilon_from_counts(
        roc.true_positives.numpy(), roc.false_positives.numpy(), roc.n_members, roc.n_nonmembers, delta, alpha
    )


def exceeds_claim(epsilon_lb: float, claimed_epsilon: float | None) -> bool:
    """Whether a measured lower bound contradicts a defense's claimed ε (``None``: no claim)."""
    return claimed_epsilon is not None and math.isfinite(claimed_epsilon) and epsilon_lb > claimed_epsilon
