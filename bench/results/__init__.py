"""Results: job records, the SQLAlchemy store and scoring."""

from bench.results.record import AttackOutcome, JobResult, track_id

__all__ = ["AttackOutcome", "JobResult", "track_id"]
