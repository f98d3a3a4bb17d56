"""Results: the record of one evaluated job (``record``), its provenance and the digests of the
code that produced it (``provenance``, ``code_digest``, ``versions``), the SQL store through
SQLAlchemy (``store``; its tables in ``schema``, ``--store`` values in ``store_url``, and the
``spool`` of results the store did not accept), a job's privacy score (``privacy``) and which
tracks are ranked (``reference``).
"""

from bench.results.record import AttackOutcome, JobResult, track_id

__all__ = ["AttackOutcome", "JobResult", "track_id"]
