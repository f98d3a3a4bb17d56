"""The field reference of task, suite and simulation files, generated from the pydantic models.

``python -m bench schema [task|suite|simulation ...]`` prints, for every field (nested ones as
``simulation.nodes`` or ``threats[].attacks[].params``), its type with its constraints, its
default (or that it is required) and its description, taken from the models' ``Field``
descriptions; each section starts with its model's docstring. Without a kind it prints the
whole reference of the task and suite files, which is committed as ``docs/task-reference.md``
(``tests/spec/test_spec_reference.py`` fails when that file is out of date).

The models are imported when a reference is rendered, not with this module, so that the command
line starts without importing torch.
"""

from __future__ import annotations

import argparse
import inspect
import math
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from bench.core.errors import BenchInputError

#: the kinds ``python -m bench schema`` accepts, in the order of the full reference
KINDS = ("task", "suite", "simulation")
#: the kinds of the full reference (``simulation`` is in the task's as ``simulation.*``)
DOCUMENT_KINDS = ("task", "suite")
REGENERATE = "python -m bench schema > docs/task-reference.md"
WIDTH = 100


@dataclass(frozen=True)
class Section:
    """One model's part of the reference: a title, where such YAML is written, the model."""

    title: str
    where: str
    model: type[BaseModel]


def sections(kind: str) -> list[Section]:
    """The sections of the reference of ``kind``.

    Raises
    ------
    BenchInputError
        If ``kind`` is not one of :data:`KINDS`.
    """
    from bench.simulation.config import SimulationConfig
    from bench.spec.schema import SuiteSpec, TaskSpec
    from bench.spec.variants import TaskFamily

    if kind not in KINDS:
        raise BenchInputError("kind", kind, choices=KINDS)
    return {
        "task": [
            Section("Task", "a file `tasks/<name>.yaml`", TaskSpec),
            Section("Task family", "a file `tasks/<family>.yaml` with `variants`", TaskFamily),
        ],
        "suite": [Section("Suite", "an entry `<name>: {...}` of `tasks/suites.yaml`", SuiteSpec)],
        "simulation": [
            Section(
                "Simulation",
                "a task's `simulation`, or the file of `python -m bench simulate --config FILE`",
                SimulationConfig,
            )
        ],
    }[kind]


# ------------------------------------------------------------------------------- rendering
def markdown(doc: str) -> str:
    """A docstring as Markdown: reST roles and double backquotes become single backquotes."""
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?(\w+)`", r"`\1`", inspect.cleandoc(doc))
    return text.replace("``", "`")


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def type_name(annotation: Any, plural: bool = False) -> str:
    """A readable type: ``integer``, ``string or null``, ``list of strings``, ``one of `a`, `b```.

    Parameters
    ----------
    annotation:
        A field's annotation.
    plural:
        Name the type in the plural (the items of a list).
    """
    origin, args = get_origin(annotation), get_args(annotation)
    s = "s" if plural else ""
    if origin in (Union, UnionType):
        return " or ".join("null" if a is type(None) else type_name(a, plural) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list{s} of {type_name(args[0], plural=True) if args else 'values'}"
    if origin is dict or annotation is dict:
        return f"mapping{s}"
    if _model_of(annotation) is not None:
        return f"mapping{s} (fields below)"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation))) + s


def constraints(info: FieldInfo) -> list[str]:
    """The field's numeric and length bounds, e.g. ``> 0``, ``at least 1 item``."""
    found = []
    for meta in info.metadata:
        if isinstance(meta, annotated_types.Gt):
            found.append(f"> {meta.gt}")
        elif isinstance(meta, annotated_types.Ge):
            found.append(f"≥ {meta.ge}")
        elif isinstance(meta, annotated_types.Lt):
            found.append(f"< {meta.lt}")
        elif isinstance(meta, annotated_types.Le):
            found.append(f"≤ {meta.le}")
        elif isinstance(meta, annotated_types.MinLen):
            found.append(f"at least {meta.min_length} item{'s' if meta.min_length != 1 else ''}")
    return found


def default_text(info: FieldInfo) -> str:
    """``required``, or the default as YAML (a nested model's default: its fields' defaults)."""
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "default: its fields' defaults"
    if isinstance(value, list):
        value = [v.model_dump() if isinstance(v, BaseModel) else v for v in value]
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf, allow_unicode=True)
    return f"default `{text.strip().removesuffix('...').strip()}`"


def field_entries(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """Every field of ``model``, nested models' fields after the field that holds them.

    Parameters
    ----------
    model:
        The model.
    prefix:
        Put before each name (``simulation.``, ``threats[].``).

    Yields
    ------
    tuple of str
        ``(dotted name, type, constraints and default, description)``, e.g.
        ``("simulation.nodes", "integer, > 0, default `10`", "Number of nodes …")``.
    """
    for name, info in model.model_fields.items():
        annotation = info.annotation
        shape = ", ".join([type_name(annotation), *constraints(info), default_text(info)])
        yield f"{prefix}{name}", shape, info.description or ""
        nested = _model_of(annotation)
        if nested is not None:
            yield from field_entries(nested, f"{prefix}{name}.")
        elif get_origin(annotation) is list and _model_of(get_args(annotation)[0]) is not None:
            yield from field_entries(get_args(annotation)[0], f"{prefix}{name}[].")


def _fill(text: str, indent: str = "") -> str:
    """``text`` wrapped at :data:`WIDTH`, never inside a word or at a hyphen (paths, options)."""
    return textwrap.fill(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def render_section(section: Section) -> str:
    """A section: its title, where it is written, the model's docstring and its fields."""
    intro = [_fill(p) for p in markdown(section.model.__doc__ or "").split("\n\n")]
    lines = [f"## {section.title} ({section.where})", "", "\n\n".join(intro), ""]
    for name, shape, description in field_entries(section.model):
        lines.append(f"- `{name}` — {shape}.")
        if description:
            lines.append(_fill(markdown(description), indent="  "))
    return "\n".join(lines) + "\n"


def reference(kinds: tuple[str, ...] | list[str] = ()) -> str:
    """The field reference as Markdown.

    Parameters
    ----------
    kinds:
        Some of :data:`KINDS`, in the order to print; none: the whole document of
        :data:`DOCUMENT_KINDS` with its title (the content of ``docs/task-reference.md``).

    Raises
    ------
    BenchInputError
        For a kind that is not one of :data:`KINDS`.
    """
    parts = [render_section(s) for kind in (kinds or DOCUMENT_KINDS) for s in sections(kind)]
    if not kinds:
        title = [
            "# Task and suite files: field reference",
            "",
            _fill(
                f"Generated from the pydantic models (`{REGENERATE}`): edit the models' docstrings "
                "and `Field(description=...)` in `bench/`, not this file. `python -m bench schema "
                "simulation` prints the fields of a `--config` file of `python -m bench simulate`."
            ),
            "",
        ]
        parts.insert(0, "\n".join(title))
    return "\n".join(parts)


# ---------------------------------------------------------------------------- command line
def add_schema_parser(sub: Any) -> None:
    """Add ``schema`` to the command line's subparsers."""
    parser = sub.add_parser("schema", help="print the field reference of task, suite and simulation files")
    parser.add_argument("kind", nargs="*", help=f"{', '.join(KINDS)} (default: task and suite)")


def cmd_schema(args: argparse.Namespace) -> int:
    """``python -m bench schema [KIND ...]``: print the reference (Markdown)."""
    for kind in args.kind:
        sections(kind)  # an unknown kind is an input error before anything is printed
    print(reference(tuple(args.kind)), end="")
    return 0
