"""``--store`` values and the errors about them: parse a value, check a SQLite path, hide every
secret a value holds, and say why the store did not accept a result.

A store URL may carry a password (``postgresql://user:secret@host/db``) or a secret query
parameter (``?password=…``, ``?sslkey=…``, ``?token=…``). Nothing bench prints, raises or
writes shows it: error messages name the value with :func:`redact` applied, and
:attr:`bench.results.store.ResultStore.url` renders the parsed URL the same way.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from bench.core.errors import BenchInputError

__all__ = ["FIELD", "MASK", "StoreWriteError", "describe_error", "normalize_url", "redact", "store_error"]

FIELD = "--store"
MASK = "***"
#: a secret given literally in the value is also hidden wherever else it appears in a message
#: (a driver repeating it) when at least this long; shorter ones are hidden in URLs only, so that
#: a one-letter password does not blank every occurrence of that letter
MIN_LITERAL = 4
_URL_TOKEN = re.compile(r"[A-Za-z][\w+.-]*://[^\s'\"<>`]*")
_SECRET_KEY = r"[^=&;#\s]*(?:pass|pwd|secret|token|key|auth|cred)[^=&;#\s]*"
_SECRET_QUERY = re.compile(rf"(?i)([?&;]{_SECRET_KEY}=)([^&;#\s'\"<>`]*)")


def _password_span(rest: str) -> tuple[int, int] | None:
    """``(start, end)`` of the password in ``rest`` (the part after ``scheme://``).

    The password starts after the first ``:`` of the user information and ends at the last
    ``@``: a superset of what SQLAlchemy's parser takes as the password (it stops at the first
    ``@``), so that an unencoded ``@`` or ``/`` in a password never leaves a part visible.
    """
    colon, at, slash = rest.find(":"), rest.rfind("@"), rest.find("/")
    if colon == -1 or at <= colon or (slash != -1 and slash < colon):
        return None
    return colon + 1, at


def _mask_url(token: str) -> str:
    scheme, sep, rest = token.partition("://")
    span = _password_span(rest)
    if span is not None:
        rest = rest[: span[0]] + MASK + rest[span[1] :]
    return scheme + sep + _SECRET_QUERY.sub(lambda m: m.group(1) + MASK, rest)


def _secrets(url: str) -> set[str]:
    """Every secret of a ``--store`` value, as written and percent-decoded."""
    found: set[str] = set()
    # the value is one URL even where its password holds a space or a quote, which end a URL
    # token in free text: its password spans the whole value's user information
    whole = _password_span(url.strip().partition("://")[2]) if "://" in url else None
    if whole is not None:
        rest = url.strip().partition("://")[2]
        found.add(rest[whole[0] : whole[1]])
    for token in _URL_TOKEN.findall(url) or [url]:
        rest = token.partition("://")[2]
        span = _password_span(rest)
        if span is not None:
            found.add(rest[span[0] : span[1]])
        found.update(m.group(2) for m in _SECRET_QUERY.finditer(rest))
    try:
        parsed = make_url(url.strip())
    except Exception:  # any parse failure: the textual rules above still apply
        parsed = None
    if parsed is not None:
        if parsed.password:
            found.add(str(parsed.password))
        for key, value in parsed.query.items():
            if _SECRET_QUERY.match(f"?{key}="):
                found.update([value] if isinstance(value, str) else list(value))
    found |= {unquote(s) for s in found}
    return {s for s in found if s}


def redact(text: str, url: str | None = None) -> str:
    """``text`` with the secrets of every URL in it, and those of ``url``, replaced by ``***``.

    Parameters
    ----------
    text:
        Any message or value (a ``--store`` value, an error from a database driver …).
    url:
        The ``--store`` value the message is about: its password and secret query values are
        also hidden where they appear outside a URL (when at least :data:`MIN_LITERAL`
        characters long).

    Returns
    -------
    str
        The text, safe to print, raise or publish.
    """
    text = str(text)
    if url:
        for secret in sorted(_secrets(str(url)), key=len, reverse=True):
            if len(secret) >= MIN_LITERAL:
                text = text.replace(secret, MASK)
    return _URL_TOKEN.sub(lambda m: _mask_url(m.group()), text)


def store_error(url: Any, reason: str, choices: list[str] | None = None) -> BenchInputError:
    """A :class:`~bench.core.errors.BenchInputError` for ``--store`` whose value and reason are
    redacted (raise it ``from None``: a chained driver exception may repeat the URL)."""
    raw = url if isinstance(url, str) else None
    value = redact(url, raw) if raw is not None else url
    return BenchInputError(FIELD, value, choices=choices, reason=redact(reason, raw))


#: SQLAlchemy's own dialects, listed when a URL names an unknown one
DIALECTS = ["mariadb", "mssql", "mysql", "oracle", "postgresql", "sqlite"]


def engine_error(url: str, exc: BaseException) -> BenchInputError:
    """The ``--store`` error for a URL SQLAlchemy cannot make an engine of: an unknown dialect
    or driver (the dialects are listed), a driver that is not installed, a bad argument."""
    if isinstance(exc, NoSuchModuleError):
        name = str(exc).rpartition(":")[2].strip() or "?"
        return store_error(url, f"unknown database dialect or driver {name!r}", choices=DIALECTS)
    if isinstance(exc, ImportError) and exc.name:
        return store_error(
            url,
            f"the database driver is not installed: no module named {exc.name!r}; install it, "
            "or name an installed driver as dialect+driver://…",
        )
    return store_error(url, f"cannot use this database URL: {describe_error(exc, url)}")


class StoreWriteError(BenchInputError):
    """A result the store did not accept, after every retry.

    ``kept`` lists the files that keep the results (:mod:`bench.results.spool` fills it); the
    message, one paragraph, names ``--store`` and its URL (password hidden), the job, the
    attempts and the last error, and where the results are kept.

    Parameters
    ----------
    url:
        The store's URL, password hidden.
    what:
        The job, e.g. ``"job 3f2a… (task | defense | seed 0)"``.
    attempts, elapsed:
        Attempts made and the seconds they took.
    detail:
        The last error, redacted.
    """

    def __init__(self, url: str, what: str, attempts: int, elapsed: float, detail: str) -> None:
        self.what, self.attempts, self.elapsed, self.detail = what, attempts, elapsed, detail
        self.kept: list[Path] = []
        self.not_kept: list[str] = []
        super().__init__(FIELD, url)

    @property
    def message(self) -> str:
        tries = f" after {self.attempts} attempts over {self.elapsed:.1f} s" if self.attempts > 1 else ""
        text = (
            f"the results store ('{FIELD}': {self.value!r}) did not accept {self.what}{tries}: {self.detail}"
        )
        if self.kept:
            where = (
                self.kept[0] if len(self.kept) == 1 else f"{len(self.kept)} files in {self.kept[0].parent}"
            )
            many = len(self.kept) > 1
            text += (
                f". Nothing is lost: the result{'s are' if many else ' is'} kept in {where}, and the next "
                f"`evaluate` with the same --out stores {'them' if many else 'it'} before running anything"
            )
        if self.not_kept:
            text += f". Not kept, will run again: {'; '.join(self.not_kept)}"
        return (
            text + ". Check that no other program holds the database, that its disk has space "
            "and that it is reachable."
        )

    def __str__(self) -> str:
        return self.message


def describe_error(exc: BaseException, url: str | None = None) -> str:
    """One line about a database error, its secrets hidden."""
    orig = getattr(exc, "orig", None)
    source = orig if isinstance(orig, BaseException) else exc
    text = f"{type(source).__name__}: {source}".splitlines()[0] if str(source) else type(source).__name__
    return redact(text, url)[:400]


def _prepare_sqlite_dir(path: Path, url: str) -> None:
    """Check that the SQLite file at ``path`` can be created or opened for writing.

    The file's own folder is created when missing, but not a chain of missing folders: a
    mistyped ``/nonexistent/dir/x.sqlite`` is reported rather than silently created.
    """
    parent = path.parent
    if path.is_dir():
        raise store_error(url, f"{path} is a directory, not a database file")
    if not parent.exists():
        if not parent.parent.is_dir():
            raise store_error(url, f"directory {parent} does not exist")
        try:
            parent.mkdir()
        except OSError as exc:
            raise store_error(url, f"cannot create directory {parent}: {exc.strerror or exc}") from None
    if not parent.is_dir():
        raise store_error(url, f"{parent} is not a directory")
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise store_error(url, f"database file {path} is not readable and writable")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise store_error(url, f"directory {parent} is not writable")


def sqlite_file(url: URL) -> Path | None:
    """The database file of a SQLite URL (``None`` for other databases and in-memory ones)."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if in_memory(url) or database.startswith("file:"):
        return None
    return Path(database).expanduser().absolute()


