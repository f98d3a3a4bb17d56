"""Entry versions: the rows of an entry come from one version of its code and spec.

Every job records ``provenance["version"]``: the hash of its task spec, defense configuration,
bench's version and the digests of the code that produced it (:class:`bench.evaluation.job.Job`,
:mod:`bench.results.code_digest`) — everything but the seed. The rows of one entry (task,
defense label) that share a version may be aggregated; rows of different versions never are.
"""

from __future__ import annotations

import pandas as pd

from bench.results.record import JobResult

__all__ = ["result_version", "split_versions", "superseded_versions"]


def result_version(result: JobResult) -> str:
    """The code-and-spec version of a job (``"legacy"`` for rows stored before versions)."""
    return str(result.provenance.get("version", "legacy"))


def _timestamp(result: JobResult) -> str:
    return str(result.provenance.get("timestamp", ""))


def split_versions(results: list[JobResult]) -> tuple[list[JobResult], list[JobResult]]:
    """``(current, superseded)``: for each (task, defense label), the jobs of its newest version
    — the version of the job with the latest timestamp, the later in ``results`` on a tie (the
    store returns jobs in the order they were written) — and those of every older one."""
    newest: dict[tuple[str, str], tuple[str, int, str]] = {}
    for i, r in enumerate(results):
        group, key = (r.task, r.defense), (_timestamp(r), i)
        if group not in newest or key > newest[group][:2]:
            newest[group] = (*key, result_version(r))
    current = [r for r in results if result_version(r) == newest[(r.task, r.defense)][2]]
    superseded = [r for r in results if result_version(r) != newest[(r.task, r.defense)][2]]
    return current, superseded


def superseded_versions(results: list[JobResult]) -> pd.DataFrame:
    """One row per older version of an entry still in the store: ``task, defense, version,
    jobs, ok, newest`` (timestamp of its latest job), newest first."""
    _, old = split_versions(results)
    rows: dict[tuple[str, str, str], dict[str, object]] = {}
    for r in old:
        k = (r.task, r.defense, result_version(r))
        row = rows.setdefault(
            k, {"task": r.task, "defense": r.defense, "version": k[2], "jobs": 0, "ok": 0, "newest": ""}
        )
        row["jobs"] = int(row["jobs"]) + 1  # type: ignore[call-overload]
        row["ok"] = int(row["ok"]) + (r.status == "ok")  # type: ignore[call-overload]
        row["newest"] = max(str(row["newest"]), _timestamp(r))
    df = pd.DataFrame(list(rows.values()), columns=["task", "defense", "version", "jobs", "ok", "newest"])
    return df.sort_values(["newest", "task", "defense"], ascending=[False, True, True]).reset_index(drop=True)
