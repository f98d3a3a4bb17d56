"""``python -m bench leaderboard export | validate | build | schema``: the committed entries."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from bench.commands import COMMANDS
from bench.core.errors import BenchInputError
from bench.leaderboard import DEFAULT_TOLERANCE, MAX_RECORDED_TOLERANCE
from bench.leaderboard.coverage import gap


@COMMANDS.register("leaderboard", "export, validate and build the committed leaderboard entries")
def cmd_leaderboard(args: argparse.Namespace) -> int:
    from bench.leaderboard import files
    from bench.results.store import ResultStore
    from bench.spec.catalog import Catalog, bench_root

    root = bench_root(args.root)
    entries = Path(args.entries) if args.entries else root / "leaderboard" / "entries"
    if args.action == "schema":
        path = root / "leaderboard" / "schema" / "entry.schema.json"
        files.write_schema(path)
        print(f"schema: {path}")
        return 0
    if args.action == "export":
        catalog = Catalog(root)
        suite = catalog.suite(args.suite)
        from bench.results.store_url import refuse_in_memory

        refuse_in_memory(args.store)
        store_url = args.store or str(root / "runs" / "results.sqlite")
        with ResultStore(store_url) as store:
            results = store.results()
        tasks = list(args.task or suite.tasks)
        _refuse_unsandboxed([r for r in results if r.task in set(tasks)])
        if not args.allow_uncommitted:
            _require_clean(root, entries, [r for r in results if r.task in set(tasks)], store_url)
        out = Path(args.out) if args.out else _runs_folder(store_url, root)
        declarations = files.declared_isolated(root)  # plugin code runs in a sandboxed child only
        strict = not args.allow_uncommitted
        from bench.leaderboard.coverage import expected_jobs

        def expected(entry: Any) -> dict[str, list[int]] | None:  # what the suite plans for the defense
            try:
                return expected_jobs(root, suite.name, entry.defense.name, dict(entry.defense.params))
            except BenchInputError:  # not a plugin of this root: recorded as unknown (partial)
                return None

        paths = files.export(
            results, suite.name, tasks, entries, declarations, out, require_declared=strict, expected=expected
        )
        labels = len({r.defense for r in results if r.task in set(tasks)})
        kept = labels - len(paths)
        note = f", {kept} unchanged (their results reproduced)" if kept > 0 else ""
        print(f"{len(paths)} entries written under {entries / suite.name}{note}")
        return 0
    paths = _selected(args, entries, root)
    if args.action == "validate":
        checked = files.validate(paths, require_declared=not args.allow_uncommitted)
        _check_coverage(checked, paths, root)
        partial = sum(1 for e in checked if gap(e))
        note = f" ({partial} partial: shown, not ranked)" if partial else ""
        print(f"{len(checked)} entries valid: schema, recomputed numbers and suite coverage agree{note}")
        return 0
    if args.action == "verify":
        return _verify(args, paths, root, entries)
    if args.action == "gallery":
        return _gallery(args, paths, root)
    if args.action == "current":
        return _current(args, paths, root)
    catalog = Catalog(root)
    tasks = {n: catalog.task(n) for n in catalog.task_names()}
    site = Path(args.site) if args.site else root / "leaderboard" / "site"
    claims = Path(args.claims) if args.claims else root / "leaderboard" / "claims" / "quick.json"
    if args.claims and not claims.is_file():
        raise BenchInputError(
            "--claims", args.claims, reason="no such file (write it with python -m bench reproduce --json)"
        )
    suites = files.page_suites(catalog.suites())
    order = [t for s in suites.values() for t in s["tasks"]]  # the suites' headline order
    page = files.build(paths, site, tasks, claims if claims.is_file() else None, order, suites)
    print(f"page: {page}")
    return 0


def _require_clean(root: Path, entries: Path, results: list[Any], store_url: str) -> None:
    """An entry is a citable record of code: ``export`` refuses a checkout with uncommitted
    changes outside the entries it writes (its defenses' declared sources and summaries would
    come from unnamed code) and jobs run from one (their numbers would), unless ``--allow-uncommitted``."""
    from bench.results.provenance import git_state

    if git_state(root, ignore=entries)["dirty"]:
        raise BenchInputError(
            "leaderboard export",
            str(root),
            reason="the checkout has uncommitted changes (git status): commit them first, so that the "
            "entries name the code they come from (--allow-uncommitted for a local look)",
        )
    dirty = sorted({r.task for r in results if r.provenance.get("dirty") is True})
    if dirty:
        raise BenchInputError(
            "--store",
            store_url,
            reason=f"jobs of {', '.join(dirty)} ran from a checkout with uncommitted changes: re-run them "
            "from a clean commit (--allow-uncommitted for a local look)",
        )


def _runs_folder(store_url: str, root: Path) -> Path:
    """Where the run that filled the store wrote its PNG grids: the SQLite file's folder (the
    ``--out`` of ``evaluate``, whose store defaults to ``OUT/results.sqlite``), else ``runs/``."""
    path = store_url.removeprefix("sqlite:///") if store_url.startswith("sqlite:///") else store_url
    return Path(path).parent if "://" not in path else root / "runs"


def _selected(args: argparse.Namespace, entries: Path, root: Path) -> list[Path]:
    """The entry files an action reads: ``--entry`` files, those changed since ``--changed-since``, or all."""
    from bench.leaderboard import files

    if args.entry:
        missing = [p for p in args.entry if not Path(p).is_file()]
        if missing:
            raise BenchInputError("--entry", missing[0], reason="no such file")
        return [Path(p) for p in args.entry]
    if args.changed_since:
        return files.changed_entries(root, entries, args.changed_since)
    return files.entry_paths(entries)


def _check_coverage(checked: list[Any], paths: list[Path], root: Path) -> None:
    """Refuse entries whose recorded suite coverage is not the suite's plan for their defense."""
    from bench.leaderboard.coverage import coverage_problems

    problems = coverage_problems(checked, paths, root)
    if problems:
        raise BenchInputError("suite.expected", f"{len(problems)} entries", reason="; ".join(problems))


