"""`evaluate` when the store misbehaves: a locked store loses no result, no password is ever
written, failed jobs can be retried and say why they failed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine

import bench.results.store as store_module
from bench.results import spool
from bench.results.spool import spool_dir
from bench.results.store import ResultStore, RetryPolicy
from tests.support.bench_root import TINY_LOGREG as LOGREG_TASK
from tests.support.bench_root import diverging_task, make_root
from tests.support.bench_root import run_evaluate as evaluate

PASSWORD = "pw-5f3a9c"


def logreg_root(tmp_path: Path, seeds: int = 1) -> Path:
    """A root with the tiny logistic-regression task, run over ``seeds`` seeds, and every defense."""
    suites = {"quick": {"tasks": ["tiny_logreg"], "seeds": seeds}}
    return make_root(tmp_path, [LOGREG_TASK], suites, defenses=None)


def test_a_locked_store_keeps_the_result_and_the_next_run_stores_it(tmp_path, capsys, monkeypatch):
    root = logreg_root(tmp_path)
    db = tmp_path / "out" / "results.sqlite"
    ResultStore(str(db)).close()
    delays: list[float] = []
    monkeypatch.setattr(store_module, "DEFAULT_RETRY", RetryPolicy((0.0, 0.0), delays.append))
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.01)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another program holds the store's write lock
    try:
        assert evaluate(root, tmp_path) == 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err
    spooled = list(spool_dir(tmp_path / "out").glob("*.json"))
    assert len(spooled) == 1 and delays == [0.0, 0.0]
    assert "Traceback" not in err and "sqlalchemy" not in err.lower()
    assert err.startswith("error: the results store ('--store': 'sqlite:///") and err.count("\n") == 1
    assert "after 3 attempts" in err and "database is locked" in err and str(spooled[0]) in err
    assert ResultStore(str(db)).count() == 0

    assert evaluate(root, tmp_path) == 0
    out = capsys.readouterr().out
    assert f"stored 1 result(s) that an earlier run kept in {spool_dir(tmp_path / 'out')}" in out
    assert "0 jobs run, 1 already in the store" in out  # the job is not run again
    assert list(spool_dir(tmp_path / "out").iterdir()) == []
    [result] = ResultStore(str(db)).results()
    assert result.key == spooled[0].stem and result.status == "ok"


def test_a_forged_spool_file_is_not_the_baseline_and_its_job_runs(tmp_path, capsys):
    """Issue 39 item 3: the undefended baseline's result, written by hand into the spool with
    privacy 1.0, used to be stored as is and shown; it is moved aside with a warning now, and the
    job runs."""
    root = logreg_root(tmp_path)
    assert evaluate(root, tmp_path / "first") == 0
    [real] = ResultStore(str(tmp_path / "first" / "out" / "results.sqlite")).results()
    forged = real.to_dict() | {"privacy": dict.fromkeys(real.privacy, 1.0)}
    assert real.defense == "none" and real.privacy and forged["privacy"] != real.privacy
    payload = {"format": spool.FORMAT, "version": spool.VERSION, "spooled_at": "2025-01-01T00:00:00+00:00"}
    path = spool_dir(tmp_path / "out") / f"{real.key}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(payload | {"store_error": "", "result": forged}, indent=1, sort_keys=True))
    capsys.readouterr()
    assert evaluate(root, tmp_path) == 0
    captured = capsys.readouterr()
    assert f"warning: {path} was not stored" in captured.err and "no authentication tag" in captured.err
    assert "1 jobs run, 0 already in the store" in captured.out
    [result] = ResultStore(str(tmp_path / "out" / "results.sqlite")).results()
    assert result.key == real.key and result.privacy != forged["privacy"]


def test_with_jobs_running_at_once_no_finished_result_is_lost(tmp_path, capsys, monkeypatch):
    """``--jobs 2``: when the store fails, the results of jobs still running are kept as they
    finish and no new job starts; the next run stores what was kept and runs only the rest."""
    root = logreg_root(tmp_path, seeds=3)
    db = tmp_path / "out" / "results.sqlite"
    ResultStore(str(db)).close()
    monkeypatch.setattr(store_module, "DEFAULT_RETRY", RetryPolicy((0.0,), lambda s: None))
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.01)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert evaluate(root, tmp_path, "--jobs", "2") == 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err
    kept = sorted(spool_dir(tmp_path / "out").glob("*.json"))
    assert 1 <= len(kept) <= 3
    assert (f"{len(kept)} files in {kept[0].parent}" if len(kept) > 1 else str(kept[0])) in err
    assert ResultStore(str(db)).count() == 0

    assert evaluate(root, tmp_path) == 0
    out = capsys.readouterr().out
    assert f"stored {len(kept)} result(s)" in out
    assert f"{3 - len(kept)} jobs run, {len(kept)} already in the store" in out
    results = ResultStore(str(db)).results()
    assert sorted(r.seed for r in results) == [0, 1, 2]
    assert {p.stem for p in kept} <= {r.key for r in results}


def test_the_store_password_is_never_written(tmp_path, capsys, monkeypatch):
    root = logreg_root(tmp_path)
    for url, expected in (
        (f"postgresql://bench:{PASSWORD}@127.0.0.1:1/bench", "'postgresql://bench:***@127.0.0.1:1/bench'"),
        (f"postgresql://bench:{PASSWORD}@db:port/bench", "malformed database URL"),
        (f"nosuchdialect://bench:{PASSWORD}@db/bench", "Valid choices: mariadb"),
    ):
        assert evaluate(root, tmp_path, "--store", url) == 2
        captured = capsys.readouterr()
        assert PASSWORD not in captured.out + captured.err
        assert "'--store'" in captured.err and expected in captured.err and "Traceback" not in captured.err

    # a server database that works (here: a SQLite file standing in for it)
    real = tmp_path / "server.sqlite"
    monkeypatch.setattr(
        store_module, "create_engine", lambda u, **kw: create_engine(f"sqlite:///{real}", **kw)
    )
    assert evaluate(root, tmp_path, "--store", f"postgresql://bench:{PASSWORD}@db.example/bench") == 0
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err
    # psycopg 3 is the driver of a plain postgresql:// URL
    assert "store: postgresql+psycopg://bench:***@db.example/bench" in captured.out
    page = (tmp_path / "site" / "index.html").read_text()
    assert "db.example" not in page  # the page names no store at all
    for path in [*(tmp_path / "out").rglob("*"), *(tmp_path / "site").rglob("*"), real]:
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


def test_another_applications_database_is_refused_untouched(tmp_path, capsys):
    root = logreg_root(tmp_path)
    app = tmp_path / "app.db"
    with sqlite3.connect(app) as con:
        con.execute("create table invoices (id integer primary key, total real)")
    before = app.read_bytes()
    assert evaluate(root, tmp_path, "--store", str(app)) == 2
    err = capsys.readouterr().err
    assert f"'--store': '{app}'" in err and "not a bench results store" in err and "(invoices)" in err
    assert app.read_bytes() == before and not (tmp_path / "app.db-wal").exists()


def test_retry_failed_reruns_the_selected_failed_jobs_and_the_reason_shows(tmp_path, capsys):
    root = make_root(
        tmp_path,
        [LOGREG_TASK, diverging_task("diverging"), diverging_task("diverging2")],
        {"quick": {"tasks": ["diverging", "diverging2", "tiny_logreg"], "seeds": 1}},
        defenses=None,
    )
    assert evaluate(root, tmp_path) == 0
    out = capsys.readouterr().out
    assert "2 failed" in out
    # a table continues in blocks (blank line between): its text runs to the next track's header
    diverging_table = out[out.index("== diverging/") :].split("\n== ")[0]
    assert "last failure" in diverging_table and "diverged" in diverging_table
    logreg_table = out[out.index("== tiny_logreg/server") :].split("\n== ")[0]
    assert "last failure" not in logreg_table  # no job of that track failed
    page = (tmp_path / "site" / "index.html").read_text()
    assert '<span class="note reason">' in page and 'title="last failure: ' in page
    store = ResultStore(str(tmp_path / "out" / "results.sqlite"))
    before = {r.task: r.provenance["timestamp"] for r in store.results()}

    assert evaluate(root, tmp_path, "--retry-failed", "--task", "diverging") == 0
    out = capsys.readouterr().out
    assert "--retry-failed: 1 failed jobs will run again" in out
    assert "1 jobs run, 0 already in the store, 1 failed" in out
    after = {r.task: r.provenance["timestamp"] for r in store.results()}
    assert after["diverging"] != before["diverging"]  # run again
    assert after["diverging2"] == before["diverging2"] and after["tiny_logreg"] == before["tiny_logreg"]
    assert store.count() == 3

    assert evaluate(root, tmp_path) == 0  # without the flag, failed jobs stay finished
    assert "0 jobs run, 3 already in the store" in capsys.readouterr().out


@pytest.mark.parametrize("flag", [[], ["--retry-failed"]])
def test_retry_failed_with_nothing_failed(tmp_path, capsys, flag):
    root = logreg_root(tmp_path)
    assert evaluate(root, tmp_path) == 0
    capsys.readouterr()
    assert evaluate(root, tmp_path, *flag) == 0
    out = capsys.readouterr().out
    assert "0 jobs run, 1 already in the store" in out
    assert ("--retry-failed: 0 failed jobs will run again" in out) == bool(flag)
    assert "last failure" not in out
