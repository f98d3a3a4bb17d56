"""The subcommands of ``python -m bench``: one module each, registered with :data:`COMMANDS`; a
module registers its handler (``args -> exit code``) and adds its options to the parser
(``add_parser(sub)``), and :mod:`bench.cli` builds the parser and maps errors to exit codes.
"""

from __future__ import annotations

from bench.core.registry import Registry

COMMANDS: Registry = Registry("command")
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
