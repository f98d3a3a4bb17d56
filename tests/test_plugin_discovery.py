"""Trusted plugins are found by walking their package (:func:`bench.core.registry.import_submodules`):
every ``@ATTACKS.register`` and ``@claim`` decoration in the sources is registered, and the
complete example of ``bench/attacks/README.md`` ("Writing one"), dropped into a family folder,
registers itself with no ``__init__`` edit and runs."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import bench.attacks
import bench.attacks.inversion
from bench.attacks import ATTACKS, build_attack
from bench.claims import CLAIMS, load
from bench.core.registry import import_submodules
from bench.evaluation.truth import Scorer
from bench.metrics import build_metric
from tests.support.readmes import python_block
from tests.support.runs import DIGITS_FEDSGD, server_sim

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = "bench.attacks.inversion.idlg_labels"


def decorated_names(folder: Path, decorator: str) -> dict[str, str]:
    """``name -> file`` of every ``@<decorator>(name, ...)`` on a definition under ``folder``; the
    name a literal or an expression of the module's string constants (``f"{PAPER}:C1"``)."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                continue
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and ast.unparse(deco.func) == decorator and deco.args:
                    expr = ast.Expression(deco.args[0])
                    name = eval(compile(expr, str(path), "eval"), {"__builtins__": {}}, constants)
                    assert name not in found, f"{name} decorated twice: {found[name]}, {path}"
                    found[name] = str(path.relative_to(REPO))
    return found


def test_every_decorated_attack_is_registered_from_its_module():
    found = decorated_names(REPO / "bench" / "attacks", "ATTACKS.register")
    # the package's own (tests register hostile attacks of their own: tests/support/hostile_plugins.py)
    ours = {n: a for n, a in ATTACKS.items() if a.__module__.startswith("bench.attacks.")}
    assert found and set(ours) == set(found)
    for name, attack in ours.items():
        module = sys.modules[attack.__module__]
        assert Path(module.__file__).resolve() == REPO / found[name], name


def test_every_decorated_claim_is_registered():
    load()
    found = decorated_names(REPO / "bench" / "claims", "claim")
    assert found and set(CLAIMS.names()) == set(found)


def on_inversion_path(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``folder`` part of the family folder ``bench/attacks/inversion/`` (until teardown)."""
    monkeypatch.setattr(bench.attacks.inversion, "__path__", [*bench.attacks.inversion.__path__, str(folder)])


@pytest.fixture
def example_dropped_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The README's example saved as ``idlg_labels.py`` in a folder on the path of
    ``bench.attacks.inversion``; the registry, the package and ``sys.modules`` restored after."""
    source = python_block(REPO / "bench" / "attacks" / "README.md", "## Writing one")
    (tmp_path / "idlg_labels.py").write_text(source)
    on_inversion_path(tmp_path, monkeypatch)
    monkeypatch.setattr(ATTACKS, "_entries", dict(ATTACKS._entries))
    yield "idlg_labels"
    sys.modules.pop(EXAMPLE, None)
    if hasattr(bench.attacks.inversion, "idlg_labels"):
        delattr(bench.attacks.inversion, "idlg_labels")


def test_a_dropped_in_attack_module_registers_itself_and_runs(example_dropped_in, monkeypatch):
    name = example_dropped_in
    assert name not in ATTACKS
    # the package's __init__ as committed, run again: it imports every module under the package
    monkeypatch.setattr(bench.attacks, "build_attack", bench.attacks.build_attack)  # redefined
    importlib.reload(bench.attacks)
    assert name in ATTACKS and ATTACKS.get(name).__module__ == EXAMPLE
    sim = server_sim(DIGITS_FEDSGD)  # ten one-sample FedSGD gradients, seen by the server
    attack = build_attack(name, rounds=[0])
    recs = attack.run(sim.view("s"))
    assert sorted(r.node for r in recs) == list(range(10))
    scorer = Scorer(sim.config, sim.data)
    metric = build_metric(attack.metrics[0])
    assert metric.leakage(metric.compute(recs, [scorer.truth(r) for r in recs], scorer.info)) == 1.0


def test_a_broken_module_is_not_skipped(tmp_path, monkeypatch):
    (tmp_path / "broken_attack.py").write_text("raise RuntimeError('broken on import')\n")
    on_inversion_path(tmp_path, monkeypatch)
    with pytest.raises(RuntimeError, match="broken on import"):
        import_submodules("bench.attacks")
    assert "bench.attacks.inversion.broken_attack" not in sys.modules
