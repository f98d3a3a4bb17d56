"""A curious FL client: sees only the global models broadcast to it."""

from __future__ import annotations

import torch

from bench.simulation.messages import SERVER, MessageBatch
from bench.threats.base import THREATS, Threat


@THREATS.register("fl_user", "curious FL client: only the global models broadcast to it, plus its own data")
class FLUserThreat(Threat):
    """``A^FL_user`` (Pasquini et al. §2.2): observes the global model each round it is sampled.

    Parameters
    ----------
    user:
        The curious client's id.
    """

    name = "fl_user"

    def __init__(self, user: int = 0) -> None:
        super().__init__((user,))
        self.user = int(user)

    def visible(self, msgs: MessageBatch) -> torch.Tensor:
        return (msgs.edge_senders == SERVER) & (msgs.receivers == self.user)
