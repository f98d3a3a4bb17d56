"""Calling registered factories with user-supplied parameters, with clear errors.

Every parameter a user gives (a task's ``protocol_params``, ``--param``, ``--defense
name:key=value``) is checked against the factory's signature before the call: an unknown name
is an error listing the valid ones (with the closest as "Did you mean"), and a value that does
not fit the parameter's annotation, where that is a simple type, is an error naming the field,
the value and the expected type (:func:`type_mismatch`).
"""

from __future__ import annotations

import collections.abc
import inspect
import numbers
import typing
from types import NoneType, UnionType
from typing import Any, Literal, Union

from bench.core.errors import NON_FINITE, UNKNOWN_PARAMETER, BenchInputError, find_non_finite
from bench.core.registry import Registry

_SEQUENCES = (list, tuple, collections.abc.Sequence)
_MAPPINGS = (dict, collections.abc.Mapping)
_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", NoneType: "null"}
_PLURALS = {bool: "booleans", int: "integers", float: "numbers", str: "strings", NoneType: "nulls"}


# ------------------------------------------------------------------------------ signatures
def _hints(fn: Any) -> dict[str, Any]:
    """``fn``'s resolved annotations (strings under ``from __future__ import annotations``
    included); empty when they cannot be resolved (then nothing is type-checked)."""
    try:
        return typing.get_type_hints(fn)
    except Exception:  # a name imported only for type checkers: check no types rather than fail
        return {}


def accepted_parameters(fn: Any) -> dict[str, Any] | None:
    """The keyword parameters ``fn`` accepts, each with its annotation (``Any`` when it has
    none), or ``None`` when ``fn`` accepts any keyword.

    A class whose ``__init__`` takes ``**kwargs`` passes them on to its base class
    (``super().__init__(**kwargs)``): the parameters of the next ``__init__`` up the MRO are
    added, the nearer class's taking precedence.
    """
    params: dict[str, Any] = {}
    signature = inspect.signature(fn)
    owners: list[type] = []
    if inspect.isclass(fn):
        owners = [c for c in fn.__mro__ if "__init__" in vars(c)]
    hints = _hints(owners[0].__init__ if owners else fn)
    while True:
        for p in signature.parameters.values():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                params.setdefault(p.name, hints.get(p.name, Any))
        if not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
            return params
        owners = owners[1:]
        if not owners or owners[0] is object:
            return None
        init = owners[0].__init__
        signature = inspect.signature(init)
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])  # self
        hints = _hints(init)


# ------------------------------------------------------------------------------ types
def _fits(value: Any, annotation: Any) -> bool | None:
    """Whether ``value`` has the type ``annotation`` describes; ``None`` when the annotation is
    not a simple type (then anything is accepted). A boolean is not a number, an integer is a
    valid float, a string is not a list, and a list is a valid tuple."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if annotation in (None, NoneType):
        return value is None
    if origin in (Union, UnionType):
        results = [_fits(value, a) for a in args]
        return True if True in results else (None if None in results else False)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if annotation in _SEQUENCES or origin in _SEQUENCES:
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                return False
            return _all_fit(zip(value, args, strict=True))
        return _all_fit((v, args[0]) for v in value) if args else True
    if annotation in _MAPPINGS or origin in _MAPPINGS:
        if not isinstance(value, dict):
            return False
        if len(args) != 2:
            return True
        return _all_fit([*((k, args[0]) for k in value), *((v, args[1]) for v in value.values())])
    return None


def _all_fit(pairs: collections.abc.Iterable[tuple[Any, Any]]) -> bool | None:
    results = [_fits(v, a) for v, a in pairs]
    return False if False in results else (None if None in results else True)


def describe_type(annotation: Any, plural: bool = False) -> str:
    """``annotation`` in words: ``an integer``, ``a list of numbers or null``, ``one of 'a', 'b'``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in _NAMES:
        return _PLURALS[annotation] if plural else _NAMES[annotation]
    if annotation is None:
        return _PLURALS[NoneType] if plural else "null"
    if origin in (Union, UnionType):
        parts = list(dict.fromkeys(describe_type(a, plural) for a in args))
        return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]
    if origin is Literal:
        return ("values " if plural else "") + "one of " + ", ".join(repr(a) for a in args)
    if annotation in _SEQUENCES or origin in _SEQUENCES:
        items = [a for a in args if a is not Ellipsis]
        if origin is tuple and args and args[-1] is not Ellipsis:
            inner = f" of {len(args)} items ({', '.join(describe_type(a) for a in args)})"
        else:
            inner = f" of {describe_type(items[0], plural=True)}" if items else ""
        return ("lists" if plural else "a list") + inner
    if annotation in _MAPPINGS or origin in _MAPPINGS:
        inner = ""
        if len(args) == 2:
            inner = f" of {describe_type(args[0], True)} to {describe_type(args[1], True)}"
        return ("mappings" if plural else "a mapping") + inner
    name = getattr(annotation, "__name__", str(annotation))
    return name + ("s" if plural else "")


