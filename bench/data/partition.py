"""Partitions of a training set over nodes.

Every partition returns one index tensor per node; the index sets are disjoint and drawn with
the run's seed. (Label-skew and attribute partitions are added with the data-zoo issue.)
"""

from __future__ import annotations

import torch

from bench.errors import BenchInputError, require_positive_int
from bench.registry import Registry

PARTITIONS: Registry = Registry("partition")


def _perm(n: int, seed: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))


@PARTITIONS.register("iid", "IID split: a uniformly shuffled set cut into (equal or given) shares")
def iid(n_samples: int, n_nodes: int, seed: int = 0, sizes: list[int] | None = None) -> list[torch.Tensor]:
    """Shuffle all samples and cut them into ``n_nodes`` disjoint shares.

    Without ``sizes`` the shares have ``⌊n/N⌋`` or ``⌈n/N⌉`` samples (the first ``n mod N`` nodes
    get one more, as ``numpy.array_split``); with ``sizes`` node ``v`` gets ``sizes[v]`` samples.
    """
    require_positive_int(n_nodes, "nodes")
    if sizes is None:
        if n_samples < n_nodes:
            raise BenchInputError(
                "nodes", n_nodes, reason=f"more nodes than the {n_samples} training samples"
            )
        counts = [n_samples // n_nodes + (v < n_samples % n_nodes) for v in range(n_nodes)]
    else:
        counts = [require_positive_int(s, "partition.sizes") for s in sizes]
        if len(counts) != n_nodes:
            raise BenchInputError("partition.sizes", sizes, reason=f"needs one size per node ({n_nodes})")
        if sum(counts) > n_samples:
            raise BenchInputError(
                "partition.sizes", sizes, reason=f"asks for {sum(counts)} samples, the set has {n_samples}"
            )
    return list(torch.split(_perm(n_samples, seed)[: sum(counts)], counts))


@PARTITIONS.register("fixed_size", "n_per_node disjoint random samples per node (inversion tasks)")
def fixed_size(n_samples: int, n_nodes: int, seed: int = 0, n_per_node: int = 1) -> list[torch.Tensor]:
    """Each node gets ``n_per_node`` distinct samples drawn without replacement from the set
    (the ``n_i`` samples per node of the PDMM papers' inversion experiments)."""
    require_positive_int(n_per_node, "partition.n_per_node")
    return iid(n_samples, n_nodes, seed=seed, sizes=[n_per_node] * n_nodes)
