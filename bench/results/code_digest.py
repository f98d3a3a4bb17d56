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

A module is digested by its code, not its bytes (:func:`code_bytes`): the syntax tree without
docstrings, comments or layout. Documentation edits leave every key as it was; any change of
what runs (a statement, a default, a constant, a name) changes it.
"""

from __future__ import annotations

import ast
import hashlib
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
    # getting a dataset's files into the cache: a file is installed only after it passed the
    # dataset's fixed checksums (bench/data/checksums.py and sources.py, which stay digested), so
    # how it arrived cannot change a number
    "data/ingest.py",
    "data/manage.py",
    "data/packaged.py",
    "spec/reference.py",
    "defense/sources.py",
    "api.py",
)


def code_bytes(path: Path) -> bytes:
    """What of a module's source a digest reads: its syntax tree (``ast.dump``, without line
    numbers) with every docstring — of the module, each class and each function — left out.
    Comments and layout are not in the tree either; a string statement that is not a docstring
    (one not first in its body) stays."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False).encode()


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


def imported_modules(module: str, path: Path) -> set[str]:
    """Modules named by the import statements of module ``module`` (file ``path``) — those run at
    import and those inside functions or ``if TYPE_CHECKING:`` blocks alike — relative imports
    resolved; for ``from a import b`` both ``a`` and ``a.b`` (``b`` may be a module)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
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
    return _digest([(name, code_bytes(path)) for name, path in attack_modules(module).items()])


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
        todo.extend(m for m in imported_modules(name, path) if _is_attack(m))
    return seen


def _is_attack(module: str) -> bool:
    return module == ATTACKS or module.startswith(ATTACKS + ".")


def module_name(path: Path) -> str:
    """The dotted name of the ``bench`` module in file ``path`` (a package's ``__init__.py``
    names the package); the inverse of :func:`module_file`."""
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def engine_modules() -> dict[str, Path]:
    """``relative path -> file`` of the engine: every module of ``bench`` outside
    ``bench/attacks`` and :data:`PRESENTATION`, and every module of ``bench.attacks`` those
    import, directly or through others (:func:`attack_modules`: the scorer's and the oracle's
    membership library — candidate pool, reference worlds, signals, metrics — the attack base
    classes, the matching objective the oracle shares), found from the import statements."""
    out: dict[str, Path] = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        if rel.startswith("attacks/") or any(rel == p or rel.startswith(p + "/") for p in PRESENTATION):
            continue
        out[rel] = path
        for imported in imported_modules(module_name(path), path):
            if _is_attack(imported):
                for file in attack_modules(imported).values():
                    out[file.relative_to(PACKAGE_DIR).as_posix()] = file
    return out


@cache
def engine_digest() -> str:
    """Digest of :func:`engine_modules`."""
    return _digest([(rel, code_bytes(path)) for rel, path in engine_modules().items()])
