"""``evaluate --scale smoke``: every task of every suite scales to a valid task that keeps its
model, nodes and attacks; paper-scale VGG-11 and ResNet20 jobs run at that scale, every trust
mechanism on, without being killed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from bench.commands.scale import SMOKE_ITERATIONS, SMOKE_ROUNDS, SMOKE_SAMPLES, smoke
from bench.spec.catalog import Catalog, bench_root
from tests.support.bench_root import make_root, run_evaluate

REPO = Path(__file__).resolve().parents[2]


def _all_tasks(catalog: Catalog) -> list[str]:
    return sorted({t for s in ("quick", "real", "standard") for t in catalog.suite(s).tasks})


def test_the_cli_offers_the_registered_scales():
    """``--scale``'s choices are written out in the parser (it does not import the schema to
    start); they must be the registry's."""
    from bench.cli import build_parser
    from bench.commands.scale import SCALES

    evaluate = next(a for a in build_parser()._actions if a.dest == "command").choices["evaluate"]
    scale = next(a for a in evaluate._actions if a.dest == "scale")
    assert list(scale.choices) == SCALES.names()


def test_every_task_scales_to_a_valid_task_with_its_model_nodes_and_attacks():
    catalog = Catalog(bench_root())
    for name in _all_tasks(catalog):
        task = catalog.task(name)
        small = smoke(task)
        sim, full = small.simulation, task.simulation
        assert small.name == f"{name}_smoke"
        assert (sim.model, sim.nodes, sim.protocol, sim.topology, sim.dataset) == (
            full.model, full.nodes, full.protocol, full.topology, full.dataset
        )  # fmt: skip
        assert sim.rounds == min(full.rounds, SMOKE_ROUNDS) and sim.eval_every <= max(1, sim.rounds)
        for key in ("subset", "test_subset"):
            if key in sim.dataset_params and sim.dataset_params[key] is not None:
                need = full.nodes * int(full.partition_params.get("n_per_node", 1))
                assert int(sim.dataset_params[key]) <= max(SMOKE_SAMPLES, need), name
        attacks = [(a.name, a.params) for t in small.threats for a in t.attacks]
        assert [n for n, _ in attacks] == [a.name for t in task.threats for a in t.attacks]
        for _, params in attacks:
            assert params.get("iterations", 0) <= SMOKE_ITERATIONS
            rounds = params.get("rounds")
            ints = [rounds] if isinstance(rounds, int) else [r for r in rounds or [] if isinstance(r, int)]
            assert all(r < max(1, sim.rounds) for r in ints), (name, rounds)


def test_the_scaled_cut_is_the_documented_one():
    task = smoke(Catalog(bench_root()).task("cifar10_vgg11_fedsgd_ig"))
    (ig,) = task.threats[0].attacks
    assert ig.params["iterations"] == SMOKE_ITERATIONS and ig.params["restarts"] == 1  # 2400 × 4 in the paper
    assert task.simulation.rounds == SMOKE_ROUNDS and task.simulation.model == "vgg11_gn"
    resnet = smoke(Catalog(bench_root()).task("cifar10_resnet20_dpsgd_torus36"))
    assert resnet.simulation.dataset_params == {"subset": SMOKE_SAMPLES, "test_subset": SMOKE_SAMPLES}
    assert resnet.simulation.protocol_params["batch_size"] == SMOKE_SAMPLES // 36  # a node's share


def _on_synthetic_cifar(name: str, nodes: int | None) -> dict:
    """The committed task ``name`` on synthetic 3×32×32 images (CIFAR is not on this machine):
    the same model, protocol and attacks (``nodes``: fewer nodes, else the task's)."""
    task = yaml.safe_load((REPO / "tasks" / f"{name}.yaml").read_text())
    task["simulation"]["dataset"] = "teacher_images"
    task["simulation"]["nodes"] = nodes or task["simulation"]["nodes"]
    task["simulation"]["dataset_params"] = {"n_train": 2048, "n_test": 512, "shape": [3, 32, 32]}
    return task


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "nodes"), [("cifar10_vgg11_fedsgd_ig", 2), ("cifar10_resnet20_dpsgd_torus36", None)]
)
def test_a_paper_scale_vgg11_and_resnet20_job_runs_at_smoke_scale(
    tmp_path: Path, name: str, nodes: int | None
):
    """VGG-11 (9.2M parameters; 2 of the task's 8 clients, so that CI's CPU inverts two images,
    about 12 s per attack variant at 5 iterations) and ResNet20 (the 36 nodes of the torus): one
    defended job each, through evaluate's sandboxed simulation process, with the per-node defense
    runner, the later-round and window variants and the defense-aware attacks (the defense oracle
    included): the job ends ok (a process killed for memory would be a failed job saying so)."""
    root = make_root(tmp_path, [_on_synthetic_cifar(name, nodes)], defenses=["gaussian_noise"])
    noise = {"name": "gaussian_noise", "params": {"sigma": 0.1}}
    suites = {"quick": {"tasks": [name], "defenses": [noise], "seeds": 1}}
    (root / "tasks" / "suites.yaml").write_text(yaml.safe_dump(suites))
    assert run_evaluate(root, tmp_path, "--scale", "smoke") == 0
    db = sqlite3.connect(tmp_path / "out" / "results.sqlite")
    rows = db.execute("select task, defense, status, reason from jobs").fetchall()
    assert len(rows) == 1 and {r[0] for r in rows} == {f"{name}_smoke"}
    assert all(status == "ok" for _, _, status, _ in rows), rows
    attacks = dict(db.execute("select attack, status from attack_results").fetchall())
    assert attacks and all(status == "ok" for status in attacks.values()), attacks
    if name.startswith("cifar10_vgg11"):  # an inversion track: the round and defense-aware variants ran
        assert any(a.endswith("+oracle") for a in attacks) and any(a.endswith("+later") for a in attacks)
