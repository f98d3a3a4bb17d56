"""Real datasets read from the local cache (never downloaded implicitly).

Every factory takes ``seed``, ``root`` (cache folder override; default ``BENCH_DATA`` or
``~/.cache/bench``), ``subset`` (a seeded random subset of the training split, for CPU-sized
tasks), ``test_subset`` (the same for the test split) and ``download`` (fetch missing files
first; off by default, so that a run without network stops before training with the offline
error of :func:`bench.data.cache.offline_error`). Files are checked against their checksums
before they are parsed.

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
re-compressed system copies alike, each checked by :mod:`bench.data.cache`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import torch

from bench.data import cache
from bench.data.attributed import AttributedDataset
from bench.data.dataset import ArrayDataset, TrainTest
from bench.data.formats import (
    ADULT_CATEGORIES,
    ADULT_NUMERIC,
    FormatError,
    adult_records,
    binary_rows,
    cifar_batch,
    int_lines,
    maybe_gunzip,
    purchase_rows,
    read_idx,
    split_lines,
    stl10_images,
)
from bench.data.registry import DATASETS
from bench.errors import BenchInputError, require, require_positive_int

MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)
FASHION_MEAN, FASHION_STD = (0.2860,), (0.3530,)
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)


def obtain(name: str, root: str | None = None, download: bool = False, system: bool = True) -> cache.Located:
    """A checked local copy of ``name``; with ``download`` missing files are fetched first."""
    found = cache.locate(name, root, system)
    if found is None and download:
        cache.download(name, root, log=lambda msg: print(f"[bench data] {msg}", file=sys.stderr))
        found = cache.locate(name, root, system)
    if found is None:
        raise cache.offline_error(name, root)
    return found


def _format_error(name: str, file: str, exc: Exception) -> BenchInputError:
    return BenchInputError("dataset", name, reason=f"{file} is not in the expected format: {exc}")


def _pick(n: int, k: int | None, g: torch.Generator, field: str) -> torch.Tensor:
    """``k`` distinct indices of ``range(n)`` drawn with ``g`` (all, in order, when ``k`` is None)."""
    if k is None:
        return torch.arange(n)
    require_positive_int(k, field)
    require(k <= n, field, k, f"the split has only {n} samples")
    return torch.randperm(n, generator=g)[:k].sort().values


def _subsets(
    n_train: int, n_test: int, seed: int, subset: int | None, test_subset: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(int(seed))
    return _pick(n_train, subset, g, "dataset.subset"), _pick(n_test, test_subset, g, "dataset.test_subset")


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
    itr, ite = _subsets(len(ytr), len(yte), seed, subset, test_subset)

    def build(x: np.ndarray, y: np.ndarray, idx: torch.Tensor) -> ArrayDataset:
        xs = _normalize_images(x, idx, mean, std)
        return ArrayDataset(
            name, xs, torch.from_numpy(y[idx.numpy()]).long(), n_classes, tuple(mean), tuple(std)
        )

    return TrainTest(build(xtr, ytr, itr), build(xte, yte, ite))


# --- MNIST, Fashion-MNIST --------------------------------------------------------------------------


def _read_idx_set(name: str, located: cache.Located) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    stems = (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    )
    members = [s + ".gz" if s + ".gz" in located.paths else s for s in stems]
    raw = located.read(members)
    arrays = []
    for m in members:
        try:
            arrays.append(read_idx(maybe_gunzip(raw[m])))
        except (FormatError, OSError, EOFError) as exc:
            raise _format_error(name, m, exc) from None
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
            raise _format_error(name, m, exc) from None
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
        raise _format_error("stl10", "stl10_binary/*_X.bin", exc) from None
    ytr = np.frombuffer(raw[names[1]], dtype=np.uint8).astype(np.int64) - 1
    yte = np.frombuffer(raw[names[3]], dtype=np.uint8).astype(np.int64) - 1
    scaled = xtr.reshape(len(xtr), 3, -1).astype(np.float64) / 255.0
    mean = tuple(float(v) for v in scaled.mean(axis=(0, 2)))
    std = tuple(float(v) for v in scaled.std(axis=(0, 2)))
    return _image_split("stl10", 10, (xtr, ytr), (xte, yte), mean, std, seed, subset, test_subset)


# --- Purchase-100, Texas-100 -----------------------------------------------------------------------


def _pool_split(
    n: int, seed: int, test_fraction: float, subset: int | None, test_subset: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint train/test rows of a pooled set: a seeded shuffle, the first
    ``round(test_fraction * n)`` rows for test, then the optional subsets of each part."""
    require(0 < test_fraction < 1, "dataset.test_fraction", test_fraction, "must be in (0, 1)")
    g = torch.Generator().manual_seed(int(seed))
    perm = torch.randperm(n, generator=g)
    n_test = round(test_fraction * n)
    test_pool, train_pool = perm[:n_test], perm[n_test:]
    tr = train_pool[_pick(len(train_pool), subset, g, "dataset.subset")]
    te = test_pool[_pick(len(test_pool), test_subset, g, "dataset.test_subset")]
    return tr.numpy(), te.numpy()


