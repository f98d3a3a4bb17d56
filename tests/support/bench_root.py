"""A tiny task and a benchmark root holding it, for the tests that run ``evaluate``.

``tiny_task`` is logistic regression on two Gaussians trained by FedSGD, one point per node,
attacked by the server with the exact analytic inversion (a job takes about a second);
``make_root`` writes tasks, suites and defense plugins into ``tmp_path/root``; ``evaluate_argv``,
``run_evaluate`` and ``evaluated_store`` run ``evaluate`` on it, in a subprocess or in this process.
"""

from __future__ import annotations

import copy
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.cli import main
from bench.results.store import ResultStore

REPO = Path(__file__).resolve().parents[2]

#: the tiny task's attack: the server inverts logistic regression exactly from round 0
ANALYTIC = {"name": "analytic_logreg", "params": {"rounds": [0]}}


def tiny_task(
    name: str = "tiny",
    *,
    nodes: int = 8,
    n_test: int = 100,
    rounds: int = 4,
    eval_every: int = 2,
    lr: float | None = 0.5,
    attacks: list[dict] | None = None,
    utility: dict | None = None,
    **fields: Any,
) -> dict:
    """A task file's content: ``nodes`` nodes with one training point each (``lr=None``: the
    protocol's default step), the server running ``attacks`` (default :data:`ANALYTIC`);
    ``fields`` are further top-level fields (``description``, ``public``, ...)."""
    simulation: dict[str, Any] = {
        "dataset": "two_gaussians",
        "dataset_params": {"n_train": nodes, "n_test": n_test},
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 1},
        "model": "logreg",
        "nodes": nodes,
        "protocol": "fedsgd",
    }
    if lr is not None:
        simulation["protocol_params"] = {"lr": lr}
    simulation |= {"rounds": rounds, "eval_every": eval_every}
    task: dict[str, Any] = {"name": name, **fields, "simulation": simulation}
    if utility is not None:
        task["utility"] = utility
    task["threats"] = [{"name": "server", "attacks": copy.deepcopy(attacks or [ANALYTIC])}]
    return task


#: a larger tiny task (12 nodes, 20 rounds) with a utility floor, for the ``evaluate`` tests
TINY_LOGREG = tiny_task(
    "tiny_logreg",
    nodes=12,
    n_test=200,
    rounds=20,
    eval_every=10,
    utility={"metric": "val_acc", "floor": 0.6},
    description="tiny analytic-inversion task for tests",
)


def diverging_task(name: str = "diverging") -> dict:
    """:data:`TINY_LOGREG` turned into a linear regression with a step of 1e6: every run of it
    diverges (a failed job)."""
    task = copy.deepcopy(TINY_LOGREG)
    task["name"] = name
    task["simulation"].update(
        dataset="linear_regression",
        model="linear",
        dataset_params={"n_train": 12, "dim": 3},
        protocol_params={"lr": 1e6},
    )
    task["utility"] = {"metric": "val_loss", "higher_is_better": False}
    return task


def make_root(
    tmp_path: Path,
    tasks: Sequence[dict] = (),
    suites: dict | None = None,
    *,
    defenses: Sequence[str] | None = ("none",),
    plugins: dict[str, str] | None = None,
) -> Path:
    """``tmp_path/root``: ``tasks/<name>.yaml`` for each task, ``tasks/suites.yaml`` and in
    ``defenses/`` the repository's plugins named in ``defenses`` (``None``: all of them) plus
    ``plugins`` (name → source, dedented). The default suite is ``quick``: every task, ``none`` and the
    plugins, one seed. Called again, it rewrites tasks and suites and keeps the plugins there."""
    root = tmp_path / "root"
    (root / "tasks").mkdir(parents=True, exist_ok=True)
    (root / "defenses").mkdir(exist_ok=True)
    names = defenses if defenses is not None else sorted(p.stem for p in (REPO / "defenses").glob("*.py"))
    for name in names:
        target = root / "defenses" / f"{name}.py"
        if not target.exists():
            target.write_text((REPO / "defenses" / f"{name}.py").read_text())
    for name, source in (plugins or {}).items():
        (root / "defenses" / f"{name}.py").write_text(textwrap.dedent(source))
    for task in tasks:
        (root / "tasks" / f"{task['name']}.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    if suites is None:
        defaults = {"defenses": ["none", *(plugins or {})], "seeds": 1}
        suites = {"quick": {"tasks": [t["name"] for t in tasks], **defaults}}
    (root / "tasks" / "suites.yaml").write_text(yaml.safe_dump(suites))
    return root


def evaluate_argv(root: Path, out: Path, site: Path) -> list[str]:
    """The arguments of ``evaluate`` on ``root``, its store in ``out`` and its page in ``site``."""
    return ["evaluate", "--root", str(root), "--out", str(out), "--site", str(site)]


def run_evaluate(root: Path, tmp_path: Path, *extra: str) -> int:
    """``python -m bench evaluate`` in this process, its store in ``tmp_path/out`` and its page in
    ``tmp_path/site``, without a progress bar; the exit code."""
    return main([*evaluate_argv(root, tmp_path / "out", tmp_path / "site"), "--no-progress", *extra])


def evaluated_store(root: Path, tmp_path: Path, *extra: str) -> ResultStore:
    """:func:`run_evaluate`, which must succeed, and the store it wrote."""
    assert run_evaluate(root, tmp_path, *extra) == 0
    return ResultStore(str(tmp_path / "out" / "results.sqlite"))