def _current(args: argparse.Namespace, paths: list[Path], root: Path) -> int:
    """``current``: 0 when every job the suite plans with this code is in a committed entry with
    the same key and nothing else is, on this kind of machine (:mod:`bench.leaderboard.current`);
    else 1, naming what differs."""
    from bench.leaderboard import files
    from bench.leaderboard.current import currency
    from bench.results.provenance import provenance

    here = files.hardware_of(provenance("", 0, "cpu"))
    report = currency(root, args.suite, [files.load_entry(p) for p in paths], here)
    if report.ok:
        print(f"current: the {report.jobs} jobs of suite {args.suite} are the committed entries' (same keys)")
        return 0
    print(f"not current: suite {args.suite} planned with this code differs from the committed entries")
    for line in report.lines():
        print(f"  {line}")
    return 1


def _verify(args: argparse.Namespace, paths: list[Path], root: Path, entries: Path) -> int:
    from bench.leaderboard import files
    from bench.leaderboard.verify import verify_entry

    tolerance = args.tolerance if args.tolerance is not None else DEFAULT_TOLERANCE
    if not 0 <= tolerance < math.inf:
        raise BenchInputError("--tolerance", args.tolerance, reason="must be a finite number ≥ 0")
    if args.record and tolerance > MAX_RECORDED_TOLERANCE:
        raise BenchInputError(
            "--tolerance",
            args.tolerance,
            reason=f"--record writes 'verified' only for a check at a tolerance ≤ {MAX_RECORDED_TOLERANCE:g}",
        )
    cores = os.cpu_count() or 1
    if not 0 < args.jobs <= 4 * cores:
        raise BenchInputError("--jobs", args.jobs, reason=f"must be an integer in 1 .. {4 * cores}")
    if args.record:  # refused before any job runs
        files.verification_commit(root, entries, args.allow_uncommitted)
    checked = files.validate(paths)
    _check_coverage(checked, paths, root)
    failed = 0
    for path, entry in zip(paths, checked, strict=True):
        report = verify_entry(
            entry,
            root,
            all_seeds=args.all_seeds,
            tolerance=tolerance,
            parallel=args.jobs,
        )
        runs = ", ".join(f"{t}#{s}" for t, s in report.rerun)
        if report.ok:
            print(f"verified  {path.name}: {len(report.rerun)} jobs re-run and reproduced ({runs})")
            if args.record:
                files.record_verification(
                    path, entry, report, root, entries, args.allow_uncommitted, tolerance
                )
            continue
        failed += 1
        print(f"MISMATCH  {path.name}:" if report.mismatches else f"STALE     {path.name}:")
        for line in report.mismatches + report.stale:
            print(f"  {line}")
        if report.mismatches and (note := report.hardware_note()):
            print(f"  note: {note}")
    print(f"{len(paths) - failed} of {len(paths)} entries verified")
    return 1 if failed else 0


