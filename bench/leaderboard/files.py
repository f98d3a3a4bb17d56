"""Export (store → entry files), validate (schema + consistency) and build (entries → page).

An entry is a citable record: its defense's ``source`` (the paper it implements, or ``original``)
and ``description`` (its plain summary) are what the plugin declares (:mod:`bench.defense.sources`),
read in a sandboxed child (:func:`declared_isolated`: the harness never imports defense code);
``export`` and ``validate`` refuse an undeclared source or a summary that is not plain sentences.
"""

from __future__ import annotations

import json
import math
import os
import platform
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from bench.core.errors import BenchInputError
from bench.defense.sources import UNDECLARED
from bench.leaderboard import DEFAULT_TOLERANCE
from bench.leaderboard.convert import hardware_of, restore, summarize, tracks_of
from bench.leaderboard.declared import declaration_problems
from bench.leaderboard.declared import declared_isolated as declared_isolated  # re-exported
from bench.leaderboard.entry import (
    BenchInfo,
    DefenseInfo,
    Entry,
    SuiteInfo,
    TrackSummary,
    Verification,
    defense_id,
    schema_json,
)
from bench.leaderboard.gallery import check_images, entry_images
from bench.results.record import JobResult

if TYPE_CHECKING:
    from bench.leaderboard.verify import VerifyReport
from bench.leaderboard.ranking import split_versions

#: numbers an entry states and ``validate`` recomputes must agree to this (relative) tolerance
TOLERANCE = 1e-9
#: the check :func:`record_verification` names (the command that re-ran the entry's jobs)
VERIFY_CHECK = "python -m bench leaderboard verify"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.replace(tmp, path)


