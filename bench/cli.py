"""Command line: ``python -m bench <command>``.

Commands are registered with :data:`COMMANDS`. Any bad input (unknown names, malformed
YAML, unknown or ill-typed fields, impossible graphs, a coalition naming a missing node) is
reported as one paragraph naming the field, the value and the valid choices, with exit code
2 and no traceback; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from bench.commands import (
    COMMANDS,
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    evaluate,
    leaderboard,
    listing,
    reproduce,
    simulate,
)
from bench.core.errors import BenchInputError

__all__ = ["COMMANDS", "build_parser", "main"]


def cmd_data(args: argparse.Namespace) -> int:
    from bench.data.cli import cmd_data as run_data

    return run_data(args)


COMMANDS.register("data", "list, download, verify and import real datasets")(cmd_data)


def cmd_schema(args: argparse.Namespace) -> int:
    from bench.spec.reference import cmd_schema as run_schema

    return run_schema(args)


COMMANDS.register("schema", "print the field reference of task, suite and simulation files")(cmd_schema)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (listing, evaluate, simulate, leaderboard, reproduce):
        module.add_parser(sub)
    from bench.data.cli import add_data_parser

    add_data_parser(sub)
    from bench.spec.reference import add_schema_parser

    add_schema_parser(sub)
    _debug_everywhere(sub)
    return parser


def _debug_everywhere(sub: Any) -> None:
    """``--debug`` works after the subcommand too (``bench evaluate --debug``), at every level."""
    todo = list(sub.choices.values())
    while todo:
        p = todo.pop()
        if "--debug" not in p._option_string_actions:
            p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())


def _terminate_as_interrupt() -> None:
    """SIGTERM (``kill PID``, a scheduler stopping the command) is handled as Ctrl-C in this
    process: what finished is kept and the command says so, as for a ``KeyboardInterrupt``.
    A process forked from this one (a worker) keeps the default: it ends at once."""
    if threading.current_thread() is not threading.main_thread():
        return
    main_pid = os.getpid()

    def on_term(signum: int, frame: object) -> None:
        if os.getpid() != main_pid:  # a forked child inherited the handler: end as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_term)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    handler: Callable[[argparse.Namespace], int] = COMMANDS.get(args.command)
    _terminate_as_interrupt()
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("interrupted before anything was saved.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BenchInputError as exc:
        if args.debug:
            raise
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        from pydantic import ValidationError

        from bench.simulation.config import SimulationConfig
        from bench.spec.schema import validation_message

        if isinstance(exc, ValidationError) and not args.debug:
            print(f"error: {validation_message(exc, model=SimulationConfig)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise
