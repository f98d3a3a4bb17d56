"""Processes of the trust boundary (bench/evaluation/isolation.py): one-shot children and keyed
workers answer with plain data only; errors cross as input errors or one-line failures; a
hostile child cannot make the parent run code; workers are reused for their key only."""

from __future__ import annotations

import os

import pytest

from bench.core.errors import BenchInputError
from bench.evaluation import isolation
from tests.support import isolation_targets as targets


def test_a_child_answers_with_plain_data():
    out = isolation.call(targets.echo, {"x": [1, 2.5, "a"]})
    assert out["request"] == {"x": [1, 2.5, "a"]} and out["pid"] != os.getpid()


def test_errors_cross_the_boundary():
    with pytest.raises(BenchInputError) as err:
        isolation.call(targets.bad_input, {})
    assert err.value.field == "defense.sigma" and err.value.value == -1.0
    with pytest.raises(isolation.ChildFailed, match="ZeroDivisionError: boom"):
        isolation.call(targets.crash, {}, label="simulation")
    with pytest.raises(isolation.ChildFailed, match="the simulation process exited with code 3"):
        isolation.call(targets.die, {}, label="simulation")
    with pytest.raises(isolation.ChildFailed, match="not plain data"):
        isolation.call(targets.not_plain, {})


def test_a_hostile_child_cannot_make_the_parent_run_code(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(isolation.ChildFailed, match="unreadable answer"):
        isolation.call(targets.hostile_answer, {"marker": str(marker)})
    assert not marker.exists()


def test_workers_are_reused_for_their_key_only():
    pool = isolation.WorkerPool(max_idle=2)
    try:
        a1 = pool.call("a", targets.echo, 1)["pid"]
        a2 = pool.call("a", targets.echo, 2)["pid"]
        b1 = pool.call("b", targets.echo, 3)["pid"]
        assert a1 == a2 != b1 != os.getpid()
        with pytest.raises(BenchInputError):  # an input error leaves the worker usable
            pool.call("a", targets.bad_input, {})
        assert pool.call("a", targets.echo, 4)["pid"] == a1
        with pytest.raises(isolation.ChildFailed, match="exited with code 3"):  # a dead worker ...
            pool.call("a", targets.die, {})
        assert pool.call("a", targets.echo, 5)["pid"] not in (a1, b1)  # ... is replaced
        pool.call("c", targets.echo, 6)  # a third key evicts the least recently used worker
        assert pool.call("b", targets.echo, 7)["pid"] != b1
    finally:
        pool.close()


def test_the_fork_servers_warm_up_runs():
    """The warm-up swallows its errors (it must never stop the server), so check it works."""
    from bench.evaluation import warm

    warm._warm()


def test_a_child_can_ask_the_parent_mid_request():
    """Queries go through ``relay`` as bytes both ways; a relay's failure is the query's, not the
    request's; without a relay every query fails."""
    from bench.core.wire import dumps, loads

    def relay(data: bytes) -> bytes:
        q = loads(data)
        if q.get("fail"):
            raise ValueError("no")
        return dumps({"ok": q["n"] * 10})

    want = [10, 20, "failed: ValueError: no"]
    assert isolation.call(targets.ask_twice, {"ns": [1, 2]}, relay=relay) == want
    pool = isolation.WorkerPool()
    try:
        assert pool.call("k", targets.ask_twice, {"ns": [1, 2]}, relay=relay) == want
        alone = pool.call("k", targets.ask_twice, {"ns": []})
        assert alone == ["failed: this request has no relay for queries"]
    finally:
        pool.close()


def test_a_sandboxed_childs_scratch_folder_ends_with_it():
    """What a sandboxed child wrote into its private scratch folder is removed by the parent
    once the child has ended: a one-shot child and a long-lived worker alike."""
    one_shot = isolation.call(targets.sandboxed_scratch, None)
    assert os.path.basename(one_shot["scratch"]).startswith(f"bench-{one_shot['pid']}-test-")
    assert not os.path.exists(one_shot["scratch"])
    worker = isolation.Worker(1)
    answer = worker.request(targets.sandboxed_scratch, None, "test")
    assert os.path.exists(os.path.join(answer["scratch"], "left-behind"))  # alive: still there
    worker.close()
    assert not os.path.exists(answer["scratch"])


def test_scratch_folders_of_processes_that_ended_unseen_are_swept(tmp_path, monkeypatch):
    """A worker that ended without its parent seeing it (a Ray worker that Ray ended) leaves its
    scratch folder; the next sweep removes it and leaves the folders of running processes and
    folders that are not scratch folders alone."""
    import subprocess
    import sys
    import tempfile

    from bench.evaluation import sandbox

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    dead = int(ended.stdout)
    gone = tmp_path / f"bench-{dead}-simulation-abc"
    (gone / "sub").mkdir(parents=True)
    (gone / "sub" / "left").write_text("x")
    alive = tmp_path / f"bench-{os.getpid()}-oracle-def"
    other = tmp_path / "bench-budget-xyz"
    alive.mkdir()
    other.mkdir()
    assert sandbox.sweep_scratch() == 1
    assert not gone.exists() and alive.exists() and other.exists()
