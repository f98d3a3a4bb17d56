"""Every track runs every registered attack that applies to its model and view (issue 38 item 2):
the attacks declared once per model family are added where they apply, and an applicable attack
that a quick track does not run must carry a reason (:data:`bench.attacks.applicability.NOT_RUN`)."""

from __future__ import annotations

from pathlib import Path

import torch

from bench.attacks import ATTACKS
from bench.attacks.applicability import NOT_RUN, applies
from bench.attacks.first_layer import first_layer_estimate
from bench.catalog import Catalog
from bench.runner.planning import build_attacks

ROOT = Path(__file__).resolve().parents[1]


def _quick_tasks():
    catalog = Catalog(ROOT)
    return [catalog.task(name) for name in catalog.suite("quick").tasks]


def test_no_applicable_attack_is_left_out_without_a_reason():
    missing = []
    for task in _quick_tasks():
        planned = build_attacks(task)
        for threat, attacks in planned.items():
            run = {name for name, _, _ in attacks}
            for name in ATTACKS:
                if name in run or applies(ATTACKS.get(name), task, threat) is not None:
                    continue
                if (name, task.name) not in NOT_RUN:
                    missing.append(f"{task.name}/{threat}: {name}")
    assert missing == [], "applicable attacks not run and without a reason:\n" + "\n".join(missing)


def test_every_reason_is_for_an_attack_that_applies_and_is_not_run():
    tasks = {t.name: t for t in _quick_tasks()}
    for (name, task_name), why in NOT_RUN.items():
        assert why and task_name in tasks and name in ATTACKS, (name, task_name)
        task = tasks[task_name]
        planned = build_attacks(task)
        live = [th for th in planned if applies(ATTACKS.get(name), task, th) is None]
        assert live, f"{name} does not apply to {task_name}: drop its NOT_RUN entry"
        assert all(name not in {n for n, _, _ in planned[th]} for th in live), (name, task_name)


def test_the_first_layer_attack_runs_on_every_one_sample_mlp_track():
    tasks = {t.name: t for t in _quick_tasks()}
    for name in ("digits_mlp_fedsgd", "digits_mlp_dpsgd_torus16"):
        planned = build_attacks(tasks[name])
        assert any(n == "first_layer_inversion" for lst in planned.values() for n, _, _ in lst), name
    mia = build_attacks(tasks["digits_mlp_fedsgd_mia"])  # full-batch: not one sample per gradient
    assert not any(n == "first_layer_inversion" for lst in mia.values() for n, _, _ in lst)


def test_the_first_layer_estimate_is_exact_and_sees_through_sparsification():
    """``δ (xᵀ, 1)`` rows give ``x`` exactly (float64); with 90 % of the coordinates dropped at
    random and the rest rescaled, the pixels some kept unit still carries are exact."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(3, 64, generator=gen, dtype=torch.float64)
    x[:, :10] = 0  # blank pixels
    delta = torch.randn(3, 100, generator=gen, dtype=torch.float64)
    g_w, g_b = delta[..., None] * x[:, None, :], delta
    torch.testing.assert_close(first_layer_estimate(g_w, g_b), x, rtol=1e-12, atol=1e-12)
    keep_w = torch.rand(g_w.shape, generator=gen) < 0.1
    keep_b = torch.rand(g_b.shape, generator=gen) < 0.1
    est = first_layer_estimate(torch.where(keep_w, 10 * g_w, 0), torch.where(keep_b, 10 * g_b, 0))
    seen = (keep_w & keep_b[..., None]).any(1)  # a unit with both entries kept
    torch.testing.assert_close(est[seen], x[seen], rtol=1e-12, atol=1e-12)
    assert seen[:, 10:].float().mean() > 0.5  # expected 1 − 0.99¹⁰⁰ ≈ 0.63 of the pixels
