"""The local data cache: finding a complete, checked copy of a dataset.

A dataset ``NAME`` lives in ``<cache>/NAME/`` (``<cache>`` = ``BENCH_DATA`` or
``~/.cache/bench``; a ``root`` argument overrides both), or in a system-wide folder (a Debian
package's). Files are checked against the checksums of :mod:`bench.data.sources`
(:mod:`bench.data.checksums`) before anything reads them — in particular before the CIFAR
pickles are unpickled. Files get into the cache only through :mod:`bench.data.ingest`
(verified, then moved into place atomically), so the cache never holds a half-written or
unchecked file under its final name.

Nothing here downloads implicitly: a loader that finds no copy raises the *offline error*
(:func:`offline_error`), which names the dataset, the expected files with their checksums,
the cache folder and the two ways to provide them.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bench.core.errors import BenchInputError
from bench.data.checksums import CORRUPT, OK, FileStatus, check_layout, checksum_error
from bench.data.files import Layout, Source, dataset_dir
from bench.data.sources import get_source


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
