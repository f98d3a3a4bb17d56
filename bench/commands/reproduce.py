"""``python -m bench reproduce``: check the source papers' claims (:mod:`bench.claims`) and write
a markdown report (and the JSON the leaderboard page shows)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bench.commands import COMMANDS


@COMMANDS.register("reproduce", "check the source papers' claims and write a report")
def cmd_reproduce(args: argparse.Namespace) -> int:
    from bench.claims.report import failed, markdown, run_claims, select, to_json
    from bench.results.provenance import git_state
    from bench.spec.catalog import bench_root

    claims, skipped = select(args.paper or (), args.claim or ())
    if args.list:
        for c in claims:
            print(f"{c.id:32s} {c.kind:9s} {c.statement}")
        for u in skipped:
            print(f"{u.id:32s} {'unchecked':9s} {u.reason}")
        return 0
    root = bench_root(None)
    state = git_state(root)
    commit = str(state.get("commit", "unknown"))[:12]
    journal = Path(args.results) if args.results else root / "runs" / "claims" / f"{args.scale}.jsonl"
    if args.fresh and journal.is_file():
        journal.unlink()
    err = sys.stderr
    print(f"{len(claims)} claims to check at scale {args.scale}; {len(skipped)} not checked here", file=err)
    print(f"each result is kept in {journal} as it finishes (run again to resume)", file=err)
    code = _code_key(root, commit, state.get("dirty"))
    results, complete = run_claims(
        claims, args.scale, progress=not args.no_progress, journal=journal, commit=code
    )
    if not complete:
        print(
            f"interrupted: {len(results)} of {len(claims)} checks finished and are kept in {journal}; "
            "run the same command again to resume",
            file=err,
        )
        return 130
    report = markdown(results, skipped, args.scale, commit)
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(report, encoding="utf-8")
        print(f"report: {args.report}", file=err)
    else:
        print(report)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(to_json(results, skipped, args.scale, commit), encoding="utf-8")
        print(f"json:   {args.json}", file=err)
    bad = failed(results)
    passed = sum(r.status == "pass" for r in results)
    print(
        f"{passed} passed, {len(bad)} failed, {len(results) - passed - len(bad)} not at this scale", file=err
    )
    for r in bad:
        print(f"  {r.id}: {r.status}: {r.measured}", file=err)
    return 1 if bad else 0


def _code_key(root: Path, commit: str, dirty: object) -> str:
    """What a journaled result is reused for: the commit, and for a checkout with uncommitted
    changes a digest of ``git diff HEAD`` too (the same edits resume; other edits run again)."""
    import hashlib

    from bench.results.provenance import git_output

    if dirty is False or commit == "unknown":
        return commit
    diff = git_output("diff", "HEAD", "--no-color", "--", cwd=root) or ""
    return f"{commit}+{hashlib.sha256(diff.encode()).hexdigest()[:12]}"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("reproduce", help="check the source papers' claims and write a report")
    p.add_argument(
        "--paper", action="append", help="only this paper's claims (repeatable), e.g. pasquini2023"
    )
    p.add_argument("--claim", action="append", help="only this claim (repeatable), e.g. pasquini2023:C7")
    p.add_argument(
        "--scale", choices=("quick", "paper"), default="quick", help="quick (CPU minutes) or paper"
    )
    p.add_argument("--report", help="write the markdown report here (default: print it)")
    p.add_argument("--json", help="also write the results as JSON (what the leaderboard page shows)")
    p.add_argument("--list", action="store_true", help="list the claims and exit")
    p.add_argument(
        "--results",
        help="the journal each check's result is appended to as it finishes, and resumed from "
        "(default: runs/claims/<scale>.jsonl; results of another commit are not reused)",
    )
    p.add_argument("--fresh", action="store_true", help="discard the journal and run every check again")
    p.add_argument("--no-progress", action="store_true", help="no per-claim progress lines")