def _gallery(args: argparse.Namespace, paths: list[Path], root: Path) -> int:
    """``gallery``: the missing galleries of the entries, from reproduced re-runs of their worst
    cases (:mod:`bench.leaderboard.gallery_fill`); an entry is rewritten only when one is added."""
    from bench.leaderboard import files
    from bench.leaderboard.gallery_fill import fill

    tolerance = args.tolerance if args.tolerance is not None else DEFAULT_TOLERANCE
    if not args.entry and not args.changed_since:  # the suite's folder of entries
        paths = [p for p in paths if p.parent.name == args.suite]
    checked = files.validate(paths)
    known = {t.track for e in checked for t in e.tracks}
    for track in args.task or ():
        if track not in known:
            raise BenchInputError("--task", track, choices=known, reason="gallery takes tracks (task/threat)")
    failed = 0
    for path, entry in zip(paths, checked, strict=True):
        new, report = fill(
            entry, path.parent, root, tracks=args.task, parallel=args.jobs, tolerance=tolerance
        )
        if report.added:
            files.write_entry(path, new)
        print(f"{path.name}: {len(report.added)} galleries added")
        for track in report.added:
            print(f"  + {track}")
        for line in report.mismatches:
            print(f"  not reproduced, no gallery taken: {line}")
        for track in report.missing:
            print(f"  still no gallery: {track}")
        failed += bool(report.mismatches)
    return 1 if failed else 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("leaderboard", help="export, validate and build the committed leaderboard entries")
    p.add_argument(
        "action",
        choices=("export", "validate", "verify", "gallery", "current", "build", "schema"),
        help="export (store → entries), validate (schema + recomputed numbers), verify (re-run one seed "
        "of each task and compare), gallery (add the missing reconstruction galleries: re-run each "
        "image track's worst-case job, as verify does, and take its grid if it reproduces), current "
        "(exit 1 unless the suite's jobs planned with this code have exactly the entries' job keys, "
        "on this kind of machine), build (entries → page), schema (rewrite the committed JSON schema)",
    )
    p.add_argument(
        "--suite",
        default="quick",
        help="export, current, gallery: the suite whose tasks the entries cover",
    )
    p.add_argument(
        "--task",
        action="append",
        help="export: only these tasks (default: the suite's); gallery: only these tracks (task/threat)",
    )
    p.add_argument("--store", help="export: results store URL (default: runs/results.sqlite)")
    p.add_argument(
        "--out",
        help="export: the evaluate --out folder with the reconstruction grids (default: the SQLite "
        "store's folder, else runs/)",
    )
    p.add_argument("--entries", help="the entries folder (default: leaderboard/entries)")
    p.add_argument(
        "--allow-uncommitted",
        action="store_true",
        help="export: from a checkout with uncommitted changes, or jobs run from one (entries say "
        "bench.dirty: true), or of defenses that declare no source or no plain summary; validate: "
        "accept such entries; verify --record: from a checkout with uncommitted changes (the commit "
        "is recorded as <sha>+uncommitted). Not for committed entries",
    )
    p.add_argument(
        "--entry", action="append", help="validate/verify/gallery/build: only this entry file (repeatable)"
    )
    p.add_argument(
        "--changed-since",
        metavar="REF",
        help="validate/verify/build: only the entry files changed since this git ref (e.g. origin/main)",
    )
    p.add_argument("--all-seeds", action="store_true", help="verify: re-run every job, not one seed per task")
    p.add_argument(
        "--tolerance",
        type=float,
        help=f"verify: allowed difference, relative to max(1, |stated|) (default {DEFAULT_TOLERANCE:g})",
    )
    p.add_argument("--jobs", type=int, default=1, help="verify, gallery: jobs run in parallel (default 1)")
    p.add_argument(
        "--record", action="store_true", help="verify: write the verification status into verified entries"
    )
    p.add_argument("--site", help="build: output folder of the page (default: leaderboard/site)")
    p.add_argument(
        "--claims",
        help="build: the claims report shown on the page (python -m bench reproduce --json; "
        "default: leaderboard/claims/quick.json when present)",
    )
    p.add_argument("--root", help="benchmark root with tasks/ and defenses/ (default: BENCH_ROOT or repo)")


#: what a job's provenance says of a simulation whose defense code ran without the OS sandbox
#: (``evaluate --unsandboxed`` on a kernel without Landlock; the in-process test harness)
UNSANDBOXED = ("none", "in-process")


def _refuse_unsandboxed(results: list[Any]) -> None:
    """A result whose defense code ran outside the sandbox (:data:`UNSANDBOXED`) never becomes
    an entry: nothing kept that code from rewriting the store or reading the parent's files."""
    bad = [r for r in results if (r.provenance or {}).get("sandbox") in UNSANDBOXED]
    if bad:
        first = bad[0]
        raise BenchInputError(
            "leaderboard export",
            f"{first.task}/{first.defense} seed {first.seed}",
            reason=f"{len(bad)} result(s) ran the defense's code without the sandbox "
            "(evaluate --unsandboxed, or a kernel without Landlock); they cannot become entries",
        )
