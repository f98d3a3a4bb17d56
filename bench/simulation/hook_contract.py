"""The hooks' output contract: what a defense's hook returns is checked before anything uses it.

A defense's hooks run on stacked tensors, and PyTorch broadcasts: a ``local_gradients`` that
returns ``[n, 1]`` instead of ``[n, P]`` trains on, silently, with every coordinate of a node's
gradient set to one number — and the attacks then meet inputs they were never meant to read. A
broken defense must fail its job with a reason that names the hook, not be scored. So every hook
the defense overrides is wrapped (an instance attribute, as :mod:`.row_locality` does; the class
is unchanged, so :func:`~bench.defense.hooks.overridden_hooks` still reads the plugin) and its
output checked:

==========================  ======================================================================
hook                        contract
==========================  ======================================================================
``per_sample_gradients``    a tensor ``[n, P]`` (``grads [n, B, P]`` without its sample axis)
``sample_weights``          a tensor shaped as ``norms [n, B]``
``sample_sum``              a tensor shaped as ``total [n, P]``
``local_gradients``         a tensor shaped as ``grads [n, P]``
``local_update``            a tensor shaped as ``new [n, P]``
``outgoing``                a :class:`~bench.simulation.messages.MessageBatch` of the same kind,
                            round and step, with as many payload rows as senders
``wrap_aggregation``        a callable whose result is shaped as ``own`` or as one of its rows
==========================  ======================================================================

Every tensor output must also have the input's floating dtype (``outgoing`` may encode payloads
as integers, e.g. the ring elements of secure aggregation), the input's device, and finite values
wherever its input was finite (a run that diverged before the hook is the divergence check's
business, not the hook's). A violation raises :class:`HookContractError`, which fails the job
with its message.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from bench.defense.hooks import DefenseHooks, overridden_callables
from bench.simulation.messages import MessageBatch

#: tensor hooks and the position of the argument whose shape their output keeps (``None``:
#: :func:`_per_sample_shape`)
SHAPED_LIKE: dict[str, int | None] = {
    "per_sample_gradients": None,
    "sample_weights": 0,
    "sample_sum": 0,
    "local_gradients": 0,
    "local_update": 0,
}


class HookContractError(RuntimeError):
    """A defense hook returned something its callers cannot use (module docstring)."""


def install(hooks: DefenseHooks) -> list[str]:
    """Wrap the hooks ``hooks`` overrides with the contract checks (once per instance); returns
    their names."""
    if hooks.__dict__.get("_hook_contract"):
        return []
    names = overridden_callables(hooks)
    wrapped = [n for n in (*SHAPED_LIKE, "outgoing", "wrap_aggregation") if n in names]
    for name in wrapped:
        setattr(hooks, name, Checked(hooks, name))
    hooks.__dict__["_hook_contract"] = True
    return wrapped


class Checked:
    """The hook ``name`` of ``hooks`` with its output checked. An object, not a closure: a deep
    copy of the defense (the oracle's per-query copy, the row-locality probe) copies it with
    ``hooks`` mapped to the copy, so the copy's hook runs on the copy's state."""

    def __init__(self, hooks: DefenseHooks, name: str) -> None:
        self.hooks, self.name = hooks, name

    def __call__(self, *args: Any) -> Any:
        out = getattr(type(self.hooks), self.name)(self.hooks, *args)
        if self.name == "outgoing":
            check_messages(out, args[0])
        elif self.name == "wrap_aggregation":
            if not callable(out):
                raise HookContractError(
                    f"the defense's wrap_aggregation returned {type(out).__name__}, not a callable"
                )
            return _CheckedAggregation(out)
        else:
            position = SHAPED_LIKE[self.name]
            shape = _per_sample_shape(args[0]) if position is None else tuple(args[position].shape)
            check_tensor(f"the defense's {self.name} hook", out, args[0], shape)
        return out


class _CheckedAggregation:
    """An aggregation rule as wrapped by the defense, its result checked: the receivers' new
    states (``own``'s shape) or one global model (a row of ``own``), ``own``'s dtype and device.
    The protocol's own rule is not run for the comparison: the delivered payloads may be data
    only the defense's rule reads (the ring elements and shares of secure aggregation)."""

    def __init__(self, inner: Callable[[torch.Tensor, MessageBatch], torch.Tensor]) -> None:
        self.inner = inner

    def __call__(self, own: torch.Tensor, delivered: MessageBatch) -> torch.Tensor:
        out = self.inner(own, delivered)
        what = "the aggregation wrapped by wrap_aggregation"
        shape = (
            tuple(own.shape)
            if isinstance(out, torch.Tensor) and out.dim() == own.dim()
            else tuple(own.shape[1:])
        )
        check_tensor(what, out, own, shape)
        return out


def _per_sample_shape(grads: torch.Tensor) -> tuple[int, ...]:
    return (grads.shape[0], *grads.shape[2:])


def check_tensor(what: str, out: Any, given: torch.Tensor, shape: tuple[int, ...]) -> None:
    """``out`` is a tensor of ``shape`` with ``given``'s dtype and device, finite where
    ``given`` is (raises :class:`HookContractError` naming ``what`` otherwise)."""
    if not isinstance(out, torch.Tensor):
        raise HookContractError(f"{what} returned {type(out).__name__}, not a tensor")
    if tuple(out.shape) != shape:
        raise HookContractError(f"{what} returned shape {tuple(out.shape)}; expected {shape}")
    if out.dtype != given.dtype:
        raise HookContractError(f"{what} returned dtype {out.dtype}; expected {given.dtype}")
    if out.device != given.device:
        raise HookContractError(f"{what} returned a tensor on {out.device}; expected {given.device}")
    _finite(what, out, given)


def check_messages(out: Any, sent: MessageBatch) -> None:
    """``outgoing``'s result: a message batch of ``sent``'s kind, round and step, one payload row
    per sender, on ``sent``'s device, finite where ``sent`` was (floating payloads)."""
    what = "the defense's outgoing hook"
    if not isinstance(out, MessageBatch):
        raise HookContractError(f"{what} returned {type(out).__name__}, not a MessageBatch")
    same = (out.kind, out.round, out.step) == (sent.kind, sent.round, sent.step)
    if not same:
        raise HookContractError(
            f"{what} changed the batch's kind/round/step from {(sent.kind, sent.round, sent.step)} "
            f"to {(out.kind, out.round, out.step)}"
        )
    payload = out.payload
    if not isinstance(payload, torch.Tensor):
        raise HookContractError(f"{what} returned a payload of type {type(payload).__name__}")
    if payload.dim() < 1 or payload.shape[0] != out.senders.shape[0]:
        raise HookContractError(
            f"{what} returned {tuple(payload.shape)} payload rows for {out.senders.shape[0]} senders"
        )
    if payload.device != sent.payload.device:
        raise HookContractError(
            f"{what} returned a payload on {payload.device}; expected {sent.payload.device}"
        )
    if payload.is_floating_point():
        _finite(what, payload, sent.payload)


def _finite(what: str, out: torch.Tensor, given: torch.Tensor) -> None:
    """Raise unless ``out`` is finite wherever ``given`` is. One reduction decides the common case:
    a sum with a NaN or an infinite term is not finite, so a finite ``Σ out`` means every entry
    is; only a non-finite sum (such a term, or an overflow of finite ones) looks at the entries —
    much cheaper than the elementwise mask on a large batch of per-sample gradients (see
    performance/README.md)."""
    if not out.is_floating_point() or math.isfinite(float(out.detach().sum())):
        return
    if bool(torch.isfinite(out).all()):
        return  # the sum of finite values overflowed
    if given.is_floating_point() and not bool(torch.isfinite(given).all()):
        return  # the input already diverged: the divergence check reports it
    raise HookContractError(f"{what} returned non-finite values from finite inputs")
