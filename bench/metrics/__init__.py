"""Metrics of reconstructions and their normalization to leakage; importing the package
registers every metric in :data:`METRICS`."""

from bench.metrics import (  # noqa: F401  (registration)
    image,
    labels,
    local_model,
    membership,
    reconstructed,
    success,
    vector,
)
from bench.metrics.base import METRICS, DataInfo, Metric, Truth

__all__ = ["METRICS", "DataInfo", "Metric", "Truth", "build_metric"]


def build_metric(name: str) -> Metric:
    return METRICS.get(name, field="metric")()
