"""Metrics of reconstructions and their normalization to leakage: each module registers its
metrics in :data:`METRICS` — image quality (SSIM, PSNR, LPIPS), labels, local models, vectors,
the fraction of nodes reconstructed, success rates and membership inference — under the
contract of :mod:`bench.metrics.base` (raw numbers from reconstructions and the truth, and the
map of the headline number to a leakage in [0, 1]); importing the package registers them all.
"""

from bench.metrics import (  # noqa: F401  (registration)
    image,
    labels,
    membership,
    model_recovery,
    reconstructed,
    success,
    vector,
)
from bench.metrics.base import METRICS, DataInfo, Metric, Truth

__all__ = ["METRICS", "DataInfo", "Metric", "Truth", "build_metric"]


def build_metric(name: str) -> Metric:
    return METRICS.get(name, field="metric")()
