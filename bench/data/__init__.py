"""Datasets and their partitions over nodes: synthetic and bundled data (``synthetic``, ``leaf``,
``digits``); real datasets read after checksum verification from the cache ``BENCH_DATA``
(default ``~/.cache/bench``) — images in :mod:`bench.data.real`, Purchase-100, Texas-100 and
Adult in :mod:`bench.data.tabular`, their files and checksums in :mod:`bench.data.sources`,
finding, downloading and importing copies in :mod:`bench.data.cache`, :mod:`bench.data.ingest`
and :mod:`bench.data.manage` (``python -m bench data …``); partitions
(:mod:`bench.data.partition`); and node-local data stacked into padded tensors with
reproducible per-node minibatches (:mod:`bench.data.stacked`).
"""

from bench.data import digits, leaf, real, synthetic, tabular  # noqa: F401  (registers the datasets)
from bench.data.attributed import AttributedDataset
from bench.data.dataset import DATASETS, ArrayDataset, TrainTest
from bench.data.partition import PARTITIONS, partition_summary
from bench.data.stacked import NodeData

__all__ = [
    "DATASETS",
    "PARTITIONS",
    "ArrayDataset",
    "AttributedDataset",
    "NodeData",
    "TrainTest",
    "load_dataset",
    "partition_summary",
]


def load_dataset(name: str, seed: int = 0, **params) -> TrainTest:
    """Build dataset ``name`` (a registry key) with ``params``; errors name the bad field."""
    from bench.core.params import call_with_params

    return call_with_params(DATASETS, name, "dataset", seed=seed, **params)
