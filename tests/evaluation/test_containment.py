"""The harness as a trust boundary: attacks, defenses and scoring cannot reach each other.

Each test runs ``python -m bench evaluate`` on a tiny task in a temporary benchmark root with
hostile plugins, and checks that they get nothing and change no stored score:

* attacks that walk the call stack or the garbage collector for the simulation, read
  knowledge the task declares private, or overwrite their View for the next attack
  (``tests/support/hostile_plugins.py``);
* defenses that would monkeypatch the metrics, the scorer or the store, or read the store and
  their parent's arguments: such code breaks the plugin rules (``bench.defense.source_policy``)
  and is refused before any of it runs — ``evaluate`` exits with code 2 naming the file, the
  line and the rule; the parent process never imports a plugin, the simulation process that
  runs it is sandboxed.
"""

from __future__ import annotations

import re
import sys

import pytest
import torch

import tests.support.hostile_plugins  # noqa: F401  (registers the hostile attacks in this process too)
from bench.cli import main
from bench.results.store import ResultStore
from bench.simulation import Simulation
from bench.threats import KnowledgeError, build_threat
from tests.support.bench_root import run_evaluate
from tests.support.one_task import ANALYTIC, evaluate, make_root, outcomes, tiny_task


def test_attacks_cannot_reach_the_simulation_or_private_knowledge(tmp_path):
    attacks = [{"name": n} for n in ("hostile_frame_walker", "hostile_gc_walker", "hostile_private_reader")]
    root = make_root(tmp_path, tiny_task([*attacks, ANALYTIC], public=["architecture", "n_nodes"]))
    got = outcomes(evaluate(root, tmp_path))
    frame, gc_, private = got["hostile_frame_walker"], got["hostile_gc_walker"], got["hostile_private_reader"]
    assert frame.status == "failed" and "no simulation on the stack" in frame.reason
    assert gc_.status == "failed" and "no simulation among" in gc_.reason
    assert private.status == "failed" and "hyperparameters absent" in private.reason
    assert "hyperparameters" in private.reason.split("withheld:")[1]  # declared private, value absent
    # the honest attack in the same process still works
    assert got["analytic_logreg"].status == "ok" and got["analytic_logreg"].leakage > 0.99


def test_in_place_edits_do_not_reach_the_next_attack(tmp_path):
    root = make_root(tmp_path, tiny_task([{"name": "hostile_mutator"}, ANALYTIC]))
    got = outcomes(evaluate(root, tmp_path))
    # the view holds the rounds up to the drawn later round's successor (bench.evaluation.rounds):
    # 3 or 4 of the 4 rounds, each an upload and a broadcast batch
    mutator = got["hostile_mutator"]
    assert mutator.status == "failed" and re.search(r"mutated [68] message batches", mutator.reason), mutator
    analytic = got["analytic_logreg"]
    assert analytic.status == "ok" and analytic.leakage > 0.99  # it saw the original, not NaNs


HOSTILE_DEFENSE = """
    import bench.metrics.vector as vector
    import bench.evaluation.truth as truth
    import bench.leaderboard.ranking as scoring
    import bench.results.store as store
    from bench.defense.base import DEFENSES, Defense

    @DEFENSES.register("hostile", "monkeypatches the metrics, the scorer and the store")
    class Hostile(Defense):
        def bind(self, run):
            super().bind(run)
            scoring.privacy_score = lambda *a, **k: 1.0
            truth.Scorer.score = lambda *a, **k: None
            store.ResultStore.add = lambda self, result: True

        def outgoing(self, payload, msg):
            return payload
"""

#: what a plugin within the import rules could still try: change a function of torch that the
#: scoring (or another node's hook) calls too
PATCH_TORCH = """
    import torch
    from bench.defense.base import DEFENSES, Defense

    @DEFENSES.register("hostile", "replaces a torch function every process calls")
    class Hostile(Defense):
        def bind(self, run):
            super().bind(run)
            torch.linalg.vector_norm = torch.zeros_like

        def outgoing(self, payload, msg):
            return payload
"""


