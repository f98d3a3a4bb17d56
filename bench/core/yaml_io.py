"""The project's one YAML reader: task and suite files, ``--config`` files and command-line
values (``--param protocol.lr=1e-3``, ``--defense gaussian_noise:sigma=0.5``).

It is PyYAML's safe loader with numbers read the way people write them, and with the input
that cannot be stored refused:

- numbers follow YAML 1.2 (and Python) rather than YAML 1.1: ``1e6``, ``1e-3``, ``2.5E+4`` and
  ``.5`` are floats (PyYAML reads the first three as strings), ``010`` is ten (not octal 8),
  ``1:30`` is a string (not the sexagesimal 90); ``0x1f``, ``0o17``, ``0b101`` and ``1_000``
  are integers;
- an infinite or NaN number (``.inf``, ``.nan``, ``1e999``) is an error: results are stored as
  standard JSON, which has neither;
- a key given twice in one mapping is an error naming both lines (PyYAML keeps the last one);
- a document whose aliases (``*name``) expand it to more than :data:`MAX_EXPANDED_VALUES` values
  (a "billion laughs" alias bomb: a few lines that stand for a billion values), or in which an
  alias refers to a node that contains it (a recursive value), is an error naming the line.

Errors are :class:`~bench.core.errors.BenchInputError` naming the file (or the argument), the line
and what is wrong; a file that is not UTF-8 text is one too.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from bench.core.errors import NON_FINITE, BenchInputError, short_repr

INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
_DIGITS = "[0-9](?:_?[0-9])*"
INT_PATTERN = re.compile(
    rf"^[-+]?(?:{_DIGITS}|0[xX][0-9a-fA-F](?:_?[0-9a-fA-F])*|0[oO][0-7](?:_?[0-7])*|0[bB][01](?:_?[01])*)$"
)
#: the most values (scalars, lists and mappings, each alias counted as the values it stands for)
#: a document with aliases may expand to; task, suite and config files have a few hundred
MAX_EXPANDED_VALUES = 100_000
FLOAT_PATTERN = re.compile(
    rf"^[-+]?(?:(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][-+]?[0-9]+)?"
    r"|\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


class YAMLValueError(ConstructorError):
    """A well-formed YAML value the project refuses (a duplicate key, a non-finite number).

    ``problem`` says what is wrong where; ``short`` says it without referring to lines (for a
    one-line command-line value)."""

    def __init__(self, problem: str, mark: yaml.Mark, short: str) -> None:
        super().__init__(None, None, problem, mark)
        self.short = short


def check_expansion(root: yaml.Node) -> None:
    """Raise :class:`YAMLValueError` when the value of ``root`` — with every alias expanded into
    the values it stands for — has more than :data:`MAX_EXPANDED_VALUES` values, or contains
    itself. Each distinct node is visited once (its expanded size is remembered), so the check
    costs as much as the document's text, not its expansion."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            problem = "an alias refers to a value that contains it (a recursive value)"
            raise YAMLValueError(problem, node.start_mark, "recursive alias")
        open_nodes.add(key)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        total = 1 + sum(size(child) for child in children)
        open_nodes.discard(key)
        if total > MAX_EXPANDED_VALUES:
            problem = (
                f"its aliases expand this value to more than {MAX_EXPANDED_VALUES:,} values "
                "(an alias bomb?); write the values out or use fewer aliases"
            )
            raise YAMLValueError(
                problem, node.start_mark, f"aliases expand to over {MAX_EXPANDED_VALUES:,} values"
            )
        sizes[key] = total
        return total

    size(root)


