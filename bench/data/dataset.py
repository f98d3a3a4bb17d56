"""In-memory datasets with the facts a benchmark needs (task type, classes, normalization), and
the registry :data:`DATASETS` of the functions that build them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.core.registry import Registry

#: dataset name -> its builder ``(**params, seed) -> TrainTest`` (each data module registers
#: its own)
DATASETS: Registry = Registry("dataset")


@dataclass(frozen=True)
class ArrayDataset:
    """A dataset held as two tensors.

    Attributes
    ----------
    name:
        Registry name of the dataset.
    x:
        Inputs, ``[n, *input_shape]``, already normalized as ``(raw - mean) / std``.
    y:
        Integer labels ``[n]`` for classification, float targets ``[n]`` for regression.
    n_classes:
        Number of classes; ``0`` for regression.
    mean, std:
        Normalization constants (scalars or per-channel), so that metrics can map inputs
        back to the raw range: ``raw = x * std + mean``.
    """

    name: str
    x: torch.Tensor
    y: torch.Tensor
    n_classes: int
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)

    def __post_init__(self) -> None:
        if self.x.shape[0] != self.y.shape[0]:
            raise ValueError(f"{self.name}: {self.x.shape[0]} inputs but {self.y.shape[0]} targets")

    @property
    def task(self) -> str:
        return "classification" if self.n_classes > 0 else "regression"

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def subset(self, index: torch.Tensor) -> ArrayDataset:
        return ArrayDataset(self.name, self.x[index], self.y[index], self.n_classes, self.mean, self.std)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """Map normalized inputs back to the raw range (``[0, 1]`` for images)."""
        shape = (-1,) + (1,) * (x.dim() - 2) if len(self.mean) > 1 else ()
        mean = torch.tensor(self.mean, dtype=x.dtype, device=x.device).reshape(shape)
        std = torch.tensor(self.std, dtype=x.dtype, device=x.device).reshape(shape)
        return x * std + mean


@dataclass(frozen=True)
class TrainTest:
    """A train split (partitioned over nodes) and a held-out test split (utility)."""

    train: ArrayDataset
    test: ArrayDataset
