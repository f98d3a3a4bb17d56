"""An eavesdropper on every non-secure channel, optionally colluding with corrupt nodes."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bench.simulation.messages import MessageBatch
from bench.threats.base import THREATS, Threat


@THREATS.register("eavesdropper", "every plaintext message on the network, optionally with colluding nodes")
class EavesdropperThreat(Threat):
    """The eavesdropper of the PDMM papers (Yu et al.) and Xu & Neglia: sees every message sent
    over a non-secure channel; with a coalition it also sees everything delivered to the
    corrupt nodes (secure channels included) and holds their data and states."""

    name = "eavesdropper"

    def __init__(self, coalition: Sequence[int] = ()) -> None:
        super().__init__(coalition)

    def visible(self, msgs: MessageBatch) -> torch.Tensor:
        plain = torch.full((len(msgs),), not msgs.secure, dtype=torch.bool, device=msgs.edges.device)
        if not self.coalition:
            return plain
        return plain | self._in_coalition(msgs.receivers)
