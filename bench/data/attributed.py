"""Datasets with side attributes: per-sample columns that the model does not see.

Attribute-based partitions need facts about each training sample that are not (or no longer,
after encoding and normalization) in ``x``: Xu & Neglia's Adult split needs the raw *age* and
whether the person holds a *doctorate*; a LEAF-style synthetic set needs the *client* that
generated each sample. :class:`AttributedDataset` is an :class:`ArrayDataset` that carries
such columns in ``attributes`` and keeps them aligned under :meth:`subset`. Everything that
takes an ``ArrayDataset`` accepts it unchanged; the engine hands
``getattr(train, "attributes", None)`` to the partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from bench.data.dataset import ArrayDataset


@dataclass(frozen=True)
class AttributedDataset(ArrayDataset):
    """An :class:`ArrayDataset` with side attributes.

    Attributes
    ----------
    attributes:
        ``name -> tensor [n]`` (raw values, e.g. ``age`` in years), one entry per sample.
    """

    attributes: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key, col in self.attributes.items():
            if col.shape[:1] != self.y.shape[:1]:
                raise ValueError(f"{self.name}: attribute {key!r} has {col.shape[0]} rows, not {len(self.y)}")

    def subset(self, index: torch.Tensor) -> AttributedDataset:
        return AttributedDataset(
            self.name,
            self.x[index],
            self.y[index],
            self.n_classes,
            self.mean,
            self.std,
            {k: v[index] for k, v in self.attributes.items()},
        )
