"""A bound defense holds nothing it could change: frozen values, fresh tensors at every call.

Per-node execution (:mod:`bench.defense.runner`) makes a hook's output a function of its node's
row; what could still carry data from one call to the next is Python state the plugin keeps.
The plugin rules (:mod:`bench.defense.source_policy`) leave a plugin no module-level or
class-level value but immutable constants, and no way to reach another object's attributes;
this module closes the instance:

* :func:`freeze_class` — after the plugin has loaded, every container among its classes'
  attributes becomes immutable (``examples`` and other class-level dicts and lists);
* :func:`frozen_value` — after :meth:`~bench.defense.plugin.Defense.bind`, every attribute of
  the instance becomes immutable (tuples, read-only mappings, frozen sets); an object of any
  other kind than numbers, strings, tensors, dtypes, devices, the run's facts and mechanism
  records is refused, since its own attributes could be changed;
* :class:`Snapshot` — the instance's tensors (its own and the run's) are kept as masters and every
  hook call gets fresh copies of them, so an in-place write to one (a call counter, a stash of
  unbatched values) is gone at the next call. Assigning an attribute after ``bind`` raises
  (:class:`~bench.defense.plugin.DefenseFrozen`).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch

#: values kept as they are (immutable, or classes and functions, whose attributes the plugin rules
#: forbid touching)
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, type, range)


class FrozenDefenseError(TypeError):
    """A bound defense keeps an object whose state could change from call to call."""


def frozen_value(value: Any, where: str) -> Any:
    """``value`` made immutable: containers converted (``list``/``tuple`` → ``tuple``, ``dict`` →
    a read-only mapping, ``set`` → ``frozenset``), recursively; tensors, plain values, plain
    functions and frozen dataclasses (the run's facts, mechanism records) kept; anything else
    refused with :class:`FrozenDefenseError` naming ``where``."""
    if isinstance(value, (torch.Tensor, *_PLAIN, types.FunctionType, types.BuiltinFunctionType)):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(frozen_value(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, (set, frozenset)):
        return frozenset(frozen_value(v, where) for v in value)
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen_value(v, f"{where}[{k!r}]") for k, v in value.items()})
    if dataclasses.is_dataclass(value) and _frozen_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        changes = {k: frozen_value(v, f"{where}.{k}") for k, v in fields.items()}
        same = all(changes[k] is fields[k] for k in fields)
        return value if same else dataclasses.replace(value, **changes)
    raise FrozenDefenseError(
        f"the defense keeps {where} = a {type(value).__name__} after bind: a bound defense holds "
        "numbers, strings, tensors, tuples, mappings, the run's facts and mechanism records only "
        "(a node's changing state belongs in init_state)"
    )


def _frozen_dataclass(value: Any) -> bool:
    params = getattr(type(value), "__dataclass_params__", None)
    return bool(params is not None and params.frozen)


def freeze_class(cls: type) -> None:
    """Make the container attributes of a plugin class immutable (in place, on the class)."""
    for name, value in list(vars(cls).items()):
        if name.startswith("__") or not isinstance(value, (list, dict, set)):
            continue
        type.__setattr__(cls, name, frozen_value(value, f"{cls.__name__}.{name}"))


def _tensors(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, frozenset)):
        return any(_tensors(v) for v in value)
    if isinstance(value, Mapping):
        return any(_tensors(v) for v in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_tensors(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def _fresh(value: Any) -> Any:
    """A copy of ``value`` whose tensors are new (detached clones); everything else shared."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple):
        return tuple(_fresh(v) for v in value)
    if isinstance(value, frozenset):
        return frozenset(_fresh(v) for v in value)
    if isinstance(value, Mapping):
        return MappingProxyType({k: _fresh(v) for k, v in value.items()})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _fresh(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **fields)
    return value


class Snapshot:
    """The bound instance's attributes, frozen, with masters of the ones that hold tensors.

    :meth:`refresh` puts fresh copies of those into the instance before a hook call: every call
    starts from the instance as it was bound, whatever the previous call wrote into a tensor."""

    def __init__(self, instance: Any) -> None:
        self.instance = instance
        state = instance.__dict__
        frozen = {k: frozen_value(v, f"self.{k}") for k, v in state.items() if k != "_frozen_"}
        for k, v in frozen.items():
            state[k] = v
        state["_frozen_"] = True
        self.masters = {k: _fresh(v) for k, v in frozen.items() if _tensors(v)}

    def refresh(self) -> None:
        """Fresh copies of the instance's tensors (before each hook call)."""
        state = self.instance.__dict__
        for k, master in self.masters.items():
            state[k] = _fresh(master)
