"""Keep a finished job's result when the store does not accept it, and store it next time.

When :meth:`bench.results.store.ResultStore.add` gives up (:class:`StoreWriteError`), the
result is written to ``OUT/spool/<job key>.json`` (``OUT`` is the run's ``--out`` folder):
standard JSON (:meth:`bench.results.record.JobResult.to_dict`), written to a temporary file,
flushed to disk and renamed, so a spool file is always complete. The next run with the same
``OUT`` stores every spooled result before it computes which jobs are finished
(:func:`import_spooled`) and deletes each spool file once its result is in the store.

**Only this bench's own spool files are stored.** A file in the spool folder could have been put
there by anyone who can write to ``OUT`` — a forged result with privacy 1.0 would otherwise be
stored as is and ranked. Each file therefore carries an HMAC-SHA256 tag, written by the parent
process and keyed by a random 32-byte secret of this user: the file is the sorted, indented JSON
of the result with one line ``"hmac": "<hex>"`` added, and the tag is over the file's exact bytes
without that line (so any edit of any byte invalidates it). A file without a valid tag —
hand-written, edited afterwards, written by a bench before spool files were tagged, or with no
key to check it against — is moved to ``OUT/spool/rejected/`` with a warning on stderr naming it;
its result is not stored, so its job runs again.

Where the key lives: ``/tmp/bench-secrets-<uid>/spool.key`` (mode 0600 in a 0700 folder of
this user; :func:`bench.evaluation.sandbox.parent_secret`), not in ``OUT``. Defense code runs in
sandboxed children (:mod:`bench.evaluation.sandbox`) that may read every top-level folder — ``OUT``
too — but ``/tmp``, so a key kept beside the spool would be theirs to read (Landlock cannot take
a subfolder back out of a readable one, and a mode 0600 does not stop a process of the same
user). The children are forked from the fork server, which never reads the key, not from the
parent, and they cannot ``ptrace`` the parent; they could not write into the spool anyway.
What remains: a process of the same user outside the sandbox (bench in a kernel without
Landlock, sandbox ``"none"`` in the provenance, or any other program of this account) can read
the key; a genuine file copied into another ``OUT`` of the same user is accepted (it is a result
bench computed); and ``/tmp`` is cleared at a reboot (or aged by ``systemd-tmpfiles``) — the key
goes with it, results spooled before are moved aside as unverifiable and their jobs run again.

:class:`ResultKeeper` is what the sweep (:func:`bench.evaluation.grid.run_grid`) stores through.
Once the store has failed, it keeps the results of the jobs still running (``--jobs K``) in the
spool as they finish, and starts no new job.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from bench.evaluation import sandbox
from bench.results.record import JobResult
from bench.results.store_url import StoreWriteError, redact

__all__ = [
    "REJECTED_DIR",
    "SPOOL_DIR",
    "ResultKeeper",
    "UnauthenticSpoolFile",
    "import_spooled",
    "read_spool",
    "spool_dir",
    "write_spool",
]

SPOOL_DIR = "spool"
#: where spool files without a valid tag are moved (inside the spool folder)
REJECTED_DIR = "rejected"
FORMAT = "bench-spooled-result"
VERSION = 1
#: the name of the spool's key among the parent's secrets
KEY_NAME = "spool.key"
_SAFE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")
# the tag's line: a top-level key (one space of indent; a JSON string holds no raw newline)
_TAG_LINE = re.compile(rb'\n "hmac": "([0-9a-f]{64})",\n')


class UnauthenticSpoolFile(ValueError):
    """A spool file that this bench did not write: no tag, or one that does not match."""


class _Store(Protocol):
    url: str

    def add(self, result: JobResult) -> bool: ...


def spool_dir(out_dir: Path) -> Path:
    """The spool folder of a run whose ``--out`` folder is ``out_dir``."""
    return Path(out_dir) / SPOOL_DIR


def _file_name(key: str) -> str:
    if _SAFE_KEY.fullmatch(key) and not key.startswith("."):
        return f"{key}.json"
    return f"key-{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def write_spool(result: JobResult, folder: Path, why: str = "") -> Path:
    """Write ``result`` to ``folder/<key>.json`` atomically and durably.

    Parameters
    ----------
    result:
        The record to keep.
    folder:
        The spool folder (created when missing).
    why:
        The store's error, kept in the file for whoever reads it (already redacted).

    Returns
    -------
    pathlib.Path
        The spool file.

    Raises
    ------
    OSError, TypeError
        When the file cannot be written (a full disk), the record is not JSON data, or the
        spool's key folder is not this user's private one; no partial file is left behind.
    """
    folder.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "spooled_at": datetime.now(timezone.utc).isoformat(),
        "store_error": why,
        "result": result.to_dict(),
    }
    signed = json.dumps(payload, allow_nan=False, indent=1, sort_keys=True)
    key = sandbox.parent_secret(KEY_NAME, create=True)
    assert key is not None
    # sorted keys put "hmac" right after "format": removing its line gives back `signed`
    text = json.dumps({**payload, "hmac": _tag(key, signed.encode())}, indent=1, sort_keys=True)
    target = folder / _file_name(result.key)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".spool.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return target
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return target


def _tag(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _authenticate(data: bytes) -> None:
    """Raise :class:`UnauthenticSpoolFile` unless ``data`` carries the tag this user's key gives
    it (module docstring); checked before anything in the file is parsed."""
    found = _TAG_LINE.search(data)
    if found is None:
        raise UnauthenticSpoolFile(
            "it has no authentication tag (written by hand, or by a bench older than tagged spool files)"
        )
    try:
        key = sandbox.parent_secret(KEY_NAME, create=False)
    except OSError as exc:
        raise UnauthenticSpoolFile(f"the spool key cannot be used: {exc}") from None
    if key is None:
        raise UnauthenticSpoolFile(
            f"there is no spool key in {sandbox.SECRETS_DIR} to check it (cleared with /tmp at a reboot?)"
        )
    signed = data[: found.start()] + b"\n" + data[found.end() :]
    if not hmac.compare_digest(_tag(key, signed), found.group(1).decode()):
        raise UnauthenticSpoolFile("its authentication tag does not match its contents (edited or forged)")


def read_spool(path: Path) -> JobResult:
    """The record of one spool file, once its tag is checked (module docstring).

    Raises
    ------
    UnauthenticSpoolFile
        When the file is not one this bench wrote (no tag or a wrong one).
    ValueError
        When the file is not a spooled result this bench can read (naming what is wrong).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"unreadable: {exc}") from None
    _authenticate(data)
    try:
        payload = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"unreadable: {exc}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"not a spooled result (no 'format': {FORMAT!r})")
    if payload.get("version") != VERSION:
        raise ValueError(f"spool format version {payload.get('version')!r}; this bench reads {VERSION}")
    return JobResult.from_dict(payload.get("result"))  # type: ignore[arg-type]


