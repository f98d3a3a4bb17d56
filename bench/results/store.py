"""The results store: every finished job, kept in a SQL database through SQLAlchemy 2.

SQLite is the default (a file path or a ``sqlite:///`` URL); any SQLAlchemy URL works. A job
row and all its attack rows are written in one transaction, and the job's ``key`` is unique,
so a sweep killed at any point resumes without losing or duplicating a result: a job is either
stored completely or not at all, and :meth:`ResultStore.finished_keys` says which to skip.

SQLite databases are opened in WAL journal mode with a busy timeout, so readers (a progress
display, the leaderboard generator) never block the writer and a killed writer leaves a
consistent database behind.

Opening a database reads it first (:func:`bench.results.schema.check_database`): another
application's database is refused before bench creates a table or changes its journal mode.
A write that fails (the database locked by another program past the busy timeout, a full
disk, a database that went away) is retried with exponential backoff (:class:`RetryPolicy`)
and then reported as a :class:`StoreWriteError`; :mod:`bench.results.spool` keeps the result.
No message shows the URL's password (:func:`bench.results.store_url.redact`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, delete, event, false, func, or_, select
from sqlalchemy.exc import (
    ArgumentError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    InternalError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from bench.results.record import JobResult
from bench.results.schema import (
    SCHEMA_VERSION,
    AttackRow,
    Base,
    JobRow,
    MetaRow,
    check_database,
    job_result,
    job_row,
)
from bench.results.store_url import (
    StoreWriteError,
    describe_error,
    engine_error,
    normalize_url,
    redact,
    sqlite_file,
    store_error,
)

__all__ = [
    "AttackRow",
    "Base",
    "JobRow",
    "ResultStore",
    "RetryPolicy",
    "StoreWriteError",
    "normalize_url",
]

#: how long a SQLite statement waits for a lock held by another connection, per attempt
BUSY_TIMEOUT_S = 10.0
FINISHED_STATUSES = ("ok", "failed")
#: errors worth another attempt: a lock, a lost connection, a full disk, an I/O error
TRANSIENT = (
    OperationalError,
    InterfaceError,
    InternalError,
    DisconnectionError,
    PoolTimeoutError,
    sqlite3.OperationalError,
    OSError,
)
_DB_ERRORS = (SQLAlchemyError, sqlite3.Error, OSError)
_T = TypeVar("_T")


@dataclass(frozen=True)
class RetryPolicy:
    """How :meth:`ResultStore.add` retries a write that failed.

    Attributes
    ----------
    delays:
        Seconds to wait before each retry (one retry per entry; ``()``: a single attempt).
        The default, 1, 2, 4 and 8 s, makes five attempts; with SQLite's busy timeout of
        :data:`BUSY_TIMEOUT_S` per attempt a locked store is given up after about 65 s.
    sleep:
        The function that waits (tests pass one that records the delays).
    """

    delays: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    sleep: Callable[[float], None] = time.sleep


#: the schedule of a :class:`ResultStore` created without one
DEFAULT_RETRY = RetryPolicy()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _in(column: Any, values: list[str], size: int = 500) -> Any:
    """``column IN values``, in chunks of ``size`` (SQLite limits a statement's parameters)."""
    if not values:
        return false()
    return or_(*(column.in_(values[i : i + size]) for i in range(0, len(values), size)))


class ResultStore:
    """A database of :class:`~bench.results.record.JobResult` records.

    Parameters
    ----------
    url:
        SQLAlchemy URL or a plain file path (SQLite). A new or empty database gets bench's
        tables and the ``bench_meta`` marker; a store of the previous release gets the marker;
        any other database is refused, untouched.
    retry:
        How :meth:`add` retries a failed write (default :data:`DEFAULT_RETRY`).
    busy_timeout_s:
        SQLite only: how long a statement waits for another connection's lock (default
        :data:`BUSY_TIMEOUT_S`).

    Raises
    ------
    BenchInputError
        ``field="--store"`` when the URL is malformed, names an unknown dialect or driver, the
        database cannot be opened or created, is another application's, or was written by a
        newer bench (never a raw SQLAlchemy traceback; never the password).

    Examples
    --------
    >>> store = ResultStore("runs/results.sqlite")  # doctest: +SKIP
    >>> store.add(result)  # doctest: +SKIP
    True
    """

    def __init__(
        self, url: str, *, retry: RetryPolicy | None = None, busy_timeout_s: float | None = None
    ) -> None:
        self._url = normalize_url(url)
        self._retry = retry or DEFAULT_RETRY
        kwargs: dict[str, Any] = {}
        if self._url.get_backend_name() == "sqlite":
            timeout = BUSY_TIMEOUT_S if busy_timeout_s is None else busy_timeout_s
            kwargs["connect_args"] = {"timeout": timeout}
        self._file = sqlite_file(self._url)
        self._check(url, kwargs)
        try:
            self._engine: Engine = create_engine(self._url, **kwargs)
        except (ArgumentError, ImportError, ValueError, TypeError) as exc:
            raise engine_error(url, exc) from None
        if self._engine.dialect.name == "sqlite":
            event.listen(self._engine, "connect", _sqlite_pragmas)
        try:
            self._create_schema()
            self._mark()
        except _DB_ERRORS as exc:
            self._engine.dispose()
            raise store_error(url, f"cannot open the database: {describe_error(exc, url)}") from None
        self._identity = self._file_identity()

    def _check(self, url: str, kwargs: dict[str, Any]) -> None:
        """Read the database without changing anything (no pool, no SQLite pragma) and refuse
        another application's database or a newer schema."""
        try:
            probe = create_engine(self._url, poolclass=NullPool, **kwargs)
        except (ArgumentError, ImportError, ValueError, TypeError) as exc:
            raise engine_error(url, exc) from None
        try:
            with probe.connect() as conn:
                found = check_database(conn)
        except _DB_ERRORS as exc:
            raise store_error(url, f"cannot open the database: {describe_error(exc, url)}") from None
        finally:
            probe.dispose()
        if found.problem:
            raise store_error(url, found.problem)

    def _create_schema(self, attempts: int = 5) -> None:
        """Create the missing tables. Two processes opening a new server database at the same
        moment race between "does the table exist?" and ``CREATE TABLE`` (PostgreSQL answers the
        loser with a unique violation in its catalog, SQLite with "table … already exists"): the
        loser tries again, and then finds the winner's tables."""
        for attempt in range(attempts):
            try:
                Base.metadata.create_all(self._engine)
                return
            except (IntegrityError, ProgrammingError, OperationalError):
                if attempt == attempts - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def _mark(self) -> None:
        """Write the ``bench_meta`` marker when missing (a new store, or one of the release
        before the marker)."""
        with Session(self._engine) as session:
            if session.get(MetaRow, "schema_version") is not None:
                return
        try:
            with Session(self._engine) as session, session.begin():
                session.add(MetaRow(key="schema_version", value=str(SCHEMA_VERSION)))
        except IntegrityError:  # another process marked it at the same time
            pass

    def _file_identity(self) -> tuple[int, int] | None:
        if self._file is None:
            return None
        try:
            st = self._file.stat()
        except OSError:
            return None
        return st.st_dev, st.st_ino

    # -- identity -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The database URL, password and secret query values hidden (safe to print or put on
        the page)."""
        return redact(self._url.render_as_string(hide_password=True))

    @property
    def engine(self) -> Engine:
        """The underlying SQLAlchemy engine."""
        return self._engine

    @property
    def retry(self) -> RetryPolicy:
        """How :meth:`add` retries a failed write."""
        return self._retry

    def __repr__(self) -> str:
        return f"ResultStore({self.url!r})"

    def close(self) -> None:
        """Release all pooled connections."""
        self._engine.dispose()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing --------------------------------------------------------------------------

    def add(self, result: JobResult) -> bool:
        """Store one job and all its attack outcomes in a single transaction.

        A write that fails with a transient error (:data:`TRANSIENT`: a lock held past the busy
        timeout, a lost connection, a full disk) is tried again after each delay of the
        :class:`RetryPolicy`; any other database error, or a SQLite file that was deleted or
        replaced since it was opened, is not retried.

        Parameters
        ----------
        result:
            The job's record.

        Returns
        -------
        bool
            ``True`` when written, ``False`` when a job with the same ``key`` is already stored
            (nothing is written then; there are never duplicates).

        Raises
        ------
        StoreWriteError
            When no attempt succeeded: one paragraph with the URL (password hidden), the
            attempts and the last error. Nothing of the job was written.
        """
        start, attempts = time.monotonic(), 0
        last: BaseException | None = None
        delays = iter(self._retry.delays)
        while True:
            attempts += 1
            try:
                return self._write(result)
            except _DB_ERRORS as exc:
                last = exc
                if not isinstance(exc, TRANSIENT) or isinstance(exc, _StoreGone):
                    break
            delay = next(delays, None)
            if delay is None:
                break
            self._retry.sleep(delay)
        what = f"job {result.key} ({result.task} | {result.defense} | seed {result.seed})"
        detail = describe_error(last) if last is not None else "unknown error"
        raise StoreWriteError(self.url, what, attempts, time.monotonic() - start, detail)

    def _write(self, result: JobResult) -> bool:
        self._check_file()
        try:
            with Session(self._engine) as session, session.begin():
                session.add(job_row(result))
        except IntegrityError:
            if self._has_key(result.key):
                return False
            raise
        return True

    def _check_file(self) -> None:
        """A SQLite file deleted or replaced since it was opened would take every later write
        with it (the open connections write to the old file): refuse to write then."""
        if self._identity is None or self._file is None:
            return
        try:
            st = self._file.stat()
        except FileNotFoundError:
            raise _StoreGone(f"the database file {self._file} was deleted after it was opened") from None
        if (st.st_dev, st.st_ino) != self._identity:
            raise _StoreGone(f"the database file {self._file} was replaced after it was opened")

    def delete_failed(
        self,
        *,
        keys: Iterable[str] | None = None,
        tasks: Iterable[str] | None = None,
        defenses: Iterable[str] | None = None,
    ) -> int:
        """Delete failed jobs (and their attack rows) so that they run again.

        Parameters
        ----------
        keys, tasks, defenses:
            Only the failed jobs with one of these keys, of one of these tasks and with one of
            these defense labels (each filter that is given applies; none given: every failed
            job).

        Returns
        -------
        int
            The number of jobs deleted.
        """
        cond = JobRow.status == "failed"
        for column, values in ((JobRow.key, keys), (JobRow.task, tasks), (JobRow.defense, defenses)):
            if values is not None:
                cond = cond & _in(column, sorted(set(values)))
        failed_ids = select(JobRow.id).where(cond)

        def run() -> int:
            with self._engine.begin() as conn:
                conn.execute(delete(AttackRow).where(AttackRow.job_id.in_(failed_ids)))
                deleted = conn.execute(delete(JobRow).where(cond))
            return int(deleted.rowcount or 0)

        return self._reading(run, "cannot delete the failed jobs")

    # -- reading --------------------------------------------------------------------------

    def _reading(self, fn: Callable[[], _T], what: str = "cannot read the database") -> _T:
        """Run ``fn``; a database error becomes a ``--store`` input error (redacted)."""
        try:
            return fn()
        except _DB_ERRORS as exc:
            raise store_error(self.url, f"{what}: {describe_error(exc)}") from None

    def _has_key(self, key: str) -> bool:
        with Session(self._engine) as session:
            return session.scalar(select(JobRow.id).where(JobRow.key == key)) is not None

    def finished_keys(self) -> set[str]:
        """Keys of all stored jobs whose status is ``ok`` or ``failed``."""

        def run() -> set[str]:
            with Session(self._engine) as session:
                return set(session.scalars(select(JobRow.key).where(JobRow.status.in_(FINISHED_STATUSES))))

        return self._reading(run)

    def results(self, task: str | None = None) -> list[JobResult]:
        """All stored jobs, in insertion order, optionally only those of one task.

        Parameters
        ----------
        task:
            Restrict to this task's jobs.

        Returns
        -------
        list[JobResult]
            Records equal to those that were added (attack outcomes in their original order).
        """
        query = select(JobRow).order_by(JobRow.id)
        if task is not None:
            query = query.where(JobRow.task == task)

        def run() -> list[JobResult]:
            with Session(self._engine) as session:
                return [job_result(row) for row in session.scalars(query)]

        return self._reading(run)

    def count(self) -> int:
        """Number of stored jobs."""

        def run() -> int:
            with Session(self._engine) as session:
                return int(session.scalar(select(func.count()).select_from(JobRow)) or 0)

        return self._reading(run)


class _StoreGone(OSError):
    """The SQLite file was deleted or replaced while the store was open (not retried)."""
