"""Digests of the code that produces a job's numbers, for job keys and entry versions.

A stored result is reused only when it was produced by the same code: a job's key hashes its
task spec, defense configuration and seed together with

* the defense plugin's source (:func:`bench.defense.plugin.source_digest`),
* each attack's code: its module and every module of ``bench.attacks`` it imports, directly or
  through others (:func:`attack_digest`, from the modules' import statements, read without
  executing anything), and
* the engine's code (:func:`engine_digest`): every module of ``bench`` that runs a simulation,
  derives ground truth, computes a metric or scores a reconstruction — all of ``bench`` except
  the attacks (digested per attack) and the presentation layer (command line, store, ranking,
  page), which does not change a number.

Editing ``defenses/my_defense.py`` or an attack therefore reruns exactly the jobs it affects.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
ATTACKS = "bench.attacks"
#: paths under ``bench/`` that never change a number (not part of :func:`engine_digest`)
PRESENTATION = (
    "__main__.py",
    "cli.py",
    "claims",
    "commands",
    "leaderboard",
    "results",
    "data/cli.py",
    "spec/reference.py",
    "defense/sources.py",
    "api.py",
)

#: modules under ``bench/attacks`` that the engine runs as well (the scorer's and the oracle's
#: membership library: candidate pool, reference worlds, signals, metrics), digested with it
ENGINE_IN_ATTACKS = tuple(
    f"attacks/membership/{name}.py"
    for name in (
        "epsilon likelihood_ratio metrics pool reference_worlds pairwise_likelihood "
        "roc signals threshold_choice"
    ).split()
)


def _digest(parts: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, data in sorted(parts):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def module_file(module: str) -> Path | None:
    """The source file of a ``bench`` module (``None`` outside the package or if absent)."""
    if module != "bench" and not module.startswith("bench."):
        return None
    rel = Path(*module.split(".")[1:])
    for candidate in (PACKAGE_DIR / rel.with_suffix(".py"), PACKAGE_DIR / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(module: str, path: Path, top_level: bool = False) -> set[str]:
    """Modules named by the import statements of module ``module`` (file ``path``), relative
    imports resolved; for ``from a import b`` both ``a`` and ``a.b`` (``b`` may be a module).
    ``top_level``: only the statements run when the module is imported (not those inside
    functions or ``if TYPE_CHECKING:`` blocks)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def statements(nodes: list[ast.stmt]) -> Iterator[ast.stmt]:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            yield node
            if isinstance(node, (ast.If, ast.Try)):
                yield from statements(node.body)
                yield from statements(node.orelse)
                for handler in getattr(node, "handlers", []):
                    yield from statements(handler.body)

    for node in statements(tree.body) if top_level else ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


@cache
def attack_digest(module: str) -> str:
    """Digest of attack module ``module`` and every ``bench.attacks`` module it imports,
    transitively (:func:`attack_modules`)."""
    return _digest([(name, path.read_bytes()) for name, path in attack_modules(module).items()])


def attack_modules(module: str) -> dict[str, Path]:
    """``name -> file`` of attack module ``module`` and the ``bench.attacks`` modules it imports,
    transitively (modules outside the package are not followed)."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = module_file(name)
        if path is None:
            continue
        seen[name] = path
        todo.extend(m for m in imported_modules(name, path) if m == ATTACKS or m.startswith(ATTACKS + "."))
    return seen


@cache
def engine_digest() -> str:
    """Digest of every module of ``bench`` outside ``bench/attacks`` and :data:`PRESENTATION`."""
    parts = []
    for path in PACKAGE_DIR.rglob("*.py"):
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        if (rel.startswith("attacks/") and rel not in ENGINE_IN_ATTACKS) or any(
            rel == p or rel.startswith(p + "/") for p in PRESENTATION
        ):
            continue
        parts.append((rel, path.read_bytes()))
    return _digest(parts)
