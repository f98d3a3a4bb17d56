"""``leaderboard current``: are the committed entries what this code would export?

A job's key (:class:`bench.evaluation.job.Job`) hashes everything its numbers depend on in bench: the
task spec, the seed, the defense's parameters and source, the code of every attack the job runs
and the engine's code (:mod:`bench.results.code_digest`). A job is deterministic given its key,
its thread count and the numeric kind of the machine (CPU model, vector instruction set, torch
build: :data:`~bench.leaderboard.verify.NUMERIC_HARDWARE`) — which is what ``verify`` checks
whenever entries are exported (``verify --record`` writes the outcome into each entry).

So when the jobs a suite plans with this code have exactly the keys of the committed entries'
jobs, and this machine is of the entries' numeric kind, re-running the suite can only write the
same entries again: CI (``.ci/run``) then skips the re-run. Any difference — a job the suite plans
that no entry holds (a new defense, a changed task spec or code), a committed job it no longer
plans, or another kind of machine — makes CI re-run the whole suite and compare the export, as it
always did. What the keys do not cover is the versions of the other installed libraries (NumPy,
scikit-learn's bundled data, NetworkX …): ``pyproject.toml`` bounds them, and ``verify`` re-runs
one seed of each task of each entry where that matters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.leaderboard.entry import Entry

__all__ = ["Currency", "compare", "currency", "planned"]


@dataclass
class Currency:
    """How the committed entries of a suite compare with what this code plans for it.

    Attributes
    ----------
    jobs:
        Jobs the suite plans with this code.
    missing:
        ``defense task seed`` of planned jobs whose key no committed entry holds.
    extra:
        ``defense task seed`` of committed jobs the suite no longer plans with that key.
    hardware:
        Entries made on another numeric kind of machine than this one (their labels).
    """

    jobs: int = 0
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    hardware: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.hardware)

    def lines(self, limit: int = 10) -> list[str]:
        """What differs, a line per kind (at most ``limit`` jobs named per kind)."""
        out = []
        for what, items in (
            ("planned, in no entry", self.missing),
            ("in an entry, not planned", self.extra),
            ("entries made on another kind of machine", self.hardware),
        ):
            if items:
                more = f" … and {len(items) - limit} more" if len(items) > limit else ""
                out.append(f"{what} ({len(items)}): {', '.join(items[:limit])}{more}")
        return out


def currency(root: Path, suite_name: str, entries: list[Entry], here: dict[str, str]) -> Currency:
    """:func:`compare` the committed ``entries`` with the jobs :func:`planned` for ``suite_name``
    with the code under ``root``; ``here`` is this machine's hardware as an entry records it
    (:func:`bench.leaderboard.files.hardware_of`)."""
    return compare(planned(root, suite_name), suite_name, entries, here)


def planned(root: Path, suite_name: str) -> dict[str, str]:
    """``key -> "defense task seed"`` of every job ``evaluate`` plans for ``suite_name`` (its
    tasks, defenses and seeds) with the code under ``root``."""
    from bench.evaluation.grid import expand_grid, plan_jobs
    from bench.spec.catalog import Catalog

    catalog = Catalog(root)
    suite = catalog.suite(suite_name)
    specs = expand_grid(catalog, list(suite.tasks), suite.defenses, suite.seeds)
    jobs, _ = plan_jobs(specs, root, suite.defenses)
    return {j.key: f"{j.spec.defense.label} {j.spec.task.name} {j.spec.seed}" for j in jobs}


def compare(jobs: dict[str, str], suite_name: str, entries: list[Entry], here: dict[str, str]) -> Currency:
    """The planned ``jobs`` (:func:`planned`) against the jobs of the ``entries`` of that suite,
    and the entries' machines against ``here``."""
    from bench.leaderboard.verify import same_numeric_hardware

    mine = [e for e in entries if e.suite.name == suite_name]
    held = {j.key: f"{e.defense.label} {j.task} {j.seed}" for e in mine for j in e.jobs}
    return Currency(
        jobs=len(jobs),
        missing=sorted(v for k, v in jobs.items() if k not in held),
        extra=sorted(v for k, v in held.items() if k not in jobs),
        hardware=sorted(e.defense.label for e in mine if not same_numeric_hardware(e.hardware, here)),
    )
