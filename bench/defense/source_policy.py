"""The plugin rules: what a defense's source may say, checked before any of it runs.

A defense plugin is per-node tensor code (:mod:`bench.defense.plugin`). Running its hooks under
``torch.func.vmap`` keeps each node's output a function of that node's row; what Python itself
would still allow — keeping data in a module global, a class attribute, a default argument or a
file; walking the call stack or the garbage collector to the simulation; reading another
object's private attributes; importing anything at all — is ruled out here, statically, for
the whole file. The rules are an allow-list, so a construct they do not name is refused:

* **imports**: ``from __future__ import annotations``, ``import math``, ``import torch``, and
  names from ``math``, ``typing``, ``collections.abc`` and ``bench.defense.base`` (the one module
  a plugin builds on). No aliases of modules, no star imports.
* **module level**: imports, functions, classes and constants (numbers, strings, ``None``,
  booleans and tuples of them). No mutable value exists at module level.
* **classes**: bases from ``bench.defense.base`` or the plugin itself; constants, containers of
  constants (``examples``; frozen after loading, :func:`bench.defense.frozen.freeze_class`) and
  methods; the only decorator is ``@DEFENSES.register(...)``; no metaclass, no dunder method
  but ``__init__``.
* **code**: no ``global``, ``nonlocal``, ``with``, generators, ``async``, nested classes,
  ``lambda`` defaults or mutable default arguments; no builtin that reaches objects by name or
  leaves the process (``getattr``, ``setattr``, ``vars``, ``globals``, ``eval``, ``exec``,
  ``open``, ``__import__``, ``type``, ``id``, ``print``, …); no attribute that starts with an
  underscore but the instance's own (``self._x``; never a dunder), none of the frame,
  code, gradient-hook and storage attributes (:data:`DENIED_ATTRIBUTES`); an attribute assigned
  only on ``self``; a module used only as ``module.name``, and of ``torch`` only its tensor
  functions and the submodules :data:`SUBMODULES` (never its I/O, random-state, compilation or
  storage functions: :func:`torch_name_allowed`); ``DEFENSES`` only as the class decorator.

A violation is an input error naming the file, the line and the rule (exit code 2): the plugin
is refused before it is imported. What the rules cannot see — a bug in PyTorch that lets an
allowed operation escape a ``vmap`` — is for review (``docs/scoring.md``, "By construction").
"""

from __future__ import annotations

import ast
import math
import types
from pathlib import Path

import torch

from bench.core.errors import BenchInputError

#: modules a plugin may import as a whole (``import torch``) — always under their own name
MODULE_IMPORTS = frozenset({"math", "torch"})
#: modules a plugin may import names from
NAME_IMPORTS = frozenset({"__future__", "math", "typing", "collections.abc", "bench.defense.base"})
#: submodules of ``torch`` a plugin may use as ``torch.<sub>.<function>``
SUBMODULES = {"torch.linalg": torch.linalg, "torch.special": torch.special, "torch.fft": torch.fft,
              "torch.nn.functional": torch.nn.functional}  # fmt: skip
