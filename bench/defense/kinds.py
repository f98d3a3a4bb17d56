"""Message kinds a defense acts on: checking a user's list, and why a list changes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.core.errors import BenchInputError

if TYPE_CHECKING:
    from bench.protocols import Protocol


def check_kinds(kinds: Any, field: str) -> list[str] | None:
    """A list of message kinds (``None`` = every kind); each must be a kind some registered
    protocol sends (:attr:`bench.protocols.Protocol.MESSAGE_KINDS`)."""
    if kinds is None:
        return None
    from bench.protocols import PROTOCOLS

    valid = sorted({k for _, cls in PROTOCOLS.items() for k in cls.MESSAGE_KINDS})
    if isinstance(kinds, str) or not isinstance(kinds, (list, tuple)):
        raise BenchInputError(field, kinds, choices=valid, reason="must be a list of message kinds")
    for kind in kinds:
        if kind not in valid:
            raise BenchInputError(field, kind, choices=valid, reason="unknown message kind")
    return list(kinds)


def kinds_reason(kinds: list[str] | None, protocol: Protocol) -> str | None:
    """Why a defense acting only on messages of ``kinds`` does nothing under ``protocol``."""
    if kinds is None:
        return None
    sent = protocol.message_kinds()
    if not set(kinds) & set(sent):
        return f"it acts on {', '.join(kinds)} messages; the protocol's nodes send {', '.join(sent)}"
    return None
