"""User-facing input errors.

Every mistake a user can make in a spec or on the command line is reported as a
:class:`BenchInputError`: one paragraph naming the field, the bad value and the valid
choices. The CLI turns it into exit code 2 without a traceback (``--debug`` shows one).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from typing import Any

#: the reason of an error about a parameter name a factory does not accept
UNKNOWN_PARAMETER = "unknown parameter"
#: the most characters of a user's value an error message shows (the rest is cut at "…")
REPR_LIMIT = 300


class _Full(Exception):
    """Raised inside :func:`short_repr` once the text is long enough."""


def short_repr(value: Any, limit: int = REPR_LIMIT) -> str:
    """``repr(value)``, cut after ``limit`` characters with ``"…"``, computed without building
    the whole text: a value that shares or repeats its parts (a YAML alias bomb, a list of a
    million numbers, a recursive list) costs at most about ``limit`` characters of work."""
    out: list[str] = []
    size = 0

    def emit(text: str) -> None:
        nonlocal size
        out.append(text)
        size += len(text)
        if size > limit:
            raise _Full

    def walk(item: Any) -> None:
        kind = type(item)
        if kind is dict:
            emit("{")
            for i, (key, sub) in enumerate(item.items()):
                emit(", " if i else "")
                walk(key)
                emit(": ")
                walk(sub)
            emit("}")
        elif kind is list or kind is tuple:
            emit("[" if kind is list else "(")
            for i, sub in enumerate(item):
                emit(", " if i else "")
                walk(sub)
            emit("]" if kind is list else ",)" if len(item) == 1 else ")")
        else:
            emit(repr(item)[: limit + 1])

    try:
        walk(value)
    except (_Full, RecursionError):
        return "".join(out)[:limit] + "…"
    return "".join(out)


class BenchInputError(ValueError):
    """A bad value supplied by the user.

    Parameters
    ----------
    field:
        Dotted name of the offending field, e.g. ``"topology.name"``.
    value:
        The value that was given.
    choices:
        Valid choices, listed in the message when given; a misspelt name is followed by
        "Did you mean ...?" (see :func:`closest_name`).
    reason:
        What is wrong, when "not one of the choices" is not the whole story.
    """

    def __init__(
        self,
        field: str,
        value: Any,
        choices: Iterable[Any] | None = None,
        reason: str | None = None,
    ) -> None:
        self.field = field
        self.value = value
        self.choices = sorted(map(str, choices)) if choices is not None else None
        self.reason = reason
        super().__init__(self.message)

    @property
    def suggestion(self) -> str | None:
        """The valid choice closest to the name that was looked up, ``None`` without choices or
        a close one. The name is the value, or for an unknown parameter (a reason starting with
        :data:`UNKNOWN_PARAMETER`) the last part of the field: ``protocol.lrr`` suggests ``lr``."""
        unknown_key = (self.reason or "").startswith(UNKNOWN_PARAMETER)
        name = self.field.rsplit(".", 1)[-1] if unknown_key else self.value
        if not self.choices or not isinstance(name, str) or name in self.choices:
            return None
        return closest_name(name, self.choices)

    @property
    def message(self) -> str:
        text = f"invalid value for '{self.field}': {short_repr(self.value)}"
        if self.reason:
            text += f" ({self.reason})"
        text += "." + did_you_mean(self.suggestion)
        if self.choices is not None:
            text += " Valid choices: " + (", ".join(self.choices) or "none") + "."
        return text


def closest_name(name: str, choices: Iterable[Any]) -> str | None:
    """The choice most similar to ``name`` (:func:`difflib.get_close_matches`, similarity at
    least 0.6, case-insensitive), or ``None``."""
    by_lower = {str(c).lower(): str(c) for c in choices}
    match = difflib.get_close_matches(str(name).lower(), list(by_lower), n=1)
    return by_lower[match[0]] if match else None


def did_you_mean(suggestion: str | None) -> str:
    """The sentence ``" Did you mean 'x'?"`` for a suggestion, ``""`` for none."""
    return f" Did you mean '{suggestion}'?" if suggestion else ""


def require(condition: bool, field: str, value: Any, reason: str) -> None:
    """Raise :class:`BenchInputError` unless ``condition`` holds."""
    if not condition:
        raise BenchInputError(field, value, reason=reason)


def require_positive_int(value: Any, field: str, *, allow_zero: bool = False) -> int:
    """Return ``value`` as an int after checking it is a (non-negative) positive integer."""
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    require(
        ok, field, value, "must be a non-negative integer" if allow_zero else "must be a positive integer"
    )
    return int(value)


def require_number(value: Any, field: str, *, positive: bool = True) -> float:
    """Return ``value`` as a float after checking it is a finite positive (``positive=False``:
    non-negative) number; a string, a boolean or NaN is an input error naming ``field``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > 0 if positive else value >= 0)
    require(ok, field, value, "must be a positive number" if positive else "must be a non-negative number")
    return float(value)


#: why an infinite or NaN parameter is refused
NON_FINITE = "not a finite number: results are stored as standard JSON, which has no inf or NaN"


def find_non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """The first infinite or NaN float inside ``value`` (nested mappings, lists and tuples) and
    its path below ``value`` (``".lr"``, ``"[1]"``, ``""`` for ``value`` itself), or ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    items: Iterable[tuple[str, Any]] = ()
    if isinstance(value, dict):
        items = ((f"{path}.{k}", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    for sub_path, item in items:
        if (found := find_non_finite(item, sub_path)) is not None:
            return found
    return None


def require_finite(value: Any, field: str) -> Any:
    """Return ``value`` after checking that no float inside it is infinite or NaN; else a
    :class:`BenchInputError` naming ``field`` and the path of the bad number inside it."""
    found = find_non_finite(value)
    if found is not None:
        path, number = found
        raise BenchInputError(field + path, number, reason=NON_FINITE)
    return value
