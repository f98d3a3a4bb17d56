"""Adaptive attacks: the defense-aware variants the harness runs beside each attack, the
estimators they use, and the worst case over both in the score."""

from __future__ import annotations

import pytest
import torch

from bench.attacks import build_attack
from bench.attacks.inversion.pdmm_analytic import rank_one_direction
from bench.attacks.observe.pdmm_observables import SolverModel
from bench.claims.yu2023 import attack_error
from bench.evaluation.adaptive import ADAPTIVE_SUFFIX, with_adaptive
from bench.leaderboard.ranking import entry_table, worst_attack
from bench.results.record import AttackOutcome, JobResult


# ------------------------------------------------------------------ the inexact-solver observer
def _inner_steps(w0, a, rd, grads, alpha):
    """k_max inner steps w ← w − α(g_k + a + ρd w) with the given inner gradients (thesis Eq. 4.1)."""
    w = w0
    for g in grads:
        w = w - alpha * (g + a + rd * w)
    return w


@pytest.mark.parametrize("k_max", [1, 2, 5, 30])
def test_the_inexact_observer_recovers_a_constant_inner_gradient_exactly(k_max):
    gen = torch.Generator().manual_seed(k_max)
    n, p, alpha = 4, 6, 0.07
    w0, a, g = (torch.randn(n, p, generator=gen, dtype=torch.float64) for _ in range(3))
    rd = torch.tensor([[0.0], [0.4], [1.2], [3.0]], dtype=torch.float64)  # an isolated node too
    w = _inner_steps(w0, a, rd, [g] * k_max, alpha)
    model = SolverModel("inexact", mu=0.1, k_max=k_max, alpha=alpha)
    torch.testing.assert_close(model.gradient(w0, w, a, rd), g, rtol=1e-10, atol=1e-10)


def test_one_inner_step_is_the_gradient_step_model():
    gen = torch.Generator().manual_seed(0)
    w0, w, a = (torch.randn(3, 5, generator=gen, dtype=torch.float64) for _ in range(3))
    rd = torch.tensor([[0.8], [1.6], [0.4]], dtype=torch.float64)
    inexact = SolverModel("inexact", mu=1.0, k_max=1, alpha=0.05).gradient(w0, w, a, rd)
    step = SolverModel("gradient_step", mu=0.05).gradient(w0, w, a, rd)
    torch.testing.assert_close(inexact, step, rtol=1e-12, atol=1e-12)


def test_fixed_direction_inner_gradients_keep_the_logreg_ratio_exact():
    """Logistic regression with one sample: g_k = c_k [x; 1] varies in size only, so the
    recovered gradient is a combination of them and x = w-part / b-part stays exact."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 2, generator=gen, dtype=torch.float64)
    u = torch.cat([x, torch.ones(1, 1, dtype=torch.float64)], 1)
    w0, a = torch.randn(1, 3, generator=gen, dtype=torch.float64), torch.randn(1, 3, dtype=torch.float64)
    rd = torch.tensor([[2.0]], dtype=torch.float64)
    grads = [c * u for c in (0.9, 0.5, -0.2, 0.3, 0.1)]
    w = _inner_steps(w0, a, rd, grads, 0.1)
    g = SolverModel("inexact", mu=0.1, k_max=5, alpha=0.1).gradient(w0, w, a, rd)
    torch.testing.assert_close(g[:, :2] / g[:, 2:], x, rtol=1e-10, atol=1e-12)


def test_an_attacker_modelling_inexact_updates_is_exact_where_assuming_exact_ones_fails():
    """Thesis C8 says inexact updates defeat an attacker who assumes exact ones; told k_max and
    the step, the adaptive attacker recovers logistic-regression samples exactly."""
    for seed in range(3):
        defense = ("inexact_update", {"k_max": 5, "alpha": 0.05})
        naive = attack_error(seed, defense=defense, rounds=[5], assume="exact")
        aware = attack_error(seed, defense=defense, rounds=[5], assume="inexact", k_max=5, alpha=0.05)
        assert aware < 1e-6 < 1e-3 < naive


# ------------------------------------------------------------------ the rank-one noise-aware estimator
def test_rank_one_direction_is_exact_on_rank_one_data_and_signed():
    gen = torch.Generator().manual_seed(0)
    u = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    u[:, -1] = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    c = torch.randn(7, 3, generator=gen, dtype=torch.float64)
    v = rank_one_direction(c[:, :, None] * u[None])
    expected = u / u.norm(dim=1, keepdim=True) * u[:, -1:].sign()
    torch.testing.assert_close(v, expected, rtol=1e-10, atol=1e-10)


def test_fitting_many_rounds_beats_a_single_difference_under_noise():
    """Orderings over seeds: the direction from 50 noisy rounds is closer than each round's ratio."""
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(2, generator=gen, dtype=torch.float64)
        u = torch.cat([x, torch.ones(1, dtype=torch.float64)])
        c = torch.linspace(1.0, 0.2, 50, dtype=torch.float64)
        m = c[:, None, None] * u[None, None] + 0.05 * torch.randn(
            50, 1, 3, generator=gen, dtype=torch.float64
        )
        v = rank_one_direction(m)[0]
        fitted = (v[:2] / v[2] - x).norm()
        single = (m[0, 0, :2] / m[0, 0, 2] - x).norm()
        assert fitted < single


