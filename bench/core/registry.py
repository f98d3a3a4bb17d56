"""Decorator-based registries: name -> implementation for every pluggable kind.

Usage::

    TOPOLOGIES = Registry("topology")

    @TOPOLOGIES.register("ring", "cycle graph C_n")
    def ring(n: int, seed: int) -> nx.Graph: ...

    TOPOLOGIES.get("ring")            # the function
    TOPOLOGIES.get("rng")             # BenchInputError listing the valid names

A registry never dispatches through if/elif chains; new entries (including plugins) add
themselves by importing their module.

Finding the modules — two mechanisms, on purpose:

* **Trusted package code** (attacks, the papers' claims) is discovered by
  :func:`import_submodules`: the package imports every module under it, so adding an attack or a
  claim is one new file in its folder and no ``__init__`` edit.
* **Untrusted defenses** (``defenses/*.py``) are never discovered this way: their files come from
  strangers' pull requests, so :mod:`bench.defense.plugin` loads them by source, one named file at a
  time — the bytes that are hashed into the job key, a failure reported against its file and its
  registrations taken back — and a job runs their code only in sandboxed processes
  (:mod:`bench.evaluation.sandbox`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from bench.core.errors import BenchInputError

T = TypeVar("T")


@dataclass(frozen=True)
class Registered(Generic[T]):
    """One item of a :class:`Registry`: its name, the registered object and a one-line
    description."""

    name: str
    obj: T
    description: str


class Registry(Generic[T]):
    """A named mapping from string keys to registered objects.

    Parameters
    ----------
    kind:
        What the registry holds ("topology", "protocol", ...); used as the field name in
        error messages.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Registered[T]] = {}

    def register(self, name: str, description: str = "") -> Callable[[T], T]:
        """Decorator that registers ``obj`` under ``name``.

        The description defaults to the first line of the object's docstring.
        """

        def deco(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            doc = description or (getattr(obj, "__doc__", None) or "").strip().splitlines()[:1]
            text = doc if isinstance(doc, str) else (doc[0] if doc else "")
            self._entries[name] = Registered(name, obj, text)
            return obj

        return deco

    def get(self, name: str, field: str | None = None) -> T:
        """Return the object registered as ``name`` or raise a :class:`BenchInputError`."""
        try:
            return self._entries[name].obj
        except (KeyError, TypeError):
            raise BenchInputError(field or self.kind, name, choices=self._entries) from None

    def describe(self) -> list[tuple[str, str]]:
        """``(name, one-line description)`` for every entry, sorted by name."""
        return [(e.name, e.description) for e in sorted(self._entries.values(), key=lambda e: e.name)]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def remove(self, name: str) -> None:
        """Forget ``name`` (a plugin that failed to load takes back what it registered)."""
        self._entries.pop(name, None)

    def items(self) -> list[tuple[str, T]]:
        """``(name, object)`` for every entry, sorted by name."""
        return [(n, self._entries[n].obj) for n in self.names()]

    def __contains__(self, name: Any) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)


def import_submodules(package: str) -> list[str]:
    """Import every module and subpackage under ``package``, recursively, and return their names.

    Modules are found with :func:`pkgutil.iter_modules` over each package's ``__path__`` and
    imported depth-first in sorted order (a subpackage right before its own modules), so the
    order — and with it the order of registration — does not depend on the file system. This is
    the discovery of *trusted* plugins: importing a module runs it, so it is for package code
    only (attacks, claims), never for the untrusted defenses of ``defenses/`` (the module
    docstring says why). An import error propagates: a broken module is not skipped silently.
    """
    imported: list[str] = []

    def walk(name: str) -> None:
        path = getattr(importlib.import_module(name), "__path__", None)
        if path is None:
            return
        for info in sorted(pkgutil.iter_modules(path, name + "."), key=lambda m: m.name):
            imported.append(info.name)
            walk(info.name)  # imports it; recurses when it is a package

    walk(package)
    return imported
