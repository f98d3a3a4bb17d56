"""The generated documentation is current and complete: the module map of ``docs/architecture.md``
and the hook reference ``docs/hooks.md`` equal what ``python -m bench.leaderboard.site.docs`` renders from the
docstrings, the map lists every package and module of ``bench``, every package says what it is in
one paragraph, and the hook table lives in ``docs/hooks.md`` only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from bench.defense.hooks import HOOK_NAMES
from bench.leaderboard.site import docs
from bench.protocols import PROTOCOLS

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "bench"
STALE = f"is out of date; regenerate it with: {docs.REGENERATE}"


def _committed_map() -> str:
    text = (REPO / "docs" / "architecture.md").read_text()
    start, end = text.find(docs.BEGIN), text.find(docs.END)
    assert 0 <= start < end, f"docs/architecture.md has lost the module map's markers; {STALE}"
    return text[start : end + len(docs.END)]


def test_the_committed_module_map_is_current():
    assert _committed_map() == docs.module_map(), f"the module map of docs/architecture.md {STALE}"


def test_the_committed_hook_reference_is_current():
    assert (REPO / "docs" / "hooks.md").read_text() == docs.hooks_page(), f"docs/hooks.md {STALE}"


def test_the_module_map_lists_every_package_and_module():
    listed, folder = set(), ""
    for line in _committed_map().splitlines():
        if match := re.match(r"- \*\*`(bench(?:/[\w]+)*)/`\*\*", line):
            folder = match.group(1)
            listed.add(folder)
        elif match := re.match(r"  - `(\w+\.py)` — ", line):
            listed.add(f"{folder}/{match.group(1)}")
    modules = {p.relative_to(REPO).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    folders = {
        p.relative_to(REPO).as_posix()
        for p in [PACKAGE, *PACKAGE.rglob("*")]
        if p.is_dir() and "__pycache__" not in p.parts
    }
    missing = (modules | folders) - listed
    assert not missing, f"the module map lacks {sorted(missing)}; {STALE}"


def test_every_package_says_what_it_is_in_one_paragraph():
    problems = []
    for folder in docs.packages():
        init = folder / "__init__.py"
        name = init.relative_to(REPO).as_posix()
        doc = ast.get_docstring(ast.parse(init.read_text())) if init.is_file() else None
        if not doc:
            problems.append(f"{name}: no docstring")
        elif "\n\n" in doc.strip():
            problems.append(f"{name}: more than one paragraph")
    assert not problems, problems


def test_every_hook_says_when_it_is_called_and_what_it_returns():
    from bench.defense.plugin import Defense

    for name in [*HOOK_NAMES, "sample_weights", "sample_sum", *docs.DECLARATIONS]:
        summary, parts = docs.sections(getattr(Defense, name).__doc__ or "")
        assert summary and parts.get("Called") and parts.get("Returns"), (
            f"Defense.{name}: its docstring needs a summary and 'Called' and 'Returns' sections"
        )


def test_the_protocols_document_only_hooks_they_call():
    for name, cls in PROTOCOLS.items():
        documented = set(docs.entries(docs.sections(cls.__doc__ or "")[1].get("Hooks", "")))
        assert documented <= set(cls.hook_points), (name, documented - set(cls.hook_points))


def test_first_sentence_and_markdown():
    text = "A (see e.g. B. C) thing, cf. D. Then more."
    assert docs.first_sentence(text) == "A (see e.g. B. C) thing, cf. D."
    assert docs.first_sentence("Uses ``a.B``. Next.") == "Uses `a.B`."
    assert docs.markdown(":mod:`bench.data.real` and :class:`~bench.threats.view.View`") == (
        "`bench.data.real` and `View`"
    )
    assert docs.cell("a | b\n\nc") == "a \\| b c"


def test_no_other_document_restates_the_hook_table():
    row = re.compile(r"^\|\s*`(" + "|".join(HOOK_NAMES) + r")\b")
    documents = [*REPO.glob("*.md"), *REPO.glob("docs/*.md"), *REPO.glob("*/README.md")]
    documents += [*PACKAGE.rglob("README.md")]
    offenders = [
        f"{path.relative_to(REPO)}:{i}"
        for path in documents
        if path.name != "hooks.md"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if row.match(line)
    ]
    assert not offenders, f"link to docs/hooks.md instead of restating its table: {offenders}"
