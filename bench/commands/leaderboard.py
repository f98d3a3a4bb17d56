"""``python -m bench leaderboard export | validate | build | schema``: the committed entries."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.commands import COMMANDS


@COMMANDS.register("leaderboard", "export, validate and build the committed leaderboard entries")
def cmd_leaderboard(args: argparse.Namespace) -> int:
    from bench.catalog import Catalog, bench_root
    from bench.leaderboard import files
    from bench.results.store import ResultStore

    root = bench_root(args.root)
    entries = Path(args.entries) if args.entries else root / "leaderboard" / "entries"
    if args.action == "schema":
        path = root / "leaderboard" / "schema" / "entry.schema.json"
        files.write_schema(path)
        print(f"schema: {path}")
        return 0
    if args.action == "export":
        catalog = Catalog(root)
        suite = catalog.suite(args.suite)
        from bench.defenses_api import DEFENSES, load_all_defenses

        load_all_defenses(root)
        descriptions = {
            n: " ".join((DEFENSES.get(n).__doc__ or "").strip().split("\n\n")[0].split())
            for n in DEFENSES.names()
        }
        store_url = args.store or str(root / "runs" / "results.sqlite")
        with ResultStore(store_url) as store:
            results = store.results()
        tasks = list(args.task or suite.tasks)
        paths = files.export(results, suite.name, tasks, entries, descriptions)
        print(f"{len(paths)} entries written under {entries / suite.name}")
        return 0
    paths = files.entry_paths(entries)
    if args.action == "validate":
        checked = files.validate(paths)
        print(f"{len(checked)} entries valid: schema and recomputed numbers agree")
        return 0
    catalog = Catalog(root)
    tasks = {n: catalog.task(n) for n in catalog.task_names()}
    site = Path(args.site) if args.site else root / "leaderboard" / "site"
    page = files.build(paths, site, tasks)
    print(f"page: {page}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("leaderboard", help="export, validate and build the committed leaderboard entries")
    p.add_argument(
        "action",
        choices=("export", "validate", "build", "schema"),
        help="export (store → entries), validate (schema + recomputed numbers), build (entries → page), "
        "schema (rewrite the committed JSON schema)",
    )
    p.add_argument("--suite", default="quick", help="export: the suite whose tasks the entries cover")
    p.add_argument("--task", action="append", help="export: only these tasks (default: the suite's)")
    p.add_argument("--store", help="export: results store URL (default: runs/results.sqlite)")
    p.add_argument("--entries", help="the entries folder (default: leaderboard/entries)")
    p.add_argument("--site", help="build: output folder of the page (default: leaderboard/site)")
    p.add_argument("--root", help="benchmark root with tasks/ and defenses/ (default: BENCH_ROOT or repo)")