class BenchLoader(yaml.SafeLoader):
    """:class:`yaml.SafeLoader` with the number rules, finiteness check, duplicate-key check and
    alias-expansion bound described in the module docstring."""

    #: whether the document being composed has an alias (only then is its expansion checked)
    aliases_seen: bool = False

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            self.aliases_seen = True
        return super().compose_node(parent, index)

    def compose_document(self) -> yaml.Node:
        self.aliases_seen = False
        node = super().compose_document()
        if self.aliases_seen:  # without aliases the values are bounded by the text
            check_expansion(node)
        return node

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node)).replace("_", "")
        sign = -1 if text.startswith("-") else 1
        digits = text.lstrip("+-")
        base = {"0x": 16, "0o": 8, "0b": 2}.get(digits[:2].lower(), 10)
        try:
            return sign * int(digits[2:] if base != 10 else digits, base)
        except ValueError:
            raise ConstructorError(None, None, f"{text!r} is not an integer", node.start_mark) from None

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        text = str(self.construct_scalar(node))
        plain = text.replace("_", "").lower()
        try:
            value = float(plain[:-4] + plain[-3:] if plain.endswith((".inf", ".nan")) else plain)
        except ValueError:
            raise ConstructorError(None, None, f"{text!r} is not a number", node.start_mark) from None
        if not math.isfinite(value):
            raise YAMLValueError(f"{text!r} is {NON_FINITE}", node.start_mark, NON_FINITE)
        return value

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Node] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(value_node, yaml.ScalarNode) and value_node.tag == FLOAT_TAG:
                try:  # a non-finite number is reported with the key it is the value of
                    self.construct_yaml_float(value_node)
                except YAMLValueError as exc:
                    problem = f"{short_repr(key)}: {exc.problem}"
                    raise YAMLValueError(problem, value_node.start_mark, exc.short) from None
            try:
                earlier = first.setdefault(key, key_node)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if earlier is not key_node:
                first_line = earlier.start_mark.line + 1
                raise YAMLValueError(
                    f"duplicate key {short_repr(key)} (first at line {first_line})",
                    key_node.start_mark,
                    f"duplicate key {short_repr(key)}",
                )
        return super().construct_mapping(node, deep=deep)


BenchLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (INT_TAG, FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
BenchLoader.add_implicit_resolver(INT_TAG, INT_PATTERN, list("-+0123456789"))
BenchLoader.add_implicit_resolver(FLOAT_TAG, FLOAT_PATTERN, list("-+0123456789."))
BenchLoader.add_constructor(INT_TAG, BenchLoader.construct_yaml_int)
BenchLoader.add_constructor(FLOAT_TAG, BenchLoader.construct_yaml_float)


def load_yaml(text: str) -> Any:
    """Parse YAML text with :class:`BenchLoader` (raises :class:`yaml.YAMLError`)."""
    return yaml.load(text, Loader=BenchLoader)  # a SafeLoader subclass


def yaml_problem(exc: yaml.YAMLError, text: str, *, lines: bool = True) -> str:
    """What is wrong, in words: the problem and (with ``lines``) where it is in ``text``."""
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        what = f"character #x{exc.character:04x} is not allowed in YAML"
        return f"line {line}: {what}" if lines else what
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "syntax error"
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None and lines else ""
    if isinstance(exc, YAMLValueError):
        return f"{where}: {problem}" if where else exc.short
    return f"malformed YAML at {where}: {problem}" if where else f"malformed YAML: {problem}"


def read_yaml(path: Path, field: str | None = None) -> Any:
    """Parse a YAML file; a missing, unreadable, non-UTF-8 or malformed file is a
    :class:`BenchInputError` naming the file (and the line of the problem).

    Parameters
    ----------
    path:
        The file.
    field:
        What the error calls the file, e.g. ``"--config"`` (the value is then the path); by
        default the path itself (the value is then the file name).
    """
    name, value = (field, str(path)) if field else (str(path), path.name)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BenchInputError(name, value, reason="no such file") from None
    except OSError as exc:
        raise BenchInputError(name, value, reason=f"cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        reason = f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line}; save the file as UTF-8"
        raise BenchInputError(name, value, reason=reason) from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise BenchInputError(name, value, reason=yaml_problem(exc, text)) from None
