"""Run pieces of a job in processes of their own, and get plain data back.

The harness is a trust boundary (``docs/architecture.md``): defense code (from pull requests)
runs only in *simulation processes*, attacks only in *attack processes*, and ground truth,
metrics, scoring and the results store only in the parent. Every child is forked from a
``forkserver`` that has imported the engine and the attacks and run one tiny warm-up job
(:mod:`bench.evaluation.warm`) but never a real one, so a child starts in milliseconds with no
state of any job, no plugin of any defense, and no object of the parent (no ground truth, no
store, no View).

Two ways to use a child:

* :func:`call` — a fresh child for one request (the defense probe);
* :class:`WorkerPool` — long-lived workers, each serving the requests of one *key* only: a
  simulation worker runs the jobs of one defense plugin (name and source digest), an attack
  worker the attacks of one threat model. A defense's code therefore never shares a process
  with another defense's jobs, and an attack never with another threat model's Views; reusing
  a worker for the next job of the same key saves the first-run costs of a fresh process
  (page faults on copy-on-write memory, allocator warm-up), and between two requests the
  worker drops every reference and collects garbage.

A child answers with one message of plain data (:mod:`bench.core.wire`): the parent reads it with
``torch.load(weights_only=True)``, so a hostile child cannot make the parent execute code, and
the parent never unpickles anything a child sends. An input error raised in a child
(:class:`~bench.core.errors.BenchInputError`) crosses intact; any other exception, or a child that
dies without answering (a crash, a signal, ``os._exit``), becomes a :class:`ChildFailed` with a
one-line reason (and a dead worker is replaced by a fresh one for the next request).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import traceback
import types
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from bench.core.errors import BenchInputError
from bench.evaluation import queries, sandbox
from bench.evaluation.queries import ANSWER, ChildFailed, receive

# bench.core.wire (torch) is imported where used, so that `warm_up` can start the fork server before
# the parent itself imports torch: both then import it at the same time

#: modules the fork server imports once, so that children start with them loaded
PRELOAD = (
    "torch",
    "pytorch_lightning",
    "bench.evaluation.sim_worker",
    "bench.evaluation.oracle",
    "bench.evaluation.attack_worker",
    "bench.evaluation.probe",
    "bench.evaluation.warm",
)

_lock = threading.Lock()
_context: Any = None


def context() -> Any:
    """The forkserver multiprocessing context (started on first use, :data:`PRELOAD` loaded)."""
    global _context
    with _lock:
        if _context is None:
            # CUDA cannot be used in a child forked from a process that initialized it; with this
            # variable, `torch.cuda.is_available()` in the server asks NVML instead of CUDA
            # (PyTorch's documented fork-safe check), so children can still use the GPU
            os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(list(PRELOAD))
            _context = ctx
        return _context


def warm_up() -> None:
    """Start the fork server now (its imports then overlap with the parent's own work)."""
    from multiprocessing import forkserver

    context()
    with _lock, _main_hidden():
        forkserver.ensure_running()


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Start a child without re-importing the parent's ``__main__`` in it.

    multiprocessing prepares a forkserver child by importing the parent's main module again
    (as ``__mp_main__``): pytest's, a user's script — which, without a ``__name__`` guard, would
    run again — or ``bench.__main__``. Children need none of it (their entry point lives in
    ``bench.evaluation``), so while a child starts, ``__main__`` is a bare module with neither a
    spec nor a file, and the preparation data names no main module to import."""
    real = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = real


def _start(target: Callable[..., None], args: tuple[Any, ...]) -> Any:
    ctx = context()
    proc = ctx.Process(target=target, args=args, daemon=True)
    with _lock, _main_hidden():
        proc.start()
    return proc


# ------------------------------------------------------------------------------ child side
def _answer(target: str, request: bytes) -> bytes:
    """Run ``target(request)`` and encode its result, or the error it raised, as plain data."""
    from bench.core.wire import WireError, check_plain, dumps, loads

    try:
        module, _, name = target.rpartition(".")
        fn = getattr(importlib.import_module(module), name)
        answer: dict[str, Any] = {"ok": fn(loads(request))}
    except BenchInputError as exc:
        value = exc.value
        try:
            check_plain(value)
        except WireError:
            value = repr(value)
        answer = {
            "input_error": {"field": exc.field, "value": value, "choices": exc.choices, "reason": exc.reason}
        }
    except Exception as exc:  # reported to the parent as this job's failure
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        answer = {"failed": text.splitlines()[0][:300], "traceback": traceback.format_exc(limit=6)}
    try:
        return dumps(answer)
    except WireError as exc:
        return dumps({"failed": f"the result is not plain data: {exc}", "traceback": ""})


#: whether this process is a child started here (the sandboxed processes enter their sandbox
#: only there, never in the parent or a caller's own process: :mod:`bench.evaluation.sandbox`)
IN_CHILD = False


def _child_setup(threads: int) -> None:
    import torch

    global IN_CHILD
    IN_CHILD = True

    # Ctrl-C is the parent's to handle: it stops the sweep and ends its children
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(max(1, threads))


def _exit() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown (atexit hooks of libraries): the answer is sent


def _child_main(target: str, request: bytes, conn: Any, threads: int) -> None:
    """Entry point of a one-shot child: answer one request."""
    _child_setup(threads)
    queries.PARENT = conn
    try:
        conn.send_bytes(ANSWER + _answer(target, request))
    finally:
        conn.close()
    _exit()


def _worker_main(conn: Any, threads: int) -> None:
    """Entry point of a worker: answer requests ``(target, request)`` until the pipe closes."""
    _child_setup(threads)
    queries.PARENT = conn
    while True:
        try:
            target, request = pickle.loads(conn.recv_bytes())  # from the parent: trusted
        except (EOFError, OSError):
            break
        answer = _answer(target, request)
        del request
        try:
            conn.send_bytes(ANSWER + answer)
        except (BrokenPipeError, OSError):
            break
        del answer
        # nothing of this request survives into the next one; collected after the answer is
        # sent, so that the caller does not wait for it (one full collection per query of a
        # defense oracle; its cost is in performance/README.md)
        gc.collect()
    _exit()


# ----------------------------------------------------------------------------- parent side
def _decode(data: bytes, label: str) -> Any:
    from bench.core.wire import WireError, loads

    try:
        answer = loads(data)
    except WireError as exc:
        raise ChildFailed(f"the {label} process sent an unreadable answer: {exc}") from None
    if not isinstance(answer, dict):
        raise ChildFailed(f"the {label} process sent an unreadable answer")
    if "input_error" in answer:
        err = answer["input_error"]
        raise BenchInputError(err["field"], err["value"], choices=err["choices"], reason=err["reason"])
    if "failed" in answer:
        raise ChildFailed(str(answer["failed"]), str(answer.get("traceback", "")))
    return answer.get("ok")


def _died(proc: Any, label: str) -> ChildFailed:
    proc.join(timeout=5)
    code = proc.exitcode
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
    return ChildFailed(f"the {label} process {how} without an answer")


def _qualname(target: Callable[[Any], Any]) -> str:
    return f"{target.__module__}.{target.__qualname__}"


def call(
    target: Callable[[Any], Any],
    request: Any,
    threads: int = 1,
    label: str = "child",
    relay: Callable[[bytes], bytes] | None = None,
) -> Any:
    """Run ``target(request)`` in a fresh child process and return its plain-data result.

    Parameters
    ----------
    target:
        A module-level function of a module the child can import.
    request:
        Plain data (:mod:`bench.core.wire`) passed to ``target``.
    threads:
        ``torch.set_num_threads`` in the child.
    label:
        Names the child in failure reasons ("the simulation process …").
    relay:
        Answers the child's queries (:func:`query`) while it runs.

    Raises
    ------
    BenchInputError
        The child raised one (it crosses the boundary intact).
    ChildFailed
        The child raised anything else, or died without answering.
    """
    from bench.core.wire import dumps

    receiver, sender = context().Pipe(duplex=True)
    proc = _start(_child_main, (_qualname(target), dumps(request), sender, threads))
    sender.close()
    try:
        data = receive(receiver, relay)
        proc.join(timeout=5)
    except EOFError:
        raise _died(proc, label) from None
    except BaseException:  # interrupted while it runs: it is ours to end
        proc.kill()
        proc.join(timeout=2)
        raise
    finally:
        receiver.close()
        if not proc.is_alive():
            sandbox.remove_scratch(proc.pid)
    return _decode(data, label)


class Worker:
    """A long-lived child answering the requests of one key (see the module docstring)."""

    def __init__(self, threads: int) -> None:
        self.conn, child = context().Pipe(duplex=True)
        self.proc = _start(_worker_main, (child, threads))
        child.close()

    def request(
        self,
        target: Callable[[Any], Any],
        request: Any,
        label: str,
        relay: Callable[[bytes], bytes] | None = None,
    ) -> Any:
        """Send one request and wait for its answer (raises as :func:`call`; ``relay`` answers
        the child's queries meanwhile)."""
        from bench.core.wire import dumps

        try:
            self.conn.send_bytes(pickle.dumps((_qualname(target), dumps(request))))
            data = receive(self.conn, relay)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise _died(self.proc, label) from None
        return _decode(data, label)

    def request_raw(self, target: Callable[[Any], Any], data: bytes, label: str) -> bytes:
        """Send one request already encoded (:mod:`bench.core.wire`) and return its answer still
        encoded (``{"ok": …}``, ``{"failed": …}`` or an input error): a relay of bytes between two
        children (:class:`bench.evaluation.oracle_relay.OracleRelay`)."""
        try:
            self.conn.send_bytes(pickle.dumps((_qualname(target), data)))
            answer = self.conn.recv_bytes()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise _died(self.proc, label) from None
        return answer[1:] if answer[:1] == ANSWER else answer

    def close(self, kill: bool = False) -> None:
        """End the worker: closing its pipe ends its loop (``kill``: at once, even mid-request;
        a worker that does not end within 2 s is killed too)."""
        with contextlib.suppress(OSError):
            self.conn.close()
        if not kill:
            self.proc.join(timeout=2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=2)
        if not self.proc.is_alive():
            sandbox.remove_scratch(self.proc.pid)


class WorkerPool:
    """Idle workers by key, reused for requests of the same key only.

    Parameters
    ----------
    max_idle:
        Idle workers kept at most (least recently used ones are ended first).
    """

    def __init__(self, max_idle: int = 4) -> None:
        self.max_idle = max_idle
        self._idle: OrderedDict[int, tuple[Hashable, Worker]] = OrderedDict()
        self._busy: set[Worker] = set()
        self._lock = threading.Lock()
        self._ids = 0
        self._closed = False

    def call(
        self,
        key: Hashable,
        target: Callable[[Any], Any],
        request: Any,
        threads: int = 1,
        label: str = "child",
        relay: Callable[[bytes], bytes] | None = None,
    ) -> Any:
        """Run ``target(request)`` in a worker of ``key`` (a new one when none is idle;
        ``relay`` answers its queries, :func:`query`)."""
        if self._closed:
            raise ChildFailed("the sweep was stopped")
        worker = self.take(key, threads) or Worker(threads)
        with self._lock:
            self._busy.add(worker)
        try:
            result = worker.request(target, request, label, relay)
        except BenchInputError:
            self.give(key, threads, worker)
            raise
        except ChildFailed:  # a worker that failed is not reused
            worker.close()
            raise
        except BaseException:  # interrupted: the request is abandoned, the worker ended now
            worker.close(kill=True)
            raise
        finally:
            with self._lock:
                self._busy.discard(worker)
        self.give(key, threads, worker)
        return result

    def take(self, key: Hashable, threads: int) -> Worker | None:
        """An idle worker of ``key`` with ``threads`` threads, now the caller's (``None``: none)."""
        key = (key, threads)
        with self._lock:
            found = next((i for i, (k, _) in self._idle.items() if k == key), None)
            if found is None:
                return None
            worker = self._idle.pop(found)[1]
        if worker.proc.is_alive():
            return worker
        worker.close()
        return None

    def give(self, key: Hashable, threads: int, worker: Worker) -> None:
        """Keep ``worker`` (idle, of ``key`` and ``threads``) for a later request of that key."""
        key = (key, threads)
        evicted = []
        with self._lock:
            if self._closed:  # the sweep was stopped: nothing is kept
                evicted.append(worker)
            else:
                self._ids += 1
                self._idle[self._ids] = (key, worker)
            while len(self._idle) > self.max_idle:
                evicted.append(self._idle.popitem(last=False)[1][1])
        for w in evicted:
            w.close()

    def close(self, kill: bool = False) -> None:
        """End every idle worker (``kill``: and every busy one, at once — the sweep stops; their
        requests fail with :class:`ChildFailed`)."""
        with self._lock:
            self._closed = self._closed or kill
            workers = [w for _, w in self._idle.values()]
            self._idle.clear()
            busy = list(self._busy) if kill else []
        for w in workers:
            w.close(kill=kill)
        for w in busy:
            w.close(kill=True)
