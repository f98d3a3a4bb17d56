"""The store's reliability: no password in any message, only bench's databases, write retries,
the spool that keeps a result the store did not accept, scoped deletion of failed jobs."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.exc import OperationalError, ProgrammingError

import bench.results.spool as spool_module
import bench.results.store as store_module
from bench.core.errors import BenchInputError
from bench.evaluation import isolation, sandbox
from bench.results.record import AttackOutcome, JobResult
from bench.results.schema import SCHEMA_VERSION, AttackRow, JobRow
from bench.results.spool import (
    ResultKeeper,
    UnauthenticSpoolFile,
    import_spooled,
    read_spool,
    spool_dir,
    write_spool,
)
from bench.results.store import ResultStore, RetryPolicy, StoreWriteError
from bench.results.store_url import MASK, redact
from tests.support import isolation_targets as targets
from tests.support.result_samples import make_result

SECRET = "secret"


# -- passwords ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://u:secret@db.example:5432/bench", "postgresql://u:***@db.example:5432/bench"),
        ("postgresql+psycopg://:secret@db/bench", "postgresql+psycopg://:***@db/bench"),
        ("mysql://u:top@secret/x@db/bench", "mysql://u:***@db/bench"),  # unencoded '@' and '/'
        ("postgresql://u:sec%72et@db/bench", "postgresql://u:***@db/bench"),  # percent-encoded
        ("postgresql://db/bench?user=u&password=secret&sslmode=require", "password=***&sslmode=require"),
        ("could not connect to postgresql://u:secret@db/x: refused", "to postgresql://u:***@db/x: refused"),
    ],
)
def test_redact_hides_passwords_in_urls_and_messages(text: str, shown: str) -> None:
    out = redact(text, text)
    assert SECRET not in out and "sec%72et" not in out
    assert shown in out


def test_redact_keeps_urls_without_secrets_and_hides_a_repeated_password() -> None:
    for url in ("sqlite:////tmp/runs/results.sqlite", "postgresql://u@db:5432/bench", "runs/x.sqlite"):
        assert redact(url, url) == url
    url = "postgresql://u:hunter22@db/bench"
    assert redact("password 'hunter22' rejected", url) == f"password '{MASK}' rejected"


def test_a_password_with_spaces_quotes_and_at_signs_is_masked_whole() -> None:
    """Issue 39 item 9: a space or a quote ends a URL in free text, but the --store value is one
    URL: its whole password is hidden (it used to show ``alice:***@ss w"rd<x>@…``)."""
    url = 'postgresql://alice:p@ss w"rd<x>@db.example:5432/bench'
    for message in (url, f"cannot connect to {url} (password 'p@ss w\"rd<x>')"):
        shown = redact(message, url)
        assert "ss w" not in shown and "rd<x>" not in shown and "alice:***@db.example:5432/bench" in shown


@pytest.fixture
def connect_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every engine's connection fails like an unreachable server whose driver repeats the URL."""

    def refuse() -> sqlite3.Connection:
        raise sqlite3.OperationalError(
            "connection to postgresql://u:secret@127.0.0.1:1/db failed: Connection refused (password secret)"
        )

    monkeypatch.setattr(
        store_module, "create_engine", lambda url, **kw: create_engine("sqlite://", creator=refuse)
    )


BAD_URLS = [
    "postgresql://u:secret@host:notaport/db",  # malformed
    "nosuchdialect://u:secret@host/db",  # unknown dialect
    "postgresql+nosuchdriver://u:secret@host/db",  # unknown driver
    "postgresql://u:secret@127.0.0.1:1/db",  # driver missing here, or nothing listening
    "postgresql://db.example/bench?password=secret&port=x",
    "sqlite://u:secret@/nonexistent/dir/x.sqlite",  # bad SQLite path
    "sqlite://u:secret@//tmp/x.sqlite",  # SQLite takes no password
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_no_store_error_shows_the_password(url: str) -> None:
    with pytest.raises(BenchInputError) as info:
        ResultStore(url)
    message = info.value.message
    assert SECRET not in message and SECRET not in str(info.value)
    assert "'--store'" in message and MASK in message
    assert info.value.__cause__ is None  # no chained driver error (it may repeat the URL)


def test_unreachable_database_error_is_redacted(connect_refused: None) -> None:
    with pytest.raises(BenchInputError) as info:
        ResultStore("postgresql://u:secret@127.0.0.1:1/db")
    message = info.value.message
    assert SECRET not in message
    assert "'postgresql://u:***@127.0.0.1:1/db'" in message and "Connection refused" in message


def test_unreachable_postgres_with_a_real_driver() -> None:
    # pg8000 (pure Python) is in the dev extra so that this runs everywhere
    with pytest.raises(BenchInputError) as info:
        ResultStore("postgresql+pg8000://u:secret@127.0.0.1:1/db")
    assert SECRET not in info.value.message and "cannot open the database" in info.value.message


def test_unknown_dialect_lists_the_dialects() -> None:
    with pytest.raises(BenchInputError) as info:
        ResultStore("nosuchdialect://u:secret@host/db")
    assert "Valid choices: mariadb, mssql, mysql, oracle, postgresql, sqlite" in info.value.message


@pytest.mark.filterwarnings("ignore:Query string argument")
def test_store_url_hides_secret_query_values(tmp_path: Path) -> None:
    store = ResultStore(f"sqlite:///{tmp_path / 'r.sqlite'}?password=pw-4711")  # the driver ignores it
    assert "4711" not in store.url and "4711" not in repr(store)
    assert store.url.endswith("r.sqlite?password=***")


# -- only bench's databases -----------------------------------------------------------------


def _tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as con:
        return sorted(r[0] for r in con.execute("select name from sqlite_master where type='table'"))


def _journal_mode(path: Path) -> str:
    with sqlite3.connect(path) as con:
        return con.execute("PRAGMA journal_mode").fetchone()[0]


@pytest.mark.parametrize("kind", ["new", "empty"])
def test_new_and_empty_files_become_marked_stores(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "r.sqlite"
    if kind == "empty":
        path.write_bytes(b"")
    store = ResultStore(str(path))
    assert store.add(make_result("a"))
    store.close()
    assert _tables(path) == ["attack_results", "bench_meta", "jobs"]
    with sqlite3.connect(path) as con:
        assert con.execute("select value from bench_meta where key='schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
    assert ResultStore(str(path)).results() == [make_result("a")]  # a marked store opens again


def test_foreign_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as con:
        con.execute("create table users (id integer primary key, name text)")
        con.execute("create table jobs (id integer primary key, cron text)")  # a name bench also uses
        con.execute("insert into users (name) values ('ada')")
    before = path.read_bytes()
    with pytest.raises(BenchInputError) as info:
        ResultStore(f"sqlite:///{path}")
    message = info.value.message
    assert "'--store'" in message and str(path) in message
    assert "not a bench results store" in message and "jobs, users" in message
    assert _tables(path) == ["jobs", "users"]
    assert _journal_mode(path) != "wal"
    assert path.read_bytes() == before
    assert not Path(f"{path}-wal").exists()


def test_store_of_the_previous_release_opens_and_gets_the_marker(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    engine = create_engine(f"sqlite:///{path}")
    JobRow.metadata.create_all(engine, tables=[JobRow.__table__, AttackRow.__table__])  # no bench_meta
    engine.dispose()
    assert _tables(path) == ["attack_results", "jobs"]
    old = ResultStore(str(path))
    assert old.add(make_result("x"))
    old.close()
    assert "bench_meta" in _tables(path)
    assert ResultStore(str(path)).results() == [make_result("x")]


def test_a_jobs_table_with_other_columns_is_not_an_old_store(tmp_path: Path) -> None:
    path = tmp_path / "lookalike.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("create table jobs (id integer primary key, cron text)")
        con.execute("create table attack_results (id integer primary key)")
    with pytest.raises(BenchInputError, match="not a bench results store"):
        ResultStore(str(path))
    assert _tables(path) == ["attack_results", "jobs"]


def test_a_store_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    ResultStore(str(path)).close()
    with sqlite3.connect(path) as con:
        con.execute(
            "update bench_meta set value = ? where key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    with pytest.raises(BenchInputError, match="newer bench"):
        ResultStore(str(path))


def test_a_file_that_is_not_a_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before = path.read_bytes()
    with pytest.raises(BenchInputError) as info:
        ResultStore(str(path))
    assert "cannot open the database" in info.value.message and "not a database" in info.value.message
    assert path.read_bytes() == before


# -- write retries ----------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _store(path: Path, delays: tuple[float, ...] = (0.5, 1.0, 2.0)) -> tuple[ResultStore, Recorder]:
    sleep = Recorder()
    return ResultStore(str(path), retry=RetryPolicy(delays, sleep), busy_timeout_s=0.01), sleep


def _fail_inserts(store: ResultStore, times: int, error: str = "database or disk is full") -> list[str]:
    """Make the next ``times`` inserts of a job fail inside the driver; returns the attempts log."""
    log: list[str] = []

    def do_execute(cursor, statement, parameters, context):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("INSERT INTO JOBS"):
            log.append(statement)
            if len(log) <= times:
                raise sqlite3.OperationalError(error)

    event.listen(store.engine.dialect, "do_execute", do_execute)
    return log


def test_a_transient_write_error_is_retried_with_backoff(tmp_path: Path) -> None:
    store, sleep = _store(tmp_path / "r.sqlite")
    log = _fail_inserts(store, times=2)
    assert store.add(make_result("a")) is True
    assert len(log) == 3 and sleep.delays == [0.5, 1.0]
    assert store.results() == [make_result("a")]


def test_a_write_that_keeps_failing_is_one_clear_error(tmp_path: Path) -> None:
    store, sleep = _store(tmp_path / "r.sqlite")
    log = _fail_inserts(store, times=99)
    with pytest.raises(StoreWriteError) as info:
        store.add(make_result("a"))
    assert len(log) == 4 and sleep.delays == [0.5, 1.0, 2.0]  # every retry, then no more
    message = info.value.message
    assert "'--store'" in message and "did not accept job a (t1 | none | seed 0)" in message
    assert "after 4 attempts" in message and "database or disk is full" in message
    assert isinstance(info.value, BenchInputError) and store.count() == 0


def test_a_locked_store_is_retried_then_reported(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    store, sleep = _store(path, delays=(0.01, 0.02))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
    try:
        with pytest.raises(StoreWriteError) as info:
            store.add(make_result("a"))
        assert sleep.delays == [0.01, 0.02]
        assert "after 3 attempts" in info.value.message and "database is locked" in info.value.message
        assert store.finished_keys() == set()  # reads still work (WAL)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.add(make_result("a"))  # the lock is gone: the write goes through


def test_a_programming_error_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, sleep = _store(tmp_path / "r.sqlite")

    def broken(result: JobResult) -> bool:
        raise ProgrammingError("INSERT", {}, Exception("no such column: jobs.key"))

    monkeypatch.setattr(store, "_write", broken)
    with pytest.raises(StoreWriteError, match="no such column"):
        store.add(make_result("a"))
    assert sleep.delays == []


def test_a_deleted_sqlite_file_is_reported_not_written_into_the_void(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    store, sleep = _store(path)
    assert store.add(make_result("a"))
    for p in tmp_path.glob("r.sqlite*"):
        p.unlink()
    with pytest.raises(StoreWriteError, match="was deleted after it was opened"):
        store.add(make_result("b"))
    assert sleep.delays == []


def test_a_failing_engine_never_shows_a_password(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(
        store_module,
        "create_engine",
        lambda url, **kw: create_engine(f"sqlite:///{tmp_path / 'r.sqlite'}", **kw),
    )
    store = ResultStore("postgresql://u:secret@db.example/bench", retry=RetryPolicy((), Recorder()))

    def broken(result: JobResult) -> bool:
        raise OperationalError(
            "INSERT", {}, Exception("server closed the connection: postgresql://u:secret@db")
        )

    monkeypatch.setattr(store, "_write", broken)
    with pytest.raises(StoreWriteError) as info:
        store.add(make_result("a"))
    message = info.value.message  # (psycopg 3 is a plain postgresql:// URL's driver)
    assert SECRET not in message and "postgresql+psycopg://u:***@db.example/bench" in message


# -- the spool ------------------------------------------------------------------------------------


def nonfinite_result(key: str = "nf") -> JobResult:
    return JobResult(
        key=key,
        task="t",
        defense="none",
        defense_name="none",
        defense_params={"sigma": 0.5, "grid": (1, 2)},
        seed=0,
        status="ok",
        utility=0.75,
        metrics={"val_loss": math.nan, "rounds": 3.0},
        attacks=[AttackOutcome("server", "dlg", "ok", {"psnr.mean": math.inf, "x": -math.inf}, 0.5)],
        privacy={"server": 0.5},
    )


def test_to_dict_is_standard_json_and_round_trips() -> None:
    r = nonfinite_result()
    data = r.to_dict()
    text = json.dumps(data, allow_nan=False)  # no NaN/Infinity token
    back = JobResult.from_dict(json.loads(text))
    assert math.isnan(back.metrics["val_loss"]) and back.attacks[0].metrics == {
        "psnr.mean": math.inf,
        "x": -math.inf,
    }
    assert back.to_dict() == data and back.defense_params["grid"] == [1, 2]
    assert JobResult.from_dict(make_result("k").to_dict()) == make_result("k")
    assert JobResult.from_dict(make_result("f", failed=True).to_dict()) == make_result("f", failed=True)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.pop("key"), "missing fields key"),
        (lambda d: d.update(colour="red"), "unknown fields colour"),
        (lambda d: d.update(status="maybe"), "result.status"),
        (lambda d: d["attacks"][0].update(bogus=1), r"result.attacks\[0\]: unknown fields bogus"),
    ],
)
def test_from_dict_names_what_is_wrong(mutate, expected: str) -> None:  # type: ignore[no-untyped-def]
    data = make_result("k").to_dict()
    mutate(data)
    with pytest.raises(ValueError, match=expected):
        JobResult.from_dict(data)


def test_to_dict_rejects_what_is_not_json_data() -> None:
    r = make_result("k")
    r.provenance["path"] = Path("/x")
    with pytest.raises(TypeError, match=r"result.provenance.path: PosixPath"):
        r.to_dict()


def test_spool_file_is_complete_json_and_reads_back(tmp_path: Path) -> None:
    path = write_spool(nonfinite_result(), tmp_path / "spool", "OperationalError: database is locked")
    assert path == tmp_path / "spool" / "nf.json"
    assert [p.name for p in (tmp_path / "spool").iterdir()] == ["nf.json"]  # no temporary file left
    payload = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-standard {c}"))
    assert payload["store_error"] == "OperationalError: database is locked"
    assert read_spool(path).to_dict() == nonfinite_result().to_dict()
    odd = write_spool(make_result("../../etc/passwd"), tmp_path / "spool")
    assert odd.parent == tmp_path / "spool" and odd.name.startswith("key-")


def test_keeper_spools_the_failed_result_and_the_held_ones(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    store, _ = _store(path, delays=())
    keeper = ResultKeeper(store, tmp_path / "out")
    first, second, third = make_result("a"), make_result("b", seed=1), make_result("c", seed=2)
    keeper.hold(first)
    keeper.hold(second)  # finished in another thread, not yet stored
    _fail_inserts(store, times=99)
    with pytest.raises(StoreWriteError) as info:
        keeper.add(first)
    with pytest.raises(StoreWriteError):
        keeper.check()  # no new job starts
    keeper.hold(third)  # a job that was still running: kept as it finishes
    folder = spool_dir(tmp_path / "out")
    assert sorted(p.name for p in folder.iterdir()) == ["a.json", "b.json", "c.json"]
    message = info.value.message
    assert "3 files in" in message and str(folder) in message and "Nothing is lost" in message


def test_next_run_imports_the_spool_before_anything_else(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    write_spool(make_result("a"), spool_dir(out))
    write_spool(nonfinite_result("b"), spool_dir(out))
    (spool_dir(out) / "junk.json").write_text("{not json")
    future = _spooled_text(make_result("c"), version=99)  # genuine, from a newer bench
    (spool_dir(out) / "c.json").write_text(_signed(future))
    store = ResultStore(str(tmp_path / "r.sqlite"))
    assert store.add(make_result("a"))  # already stored (the spool write raced a successful retry)
    ResultKeeper(store, out)
    assert store.finished_keys() == {"a", "b"} and store.count() == 2
    assert sorted(p.name for p in spool_dir(out).iterdir()) == ["c.json", "rejected"]  # genuine: left
    assert [p.name for p in (spool_dir(out) / "rejected").iterdir()] == ["junk.json"]  # not bench's: moved
    captured = capsys.readouterr()
    assert "stored 2 result(s) that an earlier run kept" in captured.out
    assert "c.json was left in place: spool format version 99" in captured.err
    assert "junk.json was not stored" in captured.err
    assert import_spooled(store, out) == 0


def test_a_failing_import_keeps_the_spool(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_spool(make_result("a"), spool_dir(out))
    store, _ = _store(tmp_path / "r.sqlite", delays=())
    _fail_inserts(store, times=99)
    with pytest.raises(StoreWriteError) as info:
        ResultKeeper(store, out)
    assert (spool_dir(out) / "a.json").is_file()
    assert "kept by an earlier run" in info.value.message and "a.json" in info.value.message


def _spooled_text(result: JobResult, version: int = spool_module.VERSION) -> str:
    """A spool file's JSON as the spool writes it, without its tag (as an older bench did)."""
    payload = {"format": spool_module.FORMAT, "version": version, "spooled_at": "2025-01-01T00:00:00+00:00"}
    payload.update(store_error="", result=result.to_dict())
    return json.dumps(payload, indent=1, sort_keys=True)


def _signed(text: str) -> str:
    """``text`` tagged with this user's spool key, as the parent tags what it spools."""
    key = sandbox.parent_secret(spool_module.KEY_NAME, create=True)
    assert key is not None
    tagged = json.loads(text) | {"hmac": spool_module._tag(key, text.encode())}
    return json.dumps(tagged, indent=1, sort_keys=True)


def _forged_baseline(key: str) -> JobResult:
    forged = make_result(key)
    forged.privacy = {"server": 1.0, "neighbors": 1.0}
    return forged


def test_a_forged_spool_file_is_not_stored_and_its_job_runs_again(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Issue 39 item 3: a spool file written by hand (the undefended baseline with privacy 1.0)
    used to be stored as is; only files the parent tagged with its key are stored now."""
    out = tmp_path / "out"
    write_spool(make_result("genuine"), spool_dir(out))
    forged = spool_dir(out) / "forged.json"
    forged.write_text(_spooled_text(_forged_baseline("forged")))
    fake_tag = spool_dir(out) / "fake-tag.json"
    with_tag = json.loads(_spooled_text(_forged_baseline("fake-tag"))) | {"hmac": "0" * 64}
    fake_tag.write_text(json.dumps(with_tag, indent=1, sort_keys=True))
    store = ResultStore(str(tmp_path / "r.sqlite"))
    ResultKeeper(store, out)
    assert store.finished_keys() == {"genuine"}  # the forged jobs are not finished: they run
    assert all(r.privacy != {"server": 1.0, "neighbors": 1.0} for r in store.results())
    err = capsys.readouterr().err
    assert f"warning: {forged} was not stored" in err and "no authentication tag" in err
    assert f"warning: {fake_tag} was not stored" in err and "does not match its contents" in err
    assert sorted(p.name for p in (spool_dir(out) / "rejected").iterdir()) == ["fake-tag.json", "forged.json"]
    assert [p.name for p in spool_dir(out).iterdir()] == ["rejected"]


def test_a_genuine_spool_file_edited_afterwards_is_discarded(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    path = write_spool(make_result("a"), spool_dir(out))
    assert read_spool(path) == make_result("a")  # genuine: accepted as written
    data = path.read_bytes()
    assert b'"utility": 0.9123456789' in data
    path.write_bytes(data.replace(b'"utility": 0.9123456789', b'"utility": 0.9923456789'))
    with pytest.raises(UnauthenticSpoolFile, match="does not match"):
        read_spool(path)
    store = ResultStore(str(tmp_path / "r.sqlite"))
    assert import_spooled(store, out) == 0 and store.count() == 0
    moved = spool_dir(out) / "rejected" / "a.json"
    assert f"{path} was not stored and was moved to {moved}" in capsys.readouterr().err


def test_the_spool_key_is_private_and_a_sandboxed_child_cannot_read_it(tmp_path: Path) -> None:
    """The key lives beneath /tmp, which the sandbox does not let a child read (the out folder
    it may read); a key folder another account could know is refused."""
    assert sandbox.landlock_abi() >= 1, "this machine's kernel has Landlock; the sandbox test needs it"
    write_spool(make_result("a"), spool_dir(tmp_path / "out"))
    key = str(sandbox.SECRETS_DIR / spool_module.KEY_NAME)
    readable = str(Path(__file__).resolve())
    seen = isolation.call(targets.sandboxed_read, {"paths": [key, readable]})
    assert seen[key] == "PermissionError" and seen[readable].startswith("read ")
    assert (sandbox.SECRETS_DIR.stat().st_mode & 0o777, Path(key).stat().st_mode & 0o777) == (0o700, 0o600)


def test_a_spool_key_folder_others_could_read_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    path = write_spool(make_result("a"), spool_dir(out))
    shared = tmp_path / "shared-secrets"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    monkeypatch.setattr(sandbox, "SECRETS_DIR", shared)
    with pytest.raises(OSError, match="not a private folder"):
        write_spool(make_result("b"), spool_dir(out))
    store = ResultStore(str(tmp_path / "r.sqlite"))
    assert import_spooled(store, out) == 0 and store.count() == 0
    assert f"{path} was not stored" in capsys.readouterr().err
    monkeypatch.setattr(sandbox, "SECRETS_DIR", tmp_path / "none-yet")
    with pytest.raises(UnauthenticSpoolFile, match="no spool key"):  # /tmp cleared: nothing to check with
        read_spool(spool_dir(out) / "rejected" / "a.json")


def test_no_readable_root_of_the_sandbox_holds_the_secrets(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("sys.path", ["/tmp", "/", *__import__("sys").path])
    roots = sandbox.readable_roots(["/tmp"])
    assert roots and not any(sandbox.SECRETS_DIR.is_relative_to(r.resolve()) for r in roots)


def test_the_sandbox_reads_no_store_beside_the_plugins_and_no_other_process(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 39, item 1: a benchmark root's ``runs/`` (where a store and spool live) and its
    parent folders are not readable, even with the root on ``sys.path``; its plugins are; of
    ``/proc`` only this process's own folder among the processes'."""
    import os

    root = tmp_path / "bench-root"
    for name in ("defenses", "tasks", "runs"):
        (root / name).mkdir(parents=True)
    monkeypatch.setattr("sys.path", [str(root), str(tmp_path), *__import__("sys").path])
    roots = [r.resolve() for r in sandbox.readable_roots([root])]

    def readable(path: Path) -> bool:
        return any(path.resolve().is_relative_to(r) for r in roots)

    assert readable(root / "defenses" / "x.py") and readable(root / "tasks" / "x.yaml")
    assert not readable(root / "runs" / "results.sqlite") and not readable(root / "results.sqlite")
    assert readable(Path(f"/proc/{os.getpid()}/status"))
    assert not readable(Path(f"/proc/{os.getppid()}/cmdline")) and not readable(Path("/proc/1/cmdline"))


# -- failed jobs ------------------------------------------------------------------------------------


def test_delete_failed_is_scoped(tmp_path: Path) -> None:
    store = ResultStore(str(tmp_path / "r.sqlite"))
    store.add(make_result("ok1"))
    for key, task in (("f1", "t1"), ("f2", "t1"), ("f3", "t2")):
        store.add(make_result(key, task=task, failed=True))
    assert store.delete_failed(keys=["f1", "ok1", "nope"]) == 1
    assert store.delete_failed(keys=[]) == 0
    assert store.delete_failed(tasks=["t2"], defenses=["none"]) == 0  # f3's defense is gaussian_noise
    assert store.delete_failed(tasks=["t2"], defenses=["gaussian_noise(sigma=1.0)"]) == 1
    assert store.finished_keys() == {"ok1", "f2"}
    assert store.delete_failed() == 1 and store.finished_keys() == {"ok1"}
    with store.engine.connect() as conn:
        assert conn.execute(text("select count(*) from attack_results")).scalar() == 3
    assert set(inspect(store.engine).get_table_names()) == {"jobs", "attack_results", "bench_meta"}


def test_the_default_retry_schedule_is_bounded() -> None:
    attempts = len(store_module.DEFAULT_RETRY.delays) + 1
    worst = sum(store_module.DEFAULT_RETRY.delays) + attempts * store_module.BUSY_TIMEOUT_S
    assert attempts >= 3 and worst <= 90  # a few retries, about a minute on a locked store
    assert list(store_module.DEFAULT_RETRY.delays) == sorted(store_module.DEFAULT_RETRY.delays)


def test_a_store_another_process_is_creating_opens(tmp_path: Path) -> None:
    """Two writers opening a new SQLite store at once: one may look while the other's
    ``create_all`` has made ``jobs`` but not yet ``attack_results`` and the marker. That is
    bench's own store half made, not a foreign database: it opens and gets completed."""
    path = tmp_path / "racing.sqlite"
    engine = create_engine(f"sqlite:///{path}")
    JobRow.metadata.create_all(engine, tables=[JobRow.__table__])  # the first table only
    engine.dispose()
    store = ResultStore(str(path))
    assert store.add(make_result("r"))
    store.close()
    assert _tables(path) == ["attack_results", "bench_meta", "jobs"]
    # a foreign table of the same name is still refused (its columns are not bench's)
    other = tmp_path / "lookalike.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("create table jobs (id integer primary key, cron text)")
    with pytest.raises(BenchInputError, match="not a bench results store"):
        ResultStore(str(other))


def test_non_finite_numbers_are_stored_as_standard_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ε = ∞ and a NaN loss reach the JSON columns as ``{"$float": …}``, never as the
    ``Infinity``/``NaN`` tokens PostgreSQL's JSON refuses (issue 39 item 5), and come back."""
    import sqlite3

    r = nonfinite_result("inf-eps")
    r.accounting = {"epsilon": math.inf, "delta": 1e-5}
    url = str(tmp_path / "r.sqlite")
    with ResultStore(url) as store:
        assert store.add(r)
        (back,) = store.results()
    raw = sqlite3.connect(url).execute("select accounting, metrics from jobs").fetchone()
    raw += sqlite3.connect(url).execute("select metrics from attack_results").fetchone()
    for column in raw:
        json.loads(column, parse_constant=lambda c: pytest.fail(f"non-standard JSON token {c}"))
    assert back.accounting["epsilon"] == math.inf and math.isnan(back.metrics["val_loss"])
    assert back.attacks[0].metrics == {"psnr.mean": math.inf, "x": -math.inf}
