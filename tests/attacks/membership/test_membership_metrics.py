"""Membership metrics, thresholds and the ε lower bound against hand computations and
scikit-learn (bench.attacks.membership.roc / metrics / thresholds / epsilon)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import beta, binom
from sklearn.metrics import roc_auc_score

from bench.attacks.membership.epsilon import epsilon_from_counts, epsilon_lower_bound, exceeds_claim
from bench.attacks.membership.metrics import leakage_from_auc, membership_metrics, tpr_at_fpr
from bench.attacks.membership.roc import auroc, roc_curve
from bench.attacks.membership.threshold_choice import (
    oracle_advantages,
    oracle_threshold,
    quantile_threshold,
    threshold_attack,
)
from bench.core.errors import BenchInputError


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_equals_sklearn_roc_auc_score_with_ties_and_large_scores(seed):
    g = torch.Generator().manual_seed(seed)
    members = torch.rand(300, generator=g) < 0.4
    # large magnitudes (a sigmoid would saturate them) and many ties (rounded to one decimal)
    scores = torch.round((torch.randn(300, generator=g) * 30 + 60 + 20 * members) * 10) / 10
    ours = auroc(scores, members)
    ref = roc_auc_score(members.numpy(), scores.numpy())
    assert ours == pytest.approx(ref, abs=1e-6)
    assert membership_metrics(scores, members)["auc"] == pytest.approx(ref, abs=1e-6)


def test_roc_points_thresholds_and_counts_by_hand():
    scores = torch.tensor([30.0, 40.0, 40.0, 80.0, 100.0])
    members = torch.tensor([0, 0, 1, 1, 1])
    roc = roc_curve(scores, members)
    assert roc.thresholds.tolist() == [math.inf, 100.0, 80.0, 40.0, 30.0]
    assert roc.true_positives.tolist() == [0, 1, 2, 3, 3]
    assert roc.false_positives.tolist() == [0, 0, 0, 1, 2]
    assert auroc(scores, members) == pytest.approx(11 / 12, abs=1e-6)  # tie (40, 40) counts ½


def test_tpr_at_fpr_on_a_hand_built_roc():
    # 10 non-members, 4 members; sorted by score: M N M M N N N N N N N N M ...
    scores = torch.tensor([14.0, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1])
    members = torch.tensor([1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0])
    roc = roc_curve(scores, members)
    # FPR 0 reaches TPR 1/4; FPR 0.1 reaches 3/4; FPR 0.05 (between) steps down to 1/4
    assert tpr_at_fpr(roc, 0.0) == pytest.approx(0.25)
    assert tpr_at_fpr(roc, 0.001) == pytest.approx(0.25)
    assert tpr_at_fpr(roc, 0.1) == pytest.approx(0.75)
    assert tpr_at_fpr(roc, 0.05) == pytest.approx(0.25)
    # linear: between (0, 0.25) and (0.1, 0.25) the curve is flat (the jump is vertical at 0.1)
    assert tpr_at_fpr(roc, 0.05, rule="linear") == pytest.approx(0.25)
    assert tpr_at_fpr(roc, 0.85) == pytest.approx(0.75)
    # a member/non-member tie makes a diagonal segment (0, 0.5) -> (0.5, 1): linear reads it
    tied = roc_curve(torch.tensor([3.0, 2.0, 2.0, 1.0]), torch.tensor([1, 1, 0, 0]))
    assert tpr_at_fpr(tied, 0.25) == pytest.approx(0.5)
    assert tpr_at_fpr(tied, 0.25, rule="linear") == pytest.approx(0.75)
    with pytest.raises(BenchInputError):
        tpr_at_fpr(roc, 0.1, rule="cubic")


def test_oracle_threshold_balanced_accuracy_by_hand():
    # members 0.9, 0.8, 0.3; non-members 0.7, 0.2, 0.1, 0.05
    scores = torch.tensor([0.9, 0.8, 0.3, 0.7, 0.2, 0.1, 0.05])
    members = torch.tensor([1, 1, 1, 0, 0, 0, 0])
    res = oracle_threshold(scores, members)
    # t = 0.3: TPR 1, FPR 1/4 -> BA 7/8 (t = 0.8: TPR 2/3, FPR 0 -> BA 5/6 < 7/8)
    assert res.threshold == pytest.approx(0.3)
    assert res.balanced_accuracy == pytest.approx(7 / 8)
    assert res.advantage == pytest.approx(3 / 8)
    assert res.rule == "oracle"


def test_calibrated_and_quantile_thresholds_use_only_the_calibration_data():
    scores = torch.tensor([0.9, 0.8, 0.3, 0.7, 0.2, 0.1, 0.05])
    members = torch.tensor([1, 1, 1, 0, 0, 0, 0])
    # calibration split whose best threshold is 0.75: applied to the evaluated sets gives TPR 2/3, FPR 0
    calib = torch.tensor([0.95, 0.75, 0.5, 0.4])
    res = threshold_attack(
        scores, members, calibration_scores=calib, calibration_members=torch.tensor([1, 1, 0, 0])
    )
    assert res.rule == "calibrated"
    assert res.threshold == pytest.approx(0.75)
    assert (res.tpr, res.fpr) == (pytest.approx(2 / 3), 0.0)
    assert res.balanced_accuracy == pytest.approx(5 / 6)
    # quantile: known non-members 1..10, FPR ≤ 20% -> threshold just above 8 (9 and 10 predicted)
    t = quantile_threshold(torch.arange(1.0, 11.0), 0.2)
    assert 8.0 < t < 8.0 + 1e-9
    res = threshold_attack(
        scores, members, calibration_scores=torch.arange(1.0, 11.0) / 10, calibration_fpr=0.2
    )
    assert res.rule == "quantile" and res.tpr == pytest.approx(1 / 3) and res.fpr == 0.0


def test_leakage_normalization():
    assert leakage_from_auc(0.5) == 0.0
    assert leakage_from_auc(0.3) == 0.0
    assert leakage_from_auc(1.0) == 1.0
    assert leakage_from_auc(0.8) == pytest.approx(0.6)


def _cp_upper(k, n, alpha):
    return 1.0 if k == n else beta.ppf(1 - alpha / 2, k + 1, n - k)


def test_epsilon_lower_bound_equals_a_hand_computation_on_fixed_counts():
    # P = N = 1000, TP = 600, FP = 10; δ = 1e-5, α = 0.05
    p, n, tp, fp, delta, alpha = 1000, 1000, 600, 10, 1e-5, 0.05
    fpr_hi, fnr_hi = _cp_upper(fp, n, alpha), _cp_upper(p - tp, p, alpha)
    # the defining property of the exact upper bound u: P[Bin(n, u) ≤ k] = α/2
    assert binom.cdf(fp, n, fpr_hi) == pytest.approx(alpha / 2, rel=1e-8)
    assert binom.cdf(p - tp, p, fnr_hi) == pytest.approx(alpha / 2, rel=1e-8)
    assert 0.0183 < fpr_hi < 0.0184 and 0.431 < fnr_hi < 0.432
    expected = max(math.log((1 - delta - fpr_hi) / fnr_hi), math.log((1 - delta - fnr_hi) / fpr_hi))
    # the second term wins: log((1 − δ − 0.4311) / 0.01831) ≈ 3.437
    assert expected == pytest.approx(3.437, abs=2e-3)
    assert epsilon_from_counts(tp, fp, p, n, delta, alpha) == pytest.approx(expected, rel=1e-12)


def test_epsilon_is_zero_without_evidence_and_maximized_over_thresholds():
    assert epsilon_from_counts(50, 50, 100, 100) == 0.0  # chance
    assert epsilon_from_counts(0, 0, 100, 100) == 0.0  # nothing predicted: FNR_hi = 1
    # scores of a perfectly separating attack: the best threshold is TP = P, FP = 0
    scores = torch.cat([torch.arange(100.0) + 1000, torch.arange(100.0)])
    members = torch.cat([torch.ones(100), torch.zeros(100)]).bool()
    expected = math.log((1 - _cp_upper(0, 100, 0.05)) / _cp_upper(0, 100, 0.05))
    assert epsilon_lower_bound(scores, members) == pytest.approx(expected, rel=1e-12)
    roc = roc_curve(scores, members)
    per_threshold = [
        epsilon_from_counts(int(a), int(b), 100, 100)
        for a, b in zip(roc.true_positives, roc.false_positives, strict=True)
    ]
    assert epsilon_lower_bound(scores, members) == pytest.approx(max(per_threshold), rel=1e-12)
    # at a fixed threshold: 50 members above, 0 non-members
    assert epsilon_lower_bound(scores, members, threshold=1050.0) == pytest.approx(
        epsilon_from_counts(50, 0, 100, 100), rel=1e-12
    )
    assert exceeds_claim(expected, 1.0) and not exceeds_claim(expected, 10.0) and not exceeds_claim(5.0, None)


def test_bad_inputs_raise_bench_input_errors():
    with pytest.raises(BenchInputError):
        auroc(torch.tensor([1.0, 2.0]), torch.tensor([1, 1]))  # one class only
    with pytest.raises(BenchInputError):
        epsilon_from_counts(5, 5, 10, 10, delta=1.5)
    with pytest.raises(BenchInputError):
        epsilon_from_counts(11, 5, 10, 10)
    with pytest.raises(BenchInputError):
        quantile_threshold(torch.tensor([1.0]), 1.0)
    assert np.isfinite(epsilon_from_counts(10, 0, 10, 10))


def test_oracle_advantages_of_many_victims_equal_one_by_one():
    g = torch.Generator().manual_seed(3)
    members = torch.rand(6, 40, generator=g) < 0.5
    members[:, 0], members[:, 1] = True, False
    scores = torch.round(torch.randn(6, 40, generator=g) + members, decimals=1)  # ties included
    scores[5] = 1.0  # one victim whose scores are all equal: advantage 0
    batched = oracle_advantages(scores, members)
    one_by_one = [oracle_threshold(scores[v], members[v]).advantage for v in range(6)]
    assert batched.tolist() == pytest.approx(one_by_one, abs=1e-12)
    assert batched[5] == 0.0 and batched[:5].min() > 0.0


def test_the_epsilon_lower_bound_is_computed_at_the_delta_of_the_claim():
    """A defense's ε is claimed at its δ; the empirical bound it is compared with is computed
    at the same δ (``DataInfo.delta``, set by the scorer from the defense's accounting), which
    lowers it: ``log((1 − δ − FPR)/FNR)``."""
    from bench.attacks.base import Reconstruction
    from bench.attacks.membership.epsilon import epsilon_lower_bound
    from bench.evaluation.truth import Scorer
    from bench.metrics import DataInfo, Truth, build_metric

    gen = torch.Generator().manual_seed(0)
    members = (torch.arange(400) < 200).to(torch.int8)
    scores = torch.randn(400, generator=gen, dtype=torch.float64) + 1.5 * members
    rec = Reconstruction(node=0, round=0, scores=scores)
    truth = Truth(0, 0, torch.empty(0), torch.empty(0), members=members)
    info = DataInfo(mean=(0.0,), std=(1.0,), n_classes=2, prior_x=torch.zeros(1), is_image=False)
    at = {
        d: build_metric("membership_auc").compute([rec], [truth], replace(info, delta=d))["epsilon_lb"]
        for d in (0.0, 0.1)
    }
    assert at[0.0] == pytest.approx(epsilon_lower_bound(scores, members == 1))
    assert at[0.1] == pytest.approx(epsilon_lower_bound(scores, members == 1, delta=0.1))
    assert 0 < at[0.1] < at[0.0]
    scorer = Scorer.__new__(Scorer)  # only its metric facts matter here
    for accounting, delta in (
        ({"epsilon": 2.0, "delta": 1e-5}, 1e-5),
        ({"epsilon": None, "delta": 1e-5}, 0.0),  # no claim: δ = 0
        ({"epsilon": 2.0, "delta": "1e-5"}, 0.0),
        ("not a dict", 0.0),
    ):
        scorer.info = info
        scorer.claim(accounting)
        assert scorer.info.delta == delta
