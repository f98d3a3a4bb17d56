"""Calling registered factories with user-supplied parameters, with clear errors."""

from __future__ import annotations

import inspect
from typing import Any

from bench.errors import BenchInputError
from bench.registry import Registry


def check_params(fn: Any, params: dict[str, Any], field: str, reserved: tuple[str, ...] = ()) -> None:
    """Reject keyword arguments that ``fn`` does not accept, listing the ones it does."""
    sig = inspect.signature(fn)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return
    valid = [n for n in sig.parameters if n not in reserved]
    for key in params:
        if key not in sig.parameters or key in reserved:
            raise BenchInputError(f"{field}.{key}", params[key], choices=valid, reason="unknown parameter")


def call_with_params(registry: Registry, name: str, field: str, /, **kwargs: Any) -> Any:
    """Look ``name`` up in ``registry`` (errors under ``field.name``) and call it with ``kwargs``.

    Parameters not accepted by the factory are reported as unknown, with the valid ones.
    """
    fn = registry.get(name, field=f"{field}.name")
    check_params(fn, kwargs, field)
    return fn(**kwargs)


def require_choice(value: Any, choices: tuple[str, ...] | list[str], field: str) -> Any:
    """Return ``value`` if it is one of ``choices``, else raise a :class:`BenchInputError`."""
    if value not in choices:
        raise BenchInputError(field, value, choices=choices)
    return value