def _refused(tmp_path, capsys, plugins: dict[str, str]) -> str:
    """``evaluate`` on a root with ``plugins``: exit code 2 (an input error), nothing run, and
    the message (checked to be one line, no traceback)."""
    root = make_root(tmp_path, tiny_task([ANALYTIC]), plugins)
    assert run_evaluate(root, tmp_path) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "breaks the plugin rules" in err, err
    assert (
        not (tmp_path / "out" / "results.sqlite").exists()
        or not ResultStore(str(tmp_path / "out" / "results.sqlite")).results()
    )
    return err


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        (HOSTILE_DEFENSE, "hostile.py:2 breaks the plugin rules: 'import bench.metrics.vector' — a plugin "
         "imports only math and torch as modules"),
        (PATCH_TORCH, "hostile.py:9 breaks the plugin rules: 'torch.linalg.vector_norm' is assigned: a "
         "plugin never changes a module"),
    ],
    ids=["imports_the_scoring", "patches_torch"],
)  # fmt: skip
def test_a_defense_cannot_change_how_it_is_scored(tmp_path, capsys, source, rule):
    """A plugin that would patch the metrics, the scorer, the store or a torch function is refused
    on its source, before any of it runs (and the parent never imports a plugin at all)."""
    err = _refused(tmp_path, capsys, {"hostile": source})
    assert rule in err, err
    assert "bench_defense_plugins.hostile" not in sys.modules


SPY = """
    from bench.defense.base import DEFENSES, Defense

    @DEFENSES.register("spy", "reports that it ran, bound to the run")
    class Spy(Defense):
        def bind(self, run):
            super().bind(run)
            self.nodes = run.n_nodes

        def outgoing(self, payload, msg):
            return payload * 1.0001

        def accounting(self):
            return {"bound_to_nodes": self.nodes}
"""


def test_defense_code_runs_only_in_the_simulation_process(tmp_path):
    """The plugin runs in the probe's and the simulation's processes, never in the scorer's: its
    job ran (its accounting, called after the run, reports the run it was bound to), in a
    sandboxed process (bench.evaluation.sandbox), and this process never imported it. (That the
    probe and the simulation are distinct processes, and that the sandbox refuses the plugin a
    file write, a rule-abiding plugin cannot show any more: it can name neither ``os`` nor
    ``open``. The sandbox itself is tested in tests/evaluation/test_isolation.py.)"""
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {"spy": SPY})
    store = evaluate(root, tmp_path)
    (spy,) = [r for r in store.results() if r.defense == "spy"]
    assert spy.status == "ok", spy.reason
    assert spy.accounting["defense_notes"] == {"bound_to_nodes": 8}
    assert spy.provenance["sandbox"].startswith("landlock")
    assert "bench_defense_plugins.spy" not in sys.modules


def test_the_view_holds_no_private_knowledge_and_no_model_object():
    sim = Simulation(
        {"dataset": "two_gaussians", "model": "logreg", "nodes": 4, "protocol": "fedsgd", "rounds": 1},
        threats={"server": build_threat("server")},
        record_rounds=[0],
    )
    sim.run(1)
    data = sim.view_bytes("server", public=["architecture"])
    view = sim.view("server", public=["architecture"])
    assert set(view.knowledge.values) == {"architecture"}
    assert "flat_model" not in view.knowledge["architecture"]
    with pytest.raises(KnowledgeError, match="declares 'hyperparameters' private"):
        view.knowledge["hyperparameters"]
    assert b"lr" not in data.split(b"withheld")[0] or "lr" not in str(view.knowledge.values)
    # copies: editing one View's tensors does not change another built from the same bytes
    a, b = type(view).from_bytes(data), type(view).from_bytes(data)
    a.messages[0].payload.zero_()
    assert torch.count_nonzero(b.messages[0].payload) > 0
    # the rebuilt model is the attacker's own object, with the simulation's parameter layout
    assert a.model is not sim.flat and a.model.n_params == sim.flat.n_params


BROKEN_HOOK = """
    from bench.defense.base import DEFENSES, Defense

    @DEFENSES.register("broken_shape", "returns one number per node instead of a gradient")
    class BrokenShape(Defense):
        def local_gradients(self, grad, node):
            return grad.mean(dim=0, keepdim=True)  # [1] for [P]: PyTorch would broadcast it
"""