#: parts of ``torch`` names that are never allowed: files, random state, compilation, storage,
#: autograd and thread control, foreign memory
DENIED_TORCH_PARTS = (
    "save", "load", "file", "rng", "seed", "Generator", "generator", "set_", "compile", "jit",
    "ops", "library", "classes", "Storage", "storage", "buffer", "dlpack", "grad", "inference",
    "export", "hub", "utils", "backends", "cuda", "mps", "xpu", "distributed", "multiprocessing",
    "profiler", "package", "overrides", "func", "vmap", "autograd", "fx", "onnx", "testing",
    "random", "sparse", "quantiz", "futures", "monitor", "cpp", "empty", "strided", "resize",
)  # fmt: skip
#: attribute names refused on any object (frames, code, tracebacks, gradient hooks, raw memory)
DENIED_ATTRIBUTES = frozenset(
    {
        "f_back", "f_locals", "f_globals", "f_builtins", "f_code", "f_trace", "f_lasti",
        "tb_frame", "tb_next", "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code",
        "cr_await", "ag_frame", "ag_code", "co_code", "co_consts", "mro", "grad", "grad_fn",
        "register_hook", "retain_grad", "requires_grad_", "data", "storage", "untyped_storage",
        "data_ptr", "numpy", "tolist", "share_memory_", "set_", "format", "format_map",
        "new_empty", "new_empty_strided", "resize_", "resize_as_", "as_strided", "as_strided_",
        "storage_offset", "apply_", "map_", "map2_",
    }
)  # fmt: skip
#: builtins a plugin may not name
DENIED_BUILTINS = frozenset(
    {
        "getattr", "setattr", "delattr", "hasattr", "vars", "globals", "locals", "dir", "eval",
        "exec", "compile", "open", "input", "print", "breakpoint", "__import__", "type", "id",
        "memoryview", "bytearray", "object", "help", "exit", "quit", "classmethod", "callable",
        "issubclass", "iter", "next", "aiter", "anext", "__build_class__", "copyright", "credits",
        "license", "hash",
    }
)  # fmt: skip
#: the one dunder a plugin may define or call (``super().__init__()``)
ALLOWED_DUNDERS = frozenset({"__init__"})
#: decorators allowed on methods
METHOD_DECORATORS = frozenset({"staticmethod", "property"})


def torch_name_allowed(module: str, name: str) -> bool:
    """Whether ``<module>.<name>`` may be used, ``module`` being ``torch`` or one of
    :data:`SUBMODULES`: a public attribute that is not a module and whose name has none of
    :data:`DENIED_TORCH_PARTS`."""
    owner = torch if module == "torch" else SUBMODULES.get(module)
    if owner is None or name.startswith("_") or any(part in name for part in DENIED_TORCH_PARTS):
        return False
    return hasattr(owner, name) and not isinstance(getattr(owner, name), types.ModuleType)


