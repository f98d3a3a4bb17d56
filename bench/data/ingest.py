"""Writing into the local data cache: downloading and importing a dataset's files.

Downloads go to ``<file>.part``, resume with an HTTP ``Range`` request (RFC 9110, §14) when a
``.part`` is left over, are verified against the checksums of :mod:`bench.data.sources`
(:func:`~bench.data.checksums.check_file`) and only then moved into place atomically
(:func:`os.replace`). Imports copy files found elsewhere the same way, once a complete layout
passed its checks. Nothing reads the cache here; :mod:`bench.data.cache` finds a copy.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from bench.core.errors import BenchInputError, short_repr
from bench.data.checksums import (
    CHUNK,
    CORRUPT,
    FileStatus,
    check_file,
    checksum_error,
    file_digests,
    remember_check,
)
from bench.data.files import DataFile, dataset_dir
from bench.data.sources import get_source


class DatasetUnavailable(BenchInputError):
    """A dataset whose files are neither here nor obtainable (offline, a failed download): not a
    bad value, so the message says what is missing and how to get it (exit 2 like every input
    error). ``field`` is ``"dataset"``, ``value`` the dataset's name, ``reason`` what was tried
    and what to do."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__("dataset", name, reason=reason)

    @property
    def message(self) -> str:
        return f"dataset {short_repr(self.value)} is not available here: {self.reason}"


def _install(tmp: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, dest)


def fetch(url: str, part: Path, timeout: float = 60.0, progress: str | None = None) -> bool:
    """Download ``url`` into ``part``, resuming an existing ``part`` with a ``Range`` request.

    Returns whether the transfer resumed. A server that ignores ``Range`` (status 200) makes
    the file start over; ``416`` (range not satisfiable) leaves a complete ``part`` as it is.
    With ``progress`` (a label), a tqdm progress bar on standard error shows the bytes received
    (tqdm leaves it out when standard error is not a terminal).
    """
    part.parent.mkdir(parents=True, exist_ok=True)
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "bench-data/1 (python urllib)"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:
            return True
        raise
    with response:
        resumed = bool(offset) and response.status == 206
        if resumed:
            content_range = response.headers.get("Content-Range", "")
            if not content_range.startswith(f"bytes {offset}-"):
                resumed = False
        if offset and not resumed:  # the server sent the whole file: start over
            response.close()
            part.unlink()
            return fetch(url, part, timeout, progress)
        length = response.headers.get("Content-Length")
        total = int(length) + (offset if resumed else 0) if length and length.isdigit() else None
        with (
            open(part, "ab" if resumed else "wb") as out,
            tqdm(
                total=total,
                initial=offset if resumed else 0,
                unit="B",
                unit_scale=True,
                desc=progress,
                disable=progress is None or None,  # None: off unless standard error is a terminal
                leave=False,
            ) as bar,
        ):
            while chunk := response.read(CHUNK):
                out.write(chunk)
                bar.update(len(chunk))
    return resumed


def download(
    name: str,
    root: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] | None = None,
    timeout: float = 60.0,
) -> list[FileStatus]:
    """Download the files of ``name``'s primary layout into the cache, verify, install.

    Files already present and valid are kept. A failed checksum deletes the download and
    raises :func:`checksum_error`; a file no URL can deliver raises an error listing the
    attempts and the import alternative.
    """
    source = get_source(name)
    say = log or (lambda _msg: None)
    folder = dataset_dir(name, root)
    statuses: list[FileStatus] = []
    for spec in source.primary.files:
        dest = folder / spec.name
        if dest.is_file():
            status, detail = check_file(dest, spec)
            if status != CORRUPT:
                statuses.append(FileStatus(name, spec.name, dest, status, detail))
                say(f"{spec.name}: already in the cache ({status})")
                continue
            say(f"{spec.name}: cached copy is corrupt, downloading again")
            dest.unlink()
        part = dest.with_name(dest.name + ".part")
        errors: list[str] = []
        for url in spec.urls:
            say(f"{spec.name}: downloading {url}" + (" (resuming)" if part.exists() else ""))
            try:
                resumed = fetch(url, part, timeout, progress=spec.name)
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                errors.append(f"{url}: {exc}")
                continue
            status, detail = check_file(part, spec)
            if status == CORRUPT and resumed:  # a stale .part: try once from scratch
                part.unlink()
                fetch(url, part, timeout)
                status, detail = check_file(part, spec)
            if status == CORRUPT:
                part.unlink()
                raise checksum_error(name, [FileStatus(name, spec.name, part, status, detail)])
            _install(part, dest)
            remember_check(dest, spec, (status, detail))
            statuses.append(FileStatus(name, spec.name, dest, status, detail))
            say(f"{spec.name}: {status} -> {dest}")
            break
        else:
            raise DatasetUnavailable(
                name,
                (
                    f"could not download {spec.name}: "
                    + "; ".join(errors or ["no URL"])
                    + ". Without network, obtain the file elsewhere and run "
                    + f"`python -m bench data import {name} PATH`"
                ),
            )
    return statuses


