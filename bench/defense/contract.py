"""The hooks' output contract: what a defense's hook returns is checked before anything uses it.

A plugin's per-node hooks run under ``vmap`` (:mod:`bench.defense.runner`), and PyTorch
broadcasts: a ``local_gradients`` that returns ``[1]`` instead of ``[P]`` would train on,
silently, with every coordinate of a node's gradient set to one number — and the attacks would
meet inputs they were never meant to read. A broken defense must fail its job with a reason
that names the hook, not be scored. The runner checks every output of the plugin's hooks, stacked
over the rows of the call:

==========================  ======================================================================
hook                        contract
==========================  ======================================================================
``per_sample_gradients``    a tensor ``[P]`` per node (``[n, P]`` stacked)
``sample_weights``          a tensor shaped as ``norms``
``sample_sum``              a tensor shaped as ``total``
``local_gradients``         a tensor shaped as ``grad``
``local_update``            a tensor shaped as ``new``
``outgoing``, ``decode``    a real tensor shaped as ``payload``
``init_state``              a mapping of names to tensors; a hook's new state has its shapes
``should_stop``             a bool
==========================  ======================================================================

Every tensor output must also have the input's floating dtype, the input's device, and finite
values wherever its input was finite (a run that diverged before the hook is the divergence
check's business, not the hook's). A violation raises :class:`HookContractError`, which fails
the job with its message.
"""

from __future__ import annotations

import math
from typing import Any

import torch


class HookContractError(RuntimeError):
    """A defense hook returned something its callers cannot use (module docstring)."""


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
