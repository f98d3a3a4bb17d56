"""Tabular real datasets read from the local cache: Purchase-100 and Texas-100 (the archives of
Shokri et al., "Membership Inference Attacks Against Machine Learning Models", IEEE S&P 2017) and
Adult / census income (UCI; Kohavi 1996) as used by Xu & Neglia (2021, §4.2).

Loading follows :mod:`bench.data.real` (checked cache copy, ``seed``/``subset``/``test_subset``,
``download``). Purchase-100 and Texas-100 come as one pooled file, split with ``seed``: a
``test_fraction`` of the shuffled rows for test, the rest for training (:func:`pool_split`).
Adult keeps UCI's train/test files unless a ``test_fraction`` pools them the same way; its
numeric columns are standardized with the training split's statistics, ``x = (raw − μ) / σ``
(so ``raw = x · σ + μ``; ``mean``/``std`` record ``μ``/``σ``, and 0/1 for the one-hot
columns), and its categorical columns one-hot encoded.
"""

from __future__ import annotations

import numpy as np
import torch

from bench.core.errors import BenchInputError, require
from bench.data.attributed import AttributedDataset
from bench.data.dataset import DATASETS, ArrayDataset, TrainTest
from bench.data.formats import (
    ADULT_CATEGORIES,
    ADULT_NUMERIC,
    FormatError,
    adult_records,
    binary_rows,
    int_lines,
    purchase_rows,
    split_lines,
)
from bench.data.real import format_error, obtain, pick_indices, seeded_subsets


def pool_split(
    n: int, seed: int, test_fraction: float, subset: int | None, test_subset: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint train/test rows of a pooled set: a seeded shuffle, the first
    ``round(test_fraction * n)`` rows for test, then the optional subsets of each part."""
    require(0 < test_fraction < 1, "dataset.test_fraction", test_fraction, "must be in (0, 1)")
    g = torch.Generator().manual_seed(int(seed))
    perm = torch.randperm(n, generator=g)
    n_test = round(test_fraction * n)
    test_pool, train_pool = perm[:n_test], perm[n_test:]
    tr = train_pool[pick_indices(len(train_pool), subset, g, "dataset.subset")]
    te = test_pool[pick_indices(len(test_pool), test_subset, g, "dataset.test_subset")]
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
    tr, te = pool_split(len(lines), seed, test_fraction, subset, test_subset)
    try:
        x, y = purchase_rows(lines, np.concatenate([tr, te]).tolist())
    except FormatError as exc:
        raise format_error("purchase100", "dataset_purchase", exc) from None
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
        tr, te = pool_split(len(y_all), seed, test_fraction, subset, test_subset)
        rows = np.concatenate([tr, te])
        with located.open("texas/100/feats") as f:
            x = binary_rows(f, rows)
    except FormatError as exc:
        raise format_error("texas100", "texas/100/{feats,labels}", exc) from None
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
        raise format_error("adult", "adult.data/adult.test", exc) from None

    def keep(r: dict[str, str]) -> bool:
        ok = min_education is None or int(r["education-num"]) >= ADULT_EDUCATION_NUM[min_education]
        return ok and not (drop_missing and "?" in r.values())

    train_recs = [r for r in train_recs if keep(r)]
    test_recs = [r for r in test_recs if keep(r)]
    if test_fraction is None:
        itr, ite = seeded_subsets(len(train_recs), len(test_recs), seed, subset, test_subset)
        train_recs = [train_recs[i] for i in itr.tolist()]
        test_recs = [test_recs[i] for i in ite.tolist()]
    else:
        pool = train_recs + test_recs
        tr, te = pool_split(len(pool), seed, test_fraction, subset, test_subset)
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
