"""What each defense plugin declares about itself (its source and summary), read without running
plugin code in the harness's process, and what an entry needs to be a citable record.

The harness never imports defense plugins in its own process (``docs/architecture.md``): the
declarations are read by a child process (:func:`bench.evaluation.isolation.call`) that enters the
sandbox of the simulation processes (:func:`bench.evaluation.sandbox.enter`) before it imports the
plugins, and the parent trusts nothing of its answer but what it can check
(:func:`checked_declarations`): a declared key is resolved in the parent's own bibliography
(:data:`bench.defense.sources.PAPERS`), and a summary is checked again on export
(:func:`declaration_problems`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.core.errors import BenchInputError
from bench.defense.sources import ORIGINAL, PAPERS, UNDECLARED, summary_problem
from bench.leaderboard.entry import PaperInfo

if TYPE_CHECKING:
    from bench.leaderboard.entry import Entry

#: the longest summary kept from a plugin's declaration (characters)
MAX_SUMMARY = 2000


def declarations_in_child(request: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Child side of :func:`declared_isolated` (:func:`bench.evaluation.isolation.call`): enter the
    sandbox, import every plugin under ``request["root"]`` and answer, per defense name, the
    ``source`` and ``summary`` its class declares (strings; anything else as ``""``)."""
    from bench.evaluation import isolation, sandbox

    root = Path(request["root"])
    if isolation.IN_CHILD:  # before any plugin code runs, as the simulation processes do
        sandbox.enter("declarations", readable=[root])
    from bench.defense.loading import load_all_defenses
    from bench.defense.plugin import DEFENSES

    load_all_defenses(root)  # a plugin that does not load declares nothing
    out = {}
    for name, cls in DEFENSES.items():
        source, summary = getattr(cls, "source", UNDECLARED), getattr(cls, "summary", "")
        out[str(name)] = {
            "source": source if isinstance(source, str) else "",
            "summary": summary if isinstance(summary, str) else "",
        }
    return out


def checked_declarations(answer: Any) -> dict[str, dict[str, Any]]:
    """The parent's reading of a child's answer (untrusted: plugin code ran there). Per defense
    name, ``source``: the record of :data:`bench.defense.sources.PAPERS` the declared key names
    (from the parent's own bibliography), ``"original"``, or ``"undeclared"`` for anything else;
    ``summary``: the declared text with its whitespace collapsed (``""`` when not a string; its
    form is checked again on export, :func:`declaration_problems`)."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(answer, dict):
        return out
    for name, declared in answer.items():
        if not isinstance(name, str) or not isinstance(declared, dict):
            continue
        key, summary = declared.get("source"), declared.get("summary")
        source: Any = UNDECLARED
        if key == ORIGINAL:
            source = ORIGINAL
        elif isinstance(key, str) and key in PAPERS:
            source = PaperInfo.model_validate(asdict(PAPERS[key])).model_dump()
        text = " ".join(summary.split())[:MAX_SUMMARY] if isinstance(summary, str) else ""
        out[name] = {"source": source, "summary": text}
    return out


def declared_isolated(root: Path) -> dict[str, dict[str, Any]]:
    """What every defense plugin under ``root`` declares (source and summary), by name, read in
    a sandboxed child process (the parent never imports defense code) and checked in the parent
    (:func:`checked_declarations`)."""
    from bench.evaluation import isolation
    from bench.evaluation.queries import ChildFailed

    try:
        answer = isolation.call(
            declarations_in_child, {"root": str(root)}, threads=1, label="defense declarations"
        )
    except ChildFailed as exc:
        raise BenchInputError(
            "defenses", str(root / "defenses"), reason=f"reading the plugins' declarations failed: {exc}"
        ) from None
    return checked_declarations(answer)


def declaration_problems(entry: Entry) -> list[str]:
    """What keeps ``entry`` from being a citable record: an undeclared source, or a description
    that is not plain text of whole sentences (each problem names the defense)."""
    d = entry.defense
    problems = []
    if d.source == UNDECLARED:
        problems.append(
            f"defense {d.name}: no source declared (set source to a key of bench.defense.sources."
            f"PAPERS or 'original' in defenses/{d.name}.py)"
        )
    why = summary_problem(d.description)
    if why:
        problems.append(f"defense {d.name}: description: {why} (its summary in defenses/{d.name}.py)")
    return problems


def declared_for_page(root: Path) -> dict[str, dict[str, Any]]:
    """:func:`declared_isolated` for a page built after a run (``evaluate``): when the child
    fails, a warning and no declarations (every entry shows "not declared") rather than no page."""
    import sys

    try:
        return declared_isolated(root)
    except BenchInputError as exc:
        print(f"warning: the entries' sources are not shown: {exc.message}", file=sys.stderr)
        return {}
