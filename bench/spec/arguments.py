"""Values given on the command line: ``key=value`` parameters (read like YAML files), lists of
``key=value`` items, lists of integers and the output folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from bench.core.errors import BenchInputError
from bench.core.yaml_io import YAMLValueError, load_yaml, yaml_problem


def parse_value(text: str, field: str, argument: str) -> Any:
    """A value given on the command line as ``key=value``, read with the same rules as files.

    Text that is not YAML (``@x``) stays a string; a malformed list or mapping (``[1, 2``), a
    non-finite number and a key given twice are errors, and so is an empty value.

    Parameters
    ----------
    text:
        What follows ``=``.
    field:
        The parameter, e.g. ``"defense.sigma"``; the error names it.
    argument:
        The whole argument (``"gaussian_noise:sigma="``), quoted in the error of an empty value.
    """
    if not text.strip():
        raise BenchInputError(field, text, reason=f"empty value in {argument!r}: write key=VALUE")
    try:
        return load_yaml(text)
    except YAMLValueError as exc:
        raise BenchInputError(field, text, reason=exc.short) from None
    except yaml.YAMLError as exc:
        if text.lstrip()[0] in "[{":
            reason = yaml_problem(exc, text, lines=False).replace("YAML", "YAML list or mapping")
            raise BenchInputError(field, text, reason=reason) from None
        return text


def split_items(text: str, sep: str = ",") -> list[str]:
    """``text`` split at each ``sep`` outside brackets, braces and quoted values, items stripped
    and empty ones dropped: ``"sigma=0.5,kinds=[z0, dz]"`` → ``["sigma=0.5", "kinds=[z0, dz]"]``.
    A quote opens a quoted value only where YAML would (after ``=``, ``:``, ``,``, ``[``, ``{``)."""
    items, depth, quote, start, previous = [], 0, "", 0, sep
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"" and previous in f"=:,[{{{sep}":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth = max(depth - 1, 0)
        elif char == sep and depth == 0:
            items.append(text[start:i])
            start = i + 1
        previous = char if not char.isspace() else previous
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def integers(text: str, field: str, value: str, reason: str) -> list[int]:
    """Comma-separated non-negative integers (``"0,3"``), at least one; else an error naming
    ``field``, ``value`` and ``reason``."""
    items = [item.strip() for item in text.split(",")]
    if not all(item.isascii() and item.isdigit() for item in items):
        raise BenchInputError(field, value, reason=reason)
    return [int(item) for item in items]


def output_folder(path: str) -> Path:
    """The folder ``--out``, created; an error naming it when it cannot be created or written."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchInputError("--out", path, reason=f"cannot create the folder: {exc.strerror}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise BenchInputError("--out", path, reason="the folder is not writable")
    return out