def _find(path: Path, spec: DataFile) -> Path | None:
    if path.is_file():
        return path if path.name == spec.basename else None
    for candidate in (path / spec.name, path / spec.basename):
        if candidate.is_file():
            return candidate
    matches = sorted(p for p in path.rglob(spec.basename) if p.is_file())
    exact = [p for p in matches if p.as_posix().endswith("/" + spec.name)]
    return (exact or matches or [None])[0]


#: files larger than this are not hashed when looking for a dataset's files by content
CONTENT_LIMIT = 4 << 30


def _candidates(path: Path) -> list[Path]:
    files = [path] if path.is_file() else (p for p in path.rglob("*") if p.is_file())
    return sorted(p for p in files if p.stat().st_size <= CONTENT_LIMIT)


def _by_content(path: Path, specs: list[DataFile]) -> dict[str, Path]:
    """The files under ``path`` whose *content* passes the checksums of a file in ``specs``,
    whatever they are called (``{spec name: path}``): each candidate is hashed once, as it is
    and, when it is gzipped, decompressed (RFC 1952). Files without a published checksum cannot be
    recognized this way."""
    wanted = [s for s in specs if s.checksums]
    if not wanted:
        return {}
    algorithms = {c.algorithm for s in wanted for c in s.checksums}
    found: dict[str, Path] = {}
    for candidate in _candidates(path):
        with open(candidate, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        try:
            digests = {"file": file_digests(candidate, algorithms)}
            if gzipped:
                digests["gunzip"] = file_digests(candidate, algorithms, gunzip=True)
        except (OSError, EOFError, zlib.error):
            continue
        for spec in wanted:
            if spec.name in found:
                continue
            for of in ("file", "gunzip"):
                sums = [c for c in spec.checksums if c.of == of]
                if sums and of in digests and all(digests[of][c.algorithm] == c.digest.lower() for c in sums):
                    found[spec.name] = candidate
                    break
        if len(found) == len(wanted):
            break
    return found


def import_files(
    name: str, path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None
) -> list[FileStatus]:
    """Copy the files of ``name`` found at ``path`` (a file or a folder, searched recursively)
    into the cache after checking them; nothing is copied unless a complete layout passes.

    Files are looked up by their names first; when no layout is complete that way, by their
    content (:func:`_by_content`: a file passing a checksum is that file, e.g. MNIST's
    ``train-images.idx3-ubyte`` as ``train-images-idx3-ubyte``).

    Raises
    ------
    BenchInputError
        ``path`` does not exist, holds no complete set of files, or a file fails its checksum.
    """
    source = get_source(name)
    base = Path(path).expanduser()
    if not base.exists():
        raise BenchInputError("path", str(path), reason="no such file or folder")
    folder = dataset_dir(name, root)
    by_name = [{f.name: _find(base, f) for f in layout.files} for layout in source.layouts]
    if not any(all(p is not None for p in found.values()) for found in by_name):
        content = _by_content(base, [f for layout in source.layouts for f in layout.files])
        by_name = [{f.name: content.get(f.name) for f in layout.files} for layout in source.layouts]
    for layout, found in zip(source.layouts, by_name, strict=True):
        if any(p is None for p in found.values()):
            continue
        statuses = [
            FileStatus(name, f.name, found[f.name], *check_file(found[f.name], f)) for f in layout.files
        ]  # type: ignore[arg-type]
        bad = [s for s in statuses if s.status == CORRUPT]
        if bad:
            raise checksum_error(name, bad)
        out = []
        for s in statuses:
            assert s.path is not None
            dest = folder / s.file
            if s.path.resolve() != dest.resolve():
                dest.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
                os.close(fd)
                shutil.copyfile(s.path, tmp)
                _install(Path(tmp), dest)
            out.append(FileStatus(name, s.file, dest, s.status, s.detail))
        return out
    wanted = " | ".join(", ".join(f.name for f in lay.files) for lay in source.layouts)
    raise BenchInputError(
        "path",
        str(path),
        reason=f"holds no complete set of files of dataset '{name}' (expected one of: {wanted})",
    )
