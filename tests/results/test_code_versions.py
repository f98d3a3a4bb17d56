"""Results you can trust to be current: a job's key covers the code that produces it.

Editing a defense plugin reruns its jobs (and only its jobs); editing a task reruns that task;
the ranked table and the page show the newest version of each entry and never mix its rows
with an older version's, which stay in the store and are listed as older versions.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from bench.leaderboard.ranking import entry_table, superseded_versions
from bench.results import code_digest
from bench.results.code_digest import attack_modules, code_bytes, engine_digest, engine_modules
from bench.results.store import ResultStore
from tests.support.bench_root import REPO, make_root, run_evaluate, tiny_task

TASK = tiny_task(nodes=6)

NOISE = """
from bench.defense.base import DEFENSES, Defense


@DEFENSES.register("scaled", "scales every message")
class Scaled(Defense):
    def outgoing(self, payload, msg):
        return payload * {factor}
"""


def setup_root(tmp_path: Path) -> Path:
    return make_root(tmp_path, [TASK], plugins={"scaled": NOISE.format(factor=1.5)})


def evaluate(root: Path, tmp_path: Path, capsys) -> str:
    assert run_evaluate(root, tmp_path) == 0
    return capsys.readouterr().out


def test_editing_a_defense_reruns_its_jobs_only(tmp_path, capsys):
    root = setup_root(tmp_path)
    assert "2 jobs run, 0 already in the store" in evaluate(root, tmp_path, capsys)
    assert "0 jobs run, 2 already in the store" in evaluate(root, tmp_path, capsys)
    (root / "defenses" / "scaled.py").write_text(NOISE.format(factor=2.0))
    out = evaluate(root, tmp_path, capsys)
    assert "1 jobs run, 1 already in the store" in out
    assert "1 stored jobs of older code or task versions are not shown" in out

    results = ResultStore(str(tmp_path / "out" / "results.sqlite")).results()
    scaled = [r for r in results if r.defense == "scaled"]
    assert len(scaled) == 2 and len({r.provenance["version"] for r in scaled}) == 2
    assert scaled[0].provenance["code"]["defense"] != scaled[1].provenance["code"]["defense"]
    table = entry_table(results)
    row = table[table["defense"] == "scaled"].iloc[0]
    assert row["seeds"] == 1  # the newest version only, never both
    assert table.attrs["superseded"] == 1
    older = superseded_versions(results)
    assert list(older["defense"]) == ["scaled"] and older["version"][0] == scaled[0].provenance["version"]
    page = (tmp_path / "site" / "index.html").read_text()
    assert "Older versions in the store" in page and scaled[0].provenance["version"] in page


def test_editing_a_task_reruns_it_without_mixing_results(tmp_path, capsys):
    root = setup_root(tmp_path)
    evaluate(root, tmp_path, capsys)
    (root / "tasks" / "tiny.yaml").write_text(
        yaml.safe_dump({**TASK, "simulation": {**TASK["simulation"], "rounds": 2}})
    )
    assert "2 jobs run, 0 already in the store" in evaluate(root, tmp_path, capsys)
    results = ResultStore(str(tmp_path / "out" / "results.sqlite")).results()
    table = entry_table(results)
    assert list(table["seeds"]) == [1, 1] and table.attrs["superseded"] == 2
    assert {r.metrics["rounds"] for r in results} == {4.0, 2.0}
    for defense in ("none", "scaled"):
        (new,) = [r for r in results if r.defense == defense and r.metrics["rounds"] == 2.0]
        assert table[table["defense"] == defense]["utility_mean"].iloc[0] == new.utility


def test_attack_code_closure_and_engine_digest():
    mods = attack_modules("bench.attacks.inversion.dlg")
    assert (
        "bench.attacks.inversion.dlg" in mods
        and "bench.attacks.observe.gradients" in mods
        and "bench.attacks.base" in mods
    )
    assert all(name.startswith("bench.attacks") for name in mods)
    assert len(engine_digest()) == 16


def test_a_digest_reads_code_not_documentation(tmp_path):
    """Docstrings, comments and layout do not change a module's digest; a statement, a default
    or a string that is not a docstring does."""
    src = '''"""Module doc."""


def f(x, k=2):
    """Doc of f."""
    # a comment
    return x * k
'''
    variants = {
        "same": src.replace("Module doc.", "Another text.").replace("# a comment", "# other"),
        "reflowed": src.replace("return x * k", "return (\n        x * k\n    )"),
        "default": src.replace("k=2", "k=3"),
        "body": src.replace("x * k", "x + k"),
        "string": src.replace("    return", "    'not a docstring'\n    return"),
    }
    base = tmp_path / "base.py"
    base.write_text(src)
    digests = {}
    for name, text in variants.items():
        (tmp_path / f"{name}.py").write_text(text)
        digests[name] = code_bytes(tmp_path / f"{name}.py")
    assert digests["same"] == digests["reflowed"] == code_bytes(base)
    assert len({code_bytes(base), digests["default"], digests["body"], digests["string"]}) == 4


def test_the_engine_digest_follows_its_imports_into_the_attacks(tmp_path, monkeypatch):
    """An engine module that imports a library module under ``bench/attacks`` makes it (and what
    it imports there) part of the engine's digest, with no list to keep: a new membership
    library module the scorer uses is covered the day it is imported."""
    pkg = tmp_path / "bench"
    files = {
        "__init__.py": "",
        "evaluation/__init__.py": "",
        "evaluation/scorer.py": "from bench.attacks.membership.newlib import f\n",
        "attacks/__init__.py": "",
        "attacks/membership/__init__.py": "",
        "attacks/membership/newlib.py": "from .helper import g\n\ndef f():\n    return g()\n",
        "attacks/membership/helper.py": "def g():\n    return 1\n",
        "attacks/membership/unused.py": "def h():\n    return 2\n",
        "leaderboard/page.py": "from bench.attacks.membership.unused import h\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    monkeypatch.setattr(code_digest, "PACKAGE_DIR", pkg)
    found = set(engine_modules())
    assert {"attacks/membership/newlib.py", "attacks/membership/helper.py"} <= found
    assert "attacks/membership/unused.py" not in found  # only the presentation layer imports it
    assert "evaluation/scorer.py" in found and "leaderboard/page.py" not in found


def test_the_engine_digest_covers_the_scorers_membership_library():
    found = set(engine_modules())
    for name in ("pool", "reference_worlds", "likelihood_ratio", "epsilon", "metrics", "roc"):
        assert f"attacks/membership/{name}.py" in found
    assert "attacks/membership/lira.py" not in found  # an attack: in its own digest


def test_a_jobs_key_covers_the_attacks_of_its_model_family():
    """A family attack (not listed by the task: :mod:`bench.attacks.applicability`) is run by the
    job, so its code is part of the job's key: editing it re-runs exactly the jobs that run it."""
    from bench.evaluation.grid import expand_grid, plan_jobs
    from bench.spec.catalog import Catalog
    from bench.spec.schema import DefenseSpec

    root = REPO
    catalog = Catalog(root)
    specs = expand_grid(
        catalog, ["digits_mlp_fedsgd", "digits_mlp_fedsgd_mia"], [DefenseSpec(name="none")], 1
    )
    jobs, _ = plan_jobs(specs, root)
    attacks = {j.spec.task.name: set(j.code["attacks"]) for j in jobs}
    assert "first_layer_inversion" in attacks["digits_mlp_fedsgd"]
    assert "first_layer_inversion" not in attacks["digits_mlp_fedsgd_mia"]
