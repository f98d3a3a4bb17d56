"""The store's tables and the marker that says a database is bench's.

A results store holds three tables: ``jobs`` (one row per job), ``attack_results`` (one row
per attack outcome) and ``bench_meta``, whose ``schema_version`` row marks the database as a
bench store. :func:`check_database` reads a database before bench writes anything to it:

- no table at all (a new or empty database): bench's tables and the marker are created;
- the marker: a bench store (refused only when written by a newer schema than this bench reads);
- exactly ``jobs`` and ``attack_results`` with bench's columns and no marker: a store of the
  release before the marker, which gets the marker;
- anything else: another application's database, refused before anything is created or its
  journal mode is changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    Connection,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    inspect,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from bench.results.record import AttackOutcome, JobResult, _decode, _encode

__all__ = [
    "BENCH_TABLES",
    "MARKER_TABLE",
    "SCHEMA_VERSION",
    "AttackRow",
    "Base",
    "DatabaseCheck",
    "JobRow",
    "MetaRow",
    "check_database",
    "job_result",
    "job_row",
]

#: version of the tables' layout written to ``bench_meta``; raise it with any incompatible change
SCHEMA_VERSION = 1
MARKER_TABLE = "bench_meta"
#: the tables of a store created before the marker existed
BENCH_TABLES = frozenset({"jobs", "attack_results"})


class Base(DeclarativeBase):
    """Declarative base of the store's tables."""