def _module_use_problem(chain: list[str]) -> str | None:
    """Why ``a.b.c`` (``chain``, starting at an imported module) may not be used, or ``None``."""
    qualified = ".".join(chain)
    if chain[0] == "math":
        ok = len(chain) == 2 and not chain[1].startswith("_")
        ok = ok and not isinstance(getattr(math, chain[1], None), types.ModuleType)
        return None if ok else f"'{qualified}' is not a function or constant of math"
    if qualified in SUBMODULES or any(sub.startswith(qualified + ".") for sub in SUBMODULES):
        return f"the module '{qualified}' is used only as {qualified}.<function>"
    if not torch_name_allowed(".".join(chain[:-1]), chain[-1]):
        return f"'{qualified}' is not among the tensor functions a plugin may use"
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.modules: set[str] = set()  # module names bound by ``import``
        self.base_names: set[str] = set()  # names from bench.defense.base
        self.classes: set[str] = set()
        self.constants: set[str] = set()  # module-level constant names
        self.problems: list[tuple[int, str]] = []

    # ------------------------------------------------------------------ helpers
    def fail(self, node: ast.AST, rule: str) -> None:
        self.problems.append((getattr(node, "lineno", 0), rule))

    def constant(self, node: ast.expr | None, containers: bool = False) -> bool:
        """Whether ``node`` is a constant (with ``containers``: lists, dicts, sets of them too)."""
        if node is None or isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self.constant(node.operand)
        if isinstance(node, ast.Tuple):
            return all(self.constant(e, containers) for e in node.elts)
        if containers and isinstance(node, (ast.List, ast.Set)):
            return all(self.constant(e, containers) for e in node.elts)
        if containers and isinstance(node, ast.Dict):
            return all(self.constant(k) for k in node.keys if k is not None) and all(
                self.constant(v, containers) for v in node.values
            )
        if isinstance(node, ast.BinOp) and isinstance(
            node.op, (ast.Add, ast.Mult, ast.Sub, ast.Pow, ast.Div)
        ):
            return self.constant(node.left) and self.constant(node.right)
        return isinstance(node, ast.Name) and node.id in self.classes | self.base_names | self.constants

    # ------------------------------------------------------------------ module level
    def check_module(self, tree: ast.Module) -> None:
        for i, stmt in enumerate(tree.body):
            if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # the docstring
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.check_import(stmt)
            elif isinstance(stmt, ast.ClassDef):
                self.check_class(stmt)
            elif isinstance(stmt, ast.FunctionDef):
                self.check_function(stmt, method=False)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                value = stmt.value
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if not all(isinstance(t, ast.Name) for t in targets):
                    self.fail(stmt, "a module-level assignment binds a name")
                elif not self.constant(value):
                    self.fail(
                        stmt,
                        "a module-level value is a constant (a number, a string, None, or a tuple of them)",
                    )
                else:
                    self.constants.update(t.id for t in targets if isinstance(t, ast.Name))
            else:
                self.fail(
                    stmt,
                    "a plugin's module holds imports, functions, classes and constants, "
                    f"not {type(stmt).__name__}",
                )

    def check_import(self, stmt: ast.Import | ast.ImportFrom) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name not in MODULE_IMPORTS or alias.asname not in (None, alias.name):
                    self.fail(
                        stmt, f"'import {alias.name}' — a plugin imports only math and torch as modules"
                    )
                else:
                    self.modules.add(alias.name)
            return
        module = stmt.module or ""
        if stmt.level or module not in NAME_IMPORTS:
            self.fail(
                stmt,
                f"'from {module} import …' — a plugin imports names from "
                f"{', '.join(sorted(NAME_IMPORTS))} only",
            )
            return
        for alias in stmt.names:
            if alias.name == "*":
                self.fail(stmt, "no star imports")
            elif alias.name.startswith("_") and module != "__future__":
                self.fail(stmt, f"'{alias.name}' is private")
            elif module == "bench.defense.base":
                if alias.name == "DEFENSES" and alias.asname not in (None, "DEFENSES"):
                    self.fail(stmt, "DEFENSES is imported under its own name")
                self.base_names.add(alias.asname or alias.name)
            elif module == "math" and isinstance(getattr(math, alias.name, None), types.ModuleType):
                self.fail(stmt, f"'{alias.name}' is a module")

    def check_class(self, cls: ast.ClassDef) -> None:
        for base in cls.bases:
            if not (isinstance(base, ast.Name) and (base.id in self.base_names or base.id in self.classes)):
                self.fail(cls, f"class {cls.name}: bases come from bench.defense.base or this plugin")
        if cls.keywords:
            self.fail(cls, f"class {cls.name}: no metaclass or class keywords")
        for deco in cls.decorator_list:
            ok = (
                isinstance(deco, ast.Call)
                and isinstance(deco.func, ast.Attribute)
                and isinstance(deco.func.value, ast.Name)
                and deco.func.value.id == "DEFENSES"
                and deco.func.attr == "register"
                and all(self.constant(a) for a in deco.args)
                and not deco.keywords
            )
            if not ok:
                self.fail(
                    deco,
                    f"class {cls.name}: the only class decorator is @DEFENSES.register(name, description)",
                )
        self.classes.add(cls.name)
        for i, stmt in enumerate(cls.body):
            if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue
            if isinstance(stmt, ast.FunctionDef):
                if stmt.name.startswith("__") and stmt.name not in ALLOWED_DUNDERS:
                    self.fail(stmt, f"method {stmt.name}: a plugin defines no dunder method but __init__")
                self.check_function(stmt, method=True)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if not all(isinstance(t, ast.Name) and not t.id.startswith("__") for t in targets):
                    self.fail(stmt, "a class attribute binds a plain name")
                elif stmt.value is not None and not self.constant(stmt.value, containers=True):
                    self.fail(stmt, "a class attribute is a constant or a container of constants")
            elif isinstance(stmt, ast.Pass):
                continue
            else:
                self.fail(stmt, f"class {cls.name} holds constants and methods, not {type(stmt).__name__}")

    def check_function(self, fn: ast.FunctionDef, method: bool) -> None:
        for deco in fn.decorator_list:
            if not (method and isinstance(deco, ast.Name) and deco.id in METHOD_DECORATORS):
                self.fail(deco, f"function {fn.name}: no decorators but staticmethod and property on methods")
        args = fn.args
        for default in (*args.defaults, *(d for d in args.kw_defaults if d is not None)):
            if not self.constant(default):
                self.fail(default, f"function {fn.name}: a default argument is a constant")
        for stmt in fn.body:
            self.visit(stmt)

    # ------------------------------------------------------------------ code
    def generic_visit(self, node: ast.AST) -> None:
        forbidden = (
            ast.Global, ast.Nonlocal, ast.With, ast.AsyncWith, ast.AsyncFunctionDef, ast.AsyncFor,
            ast.Await, ast.Yield, ast.YieldFrom, ast.ClassDef, ast.Import, ast.ImportFrom,
        )  # fmt: skip
        if isinstance(node, forbidden):
            self.fail(node, f"no {type(node).__name__} statement in a plugin's code")
            return
        if isinstance(node, ast.FunctionDef):  # a nested helper: same rules, no decorators
            self.check_function(node, method=False)
            return
        super().generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:  # annotations are not executed
        return

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for default in (*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)):
            self.fail(default, "a lambda has no default arguments")
        self.visit(node.body)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in DENIED_BUILTINS:
            self.fail(node, f"'{node.id}' reaches objects by name or leaves the plugin's code")
        elif node.id.startswith("__"):
            self.fail(node, f"'{node.id}' is a dunder name")
        elif node.id in self.modules:
            self.fail(node, f"the module '{node.id}' is used only as {node.id}.<function>")
        elif node.id == "DEFENSES":
            self.fail(node, "DEFENSES is used only as the class decorator @DEFENSES.register(...)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = _module_chain(node)
        if chain is not None and chain[0] in self.modules:
            problem = _module_use_problem(chain)
            if problem is not None:
                self.fail(node, problem)
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                self.fail(node, f"'{'.'.join(chain)}' is assigned: a plugin never changes a module")
            return
        name = node.attr
        base_is_self = isinstance(node.value, ast.Name) and node.value.id == "self"
        base_is_super = (
            isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "super"
        )
        if name.startswith("__") and not (name in ALLOWED_DUNDERS and (base_is_super or base_is_self)):
            self.fail(node, f"'.{name}' is a dunder attribute")
        elif name.startswith("_") and not name.startswith("__") and not base_is_self:
            self.fail(node, f"'.{name}' is another object's private attribute")
        elif name in DENIED_ATTRIBUTES:
            self.fail(node, f"'.{name}' reaches frames, code, gradient hooks, raw memory or a registry")
        if isinstance(node.ctx, (ast.Store, ast.Del)) and not base_is_self:
            self.fail(node, f"'.{name}' is assigned on another object than self")
        self.visit(node.value)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        for value in node.values:
            self.visit(value)


def _module_chain(node: ast.Attribute) -> list[str] | None:
    """``torch.linalg.vector_norm`` → ``["torch", "linalg", "vector_norm"]``; ``None`` when the
    chain does not start at a name."""
    parts: list[str] = []
    cur: ast.expr = node
    while isinstance(cur, ast.Attribute):
        parts.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name):
        return None
    parts.append(cur.id)
    parts.reverse()
    return parts


def plugin_source_problems(source: bytes | str, path: Path) -> list[tuple[int, str]]:
    """``(line, rule)`` of every place the source breaks the plugin rules (empty: none)."""
    text = source.decode("utf-8") if isinstance(source, bytes) else source
    tree = ast.parse(text, filename=str(path))
    checker = _Checker(path)
    checker.check_module(tree)
    return sorted(checker.problems)


def check_plugin_source(source: bytes | str, path: Path, name: str) -> None:
    """Raise a :class:`~bench.core.errors.BenchInputError` naming the first broken rule (file and
    line) and how many there are, if ``source`` breaks the plugin rules; a syntax error or bytes
    that are not UTF-8 propagate (the loader reports them)."""
    problems = plugin_source_problems(source, path)
    if problems:
        line, rule = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        reason = f"{path}:{line} breaks the plugin rules: {rule}{more} (defenses/README.md, 'Plugin rules')"
        raise BenchInputError("defense", name, reason=reason)
