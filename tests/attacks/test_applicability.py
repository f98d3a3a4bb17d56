"""Every track runs every registered attack that applies to its model and view (issue 38 item 2):
the attacks declared once per model family are added where they apply, and an applicable attack
that a quick track does not run must carry a reason (:data:`bench.attacks.applicability.NOT_RUN`)."""

from __future__ import annotations

from pathlib import Path

import torch

from bench.attacks import ATTACKS
from bench.attacks.applicability import NOT_RUN, applies
from bench.attacks.inversion.first_layer import first_layer_estimate
from bench.evaluation.planning import build_attacks
from bench.spec.catalog import Catalog
from tests.support.bench_root import REPO


def _bench_attacks() -> list[str]:
    """The attacks bench registers (other tests register their own probes in the same registry)."""
    return [n for n in ATTACKS if ATTACKS.get(n).__module__.startswith("bench.attacks")]


def _quick_tasks():
    catalog = Catalog(REPO)
    return [catalog.task(name) for name in catalog.suite("quick").tasks]


def test_no_applicable_attack_is_left_out_without_a_reason():
    missing = []
    for task in _quick_tasks():
        planned = build_attacks(task)
        for threat, attacks in planned.items():
            run = {name for name, _, _ in attacks}
            for name in _bench_attacks():
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
    random and the rest rescaled, the rank-one completion recovers nearly every non-zero pixel
    exactly, where the ratio alone recovers only those of units that kept their bias entry."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(3, 64, generator=gen, dtype=torch.float64)
    x[:, :10] = 0  # blank pixels
    delta = torch.randn(3, 100, generator=gen, dtype=torch.float64)
    delta[:, 50:] = 0  # inactive ReLU units
    g_w, g_b = delta[..., None] * x[:, None, :], delta
    torch.testing.assert_close(first_layer_estimate(g_w, g_b), x, rtol=1e-12, atol=1e-12)
    keep_w = torch.rand(g_w.shape, generator=gen) < 0.1
    keep_b = torch.rand(g_b.shape, generator=gen) < 0.1
    masked = torch.where(keep_w, 10 * g_w, 0), torch.where(keep_b, 10 * g_b, 0)
    nonzero = x != 0

    def exact(est: torch.Tensor) -> float:
        return float(((est - x).abs() < 1e-9)[nonzero].double().mean())

    assert exact(first_layer_estimate(*masked)) > 0.95
    assert exact(first_layer_estimate(*masked, iterations=0)) < 0.6  # Phong et al.'s ratio alone


MASK_MODULE = '''
"""Keep each gradient coordinate with probability 0.1 and rescale by 10 (issue 38 item 2)."""

import torch

from bench.defense.base import DEFENSES, Defense


@DEFENSES.register("random_mask_test", "random coordinate mask, rescaled (test)")
class RandomMask(Defense):
    source = "original"
    summary = "Keeps each gradient coordinate with probability p and rescales it by 1/p."

    def __init__(self, p: float = 0.1) -> None:
        self.p = float(p)

    def local_gradients(self, grad, node):
        keep = torch.rand_like(grad) < self.p
        return torch.where(keep, grad / self.p, torch.zeros_like(grad))
'''


def test_the_first_layer_attack_breaks_a_random_mask_that_hides_from_the_matching_attacks(tmp_path: Path):
    """The issue's defense: every matching attack of the track fell below the blank guess, yet the
    first-layer ratio reads the input off the kept coordinates."""
    import importlib.util
    import sys

    import bench
    from bench.defense.plugin import DEFENSES

    path = tmp_path / "random_mask_test.py"
    path.write_text(MASK_MODULE)
    spec = importlib.util.spec_from_file_location("random_mask_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["random_mask_test"] = module
    spec.loader.exec_module(module)
    try:
        row = bench.evaluate_defense(
            module.RandomMask(p=0.1), tasks=["digits_mlp_fedsgd"], seeds=1, out=tmp_path
        )
    finally:
        DEFENSES.remove("random_mask_test")
        sys.modules.pop("random_mask_test", None)
    assert row["failed"].tolist() == [0]
    leak = {
        c.split(":", 1)[1]: float(v) for c, v in row.iloc[0].items() if c.startswith("leakage:") and v == v
    }
    assert leak["first_layer_inversion"] > 0.7 and float(row["privacy_mean"].iloc[0]) < 0.3
    assert row["worst_attack"].iloc[0].startswith("first_layer_inversion")  # on round 0 or a later one
