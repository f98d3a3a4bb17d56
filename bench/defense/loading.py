"""Finding and loading defense plugins: ``defenses/<name>.py`` under a benchmark root.

A plugin is loaded from its source bytes (the ones the harness hashes into every job's key), after
the plugin rules (:func:`bench.defense.source_policy.check_plugin_source`) have passed on them, in
a module of its own; whatever it registered is taken back when it fails. Loading happens only in
the processes that run defense code (:mod:`bench.evaluation`): the parent never imports a plugin.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from bench.core.errors import BenchInputError, short_repr
from bench.defense.frozen import freeze_class
from bench.defense.plugin import DEFENSES, Defense
from bench.defense.source_policy import check_plugin_source


def defenses_dir(root: Path) -> Path:
    return root / "defenses"


def discover_defenses(root: Path) -> list[str]:
    """Names of the defense plugins under ``root/defenses`` (one module each)."""
    folder = defenses_dir(root)
    return (
        sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")) if folder.is_dir() else []
    )


def defense_path(name: str, root: Path) -> Path:
    """The plugin file of defense ``name`` (an input error listing the plugins if absent)."""
    available = discover_defenses(root)
    if name not in available:
        raise BenchInputError(
            "defense", name, choices=available or ["(no defenses/ folder under " + str(root) + ")"]
        )
    return defenses_dir(root) / f"{name}.py"


def source_digest(source: bytes) -> str:
    """SHA-256 (first 16 hex digits) of a plugin's source: part of every job's key."""
    return hashlib.sha256(source).hexdigest()[:16]


def load_defense_module(name: str, root: Path, source: bytes | None = None) -> None:
    """Import the plugin ``root/defenses/<name>.py`` (which registers the defense), once per
    process. With ``source``, execute exactly those bytes (the ones the harness hashed).

    A plugin that breaks the plugin rules (:func:`~bench.defense.source_policy.check_plugin_source`:
    checked on the source before any of it runs), that cannot be read or executed (syntax error,
    non-UTF-8 bytes, an exception or a ``sys.exit()`` at import), that registers a name another
    plugin has, or that does not register exactly ``name`` as a :class:`Defense`, is an input
    error naming the file; whatever it registered is removed again. The classes the plugin
    defines are frozen once it has loaded (:func:`freeze_class`): their attributes cannot change
    while its code runs."""
    if name in DEFENSES:
        return
    path = defense_path(name, root)
    module_name = f"bench_defense_plugins.{name}"
    before = set(DEFENSES.names())
    try:
        code = path.read_bytes() if source is None else source
        check_plugin_source(code, path, name)
        spec = importlib.util.spec_from_loader(module_name, loader=None, origin=str(path))
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        module.__file__ = str(path)
        sys.modules[module_name] = module
        exec(compile(code, str(path), "exec"), module.__dict__)
    except BenchInputError:
        _unregister(set(DEFENSES.names()) - before, module_name)
        raise
    except SystemExit as exc:  # sys.exit() in the plugin would otherwise end bench silently
        _unregister(set(DEFENSES.names()) - before, module_name)
        code = short_repr(exc.code)
        reason = f"the plugin {path} does not load: it called sys.exit({code}) at import"
        raise BenchInputError("defense", name, reason=reason) from None
    except Exception as exc:  # any failure of the plugin's own code: one line naming the file
        _unregister(set(DEFENSES.names()) - before, module_name)
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        raise BenchInputError("defense", name, reason=f"the plugin {path} does not load: {text}") from None
    added = set(DEFENSES.names()) - before
    if added != {name}:
        _unregister(added, module_name)
        found = f"registers {', '.join(sorted(added))}" if added else "registers no defense"
        raise BenchInputError("defense", name, reason=f"{path} {found}; it must register exactly '{name}'")
    registered = DEFENSES.get(name)
    if not (isinstance(registered, type) and issubclass(registered, Defense)):
        _unregister(added, module_name)
        raise BenchInputError(
            "defense", name, reason=f"{path} registers {registered!r}, not a Defense subclass"
        )
    for value in list(vars(sys.modules[module_name]).values()):
        if isinstance(value, type) and value.__module__ == module_name:
            freeze_class(value)


def _unregister(names: set[str], module_name: str) -> None:
    for n in names:
        DEFENSES.remove(n)
    sys.modules.pop(module_name, None)


def load_all_defenses(root: Path) -> list[BenchInputError]:
    """Load every plugin under ``root/defenses``; returns the problems of those that do not
    load (each names its file), having loaded the others."""
    problems = []
    for name in discover_defenses(root):
        try:
            load_defense_module(name, root)
        except BenchInputError as exc:
            problems.append(exc)
    return problems


def build_defense(name: str, params: dict[str, Any], root: Path, source: bytes | None = None) -> Defense:
    """Instantiate the defense plugin ``name`` with ``params``."""
    from bench.core.params import call_with_params

    load_defense_module(name, root, source)
    return call_with_params(DEFENSES, name, "defense", **params)
