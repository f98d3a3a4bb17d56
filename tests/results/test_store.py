"""The results store: round trip, no duplicates, bad URLs, resume after a hard kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from sqlalchemy import create_engine, func, select, text

from bench.core.errors import BenchInputError
from bench.leaderboard.convert import hardware_of
from bench.results import provenance as prov
from bench.results.store import AttackRow, JobRow, ResultStore
from tests.support.bench_root import REPO
from tests.support.result_samples import make_result


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    return ResultStore(f"sqlite:///{tmp_path / 'results.sqlite'}")


def test_round_trip(store: ResultStore) -> None:
    inputs = [
        make_result("k1", seed=0),
        make_result("k2", seed=1, failed=True),
        make_result("k3", task="t2", seed=2),
    ]
    for r in inputs:
        assert store.add(r) is True
    assert store.results() == inputs
    assert store.results(task="t2") == [inputs[2]]
    assert store.results(task="nope") == []
    assert store.count() == 3
    # attack order, statuses and reasons survive
    got = store.results()[0]
    assert [a.attack for a in got.attacks] == ["inversion", "mia", "mia"]
    assert got.attacks[1].status == "failed" and got.attacks[1].leakage is None


def test_duplicate_key_not_written(store: ResultStore) -> None:
    assert store.add(make_result("dup"))
    other = make_result("dup", seed=7)
    assert store.add(other) is False
    assert store.count() == 1
    assert store.results()[0].seed == 0
    with store.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(AttackRow)) == 3


def test_finished_keys_and_delete_failed(store: ResultStore) -> None:
    store.add(make_result("a"))
    store.add(make_result("b", failed=True))
    store.add(make_result("c", failed=True))
    assert store.finished_keys() == {"a", "b", "c"}
    assert store.delete_failed() == 2
    assert store.finished_keys() == {"a"}
    assert store.count() == 1
    with store.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(AttackRow)) == 3
    # a retried job can be stored again
    assert store.add(make_result("b"))
    assert store.finished_keys() == {"a", "b"}


def test_sqlite_uses_wal(store: ResultStore) -> None:
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() > 0


def test_plain_path_is_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = ResultStore("runs/results.sqlite")  # parent folder created
    assert s.add(make_result("x"))
    assert (tmp_path / "runs" / "results.sqlite").is_file()
    assert s.url.startswith("sqlite:///") and s.url.endswith("runs/results.sqlite")
    s.close()
    assert ResultStore(str(tmp_path / "runs" / "results.sqlite")).results() == [make_result("x")]


def test_in_memory_sqlite() -> None:
    s = ResultStore("sqlite://")
    assert s.add(make_result("m"))
    assert s.count() == 1


@pytest.mark.parametrize(
    "url",
    [
        "foo://x",
        "sqlite:////nonexistent/dir/x.sqlite",
        "/nonexistent/dir/x.sqlite",
        "postgresql://user@host:notaport/db",
        "",
    ],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(BenchInputError) as info:
        ResultStore(url)
    assert info.value.field == "--store"
    assert "--store" in str(info.value)


def test_unusable_paths(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(BenchInputError, match="--store"):
        ResultStore(str(blocker / "x.sqlite"))  # parent is a file
    with pytest.raises(BenchInputError, match="--store"):
        ResultStore(f"sqlite:///{blocker}/x.sqlite")
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a sqlite database at all" * 100)
    with pytest.raises(BenchInputError, match="cannot open"):
        ResultStore(str(garbage))
    with pytest.raises(BenchInputError, match="directory"):
        ResultStore(str(tmp_path))


WRITER = textwrap.dedent(
    """
    import sys, time
    from sqlalchemy import event
    from bench.results.record import AttackOutcome, JobResult
    from bench.results.store import AttackRow, ResultStore

    url, total, delay, in_txn = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    if in_txn:
        # slow down each attack row's insert, inside the job's transaction, so that the kill
        # is likely to land in the middle of a job (job row written, attack rows not yet)
        event.listen(AttackRow, "before_insert", lambda *args: time.sleep(in_txn))
    store = ResultStore(url)
    done = store.finished_keys()
    for i in range(total):
        key = f"job-{i:03d}"
        if key in done:
            continue
        attacks = [
            AttackOutcome("server", f"attack{j}", "ok", {"m.v": j / 10}, j / 10, None, 0.0) for j in range(4)
        ]
        store.add(JobResult(key=key, task="t", defense="none", defense_name="none", defense_params={},
                            seed=i, status="ok", utility=0.9, attacks=attacks,
                            privacy={"server": 1 - 0.3}))
        time.sleep(delay)
    """
)
ATTACKS_PER_JOB = 4
TOTAL = 50


def _writer(url: str, delay: float, in_txn: float) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, url, str(TOTAL), str(delay), str(in_txn)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_kill_and_resume(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kill.sqlite'}"
    reader = ResultStore(url)
    proc = _writer(url, 0.04, 0.04)  # one job per ~0.2 s, ~80 % of it inside a transaction
    try:
        deadline = time.monotonic() + 60
        while reader.count() < 3:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "writer too slow"
            time.sleep(0.05)
        time.sleep(0.07)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    reader.close()

    # the database opens and is consistent: every job complete, no duplicates
    store = ResultStore(url)
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
        n_jobs = conn.scalar(select(func.count()).select_from(JobRow))
        n_keys = conn.scalar(select(func.count(func.distinct(JobRow.key))))
        per_job = {
            job_id: n
            for job_id, n in conn.execute(select(AttackRow.job_id, func.count()).group_by(AttackRow.job_id))
        }
        job_ids = set(conn.scalars(select(JobRow.id)))
    engine.dispose()
    assert 3 <= n_jobs < TOTAL
    assert n_keys == n_jobs
    assert set(per_job) == job_ids
    assert all(c == ATTACKS_PER_JOB for c in per_job.values())
    before = store.finished_keys()
    assert len(before) == n_jobs
    store.close()

    # resume: skips finished keys, completes to exactly TOTAL
    second = _writer(url, 0.0, 0.0)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err.decode()
    store = ResultStore(url)
    assert store.count() == TOTAL
    results = store.results()
    assert sorted(r.key for r in results) == [f"job-{i:03d}" for i in range(TOTAL)]
    assert all(len(r.attacks) == ATTACKS_PER_JOB for r in results)


def test_spec_hash_canonical() -> None:
    a = {"b": [1, 2, {"z": 1, "y": 2}], "a": "x"}
    b = {"a": "x", "b": [1, 2, {"y": 2, "z": 1}]}
    assert prov.spec_hash(a) == prov.spec_hash(b)
    assert len(prov.spec_hash(a)) == 16
    assert prov.spec_hash(a) != prov.spec_hash({**a, "a": "y"})
    import hashlib

    expected = hashlib.sha256(b'{"a":"x","b":[1,2,{"y":2,"z":1}]}').hexdigest()[:16]
    assert prov.spec_hash(a) == expected


def test_provenance_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prov, "git_state", lambda root=prov.REPO_ROOT: {"commit": "deadbeef", "dirty": True})
    p = prov.provenance("0123456789abcdef", 3, "cpu")
    assert p["commit"] == "deadbeef" and p["dirty"] is True
    assert p["spec_hash"] == "0123456789abcdef" and p["seed"] == 3 and p["device"] == "cpu"
    assert {"bench", "torch", "pytorch_lightning", "torchmetrics", "numpy", "opacus", "python"} <= set(
        p["packages"]
    )
    assert p["packages"]["numpy"] is not None
    assert p["timestamp"].endswith("+00:00")
    assert p["platform"]
    # the hardware an entry shows: CPU model, logical CPUs, intra-op threads, the torch build
    assert p["cpu"] and p["cpus"] == (os.cpu_count() or 0) and p["threads"] == torch.get_num_threads()
    assert p["torch_build"] == torch.__version__
    assert p["isa"] == torch.backends.cpu.get_cpu_capability()
    shown = hardware_of(p)
    assert shown == {
        "device": "cpu",
        "machine": p["machine"],
        "cpu": p["cpu"],
        "cpus": str(p["cpus"]),
        "threads": str(p["threads"]),
        "isa": p["isa"],
        "torch": torch.__version__,
    }
    # a result stored before these fields existed shows what it has, nothing invented
    old = {k: v for k, v in p.items() if k not in ("cpu", "cpus", "threads", "isa", "torch_build")}
    assert set(hardware_of(old)) == {"device", "machine"}


def test_git_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # no real git call: git_output is replaced by a fake answering for a repository at tmp_path
    answers = {"rev-parse --show-toplevel": str(tmp_path), "rev-parse HEAD": "c0ffee", "status": " M x.py"}

    def fake_git(*args: str, cwd: Path) -> str | None:
        return next((v for k, v in answers.items() if " ".join(args).startswith(k)), None)

    monkeypatch.setattr(prov, "git_output", fake_git)
    assert prov.git_state(tmp_path) == {"commit": "c0ffee", "dirty": True}
    answers["status"] = ""
    assert prov.git_state(tmp_path) == {"commit": "c0ffee", "dirty": False}
    # installed inside some other repository: its commit is not ours
    other = tmp_path / "site-packages"
    other.mkdir()
    assert prov.git_state(other) == {"commit": "unknown", "dirty": None}
    monkeypatch.setattr(prov, "git_output", lambda *a, cwd: None)  # git missing
    assert prov.git_state(tmp_path) == {"commit": "unknown", "dirty": None}


def test_an_untracked_file_makes_the_checkout_dirty(tmp_path: Path) -> None:
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "a")
    assert prov.git_state(tmp_path)["dirty"] is False
    (tmp_path / "defense_not_yet_added.py").write_text("y = 2\n")  # e.g. a new defense plugin
    assert prov.git_state(tmp_path)["dirty"] is True


def test_changes_in_an_ignored_folder_do_not_make_the_checkout_dirty(tmp_path: Path) -> None:
    """What ``leaderboard export`` replaces (its entries folder) does not count against it."""
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (tmp_path / "entries").mkdir()
    (tmp_path / "entries" / "a.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-qm", "c")
    (tmp_path / "entries" / "a.json").unlink()
    assert prov.git_state(tmp_path)["dirty"] is True
    assert prov.git_state(tmp_path, ignore=tmp_path / "entries")["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert prov.git_state(tmp_path, ignore=tmp_path / "entries")["dirty"] is True