def entry_text(entry: Entry) -> str:
    return json.dumps(entry.model_dump(mode="json"), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def write_entry(path: Path, entry: Entry) -> None:  # as committed (entry_text), atomically
    _write(path, entry_text(entry))


def _defense_info(first: JobResult, label: str, declarations: dict[str, dict[str, Any]]) -> DefenseInfo:
    code = first.provenance.get("code") or {}
    declared = declarations.get(first.defense_name) or {}
    return DefenseInfo(
        name=first.defense_name,
        label=label,
        params=dict(first.defense_params),
        source_hash=str(code.get("defense", "")) if isinstance(code, dict) else "",
        source=declared.get("source", UNDECLARED),
        description=str(declared.get("summary", "")),
    )


def build_entries(
    results: list[JobResult], suite: str, tasks: list[str], declarations: dict[str, dict[str, Any]]
) -> list[Entry]:
    """One entry per defense label from the store's jobs of ``tasks`` (the newest version of each);
    ``declarations``: per defense name, its ``source`` and ``summary`` (:func:`declared_isolated`;
    a name it lacks is ``undeclared``)."""
    results, _ = split_versions([r for r in results if r.task in set(tasks)])
    by_label: dict[str, list[JobResult]] = defaultdict(list)
    for r in results:
        by_label[r.defense].append(r)
    out = []
    for label, jobs in sorted(by_label.items()):
        jobs.sort(key=lambda r: (r.task, r.seed))
        first = jobs[0]
        out.append(
            Entry(
                defense=_defense_info(first, label, declarations),
                suite=SuiteInfo(
                    name=suite, spec_hashes={r.task: str(r.provenance.get("spec_hash", "")) for r in jobs}
                ),
                bench=BenchInfo(
                    version=str((first.provenance.get("packages") or {}).get("bench", "")),
                    commit=str(first.provenance.get("commit", "")),
                    dirty=any(r.provenance.get("dirty") is True for r in jobs),
                ),
                hardware=hardware_of(first.provenance),
                date=max(str(r.provenance.get("timestamp", "")) for r in jobs)[:10],
                runtime_s=float(sum(r.runtime_s for r in jobs)),
                tracks=tracks_of(jobs),
                jobs=[summarize(r) for r in jobs],
            )
        )
    return out


def export(
    results: list[JobResult],
    suite: str,
    tasks: list[str],
    folder: Path,
    declarations: dict[str, dict[str, Any]],
    out_dir: Path | None = None,
    require_declared: bool = True,
    expected: Callable[[Entry], dict[str, list[int]] | None] | None = None,
) -> list[Path]:
    """Write ``folder/<suite>/<defense-id>.json`` for every defense label; returns the paths written.

    ``expected`` gives each entry's ``suite.expected`` (what the suite plans for its defense:
    :func:`bench.leaderboard.coverage.expected_jobs`); without it none (shown as partial).

    With ``require_declared`` (unless ``--allow-uncommitted``) nothing is written while an entry
    has a :func:`declaration_problems` problem: an input error names each defense and what it lacks.

    An existing entry whose results the new one reproduces (:func:`~bench.leaderboard.verify.
    same_results`: the same jobs, every number within the verify tolerance) is left as it is, so
    re-running the suite and exporting again changes no file and no page (only the run's date,
    runtimes and commit would differ). So is one of the same jobs (job keys) computed on another
    kind of machine (:func:`~bench.leaderboard.verify.same_hardware`), whose numbers differ by
    rounding alone: a re-run elsewhere does not replace them; a change of code does."""
    from bench.leaderboard.gallery import collect
    from bench.leaderboard.verify import same_hardware, same_jobs, same_results

    paths = []
    built = build_entries(results, suite, tasks, declarations)
    problems = [p for e in built for p in declaration_problems(e)] if require_declared else []
    if problems:
        why = "; ".join(problems) + " (--allow-uncommitted for a local look)"
        raise BenchInputError("leaderboard export", suite, reason=why)
    for entry in built:
        if expected is not None:
            suite_info = entry.suite.model_copy(update={"expected": expected(entry)})
            entry = entry.model_copy(update={"suite": suite_info})
        path = folder / suite / f"{defense_id(entry.defense.label)}.json"
        if path.is_file():
            try:
                old = load_entry(path)
                same = same_jobs(old, entry) and old.suite.expected == entry.suite.expected
                if same and (not same_hardware(old, entry) or same_results(old, entry)):
                    continue  # and its images stay as they are
            except BenchInputError:
                pass  # an unreadable or invalid file is replaced
        entry = collect(entry, [r for r in results if r.defense == entry.defense.label], out_dir, path.parent)
        _write(path, entry_text(entry))
        paths.append(path)
    return paths


def load_entry(path: Path) -> Entry:
    """Read and schema-check one entry (an input error naming the file and the field)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchInputError(str(path), path.name, reason=f"not a readable JSON entry ({exc})") from None
    try:
        return Entry.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise BenchInputError(f"{path}: {where}", err.get("input"), reason=err["msg"]) from None


def jobs_of(entry: Entry) -> list[JobResult]:
    """The entry's jobs as records; a partial entry's carry ``provenance["coverage"]`` (what it
    misses, :func:`bench.leaderboard.coverage.gap`), which keeps it out of the ranking."""
    from bench.leaderboard.coverage import gap

    d = entry.defense
    jobs = [restore(j, d.label, d.name, d.params) for j in entry.jobs]
    if why := gap(entry):
        for r in jobs:
            r.provenance["coverage"] = why
    return jobs


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def inconsistencies(entry: Entry) -> list[str]:
    """Where the entry's stated aggregates differ from those recomputed from its jobs."""
    stated = {t.track: t for t in entry.tracks}
    again = {t.track: t for t in tracks_of(jobs_of(entry))}
    problems = []
    for track in sorted(set(stated) | set(again)):
        a, b = stated.get(track), again.get(track)
        if a is None or b is None:
            problems.append(f"track {track}: {'missing' if a is None else 'not backed by any job'}")
            continue
        for field in TrackSummary.model_fields:
            x, y = getattr(a, field), getattr(b, field)
            if field == "leakage":
                keys = set(x) | set(y)
                bad = [k for k in sorted(keys) if not _close(x.get(k), y.get(k))]
                problems += [
                    f"track {track}: leakage[{k}] stated {x.get(k)}, recomputed {y.get(k)}" for k in bad
                ]
            elif isinstance(x, float) or isinstance(y, float):
                if not _close(x, y):
                    problems.append(f"track {track}: {field} stated {x}, recomputed {y}")
            elif x != y:
                problems.append(f"track {track}: {field} stated {x!r}, recomputed {y!r}")
    return problems


def validate(paths: list[Path], require_declared: bool = False) -> list[Entry]:
    """Schema and consistency of every entry; an input error listing every problem. With
    ``require_declared`` an undeclared source or a summary that is not plain sentences is one too
    (:func:`declaration_problems`; ``leaderboard validate`` without ``--allow-uncommitted``)."""
    entries, problems, where = [], [], []
    for path in paths:
        try:
            entry = load_entry(path)
        except BenchInputError as exc:
            problems.append(exc.message)
            continue
        problems += [f"{path}: {p}" for p in inconsistencies(entry) + check_images(entry, path)]
        if require_declared:
            problems += [f"{path}: {p}" for p in declaration_problems(entry)]
        entries.append(entry)
        where.append(path)
    problems += duplicates(entries, where)
    if problems:
        raise BenchInputError("leaderboard entries", len(problems), reason="; ".join(problems))
    return entries


def duplicates(entries: list[Entry], paths: list[Path]) -> list[str]:
    """The same entry (suite and defense label) or the same job (key) in two files: each would
    count twice (its seeds doubled on the page), so each is a problem naming both files."""
    problems, labels, keys = [], {}, {}
    for entry, path in zip(entries, paths, strict=True):
        label = (entry.suite.name, entry.defense.label)
        if label in labels:
            first = labels[label]
            problems.append(f"{path}: the entry {label[1]!r} of suite {label[0]!r} is also in {first}")
        labels.setdefault(label, path)
        for job in entry.jobs:
            if job.key in keys and keys[job.key] != path:
                problems.append(
                    f"{path}: job {job.key} ({job.task} seed {job.seed}) is also in {keys[job.key]}"
                )
            keys.setdefault(job.key, path)
    return problems


def entry_paths(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise BenchInputError("--entries", str(folder), reason="no such folder")
    return sorted(folder.rglob("*.json"))


def changed_entries(root: Path, folder: Path, ref: str) -> list[Path]:
    """The entry files under ``folder`` added or modified since the git ref ``ref`` (a pull request's
    entries, for CI), and the ones git does not track yet (an entry not committed is still
    verified, never passed over in silence); deleted files are not listed."""
    import subprocess

    if not ref or ref.startswith("-"):  # never an option of git's (e.g. "--output=FILE")
        raise BenchInputError("--changed-since", ref, reason="expected a git revision, not an option")
    try:
        subprocess.run(  # the value is a revision (after --end-of-options git reads no option)
            ["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        raise BenchInputError(
            "--changed-since", ref, reason="not a git revision of this repository"
        ) from None
    try:
        out = subprocess.run(
            [
                "git",
                "diff",
                "--name-only",
                "--diff-filter=AMR",
                "--end-of-options",
                ref,
                "--",
                str(folder.resolve()),
            ],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        why = getattr(exc, "stderr", "") or str(exc)
        raise BenchInputError("--changed-since", ref, reason=f"git diff failed: {why.strip()}") from None
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "--full-name", "--", str(folder.resolve())],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = {*out.splitlines(), *untracked.splitlines()}
    return sorted(Path(top) / line for line in lines if line.endswith(".json"))


def verification_commit(root: Path, entries: Path | None, allow_uncommitted: bool = False) -> str:
    """The commit a verification names: git ``HEAD`` of ``root``. A checkout with uncommitted
    changes outside ``entries`` (or whose state git cannot tell) is refused, unless
    ``allow_uncommitted``: the commit is then ``<sha>+uncommitted``."""
    from bench.results.provenance import git_state

    state = git_state(root, ignore=entries)
    commit = str(state["commit"])
    if state["dirty"] is False:
        return commit
    if not allow_uncommitted:
        why = "has uncommitted changes (git status)" if state["dirty"] else "is not a git checkout"
        raise BenchInputError(
            "leaderboard verify --record",
            str(root),
            reason=f"the checkout {why}: a verification names the commit it ran, commit first "
            "(--allow-uncommitted records <commit>+uncommitted)",
        )
    return f"{commit}+uncommitted"


def verification_machine() -> str:
    """The machine a verification ran on: its architecture and CPU model (as ``hardware`` has them)."""
    from bench.results.provenance import cpu_model

    return f"{platform.machine()}, {cpu_model()}"


def record_verification(
    path: Path,
    entry: Entry,
    report: VerifyReport,
    root: Path,
    entries: Path | None = None,
    allow_uncommitted: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
) -> None:
    """Write ``verified`` into the entry file, with the re-run jobs, the check that ran them
    (:data:`VERIFY_CHECK`) and its ``tolerance``, the commit of ``root``
    (:func:`verification_commit`: refused from a checkout with uncommitted changes outside
    ``entries`` unless ``allow_uncommitted``) and the machine (deterministic: no date)."""
    commit = verification_commit(root, entries, allow_uncommitted)
    runs = ", ".join(f"{t} seed {s}" for t, s in report.rerun)
    verification = Verification(
        status="verified",
        details=f"re-ran {runs}",
        commit=commit,
        machine=verification_machine(),
        check=VERIFY_CHECK,
        tolerance=tolerance,
    )
    _write(path, entry_text(entry.model_copy(update={"verification": verification})))


def write_schema(path: Path) -> None:
    _write(path, schema_json())


def build(
    paths: list[Path],
    site: Path,
    tasks: dict[str, object],
    claims: Path | None = None,
    order: list[str] | None = None,
    suites: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """The page from the entries alone (no store): the same tables and figures as ``evaluate``,
    and the claims report of ``python -m bench reproduce --json`` when ``claims`` is given;
    ``order``: the headline order of the tasks (the suites' ``tasks``); ``suites``: ``name ->
    {"description", "tasks"}`` of the suites, a page section each (:func:`page_suites` orders
    them: real data first)."""
    from bench.claims.report import load_json
    from bench.leaderboard.ranking import entry_table, superseded_versions, tables_by_track
    from bench.leaderboard.site import write_site
    from bench.leaderboard.site.graph_figure import track_figures
    from bench.leaderboard.site.mia_figure import membership_figures

    entries = validate(paths)
    results = [r for e in entries for r in jobs_of(e)]
    names = sorted({e.suite.name for e in entries})
    commits = sorted({e.bench.commit[:12] for e in entries if e.bench.commit})
    meta = {
        "suite": ", ".join(names),
        "entries": len(entries),
        "jobs": len(results),
        "commit": ", ".join(commits),
        "generated_from": "committed entries (leaderboard/entries)",
        "latest_entry": max((e.date for e in entries), default=""),
    }
    df = entry_table(results)
    return write_site(
        tables_by_track(df),
        site,
        meta,
        superseded_versions(results),
        track_figures(results, tasks),
        entries=entries,
        tasks=tasks,
        images=entry_images(list(zip(entries, paths, strict=True))),
        membership=membership_figures(results),
        claims=None if claims is None else load_json(claims),
        order=order or (),
        suites=suites,
    )


#: the suites' order on the page: real data first, then the CPU-sized quick suite; any other
#: suite follows in alphabetical order
SUITE_PAGE_ORDER = ("real", "quick")


def page_suites(suites: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``name -> {"description", "tasks"}`` of the catalog's ``suites`` (name -> Suite) in
    :data:`SUITE_PAGE_ORDER`."""

    def place(name: str) -> tuple[int, str]:
        known = SUITE_PAGE_ORDER.index(name) if name in SUITE_PAGE_ORDER else len(SUITE_PAGE_ORDER)
        return (known, name)

    return {
        name: {"description": suites[name].description, "tasks": list(suites[name].tasks)}
        for name in sorted(suites, key=place)
    }
