"""Export (store → entry files), validate (schema + consistency) and build (entries → page)."""

from __future__ import annotations

import json
import math
import os
import platform
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from bench.errors import BenchInputError
from bench.leaderboard.convert import restore, summarize, tracks_of
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
from bench.scoring import split_versions

#: numbers an entry states and ``validate`` recomputes must agree to this (relative) tolerance
TOLERANCE = 1e-9


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.replace(tmp, path)


def entry_text(entry: Entry) -> str:
    return json.dumps(entry.model_dump(mode="json"), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


#: ``entry.hardware`` key ← job provenance key (:func:`bench.results.provenance.provenance`)
HARDWARE_FIELDS: dict[str, str] = {
    "device": "device",
    "machine": "machine",
    "cpu": "cpu",
    "cpus": "cpus",
    "threads": "threads",
    "isa": "isa",
    "torch": "torch_build",
}


def hardware_of(provenance: dict) -> dict[str, str]:
    """What ran a job, as an entry shows it: device, architecture, CPU model, logical CPUs,
    intra-op threads, the vector instruction set of the CPU kernels and the torch build. Results
    stored before a field was recorded lack it; it is left out rather than guessed (the
    architecture falls back to this machine's, as before)."""
    known = {**provenance, "machine": provenance.get("machine", platform.machine())}
    return {k: str(known[src]) for k, src in HARDWARE_FIELDS.items() if known.get(src) not in (None, "")}


def build_entries(
    results: list[JobResult], suite: str, tasks: list[str], descriptions: dict[str, str]
) -> list[Entry]:
    """One entry per defense label from the store's jobs of ``tasks`` (the newest version of each)."""
    results, _ = split_versions([r for r in results if r.task in set(tasks)])
    by_label: dict[str, list[JobResult]] = defaultdict(list)
    for r in results:
        by_label[r.defense].append(r)
    out = []
    for label, jobs in sorted(by_label.items()):
        jobs.sort(key=lambda r: (r.task, r.seed))
        first = jobs[0]
        code = first.provenance.get("code") or {}
        out.append(
            Entry(
                defense=DefenseInfo(
                    name=first.defense_name,
                    label=label,
                    params=dict(first.defense_params),
                    source_hash=str(code.get("defense", "")) if isinstance(code, dict) else "",
                    description=descriptions.get(first.defense_name, ""),
                ),
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
    descriptions: dict[str, str],
    out_dir: Path | None = None,
) -> list[Path]:
    """Write ``folder/<suite>/<defense-id>.json`` for every defense label; returns the paths written.

    An existing entry whose results the new one reproduces (:func:`~bench.leaderboard.verify.
    same_results`: the same jobs, every number within the verify tolerance) is left as it is, so
    re-running the suite and exporting again changes no file and no page (only the run's date,
    runtimes and commit would differ). So is one of the same jobs (job keys: the same code,
    specs and seeds) computed on another kind of machine (:func:`~bench.leaderboard.verify.
    same_hardware`), whose numbers differ by rounding alone: a re-run elsewhere does not replace
    them; a change of code does."""
    from bench.leaderboard.gallery import collect
    from bench.leaderboard.verify import same_hardware, same_jobs, same_results

    paths = []
    for entry in build_entries(results, suite, tasks, descriptions):
        path = folder / suite / f"{defense_id(entry.defense.label)}.json"
        if path.is_file():
            try:
                old = load_entry(path)
                if same_jobs(old, entry) and (not same_hardware(old, entry) or same_results(old, entry)):
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
    d = entry.defense
    return [restore(j, d.label, d.name, d.params) for j in entry.jobs]


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


def validate(paths: list[Path]) -> list[Entry]:
    """Schema and consistency of every entry; an input error listing every problem."""
    entries, problems = [], []
    for path in paths:
        try:
            entry = load_entry(path)
        except BenchInputError as exc:
            problems.append(exc.message)
            continue
        problems += [f"{path}: {p}" for p in inconsistencies(entry) + check_images(entry, path)]
        entries.append(entry)
    if problems:
        raise BenchInputError("leaderboard entries", len(problems), reason="; ".join(problems))
    return entries


def entry_paths(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise BenchInputError("--entries", str(folder), reason="no such folder")
    return sorted(folder.rglob("*.json"))


def changed_entries(root: Path, folder: Path, ref: str) -> list[Path]:
    """The entry files under ``folder`` added or modified since the git ref ``ref`` (a pull request's
    entries, for CI); deleted files are not listed."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "diff", "--name-only", "--diff-filter=AMR", ref, "--", str(folder.resolve())],
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
    return sorted(Path(top) / line for line in out.splitlines() if line.endswith(".json"))


def record_verification(path: Path, entry: Entry, report: VerifyReport) -> None:
    """Write ``verified`` and the re-run jobs into the entry file (deterministic: no date)."""
    from bench.catalog import bench_root
    from bench.results.provenance import git_state

    runs = ", ".join(f"{t} seed {s}" for t, s in report.rerun)
    commit = str(git_state(bench_root(None))["commit"])[:12]
    entry = entry.model_copy(
        update={"verification": Verification(status="verified", details=f"re-ran {runs} at {commit}")}
    )
    _write(path, entry_text(entry))


def write_schema(path: Path) -> None:
    _write(path, schema_json())


def build(paths: list[Path], site: Path, tasks: dict[str, object], claims: Path | None = None) -> Path:
    """The page from the entries alone (no store): the same tables and figures as ``evaluate``,
    and the claims report of ``python -m bench reproduce --json`` when ``claims`` is given."""
    from bench.claims.report import load_json
    from bench.scoring import entry_table, superseded_versions, tables_by_track
    from bench.site import write_site
    from bench.site.graph_figure import track_figures
    from bench.site.mia_figure import membership_figures

    entries = validate(paths)
    results = [r for e in entries for r in jobs_of(e)]
    suites = sorted({e.suite.name for e in entries})
    commits = sorted({e.bench.commit[:12] for e in entries if e.bench.commit})
    meta = {
        "suite": ", ".join(suites),
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
    )
