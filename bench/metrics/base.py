"""The metric contract: ``(reconstructions, ground truth) -> numbers`` plus the documented map of
the headline number to a normalized leakage in ``[0, 1]`` (0 = no better than a
data-independent guess, 1 = perfect)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from bench.attacks.base import Reconstruction
from bench.core.registry import Registry

if TYPE_CHECKING:
    from bench.simulation.flat import FlatModel

METRICS: Registry = Registry("metric")


@dataclass(frozen=True)
class Truth:
    """The true minibatch node ``node`` used in round ``round``: ``x [B, *input_shape]``
    (normalized input space) and ``y [B]``; for a local-model answer (``Reconstruction.model``),
    ``x``, ``y`` are ``node``'s whole local training set; for a membership answer, ``members [C]`` over the
    candidate pool: 1 for ``node``'s training samples, 0 for non-members, −1 for the other
    nodes' samples (left out of ``node``'s evaluation; Pasquini et al. 2023, Eq. 2)."""

    node: int
    round: int
    x: torch.Tensor
    y: torch.Tensor
    members: torch.Tensor | None = None


@dataclass(frozen=True)
class DataInfo:
    """What metrics need to know about the data, from the harness (never from the attack).

    Attributes
    ----------
    mean, std:
        Normalization constants: ``raw = x * std + mean`` (per channel or scalar).
    n_classes:
        Number of classes (0 for regression).
    prior_x:
        The data-independent guess of an input: the mean training input ``[*input_shape]``
        (normalized space). Leakage is measured relative to this guess.
    is_image:
        Whether inputs are images ``[C, H, W]`` (image metrics apply).
    model, model_name, loss:
        The run's architecture as flat parameters, its registered name and the training loss's
        name: what a metric of reconstructed *models* evaluates them with (``None``/``""`` when
        not given).
    delta:
        The δ of the defense's (ε, δ) claim (0 without one): the empirical ε lower bound of a
        membership metric is computed at it, so that it compares with the claim.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]
    n_classes: int
    prior_x: torch.Tensor
    is_image: bool
    model: FlatModel | None = None
    model_name: str = ""
    loss: str = ""
    delta: float = 0.0


class Metric(ABC):
    """A registered metric. ``compute`` returns raw numbers including the key ``headline``;
    ``leakage`` maps those numbers to ``[0, 1]`` by the rule documented in the docstring."""

    @abstractmethod
    def compute(self, recs: list[Reconstruction], truths: list[Truth], info: DataInfo) -> dict[str, float]:
        """Raw metric values over all reconstructions (``truths[i]`` pairs with ``recs[i]``)."""

    @abstractmethod
    def leakage(self, values: dict[str, float]) -> float:
        """Normalized leakage in ``[0, 1]`` from :meth:`compute`'s output."""