def import_spooled(store: _Store, out_dir: Path | None, echo: Callable[[str], object] = print) -> int:
    """Store every result a previous run kept in ``out_dir/spool`` and delete its file.

    Parameters
    ----------
    store:
        The results store.
    out_dir:
        The run's ``--out`` folder (``None``: nothing to import).
    echo:
        Prints the one-line summary (and, on stderr, a warning per unreadable file).

    Returns
    -------
    int
        The number of spool files whose result is now in the store (written now, or already
        there).

    Raises
    ------
    StoreWriteError
        When the store does not accept a result (after its retries); that file and the
        remaining ones stay in the spool.

    A file this bench did not write (no valid tag) is moved to ``spool/rejected`` and a
    genuine one this bench cannot read is left in place, each with a warning on stderr.
    """
    if out_dir is None or not spool_dir(out_dir).is_dir():
        return 0
    stored = 0
    files = sorted(spool_dir(out_dir).glob("*.json"))
    for path in files:
        try:
            result = read_spool(path)
        except UnauthenticSpoolFile as exc:
            _reject(path, str(exc))
            continue
        except (ValueError, TypeError) as exc:
            print(f"warning: {path} was left in place: {exc}", file=sys.stderr)
            continue
        try:
            store.add(result)
        except StoreWriteError as exc:
            exc.what = f"the result of job {result.key} kept by an earlier run in {path}"
            exc.kept = [p for p in files if p.exists()]
            raise
        path.unlink(missing_ok=True)
        stored += 1
    if stored:
        echo(f"stored {stored} result(s) that an earlier run kept in {spool_dir(out_dir)}")
    return stored


