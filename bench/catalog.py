"""Where bench finds its tasks, suites and defense plugins.

The benchmark root is, in order: ``--root``, the ``BENCH_ROOT`` environment variable, the
repository next to the installed package (editable install), the current directory. It holds
``tasks/*.yaml`` (one task per file), ``tasks/suites.yaml`` and ``defenses/*.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.errors import BenchInputError
from bench.specs import SpecError, SuiteSpec, TaskSpec, parse_suites, parse_task, read_yaml

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


class Catalog:
    """Tasks and suites of a benchmark root, loaded and validated lazily by name."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tasks_dir = root / "tasks"
        self._tasks: dict[str, TaskSpec] = {}

    def task_names(self) -> list[str]:
        if not self.tasks_dir.is_dir():
            return []
        return sorted(p.stem for p in self.tasks_dir.glob("*.yaml") if p.name != SUITES_FILE)

    def task(self, name: str) -> TaskSpec:
        if name not in self._tasks:
            if name not in self.task_names():
                raise BenchInputError("task", name, choices=self.task_names())
            path = self.tasks_dir / f"{name}.yaml"
            spec = parse_task(read_yaml(path), str(path))
            if spec.name != name:
                raise SpecError(f"{path}: the task's name is '{spec.name}' but the file is '{name}.yaml'.")
            self._tasks[name] = spec
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
