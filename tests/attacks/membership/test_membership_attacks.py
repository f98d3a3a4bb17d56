"""LiRA and RMIA (bench.attacks.membership.likelihood_ratio / pairwise_likelihood): orderings on
synthetic per-sample Gaussians and on a small overfit MLP whose target and 16 reference models are
trained at once, stacked, with the engine's vectorized objective (an ordering over 3 seeds each: the
claims of Carlini et al. 2022 and Zarifzadeh et al. 2024 at small scale)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.attacks.membership.likelihood_ratio import half_splits, lira_offline, lira_online
from bench.attacks.membership.metrics import membership_metrics
from bench.attacks.membership.pairwise_likelihood import (
    A_GRID,
    marginal_offline,
    rmia_scores,
    rmia_scores_pairwise,
    tune_offline_a,
)
from bench.attacks.membership.signals import signal
from bench.attacks.membership.threshold_choice import threshold_attack
from bench.core.errors import BenchInputError
from bench.simulation.flat import FlatModel
from bench.simulation.objective import NodeObjective

SEEDS = (0, 1, 2)


def _synthetic(seed: int, n: int = 2000, k: int = 16):
    """Samples that differ in difficulty and in vulnerability: per-sample means m_n ~ N(0, 3²),
    spreads s_n ~ U(0.5, 1.5) and training shifts d_n ~ U(0, 3); a model that trained on sample n
    gives φ ~ N(m_n + d_n, s_n²), otherwise N(m_n, s_n²)."""
    g = torch.Generator().manual_seed(seed)

    def u(lo: float, hi: float) -> torch.Tensor:
        return lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)

    m, s, d = 3 * torch.randn(n, generator=g, dtype=torch.float64), u(0.5, 1.5), u(0.0, 3.0)
    ref_in = half_splits(k, n, g)
    ref = m + d * ref_in + s * torch.randn(k, n, generator=g, dtype=torch.float64)
    members = torch.rand(n, generator=g) < 0.5
    target = m + d * members + s * torch.randn(n, generator=g, dtype=torch.float64)
    return target, ref, ref_in, members


def test_half_splits_put_every_sample_in_half_of_the_models():
    masks = half_splits(8, 50, torch.Generator().manual_seed(0))
    assert masks.sum(0).tolist() == [4] * 50
    assert len({tuple(c.tolist()) for c in masks.T}) > 10  # not one fixed pattern


@pytest.mark.parametrize("seed", SEEDS)
def test_lira_on_synthetic_gaussians_online_beats_offline_beats_global_threshold(seed):
    target, ref, ref_in, members = _synthetic(seed)
    auc = {
        "online": membership_metrics(lira_online(target, ref, ref_in), members)["auc"],
        "online_global": membership_metrics(lira_online(target, ref, ref_in, variance="global"), members)[
            "auc"
        ],
        "offline": membership_metrics(lira_offline(target, ref, ref_in), members)["auc"],
        "threshold": membership_metrics(target, members)["auc"],  # one global threshold on φ
    }
    assert auc["online"] > auc["offline"] + 0.02, auc
    assert auc["online_global"] > auc["threshold"] + 0.05, auc
    assert auc["offline"] > auc["threshold"] + 0.05, auc
    assert auc["threshold"] > 0.52, auc  # above random


def test_lira_online_is_the_gaussian_log_likelihood_ratio_by_hand():
    ref = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 5.0], [2.0, 7.0]], dtype=torch.float64)
    ref_in = torch.tensor([[1, 0], [1, 0], [0, 1], [0, 1]]).bool()
    target = torch.tensor([2.5, 1.0], dtype=torch.float64)
    # sample 0: in {1, 3} → μ 2, σ² 1; out {0, 2} → μ 1, σ² 1: Λ = −(0.5²)/2 + (1.5²)/2 = 1
    # sample 1: in {5, 7} → μ 6, σ² 1; out {0, 0} → σ² floored (1e-4)², φ far out → huge positive
    got = lira_online(target, ref, ref_in)
    assert float(got[0]) == pytest.approx(1.0)
    assert float(got[1]) > 1e6
    # offline: log Φ((2.5 − 1) / 1)
    off = lira_offline(target, ref, ref_in)
    assert float(off[0]) == pytest.approx(
        float(torch.special.log_ndtr(torch.tensor(1.5, dtype=torch.float64)))
    )
    with pytest.raises(BenchInputError):
        lira_online(target, ref, torch.zeros_like(ref_in))  # no model trained on any sample
    with pytest.raises(BenchInputError):
        lira_online(target, ref, ref_in, variance="median")


@pytest.mark.parametrize("seed", SEEDS)
def test_rmia_on_synthetic_gaussians_beats_the_plain_confidence_attack(seed):
    target, ref, ref_in, members = _synthetic(seed)
    g = torch.Generator().manual_seed(100 + seed)
    m_z = 3 * torch.randn(1000, generator=g, dtype=torch.float64)  # population: out everywhere
    ref_z = m_z + torch.randn(ref.shape[0], 1000, generator=g, dtype=torch.float64)
    target_z = m_z + torch.randn(1000, generator=g, dtype=torch.float64)
    p, p_ref, pz, pz_ref = (torch.sigmoid(t) for t in (target, ref, target_z, ref_z))
    auc_conf = membership_metrics(p, members)["auc"]
    auc_off = membership_metrics(rmia_scores(p, p_ref, pz, pz_ref, ref_in, a=0.5), members)["auc"]
    auc_on = membership_metrics(rmia_scores(p, p_ref, pz, pz_ref, ref_in, online=True), members)["auc"]
    assert auc_off > auc_conf + 0.05 and auc_on > auc_conf + 0.05, (auc_conf, auc_off, auc_on)
    assert auc_conf > 0.52


def test_rmia_binary_search_equals_the_pairwise_definition():
    g = torch.Generator().manual_seed(0)
    px, pz = (
        torch.rand(40, generator=g, dtype=torch.float64),
        torch.rand(30, generator=g, dtype=torch.float64),
    )
    ref_x, ref_z = (
        torch.rand(6, 40, generator=g, dtype=torch.float64),
        torch.rand(6, 30, generator=g, dtype=torch.float64),
    )
    ref_in = half_splits(6, 40, g)
    for a, gamma in ((0.3, 1.0), (1.0, 2.0), (0.0, 1.5)):
        got = rmia_scores(px, ref_x, pz, ref_z, ref_in, a=a, gamma=gamma)
        pr_x = marginal_offline(ref_x, ~ref_in, a)
        pr_z = marginal_offline(ref_z, torch.ones_like(ref_z, dtype=torch.bool), a)
        # the offline marginal by hand for sample 0
        out0 = ref_x[~ref_in[:, 0], 0].mean()
        assert float(pr_x[0]) == pytest.approx(float(0.5 * (1 + a) * out0 + 0.5 * (1 - a)))
        torch.testing.assert_close(got, rmia_scores_pairwise(px, pr_x, pz, pr_z, gamma))
    with pytest.raises(BenchInputError):
        rmia_scores(px, ref_x, pz, ref_z, ref_in, a=1.5)


def _gaussian_data(seed: int, n: int, d: int = 20, c: int = 4, label_noise: float = 0.15):
    """Overlapping Gaussian classes with 15% random labels: some samples are easy, some hard."""
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(c, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, c, (n,), generator=g)
    x = mu[y] + 1.5 * torch.randn(n, d, generator=g, dtype=torch.float64)
    flip = torch.rand(n, generator=g) < label_noise
    return x, torch.where(flip, torch.randint(0, c, (n,), generator=g), y)


def _train_stacked(seed: int, n_models: int, n: int, n_pop: int, steps: int = 200):
    """``n_models`` MLPs trained at once (full-batch Adam on the stacked objective), each on its
    own half of the first ``n`` samples; the last ``n_pop`` samples are never trained on."""
    x, y = _gaussian_data(seed, n + n_pop)
    torch.manual_seed(seed)
    model = FlatModel(nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4)).double())
    masks = half_splits(n_models, n, torch.Generator().manual_seed(seed))
    objective = NodeObjective(model, "cross_entropy")
    theta = torch.stack([model.initial(seed * 1000 + i, torch.float64) for i in range(n_models)])
    theta.requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=0.02)
    xs, ys = x[:n].expand(n_models, n, 20), y[:n].expand(n_models, n)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread avoids contention on a shared machine
    try:
        for _ in range(steps):
            theta.grad, _ = objective.node_grads(theta.detach(), xs, ys, masks)
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return model, theta.detach(), x, y, masks


@pytest.fixture(scope="module")
def overfit_runs():
    """Per seed: the target (model 0) and K = 16 reference models on 400 samples + 400 population."""
    n, n_pop, k = 400, 400, 16
    runs = {}
    for seed in SEEDS:
        model, theta, x, y, masks = _train_stacked(seed, k + 1, n, n_pop)
        sig = {s: signal(s, model, theta, x, y) for s in ("loss", "mentr", "logit_confidence", "confidence")}
        runs[seed] = (sig, masks, n)
    return runs


def _attacks(sig, masks, n):
    members, ref_in = masks[0], masks[1:]
    phi, conf = sig["logit_confidence"], sig["confidence"]
    scores = {
        "loss": -sig["loss"][0, :n],
        "lira_online": lira_online(phi[0, :n], phi[1:, :n], ref_in, variance="global"),
        "lira_online_per_sample": lira_online(phi[0, :n], phi[1:, :n], ref_in),
        "lira_offline": lira_offline(phi[0, :n], phi[1:, :n], ref_in, variance="global"),
        "rmia_offline": rmia_scores(conf[0, :n], conf[1:, :n], conf[0, n:], conf[1:, n:], ref_in, a=0.3),
        "rmia_online": rmia_scores(conf[0, :n], conf[1:, :n], conf[0, n:], conf[1:, n:], ref_in, online=True),
    }
    return {name: membership_metrics(s, members) for name, s in scores.items()}


@pytest.mark.parametrize("seed", SEEDS)
def test_lira_beats_the_loss_attack_at_low_fpr_on_an_overfit_model(overfit_runs, seed):
    res = _attacks(*overfit_runs[seed])
    # ≈ 200 non-members: TPR at 0.1% FPR is the TPR at zero false positives
    assert res["lira_online"]["tpr@0.001"] > res["loss"]["tpr@0.001"] + 0.05, res
    assert res["lira_online_per_sample"]["tpr@0.001"] >= res["loss"]["tpr@0.001"], res
    assert res["lira_online"]["tpr@0.01"] > res["loss"]["tpr@0.01"], res
    assert res["lira_online"]["auc"] > res["lira_offline"]["auc"] > res["loss"]["auc"] > 0.55, res


@pytest.mark.parametrize("seed", SEEDS)
def test_rmia_beats_the_loss_attack_in_auc_on_an_overfit_model(overfit_runs, seed):
    res = _attacks(*overfit_runs[seed])
    assert res["rmia_offline"]["auc"] > res["loss"]["auc"] + 0.03, res
    assert res["rmia_online"]["auc"] > res["loss"]["auc"] + 0.03, res


def test_tune_offline_a_picks_the_grid_value_with_the_best_stand_in_auc(overfit_runs):
    sig, masks, n = overfit_runs[0]
    conf = sig["confidence"][1:]  # reference models only: the target is never used
    a, auc = tune_offline_a(conf[:, :n], conf[:, n:], masks[1:], stand_in=0)
    others = slice(1, None)
    by_hand = {
        g: membership_metrics(
            rmia_scores(conf[0, :n], conf[others, :n], conf[0, n:], conf[others, n:], masks[2:], a=g),
            masks[1],
        )["auc"]
        for g in A_GRID
    }
    assert a in A_GRID and auc == pytest.approx(max(by_hand.values()))
    assert by_hand[a] == pytest.approx(auc)
    assert auc > 0.6


def test_lira_scores_several_targets_at_once_like_one_by_one():
    target, ref, ref_in, _ = _synthetic(0, n=50)
    targets = torch.stack([target, target.flip(0), 2 * target])
    for fn in (lira_online, lira_offline):
        together = fn(targets, ref, ref_in)
        assert together.shape == (3, 50)
        for t in range(3):
            torch.testing.assert_close(together[t], fn(targets[t], ref, ref_in))


@pytest.mark.parametrize("seed", SEEDS)
def test_mentr_threshold_calibrated_on_the_attackers_own_model_nears_the_oracle(overfit_runs, seed):
    """Pasquini et al.'s Mentr attack: the oracle threshold (labels of the evaluated sets) against
    a threshold the attacker calibrates on a reference model whose membership it knows."""
    sig, masks, n = overfit_runs[seed]
    scores = -sig["mentr"][:, :n]  # low modified entropy = member
    oracle = threshold_attack(scores[0], masks[0])
    calibrated = threshold_attack(
        scores[0], masks[0], calibration_scores=scores[1], calibration_members=masks[1]
    )
    assert oracle.rule == "oracle" and calibrated.rule == "calibrated"
    assert oracle.advantage >= calibrated.advantage > oracle.advantage - 0.03, (oracle, calibrated)
    assert calibrated.advantage > 0.1
