"""Curious neighbours: a colluding coalition of nodes pooling what they receive."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bench.simulation.messages import MessageBatch
from bench.threats.base import THREATS, Threat


@THREATS.register(
    "neighbors", "colluding curious nodes: their own data and states and every message they receive"
)
class NeighborsThreat(Threat):
    """``A^DL`` (Pasquini et al. §2.2) / the colluding honest-but-curious set ``A`` of El Mrini
    et al.: every message delivered to a coalition member, plus the members' data and states."""

    name = "neighbors"

    def __init__(self, coalition: Sequence[int] = (0,)) -> None:
        super().__init__(coalition)

    def visible(self, msgs: MessageBatch) -> torch.Tensor:
        return self._in_coalition(msgs.receivers)