def test_noise_that_hides_one_difference_does_not_hide_the_run():
    """gaussian_noise(σ = 0.01) on PDMM logistic regression: the papers' single-difference attack
    is defeated, the rank-one fit over the rounds is not."""
    for seed in range(2):
        defense = ("gaussian_noise", {"sigma": 0.01})
        single = attack_error(seed, t_max=120, defense=defense, rounds=[0])
        fitted = attack_error(seed, t_max=120, defense=defense, rounds=[0], combine="rank1", window=110)
        assert fitted < 0.5 and 3 * fitted < single, (fitted, single)


# ------------------------------------------------------------------ the harness's plan
def _attacks(*names_params):
    return {"eve": [(n, p, build_attack(n, **p)) for n, p in names_params]}


def test_the_baseline_runs_the_standard_attacks_only():
    plan = with_adaptive(_attacks(("pdmm_analytic_logreg", {"rounds": [0]})), "none", {})
    assert [p.label for p in plan["eve"]] == ["pdmm_analytic_logreg"]


def test_a_defense_gets_the_adaptive_variant_with_its_knowledge():
    plan = with_adaptive(
        _attacks(("pdmm_analytic_logreg", {"rounds": [0]}), ("dlg", {"rounds": [0]})),
        "inexact_update",
        {"k_max": 5, "alpha": 0.1},
    )
    labels = [p.label for p in plan["eve"]]
    assert labels == ["pdmm_analytic_logreg", "pdmm_analytic_logreg" + ADAPTIVE_SUFFIX, "dlg"]
    variant = plan["eve"][1]
    assert variant.name == "pdmm_analytic_logreg" and variant.adaptive
    assert variant.params == {
        "rounds": [0],
        "combine": "rank1",
        "assume": "inexact",
        "k_max": 5,
        "alpha": 0.1,
    }
    assert variant.attack.k_max == 5 and variant.attack.combine == "rank1"


def test_pdmm_inversions_adapt_to_inexact_updates_only():
    attack = build_attack("pdmm_noisy_gradient_inversion", rounds=[0])
    assert attack.adapt("gaussian_noise", {"sigma": 0.1}) is None
    assert attack.adapt("inexact_update", {"k_max": 3, "alpha": 0.2}) == {
        "assume": "inexact",
        "k_max": 3,
        "alpha": 0.2,
    }


# ------------------------------------------------------------------ the worst case, named
def test_worst_attack_names_the_highest_mean_leakage():
    assert worst_attack({"a": 0.2, "a+adaptive": 0.9, "b": float("nan")}) == "a+adaptive"
    assert worst_attack({"b": 0.5, "a": 0.5}) == "a"
    assert worst_attack({"a": float("nan")}) == ""


def _job(seed, leak, leak_adaptive, defense="noise"):
    attacks = [
        AttackOutcome("eve", "inv", "ok", {}, leak),
        AttackOutcome("eve", "inv+adaptive", "ok", {}, leak_adaptive),
    ]
    return JobResult(
        key=f"k{seed}{defense}",
        task="t",
        defense=defense,
        defense_name=defense,
        defense_params={},
        seed=seed,
        utility_metric="val_acc",
        utility_floor=None,
        status="ok",
        utility=0.9,
        attacks=attacks,
        privacy={"eve": 1 - max(leak, leak_adaptive)},
        runtime_s=1.0,
        provenance={"version": "v"},
    )


def test_the_entry_scores_the_worst_case_and_names_its_attack():
    df = entry_table([_job(0, 0.0, 0.9), _job(1, 0.1, 0.7)])
    row = df.iloc[0]
    assert row["privacy_mean"] == pytest.approx(1 - (0.9 + 0.7) / 2)
    assert row["worst_attack"] == "inv+adaptive"
    assert row["leakage:inv"] == pytest.approx(0.05) and row["leakage:inv+adaptive"] == pytest.approx(0.8)
