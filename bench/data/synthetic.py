"""Synthetic datasets that need no download.

* ``two_gaussians`` — the 2-D two-class Gaussian data of the PDMM papers (Yu et al., thesis §4
  and TIFS 2025 §5): class means ``±(1, 1)``, isotropic variance ``variance``.
* ``linear_regression`` — ``y = <x, w*> + b* + noise`` with Gaussian ``x``.
"""

from __future__ import annotations

import torch

from bench.core.errors import require, require_positive_int
from bench.data.dataset import DATASETS, ArrayDataset, TrainTest


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


@DATASETS.register("two_gaussians", "2-D two-Gaussian binary classification (means ±(1,1)), PDMM papers")
def two_gaussians(n_train: int = 600, n_test: int = 600, variance: float = 1.0, seed: int = 0) -> TrainTest:
    """Two isotropic Gaussians in R², means ``+(1, 1)`` (label 1) and ``-(1, 1)`` (label 0).

    ``x ~ N(±(1,1), variance · I₂)``, classes balanced (alternating labels).
    """
    require_positive_int(n_train, "dataset.n_train")
    require_positive_int(n_test, "dataset.n_test")
    require(variance > 0, "dataset.variance", variance, "must be positive")
    g = _generator(seed)
    n = n_train + n_test
    y = torch.arange(n) % 2
    means = torch.where(y[:, None] == 1, 1.0, -1.0).expand(n, 2)
    x = means + variance**0.5 * torch.randn(n, 2, generator=g, dtype=torch.float64)
    perm = torch.randperm(n, generator=g)
    x, y = x[perm], y[perm]
    ds = ArrayDataset("two_gaussians", x, y, n_classes=2)
    return TrainTest(ds.subset(torch.arange(n_train)), ds.subset(torch.arange(n_train, n)))


@DATASETS.register("linear_regression", "synthetic linear regression y = <x,w*> + b* + noise")
def linear_regression(
    n_train: int = 500, n_test: int = 500, dim: int = 10, noise: float = 0.1, seed: int = 0
) -> TrainTest:
    """Linear regression data ``y = xᵀw* + b* + ε`` with ``x ~ N(0, I_d)``, ``w*, b* ~ N(0, 1)``,
    ``ε ~ N(0, noise²)``."""
    require_positive_int(n_train, "dataset.n_train")
    require_positive_int(n_test, "dataset.n_test")
    require_positive_int(dim, "dataset.dim")
    require(noise >= 0, "dataset.noise", noise, "must be non-negative")
    g = _generator(seed)
    n = n_train + n_test
    w = torch.randn(dim, generator=g, dtype=torch.float64)
    b = torch.randn((), generator=g, dtype=torch.float64)
    x = torch.randn(n, dim, generator=g, dtype=torch.float64)
    y = x @ w + b + noise * torch.randn(n, generator=g, dtype=torch.float64)
    ds = ArrayDataset("linear_regression", x, y, n_classes=0)
    return TrainTest(ds.subset(torch.arange(n_train)), ds.subset(torch.arange(n_train, n)))


@DATASETS.register("teacher_images", "synthetic images x ~ N(0,1), labels of a fixed random linear teacher")
def teacher_images(
    n_train: int = 1000,
    n_test: int = 200,
    shape: tuple[int, ...] | list[int] = (1, 28, 28),
    n_classes: int = 10,
    bias: bool = True,
    seed: int = 0,
) -> TrainTest:
    """MNIST-shaped (by default) synthetic images for benchmarks and CPU tests.

    ``x ~ N(0, I)`` of ``shape``; ``y = argmax(W x + b)`` with a fixed random teacher
    ``W ~ N(0, 1/d)`` (``d = prod(shape)``) and ``b ~ N(0, 0.01)`` (``bias=False``: ``b = 0``),
    so the task is learnable by a linear model or an MLP. float32.
    """
    require_positive_int(n_train, "dataset.n_train")
    require_positive_int(n_test, "dataset.n_test")
    require_positive_int(n_classes, "dataset.n_classes")
    dims = tuple(require_positive_int(s, "dataset.shape") for s in shape)
    g = _generator(seed)
    n, d = n_train + n_test, 1
    for s in dims:
        d *= s
    x = torch.randn(n, *dims, generator=g)
    teacher = torch.randn(n_classes, d, generator=g) / d**0.5
    offset = 0.1 * torch.randn(n_classes, generator=g) if bias else torch.zeros(n_classes)
    y = (x.flatten(1) @ teacher.T + offset).argmax(1)
    ds = ArrayDataset("teacher_images", x, y, n_classes=n_classes)
    return TrainTest(ds.subset(torch.arange(n_train)), ds.subset(torch.arange(n_train, n)))
