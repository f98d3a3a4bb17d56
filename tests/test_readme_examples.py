"""The complete examples of the contributor READMEs run as they are printed: the defense of
``defenses/README.md`` ("Writing one") as a plugin through ``evaluate``, and the tests of
``bench/attacks/README.md`` ("Testing one")."""

from __future__ import annotations

from pathlib import Path

from tests.support.one_task import ANALYTIC, evaluate, make_root, tiny_task
from tests.support.readmes import python_block

REPO = Path(__file__).resolve().parents[1]


def test_the_defense_readmes_example_is_a_working_plugin(tmp_path):
    """Saved as ``defenses/top_k.py`` of a benchmark root, the example loads, runs under
    ``evaluate`` beside the baseline, and changes what the server observes (its attack's leakage)."""
    source = python_block(REPO / "defenses" / "README.md", "## Writing one")
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {"top_k": source})
    store = evaluate(root, tmp_path, "--defense", "none", "--defense", "top_k:k=1")
    results = {r.defense: r for r in store.results()}
    assert set(results) == {"none", "top_k(k=1)"}, set(results)
    for r in results.values():
        assert r.status == "ok", r.reason
    leak = {d: {a.attack: a.leakage for a in r.attacks} for d, r in results.items()}
    assert leak["top_k(k=1)"]["analytic_logreg"] < leak["none"]["analytic_logreg"]


def test_the_attack_readmes_testing_example_passes():
    """The module of ``bench/attacks/README.md``'s "Testing one", executed, and each of its tests
    called."""
    namespace: dict = {"__name__": "attacks_readme_example"}
    exec(
        compile(python_block(REPO / "bench" / "attacks" / "README.md", "## Testing one"), "README", "exec"),
        namespace,
    )
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()