def _tabular(name: str, x: np.ndarray, y: np.ndarray, n_train: int, n_classes: int) -> TrainTest:
    if len(y) and (y.min() < 0 or y.max() >= n_classes):
        raise BenchInputError("dataset", name, reason=f"labels outside 1..{n_classes} in the file")
    xt = torch.from_numpy(x).to(torch.float32)
    yt = torch.from_numpy(y).long()
    train = ArrayDataset(name, xt[:n_train], yt[:n_train], n_classes)
    test = ArrayDataset(name, xt[n_train:], yt[n_train:], n_classes)
    return TrainTest(train, test)


@DATASETS.register("purchase100", "Purchase-100 (Shokri et al.): 600 binary features, 100 classes")
def purchase100(
    seed: int = 0,
    root: str | None = None,
    subset: int | None = None,
    test_subset: int | None = None,
    test_fraction: float = 0.2,
    download: bool = False,
) -> TrainTest:
    """Purchase-100 from Shokri et al. (2017)'s ``dataset_purchase.tgz``: 197,324 records of
    600 binary purchase features, labels 1–100 (stored 0–99). The single file is split with
    ``seed``: ``test_fraction`` of it for test, then the optional subsets. Features stay raw
    (0/1; ``mean=0``, ``std=1``)."""
    located = obtain("purchase100", root, download)
    data = located.read(["dataset_purchase"])["dataset_purchase"]
    lines = split_lines(data)
    tr, te = _pool_split(len(lines), seed, test_fraction, subset, test_subset)
    try:
        x, y = purchase_rows(lines, np.concatenate([tr, te]).tolist())
    except FormatError as exc:
        raise _format_error("purchase100", "dataset_purchase", exc) from None
    return _tabular("purchase100", x, y, len(tr), 100)


@DATASETS.register("texas100", "Texas-100 (Shokri et al.): 6,169 binary features, 100 classes")
def texas100(
    seed: int = 0,
    root: str | None = None,
    subset: int | None = None,
    test_subset: int | None = None,
    test_fraction: float = 0.2,
    download: bool = False,
) -> TrainTest:
    """Texas-100 from Shokri et al. (2017)'s ``dataset_texas.tgz``: 67,330 hospital stays with
    6,169 binary features (``texas/100/feats``) and the procedure class 1–100
    (``texas/100/labels``, stored 0–99). Split as :func:`purchase100`; only the selected rows
    of the large feature file are parsed."""
    located = obtain("texas100", root, download)
    try:
        y_all = int_lines(located.read(["texas/100/labels"])["texas/100/labels"]) - 1
        tr, te = _pool_split(len(y_all), seed, test_fraction, subset, test_subset)
        rows = np.concatenate([tr, te])
        with located.open("texas/100/feats") as f:
            x = binary_rows(f, rows)
    except FormatError as exc:
        raise _format_error("texas100", "texas/100/{feats,labels}", exc) from None
    return _tabular("texas100", x, y_all[rows], len(tr), 100)


# --- Adult ---------------------------------------------------------------------------------------

# education-num of UCI's records for the levels at and above a bachelor's degree
ADULT_EDUCATION_NUM = {"Bachelors": 13, "Masters": 14, "Prof-school": 15, "Doctorate": 16}


