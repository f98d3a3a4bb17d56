"""``python -m bench list [KIND]``: the catalogues (tasks, suites, attacks, defenses, …).

What does not load (a broken defense plugin or task file) is one ``error:`` line each after
the rest is listed, and makes the exit code 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bench.commands import COMMANDS
from bench.core.errors import BenchInputError


def _catalogues(root: Path | None = None) -> dict[str, Any]:
    from bench.attacks import ATTACKS
    from bench.data import DATASETS, PARTITIONS
    from bench.defense.loading import load_all_defenses
    from bench.defense.plugin import DEFENSES
    from bench.metrics import METRICS
    from bench.models import MODELS
    from bench.protocols import PROTOCOLS
    from bench.simulation.objective import LOSSES
    from bench.spec.catalog import Catalog, bench_root
    from bench.threats import THREATS
    from bench.threats.active.policy import POLICIES
    from bench.topology import GRAPHS, MIXINGS

    root = root or bench_root()
    problems = load_all_defenses(root)  # a broken plugin is reported, the others listed
    catalog = Catalog(root)
    tasks = []
    for n in catalog.task_names():
        try:
            tasks.append((n, _first_line(catalog.task(n).description)))
        except BenchInputError as exc:  # one broken task file does not hide the others
            problems.append(exc)
            tasks.append((n, "(does not load; see the error below)"))
    try:
        suites = [
            (
                n,
                f"{len(s.tasks)} tasks x {len(s.defenses)} defense configs x {s.seeds} seeds. "
                + _first_line(s.description),
            )
            for n, s in catalog.suites().items()
        ]
    except BenchInputError as exc:
        problems.append(exc)
        suites = []
    return {
        "problems": problems,
        "tasks": tasks,
        "suites": suites,
        "attacks": ATTACKS,
        "defenses": DEFENSES,
        "metrics": METRICS,
        "datasets": DATASETS,
        "partitions": PARTITIONS,
        "models": MODELS,
        "losses": LOSSES,
        "topologies": GRAPHS,
        "mixings": MIXINGS,
        "protocols": PROTOCOLS,
        "threats": THREATS,
        "policies": POLICIES,
    }


def _first_line(text: str) -> str:
    text = " ".join(text.split())
    return text.split(". ")[0][:100]


@COMMANDS.register("list", "list tasks, suites, attacks, defenses, metrics, datasets, models, protocols …")
def cmd_list(args: argparse.Namespace) -> int:
    from bench.spec.catalog import bench_root

    cats = _catalogues(bench_root(args.root))
    problems = cats.pop("problems")
    kinds = [args.kind] if args.kind else list(cats)
    for kind in kinds:
        if kind not in cats:
            raise BenchInputError("kind", kind, choices=cats)
        print(f"{kind}:")
        entries = cats[kind] if isinstance(cats[kind], list) else cats[kind].describe()
        for name, desc in entries:
            print(f"  {name:<32} {desc}")
    # the rest is listed; what did not load is one line each and makes the exit code 2
    for exc in problems:
        print(f"error: {exc.message}", file=sys.stderr)
    return 2 if problems else 0


def add_parser(sub: Any) -> None:
    p_list = sub.add_parser("list", help="list tasks, suites, attacks, defenses, metrics, protocols …")
    p_list.add_argument(
        "kind", nargs="?", help="tasks, suites, attacks, defenses, metrics, datasets, models …"
    )
    p_list.add_argument(
        "--root", help="benchmark root with tasks/ and defenses/ (default: BENCH_ROOT or repo)"
    )
