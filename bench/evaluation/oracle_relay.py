"""Parent side of the defense oracle: the relay between an attack process and an oracle process.

An attack process's queries (:func:`bench.evaluation.queries.query`) reach the parent, which
passes their bytes to a defense oracle process of the job (:mod:`bench.evaluation.oracle`) and
the answer's bytes back; the parent decodes neither, both ends read plain data only. The oracle
process is taken from the sweep's worker pool under a key of the defense plugin (name and source
digest), so an oracle process serves the jobs of one defense only, one job at a time; each job
sets it up anew (:func:`~bench.evaluation.oracle.setup`: its task, the plugin, a seed derived for
the oracle) in place of the previous job's oracle. The defense code in it sees attacker-chosen
queries only — never a run's data — so what it might keep from one job to the next is what the
attack asked there, which it could answer falsely anyway: reuse saves the start of a process and
the first-run costs per job, and gives the defense nothing the oracle's answers did not.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from bench.evaluation import isolation
from bench.evaluation.oracle import answer, setup


class OracleRelay:
    """Answers an attack process's queries through an oracle process, started or taken from
    ``pool`` (under ``key``) and set up with ``setup`` on the first query; :meth:`close` gives it
    back to the pool (or ends it, without a pool or after a failure)."""

    def __init__(
        self,
        setup: dict[str, Any],
        threads: int = 1,
        pool: isolation.WorkerPool | None = None,
        key: Hashable = "oracle",
    ) -> None:
        self.setup, self.threads = setup, threads
        self.pool, self.key = pool, ("oracle", key)
        self.worker: isolation.Worker | None = None
        self.queries = 0
        self.sandbox = "none"

    def __call__(self, data: bytes) -> bytes:
        if self.worker is None:
            worker = self.pool.take(self.key, self.threads) if self.pool is not None else None
            worker = worker or isolation.Worker(self.threads)
            try:
                ready = worker.request(setup, self.setup, "defense oracle")
                self.sandbox = str(ready.get("sandbox", "none")) if isinstance(ready, dict) else "none"
            except BaseException:
                worker.close()
                raise
            self.worker = worker
        self.queries += 1
        try:
            return self.worker.request_raw(answer, data, "defense oracle")
        except BaseException:  # a dead oracle, or an interrupted query: never reused
            self.worker.close(kill=True)  # a new process (set up again) answers the next query
            self.worker = None
            raise

    def close(self) -> None:
        worker, self.worker = self.worker, None
        if worker is None:
            return
        if self.pool is not None and worker.proc.is_alive():
            self.pool.give(self.key, self.threads, worker)
        else:
            worker.close()
