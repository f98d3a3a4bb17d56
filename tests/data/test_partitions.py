"""Partitions: disjoint, sized, seeded; measurable label and quantity skew; the Adult split."""

from __future__ import annotations

import math

import pytest
import torch

from bench.core.errors import BenchInputError
from bench.core.params import call_with_params
from bench.data.partition import (
    PARTITIONS,
    attribute,
    dirichlet,
    label_entropy,
    partition_summary,
    quantity_skew,
    shards,
    sizes,
)

N, NODES, CLASSES = 1000, 10, 10
LABELS = torch.arange(N) % CLASSES  # 100 samples per class


def adult_like(n: int = 2000, seed: int = 0) -> dict[str, torch.Tensor]:
    """A synthetic Adult-like table: ages 17-90 and ~5% doctorates."""
    g = torch.Generator().manual_seed(seed)
    age = torch.randint(17, 91, (n,), generator=g)
    doctorate = (torch.rand(n, generator=g) < 0.05).long()
    age[:6] = torch.tensor([37, 38, 52, 53, 17, 90])  # the boundaries, all doctorates
    doctorate[:6] = 1
    return {"age": age, "doctorate": doctorate}


CASES = {
    "iid": {},
    "sizes": {"sizes": [50, 100, 150, 20, 30, 40, 60, 70, 80, 90]},
    "fixed_size": {"n_per_node": 7},
    "dirichlet": {"alpha": 0.3},
    "shards": {"shards_per_node": 2},
    "quantity_skew": {"alpha": 0.5},
    "attribute": {"column": "age", "edges": [38, 53], "where": "doctorate"},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_partition_is_disjoint_seeded_and_registered(name):
    attrs = adult_like(N)

    def run(seed: int) -> list[torch.Tensor]:
        return call_with_params(
            PARTITIONS,
            name,
            "partition",
            n_samples=N,
            n_nodes=NODES,
            seed=seed,
            labels=LABELS,
            attributes=attrs,
            **CASES[name],
        )

    parts = run(5)
    assert len(parts) == NODES and all(p.dtype == torch.long for p in parts)
    flat = torch.cat(parts)
    assert len(flat) == len(set(flat.tolist())) and int(flat.min()) >= 0 and int(flat.max()) < N
    assert all(torch.equal(a, b) for a, b in zip(parts, run(5), strict=True))  # same seed, same split
    assert not all(torch.equal(a, b) for a, b in zip(parts, run(6), strict=True))
    if name in ("iid", "dirichlet", "shards", "quantity_skew", "attribute"):
        assert len(flat) == N  # every sample is used


def test_sizes_are_exact_and_shuffle_false_keeps_dataset_order():
    want = CASES["sizes"]["sizes"]
    assert [len(p) for p in sizes(N, NODES, seed=1, sizes=want)] == want
    ordered = sizes(N, 3, sizes=[3, 2, 4], shuffle=False)
    assert [p.tolist() for p in ordered] == [[0, 1, 2], [3, 4], [5, 6, 7, 8]]
    with pytest.raises(BenchInputError, match=r"partition\.sizes"):
        sizes(N, 2)
    with pytest.raises(BenchInputError, match=r"partition\.sizes"):
        sizes(10, 2, sizes=[6, 5])


def test_dirichlet_label_skew_is_measurable():
    def mean_entropy(alpha: float) -> float:
        return float(label_entropy(dirichlet(N, NODES, seed=0, alpha=alpha, labels=LABELS), LABELS).mean())

    skewed, mild = mean_entropy(0.1), mean_entropy(100.0)
    assert skewed < 0.6 * math.log(CLASSES) and mild > 0.95 * math.log(CLASSES) and skewed < mild - 0.8
    counts = torch.stack(
        [torch.bincount(LABELS[p], minlength=CLASSES) for p in dirichlet(N, NODES, alpha=0.1, labels=LABELS)]
    )
    assert (counts.sum(0) == N // CLASSES).all()  # each class fully spread over the nodes
    with pytest.raises(BenchInputError, match="needs the training labels"):
        dirichlet(N, NODES, alpha=0.5)
    with pytest.raises(BenchInputError, match=r"partition\.alpha"):
        dirichlet(N, NODES, alpha=0, labels=LABELS)
    with pytest.raises(BenchInputError, match=r"partition\.alpha"):
        dirichlet(N, 50, alpha=0.01, min_size=15, max_tries=3, labels=LABELS)


def test_shards_give_each_node_k_label_sorted_shards():
    parts = shards(N, NODES, seed=3, shards_per_node=2, labels=LABELS)
    assert [len(p) for p in parts] == [100] * NODES
    assert all(len(LABELS[p].unique()) <= 2 for p in parts)  # shards of 50 are single-class
    assert len(torch.cat([LABELS[p].unique() for p in parts]).unique()) == CLASSES
    one = shards(N, NODES, seed=3, shards_per_node=1, labels=LABELS)
    assert all(len(LABELS[p].unique()) == 1 for p in one)
    with pytest.raises(BenchInputError, match="needs the training labels"):
        shards(N, NODES)


def test_quantity_skew_sizes_are_skewed_but_labels_are_not():
    parts = quantity_skew(N, NODES, seed=2, alpha=0.3, min_size=5)
    lens = sorted(len(p) for p in parts)
    assert sum(lens) == N and lens[0] >= 5 and lens[-1] > 4 * lens[len(lens) // 2]
    even = [len(p) for p in quantity_skew(N, NODES, seed=2, alpha=1000.0)]
    assert max(even) - min(even) < 40
    logn = [len(p) for p in quantity_skew(N, NODES, seed=2, distribution="lognormal", sigma=1.5)]
    assert sum(logn) == N and max(logn) > 3 * min(logn)
    big = max(parts, key=len)  # a large node's labels look like the population's
    assert float(label_entropy([big], LABELS)[0]) > 0.95 * math.log(CLASSES)
    with pytest.raises(BenchInputError, match=r"partition\.distribution"):
        quantity_skew(N, NODES, distribution="zipf")


def test_adult_split_on_a_synthetic_adult_like_table():
    attrs = adult_like(2000, seed=1)
    age, doc = attrs["age"], attrs["doctorate"].bool()
    parts = attribute(2000, 10, seed=4, column="age", edges=[38, 53], where="doctorate", attributes=attrs)
    expect = [
        int((doc & (age < 38)).sum()),
        int((doc & (age >= 38) & (age <= 52)).sum()),
        int((doc & (age > 52)).sum()),
    ]
    assert [len(p) for p in parts[:3]] == expect
    assert (age[parts[0]] < 38).all() and ((age[parts[1]] >= 38) & (age[parts[1]] <= 52)).all()
    assert (age[parts[2]] > 52).all() and all(doc[p].all() for p in parts[:3])
    assert {0, 1} <= set(parts[0].tolist()) | set(parts[1].tolist())  # ages 37 and 38
    assert 1 in parts[1].tolist() and 2 in parts[1].tolist() and 3 in parts[2].tolist()  # 38, 52 | 53
    rest = [len(p) for p in parts[3:]]
    assert sum(rest) == int((~doc).sum()) and max(rest) - min(rest) <= 1  # the others: IID over 7 nodes
    assert not any(doc[p].any() for p in parts[3:])
    with pytest.raises(BenchInputError, match="no side attributes"):
        attribute(2000, 10, column="age", edges=[38, 53], where="doctorate")
    with pytest.raises(BenchInputError, match=r"partition\.column"):
        attribute(2000, 10, column="height", attributes=attrs)
    with pytest.raises(BenchInputError, match="nodes"):
        attribute(2000, 3, column="age", edges=[38, 53], where="doctorate", attributes=attrs)
    with pytest.raises(BenchInputError, match=r"partition\.edges"):
        attribute(2000, 10, column="age", edges=[53, 38], where="doctorate", attributes=attrs)


def test_attribute_by_code_gives_one_node_per_value():
    client = torch.tensor([0] * 5 + [1] * 3 + [2] * 4)
    parts = attribute(12, 3, column="client", attributes={"client": client})
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11]]
    with pytest.raises(BenchInputError, match="one per node"):
        attribute(12, 4, column="client", attributes={"client": client})


def test_partition_summary_records_sizes_and_label_counts():
    parts = dirichlet(N, 4, seed=0, alpha=0.5, labels=LABELS)
    summary = partition_summary("dirichlet", {"alpha": 0.5}, 0, parts, LABELS)
    assert summary["sizes"] == [len(p) for p in parts] and summary["params"] == {"alpha": 0.5}
    assert [sum(c) for c in summary["label_counts"]] == summary["sizes"] and len(
        summary["label_entropy"]
    ) == 4
    assert "label_counts" not in partition_summary("iid", {}, 0, parts, LABELS.double())
