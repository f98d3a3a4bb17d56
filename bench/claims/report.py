"""Select claims, run them, and write the report: markdown for people, JSON for the page.

The JSON (``{"scale", "commit", "results": [...], "unchecked": [...]}``) carries no date and no
timing, so the committed ``leaderboard/claims/<scale>.json`` only changes when a measurement does.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.claims.base import CLAIMS, PAPERS, UNCHECKED, Claim, Result, Unchecked, run
from bench.core.errors import BenchInputError

STATUS_TEXT = {
    "pass": "pass",
    "fail": "FAIL",
    "error": "ERROR",
    "not at this scale": "not at this scale",
}


def select(papers: Iterable[str] = (), ids: Iterable[str] = ()) -> tuple[list[Claim], list[Unchecked]]:
    """The registered claims and the unchecked ones of ``papers`` (all when empty) or with ``ids``."""
    from bench.claims import load

    load()
    papers, ids = list(papers), list(ids)
    for p in papers:
        if p not in PAPERS:
            raise BenchInputError("--paper", p, choices=sorted(PAPERS))
    known = set(CLAIMS.names()) | set(UNCHECKED)
    for i in ids:
        if i not in known:
            raise BenchInputError("--claim", i, choices=sorted(known, key=natural))

    def wanted(claim_id: str) -> bool:
        if ids:
            return claim_id in ids
        return not papers or claim_id.split(":", 1)[0] in papers

    claims = [CLAIMS.get(n) for n in sorted(CLAIMS.names(), key=natural) if wanted(n)]
    return claims, [UNCHECKED[k] for k in sorted(UNCHECKED, key=natural) if wanted(k)]


def natural(claim_id: str) -> tuple[object, ...]:
    """Sort key putting ``C2`` before ``C10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", claim_id))


def run_claims(
    claims: list[Claim],
    scale: str,
    progress: bool = True,
    journal: Path | None = None,
    commit: str = "",
) -> tuple[list[Result], bool]:
    """Run each claim at ``scale``; returns the rows and whether every claim ran (``False``: a
    Ctrl-C stopped the run, the rows are those that finished).

    With ``journal`` (a JSON-lines file), each row is appended the moment its check finishes,
    and the rows it already holds for the same claim, scale and ``commit`` are taken from it
    instead of running the check again: an interrupted ``reproduce`` resumes where it stopped.
    Progress goes to stderr."""
    done = read_journal(journal, scale, commit) if journal is not None else {}
    out: list[Result] = []
    for i, c in enumerate(claims, start=1):
        row = done.get(c.id)
        resumed = row is not None
        if row is None:
            try:
                row = run(c, scale)
            except KeyboardInterrupt:
                return out, False
            if journal is not None:
                append_journal(journal, row, commit)
        if progress:
            note = " (resumed)" if resumed else ""
            line = (
                f"  [{i}/{len(claims)}] {row.id:32s} {STATUS_TEXT[row.status]:18s} {row.seconds:6.1f} s{note}"
            )
            print(line, file=sys.stderr, flush=True)
        out.append(row)
    return out, True


def read_journal(path: Path, scale: str, commit: str) -> dict[str, Result]:
    """The rows of ``path`` (JSON lines of :func:`append_journal`) for ``scale`` and ``commit``;
    an unreadable line is passed over (the check runs again)."""
    if not path.is_file():
        return {}
    out: dict[str, Result] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
            if data.pop("commit") != commit or data["scale"] != scale:
                continue
            data.pop("paper", None)
            row = Result(**data)
        except (ValueError, KeyError, TypeError):
            continue
        out[row.id] = row
    return out


def append_journal(path: Path, row: Result, commit: str) -> None:
    """Append one finished row (with the commit it ran at) to the journal ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({**asdict(row), "commit": commit}, ensure_ascii=False) + "\n")


def failed(results: list[Result]) -> list[Result]:
    return [r for r in results if r.status in ("fail", "error")]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(results: list[Result], skipped: list[Unchecked], scale: str, commit: str) -> str:
    """The report: one table of checked claims per paper, then the claims not checked, with why."""
    lines = [
        f"# Claims of the source papers, checked at scale `{scale}`",
        "",
        f"Commit `{commit}`. {sum(r.status == 'pass' for r in results)} of {len(results)} checks pass; "
        f"{len(skipped)} claims are not checked here (listed below with the reason).",
        "",
    ]
    for paper, title in PAPERS.items():
        rows = [r for r in results if r.paper == paper]
        if not rows:
            continue
        lines += [
            f"## {paper}: {title}",
            "",
            "| claim | statement | expectation | measured | result |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            verdict = STATUS_TEXT[r.status] + (
                " (refutes the statement)" if r.refutes and r.status == "pass" else ""
            )
            cells = [f"`{r.id}`", _cell(r.statement), _cell(r.expectation), _cell(r.measured), verdict]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if skipped:
        lines += ["## Not checked here", "", "| claim | statement | why not |", "|---|---|---|"]
        lines += [f"| `{u.id}` | {_cell(u.statement)} | {_cell(u.reason)} |" for u in skipped]
        lines.append("")
    return "\n".join(lines)


def to_json(results: list[Result], skipped: list[Unchecked], scale: str, commit: str) -> str:
    data: dict[str, Any] = {
        "scale": scale,
        "commit": commit,
        "results": [{k: v for k, v in asdict(r).items() if k != "seconds"} for r in results],
        "unchecked": [asdict(u) | {"paper": u.paper} for u in skipped],
    }
    return json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def load_json(path: Path) -> dict[str, Any]:
    """A report written by :func:`to_json` (for the page)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchInputError("--claims", str(path), reason=f"not a readable claims report: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise BenchInputError("--claims", str(path), reason="not a claims report (no 'results' list)")
    return data
