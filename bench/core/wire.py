"""Plain data across process boundaries: tensors, numbers, strings and containers only.

Everything that crosses the harness' trust boundary (``docs/architecture.md``) — a threat's
View, a simulation's final models and report, an attack's reconstructions — is reduced to plain
data and serialized with ``torch.save``, and read back with ``torch.load(weights_only=True)``,
which constructs tensors and built-in containers but never calls an arbitrary class or
function: a hostile process cannot make its reader run code by what it sends (unlike plain
pickle). Serialized bytes are immutable, so every reader gets its own copy of every tensor.
"""

from __future__ import annotations

import io
from typing import Any

import torch

_SCALARS = (str, int, float, bool, type(None))


class WireError(ValueError):
    """An object that is not plain data, or bytes that are not a plain-data payload."""


def check_plain(obj: Any, where: str = "payload") -> None:
    """Raise :class:`WireError` unless ``obj`` is built from tensors, scalars, lists, tuples and
    dicts with string or integer keys. (Raw ``bytes`` are refused: ``torch.save`` encodes them
    as text, 50 % larger and slower than the same bytes as a tensor (see performance/README.md);
    wrap blobs with :func:`blob`.)"""
    if isinstance(obj, (*_SCALARS, torch.Tensor)):
        return
    if isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            check_plain(item, f"{where}[{i}]")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise WireError(f"{where}: key {k!r} is not a string or an integer")
            check_plain(v, f"{where}[{k!r}]")
        return
    raise WireError(
        f"{where}: {type(obj).__name__} is not plain data (tensors, numbers, strings, containers)"
    )


def blob(data: bytes) -> torch.Tensor:
    """Bytes as a ``uint8`` tensor (serialized as raw storage, without a copy in ``torch.save``)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)


def unblob(data: torch.Tensor | bytes) -> bytes:
    """The bytes of a :func:`blob` (``bytes`` pass through)."""
    if isinstance(data, bytes):
        return data
    if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
        raise WireError("expected a blob (a one-dimensional uint8 tensor)")
    return data.numpy().tobytes()


def dumps(obj: Any) -> bytes:
    """Serialize plain data (checked first) to bytes.

    PyTorch's legacy (non-zip) format: the same pickle-with-storages that
    ``torch.load(weights_only=True)`` reads safely, written faster than the zip archive (no
    per-record CRC; see performance/README.md), which matters for the multi-megabyte Views of
    every job."""
    check_plain(obj)
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def loads(data: bytes | torch.Tensor) -> Any:
    """Read plain data written by :func:`dumps` (or its :func:`blob`), tensors on the CPU,
    refusing anything else."""
    try:
        if isinstance(data, torch.Tensor):
            data = unblob(data)
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # a malformed or hostile payload: never unpickled as code
        raise WireError(f"not a plain-data payload: {type(exc).__name__}: {str(exc)[:200]}") from None