def _kind(value: Any) -> str:
    """What ``value`` is, in the words of :func:`describe_type`."""
    for typ in (bool, NoneType, str):
        if isinstance(value, typ):
            return _NAMES[typ]
    if isinstance(value, numbers.Integral):
        return _NAMES[int]
    if isinstance(value, numbers.Real):
        return _NAMES[float]
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    return "a mapping" if isinstance(value, dict) else type(value).__name__


def type_mismatch(value: Any, annotation: Any) -> str | None:
    """Why ``value`` does not fit ``annotation`` (``"expected a number, got true or false"``),
    or ``None`` when it fits or the annotation is not a simple type (``int``, ``float``,
    ``bool``, ``str``, ``None``, ``Literal[...]``, lists, tuples and mappings of these, and
    unions of them). An infinite or NaN number never fits."""
    fits = _fits(value, annotation)
    if fits is not None and find_non_finite(value) is not None:
        return NON_FINITE
    if fits is not False:
        return None
    names_only = all(typing.get_origin(b) is Literal for b in _branches(annotation))
    if names_only and isinstance(value, str):
        return f"expected {describe_type(annotation)}"
    got = _kind(value)
    if isinstance(value, (list, tuple)):
        item_types = [a for a in _branches(annotation) if typing.get_origin(a) in _SEQUENCES]
        item_types = [typing.get_args(a)[0] for a in item_types if typing.get_args(a)]
        bad = [i for i, item in enumerate(value) if all(_fits(item, t) is False for t in item_types)]
        got = f"a list whose item {bad[0]} is {_kind(value[bad[0]])}" if bad and item_types else got
    return f"expected {describe_type(annotation)}, got {got}"


def _branches(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a union, or the annotation itself."""
    union = typing.get_origin(annotation) in (Union, UnionType)
    return typing.get_args(annotation) if union else (annotation,)


# ------------------------------------------------------------------------------ checking
def check_params(
    fn: Any, params: dict[str, Any], field: str, reserved: tuple[str, ...] = (), owner: str | None = None
) -> None:
    """Check ``params`` against ``fn``'s signature before ``fn(**params)`` is called.

    Parameters
    ----------
    fn:
        A registered factory (function or class).
    params:
        The parameters given by the user.
    field:
        Prefix of the fields the errors name (``"protocol"`` → ``"protocol.lr"``).
    reserved:
        Parameters the caller passes itself; a user may not give them.
    owner:
        What takes the parameters, for the message (``"protocol 'dpsgd'"``).

    Raises
    ------
    BenchInputError
        For a parameter ``fn`` does not accept (listing the ones it does, and the closest) and
        for a value that does not fit the parameter's annotation (:func:`type_mismatch`).
    """
    accepted = accepted_parameters(fn)
    valid = [n for n in accepted if n not in reserved] if accepted is not None else None
    for key, value in params.items():
        if valid is not None and key not in valid:
            reason = UNKNOWN_PARAMETER + (f" of {owner}" if owner else "")
            reason += "" if valid else ", which takes no parameters"
            raise BenchInputError(f"{field}.{key}", value, choices=valid or None, reason=reason)
        annotation = accepted.get(key, Any) if accepted is not None else Any
        reason = type_mismatch(value, annotation)
        if reason is not None:
            literals = [b for b in _branches(annotation) if typing.get_origin(b) is Literal]
            choices = [a for b in literals for a in typing.get_args(b)]
            raise BenchInputError(f"{field}.{key}", value, choices=choices or None, reason=reason)


def call_with_params(registry: Registry, name: str, field: str, /, **kwargs: Any) -> Any:
    """Look ``name`` up in ``registry`` (errors under ``field.name``) and call it with ``kwargs``.

    Parameters not accepted by the factory are reported as unknown, with the valid ones, and
    values of the wrong type with the expected type (:func:`check_params`).
    """
    fn = registry.get(name, field=f"{field}.name")
    check_params(fn, kwargs, field, owner=f"{registry.kind} '{name}'")
    return fn(**kwargs)


def require_choice(value: Any, choices: tuple[str, ...] | list[str], field: str) -> Any:
    """Return ``value`` if it is one of ``choices``, else raise a :class:`BenchInputError`."""
    if value not in choices:
        raise BenchInputError(field, value, choices=choices)
    return value
