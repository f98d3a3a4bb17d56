"""Checking a cached file against the checksums of :mod:`bench.data.sources`.

A file passes when every whole-file digest matches; failing that, a gzip file passes when its
decompressed payload matches every ``of="gunzip"`` digest (a re-compressed copy of the same
data). A file without a published checksum is *unverified*; an archive of that kind must still
hold its known members. The digests are SHA-256 (NIST FIPS 180-4) or MD5 (RFC 1321), computed
with :mod:`hashlib` in one pass over the file (or over its gzip payload, RFC 1952); a file is
hashed once per process unless it changes (its inode, size and times key the memo).
Nothing reads a file's content (in particular, unpickles a CIFAR batch) before it passed.
"""

from __future__ import annotations

import gzip
import hashlib
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.core.errors import BenchInputError
from bench.data.files import Checksum, DataFile, Layout, Source

OK, MISSING, CORRUPT, UNVERIFIED = "ok", "missing", "corrupt", "unverified (no published checksum)"
CHUNK = 1 << 20  # bytes read (or copied) at a time

# (path, inode, size, mtime, ctime, checksums, members) -> (status, detail): a file is hashed once
# per process unless it changes
_CHECKED: dict[tuple, tuple[str, str]] = {}


@dataclass(frozen=True)
class FileStatus:
    """The state of one expected file."""

    dataset: str
    file: str
    path: Path | None
    status: str
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "dataset": self.dataset,
            "file": self.file,
            "path": str(self.path) if self.path else "",
            "status": self.status,
            "detail": self.detail,
        }


def _digests(stream: IO[bytes], algorithms: set[str]) -> dict[str, str]:
    hashes = {a: hashlib.new(a) for a in algorithms}
    while chunk := stream.read(CHUNK):
        for h in hashes.values():
            h.update(chunk)
    return {a: h.hexdigest() for a, h in hashes.items()}


def file_digests(path: Path, algorithms: set[str], gunzip: bool = False) -> dict[str, str]:
    """Digests of ``path`` (or of its decompressed payload with ``gunzip``), one pass."""
    with open(path, "rb") as raw:
        if gunzip:
            with gzip.GzipFile(fileobj=raw) as gz:
                return _digests(gz, algorithms)
        return _digests(raw, algorithms)


def _match(path: Path, sums: list[Checksum], gunzip: bool) -> list[tuple[Checksum, str]]:
    """The checksums in ``sums`` that ``path`` fails, with the actual digest."""
    try:
        got = file_digests(path, {c.algorithm for c in sums}, gunzip)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        return [(c, f"unreadable ({exc})") for c in sums]
    return [(c, got[c.algorithm]) for c in sums if got[c.algorithm] != c.digest.lower()]


def _missing_members(path: Path, members: tuple[str, ...]) -> list[str] | str:
    try:
        with tarfile.open(path, "r:*") as tar:
            names = set(tar.getnames())
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        return f"not a readable tar archive ({exc})"
    return [m for m in members if m not in names]


def check_file(path: Path, spec: DataFile) -> tuple[str, str]:
    """``(status, detail)`` of ``path`` against ``spec``: ``ok``, ``corrupt`` or unverified.

    All whole-file checksums must match; failing that, a gzip file whose decompressed payload
    matches all ``of="gunzip"`` checksums is accepted (a re-compressed copy of the same data).
    A file with no published checksum is *unverified*; if it is an archive with known
    ``members`` their presence is checked (else it is ``corrupt``).
    """
    key = _key(path, spec)
    if key in _CHECKED:
        return _CHECKED[key]
    whole = [c for c in spec.checksums if c.of == "file"]
    payload = [c for c in spec.checksums if c.of == "gunzip"]
    result: tuple[str, str]
    if not spec.checksums:
        result = (UNVERIFIED, "no published checksum")
        if spec.members:
            missing = _missing_members(path, spec.members)
            if isinstance(missing, str) or missing:
                what = missing if isinstance(missing, str) else "lacks " + ", ".join(missing)
                result = (CORRUPT, f"{path}: {what}")
            else:
                result = (UNVERIFIED, "no published checksum; archive members present")
    else:
        bad = _match(path, whole, False) if whole else []
        bad_payload = _match(path, payload, True) if payload and (bad or not whole) else []
        if whole and not bad:
            result = (OK, " and ".join(_short(c) for c in whole) + " match")
        elif payload and not bad_payload:
            result = (OK, "decompressed data match " + " and ".join(_short(c) for c in payload))
        else:
            c, got = (bad or bad_payload)[0]
            of = "" if c.of == "file" else " of the decompressed data"
            result = (
                CORRUPT,
                f"{path}: {_short(c)}{of} is {got}, expected {c.digest}"
                + (f" (from {c.source})" if c.source else ""),
            )
    _CHECKED[key] = result
    return result


def _short(c: Checksum) -> str:
    return "SHA-256" if c.algorithm == "sha256" else c.algorithm.upper()


def remember_check(path: Path, spec: DataFile, result: tuple[str, str]) -> None:
    """Record ``result`` as the check of ``path`` against ``spec`` (a file verified while it was
    written, so that it is not hashed again)."""
    _CHECKED[_key(path, spec)] = result


def _key(path: Path, spec: DataFile) -> tuple:
    st = path.stat()
    return (
        str(path.resolve()),
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        spec.checksums,
        spec.members,
    )


def checksum_error(name: str, statuses: list[FileStatus]) -> BenchInputError:
    """The error for files that fail their checksum, naming each file."""
    details = "; ".join(s.detail for s in statuses)
    what = "checksum mismatch" if any("expected" in s.detail for s in statuses) else "corrupt file"
    return BenchInputError(
        "dataset",
        name,
        reason=(
            f"{what}: {details}. The file is corrupt or not the official one: delete it, "
            f"then run `python -m bench data download {name}` or `python -m bench data import {name} PATH`"
        ),
    )


def check_layout(source: Source, layout: Layout, paths: dict[str, Path]) -> list[FileStatus]:
    """The status of every file of ``layout`` at ``paths``."""
    return [
        FileStatus(source.name, f.name, paths[f.name], *check_file(paths[f.name], f)) for f in layout.files
    ]