def in_memory(url: URL) -> bool:
    """Whether ``url`` names an in-memory SQLite database (``sqlite://``, ``sqlite:///:memory:``,
    a ``mode=memory`` URI)."""
    database = url.database or ""
    return url.get_backend_name() == "sqlite" and (database in ("", ":memory:") or "mode=memory" in database)


def normalize_url(url: str) -> URL:
    """Turn a ``--store`` value into a SQLAlchemy URL.

    Parameters
    ----------
    url:
        A SQLAlchemy URL (``sqlite:///runs/results.sqlite``, ``postgresql://…``) or a plain file
        path, which means a SQLite database at that path (made absolute).

    Returns
    -------
    sqlalchemy.engine.URL
        The parsed URL. For a SQLite file the database's folder has been checked (and created
        when only the last folder is missing).

    Raises
    ------
    BenchInputError
        ``field="--store"`` for a malformed URL, an empty value or an unusable SQLite path; the
        message shows the value with its password hidden.
    """
    if not isinstance(url, str) or not url.strip():
        raise store_error(url, "expected a SQLAlchemy URL or a file path")
    text = url.strip()
    if "://" not in text:
        path = Path(text).expanduser().absolute()
        _prepare_sqlite_dir(path, url)
        return URL.create("sqlite", database=str(path))
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError) as exc:
        raise store_error(url, f"malformed database URL: {exc}") from None
    path = sqlite_file(parsed)
    if path is not None:
        _prepare_sqlite_dir(path, url)
    if parsed.drivername == "postgresql" and _installed("psycopg") and not _installed("psycopg2"):
        # SQLAlchemy's default PostgreSQL driver is psycopg2; bench installs psycopg 3 (its
        # successor, with binary wheels), so a plain postgresql:// URL uses it
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def refuse_in_memory(value: str | None) -> None:
    """Refuse a ``--store`` that names an in-memory SQLite database (``sqlite://``,
    ``sqlite:///:memory:``): a command's results would vanish when it ends. (The Python API
    accepts one, for tests.)"""
    if not value:
        return
    try:
        url = normalize_url(value)
    except Exception:  # a malformed URL: the store's own check names the problem
        return
    if in_memory(url):
        raise store_error(
            value,
            "an in-memory SQLite database keeps nothing once the command ends: name a file "
            "(sqlite:///runs/results.sqlite or a plain path)",
        )
