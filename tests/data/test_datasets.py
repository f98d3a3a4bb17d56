"""Real-dataset loaders, the checked cache, downloads, imports and the ``data`` command.

Every loader reads tiny files that the test writes in the real format (IDX gz, CIFAR python
pickles in a tar.gz, the Purchase/Texas archives, UCI Adult lines), through the real code
path; only the expected checksums are replaced by those of the tiny files.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import http.server
import io
import math
import os
import pickle
import struct
import tarfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch

from bench.core.errors import BenchInputError
from bench.data import cache, load_dataset, manage
from bench.data.cli import add_data_parser, cmd_data
from bench.data.files import Checksum, DataFile, Layout, cache_dir
from bench.data.formats import FormatError, load_pickle
from bench.data.partition import attribute
from bench.data.sources import SOURCES

RNG = np.random.default_rng(0)


# --- writing tiny files in the real formats -------------------------------------------------------


def idx_bytes(arr: np.ndarray) -> bytes:
    """IDX: 0, 0, type 0x08 (ubyte), ndim, big-endian int32 dims, the values."""
    return (
        bytes([0, 0, 0x08, arr.ndim])
        + struct.pack(f">{arr.ndim}i", *arr.shape)
        + arr.astype(np.uint8).tobytes()
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def inject(
    monkeypatch: pytest.MonkeyPatch, name: str, folder: Path, layout: int = 0, algo: str = "sha256"
) -> None:
    """Make SOURCES[name] expect the digests of the tiny files in ``folder``."""
    src = SOURCES[name]
    sums = {}
    for f in src.layouts[layout].files:
        digest = hashlib.new(algo, (folder / f.name).read_bytes()).hexdigest()
        sums[f.name] = [Checksum(algo, digest, source="test")]  # type: ignore[arg-type]
    monkeypatch.setitem(SOURCES, name, src.with_checksums(sums))


def write_mnist(folder: Path, n_train: int = 30, n_test: int = 10) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte": RNG.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": np.arange(n_train) % 10,
        "t10k-images-idx3-ubyte": RNG.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": (np.arange(n_test) * 3) % 10,
    }
    arrays["train-images-idx3-ubyte"][0, 0, 0] = 0
    arrays["train-images-idx3-ubyte"][0, 0, 1] = 255
    for stem, arr in arrays.items():
        (folder / f"{stem}.gz").write_bytes(gzip.compress(idx_bytes(arr), mtime=0))
    return arrays


def tar_gz(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def cifar_pickle(data: np.ndarray, **labels: list[int]) -> bytes:
    batch = {b"batch_label": b"test batch", b"data": data, b"filenames": [b"x.png"] * len(data)}
    batch.update({k.encode(): v for k, v in labels.items()})
    return pickle.dumps(batch, protocol=2)


def channel_images(n: int) -> np.ndarray:
    """Rows of 3072 bytes: red plane = 10 + i, green = 100, blue = 200 (row-major 32x32)."""
    rows = np.zeros((n, 3, 1024), dtype=np.uint8)
    rows[:, 0] = (10 + np.arange(n))[:, None]
    rows[:, 1], rows[:, 2] = 100, 200
    rows[:, 0, 5] = 0  # one pixel of each range end
    rows[:, 2, 7] = 255
    return rows.reshape(n, 3072)


def adult_line(
    age: int, education: str, edu_num: int, income: str, sex: str = "Male", test: bool = False
) -> str:
    fields = [
        str(age),
        "Private",
        "77516",
        education,
        str(edu_num),
        "Never-married",
        "Adm-clerical",
        "Not-in-family",
        "White",
        sex,
        "2174",
        "0",
        "40",
        "United-States",
        income + ("." if test else ""),
    ]
    return ", ".join(fields)


def write_adult(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    train = [
        adult_line(25, "Bachelors", 13, "<=50K"),
        adult_line(40, "HS-grad", 9, "<=50K"),  # filtered out (below Bachelors)
        adult_line(37, "Doctorate", 16, ">50K", "Female"),
        adult_line(38, "Doctorate", 16, ">50K"),
        adult_line(52, "Doctorate", 16, "<=50K"),
        adult_line(53, "Doctorate", 16, ">50K"),
        adult_line(60, "Masters", 14, ">50K"),
        adult_line(33, "Prof-school", 15, ">50K"),
        adult_line(29, "Some-college", 10, "<=50K"),  # filtered out
        adult_line(45, "Bachelors", 13, "<=50K").replace("Private", "?"),  # a missing value
    ]
    test = [adult_line(30, "Masters", 14, ">50K", test=True), adult_line(50, "11th", 7, "<=50K", test=True)]
    (folder / "adult.data").write_text("\n".join(train) + "\n\n")
    (folder / "adult.test").write_text("|1x3 Cross validator\n" + "\n".join(test) + "\n")


# --- MNIST / Fashion-MNIST (IDX) --------------------------------------------------------------------


def test_mnist_reads_idx_gz_with_shapes_labels_and_normalization(tmp_path, monkeypatch):
    arrays = write_mnist(tmp_path / "mnist")
    inject(monkeypatch, "mnist", tmp_path / "mnist")
    data = load_dataset("mnist", seed=0, root=str(tmp_path))
    tr, te = data.train, data.test
    assert tr.x.shape == (30, 1, 28, 28) and te.x.shape == (10, 1, 28, 28) and tr.x.dtype == torch.float32
    assert tr.y.tolist() == arrays["train-labels-idx1-ubyte"].tolist() and tr.n_classes == 10
    assert tr.mean == (0.1307,) and tr.std == (0.3081,)
    raw = tr.denormalize(tr.x)
    expect = torch.from_numpy(arrays["train-images-idx3-ubyte"] / 255.0).float().unsqueeze(1)
    assert torch.allclose(raw, expect, atol=1e-6)
    assert raw.min().item() == pytest.approx(0.0, abs=1e-6) and raw.max().item() == pytest.approx(
        1.0, abs=1e-6
    )
    assert te.y.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()


def test_subset_is_seeded_and_keeps_images_with_their_labels(tmp_path, monkeypatch):
    arrays = write_mnist(tmp_path / "mnist", n_train=40)
    inject(monkeypatch, "mnist", tmp_path / "mnist")
    a = load_dataset("mnist", seed=3, root=str(tmp_path), subset=12, test_subset=4)
    b = load_dataset("mnist", seed=3, root=str(tmp_path), subset=12, test_subset=4)
    c = load_dataset("mnist", seed=4, root=str(tmp_path), subset=12)
    assert len(a.train) == 12 and len(a.test) == 4 and torch.equal(a.train.x, b.train.x)
    assert not torch.equal(a.train.x, c.train.x)
    images = torch.from_numpy(arrays["train-images-idx3-ubyte"] / 255.0).float()
    for x, y in zip(a.train.denormalize(a.train.x), a.train.y, strict=True):
        row = int(((images - x[0]).abs().flatten(1).max(1).values < 1e-5).nonzero()[0])
        assert arrays["train-labels-idx1-ubyte"][row] == y
    with pytest.raises(BenchInputError, match=r"dataset\.subset"):
        load_dataset("mnist", root=str(tmp_path), subset=41)


def test_a_recompressed_or_uncompressed_copy_is_accepted_by_its_payload_checksum(tmp_path, monkeypatch):
    folder = tmp_path / "fashion_mnist"
    write_mnist(folder)
    src = SOURCES["fashion_mnist"]
    sums = {}
    for f in src.layouts[0].files:  # official .gz bytes: expected; payload: the IDX data
        payload = gzip.decompress((folder / f.name).read_bytes())
        sums[f.name] = [
            Checksum("sha256", "0" * 64, source="test"),
            Checksum("sha256", hashlib.sha256(payload).hexdigest(), "gunzip", "test"),
        ]
        sums[f.name.removesuffix(".gz")] = [
            Checksum("sha256", hashlib.sha256(payload).hexdigest(), source="test")
        ]
    monkeypatch.setitem(SOURCES, "fashion_mnist", src.with_checksums(sums))
    data = load_dataset("fashion_mnist", root=str(tmp_path), system=False)  # gz differs, payload matches
    assert data.train.x.shape == (30, 1, 28, 28) and data.train.mean == (0.2860,)
    rows = manage.verify("fashion_mnist", root=tmp_path, system=False)
    assert {r["status"] for r in rows} == {"ok"} and "decompressed data match" in rows[0]["detail"]
    for f in src.layouts[0].files:  # now only the uncompressed IDX files ("raw" layout)
        (folder / f.name.removesuffix(".gz")).write_bytes(gzip.decompress((folder / f.name).read_bytes()))
        (folder / f.name).unlink()
    found = cache.locate("fashion_mnist", tmp_path, system=False)
    assert found is not None and found.layout.name == "raw"
    assert torch.equal(load_dataset("fashion_mnist", root=str(tmp_path), system=False).train.x, data.train.x)


def test_a_corrupted_file_fails_its_checksum_with_a_clear_error(tmp_path, monkeypatch):
    write_mnist(tmp_path / "mnist")
    inject(monkeypatch, "mnist", tmp_path / "mnist")
    path = tmp_path / "mnist" / "train-labels-idx1-ubyte.gz"
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(BenchInputError) as err:
        load_dataset("mnist", root=str(tmp_path))
    msg = str(err.value)
    assert "checksum mismatch" in msg and "train-labels-idx1-ubyte.gz" in msg and "SHA-256" in msg
    assert "data download mnist" in msg and "data import mnist" in msg and err.value.field == "dataset"
    rows = {r["file"]: r["status"] for r in manage.verify("mnist", root=tmp_path)}
    assert rows["train-labels-idx1-ubyte.gz"] == "corrupt" and rows["train-images-idx3-ubyte.gz"] == "ok"


def test_a_missing_dataset_gives_the_offline_error_naming_files_checksums_and_both_remedies(
    tmp_path, monkeypatch
):
    from bench.data import packaged

    monkeypatch.setitem(packaged.PACKAGED, "mnist", ())  # no package ships it (see test_packaged.py)
    with pytest.raises(BenchInputError) as err:
        load_dataset("mnist", root=str(tmp_path))
    msg = str(err.value)
    assert err.value.field == "dataset" and err.value.value == "mnist"
    assert str(tmp_path / "mnist") in msg
    for f in SOURCES["mnist"].primary.files:
        assert f.name in msg and next(c.digest for c in f.checksums if c.algorithm == "sha256") in msg
    assert "python -m bench data download mnist" in msg and "python -m bench data import mnist PATH" in msg
    # one file short of a complete set is still missing, and BENCH_DATA is honoured
    write_mnist(tmp_path / "env" / "mnist")
    (tmp_path / "env" / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    monkeypatch.setenv("BENCH_DATA", str(tmp_path / "env"))
    assert cache_dir() == tmp_path / "env"
    with pytest.raises(BenchInputError, match="not available offline"):
        load_dataset("mnist")
    with pytest.raises(BenchInputError, match="not available offline"):
        manage.require_available("mnist")
    with pytest.raises(BenchInputError, match="not available offline"):
        load_dataset("purchase100", root=str(tmp_path))


def test_idx_reader_rejects_bad_magic_and_truncated_payload(tmp_path, monkeypatch):
    folder = tmp_path / "mnist"
    write_mnist(folder)
    bad = idx_bytes(np.zeros((3, 28, 28)))[:-5]
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(bad))
    inject(monkeypatch, "mnist", folder)
    with pytest.raises(BenchInputError, match=r"t10k-images-idx3-ubyte\.gz is not in the expected format"):
        load_dataset("mnist", root=str(tmp_path))


# --- CIFAR ------------------------------------------------------------------------------------------


def write_cifar10(path: Path, per_batch: int = 4, n_test: int = 5) -> None:
    members = {}
    for i in range(1, 6):
        labels = [(i + j) % 10 for j in range(per_batch)]
        members[f"cifar-10-batches-py/data_batch_{i}"] = cifar_pickle(
            channel_images(per_batch), labels=labels
        )
    members["cifar-10-batches-py/test_batch"] = cifar_pickle(
        channel_images(n_test), labels=list(range(n_test))
    )
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps(
        {b"label_names": [b"airplane"] * 10}, protocol=2
    )
    members["cifar-10-batches-py/readme.html"] = b"<html></html>"
    tar_gz(path, members)


def test_cifar10_reads_python_pickle_batches_from_the_archive(tmp_path, monkeypatch):
    write_cifar10(tmp_path / "cifar10" / "cifar-10-python.tar.gz")
    inject(monkeypatch, "cifar10", tmp_path / "cifar10")
    data = load_dataset("cifar10", root=str(tmp_path))
    tr, te = data.train, data.test
    assert tr.x.shape == (20, 3, 32, 32) and te.x.shape == (5, 3, 32, 32) and tr.x.dtype == torch.float32
    assert tr.y.tolist() == [(i + j) % 10 for i in range(1, 6) for j in range(4)] and te.y.tolist() == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert tr.mean == (0.4914, 0.4822, 0.4465) and tr.std == (0.2470, 0.2435, 0.2616)
    raw = tr.denormalize(tr.x)
    assert raw.min().item() == pytest.approx(0.0, abs=1e-6) and raw.max().item() == pytest.approx(
        1.0, abs=1e-6
    )
    # planes in R, G, B order, row-major: red = 10 + index within the batch
    assert raw[1, 0, 3, 3].item() == pytest.approx(11 / 255, abs=1e-6)
    assert (
        raw[:, 1, 4, 4].sub(100 / 255).abs().max() < 1e-6
        and raw[:, 2, 0, 0].sub(200 / 255).abs().max() < 1e-6
    )
    assert raw[0, 2, 0, 7].item() == pytest.approx(1.0, abs=1e-6)


def test_cifar100_fine_and_coarse_labels(tmp_path, monkeypatch):
    members = {
        "cifar-100-python/train": cifar_pickle(
            channel_images(6), fine_labels=[0, 99, 5, 6, 7, 8], coarse_labels=[0, 19, 1, 1, 2, 3]
        ),
        "cifar-100-python/test": cifar_pickle(channel_images(2), fine_labels=[42, 43], coarse_labels=[4, 5]),
        "cifar-100-python/meta": pickle.dumps({b"fine_label_names": [b"apple"] * 100}, protocol=2),
    }
    tar_gz(tmp_path / "cifar100" / "cifar-100-python.tar.gz", members)
    inject(monkeypatch, "cifar100", tmp_path / "cifar100")
    fine = load_dataset("cifar100", root=str(tmp_path))
    coarse = load_dataset("cifar100", root=str(tmp_path), labels="coarse")
    assert fine.train.n_classes == 100 and fine.train.y.tolist() == [0, 99, 5, 6, 7, 8]
    assert coarse.train.n_classes == 20 and coarse.test.y.tolist() == [4, 5]
    assert fine.train.x.shape == (6, 3, 32, 32) and fine.train.std == (0.2673, 0.2564, 0.2762)
    with pytest.raises(BenchInputError, match=r"dataset\.labels"):
        load_dataset("cifar100", root=str(tmp_path), labels="medium")


def test_cifar_pickles_may_build_numpy_arrays_only():
    assert load_pickle(pickle.dumps({b"data": np.arange(3, dtype=np.uint8)}, protocol=2))[
        b"data"
    ].tolist() == [0, 1, 2]
    with pytest.raises(FormatError, match="refusing to load global"):
        load_pickle(pickle.dumps(os.system, protocol=2))


def test_import_checks_files_then_copies_them_into_the_cache(tmp_path, monkeypatch):
    # a torchvision-style extracted folder (cifar-10-batches-py/...) somewhere else
    elsewhere = tmp_path / "elsewhere" / "torchvision_root"
    write_cifar10(tmp_path / "archive.tgz")
    with tarfile.open(tmp_path / "archive.tgz") as tar:
        for m in tar.getmembers():
            if m.name.count("/") == 1 and not m.name.endswith("html"):
                (elsewhere / m.name).parent.mkdir(parents=True, exist_ok=True)
                (elsewhere / m.name).write_bytes(tar.extractfile(m).read())  # type: ignore[union-attr]
    inject(monkeypatch, "cifar10", elsewhere, layout=1, algo="md5")
    cache_root = tmp_path / "cache"
    # a corrupted copy is refused and nothing is copied
    batch = elsewhere / "cifar-10-batches-py" / "data_batch_3"
    good = batch.read_bytes()
    batch.write_bytes(good[:-1] + b"!")
    with pytest.raises(BenchInputError, match=r"checksum mismatch.*data_batch_3"):
        manage.import_files("cifar10", elsewhere.parent, root=cache_root)
    assert not (cache_root / "cifar10").exists()
    batch.write_bytes(good)
    rows = manage.import_files("cifar10", elsewhere.parent, root=cache_root)
    assert len(rows) == 7 and {r["status"] for r in rows} == {"ok"}
    assert (cache_root / "cifar10" / "cifar-10-batches-py" / "test_batch").read_bytes() == (
        elsewhere / "cifar-10-batches-py" / "test_batch"
    ).read_bytes()
    assert load_dataset("cifar10", root=str(cache_root)).train.x.shape == (20, 3, 32, 32)
    with pytest.raises(BenchInputError, match="no such file or folder"):
        manage.import_files("cifar10", tmp_path / "nowhere")
    with pytest.raises(BenchInputError, match="holds no complete set of files of dataset 'cifar10'"):
        manage.import_files("cifar10", batch)  # one batch is not the whole dataset
    with pytest.raises(BenchInputError, match="holds no complete set"):
        manage.import_files("mnist", elsewhere, root=cache_root)


# --- STL-10 ----------------------------------------------------------------------------------------


def test_stl10_reads_column_major_binaries(tmp_path, monkeypatch):
    x = RNG.integers(0, 256, (3, 3, 96, 96)).astype(np.uint8)
    members = {
        "stl10_binary/train_X.bin": x.transpose(0, 1, 3, 2).tobytes(),
        "stl10_binary/train_y.bin": bytes([1, 10, 3]),
        "stl10_binary/test_X.bin": x[:2].transpose(0, 1, 3, 2).tobytes(),
        "stl10_binary/test_y.bin": bytes([2, 2]),
    }
    tar_gz(tmp_path / "stl10" / "stl10_binary.tar.gz", members)
    inject(monkeypatch, "stl10", tmp_path / "stl10")
    data = load_dataset("stl10", root=str(tmp_path))
    assert data.train.x.shape == (3, 3, 96, 96) and data.train.y.tolist() == [0, 9, 2]
    assert torch.allclose(
        data.train.denormalize(data.train.x), torch.from_numpy(x / 255.0).float(), atol=1e-5
    )


# --- Purchase-100, Texas-100 -----------------------------------------------------------------------


def test_purchase100_reads_the_archive_and_reports_it_unverified(tmp_path):
    n = 50
    feats = (np.arange(n)[:, None] >> np.arange(600)[None, :] % 8) & 1  # row i encodes i in bits 0-7
    lines = [f"{i % 100 + 1}," + ",".join(map(str, feats[i])) for i in range(n)]
    tar_gz(
        tmp_path / "purchase100" / "dataset_purchase.tgz",
        {"dataset_purchase": ("\n".join(lines) + "\n").encode()},
    )
    data = load_dataset("purchase100", seed=1, root=str(tmp_path), test_fraction=0.2)
    tr, te = data.train, data.test
    assert tr.x.shape == (40, 600) and te.x.shape == (10, 600) and tr.n_classes == 100
    assert set(tr.x.unique().tolist()) == {0.0, 1.0}
    row_ids = [(tr.x[:, :8] * 2 ** torch.arange(8)).sum(1), (te.x[:, :8] * 2 ** torch.arange(8)).sum(1)]
    ids = torch.cat(row_ids).long()
    assert sorted(ids.tolist()) == list(range(n))  # disjoint train/test covering the file
    assert torch.equal(torch.cat([tr.y, te.y]), ids % 100)  # labels 1..100 stored 0-based
    small = load_dataset("purchase100", seed=1, root=str(tmp_path), subset=7, test_subset=3)
    assert len(small.train) == 7 and len(small.test) == 3
    rows = manage.verify("purchase100", root=tmp_path)
    assert rows[0]["status"] == "unverified (no published checksum)"
    (tmp_path / "purchase100" / "dataset_purchase.tgz").write_bytes(b"not an archive")
    with pytest.raises(
        BenchInputError, match=r"corrupt file: .*dataset_purchase\.tgz: not a readable tar archive"
    ):
        load_dataset("purchase100", root=str(tmp_path))


def test_texas100_streams_only_the_selected_rows(tmp_path):
    n, d = 30, 16
    feats = (np.arange(n)[:, None] >> np.arange(d)[None, :] % 5) & 1
    members = {
        "texas/100/feats": ("\n".join(",".join(map(str, r)) for r in feats) + "\n").encode(),
        "texas/100/labels": ("\n".join(str(i % 100 + 1) for i in range(n)) + "\n").encode(),
    }
    tar_gz(tmp_path / "texas100" / "dataset_texas.tgz", members)
    data = load_dataset("texas100", seed=2, root=str(tmp_path), subset=9, test_subset=4)
    assert data.train.x.shape == (9, d) and data.test.x.shape == (4, d)
    ids = (torch.cat([data.train.x, data.test.x])[:, :5] * 2 ** torch.arange(5)).sum(1).long()
    assert torch.equal(torch.cat([data.train.y, data.test.y]), ids)  # rows keep their labels
    assert len(set(ids.tolist())) == 13


# --- Adult -----------------------------------------------------------------------------------------


def test_adult_filters_education_encodes_and_keeps_age_attributes(tmp_path, monkeypatch):
    write_adult(tmp_path / "adult")
    inject(monkeypatch, "adult", tmp_path / "adult")
    data = load_dataset("adult", root=str(tmp_path))
    tr, te = data.train, data.test
    assert len(tr) == 8 and len(te) == 1  # HS-grad, Some-college and 11th are dropped
    assert tr.y.tolist() == [0, 1, 1, 0, 1, 1, 1, 0] and te.y.tolist() == [1]
    assert tr.attributes["age"].tolist() == [25, 37, 38, 52, 53, 60, 33, 45]
    assert tr.attributes["doctorate"].tolist() == [0, 1, 1, 1, 1, 0, 0, 0]
    assert tr.attributes["sex"].tolist() == [1, 0, 1, 1, 1, 1, 1, 1]
    raw = tr.denormalize(tr.x)
    assert torch.allclose(raw[:, 0], tr.attributes["age"].float(), atol=1e-4)  # column 0 is age
    assert tr.x.shape[1] == 5 + 99 and torch.allclose(tr.x[:, :5].mean(0), torch.zeros(5), atol=1e-5)
    assert raw[:, 5:13].sum(1).tolist() == [1, 1, 1, 1, 1, 1, 1, 0]  # workclass one-hot; '?' is all zero
    everyone = load_dataset("adult", root=str(tmp_path), min_education=None)
    assert len(everyone.train) == 10 and len(everyone.test) == 2
    pooled = load_dataset("adult", root=str(tmp_path), test_fraction=0.3, seed=5)
    assert len(pooled.train) + len(pooled.test) == 9
    # the Xu & Neglia split on the loaded attributes: doctorates <38 / 38-52 / >52 to nodes 0-2
    parts = attribute(
        len(tr), 4, seed=0, attributes=tr.attributes, column="age", edges=[38, 53], where="doctorate"
    )
    assert [tr.attributes["age"][p].tolist() for p in parts[:3]] == [[37], [38, 52], [53]]
    assert sorted(parts[3].tolist()) == [0, 5, 6, 7]


# --- downloads ------------------------------------------------------------------------------------


class _RangeServer(http.server.BaseHTTPRequestHandler):
    files: ClassVar[dict[str, bytes]] = {}
    ranges: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        data = self.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        rng = self.headers.get("Range")
        self.ranges.append(rng)
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            body = data[start:]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    handler = type("Handler", (_RangeServer,), {"files": {}, "ranges": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _serve_adult(monkeypatch, tmp_path, handler, base, corrupt: bool = False) -> dict[str, bytes]:
    write_adult(tmp_path / "origin")
    blobs = {n: (tmp_path / "origin" / n).read_bytes() for n in ("adult.data", "adult.test")}
    src = SOURCES["adult"]
    files = tuple(
        DataFile(
            f.name,
            (Checksum("sha256", hashlib.sha256(blobs[f.name]).hexdigest(), source="test"),),
            len(blobs[f.name]),
            (f"{base}/missing/{f.name}", f"{base}/{f.name}"),  # the first mirror fails (404)
        )
        for f in src.primary.files
    )
    monkeypatch.setitem(SOURCES, "adult", replace(src, layouts=(Layout("files", files),)))
    handler.files.update({f"/{n}": (b + b"tampered" if corrupt else b) for n, b in blobs.items()})
    return blobs


def test_download_resumes_a_partial_file_verifies_and_installs_atomically(tmp_path, monkeypatch, server):
    handler, base = server
    blobs = _serve_adult(monkeypatch, tmp_path, handler, base)
    folder = tmp_path / "cache" / "adult"
    folder.mkdir(parents=True)
    (folder / "adult.data.part").write_bytes(blobs["adult.data"][:100])  # an interrupted download
    logs: list[str] = []
    rows = manage.download("adult", root=tmp_path / "cache", log=logs.append)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert (folder / "adult.data").read_bytes() == blobs["adult.data"] and not list(folder.glob("*.part"))
    assert "bytes=100-" in handler.ranges and any("resuming" in m for m in logs)
    assert len(load_dataset("adult", root=str(tmp_path / "cache")).train) == 8
    again = manage.download("adult", root=tmp_path / "cache")  # already cached: nothing fetched
    assert len(handler.ranges) == 2 and [r["status"] for r in again] == ["ok", "ok"]


def test_a_download_that_fails_its_checksum_is_deleted(tmp_path, monkeypatch, server):
    handler, base = server
    _serve_adult(monkeypatch, tmp_path, handler, base, corrupt=True)
    with pytest.raises(BenchInputError, match=r"checksum mismatch: .*adult\.data"):
        manage.download("adult", root=tmp_path / "cache")
    assert not list((tmp_path / "cache" / "adult").iterdir())
    monkeypatch.setitem(
        SOURCES,
        "adult",
        replace(
            SOURCES["adult"], layouts=(Layout("files", (DataFile("adult.data", urls=(base + "/no",)),)),)
        ),
    )
    with pytest.raises(BenchInputError, match=r"could not download adult\.data.*data import adult") as err:
        manage.download("adult", root=tmp_path / "cache")
    # a failed download is no bad value: the message says the dataset is not available here
    assert str(err.value).startswith("dataset 'adult' is not available here: could not download")
    assert "invalid value" not in str(err.value) and err.value.field == "dataset"


# --- the ``data`` command --------------------------------------------------------------------------


def data_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_data_parser(parser.add_subparsers(dest="command"))
    return cmd_data(parser.parse_args(["data", *argv]))


def test_data_command_lists_verifies_and_imports(tmp_path, monkeypatch, capsys):
    write_mnist(tmp_path / "origin")
    inject(monkeypatch, "mnist", tmp_path / "origin")
    root = str(tmp_path / "cache")
    assert data_cli("list", "--root", root) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.split()[:1] == ["mnist"])
    assert "no" in line.split() and "https://" in line and "MB" in line
    assert data_cli("verify", "mnist", "--root", root) == 1
    assert "missing" in capsys.readouterr().out
    assert data_cli("import", "mnist", str(tmp_path / "origin"), "--root", root) == 0
    assert "imported into the cache (4 files)" in capsys.readouterr().out
    assert data_cli("verify", "--root", root) == 0
    assert capsys.readouterr().out.count(" ok ") >= 4
    listed = {r["name"]: r for r in manage.list_datasets(root, system=False)}
    assert (
        listed["mnist"]["cached"]
        and not listed["cifar10"]["cached"]
        and listed["cifar10"]["size"] == 170498071
    )
    with pytest.raises(BenchInputError, match="not a downloadable dataset"):
        data_cli("download", "digits")


# --- LEAF synthetic --------------------------------------------------------------------------------


def test_leaf_synthetic_has_the_xu_neglia_client_sizes_and_clusters():
    data = load_dataset("leaf_synthetic", seed=3)
    tr = data.train
    assert tr.x.shape == (2464, 10) and tr.n_classes == 2
    assert torch.bincount(tr.attributes["client"]).tolist() == [280, 184, 1536, 256, 208]
    assert len(data.test) == sum(round(s / 9) for s in (280, 184, 1536, 256, 208))
    clusters = tr.attributes["cluster"]
    assert all(len(clusters[tr.attributes["client"] == c].unique()) == 1 for c in range(5))
    assert torch.equal(load_dataset("leaf_synthetic", seed=3).train.x, tr.x)
    assert not torch.equal(load_dataset("leaf_synthetic", seed=4).train.x, tr.x)
    # clients differ in their input distributions (per-client loc ~ N(B, 1))
    means = torch.stack([tr.x[tr.attributes["client"] == c].mean(0) for c in range(5)])
    assert means.std(0).mean() > 0.3
    parts = attribute(len(tr), 5, attributes=tr.attributes, column="client")
    assert [len(p) for p in parts] == [280, 184, 1536, 256, 208]
    with pytest.raises(BenchInputError, match=r"dataset\.prob_clusters"):
        load_dataset("leaf_synthetic", prob_clusters=[0.5, 0.5])


# --- Fashion-MNIST: the system-wide copy, end to end ----------------------------------------------

_FASHION_SYSTEM = [c[1] for c in cache.candidates("fashion_mnist", root="/nonexistent/bench-cache") if c[3]]
_NO_SYSTEM_COPY = (
    "no system-wide Fashion-MNIST (install the Debian package: apt-get install dataset-fashion-mnist, "
    "which puts the IDX files in /usr/share/datasets/fashion-mnist)"
)


@pytest.mark.skipif(not _FASHION_SYSTEM, reason=_NO_SYSTEM_COPY)
def test_fashion_mnist_system_copy_is_the_official_data(tmp_path):
    data = load_dataset("fashion_mnist", root=str(tmp_path))  # empty cache: the system copy is used
    assert data.train.x.shape == (60000, 1, 28, 28) and data.test.x.shape == (10000, 1, 28, 28)
    assert (
        torch.bincount(data.train.y).tolist() == [6000] * 10
        and torch.bincount(data.test.y).tolist() == [1000] * 10
    )
    raw = data.test.denormalize(data.test.x)
    assert raw.min().item() == pytest.approx(0.0, abs=1e-6) and raw.max().item() == pytest.approx(
        1.0, abs=1e-6
    )
    assert raw.mean().item() == pytest.approx(0.2860, abs=0.005)  # the recorded normalization mean
    found = cache.locate("fashion_mnist", tmp_path)
    assert found is not None and found.system and found.verified


@pytest.mark.skipif(not _FASHION_SYSTEM, reason=_NO_SYSTEM_COPY)
def test_fedsgd_mlp_learns_fashion_mnist_from_the_system_copy(tmp_path, monkeypatch):
    from bench.simulation import Simulation
    from bench.simulation.lightning import run_simulation

    monkeypatch.setenv("BENCH_DATA", str(tmp_path))
    sim = Simulation(
        {
            "dataset": "fashion_mnist",
            "dataset_params": {"subset": 2000, "test_subset": 2000},
            "model": "mlp",
            "model_params": {"hidden": [64]},
            "nodes": 10,
            "protocol": "fedsgd",
            "protocol_params": {"lr": 0.2, "batch_size": 32},
            "rounds": 30,
            "eval_every": 10,
            "seed": 0,
        }
    )
    module = run_simulation(sim)
    acc = module.history[-1]["val_acc"]
    assert acc > 0.5, f"FedSGD on Fashion-MNIST reached only {acc:.3f} (chance: 0.1)"
    assert math.isfinite(module.history[-1]["val_loss"])