class JobRow(Base):
    """One job (``task``, defense configuration, seed): table ``jobs``."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(128), unique=True, nullable=False)
    task: Mapped[str] = mapped_column(String(255), index=True, nullable=False)
    defense: Mapped[str] = mapped_column(Text, nullable=False)
    defense_name: Mapped[str] = mapped_column(String(255), nullable=False)
    defense_params: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    seed: Mapped[int] = mapped_column(Integer, nullable=False)
    status: Mapped[str] = mapped_column(String(16), index=True, nullable=False)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    utility_metric: Mapped[str] = mapped_column(String(255), nullable=False)
    utility: Mapped[float | None] = mapped_column(Float, nullable=True)
    utility_floor: Mapped[float | None] = mapped_column(Float, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    privacy: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    runtime_s: Mapped[float] = mapped_column(Float, nullable=False)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    accounting: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)

    attacks: Mapped[list[AttackRow]] = relationship(
        back_populates="job",
        cascade="all, delete-orphan",
        order_by="AttackRow.id",
        lazy="selectin",
    )


class AttackRow(Base):
    """One attack outcome of one job: table ``attack_results``."""

    __tablename__ = "attack_results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True, nullable=False)
    threat: Mapped[str] = mapped_column(String(255), nullable=False)
    attack: Mapped[str] = mapped_column(String(255), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    leakage: Mapped[float | None] = mapped_column(Float, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    runtime_s: Mapped[float] = mapped_column(Float, nullable=False)

    job: Mapped[JobRow] = relationship(back_populates="attacks")


class MetaRow(Base):
    """A ``key -> value`` fact about the store: table ``bench_meta`` (``schema_version``)."""

    __tablename__ = MARKER_TABLE

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text, nullable=False)


def job_row(result: JobResult) -> JobRow:
    """The rows of a record (``created_at``: now). The JSON columns hold standard JSON: a
    non-finite float (ε = ∞, a NaN loss) is written as ``{"$float": "inf"}`` (``"nan"``,
    ``"-inf"``; :meth:`~bench.results.record.JobResult.to_dict`), never as the ``Infinity`` /
    ``NaN`` tokens PostgreSQL's JSON refuses; :func:`job_result` restores them, and reads the
    tokens older SQLite stores hold."""
    row = JobRow(
        key=result.key,
        task=result.task,
        defense=result.defense,
        defense_name=result.defense_name,
        defense_params=_encode(result.defense_params, "defense_params"),
        seed=result.seed,
        status=result.status,
        reason=result.reason,
        utility_metric=result.utility_metric,
        utility=result.utility,
        utility_floor=result.utility_floor,
        metrics=_encode(result.metrics, "metrics"),
        privacy=_encode(result.privacy, "privacy"),
        runtime_s=result.runtime_s,
        provenance=_encode(result.provenance, "provenance"),
        accounting=_encode(result.accounting, "accounting"),
        created_at=datetime.now(timezone.utc),
    )
    row.attacks = [
        AttackRow(
            threat=a.threat,
            attack=a.attack,
            status=a.status,
            metrics=_encode(a.metrics, "attack.metrics"),
            leakage=a.leakage,
            reason=a.reason,
            runtime_s=a.runtime_s,
        )
        for a in result.attacks
    ]
    return row


def job_result(row: JobRow) -> JobResult:
    """The record of a stored job row."""
    return JobResult(
        key=row.key,
        task=row.task,
        defense=row.defense,
        defense_name=row.defense_name,
        defense_params=_decode(row.defense_params),
        seed=row.seed,
        status=row.status,  # type: ignore[arg-type]
        reason=row.reason,
        utility_metric=row.utility_metric,
        utility=row.utility,
        utility_floor=row.utility_floor,
        metrics=_decode(row.metrics),
        attacks=[
            AttackOutcome(
                threat=a.threat,
                attack=a.attack,
                status=a.status,  # type: ignore[arg-type]
                metrics=_decode(a.metrics),
                leakage=a.leakage,
                reason=a.reason,
                runtime_s=a.runtime_s,
            )
            for a in row.attacks
        ],
        privacy=_decode(row.privacy),
        runtime_s=row.runtime_s,
        provenance=_decode(row.provenance),
        accounting=_decode(row.accounting),
    )


@dataclass
class DatabaseCheck:
    """What :func:`check_database` found.

    Attributes
    ----------
    tables:
        Every table and view of the database's default schema, sorted.
    version:
        The marker's schema version; ``None`` without a marker.
    legacy:
        A store of the release before the marker (``jobs`` and ``attack_results`` only).
    problem:
        Why the database must not be used as a store; ``None`` when it may.
    """

    tables: list[str] = field(default_factory=list)
    version: int | None = None
    legacy: bool = False
    problem: str | None = None


def _listing(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_database(conn: Connection) -> DatabaseCheck:
    """Classify a database, reading only (nothing is created, no setting is changed).

    Parameters
    ----------
    conn:
        A connection on which no bench setting (SQLite journal mode …) has been applied.

    Returns
    -------
    DatabaseCheck
        ``problem`` says, in a sentence naming the tables found, why the database is not usable
        as bench's store (another application's tables, or a newer schema).
    """
    inspector = inspect(conn)
    tables = sorted({*inspector.get_table_names(), *inspector.get_view_names()})
    found = DatabaseCheck(tables=tables)
    if MARKER_TABLE in tables:
        text = conn.scalar(select(MetaRow.value).where(MetaRow.key == "schema_version"))
        if text is None:  # the marker table was created but its row not yet written
            return found
        try:
            found.version = int(text)
        except ValueError:
            found.problem = f"its {MARKER_TABLE} table holds an unreadable schema version {text!r}"
            return found
        if found.version > SCHEMA_VERSION:
            found.problem = (
                f"it was written by a newer bench (schema version {found.version}; this bench reads "
                f"version {SCHEMA_VERSION}): upgrade bench, or use another store"
            )
        return found
    if not tables:
        return found
    if set(tables) == BENCH_TABLES:
        columns = {c["name"] for c in inspector.get_columns(JobRow.__tablename__)}
        if set(JobRow.__table__.columns.keys()) <= columns:
            found.legacy = True
            return found
    elif set(tables) < BENCH_TABLES and all(
        set(Base.metadata.tables[t].columns.keys()) <= {c["name"] for c in inspector.get_columns(t)}
        for t in tables
    ):
        # some of bench's own tables, with bench's columns, and no marker yet: another process is
        # creating this store at this moment (``create_all`` makes one table after another), or a
        # creation was cut short; opening it completes the missing tables and writes the marker
        return found
    found.problem = (
        f"this database is not a bench results store: it holds tables that are not bench's "
        f"({_listing(tables)}) and no {MARKER_TABLE} table; bench adds its tables only to a new or "
        f"empty database or to one of its own stores. Use a new file or another database"
    )
    return found
