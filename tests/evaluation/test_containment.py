"""The harness as a trust boundary: attacks, defenses and scoring cannot reach each other.

Each test runs ``python -m bench evaluate`` on a tiny task in a temporary benchmark root with
hostile plugins, and checks that they get nothing and change no stored score:

* attacks that walk the call stack or the garbage collector for the simulation, read
  knowledge the task declares private, or overwrite their View for the next attack
  (``tests/support/hostile_plugins.py``);
* defenses that monkeypatch the metrics, the scorer or the store from the simulation process.
"""

from __future__ import annotations

import sys

import pytest
import torch

import tests.support.hostile_plugins  # noqa: F401  (registers the hostile attacks in this process too)
from bench.cli import main
from bench.simulation import Simulation
from bench.threats import KnowledgeError, build_threat
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
    assert (
        got["hostile_mutator"].status == "failed"
        and "mutated 2 message batches" in got["hostile_mutator"].reason
    )
    analytic = got["analytic_logreg"]
    assert analytic.status == "ok" and analytic.leakage > 0.99  # it saw the original, not NaNs


HOSTILE_DEFENSE = """
    import bench.metrics.vector as vector
    import bench.evaluation.truth as truth
    import bench.leaderboard.ranking as scoring
    import bench.results.store as store
    from bench.defense.plugin import DEFENSES, Defense

    # everything a defense could patch to game its score, patched at import and at bind
    def patch():
        for name in dir(vector):
            cls = getattr(vector, name)
            if isinstance(cls, type) and hasattr(cls, "leakage"):
                cls.leakage = lambda self, values: 0.0
        scoring.privacy_score = lambda *a, **k: 1.0
        truth.Scorer.score = lambda *a, **k: None
        store.ResultStore.add = lambda self, result: True

    patch()

    @DEFENSES.register("hostile", "monkeypatches the metrics, the scorer and the store")
    class Hostile(Defense):
        def bind(self, run):
            super().bind(run)
            patch()

        def outgoing(self, msgs, ctx):
            return msgs
"""


def test_a_defense_cannot_change_how_it_is_scored(tmp_path):
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {"hostile": HOSTILE_DEFENSE})
    store = evaluate(root, tmp_path)
    results = {r.defense: r for r in store.results()}
    assert set(results) == {"none", "hostile"}  # both stored: the store was not patched here
    none, hostile = results["none"], results["hostile"]
    # the hostile defense changes nothing observable, so its scores are exactly the baseline's
    assert hostile.status == "ok"
    assert hostile.privacy == none.privacy and none.privacy["server"] < 0.01
    assert [a.leakage for a in hostile.attacks] == [a.leakage for a in none.attacks]
    assert hostile.utility == none.utility
    # and the parent never imported the plugin
    assert "bench_defense_plugins.hostile" not in sys.modules


def test_defense_code_runs_only_in_the_simulation_process(tmp_path):
    """The plugin runs in the probe and in the simulation process, never in the scorer's. The
    simulation process is sandboxed (bench.evaluation.sandbox): its attempt to write the marker file
    fails, so it reports its process id through its accounting instead."""
    marker = tmp_path / "pids.txt"
    source = f"""
        import os
        from bench.defense.plugin import DEFENSES, Defense

        try:
            with open({str(marker)!r}, "a") as f:
                f.write(str(os.getpid()) + "\\n")
        except PermissionError:
            pass  # the sandboxed simulation process

        @DEFENSES.register("spy", "records the process it runs in")
        class Spy(Defense):
            def outgoing(self, msgs, ctx):
                return msgs.with_payload(msgs.payload * 1.0001)

            def accounting(self):
                return {{"pid": os.getpid()}}
    """
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {"spy": source})
    store = evaluate(root, tmp_path)
    (probe,) = {int(p) for p in marker.read_text().split()}  # the simulation could not write
    (spy,) = [r for r in store.results() if r.defense == "spy"]
    simulation = int(spy.accounting["pid"])
    import os

    assert os.getpid() not in (probe, simulation) and probe != simulation
    assert spy.provenance["sandbox"].startswith("landlock")


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
    from bench.defense.plugin import DEFENSES, Defense

    @DEFENSES.register("broken_shape", "returns one number per node instead of a gradient")
    class BrokenShape(Defense):
        def local_gradients(self, grads, ctx):
            return grads.mean(dim=1, keepdim=True)  # [n, 1]: PyTorch would broadcast it
"""

SCALED_MESSAGES = """
    from bench.defense.plugin import DEFENSES, Defense

    @DEFENSES.register("scaled", "scales its messages a little")
    class Scaled(Defense):
        def outgoing(self, msgs, ctx):
            return msgs.with_payload(msgs.payload * 1.0001)
"""


def test_a_hook_output_of_the_wrong_shape_fails_the_job_naming_the_hook(tmp_path):
    """Issue 39, item 2: ``local_gradients`` returning ``[n, 1]`` was broadcast silently and
    ranked first; now its job fails with a reason that names the hook, and it has no score."""
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {"broken_shape": BROKEN_HOOK})
    (broken,) = [r for r in evaluate(root, tmp_path).results() if r.defense == "broken_shape"]
    assert broken.status == "failed" and not broken.privacy
    assert "local_gradients hook returned shape" in broken.reason, broken.reason


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


def test_a_defense_can_read_neither_its_parents_arguments_nor_the_store_nor_write_it(tmp_path):
    """Issue 39, item 1: a plugin that reads ``--store`` from its parent's command line and
    rewrites its own row. In the sandbox it can read no other process's ``/proc`` folder and
    neither read nor write the store or the spool; it reports what it tried through its
    accounting (the one channel it has to the parent)."""
    out = tmp_path / "out"
    source = f"""
        import os
        from bench.defense.plugin import DEFENSES, Defense

        def attempt(path, mode):
            try:
                with open(path, mode) as f:
                    f.read(1) if "r" in mode else f.write("x")
                return "allowed"
            except OSError as exc:
                return type(exc).__name__

        @DEFENSES.register("store_writer", "reads its parent's arguments, then the store")
        class StoreWriter(Defense):
            def bind(self, run):
                super().bind(run)
                ppid = os.getppid()
                self.tried = {{
                    "parent_cmdline": attempt(f"/proc/{{ppid}}/cmdline", "rb"),
                    "init_cmdline": attempt("/proc/1/cmdline", "rb"),
                    "own_status": attempt("/proc/self/status", "rb"),
                    "store_read": attempt({str(out / "results.sqlite")!r}, "rb"),
                    "store_write": attempt({str(out / "results.sqlite")!r}, "ab"),
                    "spool_write": attempt({str(out / "spool" / "forged.json")!r}, "w"),
                }}

            def outgoing(self, msgs, ctx):
                return msgs.with_payload(msgs.payload * 1.0001)

            def accounting(self):
                return self.tried
    """
    root = make_root(tmp_path, tiny_task([ANALYTIC]), {"store_writer": source})
    store = evaluate(root, tmp_path)
    (row,) = [r for r in store.results() if r.defense == "store_writer"]
    tried = row.accounting
    assert tried["own_status"] == "allowed", tried  # the sandbox still lets it read its own /proc
    for what in ("parent_cmdline", "init_cmdline", "store_read", "store_write", "spool_write"):
        assert tried[what] in ("PermissionError", "FileNotFoundError"), (what, tried)
    assert tried["store_read"] == "PermissionError" and tried["parent_cmdline"] == "PermissionError"
    assert row.provenance["sandbox"].startswith("landlock")


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
