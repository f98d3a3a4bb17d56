"""Whether an entry covers its suite: every task its defense applies to, with the suite's seeds.

An entry that covers 1 of 13 tasks is not comparable with one that covers all 13: its privacy
is the mean over the tracks it chose. ``leaderboard export`` records what the suite asks of the
entry's defense configuration — ``suite.expected``, ``task -> seeds``: the suite's tasks whose
protocol the defense applies to (the same sandboxed probe as ``evaluate``'s,
:func:`bench.evaluation.grid.plan_jobs`), each with the suite's seeds ``0 … seeds − 1`` — and
``leaderboard validate`` / ``verify`` derive it again and refuse an entry whose record differs
(a submitter cannot shrink it). An entry missing any expected job is **partial**: it is shown,
with what it misses, and not ranked (:func:`gap`, read by the ranking through each job's
``provenance["coverage"]``, :func:`bench.leaderboard.files.jobs_of`).
"""

from __future__ import annotations

from pathlib import Path

from bench.leaderboard.entry import Entry


def expected_jobs(root: Path, suite: str, name: str, params: dict[str, object]) -> dict[str, list[int]]:
    """``task -> seeds`` the suite ``suite`` plans for the defense ``name(params)`` (tasks it
    does not apply to are left out, as ``evaluate`` skips them)."""
    from bench.evaluation.grid import expand_grid, plan_jobs
    from bench.spec.catalog import Catalog
    from bench.spec.schema import DefenseSpec

    catalog = Catalog(root)
    spec = catalog.suite(suite)
    runs = expand_grid(catalog, list(spec.tasks), [DefenseSpec(name=name, params=dict(params))], spec.seeds)
    jobs, _ = plan_jobs(runs, root)
    out: dict[str, list[int]] = {}
    for job in jobs:
        out.setdefault(job.spec.task.name, []).append(int(job.spec.seed))
    return {t: sorted(s) for t, s in out.items()}


def gap(entry: Entry) -> str:
    """Why the entry is partial (``""``: it covers its suite): the tasks and seeds it misses."""
    expected = entry.suite.expected
    if expected is None:
        return "its coverage of the suite is not recorded (export it again)"
    have = {(j.task, j.seed) for j in entry.jobs}
    missing = {t: [s for s in seeds if (t, s) not in have] for t, seeds in expected.items()}
    missing = {t: s for t, s in missing.items() if s}
    if not missing:
        return ""
    whole = sorted(t for t, s in missing.items() if len(s) == len(expected[t]))
    some = sorted(t for t in missing if t not in whole)
    parts = [f"covers {len(expected) - len(whole)} of the {len(expected)} tasks its defense applies to"]
    if whole:
        more = f" and {len(whole) - 4} more" if len(whole) > 4 else ""
        parts.append("missing " + ", ".join(whole[:4]) + more)
    if some:
        seeds = (f"{t} ({', '.join(map(str, missing[t]))})" for t in some[:4])
        parts.append("seeds missing on " + ", ".join(seeds))
    return "; ".join(parts)


def coverage_problems(entries: list[Entry], paths: list[Path], root: Path) -> list[str]:
    """Entries whose recorded ``suite.expected`` is not what the suite plans for their defense
    (derived again here), one problem each, naming the file. An entry whose defense is not a
    plugin of ``root`` is passed over (without ``--allow-uncommitted`` validate refuses it for
    its missing declaration)."""
    from bench.defense.loading import defenses_dir

    problems = []
    for path, entry in zip(paths, entries, strict=True):
        d = entry.defense
        if not (defenses_dir(root) / f"{d.name}.py").is_file():
            continue  # not a plugin of this root: validate's declaration check refuses it (strict)
        try:
            derived = expected_jobs(root, entry.suite.name, d.name, dict(d.params))
        except Exception as exc:  # an unknown suite or defense: say so with the file
            problems.append(f"{path}: its suite's plan cannot be derived ({str(exc).splitlines()[0][:200]})")
            continue
        if entry.suite.expected is not None and entry.suite.expected != derived:
            seeds = sorted({s for v in derived.values() for s in v})
            problems.append(
                f"{path}: suite.expected does not match what suite {entry.suite.name!r} plans for "
                f"{d.label!r} ({len(derived)} tasks, seeds {seeds})"
            )
    return problems
