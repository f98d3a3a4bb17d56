"""Datasets (synthetic and offline real data) and partitions over nodes."""

from bench.data import digits, synthetic  # noqa: F401  (registers the datasets)
from bench.data.dataset import ArrayDataset, TrainTest
from bench.data.partition import PARTITIONS
from bench.data.registry import DATASETS
from bench.data.stacked import NodeData

__all__ = ["DATASETS", "PARTITIONS", "ArrayDataset", "NodeData", "TrainTest", "load_dataset"]


def load_dataset(name: str, seed: int = 0, **params) -> TrainTest:
    """Build dataset ``name`` (a registry key) with ``params``; errors name the bad field."""
    from bench.registry_utils import call_with_params

    return call_with_params(DATASETS, name, "dataset", seed=seed, **params)
