"""Honest-but-curious server of FedSGD/FedAvg: every upload plus everything it sent."""

from __future__ import annotations

import torch

from bench.simulation.messages import SERVER, MessageBatch
from bench.threats.base import THREATS, Threat


@THREATS.register("server", "honest-but-curious FL server: every client upload and every model it sent")
class ServerThreat(Threat):
    """``A^FL_server`` (Pasquini et al. §2.2): sees each individual update and the state used
    to compute it. Holds no training data."""

    name = "server"

    def __init__(self) -> None:
        super().__init__(())
        self.insiders = (SERVER,)  # it runs the server's aggregation, keys included

    def visible(self, msgs: MessageBatch) -> torch.Tensor:
        return (msgs.receivers == SERVER) | (msgs.edge_senders == SERVER)
