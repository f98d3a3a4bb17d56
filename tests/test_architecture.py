"""The repository's structure, checked: no import cycle between bench's modules (counting the
imports inside functions too), no module of ``bench/`` over the size limit, and no citation of
a document outside the repository (the architecture lives in ``docs/architecture.md``)."""

from __future__ import annotations

import re
from pathlib import Path

import networkx as nx

from bench.results.code_digest import imported_modules, module_name

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "bench"
MAX_LINES = 450


def test_no_import_cycle_between_bench_modules():
    """No two modules of ``bench`` depend on each other, directly or through others.

    An edge ``A -> B`` is any import statement of ``A`` that names module ``B``: at the top level,
    inside a function or method (deferring an import does not remove the dependency, it only
    hides it until the call) and under ``if TYPE_CHECKING:`` (a module whose signatures name
    another's types depends on it as much as one that calls it; no cycle needs them left out).
    ``from a import b`` names module ``a`` and, when ``a.b`` is a module of its own, ``a.b`` too
    (when ``b`` is a name defined in ``a``, only ``a``: :func:`imported_modules` lists ``a.b``,
    which is no file). A module importing a package that contains it is no edge: the package
    is initialized before any of its modules anyway.
    """
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    for name, path in files.items():
        graph.add_node(name)
        for target in imported_modules(name, path):
            if target in files and target != name and not name.startswith(target + "."):
                graph.add_edge(name, target)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_no_module_over_the_size_limit():
    long = {
        str(p.relative_to(REPO)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_nothing_cites_a_document_outside_the_repository():
    # the forbidden names are assembled so that this file does not contain them itself
    names = ["DESIGN" + r"\.md", "DESIGN" + " §", r"\.\./" + "shared", "shared" + "/papers"]
    pattern = re.compile("|".join(names))
    offenders = []
    for path in [*REPO.glob("*.md"), *REPO.rglob("*.py"), *REPO.glob("docs/*.md"), *REPO.glob("*/README.md")]:
        if ".venv" in path.parts or ("tests" in path.parts and path.name == "test_architecture.py"):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{i}")
    assert not offenders, offenders
    for doc in ("docs/architecture.md", "defenses/README.md", "bench/attacks/README.md"):
        assert (REPO / doc).is_file(), doc
