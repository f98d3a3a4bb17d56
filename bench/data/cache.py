"""The local data cache: checking files, finding a usable copy, downloading and importing.

A dataset ``NAME`` lives in ``<cache>/NAME/`` (``<cache>`` = ``BENCH_DATA`` or
``~/.cache/bench``; a ``root`` argument overrides both). Files are checked against the
checksums of :mod:`bench.data.sources` before anything reads them — in particular before the
CIFAR pickles are unpickled. Downloads go to ``<file>.part``, resume with an HTTP ``Range``
request when a ``.part`` is left over, are verified and only then moved into place
atomically (:func:`os.replace`), so the cache never holds a half-written or unchecked file
under its final name.

Nothing here downloads implicitly: a loader that finds no copy raises the *offline error*
(:func:`offline_error`), which names the dataset, the expected files with their checksums,
the cache folder and the two ways to provide them.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bench.data.sources import Checksum, DataFile, Layout, Source, dataset_dir, get_source
from bench.errors import BenchInputError

OK, MISSING, CORRUPT, UNVERIFIED = "ok", "missing", "corrupt", "unverified (no published checksum)"
_CHUNK = 1 << 20

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


# --- hashing and checking ------------------------------------------------------------------------


def _digests(stream: IO[bytes], algorithms: set[str]) -> dict[str, str]:
    hashes = {a: hashlib.new(a) for a in algorithms}
    while chunk := stream.read(_CHUNK):
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


def _remember(path: Path, spec: DataFile, result: tuple[str, str]) -> None:
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


# --- finding a copy -------------------------------------------------------------------------------


@functools.cache
def _package_dirs(package: str) -> tuple[Path, ...]:
    """Folders holding files of Debian package ``package`` (``dpkg -L``), if installed."""
    exe = shutil.which("dpkg-query") or shutil.which("dpkg")
    if exe is None:
        return ()
    try:
        out = subprocess.run([exe, "-L", package], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ()
    if out.returncode != 0:
        return ()
    dirs: list[Path] = []
    for line in out.stdout.splitlines():
        p = Path(line.strip())
        if p.parent not in dirs and not str(p).startswith("/usr/share/doc/") and p.is_file():
            dirs.append(p.parent)
    return tuple(dirs)


def system_dirs(source: Source) -> list[Path]:
    """Folders where a system-wide copy of ``source`` may live: those of its Debian package
    (``dpkg -L``) first, then the known fallback locations that exist."""
    dirs = list(_package_dirs(source.system_package)) if source.system_package else []
    dirs += [Path(d) for d in source.system_dirs if Path(d) not in dirs]
    return [d for d in dirs if d.is_dir()]


@dataclass
class Located:
    """A complete, checked copy of a dataset: its layout, folder and file paths."""

    source: Source
    layout: Layout
    folder: Path
    paths: dict[str, Path]
    statuses: list[FileStatus] = field(default_factory=list)
    system: bool = False

    @property
    def verified(self) -> bool:
        return all(s.status == OK for s in self.statuses)

    def provenance(self) -> dict[str, object]:
        """What was read, for a run's provenance."""
        return {
            "dataset": self.source.name,
            "layout": self.layout.name,
            "folder": str(self.folder),
            "system_copy": self.system,
            "files": {s.file: s.status + (f" ({s.detail})" if s.detail else "") for s in self.statuses},
        }

    @contextmanager
    def open(self, member: str) -> Iterator[IO[bytes]]:
        """Open ``member`` (a relative name such as ``cifar-10-batches-py/test_batch``): the
        file itself in an extracted layout, else the member of the layout's tar archive."""
        if member in self.paths:
            with open(self.paths[member], "rb") as f:
                yield f
            return
        archive = next(iter(self.paths.values()))
        with tarfile.open(archive, "r|*") as tar:  # stream mode: one forward pass, no seeking
            for info in tar:
                if info.name == member and info.isfile():
                    f = tar.extractfile(info)
                    if f is not None:
                        with f:
                            yield f
                        return
        raise BenchInputError("dataset", self.source.name, reason=f"{archive} has no member {member!r}")

    def read(self, members: list[str]) -> dict[str, bytes]:
        """Read several members, with one pass over an archive."""
        if all(m in self.paths for m in members):
            return {m: self.paths[m].read_bytes() for m in members}
        archive = next(iter(self.paths.values()))
        out: dict[str, bytes] = {}
        with tarfile.open(archive, "r|*") as tar:
            for info in tar:
                if info.name in members and info.isfile():
                    f = tar.extractfile(info)
                    if f is not None:
                        out[info.name] = f.read()
                if len(out) == len(set(members)):
                    break
        missing = [m for m in members if m not in out]
        if missing:
            raise BenchInputError("dataset", self.source.name, reason=f"{archive} lacks {', '.join(missing)}")
        return out