SCALED_MESSAGES = """
    from bench.defense.base import DEFENSES, Defense

    @DEFENSES.register("scaled", "scales its messages a little")
    class Scaled(Defense):
        def outgoing(self, payload, msg):
            return payload * 1.0001
"""


def test_a_hook_output_of_the_wrong_shape_fails_the_job_naming_the_hook(tmp_path):
    """Issue 39, item 2: ``local_gradients`` returning one number per node was broadcast
    silently and ranked first; now its job is refused with a reason that names the hook, and it
    has no score."""
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {"broken_shape": BROKEN_HOOK})
    (broken,) = [r for r in evaluate(root, tmp_path).results() if r.defense == "broken_shape"]
    assert broken.status == "failed" and not broken.privacy
    assert broken.reason.startswith("refused: ") and "local_gradients hook returned shape" in broken.reason, (
        broken.reason
    )
    assert broken.provenance.get("refused")


def test_an_attack_that_crashes_on_a_defended_run_counts_as_full_leakage(tmp_path):
    """Issue 39, item 2: an attack that crashes on a defended run (any error but the attack's own
    refusal, ``AttackError``) never improves the defended score: it counts as full leakage. On
    the baseline a crash is the attack's bug: recorded, not counted."""
    root = make_root(
        tmp_path, tiny_task([{"name": "hostile_crasher"}, ANALYTIC]), {"scaled": SCALED_MESSAGES}
    )
    results = {r.defense: r for r in evaluate(root, tmp_path).results()}
    scaled, none = results["scaled"], results["none"]
    crashed = {a.attack: a for a in scaled.attacks}["hostile_crasher"]
    assert crashed.status == "failed" and crashed.leakage == 1.0, crashed
    assert crashed.reason.startswith("counted as full leakage") and "IndexError" in crashed.reason
    assert scaled.privacy["server"] == 0.0
    baseline = {a.attack: a for a in none.attacks}["hostile_crasher"]
    assert baseline.status == "failed" and baseline.leakage is None
    assert none.privacy["server"] == pytest.approx(1.0 - none.attacks[1].leakage)


STORE_WRITER = """
    from bench.defense.base import DEFENSES, Defense

    @DEFENSES.register("store_writer", "reads its parent's arguments, then the store")
    class StoreWriter(Defense):
        def bind(self, run):
            super().bind(run)
            self.parent = open("/proc/1/cmdline", "rb").read()
            open(STORE, "ab").write(b"x")

        def outgoing(self, payload, msg):
            return payload * 1.0001
"""


def test_a_defense_can_read_neither_its_parents_arguments_nor_the_store_nor_write_it(tmp_path, capsys):
    """Issue 39, item 1: a plugin that reads its parent's command line and rewrites its own row
    in the store. It cannot name ``open`` (nor ``os``, ``io``, ``pathlib``): the plugin rules
    refuse it before it runs. (The sandbox that denied such reads and writes at run time is still
    there — ``provenance["sandbox"]`` — but no rule-abiding plugin can exercise it: the former
    test of what it denied is gone with the plugins that could try.)"""
    store = tmp_path / "out" / "results.sqlite"
    err = _refused(tmp_path, capsys, {"store_writer": STORE_WRITER.replace("STORE", repr(str(store)))})
    rule = "'open' reaches objects by name or leaves the plugin's code"
    assert f"store_writer.py:8 breaks the plugin rules: {rule}" in err, err
    assert "(and 1 more)" in err


def test_evaluate_refuses_to_run_defense_code_unsandboxed_unless_told(tmp_path, monkeypatch, capsys):
    """Issue 39, item 1: on a kernel without Landlock, ``evaluate`` stops with a clear error (exit
    2, nothing run) unless ``--unsandboxed``; where Landlock exists, that flag would change
    nothing and is refused."""
    from bench.evaluation import sandbox

    root = make_root(tmp_path, tiny_task([ANALYTIC]))
    argv = ["evaluate", "--root", str(root), "--out", str(tmp_path / "out"), "--no-progress"]
    assert main([*argv, "--unsandboxed"]) == 2
    assert "this kernel has Landlock" in capsys.readouterr().err
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "offers no Landlock" in err and "--unsandboxed" in err
    assert not (tmp_path / "out" / "results.sqlite").exists()
