"""Child-side functions for tests/evaluation/test_isolation.py (imported by the children by name)."""

from __future__ import annotations

import io
import os
import sys
from typing import Any

import torch

from bench.core.errors import BenchInputError


def echo(request: Any) -> Any:
    return {"pid": os.getpid(), "request": request}


def bad_input(request: Any) -> Any:
    raise BenchInputError("defense.sigma", -1.0, reason="must be a positive number")


def crash(request: Any) -> Any:
    raise ZeroDivisionError("boom")


def die(request: Any) -> Any:
    os._exit(3)


def not_plain(request: Any) -> Any:
    return {"object": object()}


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # what a hostile child would like its reader to run
        return (os.system, (f"touch {self.marker}",))


def hostile_answer(request: Any) -> Any:
    """Find the pipe to the parent on the stack and send a pickle that runs a command when
    unpickled, then exit without a regular answer."""
    frame = sys._getframe()
    while frame is not None:
        conn = frame.f_locals.get("conn")
        if conn is not None and hasattr(conn, "send_bytes"):
            buf = io.BytesIO()
            torch.save({"ok": _Payload(request["marker"])}, buf)
            conn.send_bytes(buf.getvalue())
            os._exit(0)
        frame = frame.f_back
    raise RuntimeError("no pipe found")


def ask_twice(request: Any) -> Any:
    """Query the parent mid-request (as a generic attack queries the defense oracle)."""
    from bench.evaluation import queries

    answers = [queries.query({"n": n}) for n in request["ns"]]
    try:
        queries.query({"fail": True})
    except queries.ChildFailed as exc:
        answers.append(f"failed: {exc}")
    return answers


def sandboxed_scratch(request: Any) -> Any:
    """Enter the sandbox, write a file into the scratch folder and say where it is."""
    import tempfile

    from bench.evaluation import sandbox

    sandbox.enter("test")
    path = os.path.join(tempfile.gettempdir(), "left-behind")
    with open(path, "w") as fh:
        fh.write("x")
    return {"scratch": tempfile.gettempdir(), "pid": os.getpid()}


def sandboxed_read(request: Any) -> Any:
    """Enter the sandbox and try to read each of ``request["paths"]``: what each read gave."""
    from bench.evaluation import sandbox

    sandbox.enter("test")
    seen = {}
    for path in request["paths"]:
        try:
            with open(path, "rb") as fh:
                seen[path] = f"read {len(fh.read())} bytes"
        except OSError as exc:
            seen[path] = type(exc).__name__
    return seen
