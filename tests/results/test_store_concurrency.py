"""The results store under concurrent writers and killed runs, on SQLite and on a real PostgreSQL
server (Debian's ``postgresql``, started by the fixture; skipped only where it is not installed).

Each writer is a separate process adding jobs whose keys partly overlap the other's: afterwards
every job is stored exactly once and the writers' counts of rows written add up to it. A writer
killed mid-way leaves only complete jobs, and a second run that skips ``finished_keys`` (what
``evaluate`` does) completes the set.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.results.store import ResultStore
from tests.support.bench_root import REPO
from tests.support.pg_server import binaries, postgres_server

WRITER = """
import sys, time
from tests.support.result_samples import job
from bench.results.store import ResultStore
url, first, last, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
written = 0
with ResultStore(url) as store:
    done = store.finished_keys()
    for seed in range(first, last):
        r = job("t", "server", "d", seed, {"a": 0.5, "b": 0.25}, 0.9, 0.5)
        if r.key in done:
            continue
        written += store.add(r)
        time.sleep(pause)
print(written)
"""


def writer(url: str, first: int, last: int, pause: float = 0.0) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    args = [sys.executable, "-c", WRITER, url, str(first), str(last), str(pause)]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stored(url: str) -> list[tuple[str, int]]:
    with ResultStore(url) as store:
        return sorted((r.key, len(r.attacks)) for r in store.results())


def concurrent_writers_store_each_job_once(url: str) -> None:
    a, b = writer(url, 0, 60), writer(url, 40, 100)  # seeds 40..59 overlap
    outs = [p.communicate(timeout=300) for p in (a, b)]
    assert a.returncode == b.returncode == 0, outs
    rows = stored(url)
    assert len(rows) == 100 == len({k for k, _ in rows})
    assert all(n == 2 for _, n in rows)  # every job with all its attack rows
    assert sum(int(out) for out, _ in outs) == 100  # an overlapping job was written by one writer


def a_killed_writer_resumes(url: str) -> None:
    slow = writer(url, 0, 200, pause=0.02)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(stored(url)) < 10:
        time.sleep(0.05)
    slow.send_signal(signal.SIGKILL)
    slow.wait()
    before = stored(url)
    assert 10 <= len(before) < 200 and all(n == 2 for _, n in before)  # only complete jobs
    rest = writer(url, 0, 200)
    out, err = rest.communicate(timeout=300)
    assert rest.returncode == 0, err
    assert int(out) == 200 - len(before)
    rows = stored(url)
    assert len(rows) == 200 == len({k for k, _ in rows})


def test_sqlite_two_writing_processes(tmp_path: Path) -> None:
    """Two processes on one SQLite file: WAL, the busy timeout and the retries serialize them."""
    concurrent_writers_store_each_job_once(str(tmp_path / "r.sqlite"))


def test_sqlite_killed_writer(tmp_path: Path) -> None:
    a_killed_writer_resumes(str(tmp_path / "r.sqlite"))


@pytest.fixture(scope="module")
def pg_url():
    if binaries() is None:
        pytest.skip("PostgreSQL's server binaries are not installed (.ci/run installs postgresql)")
    with postgres_server() as url:
        yield url


@pytest.fixture
def pg_db(pg_url: str) -> str:
    """An empty schema: the tables are dropped before each test."""
    from sqlalchemy import create_engine, text

    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    return pg_url


@pytest.mark.postgres
def test_postgres_schema_from_scratch_and_round_trip(pg_db: str) -> None:
    from tests.support.result_samples import sample_results

    results = sample_results()
    with ResultStore(pg_db) as store:
        assert store.results() == []
        assert all(store.add(r) for r in results)
        assert not store.add(results[0])  # the same key again: nothing written
        back = {r.key: r for r in store.results()}
    assert set(back) == {r.key for r in results}
    for r in results:
        assert back[r.key].utility == r.utility and back[r.key].privacy == r.privacy
        assert [(a.attack, a.leakage) for a in back[r.key].attacks] == [
            (a.attack, a.leakage) for a in r.attacks
        ]


@pytest.mark.postgres
def test_postgres_two_writing_processes(pg_db: str) -> None:
    concurrent_writers_store_each_job_once(pg_db)


@pytest.mark.postgres
def test_postgres_killed_writer(pg_db: str) -> None:
    a_killed_writer_resumes(pg_db)


@pytest.mark.postgres
@pytest.mark.slow
def test_evaluate_on_postgres(pg_db: str, tmp_path: Path) -> None:
    def evaluate() -> subprocess.CompletedProcess:
        args = ["evaluate", "--suite", "quick", "--task", "gaussians_logreg_fedsgd", "--defense", "none"]
        args += [
            "--seeds",
            "2",
            "--store",
            pg_db,
            "--no-progress",
            "--out",
            str(tmp_path),
            "--site",
            str(tmp_path),
        ]
        return subprocess.run(
            [sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=300
        )

    first = evaluate()
    assert first.returncode == 0, first.stderr
    assert "2 jobs run, 0 already in the store, 0 failed" in first.stdout
    again = evaluate()
    assert again.returncode == 0 and "0 jobs run, 2 already in the store" in again.stdout
    assert len(stored(pg_db)) == 2
    plain = pg_db.replace("postgresql+psycopg://", "postgresql://")  # psycopg 3 is the default driver
    assert len(stored(plain)) == 2
