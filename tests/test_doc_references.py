"""Test files named in the documentation exist: every ``tests/….py`` quoted in the source of a
module of ``bench`` (its docstrings and comments) or in a Markdown file of the repository is a file
of ``tests/`` — so that moving a test file cannot leave a docstring pointing at its old path."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: a path that starts at ``tests/`` (not inside a longer path) and names a Python file
TEST_PATH = re.compile(r"(?<![\w./-])tests/[\w./-]*?\.py\b")


def documents() -> list[Path]:
    """The ``.py`` files under ``bench/`` and the repository's ``.md`` files: those git tracks, or
    would (untracked but not ignored), so environments, caches and run outputs never count."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.md"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return sorted((REPO / "bench").rglob("*.py")) + [REPO / name for name in listed]


def quoted_paths(text: str) -> list[str]:
    """The test-file paths quoted in ``text``, in order."""
    return TEST_PATH.findall(text)


def references() -> dict[str, list[str]]:
    """``quoted path -> ["file:line", …]`` over :func:`documents`."""
    quoted: dict[str, list[str]] = {}
    for path in documents():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in quoted_paths(line):
                quoted.setdefault(name, []).append(f"{path.relative_to(REPO)}:{i}")
    return quoted


def test_every_quoted_test_file_exists():
    quoted = references()
    missing = {name: where for name, where in quoted.items() if not (REPO / name).is_file()}
    assert not missing, f"documentation names test files that do not exist: {missing}"


def test_the_scan_finds_the_references():
    assert quoted_paths("(``tests/attacks/test_applicability.py`` keeps it)") == [
        "tests/attacks/test_applicability.py"
    ]
    assert quoted_paths("see `tests/protocols/test_pdmm.py::test_x` and tests/test_api.py.") == [
        "tests/protocols/test_pdmm.py",
        "tests/test_api.py",
    ]
    assert quoted_paths("bench/tests/x.py, tests/defenses/test_<name>.py, tests/support/") == []
    quoted = references()
    places = [w.split(":")[0] for where in quoted.values() for w in where]
    assert "bench/attacks/applicability.py" in places  # a docstring
    assert "bench/claims/unchecked.py" in places  # a string of the code
    assert "CONTRIBUTING.md" in places and "bench/attacks/README.md" in places
