"""Where bench finds its tasks, suites and defense plugins.

The benchmark root is, in order: ``--root``, the ``BENCH_ROOT`` environment variable, the
repository next to the installed package (editable install), the current directory. It holds
``tasks/*.yaml`` (one task per file, named like the file, or a family of tasks with
``variants``: :mod:`bench.spec.variants`), ``tasks/suites.yaml`` and ``defenses/*.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core.errors import BenchInputError
from bench.core.yaml_io import read_yaml
from bench.spec.schema import SpecError, SuiteSpec, TaskSpec, parse_suites, parse_task
from bench.spec.variants import is_family, variant_names, variant_task

SUITES_FILE = "suites.yaml"


def bench_root(explicit: str | Path | None = None) -> Path:
    """The benchmark root folder (see module docstring)."""
    if explicit is not None:
        root = Path(explicit)
        if not (root / "tasks").is_dir():
            raise BenchInputError("--root", str(explicit), reason="it has no tasks/ folder")
        return root.resolve()
    env = os.environ.get("BENCH_ROOT")
    if env:
        if not (Path(env) / "tasks").is_dir():
            raise BenchInputError("BENCH_ROOT", env, reason="it has no tasks/ folder")
        return Path(env).resolve()
    beside = Path(__file__).resolve().parent.parent
    if (beside / "tasks").is_dir():
        return beside
    return Path.cwd()


@dataclass(frozen=True)
class TaskSource:
    """Where a task is defined: a file (its content, or why it could not be read) and, for a
    member of a family, the variant's name."""

    path: Path
    data: Any = None
    error: BenchInputError | None = None
    variant: str | None = None

    def describe(self) -> str:
        return f"{self.path}" + (f" (variant '{self.variant}')" if self.variant else "")

    def load(self, name: str) -> TaskSpec:
        """The validated task; the errors name the file (and the variant)."""
        if self.error is not None:
            raise self.error
        if self.variant is not None:
            return variant_task(self.data, self.path, self.variant)
        spec = parse_task(self.data, str(self.path))
        if spec.name != name:
            raise SpecError(f"{self.path}: the task's name is '{spec.name}' but the file is '{name}.yaml'.")
        return spec


def index_tasks(tasks_dir: Path) -> dict[str, TaskSource]:
    """Every task of ``tasks_dir`` by name: a plain file's stem, or each variant of a family file.

    A file that cannot be read or parsed is listed under its stem and reports its error when the
    task is loaded (so one broken file does not hide the others).

    Raises
    ------
    SpecError
        If two files define a task of the same name, or a family's variants cannot be listed.
    """
    index: dict[str, TaskSource] = {}
    if not tasks_dir.is_dir():
        return index
    for path in sorted(tasks_dir.glob("*.yaml")):
        if path.name == SUITES_FILE:
            continue
        try:
            data = read_yaml(path)
        except BenchInputError as exc:
            found = {path.stem: TaskSource(path, error=exc)}
        else:
            if is_family(data):
                found = {n: TaskSource(path, data, variant=n) for n in variant_names(data, path)}
            else:
                found = {path.stem: TaskSource(path, data)}
        for name, source in found.items():
            if name in index:
                raise SpecError(
                    f"task '{name}' is defined twice: in {index[name].describe()} and in "
                    f"{source.describe()}; rename or delete one of them."
                )
            index[name] = source
    return index


class Catalog:
    """Tasks and suites of a benchmark root, loaded and validated lazily by name."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tasks_dir = root / "tasks"
        self._index: dict[str, TaskSource] | None = None
        self._tasks: dict[str, TaskSpec] = {}

    def sources(self) -> dict[str, TaskSource]:
        """Where each task is defined (read once; see :func:`index_tasks`)."""
        if self._index is None:
            self._index = index_tasks(self.tasks_dir)
        return self._index

    def task_names(self) -> list[str]:
        return sorted(self.sources())

    def task(self, name: str) -> TaskSpec:
        if name not in self._tasks:
            sources = self.sources()
            if name not in sources:
                raise BenchInputError("task", name, choices=sources)
            self._tasks[name] = sources[name].load(name)
        return self._tasks[name]

    def suites(self) -> dict[str, SuiteSpec]:
        path = self.tasks_dir / SUITES_FILE
        if not path.is_file():
            return {}
        suites = parse_suites(read_yaml(path), str(path))
        for suite in suites.values():
            for task in suite.tasks:
                if task not in self.task_names():
                    raise BenchInputError(f"suite '{suite.name}'.tasks", task, choices=self.task_names())
        return suites

    def suite(self, name: str) -> SuiteSpec:
        suites = self.suites()
        if name not in suites:
            raise BenchInputError("suite", name, choices=suites)
        return suites[name]