def _complete(layout: Layout, folder: Path) -> dict[str, Path] | None:
    paths = {f.name: folder / f.name for f in layout.files}
    return paths if all(p.is_file() for p in paths.values()) else None


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


def candidates(
    name: str, root: str | os.PathLike[str] | None = None, system: bool = True
) -> list[tuple[Layout, Path, dict[str, Path], bool]]:
    """Complete (unchecked) copies of ``name``: ``(layout, folder, paths, is_system)``, the
    cache first, then system-wide folders; no file is read."""
    source = get_source(name)
    folders = [(dataset_dir(name, root), False)]
    if system:
        folders += [(d, True) for d in system_dirs(source)]
    found = []
    for folder, is_system in folders:
        for layout in source.layouts:
            paths = _complete(layout, folder)
            if paths is not None:
                found.append((layout, folder, paths, is_system))
    return found


def locate(
    name: str, root: str | os.PathLike[str] | None = None, system: bool = True, strict: bool = True
) -> Located | None:
    """The first complete copy of dataset ``name``: in the cache, then (``system``) in a
    system-wide folder. Files are checked; with ``strict`` a corrupt file raises
    :func:`checksum_error`, else that copy is skipped. ``None`` when there is no copy."""
    source = get_source(name)
    for layout, folder, paths, is_system in candidates(name, root, system):
        statuses = check_layout(source, layout, paths)
        bad = [s for s in statuses if s.status == CORRUPT]
        if bad:
            if strict:
                raise checksum_error(name, bad)
            continue
        return Located(source, layout, folder, paths, statuses, is_system)
    return None


def offline_error(name: str, root: str | os.PathLike[str] | None = None) -> BenchInputError:
    """The error for a dataset with no local copy: expected files and checksums, the cache
    folder, and the two ways to provide them."""
    source = get_source(name)
    folder = dataset_dir(name, root)
    files = "; ".join(f.describe() for f in source.primary.files)
    others = [lay for lay in source.layouts[1:]]
    alt = (
        " (or, as other tools leave them: "
        + " | ".join(", ".join(f.name for f in lay.files) for lay in others)
        + ")"
        if others
        else ""
    )
    system = ""
    if source.system_package:
        system = (
            f" A system-wide copy is also used when present (Debian package {source.system_package}, "
            f"e.g. `apt-get install {source.system_package}`)."
        )
    return BenchInputError(
        "dataset",
        name,
        reason=(
            f"the dataset is not available offline: expected in {folder}/ the files {files}{alt}. "
            f"Provide them in one of two ways: (1) `python -m bench data download {name}` (needs network; "
            f"from {_where(source.urls)}), or (2) obtain the files elsewhere and run "
            f"`python -m bench data import {name} PATH` (PATH: the file or a folder holding them; they are "
            f"checked before being copied into the cache). Set BENCH_DATA to use another cache folder."
            + system
        ),
    )


def _where(urls: tuple[str, ...]) -> str:
    """``https://host/dir/`` when all URLs share a folder, else the URLs."""
    folders = {u[: u.rfind("/") + 1] for u in urls}
    return folders.pop() if len(urls) > 1 and len(folders) == 1 else ", ".join(urls)


def require(name: str, root: str | os.PathLike[str] | None = None, system: bool = True) -> Located:
    """A checked copy of dataset ``name`` or the offline error (never downloads)."""
    found = locate(name, root, system)
    if found is None:
        raise offline_error(name, root)
    return found


# --- writing into the cache ----------------------------------------------------------------------


def _install(tmp: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, dest)


def fetch(url: str, part: Path, timeout: float = 60.0) -> bool:
    """Download ``url`` into ``part``, resuming an existing ``part`` with a ``Range`` request.

    Returns whether the transfer resumed. A server that ignores ``Range`` (status 200) makes
    the file start over; ``416`` (range not satisfiable) leaves a complete ``part`` as it is.
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
            return fetch(url, part, timeout)
        with open(part, "ab" if resumed else "wb") as out:
            shutil.copyfileobj(response, out, _CHUNK)
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
                resumed = fetch(url, part, timeout)
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
            _remember(dest, spec, (status, detail))
            statuses.append(FileStatus(name, spec.name, dest, status, detail))
            say(f"{spec.name}: {status} -> {dest}")
            break
        else:
            raise BenchInputError(
                "dataset",
                name,
                reason=(
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


def import_files(
    name: str, path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None
) -> list[FileStatus]:
    """Copy the files of ``name`` found at ``path`` (a file or a folder, searched recursively)
    into the cache after checking them; nothing is copied unless a complete layout passes.

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
    for layout in source.layouts:
        found = {f.name: _find(base, f) for f in layout.files}
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
