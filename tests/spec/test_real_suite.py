"""The `real` suite: real datasets only, the models the benchmark names (logistic regression,
MLP, LeNet, VGG), every defense of the quick suite, a stated reduction in every task, and one of
its tasks run end to end on the real MNIST files where `python -m bench data get` put them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bench.cli import main
from bench.data import cache
from bench.spec.catalog import Catalog, bench_root
from tests.support.bench_root import evaluate_argv

REAL_DATASETS = {"mnist", "fashion_mnist", "adult", "cifar10", "cifar100", "purchase100", "texas100"}


def test_the_real_suite_is_real_data_with_every_named_model_and_every_defense():
    catalog = Catalog(bench_root())
    real, quick = catalog.suite("real"), catalog.suite("quick")
    sims = [catalog.task(t).simulation for t in real.tasks]
    assert {s.dataset for s in sims} <= REAL_DATASETS
    assert {"logreg", "mlp", "lenet_dlg", "vgg_small"} <= {s.model for s in sims}
    assert [d.label for d in real.defenses] == [d.label for d in quick.defenses]
    assert real.seeds == 3
    for name in real.tasks:
        text = catalog.task(name).description
        assert "Reduced" in text or "reduced" in text or "setting" in text, name
        utility = catalog.task(name).utility
        # every ranked track is gated by the central reference; an attack-only one says why
        assert utility.reference == "central" or (utility.attack_only or "").strip(), name
    protocols = {s.protocol for s in sims}
    assert {"fedsgd", "pdmm", "dpsgd"} <= protocols  # the seed systems' protocols
    assert any(s.dataset == "adult" for s in sims)  # membership inference on real tabular data


def test_mnist_logistic_regression_learns_and_leaks_its_round_0_images(tmp_path: Path):
    """mnist_logreg_fedsgd, undefended, one seed, on the official MNIST: the model reaches its
    floor and the analytic inversion recovers every client's round-0 image exactly."""
    if cache.locate("mnist") is None:
        pytest.skip("mnist is not in the data cache here (`python -m bench data get mnist` puts it there)")
    argv = evaluate_argv(bench_root(), tmp_path / "out", tmp_path / "site")
    code = main([*argv, "--suite", "real", "--task", "mnist_logreg_fedsgd", "--defense", "none",
                 "--seeds", "1", "--no-progress"])  # fmt: skip
    assert code == 0
    db = sqlite3.connect(tmp_path / "out" / "results.sqlite")
    ((status, utility),) = db.execute("select status, utility from jobs").fetchall()
    assert status == "ok" and utility > 0.7  # 0.808 on 2026-12-02 (chance: 0.1)
    leak = dict(db.execute("select attack, leakage from attack_results"))
    assert leak["analytic_logreg"] == pytest.approx(1.0, abs=1e-6)
