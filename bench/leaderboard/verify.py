"""``leaderboard verify``: re-run a cheap, deterministic subset of an entry's jobs and compare.

``validate`` checks that an entry's aggregates follow from its per-seed job summaries; ``verify``
checks that the job summaries follow from the code. For every task of the entry it re-runs one
seed (all of them with ``all_seeds``) with the current code, in a temporary store, and compares
each number the entry states for that job — the utility (and the undefended job's central
reference utility and the task's ranking rule), the privacy score per threat model,
every attack's status and leakage, the ε lower bound and the DP ε — with the re-run's:

    |stated − re-run| ≤ tolerance · max(1, |stated|)

Which seed: among the task's successful seeds, the one at index ``sha256(label ␟ task) mod n``.
The choice is fixed for an entry (two verifications re-run the same jobs) but differs between
tasks and defenses, so verifying the whole board covers every seed index. A hand edit of one
seed's summary that also keeps the aggregates consistent is caught when that seed is the chosen
one, and always with ``all_seeds``.

An entry made by other code (a job key that differs from the one the current code gives the same
task, defense and seed: the defense source, an attack, the engine or the task spec changed) is
*stale*, not verified: its numbers are not expected to reproduce, and it must be exported again.

Each job is re-run with the intra-op thread count it ran with (recorded in its summary): a job is
deterministic given its seed and thread count on one machine, but float reductions change in the
last bits with the thread count, and optimization-based attacks (DLG, Inverting Gradients)
amplify that — measured here: 2 threads instead of 1 moved a DLG leakage by 5e-4 relative. On
another CPU, vector instructions may do the same; ``tolerance`` (default 1e-6, relative to
``max(1, |stated|)``) is the knob, and a mismatch prints both numbers. A mismatch on another
kind of machine than the entry's (:func:`same_hardware`) is still a failure — a stated machine
cannot excuse other numbers — and the report names both machines
(:meth:`VerifyReport.hardware_note`).
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench.leaderboard import DEFAULT_TOLERANCE
from bench.leaderboard.convert import hardware_of, summarize
from bench.leaderboard.entry import Entry, JobSummary

if TYPE_CHECKING:
    from bench.evaluation.job import Job
    from bench.results.record import JobResult

__all__ = [
    "DEFAULT_TOLERANCE",
    "NUMERIC_HARDWARE",
    "VerifyReport",
    "chosen_jobs",
    "compare_jobs",
    "rerun_jobs",
    "same_hardware",
    "same_jobs",
    "same_numeric_hardware",
    "same_results",
    "verify_entry",
]


@dataclass
class VerifyReport:
    """What ``verify`` found for one entry."""

    label: str
    rerun: list[tuple[str, int]] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    #: ``(task, seed)`` of the jobs behind ``mismatches`` and ``stale``
    unreproduced: set[tuple[str, int]] = field(default_factory=set)
    #: the entry's and the re-run's :data:`NUMERIC_HARDWARE` when they differ (then the numbers
    #: are not expected to agree to the tolerance; see :func:`same_hardware`)
    hardware: tuple[dict[str, str], dict[str, str]] | None = None

    def hardware_note(self) -> str | None:
        """Why mismatches may be rounding, when the re-run ran on another kind of machine."""
        if self.hardware is None:
            return None
        made, here = (", ".join(f"{k} {h[k]}" for k in NUMERIC_HARDWARE if k in h) for h in self.hardware)
        return (
            f"the entry was made on another kind of machine ({made}) than this re-run ({here}): "
            "numbers reproduce to the tolerance only on the same kind of machine, so export the "
            "entry again on this one or verify it on the entry's"
        )

    @property
    def ok(self) -> bool:
        return bool(self.rerun) and not self.mismatches and not self.stale


def chosen_jobs(entry: Entry, all_seeds: bool = False) -> list[JobSummary]:
    """The job summaries to re-run: one seed per task (see the module docstring), or all."""
    by_task: dict[str, list[JobSummary]] = {}
    for job in entry.jobs:
        by_task.setdefault(job.task, []).append(job)
    chosen = []
    for task, jobs in sorted(by_task.items()):
        jobs.sort(key=lambda j: j.seed)
        if all_seeds:
            chosen += jobs
            continue
        pool = [j for j in jobs if j.status == "ok"] or jobs
        digest = hashlib.sha256(f"{entry.defense.label}\x1f{task}".encode()).digest()
        chosen.append(pool[int.from_bytes(digest[:8], "big") % len(pool)])
    return chosen


def _differs(a: float | None, b: float | None, tolerance: float) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    if math.isinf(a) or math.isinf(b):
        return a != b
    return abs(a - b) > tolerance * max(1.0, abs(a))


def compare_jobs(stated: JobSummary, again: JobSummary, tolerance: float = DEFAULT_TOLERANCE) -> list[str]:
    """Every number of ``stated`` that the re-run ``again`` does not reproduce, as text."""
    where = f"{stated.task} seed {stated.seed}"
    out: list[str] = []

    def check(name: str, a: float | None, b: float | None) -> None:
        if _differs(a, b, tolerance):
            out.append(f"{where}: {name} stated {a}, re-run {b}")

    if stated.status != again.status:
        out.append(f"{where}: status stated {stated.status}, re-run {again.status} ({again.reason or ''})")
    check("utility", stated.utility, again.utility)
    check("utility_reference", stated.utility_reference, again.utility_reference)
    if stated.utility_rule != again.utility_rule:
        out.append(f"{where}: utility rule stated {stated.utility_rule}, re-run {again.utility_rule}")
    check("epsilon", stated.epsilon, again.epsilon)
    for threat in sorted(set(stated.privacy) | set(again.privacy)):
        check(f"privacy[{threat}]", stated.privacy.get(threat), again.privacy.get(threat))
    for name in sorted(set(stated.series) | set(again.series)):
        check(name, stated.series.get(name), again.series.get(name))
    mine = {(a.threat, a.attack): a for a in again.attacks}
    theirs = {(a.threat, a.attack): a for a in stated.attacks}
    for key in sorted(set(mine) | set(theirs)):
        name = f"{key[0]}/{key[1]}"
        a, b = theirs.get(key), mine.get(key)
        if a is None or b is None:
            out.append(f"{where}: attack {name} {'not in the entry' if a is None else 'not re-run'}")
            continue
        if a.status != b.status:
            out.append(f"{where}: attack {name} status stated {a.status}, re-run {b.status}")
        check(f"leakage[{name}]", a.leakage, b.leakage)
        for metric in sorted(set(a.metrics) | set(b.metrics)):
            check(f"{name} {metric}", a.metrics.get(metric), b.metrics.get(metric))
    return out


#: the ``entry.hardware`` fields that decide a job's rounding: the CPU model, the vector instruction
#: set of PyTorch's CPU kernels and the torch build (MKL and PyTorch pick their kernels by these)
NUMERIC_HARDWARE = ("cpu", "isa", "torch")


def same_hardware(old: Entry, new: Entry) -> bool:
    """Whether two entries' jobs ran on the same kind of machine: equal in every field of
    :data:`NUMERIC_HARDWARE` that both record (an entry from before a field was recorded is not
    told apart by it).

    Entries reproduce to :data:`DEFAULT_TOLERANCE` only there. Across CPU types the same code
    rounds differently (other kernels, other summation orders), and training and the iterative
    attacks amplify it: the quick suite re-run with unchanged code on an Intel AVX-512 machine
    differed beyond the tolerance from the entries an AMD EPYC machine had exported on 9 of its
    13 tasks (a track's mean leakage by up to 0.12), as much with PyTorch's, MKL's and oneDNN's
    kernels held to AVX2; the tasks of closed-form and linear-algebra attacks agreed."""
    return same_numeric_hardware(old.hardware, new.hardware)


def same_numeric_hardware(a: dict[str, str], b: dict[str, str]) -> bool:
    """:func:`same_hardware` on two ``hardware`` mappings."""
    return all(a.get(k) == b.get(k) for k in NUMERIC_HARDWARE if k in a and k in b)


def same_results(old: Entry, new: Entry, tolerance: float = DEFAULT_TOLERANCE) -> bool:
    """``new`` reproduces ``old``: the same defense, suite and jobs (keys), every job's numbers
    within ``tolerance`` (:func:`compare_jobs`), the same declared source and description. What a
    re-run changes anyway — dates, runtimes, the commit, the hardware — is not compared."""
    if not same_jobs(old, new):
        return False
    mine = {j.key: j for j in new.jobs}
    return not any(compare_jobs(j, mine[j.key], tolerance) for j in old.jobs)


def same_jobs(old: Entry, new: Entry) -> bool:
    """The same defense and suite, and the same job keys: the same task specs, seeds, defense
    source, attack code and engine (:mod:`bench.results.code_digest`)."""
    return (old.defense, old.suite) == (new.defense, new.suite) and {j.key for j in new.jobs} == {
        j.key for j in old.jobs
    }


def verify_entry(
    entry: Entry,
    root: Path,
    *,
    all_seeds: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    parallel: int = 1,
) -> VerifyReport:
    """Re-run the chosen jobs of ``entry`` with the code under ``root`` and compare."""
    report, _ = rerun_jobs(entry, chosen_jobs(entry, all_seeds), root, tolerance=tolerance, parallel=parallel)
    return report


def rerun_jobs(
    entry: Entry,
    chosen: list[JobSummary],
    root: Path,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    parallel: int = 1,
    out_dir: Path | None = None,
) -> tuple[VerifyReport, dict[str, JobResult]]:
    """Re-run the jobs ``chosen`` of ``entry`` (each with its recorded drawn rounds and thread
    count) with the code under ``root``, in a temporary store, and compare each with the
    entry's summary; also the re-run results by job key. ``out_dir``: where the jobs write their
    reconstruction grids (``evaluate --out``)."""
    from bench.core.errors import BenchInputError
    from bench.evaluation.grid import plan_jobs, run_grid
    from bench.results.store import ResultStore
    from bench.spec.catalog import Catalog
    from bench.spec.schema import DefenseSpec, RunSpec

    report = VerifyReport(entry.defense.label)
    catalog = Catalog(root)
    defense = DefenseSpec(name=entry.defense.name, params=entry.defense.params)
    if defense.label != entry.defense.label:
        raise BenchInputError(
            "defense.label", entry.defense.label, reason=f"its parameters give {defense.label}"
        )
    specs = [RunSpec(task=catalog.task(j.task), defense=defense, seed=j.seed) for j in chosen]
    jobs, skipped = plan_jobs(specs, root, [defense])
    by_run = {(j.spec.task.name, j.spec.seed): j for j in jobs}
    runnable = []
    for stated in chosen:
        job = by_run.get((stated.task, stated.seed))
        if job is None or job.key != stated.key:  # stale: nothing to re-run
            report.unreproduced.add((stated.task, stated.seed))
        if job is None:
            why = next((r for t, _, r in skipped if t == stated.task), "not planned")
            report.stale.append(f"{stated.task} seed {stated.seed}: the defense no longer applies ({why})")
        elif job.key != stated.key:
            report.stale.append(
                f"{stated.task} seed {stated.seed}: made by other code or another task spec "
                f"(job key {stated.key[:12]}, now {job.key[:12]}); export the entry again"
            )
        else:
            if stated.attacked_rounds is not None:  # the same rounds as the entry's run
                job.later = tuple(stated.attacked_rounds)
            runnable.append((stated, job))
    if not runnable:
        return report, {}
    groups: dict[int, list[Job]] = {}
    for stated, job in runnable:  # the threads each job ran with: the last bits depend on them
        groups.setdefault(stated.threads or 1, []).append(job)
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        with ResultStore(str(Path(tmp) / "results.sqlite")) as store:
            for threads, group in sorted(groups.items()):
                run_grid(
                    group, store, root, parallel=parallel, progress=False, threads=threads, out_dir=out_dir
                )
            results = {r.key: r for r in store.results()}
    for stated, job in runnable:
        report.rerun.append((stated.task, stated.seed))
        result = results.get(job.key)
        if result is not None and report.hardware is None:
            here = hardware_of(result.provenance)
            if not same_numeric_hardware(entry.hardware, here):
                report.hardware = (entry.hardware, here)
        differs = (
            compare_jobs(stated, summarize(result), tolerance)
            if result is not None
            else [f"{stated.task} seed {stated.seed}: the re-run stored no result"]
        )
        if differs:
            report.unreproduced.add((stated.task, stated.seed))
        report.mismatches += differs
    return report, results
