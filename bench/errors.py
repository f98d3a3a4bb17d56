"""User-facing input errors.

Every mistake a user can make in a spec or on the command line is reported as a
:class:`BenchInputError`: one paragraph naming the field, the bad value and the valid
choices. The CLI turns it into exit code 2 without a traceback (``--debug`` shows one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


class BenchInputError(ValueError):
    """A bad value supplied by the user.

    Parameters
    ----------
    field:
        Dotted name of the offending field, e.g. ``"topology.name"``.
    value:
        The value that was given.
    choices:
        Valid choices, listed in the message when given.
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
    def message(self) -> str:
        text = f"invalid value for '{self.field}': {self.value!r}"
        if self.reason:
            text += f" ({self.reason})"
        if self.choices is not None:
            text += ". Valid choices: " + ", ".join(self.choices)
        return text + "."


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
