"""Queries a child asks its parent mid-request, and how the parent answers them.

A worker of :mod:`bench.evaluation.isolation` answers one request with one message; while it works,
it may also ask the parent questions (:func:`query`) — e.g. an attack's queries to the defense
oracle (:mod:`bench.evaluation.oracle`), which the parent passes on to a sandboxed process of its
own, so that the attack process never talks to defense code directly. Every message of a child to
its parent starts with a byte saying which it is (:data:`ANSWER` or :data:`QUERY`); the parent
(:func:`receive`) answers queries with the ``relay`` of the request, bytes in and bytes out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ChildFailed(RuntimeError):
    """A child process raised (other than an input error) or died without answering."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


#: the pipe of this worker to the parent (set by :mod:`bench.evaluation.isolation` in a child)
PARENT: Any = None

#: the first byte of a child's message to the parent: its answer, or a query for the parent to
#: relay (:func:`query`)
ANSWER, QUERY = b"A", b"Q"


def query(payload: Any) -> Any:
    """Child side: ask the parent a question mid-request and wait for the reply (plain data
    both ways). The parent answers with the ``relay`` it passed to
    :meth:`bench.evaluation.isolation.Worker.request` — e.g.
    an attack's queries to the defense oracle (:mod:`bench.evaluation.oracle`), which the parent
    forwards to a sandboxed process of its own: the attack process never talks to defense code
    directly. Raises :class:`ChildFailed` when the parent has no relay or the relay failed."""
    from bench.core.wire import dumps, loads

    if PARENT is None:
        raise ChildFailed("no parent to ask: queries are answered only in a worker of the harness")
    PARENT.send_bytes(QUERY + dumps(payload))
    reply = loads(PARENT.recv_bytes())
    if not isinstance(reply, dict) or "ok" not in reply:
        why = reply.get("failed") or reply.get("input_error") if isinstance(reply, dict) else None
        raise ChildFailed(str(why or "an unreadable reply"))
    return reply["ok"]


def receive(conn: Any, relay: Callable[[bytes], bytes] | None) -> bytes:
    """The child's answer on ``conn``; queries the child sends first (:func:`query`) are
    answered with ``relay``: the query's encoded bytes in, an encoded answer out (``{"ok": …}``
    or ``{"failed": reason}``; the parent need not decode either)."""
    from bench.core.wire import dumps

    while True:
        data = conn.recv_bytes()
        if data[:1] == ANSWER:
            return data[1:]
        if data[:1] != QUERY:
            return data  # unreadable: _decode says so
        try:
            if relay is None:
                raise ChildFailed("this request has no relay for queries")
            reply = relay(data[1:])
        except Exception as exc:  # the relay's failure is the query's, not the parent's
            text = getattr(exc, "reason", None) or f"{type(exc).__name__}: {exc}"
            reply = dumps({"failed": str(text).splitlines()[0][:300] if str(text) else type(exc).__name__})
        conn.send_bytes(reply)
