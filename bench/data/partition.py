"""Partitions of a training set over nodes.

Every partition is called as ``fn(n_samples=…, n_nodes=…, seed=…, labels=…, attributes=…,
**params)`` and returns one index tensor per node; the index sets are disjoint and drawn with
the run's seed (the same seed gives the same partition). ``labels`` (the training labels) and
``attributes`` (a dataset's side columns, see :class:`~bench.data.attributed.AttributedDataset`)
are supplied by the engine; partitions that do not need them ignore them.

Registered partitions:

* ``iid`` — a uniform shuffle cut into equal (or given) shares;
* ``sizes`` — explicit per-node sizes (``shuffle: false`` keeps the dataset's order);
* ``fixed_size`` — ``n_i`` samples per node (the inversion tasks);
* ``dirichlet`` — label skew: per class, shares over nodes drawn from ``Dir(α)``
  (Hsu et al. 2019; Li et al. 2022 "NIID-Bench");
* ``shards`` — sort by label, cut into ``N·k`` shards, ``k`` random shards per node
  (McMahan et al. 2017, the pathological non-IID split);
* ``quantity_skew`` — node sizes from ``Dir(α)`` or a lognormal, labels IID (Li et al. 2022);
* ``attribute`` — a rule on a side attribute, e.g. Xu & Neglia's Adult split (doctorates to
  nodes 0–2 by age < 38, 38–52, > 52; everyone else IID over the other nodes), or one node per
  value of a column (LEAF's clients).

:func:`partition_summary` describes a partition (sizes, label counts) for a run's provenance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from bench.core.errors import BenchInputError, require, require_positive_int
from bench.core.registry import Registry

PARTITIONS: Registry = Registry("partition")

Attributes = Mapping[str, torch.Tensor] | None


def _perm(n: int, seed: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(int(seed) & 0xFFFFFFFFFFFFFFFF)


def _need_labels(labels: torch.Tensor | None, n_samples: int, name: str) -> torch.Tensor:
    if labels is None:
        raise BenchInputError("partition.name", name, reason="needs the training labels (labels=train.y)")
    labels = torch.as_tensor(labels)
    if labels.shape != (n_samples,):
        raise BenchInputError(
            "partition.name", name, reason=f"{tuple(labels.shape)} labels for {n_samples} samples"
        )
    if labels.is_floating_point():
        raise BenchInputError(
            "partition.name", name, reason="label partitions need class labels (classification)"
        )
    return labels.cpu()


def _check_nodes(n_samples: int, n_nodes: int) -> int:
    require_positive_int(n_nodes, "nodes")
    if n_samples < n_nodes:
        raise BenchInputError("nodes", n_nodes, reason=f"more nodes than the {n_samples} training samples")
    return n_nodes


def _nonempty(parts: list[torch.Tensor], name: str) -> list[torch.Tensor]:
    empty = [v for v, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise BenchInputError("partition.name", name, reason=f"nodes {empty[:10]} get no samples")
    return parts


@PARTITIONS.register("iid", "IID split: a uniformly shuffled set cut into (equal or given) shares")
def iid(
    n_samples: int,
    n_nodes: int,
    seed: int = 0,
    sizes: list[int] | None = None,
    labels: torch.Tensor | None = None,
    attributes: Attributes = None,
) -> list[torch.Tensor]:
    """Shuffle all samples and cut them into ``n_nodes`` disjoint shares.

    Without ``sizes`` the shares have ``⌊n/N⌋`` or ``⌈n/N⌉`` samples (the first ``n mod N`` nodes
    get one more, as ``numpy.array_split``); with ``sizes`` node ``v`` gets ``sizes[v]`` samples.
    """
    require_positive_int(n_nodes, "nodes")
    if sizes is None:
        _check_nodes(n_samples, n_nodes)
        counts = [n_samples // n_nodes + (v < n_samples % n_nodes) for v in range(n_nodes)]
    else:
        counts = _check_sizes(sizes, n_samples, n_nodes)
    return list(torch.split(_perm(n_samples, seed)[: sum(counts)], counts))


def _check_sizes(sizes: Sequence[int], n_samples: int, n_nodes: int) -> list[int]:
    if not isinstance(sizes, (list, tuple)):
        raise BenchInputError("partition.sizes", sizes, reason="must be a list of per-node sizes")
    counts = [require_positive_int(s, "partition.sizes") for s in sizes]
    if len(counts) != n_nodes:
        raise BenchInputError("partition.sizes", sizes, reason=f"needs one size per node ({n_nodes})")
    if sum(counts) > n_samples:
        raise BenchInputError(
            "partition.sizes", sizes, reason=f"asks for {sum(counts)} samples, the set has {n_samples}"
        )
    return counts


@PARTITIONS.register("sizes", "explicit per-node sizes (shuffled, or in dataset order with shuffle: false)")
def sizes(
    n_samples: int,
    n_nodes: int,
    seed: int = 0,
    sizes: list[int] | None = None,
    shuffle: bool = True,
    labels: torch.Tensor | None = None,
    attributes: Attributes = None,
) -> list[torch.Tensor]:
    """Node ``v`` gets ``sizes[v]`` samples: random ones (``shuffle``) or the next ``sizes[v]``
    in dataset order (for data already grouped by client, e.g. ``leaf_synthetic``)."""
    if sizes is None:
        raise BenchInputError("partition.sizes", None, reason="the sizes partition needs one size per node")
    counts = _check_sizes(sizes, n_samples, n_nodes)
    order = _perm(n_samples, seed) if shuffle else torch.arange(n_samples)
    return list(torch.split(order[: sum(counts)], counts))


@PARTITIONS.register("fixed_size", "n_per_node disjoint random samples per node (inversion tasks)")
def fixed_size(
    n_samples: int,
    n_nodes: int,
    seed: int = 0,
    n_per_node: int = 1,
    labels: torch.Tensor | None = None,
    attributes: Attributes = None,
) -> list[torch.Tensor]:
    """Each node gets ``n_per_node`` distinct samples drawn without replacement from the set
    (the ``n_i`` samples per node of the PDMM papers' inversion experiments)."""
    require_positive_int(n_per_node, "partition.n_per_node")
    if n_per_node * n_nodes > n_samples:
        raise BenchInputError(
            "partition.n_per_node",
            n_per_node,
            reason=f"{n_nodes} nodes × {n_per_node} = {n_per_node * n_nodes} samples; there are {n_samples}",
        )
    return iid(n_samples, n_nodes, seed=seed, sizes=[n_per_node] * n_nodes)


@PARTITIONS.register("dirichlet", "label skew: each class spread over nodes with Dirichlet(alpha) shares")
def dirichlet(
    n_samples: int,
    n_nodes: int,
    seed: int = 0,
    alpha: float = 0.5,
    min_size: int = 1,
    max_tries: int = 1000,
    labels: torch.Tensor | None = None,
    attributes: Attributes = None,
) -> list[torch.Tensor]:
    """Dirichlet label skew (Hsu et al. 2019, "Measuring the effects of non-identical data
    distribution"; the ``noniid-labeldir`` split of Li et al. 2022, NIID-Bench).

    For every class ``k`` draw ``p_k ~ Dir_N(α)`` and give node ``v`` the share ``p_{k,v}`` of
    class ``k``'s (shuffled) samples. Small ``α`` gives each node few classes; ``α → ∞``
    approaches IID. The draw is repeated (up to ``max_tries``) until every node has at least
    ``min_size`` samples, as NIID-Bench does.
    """
    y = _need_labels(labels, n_samples, "dirichlet")
    _check_nodes(n_samples, n_nodes)
    require(
        isinstance(alpha, (int, float)) and alpha > 0 and math.isfinite(alpha),
        "partition.alpha",
        alpha,
        "must be a positive number",
    )
    require_positive_int(min_size, "partition.min_size", allow_zero=True)
    require(
        min_size * n_nodes <= n_samples, "partition.min_size", min_size, f"{n_nodes} nodes cannot all get it"
    )
    rng = _rng(seed)
    by_class = [np.flatnonzero(y.numpy() == k) for k in np.unique(y.numpy())]
    for _ in range(require_positive_int(max_tries, "partition.max_tries")):
        buckets: list[list[np.ndarray]] = [[] for _ in range(n_nodes)]
        for idx in by_class:
            idx = rng.permutation(idx)
            shares = rng.dirichlet(np.full(n_nodes, float(alpha)))
            cuts = (np.cumsum(shares)[:-1] * len(idx)).round().astype(int)
            for v, part in enumerate(np.split(idx, cuts)):
                buckets[v].append(part)
        parts = [np.sort(np.concatenate(b)) for b in buckets]
        if min(len(p) for p in parts) >= min_size:
            return [torch.from_numpy(p).long() for p in parts]
    raise BenchInputError(
        "partition.alpha",
        alpha,
        reason=f"no draw in {max_tries} gave every node {min_size} samples; raise alpha or lower min_size",
    )


@PARTITIONS.register("shards", "pathological non-IID: sort by label, k label-sorted shards per node")
def shards(
    n_samples: int,
    n_nodes: int,
    seed: int = 0,
    shards_per_node: int = 2,
    labels: torch.Tensor | None = None,
    attributes: Attributes = None,
) -> list[torch.Tensor]:
    """McMahan et al. (2017)'s non-IID split: sort the samples by label (ties in random order),
    cut them into ``N · k`` contiguous shards of (nearly) equal size and give each node ``k``
    shards chosen at random. With ``k = 2`` most nodes see two classes."""
    y = _need_labels(labels, n_samples, "shards")
    k = require_positive_int(shards_per_node, "partition.shards_per_node")
    _check_nodes(n_samples, n_nodes)
    n_shards = n_nodes * k
    require(
        n_shards <= n_samples, "partition.shards_per_node", k, f"{n_shards} shards for {n_samples} samples"
    )
    rng = _rng(seed)
    shuffled = rng.permutation(n_samples)
    order = shuffled[np.argsort(y.numpy()[shuffled], kind="stable")]
    pieces = np.array_split(order, n_shards)
    chosen = rng.permutation(n_shards).reshape(n_nodes, k)
    return [torch.from_numpy(np.sort(np.concatenate([pieces[s] for s in row]))).long() for row in chosen]


@PARTITIONS.register(
    "quantity_skew", "quantity skew: node sizes from Dirichlet(alpha) or a lognormal, IID labels"
)
def quantity_skew(
    n_samples: int,
    n_nodes: int,
    seed: int = 0,
    alpha: float = 0.5,
    distribution: str = "dirichlet",
    sigma: float = 1.0,
    min_size: int = 1,
    labels: torch.Tensor | None = None,
    attributes: Attributes = None,
) -> list[torch.Tensor]:
    """Quantity skew: shares ``q ~ Dir_N(α)`` (Li et al. 2022, NIID-Bench ``iid-diff-quantity``)
    or ``q ∝ LogNormal(0, σ²)`` (LEAF/FedLab's unbalanced split); node ``v`` gets ``≈ q_v · n``
    random samples, at least ``min_size``. All samples are used."""
    _check_nodes(n_samples, n_nodes)
    require_positive_int(min_size, "partition.min_size")
    require(
        min_size * n_nodes <= n_samples, "partition.min_size", min_size, f"{n_nodes} nodes cannot all get it"
    )
    rng = _rng(seed)
    if distribution == "dirichlet":
        require(isinstance(alpha, (int, float)) and alpha > 0, "partition.alpha", alpha, "must be positive")
        shares = rng.dirichlet(np.full(n_nodes, float(alpha)))
    elif distribution == "lognormal":
        require(isinstance(sigma, (int, float)) and sigma >= 0, "partition.sigma", sigma, "must be >= 0")
        shares = rng.lognormal(0.0, float(sigma), n_nodes)
        shares = shares / shares.sum()
    else:
        raise BenchInputError("partition.distribution", distribution, choices=("dirichlet", "lognormal"))
    spare = n_samples - min_size * n_nodes
    counts = min_size + np.floor(shares * spare).astype(int)
    remainder = n_samples - int(counts.sum())
    counts[np.argsort(-(shares * spare - np.floor(shares * spare)), kind="stable")[:remainder]] += 1
    order = torch.from_numpy(rng.permutation(n_samples)).long()
    return list(torch.split(order, counts.tolist()))


def _groups(values: torch.Tensor, edges: Sequence[float] | None, field: str) -> torch.Tensor:
    if edges is None:
        if values.is_floating_point() and not torch.equal(values, values.round()):
            raise BenchInputError(field, None, reason="a column without edges must hold integer codes")
        return values.long()
    if not isinstance(edges, (list, tuple)) or not edges:
        raise BenchInputError("partition.edges", edges, reason="must be a non-empty increasing list")
    e = torch.tensor([float(v) for v in edges], dtype=torch.float64)
    if (e[1:] <= e[:-1]).any():
        raise BenchInputError("partition.edges", edges, reason="must be increasing")
    return torch.bucketize(values.to(torch.float64), e, right=True)  # v < e0 -> 0, e0 <= v < e1 -> 1, ...


@PARTITIONS.register("attribute", "rule on a side attribute, e.g. Adult doctorates by age to nodes 0-2")
def attribute(
    n_samples: int,
    n_nodes: int,
    seed: int = 0,
    column: str = "age",
    edges: list[float] | None = None,
    where: str | None = None,
    equals: float = 1,
    labels: torch.Tensor | None = None,
    attributes: Attributes = None,
) -> list[torch.Tensor]:
    """Assign samples to nodes by a side attribute.

    The selected samples (all, or those with ``attributes[where] == equals``) are grouped by
    ``attributes[column]``: into the bins ``v < edges[0]``, ``edges[0] ≤ v < edges[1]``, …,
    ``v ≥ edges[-1]`` when ``edges`` are given, else by the column's integer value; group ``g``
    goes to node ``g``. With ``where``, the other samples are spread IID (equal shares) over the
    remaining nodes ``G, …, N-1``; without it there must be exactly one node per group.

    Xu & Neglia (2021, §4.2)'s Adult split is ``column="age", edges=[38, 53],
    where="doctorate"`` with 10 nodes: doctorates younger than 38 → node 0, aged 38–52 → node 1,
    older than 52 → node 2 (the paper leaves the boundary ages open; here 38 and 52 fall in the
    middle bin), everyone else IID over nodes 3–9. LEAF-style data: ``column="client"``.
    """
    if attributes is None:
        raise BenchInputError(
            "partition.name",
            "attribute",
            reason="the dataset has no side attributes (e.g. adult, leaf_synthetic)",
        )
    require_positive_int(n_nodes, "nodes")
    if column not in attributes:
        raise BenchInputError("partition.column", column, choices=attributes)
    values = torch.as_tensor(attributes[column]).cpu()
    if values.shape[:1] != (n_samples,):
        raise BenchInputError(
            "partition.column", column, reason=f"has {values.shape[0]} rows for {n_samples} samples"
        )
    if where is None:
        selected = torch.ones(n_samples, dtype=torch.bool)
    else:
        if where not in attributes:
            raise BenchInputError("partition.where", where, choices=attributes)
        selected = torch.as_tensor(attributes[where]).cpu() == equals
    group = _groups(values, edges, "partition.column")
    n_groups = (
        (len(edges) + 1) if edges is not None else int(group[selected].max()) + 1 if selected.any() else 0
    )
    if (group[selected] < 0).any():
        raise BenchInputError("partition.column", column, reason="holds negative codes")
    n_rest_nodes = n_nodes - n_groups
    if where is None and n_rest_nodes != 0:
        raise BenchInputError(
            "nodes", n_nodes, reason=f"the rule on '{column}' makes {n_groups} groups, one per node"
        )
    if where is not None and n_rest_nodes < 1:
        raise BenchInputError(
            "nodes",
            n_nodes,
            reason=f"{n_groups} attribute groups plus at least one node for the other samples",
        )
    perm = _perm(n_samples, seed)
    sel_p, grp_p = selected[perm], group[perm]
    parts = [perm[sel_p & (grp_p == g)].sort().values for g in range(n_groups)]
    if where is not None:
        rest = perm[~sel_p]
        counts = [len(rest) // n_rest_nodes + (v < len(rest) % n_rest_nodes) for v in range(n_rest_nodes)]
        parts += [p.sort().values for p in torch.split(rest, counts)]
    return _nonempty(parts, "attribute")


def label_entropy(parts: Sequence[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each node's label distribution — low under strong label skew."""
    n_classes = int(labels.max()) + 1
    out = []
    for p in parts:
        counts = torch.bincount(labels[p], minlength=n_classes).to(torch.float64)
        q = counts[counts > 0] / counts.sum()
        out.append(float(-(q * q.log()).sum()))
    return torch.tensor(out, dtype=torch.float64)


def partition_summary(
    name: str,
    params: Mapping[str, Any],
    seed: int,
    parts: Sequence[torch.Tensor],
    labels: torch.Tensor | None = None,
) -> dict[str, Any]:
    """A JSON-ready description of a partition for a run's provenance: the rule, its seed, the
    per-node sizes and (for classification) per-node label counts and entropies."""
    out: dict[str, Any] = {
        "name": name,
        "params": dict(params),
        "seed": int(seed),
        "sizes": [len(p) for p in parts],
    }
    if labels is not None and not labels.is_floating_point() and len(labels):
        n_classes = int(labels.max()) + 1
        out["label_counts"] = [torch.bincount(labels[p], minlength=n_classes).tolist() for p in parts]
        out["label_entropy"] = [round(float(h), 6) for h in label_entropy(parts, labels)]
    return out