def _reject(path: Path, why: str) -> None:
    """Move a spool file this bench did not write out of the way (kept for whoever wants to
    look at it, never stored) and say so on stderr."""
    target = path.parent / REJECTED_DIR / path.name
    try:
        target.parent.mkdir(exist_ok=True)
        os.replace(path, target)
        where = f"moved to {target}"
    except OSError:
        try:
            path.unlink()
            where = "deleted"
        except OSError as exc:
            where = f"left in place ({exc})"
    print(f"warning: {path} was not stored and was {where}: {why}; its job runs again", file=sys.stderr)


class ResultKeeper:
    """Store each finished job's result; when the store fails, keep results in the spool.

    Parameters
    ----------
    store:
        The results store.
    out_dir:
        The run's ``--out`` folder; results are spooled to ``out_dir/spool``. Results already
        there are stored first (:func:`import_spooled`). ``None``: no spool (a result the store
        does not accept is reported as not kept).

    The sweep calls :meth:`check` before a job starts, :meth:`hold` in the thread where a job's
    result is ready and :meth:`add` where it is stored. After the store has failed,
    :meth:`check` raises the store's error (no new job starts), and :meth:`hold` and
    :meth:`add` spool at once; the error then lists every kept file.
    """

    def __init__(self, store: _Store, out_dir: Path | None) -> None:
        self.store = store
        self.folder = None if out_dir is None else spool_dir(out_dir)
        self.error: StoreWriteError | None = None
        self._held: dict[str, JobResult] = {}
        self._lock = threading.Lock()
        import_spooled(store, out_dir)

    def check(self) -> None:
        """Raise the store's error if it has failed (so that no new job starts)."""
        if self.error is not None:
            raise self.error

    def hold(self, result: JobResult) -> JobResult:
        """Note a finished result until :meth:`add` has stored it (spool it at once if the
        store has failed meanwhile); returns ``result``."""
        with self._lock:
            if self.error is None:
                self._held[result.key] = result
                return result
            self._keep(result)
        return result

    def add(self, result: JobResult) -> bool:
        """Store ``result`` (see :meth:`bench.results.store.ResultStore.add`).

        Raises
        ------
        StoreWriteError
            When the store did not accept it: the result, and every result held but not yet
            stored, has been spooled, and the error names the files.
        """
        with self._lock:
            if self.error is not None:
                self._held.pop(result.key, None)
                self._keep(result)
                raise self.error
        try:
            written = self.store.add(result)
        except StoreWriteError as exc:
            with self._lock:
                self.error = exc
                self._held.pop(result.key, None)
                self._keep(result)
                for held in list(self._held.values()):
                    self._keep(held)
                self._held.clear()
            raise
        with self._lock:
            self._held.pop(result.key, None)
        return written

    def _keep(self, result: JobResult) -> None:
        assert self.error is not None
        label = f"{result.task} | {result.defense} | seed {result.seed}"
        if self.folder is None:
            self.error.not_kept.append(f"{label} (no --out folder to keep it in)")
            return
        try:
            self.error.kept.append(write_spool(result, self.folder, redact(self.error.detail)))
        except (OSError, TypeError, ValueError) as exc:
            self.error.not_kept.append(f"{label} ({type(exc).__name__}: {exc})")