def _adult_encode(
    records: list[dict[str, str]], stats: tuple[np.ndarray, np.ndarray] | None
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Numeric columns standardized (with ``stats`` = train mean/std, computed if None), then
    one one-hot block per categorical column of :data:`ADULT_CATEGORIES` (``?`` → zeros)."""
    num = np.array([[float(r[c]) for c in ADULT_NUMERIC] for r in records], dtype=np.float64).reshape(
        len(records), len(ADULT_NUMERIC)
    )
    if stats is None:
        mu = num.mean(0) if len(num) else np.zeros(len(ADULT_NUMERIC))
        sd = num.std(0) if len(num) else np.ones(len(ADULT_NUMERIC))
        stats = (mu, np.where(sd > 0, sd, 1.0))
    blocks = [(num - stats[0]) / stats[1]]
    for col, cats in ADULT_CATEGORIES.items():
        code = {c: i for i, c in enumerate(cats)}
        onehot = np.zeros((len(records), len(cats)))
        for i, r in enumerate(records):
            if r[col] in code:
                onehot[i, code[r[col]]] = 1.0
        blocks.append(onehot)
    return np.concatenate(blocks, axis=1).astype(np.float32), stats


def _adult_attributes(records: list[dict[str, str]]) -> dict[str, torch.Tensor]:
    races = ADULT_CATEGORIES["race"]
    return {
        "age": torch.tensor([int(r["age"]) for r in records], dtype=torch.long),
        "education_num": torch.tensor([int(r["education-num"]) for r in records], dtype=torch.long),
        "doctorate": torch.tensor([r["education"] == "Doctorate" for r in records], dtype=torch.long),
        "sex": torch.tensor([r["sex"] == "Male" for r in records], dtype=torch.long),
        "race": torch.tensor([races.index(r["race"]) if r["race"] in races else -1 for r in records]),
    }


def adult_feature_names() -> list[str]:
    """Names of the columns of the encoded Adult ``x``."""
    return [*ADULT_NUMERIC, *(f"{col}={c}" for col, cats in ADULT_CATEGORIES.items() for c in cats)]


@DATASETS.register("adult", "Adult (UCI census income), education >= Bachelors; age/doctorate attributes")
def adult(
    seed: int = 0,
    root: str | None = None,
    subset: int | None = None,
    test_subset: int | None = None,
    min_education: str | None = "Bachelors",
    test_fraction: float | None = None,
    drop_missing: bool = False,
    download: bool = False,
) -> TrainTest:
    """Adult / census income (Kohavi 1996) as used by Xu & Neglia (2021, §4.2).

    * Records with education below ``min_education`` are dropped (default ``"Bachelors"``:
      Bachelors, Masters, Prof-school, Doctorate — the paper's "education ≥ bachelor", which
      it reports cuts 48,842 records to 12,300; ``None`` keeps everyone).
    * Split: ``test_fraction=None`` keeps UCI's ``adult.data``/``adult.test`` split; a
      fraction pools both files and splits them with ``seed`` (the paper's split is not given).
    * Features: age, education-num, capital-gain, capital-loss and hours-per-week standardized
      with the train split's mean/std; workclass, education, marital-status, occupation,
      relationship, race, sex and native-country one-hot over UCI's category lists (a missing
      ``?`` is all zeros, or the record is dropped with ``drop_missing``). ``fnlwgt`` (a census
      sampling weight) is left out. ``mean``/``std`` are recorded per feature, so
      ``x * std + mean`` gives back the raw values.
    * Label: income ``>50K`` = 1.
    * Side attributes (:class:`~bench.data.attributed.AttributedDataset`): raw ``age``,
      ``education_num``, ``doctorate`` (0/1), ``sex`` (1 = male) and ``race`` (code), for the
      ``attribute`` partition (the paper's PhD-by-age split) and attribute-inference metrics.
    """
    if min_education is not None and min_education not in ADULT_EDUCATION_NUM:
        raise BenchInputError("dataset.min_education", min_education, choices=[*ADULT_EDUCATION_NUM, "None"])
    located = obtain("adult", root, download)
    raw = located.read(["adult.data", "adult.test"])
    try:
        train_recs = adult_records(raw["adult.data"], "adult.data")
        test_recs = adult_records(raw["adult.test"], "adult.test")
    except (FormatError, UnicodeDecodeError) as exc:
        raise _format_error("adult", "adult.data/adult.test", exc) from None

    def keep(r: dict[str, str]) -> bool:
        ok = min_education is None or int(r["education-num"]) >= ADULT_EDUCATION_NUM[min_education]
        return ok and not (drop_missing and "?" in r.values())

    train_recs = [r for r in train_recs if keep(r)]
    test_recs = [r for r in test_recs if keep(r)]
    if test_fraction is None:
        itr, ite = _subsets(len(train_recs), len(test_recs), seed, subset, test_subset)
        train_recs = [train_recs[i] for i in itr.tolist()]
        test_recs = [test_recs[i] for i in ite.tolist()]
    else:
        pool = train_recs + test_recs
        tr, te = _pool_split(len(pool), seed, test_fraction, subset, test_subset)
        train_recs, test_recs = [pool[i] for i in tr.tolist()], [pool[i] for i in te.tolist()]
    if not train_recs:
        raise BenchInputError("dataset", "adult", reason="no training records left after the filter")
    xtr, stats = _adult_encode(train_recs, None)
    xte, _ = _adult_encode(test_recs, stats)
    n_cat = xtr.shape[1] - len(ADULT_NUMERIC)
    mean = tuple(float(v) for v in stats[0]) + (0.0,) * n_cat
    std = tuple(float(v) for v in stats[1]) + (1.0,) * n_cat

    def build(x: np.ndarray, recs: list[dict[str, str]]) -> AttributedDataset:
        y = torch.tensor([r["income"] == ">50K" for r in recs], dtype=torch.long)
        return AttributedDataset("adult", torch.from_numpy(x), y, 2, mean, std, _adult_attributes(recs))

    return TrainTest(build(xtr, train_recs), build(xte, test_recs))
